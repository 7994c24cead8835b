"""The reference rows of a study: what counting alone scores on the models' own eval windows.

A trained model is evidence about a design only once it beats these. Each n-gram model
is fit on the training split and scored on exactly the validation windows every run is
evaluated on, with the context a model has there (a window's earlier tokens only):

- unigram: add-one (Laplace) frequencies, so an unseen token costs a finite loss;
- bigram: ``λ₂ c(u, w) / c(u) + (1 - λ₂) p₁(w)`` (Jelinek–Mercer interpolation);
- trigram: ``λ₃ c(t, u, w) / c(t, u) + (1 - λ₃) p₂(w | u)``; a window's first target
  has one token of context, so it scores the bigram there;
- fivegram: interpolated Kneser–Ney (Chen & Goodman 1999, one absolute discount ``D``
  for every order): the top order discounts raw counts, each lower order continuation
  counts (how many distinct tokens precede an n-gram), down to the uniform distribution.
  A target with fewer than four tokens of context scores the Kneser–Ney model of the
  order its context allows.

The λs and ``D`` are chosen on a grid by the loss on the last tenth of the training split with the
counts of the first nine tenths (never on the eval windows); the counts are then redone on
all the training tokens counted. Losses are nats/token, and bits/byte where the split
knows its bytes.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from zoo.training import TokenSplit

#: The most training tokens counted (the first ones, over the shards in order): the
#: reference rows of a corpus of billions cost seconds, not an epoch.
MAX_COUNTED = 50_000_000
#: The interpolation weights tried for λ₂ and λ₃.
GRID = (0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.98, 0.99, 0.995, 0.999)
#: The Kneser–Ney discounts tried, and the order of the longest reference.
DISCOUNTS = (0.3, 0.4, 0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95)
ORDER = 5


@dataclass(frozen=True)
class Baselines:
    """Unigram, interpolated bigram and trigram losses on a study's eval windows."""

    unigram: float
    bigram: float
    trigram: float | None  # None where the vocabulary is too large to key trigrams in 63 bits
    lambdas: tuple[float, float | None]  # (λ₂, λ₃)
    tokens_counted: int
    eval_tokens: int
    bytes_per_token: float | None  # of the validation split, where it knows its bytes
    fivegram: float | None = None  # None where 5-grams do not key in 63 bits (or in older records)
    discount: float | None = None  # the fivegram's Kneser–Ney D

    def bits_per_byte(self, nats: float) -> float | None:
        return None if self.bytes_per_token is None else nats / math.log(2) / self.bytes_per_token

    def to_dict(self) -> dict[str, Any]:
        rows = {"unigram": self.unigram, "bigram": self.bigram, "trigram": self.trigram, "fivegram": self.fivegram}
        return {
            **rows,
            "bits_per_byte": {k: self.bits_per_byte(v) if v is not None else None for k, v in rows.items()},
            "lambdas": {"bigram": self.lambdas[0], "trigram": self.lambdas[1]},
            "discount": {"fivegram": self.discount},
            "tokens_counted": self.tokens_counted,
            "eval_tokens": self.eval_tokens,
            "method": (
                "add-one unigram; Jelinek-Mercer bigram and trigram; interpolated Kneser-Ney 5-gram; "
                "weights and discount tuned on held-out training tokens"
            ),
        }


#: Key spaces up to this size are counted into a dense table (``bincount``), larger ones sorted.
DENSE = 1 << 22


class _Counts:
    """How often each key (an n-gram as one integer below ``space``) occurs; ``of`` looks
    keys up (0 where absent)."""

    def __init__(self, keys: Tensor, space: int) -> None:
        self.table: Tensor | None = None
        if space <= DENSE:
            self.table = torch.bincount(keys, minlength=space)
        else:
            self.keys, self.counts = torch.unique_consecutive(torch.sort(keys).values, return_counts=True)

    def of(self, query: Tensor) -> Tensor:
        if self.table is not None:
            return self.table[query].to(torch.float64)
        if self.keys.numel() == 0:
            return torch.zeros(query.shape, dtype=torch.float64)
        at = torch.searchsorted(self.keys, query).clamp(max=self.keys.numel() - 1)
        return torch.where(self.keys[at] == query, self.counts[at], 0).to(torch.float64)


