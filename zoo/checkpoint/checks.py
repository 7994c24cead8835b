"""Checks between a model and a checkpoint's tensors, on save and on load.

Saving checks the model against the one its config builds, so every file written loads;
loading and ``inspect`` check the file's tensors, ties and dtypes against the model its
config describes, and what a load would allocate, before anything is allocated.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import torch
from torch import Tensor, nn

from zoo.checkpoint.format import Checkpoint
from zoo.checkpoint.hashing import dtype_name
from zoo.errors import CheckpointError, RegistryError, printable, quoted
from zoo.memory import fmt_bytes, model_bytes, require, tensor_bytes
from zoo.nn.config import ModelConfig
from zoo.nn.factory import model_for
from zoo.nn.registry import Registry

#: The floating-point dtypes a zoo model runs in.
RUNNABLE_FLOATS = frozenset({torch.float64, torch.float32, torch.float16, torch.bfloat16})
#: What ``load(strict=False)`` initialises without question when the file covers less.
_MISSING_ALLOWANCE = 256 << 20


def tensors_to_save(
    model: nn.Module, config: ModelConfig, registry: Registry
) -> tuple[dict[str, Tensor], dict[str, str]]:
    """The tensors to store (tied aliases left out) and the tie map ``{alias: owner}``.

    Checks the model against the one its config builds, so every file written loads.
    """
    state = model.state_dict()
    try:
        with torch.device("meta"):
            reference = model_for(config, registry)
    except RegistryError as err:
        raise CheckpointError(
            f"cannot save: {err} Pass the registry the model was built with: zoo.save(model, path, registry=...)"
        ) from err
    expected = reference.state_dict(keep_vars=True)
    ties = _tie_map(expected)
    meta = [name for name, tensor in state.items() if tensor.is_meta]
    if meta:
        raise CheckpointError(
            f"cannot save: {_names(meta)} are on the meta device and hold no values; "
            f"save a model built with zoo.build (not device='meta') or loaded with zoo.load"
        )
    problems = _compare(
        {k: v for k, v in state.items() if k not in ties}, {k: v for k, v in expected.items() if k not in ties}, ties
    )
    for alias, owner in ties.items():
        held, shared = state.get(alias), state.get(owner)
        if held is not None and shared is not None and held.data_ptr() != shared.data_ptr():
            problems.append(f"{alias} should be tied to {owner} but holds its own tensor; call model.tie_weights()")
    if problems:
        raise CheckpointError(
            "cannot save: the model does not match the model its config builds:\n  "
            + "\n  ".join(problems)
            + "\nzoo.save stores models whose structure follows model.config."
        )
    return {k: v.detach().contiguous() for k, v in state.items() if k not in ties}, ties


def check_dtypes(tensors: Mapping[str, Tensor], who: str, fix: str) -> None:
    """One floating-point dtype among ``tensors``, and one a model can run in."""
    floats: dict[torch.dtype, list[str]] = {}
    for name, tensor in tensors.items():
        if tensor.is_floating_point():
            floats.setdefault(tensor.dtype, []).append(name)
    odd = sorted((d for d in floats if d not in RUNNABLE_FLOATS), key=str)
    if odd:
        raise CheckpointError(
            f"{who} holds {dtype_name(odd[0])} tensors ({_names(floats[odd[0]])}); a zoo model runs in "
            f"float32, bfloat16, float16 or float64, not float8: {fix}"
        )
    if len(floats) > 1:
        mixed = "; ".join(f"{dtype_name(d)}: {_names(n, limit=3)}" for d, n in sorted(floats.items(), key=str))
        raise CheckpointError(
            f"{who} mixes floating-point dtypes ({mixed}), so its layers cannot multiply each other's outputs; {fix}"
        )


def check_fit(ckpt: Checkpoint, model: nn.Module, *, strict: bool) -> list[str]:
    """Compare the file's tensors with the model's; returns the missing names.

    Missing, unexpected and mismatched tensors are listed together in one error
    (missing and unexpected ones only when ``strict``).
    """
    expected = model.state_dict(keep_vars=True)
    ties = _tie_map(expected)
    stored = {name: tensor for name, tensor in expected.items() if name not in ties}
    problems = _compare(ckpt.tensors, stored, ties, strict=strict)
    if strict and ckpt.ties != ties:
        problems.append(
            f"tied weights: the file ties {quoted(ckpt.ties) if ckpt.ties else 'nothing'}, the model ties {ties or 'nothing'}"
        )
    if problems:
        fix = " load(..., strict=False) ignores unexpected tensors and initialises missing ones." if strict else ""
        raise CheckpointError(
            f"{ckpt.path} does not fit the model its config describes:\n  "
            + "\n  ".join(problems)
            + f"\nThe file is damaged or was edited.{fix}"
        )
    return sorted(set(stored) - set(ckpt.tensors))


def _compare(
    found: Mapping[str, Tensor], expected: Mapping[str, Tensor], ties: Mapping[str, str], *, strict: bool = True
) -> list[str]:
    """Missing, unexpected, and wrongly shaped or typed tensors, one line per group."""
    problems = []
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    if strict and missing:
        problems.append(f"missing: {_names(missing)}")
    if strict and unexpected:
        tied = [name for name in unexpected if name in ties]
        note = f" ({_names(tied)} should be stored once, as the weight tied to it)" if tied else ""
        problems.append(f"unexpected: {_names(unexpected)}{note}")
    mismatched = []
    for name in sorted(set(found) & set(expected)):
        have, want = found[name], expected[name]
        if tuple(have.shape) != tuple(want.shape):
            mismatched.append(f"{name} has shape {tuple(have.shape)}, expected {tuple(want.shape)}")
        elif have.is_floating_point() != want.is_floating_point() or (
            not want.is_floating_point() and have.dtype != want.dtype
        ):
            kind = "a floating-point dtype" if want.is_floating_point() else dtype_name(want.dtype)
            mismatched.append(f"{name} has dtype {dtype_name(have.dtype)}, expected {kind}")
    if mismatched:
        problems.append(f"mismatched: {_names(mismatched, separator='; ')}")
    return problems


def check_allocation(ckpt: Checkpoint, model: nn.Module, missing: list[str], *, converting: bool) -> None:
    """Refuse, before anything is allocated, a load that would allocate more than the
    file accounts for (``strict=False`` with a config far larger than its tensors) or
    more than this machine has free."""
    expected = model.state_dict(keep_vars=True)
    absent = tensor_bytes(expected[name] for name in missing)
    covered = tensor_bytes(ckpt.tensors[name] for name in expected if name in ckpt.tensors)
    if absent > max(covered, _MISSING_ALLOWANCE):
        raise CheckpointError(
            f"cannot load {ckpt.path} with strict=False: its config describes a model of "
            f"{fmt_bytes(model_bytes(model))}, of which the file holds {fmt_bytes(covered)}; loading would "
            f"allocate and initialise {fmt_bytes(absent)} of missing weights ({len(missing)} tensors). "
            f"The file is damaged or not this model's checkpoint; to start such a model from scratch, "
            f"use zoo.build(config)."
        )
    require(absent + (covered if converting else 0), "cpu", f"loading {ckpt.path}", CheckpointError)


def check_ties_hold(model: nn.Module, ckpt: Checkpoint) -> None:
    """After ``tie_weights()``, every alias the file records is its owner's tensor."""
    state = model.state_dict(keep_vars=True)
    broken = [alias for alias, owner in ckpt.ties.items() if state.get(alias) is not state.get(owner)]
    if broken:
        raise CheckpointError(
            f"cannot load {ckpt.path}: after model.tie_weights(), {_names(broken)} are not tied "
            f"to their owners; the model class's tie_weights() does not follow its config"
        )


def _tie_map(state: Mapping[str, Tensor]) -> dict[str, str]:
    """``{alias: owner}`` for entries of a ``state_dict(keep_vars=True)`` that are one tensor."""
    owners: dict[int, str] = {}
    ties = {}
    for name, tensor in state.items():
        owner = owners.setdefault(id(tensor), name)
        if owner != name:
            ties[name] = owner
    return ties


def single_float_dtype(tensors: Iterable[Tensor]) -> torch.dtype | None:
    """The one floating-point dtype among ``tensors``; ``None`` for none or several."""
    dtypes = {t.dtype for t in tensors if t.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


def _names(names: list[str], limit: int = 10, separator: str = ", ") -> str:
    shown = separator.join(printable(name) for name in names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")
