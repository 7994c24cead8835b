"""Prepared folders: text files and folders tokenised into shards, and opened again.

- ``prepare``: text files and folders tokenised in parallel processes into shards of
  ``uint16`` (``uint32`` when the vocabulary needs it) plus ``manifest.json``.
- ``open_data``: a prepared folder, its shards memory-mapped with ``torch.from_file``, so
  memory does not grow with the corpus.
"""

from __future__ import annotations

import array
import bisect
import json
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Any

import torch
import xxhash

from zoo._version import __version__
from zoo.checkpoint.owned import check_output_path, check_replaceable, writing_beside
from zoo.checkpoint.tokenizer import TOKENIZER_FOLDER
from zoo.errors import ConfigError, InputError, ZooError, checked_types, os_error, quoted
from zoo.files import confined
from zoo.text.loading import keep_tokenizer_files
from zoo.text.loading import tokenizer as text_tokenizer
from zoo.training.documents import DEFAULT_FIELD, dataset_documents, documents, utf8
from zoo.training.manifest import (
    MANIFEST,
    MANIFEST_FORMAT,
    TOKENIZERS,
    SplitEntry,
    file_digest,
    manifest_digest,
    quick_digest,
    read_manifest,
)
from zoo.training.sampling import TokenData, TokenSplit

