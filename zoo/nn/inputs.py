"""The checks at the model's boundary, out of the model's file: what ``forward`` checks
without reading data (types, shapes, dtypes, lengths: free, and compiled away), and
``check_inputs``, which also reads values (token ids in the vocabulary, mask entries 0/1,
positions in range) and so waits for the device: the entry points (generate, the text
pipelines, the CLI) call it once per request, never ``forward``.
"""

from __future__ import annotations

import warnings
from typing import Protocol

import torch
from torch import Tensor, nn

from zoo.errors import ConfigError, InputError, printable
from zoo.nn.cache import KVCache
from zoo.nn.config import ModelConfig
from zoo.nn.contracts import PositionEncoding

INDEX_DTYPES = (torch.int64, torch.int32)  # what embedding lookups take


class Checked(Protocol):
    """What the checks need of a model: its config and its position encoding."""

    config: ModelConfig
    position: PositionEncoding


def check_tensor(value: object, name: str, hint: str) -> Tensor:
    """``value`` if it is a tensor, else an ``InputError`` saying what to pass."""
    if not isinstance(value, Tensor):
        raise InputError(
            f"{name} must be a torch.Tensor {hint}, got {type(value).__name__}; convert it with torch.tensor(...)"
        )
    return value


def as_padding(mask: Tensor | None, tokens: Tensor, name: str, *, cached: int = 0) -> Tensor | None:
    """A (B, cached + S) mask of 1 (real) / 0 (padding) as booleans, checked against ``tokens``
    by shape and dtype (its values are ``check_inputs``' job)."""
    if mask is None:
        return None
    check_tensor(mask, name, "of 1 for real tokens and 0 for padding")
    expected = (tokens.shape[0], cached + tokens.shape[1])
    if tuple(mask.shape) != expected:
        raise InputError(
            f"{name} must have shape {expected} (batch, {'cached + new' if cached else 'sequence'} "
            f"length) with 1 for real tokens and 0 for padding, got {tuple(mask.shape)}"
        )
    if mask.is_complex():
        raise InputError(f"{name} must hold 1 for real tokens and 0 for padding, got {mask.dtype}")
    return mask.bool()


def check_tokens(model: Checked, idx: Tensor, length: int, name: str = "idx") -> None:
    """Refuse token ids that are not a (batch, seq) integer tensor, or ``length`` positions
    (cached + new) past the model's position table (``position_limit``); an encoding
    without a table runs past ``max_seq_len`` (entry points warn: ``warn_past_context``).
    Shapes and dtypes only."""
    check_tensor(idx, name, "of token ids of shape (batch, seq)")
    if idx.dim() != 2 or idx.dtype not in INDEX_DTYPES:
        raise InputError(
            f"{name} must be an integer tensor of token ids of shape (batch, seq), got "
            f"{idx.dtype} of shape {tuple(idx.shape)}; add a batch dimension with {name}[None]"
        )
    limit = position_limit(model)
    if limit is not None and length > limit:
        raise ConfigError(
            f"{name}: {length} positions do not fit: {beyond_context(model, limit)}; shorten the input to at "
            f"most {limit} tokens (prompt plus new tokens)"
        )


def context_limit(model: Checked) -> int:
    """The context ``model`` was built for: its config's ``max_seq_len``, or fewer where its
    position table holds fewer. Past it an encoding without a table still computes (with
    a warning, ``warn_past_context``); a table refuses (``position_limit``)."""
    table = model.position.max_positions
    return model.config.max_seq_len if table is None else min(table, model.config.max_seq_len)


def position_limit(model: Checked) -> int | None:
    """The most positions ``model`` can take: its position table's rows (learned positions,
    at most ``max_seq_len``), or None for an encoding without a table (rotary, ALiBi,
    sinusoidal, none), which computes any position, as transformers runs such models past
    ``max_position_embeddings``."""
    return None if model.position.max_positions is None else context_limit(model)


def beyond_context(model: Checked, limit: int) -> str:
    """Why positions past ``limit`` (``position_limit``) are refused: the table ends there."""
    return f"position {model.config.position.name!r} holds max_seq_len={limit}"


def warn_past_context(model: Checked, length: int, fix: str, *, stacklevel: int = 3) -> None:
    """Warn (``UserWarning``) when ``length`` positions run past the ``max_seq_len`` of a
    model whose positions have no table: they are computed, but the model was built for
    fewer and likely never saw them. ``fix`` says how to stay inside (or is empty)."""
    limit = context_limit(model)
    if position_limit(model) is not None or length <= limit:
        return
    warnings.warn(
        f"{length} positions run past the model's max_seq_len={limit}: position {model.config.position.name!r} "
        f"has no table, so they are computed, but the model was built for {limit} and likely never saw positions "
        f"that far, so expect worse output past position {limit}{'; ' + fix if fix else ''}",
        UserWarning,
        stacklevel=stacklevel,
    )


