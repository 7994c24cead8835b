"""Activation patching and the logit lens, over the hook points (``zoo.nn.hooks``).

``patch`` takes one whole point at a time from the clean run into the corrupted one; on
a residual-stream point that carries everything, so early points restore it all (1.0).
``patch_grid`` patches one position of one layer's point at a time, the positions ×
layers grid TransformerLens's patching utilities give (``get_act_patch_resid_pre`` and
kin): where along the sequence, and at which depth, the clean behaviour lives.
``get_act_patch_attn_head_out_by_pos`` is TransformerLens's function of that name: one
head's output (its ``z``) at one position of one layer at a time, (L, S, H).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from zoo.errors import HookError, quoted
from zoo.nn.hooks import Names, hooked, run_with_cache, stacks

__all__ = ["PatchGrid", "Patching", "get_act_patch_attn_head_out_by_pos", "logit_lens", "patch", "patch_grid"]


def _replace_with(activation: Tensor, x: Tensor, name: str) -> Tensor:
    return activation


@dataclass(frozen=True)
class Patching:
    """Activation patching: a metric on the clean run, the corrupted run, and the corrupted
    run with each point's activation taken from the clean run."""

    clean: float
    corrupted: float
    patched: dict[str, float]

    def recovered(self) -> dict[str, float]:
        """Per point, the fraction of the clean-minus-corrupted gap that patching it restores."""
        gap = self.clean - self.corrupted
        return {name: (value - self.corrupted) / gap if gap else 0.0 for name, value in self.patched.items()}


def patch(
    model: nn.Module,
    clean: Tensor | tuple[Tensor, ...],
    corrupted: Tensor | tuple[Tensor, ...],
    metric: Callable[[Tensor], Tensor | float],
    *,
    names: Names = lambda name: ".hook_resid_" in name,
) -> Patching:
    """Patch one point at a time from the clean run into the corrupted one; ``metric(output)``
    says how much of the clean behaviour comes back, as one finite number (a float or a
    one-element tensor; anything else is a ``HookError`` naming the run). Clean and
    corrupted inputs must have the same shapes. ``names`` defaults to every
    residual-stream point."""
    clean_args, corrupted_args = _checked(clean, corrupted, metric)
    with torch.no_grad():
        out, cache = run_with_cache(model, *clean_args, names=names)
        clean_value = _metric_value(metric(out), "the clean run")
        corrupted_value = _metric_value(metric(model(*corrupted_args)), "the corrupted run")
        patched = {}
        for name, activation in cache.items():
            with hooked(model, {name: functools.partial(_replace_with, activation)}):
                patched[name] = _metric_value(metric(model(*corrupted_args)), f"the run patched at {name!r}")
    return Patching(clean_value, corrupted_value, patched)


def _metric_value(value: object, run: str) -> float:
    """A patching metric's result as a finite float: a number, or a tensor of one element."""
    if isinstance(value, Tensor) and value.numel() == 1 and not value.is_complex() and value.dtype != torch.bool:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        got = (
            f"a tensor of shape {tuple(value.shape)} ({value.dtype})"
            if isinstance(value, Tensor)
            else (f"{type(value).__name__} {quoted(value, 60)}")
        )
        raise HookError(
            f"the metric returned {got} on {run}; it must return one number (a float or a one-element "
            f"tensor): reduce it, e.g. logits[0, -1, token] or (logits[..., a] - logits[..., b]).mean()"
        )
    if not math.isfinite(value):
        raise HookError(
            f"the metric returned {value} on {run}; the fraction recovered would be meaningless: make the "
            f"metric finite (e.g. log_softmax rather than the log of a softmax that underflows)"
        )
    return float(value)


def logit_lens(model: nn.Module, *args: Any, **kwargs: Any) -> Tensor:
    """The output head read off the residual stream after every layer: (L + 1, B, S, V),
    the embeddings first, each through the model's final norm and head (``model.output``)."""
    last = stacks(model)[-1]
    wanted = [f"{last.blocks}0.hook_resid_pre"] + [f"{last.blocks}{i}.hook_resid_post" for i in range(len(last.layers))]
    m: Any = model
    with torch.no_grad():
        _, cache = run_with_cache(model, *args, names=wanted, **kwargs)
        return torch.stack([m.output(cache[name]) for name in wanted])


