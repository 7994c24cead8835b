"""The manifest of a prepared folder (``manifest.json``): its schema, read bounded and
validated, and the digests that tie it to its shards (``manifest_digest``, ``quick_digest``,
``file_digest``)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Annotated, Any, Literal

import xxhash
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from zoo.checkpoint.tokenizer import TOKENIZER_FILES
from zoo.errors import InputError, command, printable, quoted
from zoo.files import digest, read_json

MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
TOKENIZERS = ("gpt2", "bytes")
_DIGEST = r"xxh3_128:[0-9a-f]{32}"
MANIFEST_LIMIT = 16 << 20  # bytes; a manifest lists shards and at most 100 sources
SAMPLE_BLOCK, SAMPLE_BLOCKS = 1 << 16, 16  # the quick digest reads 16 blocks of 64 KiB and the end


class _Strict(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore", frozen=True)


class ShardEntry(_Strict):
    """One shard of a split: a file in the prepared folder, its token count and digests."""

    file: str = Field(min_length=1, max_length=255)
    tokens: int = Field(ge=1, le=1 << 40)
    digest: str = Field(pattern=_DIGEST)
    sample: str | None = Field(default=None, pattern=_DIGEST)  # the quick digest (absent in older folders)


class SplitEntry(_Strict):
    shards: list[ShardEntry] = Field(min_length=1, max_length=1 << 16)
    bytes: int = Field(ge=1, le=1 << 50)  # UTF-8 bytes the tokens spell, for bits per byte
    tokens: int = Field(ge=1, le=1 << 50)

    @model_validator(mode="after")
    def _counts_agree(self) -> SplitEntry:
        if sum(s.tokens for s in self.shards) != self.tokens:
            raise ValueError(
                f"the shards hold {sum(s.tokens for s in self.shards)} tokens, the split says {self.tokens}"
            )
        return self


class Splits(_Strict):
    train: SplitEntry
    val: SplitEntry


class Manifest(_Strict):
    """``manifest.json`` of a prepared folder; every field typed and bounded."""

    format: Literal[1]
    zoo_version: str = Field(max_length=100)
    tokenizer: str = Field(min_length=1, max_length=1000)  # gpt2, bytes, or the folder or hub id it came from
    tokenizer_files: dict[str, Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] | None = None  # in tokenizer/
    vocab_size: int = Field(ge=2, le=1 << 32)
    dtype: Literal["uint16", "uint32"]
    val_fraction: float = Field(gt=0, lt=1)
    documents: int = Field(ge=1)
    sources: list[str] = Field(max_length=100)
    splits: Splits
    digest: str = Field(pattern=_DIGEST)

    @model_validator(mode="after")
    def _dtype_holds_vocabulary(self) -> Manifest:
        if self.dtype == "uint16" and self.vocab_size > 1 << 16:
            raise ValueError(f"vocab_size {self.vocab_size} does not fit the dtype uint16")
        if self.tokenizer == "bytes" and self.vocab_size != 256:
            raise ValueError(f"the bytes tokenizer has 256 tokens, the manifest says {self.vocab_size}")
        if (self.tokenizer not in TOKENIZERS) != bool(self.tokenizer_files):
            raise ValueError(
                "a tokenizer other than gpt2 and bytes comes with its files (tokenizer_files), and only it"
            )
        if self.tokenizer_files and set(self.tokenizer_files) - set(TOKENIZER_FILES):
            raise ValueError(f"tokenizer_files names files other than {', '.join(TOKENIZER_FILES)}")
        return self


def read_manifest(folder: Path) -> Manifest:
    """The manifest of the prepared ``folder``, read bounded, digest-checked and validated."""
    file = folder / MANIFEST
    again = f"prepare the data again with {command('zoo', 'data', 'prepare', 'TEXT', '-o', folder)}"
    if not os.path.lexists(file):
        raise InputError(
            f"{folder} has no {MANIFEST}; create it with {command('zoo', 'data', 'prepare', 'TEXT', '-o', folder)} "
            f"(it is not a prepared folder)"
        )
    data = read_json(file, InputError, "data manifest", limit=MANIFEST_LIMIT)
    if not isinstance(data, dict) or data.get("digest") != manifest_digest(data):
        raise InputError(f"{file} is damaged (its digest does not match its contents); {again}")
    if data.get("format") != MANIFEST_FORMAT:
        raise InputError(
            f"{file} has format {quoted(data.get('format'), 40)}, this zoo reads {MANIFEST_FORMAT}; {again}"
        )
    try:
        return Manifest.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"])) or "the manifest"
        raise InputError(
            f"{file} is malformed: {where}: {printable(first['msg'], 200)} ({err.error_count()} problem(s)); {again}"
        ) from err


def quick_digest(path: Path, size: int) -> str:
    """A digest of a shard's size and 16 evenly spaced 64 KiB blocks plus its last one:
    reading about 1 MiB catches a shard from another dataset or a rewritten one at once;
    ``verify=True`` hashes every byte."""
    hasher = xxhash.xxh3_128(size.to_bytes(8, "little"))
    with open(path, "rb") as handle:
        if size <= SAMPLE_BLOCK * (SAMPLE_BLOCKS + 1):
            hasher.update(handle.read(size))
        else:
            last = size - SAMPLE_BLOCK
            for i in range(SAMPLE_BLOCKS):
                handle.seek(last * i // SAMPLE_BLOCKS)
                hasher.update(handle.read(SAMPLE_BLOCK))
            handle.seek(last)
            hasher.update(handle.read(SAMPLE_BLOCK))
    return f"xxh3_128:{hasher.hexdigest()}"


def manifest_digest(manifest: dict[str, Any]) -> str:
    body = json.dumps({k: v for k, v in manifest.items() if k != "digest"}, sort_keys=True)
    return f"xxh3_128:{xxhash.xxh3_128_hexdigest(body.encode())}"


def file_digest(path: Path) -> str:
    """The digest of a shard's or a text file's content (``zoo.files.digest``)."""
    return digest(path, InputError, "data file")
