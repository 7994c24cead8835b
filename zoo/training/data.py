"""Training data: text to token ids, on disk or in memory, and the windows a step trains on.

- ``load_corpus``: a text tokenised in memory, with a small vocabulary for tiny models
  (what ``ablate`` trains on when given a text; a prepared folder it opens with ``open_data``).
- ``prepare``: text files and folders tokenised in parallel processes into shards of
  ``uint16`` (``uint32`` when the vocabulary needs it) plus ``manifest.json``.
- ``open_data``: a prepared folder, its shards memory-mapped with ``torch.from_file``, so
  memory does not grow with the corpus; ``resolve_data`` turns anything ``zoo.train``
  accepts into one ``TokenData``.
- ``WindowSampler``: the random training windows, in an order fixed by the seed. Every
  optimizer step draws the same global set of windows whatever the world size; each
  rank trains on its share, so results do not depend on how many processes ran.
"""

from __future__ import annotations

import array
import json
import os
import re
import secrets
import shutil
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from importlib import resources
from multiprocessing import get_all_start_methods, get_context
from pathlib import Path
from typing import Annotated, Any, Literal

import torch
import xxhash
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from torch import Tensor

from zoo._version import __version__
from zoo.checkpoint.owned import check_output_path, check_replaceable, writing_beside
from zoo.checkpoint.tokenizer import TOKENIZER_FILES, TOKENIZER_FOLDER
from zoo.errors import ConfigError, InputError, ZooError, command, os_error, printable, quoted
from zoo.files import confined, read_json
from zoo.text import keep_tokenizer_files
from zoo.text import tokenizer as text_tokenizer
from zoo.training.documents import DEFAULT_FIELD, dataset_documents, documents

BUNDLED_CORPUS = "shakespeare.txt"
BYTE_PIECES: tuple[bytes, ...] = tuple(bytes([b]) for b in range(256))  # byte token i is bytes([i])
MANIFEST = "manifest.json"
MANIFEST_FORMAT = 1
TOKENIZERS = ("gpt2", "bytes")
SHARD_TOKENS = 1 << 27  # tokens per shard file (256 MiB of uint16)
_SHARD_NAME = re.compile(r"(train|val)-[0-9]{5,}\.bin")
_DTYPES = {"uint16": (torch.uint16, "H", 2), "uint32": (torch.uint32, "I", 4)}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- in-memory corpora ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Corpus:
    """A tokenised text split into training tokens and a held-out validation tail.

    ``pieces[i]`` is the bytes of model token ``i``, so ``decode`` needs nothing else:
    bytes for the byte tokenizer, GPT-2 tokens (and bytes for the rare ones) for GPT-2.
    """

    train: Tensor  # (N_train,) int64
    val: Tensor  # (N_val,) int64
    tokenizer: str  # "bytes" or "gpt2"
    source: str
    pieces: list[bytes] = field(repr=False)
    byte_fallback: float = 0.0  # share of GPT-2 tokens spelled out as bytes

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def decode(self, ids: Iterable[int]) -> str:
        return b"".join(self.pieces[i] for i in ids).decode("utf-8", errors="replace")

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "byte_fallback": self.byte_fallback,
            "train_tokens": int(self.train.numel()),
            "val_tokens": int(self.val.numel()),
        }


def bundled_corpus() -> str:
    """The bundled public-domain corpus: seven Shakespeare plays as plain text (~930 kB)."""
    return resources.files("zoo").joinpath("data", BUNDLED_CORPUS).read_text(encoding="utf-8")


def gpt2_tokenizer() -> Any | None:
    """GPT-2's tokenizer when the ``text`` extra is installed, else None."""
    try:
        return text_tokenizer("gpt2")
    except (ImportError, ZooError):
        return None


