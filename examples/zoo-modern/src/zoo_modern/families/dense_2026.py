"""Families of 2025-2026 that extend a table of ``llama_like``, ``llama_kin`` or ``deepseek``: BitNet
(unquantised weights), Cohere Compass (text), DiffLlama; AFMoE (EXAONE-MoE's kin).

Each family opens with the one it extends and how; the table says the rest.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from zoo.plugin import Converter, Count, Epsilon, F, Family, ModelConfig, Positive, Rule, W
from zoo_modern.families import llama_kin as kin
from zoo_modern.families.deepseek import EXAONE_MOE, Version, exaone_window_blockers, experts, has_score_bias
from zoo_modern.families.llama_like import LLAMA, LLAMA_ONLY, LLAMA_ROTARY, head_dim, llama_read
from zoo_modern.families.moe import routes, unlike
from zoo_modern.families.readers import IGNORED, Rotary, qknorm, refuse_unless
from zoo_modern.families.ungated import RELU2

# BitNet extends Llama: a ReLU-squared gate, an RMSNorm before each output projection (the attention's, the MLP's).
BITNET = LLAMA.derive(
    "BitNetForCausalLM",
    model_type="bitnet",
    description="BitNet b1.58 (unquantised weights): Llama's layout, a ReLU-squared gate, RMSNorms before o_proj and down_proj",
    fields={**LLAMA_ONLY, "hidden_act": RELU2, "rms_norm_eps": F("norm_eps", 1e-5, Epsilon)},
    zoo={"attention": qknorm("none", sub_norm=True), "mlp": {"name": "glu", "sub_norm": True}, "activation": "relu2"},
    accepts={"attention": ()},
    layer={"attn.sub_norm.weight": "self_attn.attn_sub_norm.weight", "mlp.sub_norm.weight": "mlp.ffn_sub_norm.weight"},
    fresh=("read",),  # transformers' BitNet turns by a base of 500000 where config.json names none
    read=(llama_read, lambda hf, fields, where: LLAMA_ROTARY.read({"rope_theta": 500000.0, **hf}, fields, where)),
)

PLAIN_ROTARY = Rotary()


def rope_per_type(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """``rope_parameters`` as a table per layer type (null: no rotary there), each layer's
    rotary base and, on the layers ``layer_types`` names sliding, the window; the logits' scale."""
    layers, params = fields["n_layers"], hf.get("rope_parameters") or {}
    types = hf.get("layer_types") or ["full_attention"] * layers
    tables = {kind: params.get(kind) for kind in kin.KINDS}
    why = "a table with a rope_theta (or null: no rotary) for each of layer_types, as transformers' Cohere Compass reads it"
    ok = set(types) <= set(params) <= set(kin.KINDS) and all(t is None or "rope_theta" in t for t in tables.values())
    refuse_unless(ok, where, "rope_parameters", params, why)
    bases = {kind: PLAIN_ROTARY.read({"rope_parameters": t}, fields, where)["position"]["base"] if t else 0.0 for kind, t in tables.items()}  # fmt: skip
    thetas = [bases[kind] for kind in types]
    fields = {**fields, "position": {"name": "rotary", "base": next((t for t in thetas if t), 10000.0)}}
    fields["logit_scale"] = float(hf.get("logit_scale") or 1.0)  # null: unscaled
    per_layer = {"layer_types": types, "layer_rope_theta": thetas, "sliding_window": hf.get("sliding_window", 4096)}
    return kin.per_layer_rotary(per_layer, fields, where)


def rope_per_type_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    hf = kin.per_layer_rotary_out(config, hf)
    bases = dict(zip(hf["layer_types"], hf.pop("layer_rope_theta"), strict=True))
    return {**hf, "rope_parameters": {kind: {"rope_type": "default", "rope_theta": t} if t else None for kind, t in bases.items()}}  # fmt: skip


def one_base_per_type(config: ModelConfig, arch: str) -> list[str]:
    out = kin.per_layer_rotary_out(config, {})
    pairs = set(zip(out["layer_types"], out["layer_rope_theta"], strict=True))
    return [] if len(pairs) == len(dict(pairs)) else [f"rotary bases that differ within a layer type ({arch} has one per type)"]  # fmt: skip


