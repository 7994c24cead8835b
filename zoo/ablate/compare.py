"""The differences between two configs, axis by axis: what ``zoo compare`` shows and what
an ablation swaps."""

from __future__ import annotations

from typing import Any

from zoo.errors import ZooError, number
from zoo.nn.config import ModelConfig
from zoo.nn.marks import SHOWN
from zoo.nn.registry import KINDS, Registry, default_registry

# The order of rows in a comparison: architecture, components, switches, then sizes.
AXES: tuple[str, ...] = (
    "architecture",
    "attention",
    "position",
    "activation",
    "placement",
    "norm",
    "mlp",
    "init",
    "embedding_scale",
    "head_output",
    "logit_scale",
    "tie_embeddings",
    "final_norm",
    "bias",
    "norm_eps",
    "dropout",
    "vocab_size",
    "max_seq_len",
    "d_model",
    "n_layers",
    "n_encoder_layers",
    "n_heads",
    "d_ff",
)

#: Differences the shared training scale overrides, so an ablation never swaps them.
SIZE_AXES = frozenset({"vocab_size", "max_seq_len", "d_model", "n_layers", "n_encoder_layers", "n_heads", "d_ff"})


def diff_configs(a: ModelConfig, b: ModelConfig, *, registry: Registry | None = None) -> list[tuple[str, Any, Any]]:
    """The fields where ``a`` and ``b`` differ, as ``(axis, value_a, value_b)``, in the
    order of ``AXES``.

    Components appear by name, with any option that differs from its default in
    brackets (``"sinusoidal"``, ``"gqa(n_kv_heads=2)"``); dropout as a number when its
    three rates agree; every other field as its value.
    """
    registry = registry or default_registry()
    rows = []
    for axis in (*AXES, *(name for name in ModelConfig.model_fields if name not in AXES)):
        value_a, value_b = _shown(a, axis, registry), _shown(b, axis, registry)
        if value_a != value_b:
            rows.append((axis, value_a, value_b))
    return rows


def _shown(config: ModelConfig, axis: str, registry: Registry) -> Any:
    value = getattr(config, axis)
    if axis in KINDS:
        options = value.options
        try:
            model = registry.get(axis, value.name).options_model
            defaults = model().model_dump()
            shown = {k for k, f in model.model_fields.items() if isinstance(f.json_schema_extra, dict)
                     and f.json_schema_extra.get(SHOWN)}  # fmt: skip
        except (ZooError, ValueError):  # a component whose options have no defaults
            defaults, shown = {}, set()
        changed = {k: v for k, v in options.items() if k in shown or defaults.get(k, object()) != v}
        text = ", ".join(f"{k}={number(v) if isinstance(v, float) else repr(v)}" for k, v in changed.items())
        return f"{value.name}({text})" if changed else value.name
    if axis == "dropout":
        rates = value.model_dump()
        return rates["embedding"] if len(set(rates.values())) == 1 else rates
    return value


def swap_value(config: ModelConfig, axis: str) -> Any:
    """The exact value of ``axis`` in ``config``, as an override (components with options)."""
    value = getattr(config, axis)
    return value.model_dump() if hasattr(value, "model_dump") else value
