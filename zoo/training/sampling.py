"""Token ids in splits (``TokenSplit``, ``TokenData``) and the windows a step trains on.

``WindowSampler`` draws the random training windows, in an order fixed by the seed. Every
optimizer step draws the same global set of windows whatever the world size; each rank
trains on its share, so results do not depend on how many processes ran.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from zoo.errors import InputError


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

    def held_out(self, fraction: float) -> tuple[TokenSplit, TokenSplit]:
        """The split without its last ``fraction`` of tokens, and those tokens: a tail over
        the shards from the end, so no window of one crosses into the other."""
        left = max(1, round(self.tokens * fraction))
        head, tail = list(self.shards), list[Tensor]()
        while left > 0 and head:
            last = head.pop()
            take = min(left, int(last.numel()))
            tail.insert(0, last[int(last.numel()) - take :])
            if take < int(last.numel()):
                head.append(last[: int(last.numel()) - take])
            left -= take
        return TokenSplit(tuple(head)), TokenSplit(tuple(tail))

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