def _checked(
    clean: Tensor | tuple[Tensor, ...], corrupted: Tensor | tuple[Tensor, ...], metric: object
) -> tuple[tuple[Tensor, ...], tuple[Tensor, ...]]:
    """The clean and corrupted inputs as tuples, refused unless of the same shapes; the metric callable."""
    clean_args = clean if isinstance(clean, tuple) else (clean,)
    corrupted_args = corrupted if isinstance(corrupted, tuple) else (corrupted,)
    if not callable(metric):
        raise HookError(
            f"metric must be a function of the model's output that returns one number, got "
            f"{type(metric).__name__} {quoted(metric, 60)}; e.g. lambda logits: logits[0, -1, token]"
        )
    shapes = [tuple(a.shape) if isinstance(a, Tensor) else type(a).__name__ for a in (*clean_args, *corrupted_args)]
    if shapes[: len(clean_args)] != shapes[len(clean_args) :]:
        raise HookError(
            f"clean and corrupted inputs must have the same shapes, got {shapes[: len(clean_args)]} and "
            f"{shapes[len(clean_args) :]}; patching swaps activations position by position (pad or trim one)"
        )
    return clean_args, corrupted_args


@dataclass(frozen=True)
class PatchGrid:
    """The metric on the clean run, the corrupted run, and the corrupted run with one
    position of one layer's ``point`` from the clean run: ``values[layer, position]``."""

    point: str  # "hook_resid_pre", "hook_attn_out", ...
    clean: float
    corrupted: float
    values: Tensor  # (L, S)

    def recovered(self) -> Tensor:
        """Per layer and position, the fraction of the clean-minus-corrupted gap restored."""
        gap = self.clean - self.corrupted
        return (self.values - self.corrupted) / gap if gap else torch.zeros_like(self.values)


def _replace_position(activation: Tensor, position: int, x: Tensor, name: str) -> Tensor:
    x = x.clone()
    x[:, position] = activation[:, position]
    return x


def patch_grid(
    model: nn.Module,
    clean: Tensor | tuple[Tensor, ...],
    corrupted: Tensor | tuple[Tensor, ...],
    metric: Callable[[Tensor], Tensor | float],
    *,
    point: str = "hook_resid_pre",
) -> PatchGrid:
    """Patch ``blocks.{i}.{point}`` at one position at a time, from the clean run into the
    corrupted one, for every block ``i`` and position: L × S runs. ``point`` is a block's
    point with positions in its second dimension (``hook_resid_pre``, ``hook_resid_mid``,
    ``hook_resid_post``, ``hook_attn_out``, ``hook_mlp_out``, ``attn.hook_z``, ...)."""
    clean_args, corrupted_args = _checked(clean, corrupted, metric)
    layers = len(stacks(model)[-1].layers)
    prefix = stacks(model)[-1].blocks
    names = [f"{prefix}{i}.{point}" for i in range(layers)]
    with torch.no_grad():
        out, cache = run_with_cache(model, *clean_args, names=names)
        clean_value = _metric_value(metric(out), "the clean run")
        corrupted_value = _metric_value(metric(model(*corrupted_args)), "the corrupted run")
        length = cache[names[0]].shape[1]
        values = torch.empty(layers, length)
        for i, name in enumerate(names):
            for position in range(length):
                hook = functools.partial(_replace_position, cache[name], position)
                with hooked(model, {name: hook}):
                    run = f"the run patched at {name!r}, position {position}"
                    values[i, position] = _metric_value(metric(model(*corrupted_args)), run)
    return PatchGrid(point, clean_value, corrupted_value, values)


def _replace_head(activation: Tensor, position: int, head: int, x: Tensor, name: str) -> Tensor:
    x = x.clone()
    x[:, position, head] = activation[:, position, head]
    return x


def get_act_patch_attn_head_out_by_pos(
    model: nn.Module,
    corrupted_tokens: Tensor,
    clean_cache: dict[str, Tensor],
    patching_metric: Callable[[Tensor], Tensor | float],
) -> Tensor:
    """TransformerLens's per-head patching grid: ``patching_metric`` of the corrupted run
    with head ``h``'s output at position ``p`` of layer ``l`` (its ``attn.hook_z``, the
    head's share before the output projection) taken from ``clean_cache`` (a
    ``run_with_cache`` of the clean tokens): (L, S, H), one run per cell."""
    if not callable(patching_metric):
        raise HookError("patching_metric must be a function of the logits that returns one number")
    prefix = stacks(model)[-1].blocks
    names = [f"{prefix}{i}.attn.hook_z" for i in range(len(stacks(model)[-1].layers))]
    missing = [name for name in names if name not in clean_cache]
    if missing:
        raise HookError(f"clean_cache has no {missing[0]!r}: run run_with_cache on the clean tokens with every point")
    _, length, heads, _ = clean_cache[names[0]].shape
    values = torch.empty(len(names), length, heads)
    with torch.no_grad():
        for i, name in enumerate(names):
            for position in range(length):
                for head in range(heads):
                    hook = functools.partial(_replace_head, clean_cache[name], position, head)
                    with hooked(model, {name: hook}):
                        run = f"the run patched at {name!r}, position {position}, head {head}"
                        values[i, position, head] = _metric_value(patching_metric(model(corrupted_tokens)), run)
    return values
