"""Dense families of 2025-2026 that extend a table of ``llama_like`` or ``llama_kin``: BitNet
(unquantised weights), Cohere Compass (text).

Each family opens with the one it extends and how; the table says the rest.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.plugin import Epsilon, F, Family, ModelConfig, Positive
from zoo_modern.families.llama_kin import (
    COHERE2,
    KINDS,
    per_layer_rotary,
    per_layer_rotary_blockers,
    per_layer_rotary_out,
)
from zoo_modern.families.llama_like import LLAMA, llama_read
from zoo_modern.families.readers import IGNORED, Rotary, qknorm, refuse_unless
from zoo_modern.families.ungated import RELU2

# BitNet extends Llama: a ReLU-squared gate, an RMSNorm before each output projection (the attention's, the MLP's).
BITNET = LLAMA.derive(
    "BitNetForCausalLM",
    model_type="bitnet",
    description="BitNet b1.58 (unquantised weights): Llama's layout, a ReLU-squared gate, RMSNorms before o_proj and down_proj",
    fields={"mlp_bias": None, "head_dim": None, "pretraining_tp": None, "hidden_act": RELU2}
    | {"rms_norm_eps": F("norm_eps", 1e-5, Epsilon)},
    zoo={"attention": qknorm("none", sub_norm=True), "mlp": {"name": "glu", "sub_norm": True}, "activation": "relu2"},
    accepts={"attention": ()},
    layer={"attn.sub_norm.weight": "self_attn.attn_sub_norm.weight", "mlp.sub_norm.weight": "mlp.ffn_sub_norm.weight"},
)

PLAIN_ROTARY = Rotary()


def rope_per_type(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """``rope_parameters`` as a table per layer type (null: no rotary there), each layer's
    rotary base and, on the layers ``layer_types`` names sliding, the window; the logits' scale."""
    layers, params = fields["n_layers"], hf.get("rope_parameters") or {}
    types = hf.get("layer_types") or ["full_attention"] * layers
    tables = {kind: params.get(kind) for kind in KINDS}
    why = "a table with a rope_theta (or null: no rotary) for each of layer_types, as transformers' Cohere Compass reads it"
    ok = set(types) <= set(params) <= set(KINDS) and all(t is None or "rope_theta" in t for t in tables.values())
    refuse_unless(ok, where, "rope_parameters", params, why)
    bases = {kind: PLAIN_ROTARY.read({"rope_parameters": t}, fields, where)["position"]["base"] if t else 0.0 for kind, t in tables.items()}  # fmt: skip
    thetas = [bases[kind] for kind in types]
    fields = {**fields, "position": {"name": "rotary", "base": next((t for t in thetas if t), 10000.0)}}
    fields["logit_scale"] = float(hf.get("logit_scale") or 1.0)  # null: unscaled
    per_layer = {"layer_types": types, "layer_rope_theta": thetas, "sliding_window": hf.get("sliding_window", 4096)}
    return per_layer_rotary(per_layer, fields, where)


def rope_per_type_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    hf = per_layer_rotary_out(config, hf)
    bases = dict(zip(hf["layer_types"], hf.pop("layer_rope_theta"), strict=True))
    return {**hf, "rope_parameters": {kind: {"rope_type": "default", "rope_theta": t} if t else None for kind, t in bases.items()}}  # fmt: skip


def one_base_per_type(config: ModelConfig, arch: str) -> list[str]:
    out = per_layer_rotary_out(config, {})
    pairs = set(zip(out["layer_types"], out["layer_rope_theta"], strict=True))
    return [] if len(pairs) == len(dict(pairs)) else [f"rotary bases that differ within a layer type ({arch} has one per type)"]  # fmt: skip


# Cohere Compass (text) extends Cohere 2: rotary in halves (no reordering), a rotary table (or none) per
# layer type, every layer full by default, logits unscaled by default.
COHERE_COMPASS = COHERE2.derive(
    "CohereCompassForCausalLM",
    model_type="cohere_compass_text",
    description="Cohere Compass (text): Cohere's parallel layout, a window and a rotary table per layer type",
    fields={"sliding_window_pattern": None, "pooling": IGNORED}  # the classifier's
    | {"logit_scale": F("", None, Positive, out=lambda c: c.logit_scale)},
    layer={"attn.qkv.weight": LLAMA.layer["attn.qkv.weight"]},
    fresh=("read", "write", "blockers"),
    read=(llama_read, rope_per_type),
    write=(rope_per_type_out,),
    blockers=(PLAIN_ROTARY.blockers, per_layer_rotary_blockers, one_base_per_type),
)

FAMILIES: tuple[Family, ...] = (BITNET, COHERE_COMPASS)