def load_corpus(
    text: str,
    *,
    tokenizer: str = "auto",
    vocab_limit: int | None = 1024,
    val_fraction: float = 0.1,
    max_chars: int | None = None,
    source: str = "text",
) -> Corpus:
    """Tokenise ``text`` and split off the last ``val_fraction`` for validation.

    ``tokenizer``: ``"gpt2"``, ``"bytes"`` or ``"auto"`` (GPT-2 when installed, else
    bytes). With GPT-2 the model's vocabulary is the ``vocab_limit`` most frequent GPT-2
    tokens of the text, renumbered in the order of GPT-2's ids, plus the 256 bytes:
    every rarer token is spelled out in its bytes. The text is still represented
    exactly, while the embedding and output layer of a small model shrink from 50257
    rows (or the ~11k the bundled text uses) to ~1.3k, which is most of its compute.
    ``vocab_limit=None`` keeps every token the text uses and needs no bytes.
    """
    if not isinstance(text, str):
        raise InputError(f"text must be a str, got {type(text).__name__}; decode bytes first or use read_text(path)")
    if vocab_limit is not None and not _is_int(vocab_limit):
        raise ConfigError(f"vocab_limit={vocab_limit!r} must be an integer (or None)")
    if max_chars is not None and (not _is_int(max_chars) or max_chars < 0):
        raise ConfigError(f"max_chars={max_chars!r} must be an integer >= 0 (or None for the whole text)")
    if not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"val_fraction={val_fraction} must be between 0 and 1")
    if vocab_limit is not None and vocab_limit <= 0:
        raise ConfigError(f"vocab_limit={vocab_limit} must be > 0 (or None for every token the text uses)")
    if tokenizer not in ("auto", "gpt2", "bytes"):
        raise ConfigError(f"unknown tokenizer {tokenizer!r}; use 'auto', 'gpt2' or 'bytes'")
    if max_chars is not None:
        text = text[:max_chars]
    gpt2 = gpt2_tokenizer() if tokenizer != "bytes" else None
    if gpt2 is None and tokenizer == "gpt2":
        raise ConfigError(
            "the GPT-2 tokenizer is not available; install the extra with "
            "`pip install 'zoo-lm[text]'`, or use tokenizer='bytes'"
        )
    fallback = 0.0
    if gpt2 is None:
        raw = bytearray(text.encode("utf-8"))
        tokens = torch.frombuffer(raw, dtype=torch.uint8).long() if raw else torch.zeros(0, dtype=torch.long)
        pieces, name = list(BYTE_PIECES), "bytes"
    else:
        tokens, pieces, fallback = _gpt2_tokens(gpt2, text, vocab_limit)
        name = "gpt2"
    n_val = int(tokens.numel() * val_fraction)
    if n_val < 2 or tokens.numel() - n_val < 2:
        raise InputError(
            f"{source} has only {tokens.numel()} tokens: too few to split into training and "
            f"validation parts; use a longer text"
        )
    return Corpus(tokens[:-n_val], tokens[-n_val:], name, source, pieces, fallback)


def _gpt2_tokens(gpt2: Any, text: str, vocab_limit: int | None) -> tuple[Tensor, list[bytes], float]:
    """GPT-2 ids of ``text`` renumbered to the kept tokens, the rest spelled as bytes."""
    ids = torch.tensor(gpt2.encode(text), dtype=torch.long)
    used, inverse, counts = torch.unique(ids, sorted=True, return_inverse=True, return_counts=True)
    used_bytes = [gpt2.token_bytes(i) for i in used.tolist()]
    if vocab_limit is None or used.numel() <= vocab_limit:
        return inverse, used_bytes, 0.0
    # The most frequent tokens (ties: lower id), then renumbered in GPT-2's order. ``used``
    # is sorted, so a lower index is a lower id.
    n_used = counts.tolist()
    kept = sorted(sorted(range(len(n_used)), key=lambda i: (-n_used[i], i))[:vocab_limit])
    pieces = [used_bytes[i] for i in kept] + list(BYTE_PIECES)
    spelled: list[list[int]] = [[vocab_limit + b for b in piece] for piece in used_bytes]
    for new, i in enumerate(kept):
        spelled[i] = [new]
    tokens = torch.tensor([t for i in inverse.tolist() for t in spelled[i]], dtype=torch.long)
    dropped = 1.0 - float(counts[kept].sum()) / ids.numel()
    return tokens, pieces, dropped


# -- token splits and windows ------------------------------------------------------------


