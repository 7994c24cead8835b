"""Training data from what ``zoo.train`` accepts: ``resolve_data`` turns ``TokenData``, a
``Corpus``, a prepared folder, text files or folders (prepared once into the data cache,
``cache_folder``) or None (the bundled Shakespeare) into one ``TokenData``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from importlib import resources
from pathlib import Path
from typing import Any

import xxhash

from zoo._version import __version__
from zoo.checkpoint.tokenizer import folder_files, tokenizer_stamp
from zoo.errors import InputError, printable
from zoo.training.corpus import BUNDLED_CORPUS, Corpus
from zoo.training.manifest import MANIFEST, TOKENIZERS, file_digest
from zoo.training.sampling import TokenData, tokens_data
from zoo.training.shards import input_paths, open_data, prepare, text_files


def cache_folder() -> Path:
    """Where raw text given to ``zoo.train`` is prepared: ``$ZOO_DATA_CACHE``, else
    ``$XDG_CACHE_HOME/zoo/data`` (default ``~/.cache/zoo/data``)."""
    if env := os.environ.get("ZOO_DATA_CACHE"):
        return Path(env)
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "zoo" / "data"


def _cache_root() -> Path:
    """``cache_folder()``, created, or an error naming the variable that chose it."""
    root = cache_folder()
    named = "ZOO_DATA_CACHE" if os.environ.get("ZOO_DATA_CACHE") else "XDG_CACHE_HOME (or your home folder)"
    try:
        root.mkdir(parents=True, exist_ok=True)
        if not os.access(root, os.W_OK | os.X_OK):
            raise PermissionError(13, "not writable")
    except OSError as err:
        raise InputError(
            f"cannot use the data cache {root} (chosen by {named}): {err.strerror or err}; set ZOO_DATA_CACHE to a "
            f"writable folder, or prepare the data yourself with `zoo data prepare TEXT -o DIR` and pass --data DIR"
        ) from err
    return root


def tokenizer_cache() -> Path:
    """Where a tokenizer only a checkpoint carries (its files embedded) is unpacked for
    preparing text with it: ``tokenizers/`` in the data cache, created."""
    return _cache_root() / "tokenizers"


def tokenizer_name(source: str) -> str:
    """``source`` (what a model or data was tokenized with) as a message names it: a name
    or hub id quoted, a folder unpacked from a checkpoint as such, never by its cache path."""
    if Path(source).parent == cache_folder() / "tokenizers":
        return "the tokenizer its checkpoint carries"
    return repr(printable(source))


def tokenizer_mismatch(expected: str, data: TokenData) -> str | None:
    """What ``data`` was tokenized with, as a message names it, where that is not
    ``expected`` (a name, folder or hub id); None where it is, or where this cannot tell:
    names compare by name, folders by their files' sha256."""
    if expected == data.tokenizer:
        return None
    if data.tokenizer in TOKENIZERS:  # a built-in tokenizer, not the one expected
        return repr(data.tokenizer)
    if expected in TOKENIZERS or data.tokenizer_files is None or not Path(expected).is_dir():
        return None  # files under a built-in's name (a hub GPT-2), tokens made in memory, a hub id: no telling
    ours = {name: hashlib.sha256(data).hexdigest() for name, data in folder_files(Path(expected)).items()}
    return None if ours == data.tokenizer_files else f"the tokenizer {tokenizer_name(data.tokenizer)}"


def resolve_data(data: Any, *, tokenizer: str = "gpt2", val_fraction: float = 0.005) -> TokenData:
    """``TokenData`` from what ``zoo.train`` accepts: ``TokenData``, a ``Corpus``, a
    prepared folder, text files or folders (prepared once into ``cache_folder()``), or
    None for the bundled Shakespeare."""
    if isinstance(data, TokenData):
        return data
    if isinstance(data, Corpus):
        return tokens_data(data.train, data.val, source=data.source, tokenizer=data.tokenizer)
    if data is None:
        data = resources.files("zoo").joinpath("data", BUNDLED_CORPUS)
    single = isinstance(data, (str, os.PathLike)) or hasattr(data, "read_text")
    paths = [data] if single else list(data) if isinstance(data, Iterable) else [data]
    if not all(isinstance(p, (str, os.PathLike)) or hasattr(p, "read_text") for p in paths):
        raise InputError(
            f"data must be a prepared folder, text files or folders, a Corpus or TokenData; got {type(data).__name__}"
        )
    paths = input_paths([str(p) for p in paths])
    if len(paths) == 1 and os.path.lexists(paths[0] / MANIFEST):
        return open_data(paths[0])  # a damaged manifest is an error here, never text
    files = text_files(paths)
    key = xxhash.xxh3_128()
    for f in files:  # the content, never the mtime: `cp -p` and `rsync -t` keep an mtime with new text
        key.update(f"{file_digest(f)}\0".encode())
    # "corpus-tail": the validation split is the corpus's tail (folders prepared before split each document)
    key.update(f"{tokenizer_stamp(tokenizer)}\0".encode())  # a tokenizer folder by its files' content, too
    key.update(f"{len(files)}\0{tokenizer}\0{val_fraction}\0{__version__}\0corpus-tail".encode())
    folder = _cache_root() / key.hexdigest()
    if (folder / MANIFEST).is_file():
        return open_data(folder)
    try:
        return prepare(
            files, folder, tokenizer=tokenizer, val_fraction=val_fraction, workers=1 if len(files) == 1 else None
        )
    except (InputError, OSError):
        if (folder / MANIFEST).is_file():  # another rank prepared it first
            return open_data(folder)
        raise
