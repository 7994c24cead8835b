"""In-memory corpora: a text tokenised in memory, with a small vocabulary for tiny models.

``load_corpus`` is what ``ablate`` trains on when given a text (a prepared folder it opens
with ``zoo.training.shards.open_data``); ``bundled_corpus`` is the bundled Shakespeare.
"""

from __future__ import annotations

import hashlib
import sys
import sysconfig
from collections.abc import Iterable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from zoo.errors import ConfigError, InputError, ZooError, checked_types
from zoo.text.loading import tokenizer as text_tokenizer
from zoo.training.documents import utf8

BUNDLED_CORPUS = "shakespeare.txt"
#: ``--data`` names a second corpus that every machine with Python has, with no download:
#: the standard library's own source (``stdlib_corpus``), when no file of that name is there.
STDLIB_CORPUS = "python-stdlib"
STDLIB_BYTES = 1 << 20  # about the bundled Shakespeare's size
BYTE_PIECES: tuple[bytes, ...] = tuple(bytes([b]) for b in range(256))  # byte token i is bytes([i])


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


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


@checked_types()
def stdlib_corpus(limit: int = STDLIB_BYTES) -> tuple[str, str]:
    """``(text, source)``: the Python standard library's ``.py`` files (not its tests,
    IDLE, Tk or site-packages), in the order of their paths, up to ``limit`` bytes of
    UTF-8; ``source`` names the Python version and the text's SHA-256, since another
    Python's library is another text."""
    if limit < 1:
        raise ConfigError(f"limit={limit} must be at least 1 byte of the standard library's source")
    root = Path(sysconfig.get_paths()["stdlib"])
    skipped = {"test", "tests", "idlelib", "tkinter", "turtledemo", "site-packages", "lib2to3"}
    parts, size = [], 0
    for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
        if skipped & set(path.relative_to(root).parts):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            continue
        parts.append(text)
        size += len(text.encode())
        if size >= limit:
            break
    joined = "\n".join(parts).encode()[:limit].decode("utf-8", errors="ignore")
    if not joined:
        raise ConfigError(f"--data {STDLIB_CORPUS}: no standard library source under {root}; give a text file")
    digest = hashlib.sha256(joined.encode()).hexdigest()[:12]
    version = ".".join(map(str, sys.version_info[:3]))
    return joined, f"the Python {version} standard library's source ({len(joined.encode()):,} bytes, sha256 {digest})"


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
    if not isinstance(source, str):
        raise InputError(f"source must be a str (what the text is, for messages), got {type(source).__name__}")
    if vocab_limit is not None and not _is_int(vocab_limit):
        raise ConfigError(f"vocab_limit={vocab_limit!r} must be an integer (or None)")
    if max_chars is not None and (not _is_int(max_chars) or max_chars < 0):
        raise ConfigError(f"max_chars={max_chars!r} must be an integer >= 0 (or None for the whole text)")
    if isinstance(val_fraction, bool) or not isinstance(val_fraction, (int, float)) or not 0.0 < val_fraction < 1.0:
        raise ConfigError(f"val_fraction={val_fraction!r} must be a number between 0 and 1")
    if vocab_limit is not None and vocab_limit <= 0:
        raise ConfigError(f"vocab_limit={vocab_limit} must be > 0 (or None for every token the text uses)")
    if tokenizer not in ("auto", "gpt2", "bytes"):
        raise ConfigError(f"unknown tokenizer {tokenizer!r}; use 'auto', 'gpt2' or 'bytes'")
    if max_chars is not None:
        text = text[:max_chars]
    raw = bytearray(utf8(text, source))  # before any tokenizer: a lone surrogate is refused, never replaced
    gpt2 = gpt2_tokenizer() if tokenizer != "bytes" else None
    if gpt2 is None and tokenizer == "gpt2":
        raise ConfigError(
            "the GPT-2 tokenizer is not available; install the extra with "
            "`pip install 'zoo-lm[text]'`, or use tokenizer='bytes'"
        )
    fallback = 0.0
    if gpt2 is None:
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
