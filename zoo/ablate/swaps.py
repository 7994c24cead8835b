"""The rows of an ablation between its base and its target, from ``--swaps``: single
swaps (an axis to the target's value, or ``AXIS=VALUE``), paired rows (``AXIS+AXIS``,
whose parts may name values: ``position=sinusoidal+embedding_scale=sqrt_d_model``), and
the cumulative path. ``AXIS=VALUE`` names a registered component, with options after
colons (``mlp=swiglu:multiple_of=1``: SwiGLU at the GELU MLP's weights), or a value of a
config field (``embedding_scale=sqrt_d_model``)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from zoo.ablate.compare import SIZE_AXES, swap_value
from zoo.errors import InputError, ZooError, quoted
from zoo.nn.config import ModelConfig, resolve_config
from zoo.nn.registry import KINDS, Registry

HINT = "(--swaps AXIS,AXIS=VALUE,AXIS+AXIS,AXIS=VALUE+AXIS=VALUE,...)"


@dataclass(frozen=True)
class Variant:
    """One design the ablation trains: the base, a swap (or a path step), the target."""

    name: str
    axis: str  # "base", "target" or the swapped field
    config: ModelConfig
    refused: str | None = None  # why its eval lengths past --seq-len are N/A (a learned table)


#: A swap: its axis, the value its row is named by, and the override that makes it (None:
#: the target's value).
Swap = tuple[str, Any, Any]


def picked_swaps(
    swappable: list[tuple[str, Any]], swaps: list[str] | None, registry: Registry
) -> tuple[list[Swap], list[list[Swap]]]:
    """The single swaps named by ``swaps``: plain axes to the target's value (in the
    differences' order; ``all`` names every one), then each ``AXIS=VALUE`` (in the order
    given); and the paired rows it names (``AXIS+AXIS``, each part plain or ``AXIS=VALUE``),
    in its order. None: every swappable difference, no pairs."""
    toward = [(axis, value, None) for axis, value in swappable]
    if swaps is None:
        return toward, []
    values = dict(swappable)
    named = [tuple(part.strip() for part in str(item).split("+")) for item in swaps if item != "all"]
    unknown = [part for parts in named for part in parts if "=" not in part and part not in values]
    if unknown or not swaps:
        raise InputError(
            f"swaps names {', '.join(quoted(a) for a in unknown) or 'nothing'}; it takes axes among the "
            f"swappable differences: {', '.join(values) or 'none'}, AXIS=VALUE for a component or a field's "
            f"value, AXIS+AXIS for a row that swaps both, and all for every single swap {HINT}"
        )
    pairs: list[list[Swap]] = []
    seen: set[frozenset[str]] = set()
    for parts in (p for p in named if len(p) > 1):
        axes = [part.partition("=")[0].strip() for part in parts]
        if len(set(axes)) != len(axes) or frozenset(parts) in seen:
            what = "an axis twice" if len(set(axes)) != len(axes) else "a row named before"
            raise InputError(
                f"swaps {quoted('+'.join(parts))} names {what}; a paired row swaps two or more different axes, "
                f"once each (--swaps embedding_scale+init)"
            )
        seen.add(frozenset(parts))
        pairs.append([_valued(part, registry) if "=" in part else (part, values[part], None) for part in parts])
    plain = {parts[0] for parts in named if len(parts) == 1 and "=" not in parts[0]}
    plain |= set(values) if "all" in swaps else set()
    valued = [_valued(parts[0], registry) for parts in named if len(parts) == 1 and "=" in parts[0]]
    picked = [swap for swap in toward if swap[0] in plain] + valued
    names = [f"{axis}={value}" for axis, value, _ in picked]
    if len(set(names)) != len(names):
        twice = next(name for name in names if names.count(name) > 1)
        raise InputError(f"swaps names the swap {quoted(twice)} twice; give each once (--swaps)")
    return picked, pairs


def _valued(entry: str, registry: Registry) -> Swap:
    """``position=rotary`` as a swap of the base's component of that kind to that one (its
    default options, or those after colons: ``mlp=swiglu:multiple_of=1``), checked against
    the registry; ``embedding_scale=sqrt_d_model`` as that value of a config field."""
    axis, _, value = (part.strip() for part in entry.partition("="))
    if axis in KINDS:
        name, *given = (part.strip() for part in value.split(":"))
        names = [c.name for c in registry.components(axis)]
        if name not in names:
            raise InputError(
                f"swaps names {quoted(entry)}: no {axis} component is registered as {quoted(name)}; the registered "
                f"{axis} components are {', '.join(names)} (--swaps {axis}=NAME; `zoo components` lists them)"
            )
        options = {}
        for option in given:
            key, equals, raw = (part.strip() for part in option.partition("="))
            if not (key and equals and raw):
                raise InputError(
                    f"swaps names {quoted(entry)}: an option after a colon is KEY=VALUE "
                    f"(--swaps mlp=swiglu:multiple_of=1)"
                )
            options[key] = _scalar(raw)
        return axis, value, {"name": name, **options}
    if axis not in ModelConfig.model_fields or axis in SIZE_AXES or not value:
        raise InputError(
            f"swaps names {quoted(entry)}: AXIS=VALUE takes a component kind ({', '.join(KINDS)}) and one of its "
            f"registered names, or a config field that is not a size and its value {HINT}"
        )
    return axis, value, _scalar(value)


def _scalar(text: str) -> Any:
    """``1`` an int, ``0.5`` a float, ``true`` a bool; any other text the string itself."""
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, (bool, int, float)) else text


def single_swaps(
    ends: tuple[Variant, Variant], swappable: list[Swap], notes: list[str], registry: Registry
) -> list[Variant]:
    """Base, the base with each single swap (to the target's value, or the override a swap
    names), target."""
    base, target = ends
    plan = [base]
    for axis, value, override in swappable:
        change = swap_value(target.config, axis) if override is None else override
        try:
            swapped = resolve_config(base.config, {axis: change}, registry=registry)
        except ZooError as err:
            notes.append(f"swap {axis}={value} skipped: it cannot be applied alone ({err})")
            continue
        if override is not None and swapped == base.config:
            notes.append(f"swap {axis}={value} skipped: it is the base's own {axis}, so the base row is that design")
            continue
        plan.append(Variant(f"{axis}={value}", axis, swapped))
    plan.append(target)
    return plan


def paired_swaps(
    ends: tuple[Variant, Variant], pairs: list[list[Swap]], notes: list[str], registry: Registry
) -> list[Variant]:
    """A row per pair of ``pairs``: the base with every part of the pair swapped at once, each
    to its named value or the target's (named ``axis=value+axis=value``, its axis ``axis+axis``)."""
    base, target = ends
    rows = []
    for parts in pairs:
        name = "+".join(f"{axis}={value}" for axis, value, _ in parts)
        change = {axis: swap_value(target.config, axis) if over is None else over for axis, _, over in parts}
        try:
            swapped = resolve_config(base.config, change, registry=registry)
        except ZooError as err:
            notes.append(f"paired swap {name} skipped: it cannot be applied ({err})")
            continue
        rows.append(Variant(name, "+".join(axis for axis, _, _ in parts), swapped))
    return rows


