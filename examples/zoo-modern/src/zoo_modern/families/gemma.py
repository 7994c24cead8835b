"""Gemma's lineage after Gemma (``llama_like``): Gemma 2, Gemma 3 and VaultGemma, whose scores are
scaled by ``query_pre_attn_scalar`` and may be soft-capped, over local (windowed) and global layers."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.plugin import Count, F, Fraction, ModelConfig, Positive
from zoo_modern.families.llama_kin import KINDS, LAYER_TYPES, VARIES, default_types, write_layer_types
from zoo_modern.families.llama_like import GELU_TANH, GEMMA, QK_NORMS, head_dim, llama_read
from zoo_modern.families.readers import (
    IGNORED,
    Rotary,
    layer_windows,
    qknorm,
    refuse_unless,
    rotary_base,
    window_blockers,
    window_per_layer,
    with_layer_changes,
)


def capped_scores(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Gemma 2's scores scaled by query_pre_attn_scalar^-1/2 and soft-capped, its logits capped
    (a null cap: none), local windows on the sliding layers (every other one by default)."""
    attention = {**fields["attention"], "scale": float(hf.get("query_pre_attn_scalar", 256)) ** -0.5}
    cap, final = hf.get("attn_logit_softcapping", 50.0), hf.get("final_logit_softcapping", 30.0)
    attention |= {} if cap is None else {"softcap": float(cap)}
    fields = {**fields, "attention": attention, "logit_softcap": None if final is None else float(final)}
    return default_types(4096, lambda i: i % 2 == 0)(hf, fields, where)


def capped_scores_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    options = config.attention.options
    scalar = config.head_dim if options.get("scale") is None else float(options["scale"]) ** -2
    scalar = round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar
    caps = {"attn_logit_softcapping": options.get("softcap"), "final_logit_softcapping": config.logit_softcap}
    return {**write_layer_types(config, hf), "query_pre_attn_scalar": scalar, **caps}


#: Gemma 2's fields beyond Gemma's, VaultGemma's too.
CAPPED = {
    **LAYER_TYPES,
    "hidden_act": None,
    "hidden_activation": F("activation", "gelu_pytorch_tanh", str, GELU_TANH),
    "query_pre_attn_scalar": F("", 256, Positive),
    "attn_logit_softcapping": F("", None, Positive),  # absent: 50; null: no cap
    "final_logit_softcapping": F("", None, Positive),  # absent: 30; null: no cap
    "max_position_embeddings": F("max_seq_len", 8192, Count),
}
SANDWICH: dict[str, str | None] = {"attn_residual.norm.weight": None, "mlp_residual.norm.weight": None}
SANDWICH |= {"attn_residual.norm_in.weight": "input_layernorm.weight", "attn_residual.norm_out.weight": "post_attention_layernorm.weight"}  # fmt: skip
SANDWICH |= {"mlp_residual.norm_in.weight": "pre_feedforward_layernorm.weight", "mlp_residual.norm_out.weight": "post_feedforward_layernorm.weight"}  # fmt: skip

# Gemma 2 extends Gemma: sandwich norms, scaled and soft-capped scores, local/global layers, capped logits.
GEMMA2 = GEMMA.derive(
    "Gemma2ForCausalLM",
    model_type="gemma2",
    description="Gemma 2: Gemma's parts, sandwich norms, local/global layers, soft-capped scores and logits",
    fields={**CAPPED, "hidden_act": IGNORED},  # older files repeat hidden_activation there; transformers ignores it
    zoo={"placement": "sandwich", "attention": qknorm("none", qk_norm_offset=False)},
    accepts={"attention": ()},
    layer=SANDWICH,
    engine_features=frozenset({"window", "softcap", "scale", "logit_softcap", "layer_pattern"}),
    before=(head_dim(256),),
    read=(capped_scores,),
    write=(capped_scores_out,),
    blockers=(window_blockers,),
)


def local_rotary(hf: Mapping[str, Any], where: str) -> tuple[float, float]:
    """``(global base, local base)``: from ``rope_parameters`` per layer type
    (transformers 5), else ``rope_theta`` and ``rope_local_base_freq``; scaled variants refused."""
    params = hf.get("rope_parameters") or {}
    if set(KINDS) & set(params):
        tables = {kind: dict(params.get(kind) or {}) for kind in ("full_attention", "sliding_attention")}
    else:
        tables = {
            "full_attention": {**params, **(hf.get("rope_scaling") or {}), "rope_theta": hf.get("rope_theta", 1e6)},
            "sliding_attention": {"rope_theta": hf.get("rope_local_base_freq", 1e4)},
        }
    bases = {}
    for kind, table in tables.items():
        rope_type = table.get("rope_type", table.get("type", "default"))
        why = "scaled rotary is not modelled"
        refuse_unless(rope_type == "default", where, f"rope_parameters.{kind}.rope_type", rope_type, why)
        base = bases[kind] = table.get("rope_theta", 1e6 if kind == "full_attention" else 1e4)
        good = isinstance(base, (int, float)) and not isinstance(base, bool) and base > 1
        refuse_unless(good, where, f"rope_parameters.{kind}.rope_theta", base, "it must be a number > 1")
    return float(bases["full_attention"]), float(bases["sliding_attention"])