class _Model:
    """n-gram counts of some shards (no n-gram crosses a shard's end)."""

    def __init__(self, shards: list[Tensor], vocab: int, trigrams: bool) -> None:
        self.vocab, self.total = vocab, sum(int(s.numel()) for s in shards)
        self.uni = _Counts(torch.cat(shards), vocab)
        self.bi = _Counts(torch.cat([s[:-1] * vocab + s[1:] for s in shards]), vocab**2)
        self.bi_ctx = _Counts(torch.cat([s[:-1] for s in shards]), vocab)
        self.tri = self.tri_ctx = None
        if trigrams:
            self.tri = _Counts(torch.cat([(s[:-2] * vocab + s[1:-1]) * vocab + s[2:] for s in shards]), vocab**3)
            self.tri_ctx = _Counts(torch.cat([s[:-2] * vocab + s[1:-1] for s in shards]), vocab**2)

    def estimates(self, t: Tensor, u: Tensor, w: Tensor) -> tuple[Tensor, Tensor, Tensor | None]:
        """Per target: the add-one unigram, and the bigram's and trigram's maximum-likelihood
        estimates (NaN where the context was never counted, so interpolation falls back)."""
        p1 = (self.uni.of(w) + 1) / (self.total + self.vocab)
        ctx = self.bi_ctx.of(u)
        ml2 = torch.where(ctx > 0, self.bi.of(u * self.vocab + w) / ctx.clamp(min=1), math.nan)
        if self.tri is None or self.tri_ctx is None:
            return p1, ml2, None
        pair = t * self.vocab + u
        ctx = self.tri_ctx.of(pair)
        return p1, ml2, torch.where(ctx > 0, self.tri.of(pair * self.vocab + w) / ctx.clamp(min=1), math.nan)


def _grams(shard: Tensor, k: int, vocab: int) -> Tensor:
    """Every k-gram of ``shard`` as one integer, its first token the most significant."""
    n = int(shard.numel()) - k + 1
    keys = torch.zeros(max(0, n), dtype=torch.int64)
    for i in range(k):
        keys = keys * vocab + shard[i : i + max(0, n)]
    return keys