@dataclass(frozen=True)
class TokenSplit:
    """One split (train or val) of token ids: shards of 1-D integer tensors, memory-mapped
    or in memory. A window never crosses a shard (shards end at document boundaries)."""

    shards: tuple[Tensor, ...]
    n_bytes: int | None = None  # UTF-8 bytes the tokens spell, for bits per byte

    @property
    def tokens(self) -> int:
        return sum(int(s.numel()) for s in self.shards)

    def count(self, seq_len: int) -> int:
        """How many (seq_len + 1)-token windows start in this split."""
        return sum(max(0, int(s.numel()) - seq_len) for s in self.shards)

    def check(self, seq_len: int, part: str) -> None:
        """An error when not one window of ``seq_len + 1`` tokens fits."""
        if self.count(seq_len) == 0:
            longest = max((int(s.numel()) for s in self.shards), default=0)
            raise InputError(
                f"the {part} split has {self.tokens} tokens (longest shard {longest}), fewer than "
                f"seq_len + 1 = {seq_len + 1}; use a longer text or a shorter seq_len (--seq-len)"
            )

    def windows(self, index: Tensor, seq_len: int) -> Tensor:
        """The windows numbered ``index`` (n,) as int64 token ids (n, seq_len + 1)."""
        if len(self.shards) == 1:  # one gather, not a slice per window (the studies' small batches)
            return self.shards[0][index[:, None] + torch.arange(seq_len + 1)].to(torch.int64)
        ends = torch.tensor([max(0, int(s.numel()) - seq_len) for s in self.shards]).cumsum(0)  # (shards,)
        shard_of = torch.searchsorted(ends, index, right=True)  # (n,)
        rows = []
        for i, k in zip(index.tolist(), shard_of.tolist()):
            start = i - (int(ends[k - 1]) if k else 0)
            rows.append(self.shards[k][start : start + seq_len + 1].to(torch.int64))
        return torch.stack(rows)  # (n, S + 1)

    def evenly_spaced(self, count: int, seq_len: int) -> Tensor:
        """``count`` fixed windows spread evenly over the split (validation), (count, S + 1)."""
        self.check(seq_len, "validation")
        return self.windows(torch.linspace(0, self.count(seq_len) - 1, count).long(), seq_len)


@dataclass(frozen=True)
class TokenData:
    """Training and validation token ids with what produced them."""

    train: TokenSplit
    val: TokenSplit
    tokenizer: str  # "gpt2", "bytes", a tokenizer folder or hub id, or a description for in-memory tokens
    vocab_size: int | None  # None: unknown (in-memory tokens)
    source: str
    digest: str | None = None  # the manifest's digest; None in memory
    path: Path | None = None  # the prepared folder
    tokenizer_files: dict[str, str] | None = None  # kept in path/tokenizer/: file -> sha256

    def describe(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "tokenizer": self.tokenizer,
            "vocab_size": self.vocab_size,
            "train_tokens": self.train.tokens,
            "val_tokens": self.val.tokens,
            "manifest_digest": self.digest,
        }

    def max_token(self) -> int:
        """The largest id in memory-held tokens; the vocabulary size bounds prepared ones."""
        if self.vocab_size is not None and self.path is not None:
            return self.vocab_size - 1
        return max(int(s.max()) for s in (*self.train.shards, *self.val.shards) if s.numel())


def tokens_data(train: Tensor, val: Tensor, *, source: str = "tokens", tokenizer: str = "tokens") -> TokenData:
    """In-memory token ids (1-D integer tensors) as ``TokenData``, checked."""
    for part, tokens in (("training", train), ("validation", val)):
        if (
            not isinstance(tokens, Tensor)
            or tokens.dim() != 1
            or tokens.is_floating_point()
            or tokens.is_complex()
            or tokens.dtype == torch.bool
            or (tokens.numel() and int(tokens.min()) < 0)
        ):
            what = (
                f"dtype {tokens.dtype}, shape {tuple(tokens.shape)}"
                if isinstance(tokens, Tensor)
                else type(tokens).__name__
            )
            minimum = f" with minimum {tokens.min().item()}" if isinstance(tokens, Tensor) and tokens.numel() else ""
            raise InputError(
                f"the {part} tokens must be a 1-D tensor of non-negative integer token ids, got {what}"
                f"{minimum}; pass a Corpus's train and val tensors"
            )
    return TokenData(TokenSplit((train,)), TokenSplit((val,)), tokenizer, None, source)