def check_cache(cache: object, layers: int, batch: int) -> KVCache | None:
    """``cache`` if it is a ``KVCache`` of ``layers`` layers and this batch."""
    if cache is None:
        return None
    if not isinstance(cache, KVCache):
        raise InputError(f"cache must be a KVCache from model.new_cache(), got {type(cache).__name__}")
    if len(cache) != layers:
        raise InputError(
            f"cache has {len(cache)} layers but this model needs {layers}: it comes from "
            f"another model; make one with model.new_cache()"
        )
    keys = cache[0].keys
    if cache.length and keys is not None and keys.shape[0] != batch:
        raise InputError(
            f"cache holds a batch of {keys.shape[0]} but idx has {batch} rows; "
            f"use one cache per batch (model.new_cache())"
        )
    return cache


def check_positions(positions: object, batch: int, seq: int) -> Tensor:
    """``positions`` if it is a (1|B, S) integer tensor."""
    positions = check_tensor(positions, "positions", f"of shape (1 or {batch}, {seq})")
    if positions.dim() != 2 or positions.shape[1] != seq or positions.shape[0] not in (1, batch):
        raise InputError(f"positions must have shape (1 or {batch}, {seq}), got {tuple(positions.shape)}")
    if positions.dtype not in INDEX_DTYPES:
        raise InputError(f"positions must be integers (int64 or int32), got {positions.dtype}; pass positions.long()")
    return positions


def value_problems(
    model: Checked,
    idx: Tensor,
    *,
    attention_mask: Tensor | None = None,
    positions: Tensor | None = None,
    name: str = "idx",
) -> list[str]:
    """What is wrong with the values of the inputs (reads them: not for inside forward)."""
    problems = []
    vocab = model.config.vocab_size
    if idx.numel() and not idx.is_meta:
        low, high = int(idx.min()), int(idx.max())
        if low < 0 or high >= vocab:
            problems.append(
                f"{name}: token id {low if low < 0 else high} is outside the vocabulary "
                f"[0, {vocab}); check the tokenizer matches the model"
            )
    if attention_mask is not None and attention_mask.numel() and not attention_mask.is_meta:
        odd = attention_mask[(attention_mask != 0) & (attention_mask != 1)]
        if odd.numel():
            problems.append(f"attention_mask must hold 1 for real tokens and 0 for padding, found {odd[0].item()!r}")
    limit = position_limit(model)
    if positions is not None and positions.numel() and not positions.is_meta:
        low, high = int(positions.min()), int(positions.max())
        if limit is not None and (low < 0 or high >= limit):
            problems.append(f"positions must lie in [0, {limit}) ({beyond_context(model, limit)}), got {low}..{high}")
        elif low < 0:
            problems.append(f"positions must be 0 or more, got {low}..{high}")
    return problems


def check_inputs(
    model: Checked,
    idx: Tensor,
    *,
    attention_mask: Tensor | None = None,
    positions: Tensor | None = None,
    cache: KVCache | None = None,
    name: str = "idx",
) -> None:
    """Check inputs for ``model`` as ``forward`` does, and their values too: token ids in
    the vocabulary, mask entries 0 or 1, positions in range. Raises ``InputError``.

    Reading values waits for the device, so entry points call this once per request
    (not per decoding step) and ``forward`` does not.
    """
    check_tensor(idx, name, "of token ids of shape (batch, seq)")
    new_cache = getattr(model, "new_cache", None)
    layers = len(new_cache()) if new_cache is not None else len(cache or ())
    cache = check_cache(cache, layers, idx.shape[0] if idx.dim() else 0)
    offset = cache.length if cache is not None else 0
    check_tokens(model, idx, offset + idx.shape[-1], name)
    batch, seq = idx.shape
    if positions is not None:
        positions = check_positions(positions, batch, seq)
    if attention_mask is not None:
        as_padding(attention_mask, idx, "attention_mask", cached=offset)
    problems = value_problems(model, idx, attention_mask=attention_mask, positions=positions, name=name)
    if problems:
        raise InputError("; ".join(problems))


def not_finite_loss(model: nn.Module, total: float) -> str:
    """Why a loss came out ``total`` (NaN or infinite): the weights that are not finite, by
    name, else an overflow in the forward pass (``zoo eval`` and ``zoo probe`` say it)."""
    broken = [name for name, p in model.named_parameters() if not bool(torch.isfinite(p).all())]
    if broken:
        shown = ", ".join(printable(name, 60) for name in broken[:4]) + (" ..." if len(broken) > 4 else "")
        return (
            f"the loss is {total}: {len(broken)} weight tensor(s) hold NaN or infinity ({shown}), so the model "
            f"scores nothing; check the checkpoint (`zoo inspect`), or use an earlier version (--version)"
        )
    dtype = next(model.parameters()).dtype
    fix = "run it in float32" if dtype in (torch.float16, torch.bfloat16) else "its scales are out of range"
    return f"the loss is {total}: the forward pass overflows in {dtype}; {fix}"