@dataclass(frozen=True)
class _Level:
    """One order of a Kneser–Ney model: a count per n-gram ``h w``, and per history ``h``
    their total and how many distinct ``w`` follow it."""

    gram: _Counts
    total: _Counts
    distinct: _Counts

    @staticmethod
    def of(keys: Tensor, k: int, vocab: int) -> _Level:
        """Counts of the n-gram occurrences ``keys`` (order ``k``; a key repeated is counted again)."""
        return _Level(
            _Counts(keys, vocab**k),
            _Counts(keys // vocab, vocab ** (k - 1)),
            _Counts(torch.unique(keys) // vocab, vocab ** (k - 1)),
        )

    def look_up(self, h: Tensor, w: Tensor, vocab: int) -> tuple[Tensor, Tensor, Tensor]:
        """``(c(h w), c(h), N₁₊(h ·))`` per target."""
        return self.gram.of(h * vocab + w), self.total.of(h), self.distinct.of(h)


def _mix(counts: tuple[Tensor, Tensor, Tensor], lower: Tensor, d: float) -> Tensor:
    """``max(c(h w) - D, 0) / c(h) + D N₁₊(h ·) / c(h) · lower``, or ``lower`` where ``h`` is unseen."""
    gram, total, distinct = counts
    return torch.where(total > 0, ((gram - d).clamp(min=0) + d * distinct * lower) / total.clamp(min=1), lower)


class _KneserNey:
    """Interpolated Kneser–Ney counts of some shards up to ``order`` (no n-gram crosses a
    shard's end): raw counts for the order a target is scored at, continuation counts below."""

    def __init__(self, shards: list[Tensor], vocab: int, order: int) -> None:
        self.vocab, self.order = vocab, order
        grams = [torch.cat([_grams(s, k, vocab) for s in shards]) for k in range(1, order + 1)]
        self.raw = [_Level.of(keys, k, vocab) for k, keys in enumerate(grams, 1)]
        # Continuation counts of a k-gram: the distinct (k+1)-grams it ends.
        self.cont = [_Level.of(torch.unique(grams[k]) % vocab**k, k, vocab) for k in range(1, order)]

    def scorer(self, context: Tensor, seen: Tensor, w: Tensor) -> Callable[[float], float]:
        """The mean loss, given a discount, of targets ``w`` after ``context`` (N, order - 1;
        column ``l`` the token ``l + 1`` back), of which the first ``seen`` tokens exist. The
        counts are looked up once; each discount only mixes them."""
        histories = [torch.zeros_like(w)]
        for lag in range(self.order - 1):
            histories.append(histories[-1] + context[:, lag] * self.vocab**lag)
        raw = [level.look_up(h, w, self.vocab) for level, h in zip(self.raw, histories)]
        cont = [level.look_up(h, w, self.vocab) for level, h in zip(self.cont, histories)]

        def nll(d: float) -> float:
            lower = torch.full(w.shape, 1.0 / self.vocab, dtype=torch.float64)
            p = lower
            for k in range(1, self.order + 1):
                p = torch.where(seen >= k - 1, _mix(raw[k - 1], lower, d), p)
                if k < self.order:
                    lower = _mix(cont[k - 1], lower, d)
            return _nll(p)

        return nll


def _history(batches: list[tuple[Tensor, Tensor]], order: int) -> tuple[Tensor, Tensor, Tensor]:
    """(context, seen, w) of every target of ``batches``: the ``order - 1`` tokens before each
    (a window's own tokens only), how many of them exist, and the targets."""
    x = torch.cat([b[0] for b in batches]).to(torch.int64)
    y = torch.cat([b[1] for b in batches]).to(torch.int64)
    lags = [torch.cat([torch.zeros_like(x[:, :lag]), x[:, : x.shape[1] - lag]], dim=1) for lag in range(order - 1)]
    seen = (torch.arange(x.shape[1]) + 1).expand_as(x)
    return torch.stack([lag.flatten() for lag in lags], dim=1), seen.flatten(), y.flatten()


def _fivegram(
    shards: list[Tensor],
    fit: list[Tensor],
    tune: list[tuple[Tensor, Tensor]],
    batches: list[tuple[Tensor, Tensor]],
    vocab: int,
) -> tuple[float | None, float | None]:
    """The Kneser–Ney 5-gram's loss on ``batches`` and its discount (chosen on ``tune`` with
    the counts of ``fit``); (None, None) where 5-grams of ``vocab`` do not key in 63 bits."""
    if vocab**ORDER >= 2**62:
        return None, None
    held = _KneserNey(fit, vocab, ORDER).scorer(*_history(tune, ORDER))
    d = min(DISCOUNTS, key=held)
    return _KneserNey(shards, vocab, ORDER).scorer(*_history(batches, ORDER))(d), d


def _interpolate(ml: Tensor, below: Tensor, lam: float) -> Tensor:
    """``λ ml + (1 - λ) below``, or ``below`` where ``ml`` is NaN (its context unseen)."""
    return torch.where(ml.isnan(), below, lam * ml + (1 - lam) * below)


def _nll(p: Tensor) -> float:
    return float(-p.log().mean())


def _contexts(batches: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(t, u, w, has_t) flattened over the windows: w a target, u the token before it, t the
    one before that (``has_t`` False at a window's first target, where none is seen)."""
    x = torch.cat([b[0] for b in batches]).to(torch.int64)
    y = torch.cat([b[1] for b in batches]).to(torch.int64)
    t = torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)
    has_t = torch.ones_like(x, dtype=torch.bool)
    has_t[:, 0] = False
    return t.flatten(), x.flatten(), y.flatten(), has_t.flatten()


def _held_out(shards: list[Tensor]) -> tuple[list[Tensor], list[tuple[Tensor, Tensor]]]:
    """The first nine tenths of the counted tokens, and the last tenth as one window."""
    flat = torch.cat(shards)
    cut = max(2, flat.numel() * 9 // 10)
    tail = flat[cut - 1 :]
    return [flat[:cut]], [(tail[:-1].unsqueeze(0), tail[1:].unsqueeze(0))]


def _best(score: Any) -> float:
    return min(GRID, key=score)


def ngram_baselines(train: TokenSplit, val: TokenSplit, batches: list[tuple[Tensor, Tensor]], vocab: int) -> Baselines:
    """The three reference losses on ``batches`` (the eval windows, (inputs, targets) each
    (B, S)), counted on ``train``'s first ``MAX_COUNTED`` tokens over a vocabulary of ``vocab``."""
    shards, left = [], MAX_COUNTED
    for shard in train.shards:
        if left <= 0:
            break
        part = shard[:left].to(torch.int64)
        shards.append(part)
        left -= int(part.numel())
    counted = sum(int(s.numel()) for s in shards)
    trigrams = vocab**3 < 2**62
    fit, tune = _held_out(shards)
    p1, ml2, ml3 = _Model(fit, vocab, trigrams).estimates(*_contexts(tune)[:3])
    lam2 = _best(lambda lam: _nll(_interpolate(ml2, p1, lam)))
    lam3 = None if ml3 is None else _best(lambda lam: _nll(_interpolate(ml3, _interpolate(ml2, p1, lam2), lam)))
    t, u, w, has_t = _contexts(batches)
    p1, ml2, ml3 = _Model(shards, vocab, trigrams).estimates(t, u, w)
    bigram = _interpolate(ml2, p1, lam2)
    trigram = None
    if ml3 is not None and lam3 is not None:
        trigram = _nll(_interpolate(torch.where(has_t, ml3, math.nan), bigram, lam3))
    fivegram, discount = _fivegram(shards, fit, tune, batches, vocab)
    return Baselines(
        unigram=_nll(p1),
        bigram=_nll(bigram),
        trigram=trigram,
        lambdas=(lam2, lam3),
        tokens_counted=counted,
        eval_tokens=int(w.numel()),
        bytes_per_token=val.n_bytes / val.tokens if val.n_bytes and val.tokens else None,
        fivegram=fivegram,
        discount=discount,
    )