SHARD_TOKENS = 1 << 27  # tokens per shard file (256 MiB of uint16)
_SHARD_NAME = re.compile(r"(train|val)-[0-9]{5,}\.bin")
_DTYPES = {"uint16": (torch.uint16, "H", 2), "uint32": (torch.uint32, "I", 4)}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def text_files(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The files named, and every non-hidden file under the folders named, sorted.

    A prepared folder (or what is left of one: shards without a usable manifest) is
    refused, never tokenised as text.
    """
    files: list[Path] = []
    for path in input_paths(inputs):
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            found = sorted(
                p
                for p in path.rglob("*")
                if p.is_file() and not any(part.startswith(".") for part in p.relative_to(path).parts)
            )
            _refuse_prepared(path, found)
            files.extend(found)
        elif os.path.lexists(path):  # a FIFO, a device, a socket or a dangling link: nothing to read as text
            raise InputError(
                f"input {quoted(str(path))} is not a regular file or folder (a FIFO, device, socket or broken link); "
                f"pass text files or folders of them"
            )
        else:
            raise InputError(f"input {quoted(str(path))} does not exist; pass text files or folders of them")
    if not files:
        raise InputError(
            f"no files in {', '.join(quoted(str(i)) for i in inputs)}: the corpus is empty; pass text files"
        )
    return files


def input_paths(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """``inputs`` as paths, an empty one refused: ``Path("")`` is the current folder, which
    would be read whole as the corpus."""
    if any(not os.fspath(raw) for raw in inputs):
        raise InputError("an input path is empty (''), which would read the current folder whole; name the text files")
    return [Path(raw) for raw in inputs]


def _refuse_prepared(folder: Path, files: list[Path]) -> None:
    """An error when ``folder`` (or a folder in it) holds prepared data rather than text."""
    for place in sorted({folder, *(f.parent for f in files)}):
        shards = [f for f in files if f.parent == place and _SHARD_NAME.fullmatch(f.name)]
        if os.path.lexists(place / MANIFEST) or shards:
            what = f"has {MANIFEST}" if os.path.lexists(place / MANIFEST) else f"holds shard files ({shards[0].name})"
            raise InputError(
                f"{place} {what}: it is (or was) a prepared folder, not text. Pass it to `zoo train --data` "
                f"as it is, or, if its manifest is missing or damaged, prepare the text again into a new folder"
            )


def _encoder(tokenizer: str) -> Any:
    """None for bytes, else the tokenizer: GPT-2's, or a kept tokenizer folder's."""
    if tokenizer == "bytes":
        return None
    if tokenizer != "gpt2":
        return text_tokenizer(Path(tokenizer))  # a folder (kept in the data folder), see prepare
    try:
        return text_tokenizer("gpt2")
    except (ImportError, ZooError) as err:
        raise ConfigError(
            f"the GPT-2 tokenizer is not available ({err}); install `pip install 'zoo-lm[text]'` or "
            f"use --tokenizer bytes"
        ) from err


Tokenized = tuple[bytes, int]  # a document's token ids (a raw little-endian array) and the UTF-8 bytes it spells


def _tokenize_file(path: str, tokenizer: str, typecode: str, field: str) -> list[Tokenized]:
    """The documents of one input file (one text, or one per record), tokenized."""
    return [_tokenize_text(text, path, tokenizer, typecode) for text in documents(Path(path), field)]


def _tokenize_text(text: str, where: str, tokenizer: str, typecode: str) -> Tokenized:
    """One document's token ids (a raw ``typecode`` array, ending with the tokenizer's
    end-of-text token where it has one) and the UTF-8 bytes it spells."""
    if "\0" in text:
        raise InputError(f"{quoted(where)} holds NUL bytes: it is binary, not text; leave it out of the corpus")
    raw = utf8(text, quoted(where))
    gpt2 = _encoder(tokenizer)
    if gpt2 is None:  # byte ids, widened to the item size without a Python list
        return _widen(raw, array.array(typecode).itemsize), len(raw)
    ids = gpt2.encode(text)
    arr = array.array(typecode, ids)
    if gpt2.eot_token_id is not None and ids:
        arr.append(gpt2.eot_token_id)  # documents end with <|endoftext|>
    if sys.byteorder != "little":
        arr.byteswap()
    return arr.tobytes(), len(raw)


def _spelled(data: bytes, tokenizer: str, typecode: str, limit: int) -> int:
    """The UTF-8 bytes that the ids ``data`` (the end of one document, less the
    end-of-text token it ends with) spell, at most ``limit`` (the document's)."""
    gpt2 = _encoder(tokenizer)
    if gpt2 is None:
        return len(data) // array.array(typecode).itemsize
    arr = array.array(typecode, data)
    if sys.byteorder != "little":
        arr.byteswap()
    ids = arr.tolist()
    if ids and ids[-1] == gpt2.eot_token_id:  # the end-of-text the zoo ends each document with
        ids.pop()
    if hasattr(gpt2, "encoding"):  # tiktoken: the exact bytes
        return len(gpt2.encoding.decode_bytes(ids))
    return min(len(gpt2.decode(ids).encode("utf-8")), limit)  # the bytes of the text the ids decode to


def _widen(raw: bytes, width: int) -> bytes:
    """Bytes as little-endian unsigned integers of ``width`` bytes each."""
    out = bytearray(len(raw) * width)
    out[0::width] = raw
    return bytes(out)


class _ShardWriter:
    """Appends token bytes to ``<split>-NNNNN.bin`` files (little-endian) of about
    ``shard_tokens`` tokens, cutting only between documents."""

    def __init__(self, folder: Path, split: str, itemsize: int, shard_tokens: int) -> None:
        self.folder, self.split, self.itemsize, self.limit = folder, split, itemsize, shard_tokens
        self.shards: list[dict[str, Any]] = []
        self.file: Any = None
        self.hasher = xxhash.xxh3_128()
        self.tokens = 0

    def add(self, data: bytes) -> None:
        if not data:
            return
        if self.file is None or (self.tokens and self.tokens + len(data) // self.itemsize > self.limit):
            self._close()
            name = f"{self.split}-{len(self.shards):05d}.bin"
            self.file = open(self.folder / name, "wb")  # noqa: SIM115  closed in _close
            self.shards.append({"file": name})
        self.file.write(data)
        self.hasher.update(data)
        self.tokens += len(data) // self.itemsize

    def _close(self) -> None:
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()
            path = self.folder / self.shards[-1]["file"]
            sample = quick_digest(path, self.tokens * self.itemsize)
            self.shards[-1].update(tokens=self.tokens, digest=f"xxh3_128:{self.hasher.hexdigest()}", sample=sample)
            self.file, self.hasher, self.tokens = None, xxhash.xxh3_128(), 0

    def finish(self) -> list[dict[str, Any]]:
        self._close()
        return self.shards

    def read(self, start: int, tokens: int) -> bytes:
        """The raw ids at positions ``start`` to ``start + tokens`` of this (finished) split."""
        out, before = bytearray(), 0
        for shard in self.shards:
            lo, hi = max(start - before, 0), min(start + tokens - before, shard["tokens"])
            if lo < hi:
                with open(self.folder / shard["file"], "rb") as handle:
                    handle.seek(lo * self.itemsize)
                    out += handle.read((hi - lo) * self.itemsize)
            before += shard["tokens"]
        return bytes(out)

    def move_tail(self, tokens: int, into: _ShardWriter) -> None:
        """Move this split's last ``tokens`` tokens to ``into`` (which is finished): the
        shard they begin in is cut (its tail copied, its digests taken again), the shards
        after it renamed."""
        shards = self.finish()
        keep = sum(shard["tokens"] for shard in shards) - tokens
        index, before = 0, 0
        while before + shards[index]["tokens"] <= keep:
            before, index = before + shards[index]["tokens"], index + 1
        cut = keep - before
        if cut:
            path = self.folder / shards[index]["file"]
            with open(path, "r+b") as handle:
                handle.seek(cut * self.itemsize)
                while chunk := handle.read(self.itemsize << 24):
                    into.add(chunk)
                handle.truncate(cut * self.itemsize)
                handle.flush()
                os.fsync(handle.fileno())
            shards[index].update(tokens=cut, digest=f"xxh3_128:{_file_hash(path)}")
            shards[index]["sample"] = quick_digest(path, cut * self.itemsize)
            index += 1
        into.finish()
        for shard in shards[index:]:
            name = f"{into.split}-{len(into.shards):05d}.bin"
            os.rename(self.folder / shard["file"], self.folder / name)
            into.shards.append({**shard, "file": name})
        self.shards = shards[:index]


def _file_hash(path: Path) -> str:
    hasher = xxhash.xxh3_128()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 24):
            hasher.update(chunk)
    return str(hasher.hexdigest())


@checked_types()
def prepare(
    inputs: Sequence[str | os.PathLike[str]] | str | os.PathLike[str],
    out: str | os.PathLike[str],
    *,
    tokenizer: str = "gpt2",
    val_fraction: float = 0.005,
    workers: int | None = None,
    shard_tokens: int = SHARD_TOKENS,
    field: str = DEFAULT_FIELD,
    dataset: str | None = None,
    dataset_config: str | None = None,
    split: str = "train",
) -> TokenData:
    """Tokenise text files and folders into ``out``: shards of token ids and ``manifest.json``.

    Each text file is one document, and so is each record of a JSON Lines (``.jsonl``) or
    Parquet file (its ``field``); with ``dataset`` (a Hugging Face dataset id or folder,
    its ``dataset_config`` and ``split``, read through ``datasets``, streamed) the records
    of the dataset are the documents and ``inputs`` must be empty. The last
    ``val_fraction`` of the corpus's tokens (its documents one after another, each ending
    with the tokenizer's end-of-text token) is the validation split: whole documents at
    the end, and the tail of the one it begins in, never the end of every document. Files are tokenised by ``workers`` processes (default:
    one per CPU, at most one per file). ``out`` must not exist or be empty; it appears
    complete or not at all.

    ``tokenizer`` is a name (``gpt2``, ``bytes``), a tokenizer folder or a hub id; the
    files of a folder or id are kept in ``out/tokenizer/`` (their sha256 in the
    manifest), so the data, and every run trained on it, carries its own tokenizer.
    """
    if isinstance(inputs, (str, os.PathLike)):
        inputs = [inputs]
    if not isinstance(tokenizer, (str, os.PathLike)) or not str(tokenizer):
        raise ConfigError(
            f"tokenizer={tokenizer!r}: give {' or '.join(TOKENIZERS)}, a tokenizer folder or a hub id (--tokenizer)"
        )
    tokenizer = str(tokenizer)
    kept: Any = None
    if tokenizer not in TOKENIZERS:
        kept = text_tokenizer(tokenizer)  # a folder or a hub id: resolved (and checked) once, here
    if not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"val_fraction={val_fraction} must be between 0 and 1 (--val-fraction)")
    if workers is not None and (not _is_int(workers) or workers < 1):
        raise ConfigError(f"workers={workers!r} must be a positive integer (--workers)")
    target = Path(out)
    check_output_path(target, InputError)
    check_replaceable(target, InputError, "the output folder (-o)")  # renamed into place: not the current folder
    _check_empty(target)
    if dataset is not None and list(inputs):
        raise ConfigError("give input files or --dataset, not both")
    if dataset_config is not None and dataset is None:
        raise ConfigError(
            f"dataset_config={dataset_config!r} (--dataset-config) names a configuration of a --dataset, but no "
            f"--dataset is given; pass --dataset DIR|ID too, or leave --dataset-config out"
        )
    if not isinstance(field, str) or not field:
        raise ConfigError(f"field={field!r} must name a record's text field (--field)")
    files = text_files(list(inputs)) if dataset is None else []
    vocab = 256 if tokenizer == "bytes" else (kept or _encoder(tokenizer)).vocab_size
    dtype = "uint16" if vocab <= 1 << 16 else "uint32"
    typecode, itemsize = _DTYPES[dtype][1], _DTYPES[dtype][2]
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise os_error(err, "write the prepared data to", target, InputError) from err
    with writing_beside(target, InputError):  # a second `zoo data prepare -o` of it: FolderLockedError at once
        _check_empty(target)  # again, now that it is ours: another process may have finished it meanwhile
        try:
            temporary = target.parent / f".{target.name}.tmp-{secrets.token_hex(4)}"
            temporary.mkdir()
        except OSError as err:
            raise os_error(err, "write the prepared data to", target, InputError) from err
        source = _Source(files, field, dataset, dataset_config, split, workers)
        _write_prepared(
            temporary, target, source, kept, tokenizer, (vocab, dtype, typecode, itemsize), val_fraction, shard_tokens
        )
    return open_data(target)