class WindowSampler:
    """Random training windows of one split, in an order fixed by ``seed``.

    Step k draws the same ``batch_size`` window numbers whatever the world size; its
    state (the generator's) is the data cursor a resume restores.
    """

    def __init__(self, split: TokenSplit, seq_len: int, seed: int) -> None:
        split.check(seq_len, "training")
        self.split, self.seq_len = split, seq_len
        self.count = split.count(seq_len)
        self.generator = torch.Generator().manual_seed(seed)

    def draw(self, batch_size: int) -> Tensor:
        """The next step's window numbers, (batch_size,)."""
        return torch.randint(0, self.count, (batch_size,), generator=self.generator)

    def windows(self, index: Tensor) -> tuple[Tensor, Tensor]:
        """(inputs, targets), each (n, S), of the windows numbered ``index``."""
        w = self.split.windows(index, self.seq_len)  # (n, S + 1)
        return w[:, :-1], w[:, 1:]

    def state(self) -> Tensor:
        return self.generator.get_state()

    def set_state(self, state: Tensor) -> None:
        self.generator.set_state(state)

    def state_dict(self) -> dict[str, Tensor]:
        """The data cursor (``Stateful``, ``zoo.training.stateful``)."""
        return {"cursor": self.state()}

    def load_state_dict(self, state: Mapping[str, Tensor]) -> None:
        self.set_state(state["cursor"])


def training_batches(tokens: Tensor, settings: Any) -> Iterator[tuple[Tensor, Tensor]]:
    """Random (inputs, targets) windows, each (B, S), in an order fixed by ``settings.seed``."""
    sampler = WindowSampler(TokenSplit((tokens,)), settings.seq_len, settings.seed)
    while True:
        yield sampler.windows(sampler.draw(settings.batch_size))


def validation_batches(tokens: Tensor | TokenSplit, settings: Any) -> list[tuple[Tensor, Tensor]]:
    """Fixed, evenly spaced (inputs, targets) windows covering the validation tokens."""
    split = tokens if isinstance(tokens, TokenSplit) else TokenSplit((tokens,))
    windows = split.evenly_spaced(settings.eval_batches * settings.batch_size, settings.seq_len)
    return [(w[:, :-1], w[:, 1:]) for w in torch.split(windows, settings.batch_size)]


# -- preparing a corpus on disk ---------------------------------------------------------------


