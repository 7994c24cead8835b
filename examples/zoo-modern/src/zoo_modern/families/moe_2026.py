"""Mixture-of-experts families of 2025-2026: HY3, Mellum, Flint, Kolibri 1, MiniCPM5-MoE, Aria (text), each its nearest
relative's table (``deepseek``, ``moe``) and what differs, said in the comment above it (``docs/families.md``: the rest).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

from zoo.plugin import Count, Epsilon, Experts, F, ModelConfig, Positive, Rule, W
from zoo_modern.families import deepseek as ds
from zoo_modern.families.deltanet_hybrids import gated_qkv
from zoo_modern.families.gemma import gemma3_blockers, gemma3_write, typed_bases
from zoo_modern.families.llama_kin import SANDWICH, Reader, rotary_on_sliding, rotary_on_sliding_out, write_layer_types
from zoo_modern.families.llama_like import LLAMA, LLAMA_ROTARY, head_dim, llama_read
from zoo_modern.families.moe import QWEN3_MOE, Routing, also_at, dense, has_shared, options, routed, routes, unlike
from zoo_modern.families.readers import IGNORED, Rotary, qknorm, refuse_unless, window_blockers, with_layer_changes

NO_BIAS = "biases on the projections are not modelled"
HY3 = ds.Version("HY3", True, (192, 8, 1536, 1, 1, 1, 2.826, 1))
HY3_NAMES = {**ds.EXAONE_NAMES, "routed_scaling_factor": "router_scaling_factor"}
V3_ONLY = ("first_k_dense_replace", "n_group", "topk_group", "norm_topk_prob")  # V3's, not HY3's


def rotary_from(base: float) -> Reader:
    """Llama's rotary reader, ``base`` where config.json names none (the config class's ``default_theta``)."""
    return lambda hf, fields, where: LLAMA_ROTARY.read({"rope_theta": base, **hf}, fields, where)


def hy3_route(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """V3's routing under HY3's names, one group, renormalised; dense layers by ``mlp_layer_types`` (the first)."""
    given = {k: v for k, v in hf.items() if k not in (*V3_ONLY, *HY3_NAMES)}
    return HY3.route(given | {ours: hf[theirs] for ours, theirs in HY3_NAMES.items() if theirs in hf}, fields, where)


def hy3_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """The router under ``router.gate`` (transformers 5's ``gate`` too), the experts as V3's."""
    router, *rest = ds.experts(zoo, (names[0].replace("router.gate", "gate"),), config)
    return [replace(Rule.copy(zoo, names[0]), also=(router,)), *rest]


# HY3 extends EXAONE-MoE: no windows, one group of experts, always renormalised, its own names.
HY_V3 = ds.EXAONE_MOE.derive(
    "HYV3ForCausalLM",
    model_type="hy_v3",
    description="HY3: QK-normed grouped-query attention, sigmoid-routed experts with a score bias and a shared one",
    fields=dict.fromkeys(("sliding_window", "sliding_window_pattern", "layer_types", "routed_scaling_factor", *V3_ONLY))
    | {"router_scaling_factor": F("", None, Positive), "enable_moe_fp32_combine": IGNORED}  # float32 sums: no change
    | {"attention_bias": F.must(False, NO_BIAS, bool), "mlp_bias": F.must(False, NO_BIAS, bool)}
    | {"rms_norm_eps": F("norm_eps", 1e-5, Epsilon)},
    layer={"mlp.router.weight": W("mlp.router.gate.weight", when=routes, make=hy3_experts)}
    | {"mlp.score_bias.bias": W("mlp.expert_bias", when=ds.has_score_bias)}
    | {f"mlp.shared.{p}.weight": W(f"mlp.shared_mlp.{p}_proj.weight", when=routes) for p in ("gate", "up", "down")},
    engine_features=frozenset({"layer_pattern"}),
    fresh=("read", "write", "blockers"),
    read=(head_dim(128), llama_read, rotary_from(11_158_840.0), hy3_route),
    write=(LLAMA_ROTARY.write, lambda c, hf: {HY3_NAMES.get(k, k): v for k, v in ds.exaone_write(c, hf).items() if k not in V3_ONLY}),
    blockers=(LLAMA_ROTARY.blockers, lambda c, arch: [b for b in HY3.blockers(c, arch) if not b.startswith("dense layers after")])
    + (lambda c, arch: window_blockers(c, arch, ("mlp",)) + (unlike(c, arch, {"n_groups": 1, "normalize_top_k": True}) if routes(c) else []),),
)  # fmt: skip


def dense_by_types(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """A dense SwiGLU ``intermediate_size`` wide on the layers ``mlp_layer_types`` names dense."""
    layers, types = fields["n_layers"], hf.get("mlp_layer_types") or ["sparse"] * fields["n_layers"]
    refuse_unless(isinstance(types, list) and len(types) == layers and set(types) <= {"dense", "sparse"}, where, "mlp_layer_types", types, f"give {layers} of 'dense'/'sparse'")  # fmt: skip
    return with_layer_changes(fields, [{"mlp": {"name": "swiglu", "hidden": fields["d_ff"]}} if t == "dense" else {} for t in types])  # fmt: skip


def typed_windows_blockers(config: ModelConfig, arch: str) -> list[str]:
    """Gemma 3's windows and rotary bases per layer type, each layer's MLP its own (dense or routed)."""
    found = [b for b in gemma3_blockers(config, arch) if not b.startswith("per-layer ")]
    return found + [b for b in window_blockers(config, arch, ("attention", "position", "mlp")) if b.startswith("per-layer ")]  # fmt: skip


MELLUM_ROUTING = Routing(defaults=(64, 8, 896, True))
MELLUM_ROPE = {"full_attention": {"rope_type": "default", "rope_theta": 500000.0}, "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}  # fmt: skip
# Mellum extends Qwen3-MoE: windows on the sliding layers, a rotary base per layer type, dense layers by mlp_layer_types.
MELLUM = QWEN3_MOE.derive(
    "MellumForCausalLM",
    model_type="mellum",
    description="Mellum: Qwen3-MoE's layers, windows and a rotary base per layer type, dense layers by mlp_layer_types",
    fields=dict.fromkeys(("use_sliding_window", "max_window_layers", "decoder_sparse_step", "mlp_only_layers"))
    | {"mlp_layer_types": F("", None)} | dict.fromkeys(("num_nextn_predict_layers", "mtp_layer_types", "mtp_mlp_layer_types"), IGNORED),
    layer={f"mlp.{p}.weight": W(f"mlp.{p}_proj.weight", when=dense) for p in ("gate", "up", "down")}
    | {"mlp.router.weight": W("mlp.gate.weight", when=routes, make=MELLUM_ROUTING.experts)},
    ignored=("mtp.",),  # the multi-token-prediction layer, which transformers never loads either
    fresh=("read", "write", "blockers"),
    read=(head_dim(128), llama_read, lambda hf, f, where: typed_bases({**hf, "rope_parameters": hf.get("rope_parameters") or MELLUM_ROPE}, f, where, hf.get("layer_types") or ["full_attention"] * f["n_layers"], 1024), MELLUM_ROUTING.read, dense_by_types),
    write=(gemma3_write, write_layer_types, MELLUM_ROUTING.write, ds.mlp_types_out),
    blockers=(Rotary().blockers, MELLUM_ROUTING.blockers, typed_windows_blockers),
)  # fmt: skip


def flint_route(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Sigmoid scores (no bias), an ungated shared expert; dense layers at mlp_only_layers and off decoder_sparse_step."""
    only, step = hf.get("mlp_only_layers"), int(hf.get("decoder_sparse_step") or 1)
    only = [0, 1] if only is None else only
    refuse_unless(isinstance(only, list), where, "mlp_only_layers", only, "give a list of layer indices")
    swiglu = {"mlp": {"name": "swiglu", "hidden": fields["d_ff"]}}
    fields = with_layer_changes(fields, [swiglu if i in only or (i + 1) % step else {} for i in range(fields["n_layers"])])  # fmt: skip
    shared = {"shared_hidden": int(hf.get("shared_expert_intermediate_size", 1024) or 0), "shared_gate": False}
    return {**fields, "mlp": {**fields["mlp"], "scoring": "sigmoid", "top_k_eps": 0.0, **shared}}


def flint_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    dense_at = [i for i in range(config.n_layers) if dense(config.layer(i))]
    return {**hf, "mlp_only_layers": dense_at, "decoder_sparse_step": 1, "shared_expert_intermediate_size": options(config).shared_hidden}  # fmt: skip


def sliding_defaults(full: Callable[[int, int], bool], without_window: bool) -> Reader:
    """``rotary_on_sliding``, with transformers' defaults where config.json leaves them out: a
    window of 513, full attention on the layers ``full(i, layers)`` picks."""
    read = rotary_on_sliding(without_window)

    def fill(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        layers = fields["n_layers"]
        types = hf.get("layer_types") or ["full_attention" if full(i, layers) else "sliding_attention" for i in range(layers)]  # fmt: skip
        return read({**hf, "sliding_window": hf.get("sliding_window", 513), "layer_types": types}, fields, where)

    return fill


FLINT_ROUTING = Routing(defaults=(256, 6, 512, True), shared=None)
FLINT_WANTS = {"scoring": "sigmoid", "score_bias": False, "n_groups": 1, "shared_gate": False, "routed_scale": 1.0, "top_k_eps": 0.0}  # fmt: skip
# Flint extends Mellum: sinks, rotary on the sliding layers alone, sigmoid routing beside an ungated shared expert.
FLINT = MELLUM.derive(
    "FlintForCausalLM",
    model_type="flint",
    description="Flint: QK-normed attention with sinks, windows and rotary on the sliding layers, sigmoid-routed experts",
    fields={"mlp_layer_types": None, "decoder_sparse_step": F("", None, int), "mlp_only_layers": F("", None)}
    | dict.fromkeys(("num_nextn_predict_layers", "mtp_layer_types", "mtp_mlp_layer_types")),
    zoo={"attention": {**QWEN3_MOE.zoo["attention"], "name": "sinks"}},
    layer={"attn.sinks": "self_attn.softmax_offset", "mlp.router.weight": W("mlp.gate.weight", when=routes, make=FLINT_ROUTING.experts)}
    | {f"mlp.shared.{p}.weight": W(f"mlp.shared_expert.{p}_proj.weight", when=has_shared) for p in ("gate", "up", "down")},
    ignored=(),
    fresh=("read", "write", "blockers"),
    read=(head_dim(128), llama_read, LLAMA_ROTARY.read, sliding_defaults(lambda i, n: i < 2 or i % 4 == 1 or i == n - 1, False))
    + (FLINT_ROUTING.read, flint_route),
    write=(LLAMA_ROTARY.write, rotary_on_sliding_out, FLINT_ROUTING.write, flint_write),
    blockers=(LLAMA_ROTARY.blockers, FLINT_ROUTING.blockers, ds.exaone_window_blockers)
    + (lambda c, arch: unlike(c, arch, FLINT_WANTS) if routes(c) else [],),
)  # fmt: skip


def kolibri1_route(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Flint's routing in every layer, a score bias added to the logits choosing the experts."""
    fields = flint_route({**hf, "mlp_only_layers": [], "decoder_sparse_step": 1}, fields, where)
    return {**fields, "mlp": {**fields["mlp"], "score_bias": True, "logit_bias": True}}


KOLIBRI1_ROUTING = Routing(defaults=(384, 6, 512, False), shared=None)
KOLIBRI1_LACKS = ("mlp_only_layers", "decoder_sparse_step", "intermediate_size", "router_aux_loss_coef")
# Kolibri 1 extends Flint: EXAONE 4's attention and windows in GLM-4's sandwich, every layer routed, the bias on the logits.
KOLIBRI1 = FLINT.derive(
    "Kolibri1ForCausalLM",
    model_type="kolibri1",
    description="Kolibri 1: QK-normed attention, windows and rotary on the sliding layers, sandwich norms, routed experts",
    fields={"intermediate_size": F("d_ff", None, Count), "attention_bias": None, "decoder_sparse_step": None, "mlp_only_layers": None},
    zoo={"attention": QWEN3_MOE.zoo["attention"], "placement": "sandwich"},
    layer={"attn.sinks": None, "attn_residual.norm.weight": None, "mlp_residual.norm.weight": None, **SANDWICH}
    | {"attn_residual.norm_out.weight": W("post_attn_norm.weight", make=also_at("post_attn_norm", "post_self_attn_layernorm"))}
    | {"mlp_residual.norm_out.weight": W("post_ffn_norm.weight", make=also_at("post_ffn_norm", "post_mlp_layernorm"))}
    | {"mlp.score_bias.bias": W("moe.router.expert_bias", make=also_at("moe.router.expert_bias", "mlp.gate.e_score_correction_bias"))}
    | {f"mlp.shared.{p}.weight": W(f"mlp.shared_experts.{p}_proj.weight", when=has_shared) for p in ("gate", "up", "down")},
    fresh=("read", "write", "blockers"),
    read=(head_dim(128), llama_read, LLAMA_ROTARY.read, sliding_defaults(lambda i, n: (i + 1) % 5 == 0, True))
    + (KOLIBRI1_ROUTING.read, kolibri1_route),
    write=(LLAMA_ROTARY.write, rotary_on_sliding_out, KOLIBRI1_ROUTING.write, lambda c, hf: {k: v for k, v in flint_write(c, hf).items() if k not in KOLIBRI1_LACKS}),
    blockers=(LLAMA_ROTARY.blockers, KOLIBRI1_ROUTING.blockers, ds.exaone_window_blockers)
    + (lambda c, arch: [f"dense layers ({arch} routes in every one)"] if any(dense(c.layer(i)) for i in range(c.n_layers)) else unlike(c, arch, FLINT_WANTS | {"score_bias": True, "logit_bias": True}),),
)  # fmt: skip

MINICPM5 = ds.Version("MiniCPM5-MoE", True, (160, 16, 512, 1, 1, 1, 3.66, 1))
# MiniCPM5-MoE extends GLM-4-MoE: an output gate per head's channel (q_proj's second half per head), no QK-norm, whole heads turned.
MINICPM5_MOE = ds.GLM4_MOE.derive(
    "MiniCPM5MoeForCausalLM",
    model_type="minicpm5_moe",
    description="MiniCPM5-MoE: output-gated grouped-query attention, DeepSeek-V3's routing, dense layers by mlp_layer_types",
    fields={"use_qk_norm": None, "attention_bias": F.must(False, NO_BIAS, bool), "mlp_layer_types": F("", None)}
    | {"use_gated_attention": F.must(True, "MiniCPM5-MoE's attention is gated (transformers refuses false)", bool)},
    zoo={"attention": qknorm("none", output_gate=True)},
    layer={"attn.qkv.weight": W("self_attn.{}_proj.weight", parts="qkv", make=gated_qkv), "attn.qkv.bias": None},
    fresh=("read", "write", "blockers"),
    read=(head_dim(128), llama_read, rotary_from(5e6), MINICPM5.route),
    write=(LLAMA_ROTARY.write, MINICPM5.write_routing, ds.mlp_types_out),
    blockers=(LLAMA_ROTARY.blockers, lambda c, arch: [b for b in MINICPM5.blockers(c, arch) if not b.startswith("dense layers after")]),
)  # fmt: skip


def aria_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """The router, and the experts stacked as (in, out): ``fc1`` (E, d, 2 x hidden), columns [gate | up], ``fc2``."""
    z, h, pairs = zoo.removesuffix("router.weight"), names[0].removesuffix("router.weight"), (("gate_up", "fc1"), ("down", "fc2"))  # fmt: skip
    return [Rule.copy(zoo, names[0])] + [Rule(f"{z}experts.{a}.weight", (f"{h}experts.{b}.weight",), lambda ts: ts[0].transpose(1, 2), lambda t: [t.transpose(1, 2).contiguous()]) for a, b in pairs]  # fmt: skip


def aria_shared(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """An ungated shared SwiGLU, ``moe_num_shared_experts`` experts wide."""
    return {**fields, "mlp": {**fields["mlp"], "shared_hidden": fields["mlp"]["hidden"] * int(hf.get("moe_num_shared_experts", 2) or 0), "shared_gate": False}}  # fmt: skip


def aria_blockers(config: ModelConfig, arch: str) -> list[str]:
    o = options(config) if routes(config) else None
    return [] if o is None or o.shared_hidden % (o.hidden or 1) == 0 and not o.shared_gate else [f"a gated shared expert or one not a whole number of experts wide ({arch})"]  # fmt: skip


# Aria (text) extends Llama: top-k routed experts stored (in, out), an ungated shared expert as wide as some experts.
ARIA_TEXT = routed(
    LLAMA, "AriaTextForCausalLM",
    Routing(experts_field="moe_num_experts", hidden_field="intermediate_size", top_k_field="moe_topk", defaults=(8, 2, 4096, True), always_normalized=True, shared=None),
    model_type="aria_text",
    description="Aria (text): Llama's attention, top-k routed SwiGLU experts beside an ungated shared one",
    fields={"moe_num_experts": F("", None, Experts), "moe_topk": F("", None, Experts), "moe_num_shared_experts": F("", None, int)},
    layer={"mlp.router.weight": W("mlp.router.weight", make=aria_experts)}
    | {f"mlp.shared.{p}.weight": W(f"mlp.shared_experts.{p}_proj.weight", when=has_shared) for p in ("gate", "up", "down")},
    read=(aria_shared,),
    write=(lambda c, hf: {**hf, "moe_num_shared_experts": options(c).shared_hidden // (options(c).hidden or 1)},),
    blockers=(aria_blockers,),
)  # fmt: skip

FAMILIES = (HY_V3, MELLUM, FLINT, KOLIBRI1, MINICPM5_MOE, ARIA_TEXT)