@dataclass(frozen=True)
class _Source:
    """Where ``prepare`` reads its documents: files (tokenised by ``workers`` processes) or a dataset."""

    files: list[Path]
    field: str
    dataset: str | None
    dataset_config: str | None
    split: str
    workers: int | None

    def tokenized(self, encoder: str, typecode: str) -> Iterator[Tokenized]:
        if self.dataset is None:
            return _tokenize_all(self.files, encoder, typecode, self.workers, self.field)
        texts = dataset_documents(self.dataset, self.dataset_config, self.split, self.field)
        return (_tokenize_text(t, self.dataset, encoder, typecode) for t in texts)

    def describe(self) -> list[str]:
        if self.dataset is None:
            return [str(f) for f in self.files[:100]]
        config = f" ({self.dataset_config})" if self.dataset_config else ""
        return [f"dataset {self.dataset}{config}, split {self.split}"]


def _check_empty(target: Path) -> None:
    if target.exists() and (not target.is_dir() or any(target.iterdir())):
        raise InputError(f"output {target} exists and is not an empty folder; pass a new folder (-o)")


def _write_prepared(
    temporary: Path,
    target: Path,
    source: _Source,
    kept: Any,
    tokenizer: str,
    kind: tuple[int, str, str, int],
    val_fraction: float,
    shard_tokens: int,
) -> None:
    """The prepared data written into ``temporary``, then renamed to ``target`` whole."""
    vocab, dtype, typecode, itemsize = kind
    try:
        encoder, kept_files = tokenizer, None
        if kept is not None:  # the workers read the copy kept with the data
            kept_files = keep_tokenizer_files(Path(kept.name), temporary / TOKENIZER_FOLDER)
            encoder = str(temporary / TOKENIZER_FOLDER)
        tokenized = source.tokenized(encoder, typecode)
        splits, n_documents = _write_splits(
            tokenized, temporary, val_fraction, (encoder, typecode, itemsize), shard_tokens
        )
        manifest: dict[str, Any] = {
            "format": MANIFEST_FORMAT,
            "zoo_version": __version__,
            "tokenizer": tokenizer,
            "vocab_size": vocab,
            "dtype": dtype,
            "val_fraction": val_fraction,
            "documents": n_documents,
            "sources": source.describe(),
            "splits": splits,
        }
        if kept_files is not None:
            manifest["tokenizer_files"] = kept_files
        manifest["digest"] = manifest_digest(manifest)
        (temporary / MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
        if target.exists():
            target.rmdir()  # empty, checked above
        os.rename(temporary, target)
    except OSError as err:
        raise os_error(err, "write the prepared data to", target, InputError) from err
    finally:
        if temporary.exists():
            shutil.rmtree(temporary, ignore_errors=True)


def _write_splits(
    tokenized: Iterator[Tokenized], folder: Path, val_fraction: float, kind: tuple[str, str, int], shard_tokens: int
) -> tuple[dict[str, dict[str, Any]], int]:
    """Every document tokenised into the shards of ``folder``, and the last
    ``val_fraction`` of the corpus's tokens (the tail of the documents one after another,
    as one text's would be) moved to the validation split: the manifest's ``splits``,
    and the number of documents."""
    encoder, typecode, itemsize = kind
    writers = {s: _ShardWriter(folder, s, itemsize, shard_tokens) for s in ("train", "val")}
    ends, spelled = array.array("q"), array.array("q")  # each document's end (in tokens) and its bytes
    for ids, n_bytes in tokenized:
        writers["train"].add(ids)
        ends.append((ends[-1] if ends else 0) + len(ids) // itemsize)
        spelled.append(n_bytes)
    total = ends[-1] if ends else 0
    if total == 0:
        raise InputError(f"the corpus ({len(ends)} document(s)) holds no text: it is empty; pass files with text")
    n_val = int(total * val_fraction)
    if n_val == 0:
        raise InputError(
            f"the corpus has {total} tokens, too few for a validation split of {val_fraction} of them; raise "
            f"--val-fraction or add text"
        )
    keep, train = total - n_val, writers["train"]
    cut = bisect.bisect_right(ends, keep)  # the document the validation split begins in
    train.finish()
    if keep > (ends[cut - 1] if cut else 0):  # inside it: the bytes its validation part spells
        val_bytes = _spelled(train.read(keep, ends[cut] - keep), encoder, typecode, spelled[cut])
    else:
        val_bytes = spelled[cut]
    val_bytes += sum(spelled[cut + 1 :])
    train.move_tail(n_val, writers["val"])
    splits: dict[str, dict[str, Any]] = {
        s: {"shards": w.shards, "bytes": b} for (s, w), b in zip(writers.items(), (sum(spelled) - val_bytes, val_bytes))
    }
    for split in splits.values():
        split["tokens"] = sum(shard["tokens"] for shard in split["shards"])
    return splits, len(ends)


def _tokenize_all(
    files: list[Path], tokenizer: str, typecode: str, workers: int | None, field: str
) -> Iterator[Tokenized]:
    """Each file's documents tokenized, in file order; in parallel processes when there is more than one."""
    workers = min(workers or os.cpu_count() or 1, len(files))
    args = [(str(f), tokenizer, typecode, field) for f in files]
    if workers == 1:
        for a in args:
            yield from _tokenize_file(*a)
        return
    # fork: the workers only tokenise, and skip re-importing torch (seconds each); spawn elsewhere
    context = get_context("fork" if "fork" in get_all_start_methods() else "spawn")
    try:
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            for tokenized in pool.map(_tokenize_file, *zip(*args)):
                yield from tokenized
    except BrokenProcessPool as err:
        raise InputError(
            f"a tokenising worker process died ({err}; out of memory, or killed?); retry with fewer workers "
            f"(--workers 1)"
        ) from err


def open_data(path: str | os.PathLike[str], *, verify: bool = False) -> TokenData:
    """A prepared folder: its manifest validated, shards memory-mapped (nothing read until
    used), each shard's size and quick digest (``quick_digest``) checked; ``verify``
    hashes every byte of every shard."""
    folder = Path(path)
    manifest = read_manifest(folder)
    torch_dtype, _, itemsize = _DTYPES[manifest.dtype]
    splits = {}
    for name in ("train", "val"):
        split: SplitEntry = getattr(manifest.splits, name)
        shards = []
        for shard in split.shards:
            shard_path = _shard_path(folder, shard.file)
            try:
                info = shard_path.stat()
            except OSError:
                info = None
            size = info.st_size if info is not None and stat.S_ISREG(info.st_mode) else -1
            if size != shard.tokens * itemsize:
                raise InputError(
                    f"shard {shard_path} is missing, truncated, not a file, or of the wrong size ({size} bytes, expected "
                    f"{shard.tokens * itemsize}); prepare the data again with `zoo data prepare`"
                )
            if shard.sample is not None and not verify:
                if quick_digest(shard_path, size) != shard.sample:
                    raise InputError(
                        f"shard {shard_path} is not the one this folder was prepared with (its digest differs); "
                        f"prepare the data again with `zoo data prepare`"
                    )
            elif f"xxh3_128:{file_digest(shard_path)}" != shard.digest:
                raise InputError(f"shard {shard_path} is damaged (digest mismatch); prepare the data again")
            shards.append(torch.from_file(str(shard_path), shared=False, size=shard.tokens, dtype=torch_dtype))
        splits[name] = TokenSplit(tuple(shards), split.bytes)
    return TokenData(
        splits["train"],
        splits["val"],
        manifest.tokenizer,
        manifest.vocab_size,
        str(folder),
        manifest.digest,
        folder,
        dict(manifest.tokenizer_files) if manifest.tokenizer_files else None,
    )


def _shard_path(folder: Path, name: str) -> Path:
    """A shard's file, which must be a plain name inside the prepared folder."""
    path = confined(folder, name, InputError, f"{folder / MANIFEST}")
    if path.parent != folder:
        raise InputError(f"{folder / MANIFEST}: the shard name {quoted(name, 80)} is not a plain file name")
    return path
