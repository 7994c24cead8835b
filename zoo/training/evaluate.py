"""Evaluate a language model on held-out tokens: loss, perplexity, tokens, bits per byte.

The split is read in consecutive, non-overlapping windows (every token predicted once,
from up to ``seq_len`` tokens of context), so the numbers do not depend on a seed.
Bits per byte divide the summed loss (in bits) by the UTF-8 bytes the evaluated tokens
spell, which makes models with different tokenizers comparable; prepared data records
each split's bytes, and a partial pass scales them by the share of tokens evaluated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.bounds import check_elements
from zoo.errors import ConfigError, InputError, checked_types, printable
from zoo.nn.inputs import Checked, beyond_context, context_limit, not_finite_loss, position_limit, warn_past_context
from zoo.training.data import resolve_data, tokenizer_mismatch, tokenizer_name
from zoo.training.manifest import TOKENIZERS
from zoo.training.sampling import TokenSplit


@dataclass(frozen=True)
class EvalResult:
    """Mean next-token loss (nats) over ``tokens`` predicted tokens, and derived measures."""

    loss: float
    tokens: int
    bits_per_byte: float | None  # None when the data does not record its bytes
    split: str

    @property
    def perplexity(self) -> float:
        return math.exp(min(self.loss, 700.0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "split": self.split,
            "loss": self.loss,
            "perplexity": self.perplexity,
            "tokens": self.tokens,
            "bits_per_byte": self.bits_per_byte,
        }


def check_context(model: nn.Module, seq_len: int) -> None:
    """Refuse windows of ``seq_len`` tokens past the model's position table (learned
    positions: ``position_limit``); past the ``max_seq_len`` of positions without a table
    (rotary, ALiBi, sinusoidal, none), warn (``warn_past_context``): they are computed."""
    if not isinstance(getattr(model, "position", None), nn.Module) or getattr(model, "config", None) is None:
        return  # not a zoo model: its own forward says what it cannot take
    checked = cast(Checked, model)
    limit = position_limit(checked)
    if limit is not None and seq_len > limit:
        raise ConfigError(
            f"seq_len={seq_len} does not fit: {beyond_context(checked, limit)}; use --seq-len {limit} or less"
        )
    warn_past_context(checked, seq_len, f"use --seq-len {context_limit(checked)} or less to stay inside", stacklevel=4)


def _consecutive(split: TokenSplit, seq_len: int) -> Tensor:
    """Window numbers (see ``TokenSplit.windows``) of consecutive non-overlapping windows."""
    numbers, offset = [], 0
    for shard in split.shards:
        n = int(shard.numel())
        if n > seq_len:
            numbers.append(torch.arange(0, n - seq_len, seq_len) + offset)
            offset += n - seq_len
    return torch.cat(numbers) if numbers else torch.zeros(0, dtype=torch.long)


@torch.no_grad()
@checked_types()
def evaluate(
    model: nn.Module,
    data: Any = None,
    *,
    split: str = "val",
    seq_len: int | None = None,
    batch_size: int = 8,
    batches: int | None = None,
    tokenizer: str | None = None,
) -> EvalResult:
    """Loss, perplexity, tokens and bits per byte of ``model`` on a split of ``data``
    (anything ``zoo.train`` accepts), over ``batches`` batches of ``batch_size`` windows
    (default: the whole split). ``seq_len`` defaults to the model's ``max_seq_len``,
    capped at 1024; a longer one runs, with a warning, where positions have no table, and
    is refused past a learned table (``check_context``).

    ``tokenizer`` is the one the model was trained with (a name, a tokenizer folder or a
    hub id; a zoo checkpoint records it, ``zoo eval`` passes it): raw text ``data`` is
    tokenised with it, and data tokenised otherwise is refused, as ``zoo train`` refuses
    it, and so is byte-level data for a model with GPT-2's vocabulary."""
    if split not in ("train", "val"):
        raise ConfigError(f"split={split!r} must be 'train' or 'val' (--split)")
    if batches is not None and (isinstance(batches, bool) or not isinstance(batches, int) or batches < 1):
        raise ConfigError(f"batches={batches!r} must be a positive integer (--batches)")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"batch_size={batch_size!r} must be a positive integer (--batch-size)")
    config = getattr(model, "config", None)
    max_len = getattr(config, "max_seq_len", None)
    if seq_len is not None and (isinstance(seq_len, bool) or not isinstance(seq_len, int) or seq_len < 1):
        raise ConfigError(f"seq_len={seq_len!r} must be a positive integer (--seq-len), or None for the default")
    if tokenizer is not None and (not isinstance(tokenizer, str) or not tokenizer):
        raise ConfigError(
            f"tokenizer={tokenizer!r} must be {', '.join(TOKENIZERS)}, a tokenizer folder, a hub id or None"
        )
    seq_len = seq_len or min(max_len or 1024, 1024)
    check_context(model, seq_len)
    vocab = getattr(config, "vocab_size", None)
    expected = tokenizer or ("gpt2" if (vocab or 0) >= 50257 else None)
    token_data = resolve_data(data, tokenizer=expected or "bytes")
    if expected is not None and (used := tokenizer_mismatch(expected, token_data)) is not None:
        why = "was trained with" if tokenizer else "has the vocabulary of"
        raise InputError(
            f"the data was tokenized with {used} but the model {why} {tokenizer_name(expected)}; its loss on these "
            f"tokens means nothing. Evaluate on data prepared with `zoo data prepare --tokenizer {printable(expected)}`"
        )
    if vocab is not None and (top := token_data.max_token()) >= vocab:
        raise InputError(
            f"the data has token ids up to {top}, outside the model's vocabulary of {vocab}; "
            f"evaluate on data prepared with the model's tokenizer"
        )
    chosen = token_data.train if split == "train" else token_data.val
    chosen.check(seq_len, "validation" if split == "val" else "training")
    numbers = _consecutive(chosen, seq_len)
    if batches is not None:
        numbers = numbers[: batches * batch_size]
    device = next(model.parameters()).device
    rows = min(batch_size, int(numbers.numel()))  # a batch holds at most the split's windows
    check_elements(
        rows * seq_len * (vocab or 0), next(model.parameters()).element_size(),
        f"one batch's logits ({rows:,} windows of {seq_len:,} tokens)", "--batch-size", key="", device=device,
    )  # fmt: skip
    was_training = model.training
    model.eval()
    total, count = 0.0, 0
    try:
        for part in torch.split(numbers, batch_size):
            windows = chosen.windows(part, seq_len).to(device)  # (n, S + 1)
            logits = model(windows[:, :-1])  # (n, S, V)
            total += float(F.cross_entropy(logits.flatten(0, 1).float(), windows[:, 1:].flatten(), reduction="sum"))
            count += windows[:, 1:].numel()
    finally:
        model.train(was_training)
    if not math.isfinite(total):
        raise InputError(not_finite_loss(model, total))
    bpb = None
    if chosen.n_bytes:
        n_bytes = chosen.n_bytes * count / max(1, chosen.tokens)
        bpb = total / math.log(2) / n_bytes
    return EvalResult(total / count, count, bpb, split)