# Cohere Compass (text) extends Cohere 2: rotary in halves (no reordering), a rotary table (or none) per
# layer type, every layer full by default, logits unscaled by default.
COHERE_COMPASS = kin.COHERE2.derive(
    "CohereCompassForCausalLM",
    model_type="cohere_compass_text",
    description="Cohere Compass (text): Cohere's parallel layout, a window and a rotary table per layer type",
    fields={"sliding_window_pattern": None, "pooling": IGNORED}  # pooling: the classifier's
    | {"logit_scale": F("", None, Positive, out=lambda c: c.logit_scale)}
    | dict.fromkeys(("rope_theta", "partial_rotary_factor", "rope_scaling")),  # rope_parameters' tables only
    layer={"attn.qkv.weight": LLAMA.layer["attn.qkv.weight"]},
    fresh=("read", "write", "blockers"),
    read=(llama_read, rope_per_type),
    write=(rope_per_type_out,),
    blockers=(PLAIN_ROTARY.blockers, kin.per_layer_rotary_blockers, one_base_per_type),
)

AFMOE_ROUTING = Version("AFMoE", True, (64, 6, 1408, 2, 1, 1, 1.0, 1))
#: DeepSeek-V3's names of the routing (and Cohere 2's of the windows' pattern) -> AFMoE's.
AFMOE_NAMES = {"n_routed_experts": "num_experts", "n_shared_experts": "num_shared_experts", "routed_scaling_factor": "route_scale"}  # fmt: skip
AFMOE_NAMES |= {"first_k_dense_replace": "num_dense_layers", "sliding_window_pattern": "global_attn_every_n_layers"}


def afmoe_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Rotary and the window on the sliding layers (a full one every ``global_attn_every_n_layers``),
    rotary there without a window too; DeepSeek-V3's routing after ``num_dense_layers`` dense ones."""
    hf = {**hf, **{ours: hf[theirs] for ours, theirs in AFMOE_NAMES.items() if theirs in hf}}
    hf |= {"sliding_window": hf.get("sliding_window", 1024) or fields["max_seq_len"]}
    return AFMOE_ROUTING.route(hf, kin.rotary_on_sliding(False)(hf, fields, where), where)


def afmoe_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    out = AFMOE_ROUTING.write_routing(config, kin.rotary_on_sliding_out(config, hf))
    out |= {theirs: out.pop(ours) for ours, theirs in AFMOE_NAMES.items() if ours in out}
    return {k: v for k, v in out.items() if k not in ("n_group", "topk_group", "norm_topk_prob")}