def cumulative_path(
    ends: tuple[Variant, Variant],
    swappable: list[tuple[str, Any]],
    path: bool | list[str],
    notes: list[str],
    registry: Registry,
) -> list[Variant]:
    """Base, base + swap 1, base + swaps 1-2, ..., target, in ``path``'s order."""
    base, target = ends
    values = dict(swappable)
    given = [] if path is True else [str(axis) for axis in path]  # type: ignore[union-attr]
    unknown = [axis for axis in given if axis not in values]
    if unknown or len(set(given)) != len(given):
        raise InputError(
            f"the path names {', '.join(repr(a) for a in unknown) or 'an axis twice'}; it takes each of "
            f"the swappable differences at most once: {', '.join(values) or 'none'} (--path AXIS,AXIS,...)"
        )
    plan = [base]
    overrides: dict[str, Any] = {}
    for axis in [*given, *(a for a in values if a not in given)]:
        trial = {**overrides, axis: swap_value(target.config, axis)}
        try:
            config = resolve_config(base.config, trial, registry=registry)
        except ZooError as err:
            notes.append(f"path step {axis}={values[axis]} skipped: it cannot be applied here ({err})")
            continue
        overrides = trial
        if config == target.config:
            continue  # the last step is the target itself, trained below
        plan.append(Variant(f"+{axis}={values[axis]}", axis, config))
    plan.append(target)
    return plan