def gemma3_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Gemma 2's scores (never capped), windows and their own rotary base on the sliding layers (5 of 6 by default)."""
    layers, every = fields["n_layers"], int(hf.get("sliding_window_pattern") or 6)
    types = hf.get("layer_types") or [
        "sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)
    ]
    capped = {**hf, "layer_types": types, "attn_logit_softcapping": None}  # read, but never capping scores
    fields = capped_scores({**capped, "final_logit_softcapping": hf.get("final_logit_softcapping")}, fields, where)
    return typed_bases(hf, {k: v for k, v in fields.items() if k != "layer_pattern"}, where, types, 4096)


def typed_bases(hf: Mapping[str, Any], fields: dict[str, Any], where: str, types: Any, window: int) -> dict[str, Any]:
    """Windows (``sliding_window``, ``window`` by default) on the layers ``types`` names sliding, their rotary base
    the sliding type's, the model's the full type's (``local_rotary``), merged into the fields' layer pattern."""
    base, local = local_rotary(hf, where)
    windows = layer_windows({"layer_types": types}, fields["n_layers"], fields["max_seq_len"], hf.get("sliding_window", window))  # fmt: skip
    entries: list[dict[str, Any]] = []
    for kind, size in zip(types, windows, strict=True):
        entry: dict[str, Any] = {"attention": {"window": size}} if size is not None else {}
        entries.append(entry | ({"position": {"base": local}} if kind == "sliding_attention" and local != base else {}))
    return with_layer_changes({**fields, "position": {"name": "rotary", "base": base}}, entries)


def gemma3_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    windows = window_per_layer(config)
    local = next((rotary_base(config.layer(i)) for i, w in enumerate(windows) if w is not None), 10000.0)
    bases = {"full_attention": rotary_base(config), "sliding_attention": local}
    return {**hf, "rope_parameters": {kind: {"rope_type": "default", "rope_theta": bases[kind]} for kind in KINDS}}


def gemma3_blockers(config: ModelConfig, arch: str) -> list[str]:
    """A rotary base per layer type: one for the sliding layers, the model's own for the full ones."""
    blockers, windows = window_blockers(config, arch, VARIES), window_per_layer(config)
    bases = {rotary_base(config.layer(i)) for i, w in enumerate(windows) if w is not None}
    full = {rotary_base(config.layer(i)) for i, w in enumerate(windows) if w is None}
    names = {config.layer(i).position.name for i in range(config.n_layers)}
    if names != {"rotary"} or len(bases) > 1 or (full and full != {rotary_base(config)}):
        blockers.append(f"positions other than one rotary base per layer type ({arch})")
    return blockers


# Gemma 3 extends Gemma 2: QK-norm per head (1 + w), a rotary base of the local layers' own, no score capping.
GEMMA3 = GEMMA2.derive(
    "Gemma3ForCausalLM",
    model_type="gemma3_text",
    description="Gemma 3 (text): Gemma 2's layout, QK-norm, 5 local : 1 global layers, a local rotary base",
    fields={"rope_local_base_freq": F("", None, Positive), "sliding_window_pattern": F("", None, Count)}
    | {"partial_rotary_factor": F.must(1.0, "Gemma 3 rotates the whole head", Fraction)}
    | {"max_position_embeddings": F("max_seq_len", 131072, Count)}
    | {"_sliding_window_pattern": IGNORED},  # saved beside layer_types
    zoo={"attention": qknorm("head", qk_norm_offset=True)},
    layer=QK_NORMS,
    engine_features=frozenset({"window", "scale", "logit_softcap", "layer_pattern"}),
    fresh=("read", "write", "blockers"),
    before=(head_dim(256),),
    read=(llama_read, gemma3_read),
    write=(capped_scores_out, gemma3_write),
    blockers=(Rotary().blockers, gemma3_blockers),
)

# VaultGemma extends Gemma: Gemma 2's capped, scaled scores and local/global layers, a norm before each sub-layer only.
VAULTGEMMA = GEMMA.derive(
    "VaultGemmaForCausalLM",
    model_type="vaultgemma",
    description="VaultGemma: Gemma 2's soft-capped scores and logits and local/global layers, pre-norm only",
    fields={**CAPPED, "use_bidirectional_attention": None},
    layer={"mlp_residual.norm.weight": "pre_feedforward_layernorm.weight"},
    engine_features=GEMMA2.engine_features,
    read=(capped_scores,),
    write=(capped_scores_out,),
    blockers=(window_blockers,),
)

FAMILIES = (GEMMA2, GEMMA3, VAULTGEMMA)