def gated_rows(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """qkv, rows [q | k | v | gate], from q_proj, k_proj, v_proj and gate_proj."""
    q, kv = config.n_heads * config.head_dim, Converter.attention_layout(config)[0] * config.head_dim
    return Rule.concat(zoo, names, (q, kv, kv, q))


def router_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    return [Rule.copy(zoo, names[0]), *experts(zoo, (names[0].replace("router.gate", "gate"),), config)[1:]]


def afmoe_blockers(config: ModelConfig, arch: str) -> list[str]:
    return unlike(config, arch, {"n_groups": 1, "normalize_top_k": True, "top_k_eps": None}) if routes(config) else []


NORMS = {"attn_residual.norm_in": "input_layernorm", "attn_residual.norm_out": "post_attention_layernorm"}
NORMS |= {"mlp_residual.norm_in": "pre_mlp_layernorm", "mlp_residual.norm_out": "post_mlp_layernorm"}
AFMOE_LAYER: dict[str, str | None] = {f"{z}.weight": f"{h}.weight" for z, h in NORMS.items()}
AFMOE_LAYER |= dict.fromkeys(("attn_residual.norm.weight", "mlp_residual.norm.weight", "attn.qkv.bias"))
# AFMoE extends EXAONE-MoE: a norm before and after each sub-layer, output-gated attention, rotary on the
# sliding layers only, AFMoE's names of the routing, embeddings times sqrt(d_model) with mup_enabled.
AFMOE = EXAONE_MOE.derive(
    "AfmoeForCausalLM",
    model_type="afmoe",
    description="AFMoE (Trinity): gated QK-normed attention, sandwich norms, sigmoid-routed experts after dense layers",
    fields=dict.fromkeys(("aux_loss_alpha", "ep_size", "mlp_layer_types", "moe_layer_freq", "n_group", "topk_group"))
    | dict.fromkeys(("norm_topk_prob", "num_mtp_layers", "num_nextn_predict_layers", "pretraining_tp", "seq_aux"))
    | dict.fromkeys(("scoring_func", "topk_method", *AFMOE_NAMES))
    | {"num_dense_layers": F("", None, int), "route_scale": F("", None, Positive)}
    | {"global_attn_every_n_layers": F("", None, Count), "attention_bias": LLAMA.fields["attention_bias"]}
    | {"mup_enabled": F("embedding_scale", False, bool, {False: "none", True: "sqrt_d_model"})}
    | {"rms_norm_eps": F("norm_eps", 1e-5, Epsilon), "max_position_embeddings": F("max_seq_len", 16384, Count)},
    zoo={"placement": "sandwich", "attention": {**EXAONE_MOE.zoo["attention"], "output_gate": True}},
    accepts={"embedding_scale": ("sqrt_d_model",)},
    layer=AFMOE_LAYER
    | {"attn.qkv.weight": W("self_attn.{}_proj.weight", parts=("q", "k", "v", "gate"), make=gated_rows)}
    | {"mlp.router.weight": W("mlp.router.gate.weight", when=routes, make=router_experts)}
    | {"mlp.score_bias.bias": W("mlp.expert_bias", when=has_score_bias)},
    fresh=("read", "write", "blockers"),
    read=(head_dim(128), llama_read, LLAMA_ROTARY.read, afmoe_read),
    write=(LLAMA_ROTARY.write, afmoe_write),
    blockers=(LLAMA_ROTARY.blockers, AFMOE_ROUTING.blockers, exaone_window_blockers, afmoe_blockers),
)


def diff_layers(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Each layer's lambda_init, 0.8 - 0.6 exp(-0.3 l) at depth l, as transformers' DiffLlama sets it."""
    return {**fields, "layer_pattern": [{"attention": {"lambda_init": 0.8 - 0.6 * math.exp(-0.3 * i)}} for i in range(fields["n_layers"])]}  # fmt: skip


def diff_blockers(config: ModelConfig, arch: str) -> list[str]:
    want = [e["attention"]["lambda_init"] for e in diff_layers({}, {"n_layers": config.n_layers}, "")["layer_pattern"]]
    found = [i for i, w in enumerate(want) if config.layer(i).attention.options.get("lambda_init") != w]
    return [f"lambda_init of layers {found} ({arch}'s is 0.8 - 0.6 exp(-0.3 l) at layer l)"] if found else []


# DiffLlama extends Llama: differential attention (pairs of heads, a lambda_init per layer).
DIFFLLAMA = LLAMA.derive(
    "DiffLlamaForCausalLM",
    model_type="diffllama",
    description="DiffLlama: Llama's layout with differential attention (two softmaxes per head pair, their difference)",
    fields={"mlp_bias": None, "pretraining_tp": None, "lambda_std_dev": IGNORED}  # lambda_std_dev: the initialisation's
    | {"attention_dropout": F.must(0.0, "transformers' DiffLlama has no dropout in its attention", float)}
    | {"rms_norm_eps": F("norm_eps", 1e-5, Epsilon)},
    zoo={"attention": {"name": "diff", "qk_norm": "none", "qkv_bias": False, "out_bias": False}},
    accepts={"attention": ()},
    layer={f"attn.lambda_{p}": f"self_attn.lambda_{p}" for p in ("q1", "k1", "q2", "k2")},
    engine_features=frozenset({"layer_pattern"}),
    before=(head_dim(None),),
    read=(diff_layers,),
    blockers=(diff_blockers,),
)

FAMILIES: tuple[Family, ...] = (BITNET, COHERE_COMPASS, AFMOE, DIFFLLAMA)