def _text_files(inputs: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The files named, and every non-hidden file under the folders named, sorted.

    A prepared folder (or what is left of one: shards without a usable manifest) is
    refused, never tokenised as text.
    """
    files: list[Path] = []
    for raw in inputs:
        path = Path(raw)
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


Tokenized = tuple[bytes, bytes, int, int]  # a document's train and val ids (raw arrays) and the bytes each spells


def _tokenize_file(path: str, tokenizer: str, val_fraction: float, typecode: str, field: str) -> list[Tokenized]:
    """The documents of one input file (one text, or one per record), tokenized."""
    return [_tokenize_text(text, path, tokenizer, val_fraction, typecode) for text in documents(Path(path), field)]


def _tokenize_text(text: str, where: str, tokenizer: str, val_fraction: float, typecode: str) -> Tokenized:
    """One document's training and validation token ids (raw ``typecode`` arrays) and the
    UTF-8 bytes each spells. The validation part is the document's tail."""
    if "\0" in text:
        raise InputError(f"{quoted(where)} holds NUL bytes: it is binary, not text; leave it out of the corpus")
    raw = text.encode("utf-8")
    gpt2 = _encoder(tokenizer)
    if gpt2 is None:  # byte ids, widened to the item size without a Python list
        n_val = int(len(raw) * val_fraction)
        width = array.array(typecode).itemsize
        return _widen(raw[: len(raw) - n_val], width), _widen(raw[len(raw) - n_val :], width), len(raw) - n_val, n_val
    ids = gpt2.encode(text)
    n_val = int(len(ids) * val_fraction)
    train_ids, val_ids = ids[: len(ids) - n_val], ids[len(ids) - n_val :]
    if hasattr(gpt2, "encoding"):  # tiktoken: the exact bytes
        val_bytes = len(gpt2.encoding.decode_bytes(val_ids))
    else:  # the UTF-8 bytes of the text the ids decode to
        val_bytes = len(gpt2.decode(val_ids).encode("utf-8"))
        val_bytes = min(val_bytes, len(raw))
    train_arr, val_arr = array.array(typecode, train_ids), array.array(typecode, val_ids)
    if gpt2.eot_token_id is not None and ids:
        (val_arr if n_val else train_arr).append(gpt2.eot_token_id)  # documents end with <|endoftext|>
    if sys.byteorder != "little":
        train_arr.byteswap()
        val_arr.byteswap()
    return train_arr.tobytes(), val_arr.tobytes(), len(raw) - val_bytes, val_bytes


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


# -- the manifest, read through a schema ------------------------------------------------------

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
    of the dataset are the documents and ``inputs`` must be empty. Each document's last
    ``val_fraction`` of tokens goes to the validation split (documents end with the
    tokenizer's end-of-text token). Files are tokenised by ``workers`` processes (default:
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
    if not isinstance(field, str) or not field:
        raise ConfigError(f"field={field!r} must name a record's text field (--field)")
    files = _text_files(list(inputs)) if dataset is None else []
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

    def tokenized(self, encoder: str, val_fraction: float, typecode: str) -> Iterator[Tokenized]:
        if self.dataset is None:
            return _tokenize_all(self.files, encoder, val_fraction, typecode, self.workers, self.field)
        texts = dataset_documents(self.dataset, self.dataset_config, self.split, self.field)
        return (_tokenize_text(t, self.dataset, encoder, val_fraction, typecode) for t in texts)

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
        tokenized = source.tokenized(encoder, val_fraction, typecode)
        splits, n_documents = _write_splits(tokenized, temporary, val_fraction, itemsize, shard_tokens)
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
    tokenized: Iterator[Tokenized], folder: Path, val_fraction: float, itemsize: int, shard_tokens: int
) -> tuple[dict[str, dict[str, Any]], int]:
    """Every document tokenised into the shards of ``folder``: the manifest's ``splits``,
    and the number of documents."""
    writers = {s: _ShardWriter(folder, s, itemsize, shard_tokens) for s in ("train", "val")}
    n_bytes = {"train": 0, "val": 0}
    count = 0
    for train_ids, val_ids, train_bytes, val_bytes in tokenized:
        count += 1
        writers["train"].add(train_ids)
        writers["val"].add(val_ids)
        n_bytes["train"] += train_bytes
        n_bytes["val"] += val_bytes
    splits: dict[str, dict[str, Any]] = {s: {"shards": w.finish(), "bytes": n_bytes[s]} for s, w in writers.items()}
    for split in splits.values():
        split["tokens"] = sum(shard["tokens"] for shard in split["shards"])
    if splits["train"]["tokens"] == 0:
        raise InputError(f"the corpus ({count} document(s)) holds no text: it is empty; pass files with text")
    if splits["val"]["tokens"] == 0:
        raise InputError(
            f"the corpus has {splits['train']['tokens']} tokens, too few for a validation split of "
            f"{val_fraction}; raise --val-fraction or add text"
        )
    return splits, count


def _tokenize_all(
    files: list[Path], tokenizer: str, val_fraction: float, typecode: str, workers: int | None, field: str
) -> Iterator[Tokenized]:
    """Each file's documents tokenized, in file order; in parallel processes when there is more than one."""
    workers = min(workers or os.cpu_count() or 1, len(files))
    args = [(str(f), tokenizer, val_fraction, typecode, field) for f in files]
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
            elif f"xxh3_128:{_file_digest(shard_path)}" != shard.digest:
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


def _file_digest(path: Path) -> str:
    hasher = xxhash.xxh3_128()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            hasher.update(chunk)
    return hasher.hexdigest()


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
    paths = [data] if isinstance(data, (str, os.PathLike)) or hasattr(data, "read_text") else list(data)
    if not all(isinstance(p, (str, os.PathLike)) or hasattr(p, "read_text") for p in paths):
        raise InputError(
            f"data must be a prepared folder, text files or folders, a Corpus or TokenData; got {type(data).__name__}"
        )
    paths = [Path(str(p)) for p in paths]
    if len(paths) == 1 and os.path.lexists(paths[0] / MANIFEST):
        return open_data(paths[0])  # a damaged manifest is an error here, never text
    files = _text_files(paths)
    key = xxhash.xxh3_128()
    for f in files:  # the content, never the mtime: `cp -p` and `rsync -t` keep an mtime with new text
        key.update(f"{_file_digest(f)}\0".encode())
    key.update(f"{len(files)}\0{tokenizer}\0{val_fraction}\0{__version__}".encode())
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
