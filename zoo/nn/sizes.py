"""Sizes that follow the model's: a preset shrunk with ``--set d_model=64`` keeps its shape.

A released family's preset spells out absolute sizes (Qwen3's ``head_dim = 128``, an
MLP's ``hidden = 3072``, ``d_ff``, GPT-J's ``rotary_dim = 64``). Built smaller, those
would stay at the released size, making a tiny model huge or invalid. So when overrides
change ``d_model`` or ``n_heads``, every such size they leave unset scales with them:

- ``d_ff`` (when the preset sets it) and each component option marked
  ``{SCALES_WITH: "d_model"}`` by the ratio of the new ``d_model`` to the old (at least 1);
- each option marked ``{SCALES_WITH: "head_dim"}`` by the ratio of the new per-head width
  ``d_model / n_heads`` to the old, rounded to an even number (rotary pairs; at least 2).

- each option marked ``{SCALES_WITH: "n_heads"}`` (``n_kv_heads``) stays while it divides
  the new ``n_heads``, else becomes the nearest count that keeps as many query heads per
  key/value head (Qwen3's 8 key/value heads for 16 heads: 2 for 4), or fewer.

An option the overrides set keeps the value given. Lengths do not scale: a sliding
``window`` or a rotary scaling's original length stay in positions. Sizes inside a
``layer_pattern`` entry scale as the model's do (DeepSeek's dense layers, a hybrid's scans),
unless the overrides give a ``layer_pattern`` of their own. A component
marks an option through its field's ``json_schema_extra``, e.g.
``Field(None, gt=0, json_schema_extra={SCALES_WITH: "d_model"})``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

from zoo.errors import ZooError
from zoo.nn.marks import SCALES_WITH
from zoo.nn.registry import KINDS, Registry

#: What a marked option may be relative to (``SCALES_WITH``, ``zoo.nn.marks``).
RELATIVE_TO = ("d_model", "head_dim", "n_heads")


class Widths(NamedTuple):
    """The model's width and heads before and after the overrides."""

    old_d: int
    new_d: int
    old_h: int
    new_h: int

    def scaled(self, value: int, relative_to: str) -> int:
        """``value`` at the new width of what it is ``relative_to``."""
        if relative_to == "head_dim":
            ratio = (self.new_d // self.new_h) / (self.old_d // self.old_h)
            return max(2, 2 * round(value * ratio / 2))
        if relative_to == "n_heads":  # a count: kept while it divides, else as many heads per group
            if self.new_h % value == 0:
                return value
            target = max(1, self.new_h // max(1, self.old_h // value))
            while self.new_h % target:
                target -= 1
            return target
        return max(1, round(value * self.new_d / self.old_d))


def _number(value: Any) -> int | None:
    """``value`` as a size, None when it is no whole number above 0 (validation says so)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


def widths(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> Widths | None:
    """The widths ``overrides`` change ``base``'s to; None when they change none (or are not sizes)."""
    old_d, old_h = _number(base.get("d_model")), _number(base.get("n_heads"))
    if old_d is None or old_h is None:
        return None
    new_d, new_h = _number(overrides.get("d_model", old_d)), _number(overrides.get("n_heads", old_h))
    if new_d is None or new_h is None or old_d < old_h or new_d < new_h or (old_d, old_h) == (new_d, new_h):
        return None
    return Widths(old_d, new_d, old_h, new_h)


def _spec(value: Any) -> dict[str, Any] | None:
    """A component given as a name or a mapping, as a mapping (None for anything else)."""
    if isinstance(value, str):
        return {"name": value}
    return dict(value) if isinstance(value, Mapping) else None


def scaled_sizes(base: Mapping[str, Any], overrides: Mapping[str, Any], registry: Registry) -> dict[str, Any]:
    """``overrides`` plus the sizes of ``base`` (raw config fields) they leave unset, scaled to
    the ``d_model`` and ``n_heads`` they set (in each ``layer_pattern`` entry too)."""
    found = widths(base, overrides)
    if found is None:
        return dict(overrides)
    out = dict(overrides)
    d_ff = _number(base.get("d_ff"))
    if "d_ff" not in overrides and d_ff is not None:
        out["d_ff"] = found.scaled(d_ff, "d_model")
    for kind in KINDS:
        spec, given = _spec(base.get(kind)), _spec(overrides.get(kind, {}))
        sizes = _component_sizes(kind, spec, given, None, found, registry)
        if sizes:
            out[kind] = {**(given or {}), **sizes}
    pattern = base.get("layer_pattern")
    if "layer_pattern" not in overrides and isinstance(pattern, list | tuple):
        entries = [_scaled_entry(entry, base, found, registry) for entry in pattern]
        if entries != list(pattern):
            out["layer_pattern"] = entries
    return out


def _scaled_entry(entry: Any, base: Mapping[str, Any], found: Widths, registry: Registry) -> Any:
    """A ``layer_pattern`` entry with its components' sizes scaled (a name it omits is the model's)."""
    if not isinstance(entry, Mapping):
        return entry
    scaled = dict(entry)
    for kind, value in entry.items():
        spec, model = _spec(value), _spec(base.get(kind))
        name = (spec or {}).get("name") or (model or {}).get("name")
        sizes = _component_sizes(kind, spec, {}, name, found, registry)
        if sizes and spec is not None:
            scaled[kind] = {**spec, **sizes}
    return scaled


def _component_sizes(
    kind: str, spec: dict[str, Any] | None, given: dict[str, Any] | None, name: Any, found: Widths, registry: Registry
) -> dict[str, int]:
    """The marked sizes of component ``spec`` (named ``name``, else its own) that ``given`` leaves unset, scaled."""
    if spec is None or given is None or given.get("name", spec.get("name")) != spec.get("name"):
        return {}  # none, or swapped for another component: the new one's own options hold
    try:
        fields = registry.get(kind, str(name or spec.get("name"))).options_model.model_fields
    except ZooError:
        return {}  # an unknown component: validation names it
    sizes: dict[str, int] = {}
    for option, info in fields.items():
        extra = info.json_schema_extra
        relative_to = extra.get(SCALES_WITH) if isinstance(extra, dict) else None
        value = _number(spec.get(option))
        if relative_to in RELATIVE_TO and option not in given and value is not None:
            sizes[option] = found.scaled(value, str(relative_to))
    return sizes


__all__ = ["RELATIVE_TO", "Widths", "scaled_sizes", "widths"]
