"""DeepSeek-V3 and V2 (transformers' ``deepseek_v3``, ``deepseek_v2``), and GLM-4-MoE and dots.llm1,
which route as V3: V3 extends Llama (pre-norm RMSNorm, rotary, SwiGLU) with zoo-modern's
``mla`` attention and DeepSeek's routing as options of ``moe``; V2 extends V3 and routes as
V2 did. GLM-4 MoE Lite extends V3 (its dense layers by ``mlp_layer_types``), Youtu extends V3
with a dense SwiGLU in every layer, MiniCPM3 extends Youtu with rotary in halves and Granite's
multipliers; Solar Open extends Llama with V3's routing in every layer.

- Attention: multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``, the nope/rope/v
  widths); the rotary turns the ``qk_rope_head_dim`` parts, pairs interleaved (V3's
  ``rope_interleave``; V2 always).
- MLP: the first ``first_k_dense_replace`` layers a dense SwiGLU of ``intermediate_size``
  (a ``layer_pattern``), the rest a mixture with ``n_shared_experts`` shared experts as one
  ungated SwiGLU, its weights times ``routed_scaling_factor``. V3: sigmoid scores, the
  ``e_score_correction_bias`` to choose, top-``topk_group`` of ``n_group`` groups (worth
  their top two), renormalised. V2: softmax, ``greedy`` or ``group_limited_greedy`` (a
  group worth its best), never renormalised (transformers' V2 ignores ``norm_topk_prob``).

GLM-4-MoE (GLM-4.5) extends V3: V3's routing (GLM's defaults) over grouped-query attention
with rotary on half of each head, optional q/k/v biases and QK-norm per head.

dots.llm1 extends GLM-4-MoE: QK-norm per head always, the whole head turned, ``attention_bias``
on the output too; its sliding layers (none in the released files) are refused. EXAONE-MoE
extends dots.llm1: EXAONE 4's windows (rotary on the sliding layers only), no biases, the
experts named ``num_experts``, ``num_shared_experts``, dense layers by ``mlp_layer_types``.

Scaled rotary (the released checkpoints' YaRN) is read as the rotary's ``scaling``; its
``mscale_all_dim`` multiplies the scores' scale by mscale(factor, mscale_all_dim)^2, as
transformers folds it in (``mla``'s ``scale``), and export writes it back. Not modelled,
refused: ``attention_bias``, and quantised weights (the released V3's FP8
``quantization_config``: convert them to bf16). The multi-token-prediction modules
(``num_nextn_predict_layers``) are not part of transformers' forward and are ignored as it
ignores them, as are the original code's deployment and training switches (``ep_size``,
``aux_loss_alpha``, ``seq_aux``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zoo.plugin import REQUIRED, Converter, Count, Experts, F, ModelConfig, Positive, Rule, W
from zoo_modern.families.llama_kin import (
    WINDOW_PATTERN,
    rotary_on_sliding,
    rotary_on_sliding_blockers,
    rotary_on_sliding_out,
)
from zoo_modern.families.llama_like import (
    HEAD_DIM,
    LLAMA,
    LLAMA_ROTARY,
    QK_NORMS,
    has_qkv_bias,
    head_dim,
    llama_read,
)
from zoo_modern.families.moe import also_at, dense, routes, stacked_experts, unlike
from zoo_modern.families.readers import (
    IGNORED,
    Rotary,
    qknorm,
    refuse_unless,
    rope,
    rope_scaling,
    rotary_base,
    scaling_to_hf,
    score_mscale,
    with_layer_changes,
    yarn_mscale,
)
from zoo_modern.moe import MoeOptions


def mla(config: ModelConfig) -> dict[str, Any]:
    return dict(config.attention.options)


def routing(config: ModelConfig) -> MoeOptions:
    """The mixture's options (the model's MLP; its first layers may be dense)."""
    return MoeOptions.model_validate(config.mlp.options)


def dense_layers(config: ModelConfig) -> int:
    """How many leading layers are a dense SwiGLU (``first_k_dense_replace``)."""
    return next((i for i in range(config.n_layers) if config.layer(i).mlp.name == "moe"), config.n_layers)


def latent_attention(hf: Mapping[str, Any], fields: dict[str, Any], where: str, interleave: bool) -> dict[str, Any]:
    """The ``mla`` attention and its rotary position (the rope parts, ``interleave``d pairs)."""
    nope, rope_dim, v = (int(hf.get(k) or d) for k, d in (("qk_nope_head_dim", 128), ("qk_rope_head_dim", 64), ("v_head_dim", 128)))  # fmt: skip
    for name, want in (("head_dim", rope_dim), ("qk_head_dim", nope + rope_dim)):
        refuse_unless(hf.get(name) in (None, want), where, name, hf.get(name), f"transformers derives it: {want}")
    q_rank = hf.get("q_lora_rank", 1536)
    attention = {"name": "mla", "q_lora_rank": int(q_rank or 0), "kv_lora_rank": int(hf.get("kv_lora_rank") or 512)}
    attention |= {"qk_nope_head_dim": nope, "qk_rope_head_dim": rope_dim, "v_head_dim": v, "head_dim": rope_dim}
    base, fraction = rope(hf, where, scaled=True)
    refuse_unless(fraction == 1.0, where, "partial_rotary_factor", fraction, "the rope parts turn whole")
    position = {"name": "rotary", "base": base, "rotary_dim": rope_dim, "interleaved": interleave}
    scaling = rope_scaling(hf, where)
    if scaling:
        position["scaling"] = scaling
        if (mscale := score_mscale(hf, where)) != 1.0:
            attention["scale"] = mscale / math.sqrt(nope + rope_dim)
    return {**fields, "attention": attention, "position": position}


def latent_attention_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    """config.json's ``mla`` fields and its rotary (the pairs' layout as ``rope_interleave``)."""
    a = mla(config)
    out = {**hf, "q_lora_rank": a.get("q_lora_rank") or None, "kv_lora_rank": a.get("kv_lora_rank")}
    out |= {name: a.get(name) for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
    out |= {"num_key_value_heads": config.n_heads, "rope_interleave": bool(config.position.options.get("interleaved"))}
    return out | {"rope_parameters": rotary_to_hf(config)}


def rotary_to_hf(config: ModelConfig) -> dict[str, Any]:
    """``rope_parameters``: the base, the scaling, and YaRN's ``mscale_all_dim`` from the
    scores' scale (what reading folded in, unfolded)."""
    params = {"rope_type": "default", "rope_theta": rotary_base(config), **scaling_to_hf(config)}
    scale = mla(config).get("scale")
    if scale:
        width = (mla(config).get("qk_nope_head_dim") or 0) + (mla(config).get("qk_rope_head_dim") or 0)
        factor = float(params.get("factor", 1.0))
        m = (math.sqrt(scale * math.sqrt(width)) - 1.0) / (0.1 * math.log(factor))
        params["mscale_all_dim"] = round(m, 12)  # the released files' short decimals, read back to the same scale
    return params


def scale_blockers(config: ModelConfig, arch: str) -> list[str]:
    """A scores' scale that config.json cannot say: only YaRN's mscale_all_dim, with a factor > 1, sets it."""
    a, scaling = mla(config), config.position.options.get("scaling") or {}
    if not a.get("scale"):
        return []
    if not a.get("qk_nope_head_dim") or not a.get("qk_rope_head_dim"):
        return [f"attention.scale without qk_nope_head_dim and qk_rope_head_dim ({arch} writes the scale as YaRN's)"]
    if scaling.get("kind") != "yarn" or yarn_mscale(float(scaling.get("factor", 1.0))) == 1.0:
        return [f"attention.scale={a['scale']} without a YaRN scaling of factor > 1 ({arch} scales scores only so)"]
    return []


@dataclass(frozen=True)
class Version:
    """How a DeepSeek version routes, and its config's defaults: V3 scores by sigmoid with a
    score bias, groups worth their top two, renormalised; V2 by softmax, no bias, a group
    worth its best (``group_limited_greedy``; ``greedy``: no groups), never renormalised."""

    name: str
    sigmoid: bool
    #: n_routed_experts, num_experts_per_tok, moe_intermediate_size, n_shared_experts, n_group,
    #: topk_group, routed_scaling_factor, first_k_dense_replace
    defaults: tuple[int, int, int, int, int, int, float, int]

    def options(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        experts, top_k, width, shared, groups, top_groups, scale, _ = self.defaults
        hidden, shared = int(hf.get("moe_intermediate_size") or width), int(hf.get("n_shared_experts", shared) or 0)
        refuse_unless(shared > 0, where, "n_shared_experts", shared, f"{self.name}'s layers have a shared expert")
        mlp = {"name": "moe", "n_experts": int(hf.get("n_routed_experts") or experts), "top_k": int(hf.get("num_experts_per_tok") or top_k)}  # fmt: skip
        mlp |= {"hidden": hidden, "shared_hidden": hidden * shared, "shared_gate": False, "aux_loss_weight": 0.0}
        mlp |= {"routed_scale": float(hf.get("routed_scaling_factor") or scale)}
        grouped = self.sigmoid or hf.get("topk_method", "greedy") == "group_limited_greedy"
        if grouped:
            mlp |= {"n_groups": int(hf.get("n_group") or groups), "top_groups": int(hf.get("topk_group") or top_groups)}
        if self.sigmoid:
            return mlp | {"scoring": "sigmoid", "score_bias": True, "normalize_top_k": bool(hf.get("norm_topk_prob", True))}  # fmt: skip
        method = hf.get("topk_method", "greedy")
        refuse_unless(method in ("greedy", "group_limited_greedy"), where, "topk_method", method, "supported: greedy, group_limited_greedy")  # fmt: skip
        return mlp | {"group_by": 1, "normalize_top_k": False}  # transformers' V2 never renormalises

    def read(self, hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        """The latent attention, the routing and the leading dense layers."""
        fields = latent_attention(hf, fields, where, bool(hf.get("rope_interleave", True)) if self.sigmoid else True)
        return self.route(hf, fields, where)

    def route(self, hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        """The routing and the dense layers: the first ``first_k_dense_replace``, or those
        ``mlp_layer_types`` names "dense" (merged into a layer pattern the fields have)."""
        layers, dense = fields["n_layers"], int(hf.get("first_k_dense_replace", self.defaults[-1]) or 0)
        types = hf.get("mlp_layer_types") or ["dense" if i < dense else "sparse" for i in range(layers)]
        refuse_unless(isinstance(types, list) and len(types) == layers and set(types) <= {"dense", "sparse"}, where, "mlp_layer_types", types, f"give {layers} of 'dense'/'sparse'")  # fmt: skip
        swiglu = {"mlp": {"name": "swiglu", "hidden": fields["d_ff"]}}
        fields = with_layer_changes(fields, [swiglu if kind == "dense" else {} for kind in types])
        return {**fields, "mlp": self.options(hf, where)}

    def write(self, config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
        out = self.write_routing(config, latent_attention_out(config, hf))
        if self.sigmoid:
            return out
        out.pop("rope_interleave")  # V2 always interleaves
        return out | {"topk_method": "group_limited_greedy" if routing(config).n_groups > 1 else "greedy"}

    def write_routing(self, config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
        """config.json's routing fields and its leading dense layers (their width ``intermediate_size``)."""
        dense = dense_layers(config)
        width = config.layer(0).mlp.options.get("hidden") if dense else config.d_ff
        return self.routing_out(config, {**hf, "first_k_dense_replace": dense, "intermediate_size": width})

    def routing_out(self, config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
        """config.json's routing fields (the experts, their widths, groups and scale)."""
        o = routing(config)
        out = {**hf, "moe_intermediate_size": o.hidden, "n_routed_experts": o.n_experts, "num_experts_per_tok": o.top_k}
        out |= {"n_shared_experts": o.shared_hidden // (o.hidden or 1), "n_group": o.n_groups}
        out |= {"topk_group": o.top_groups, "routed_scaling_factor": o.routed_scale}
        return out | ({"norm_topk_prob": o.normalize_top_k} if self.sigmoid else {})

    def blockers(self, config: ModelConfig, arch: str) -> list[str]:
        """What the version's config cannot say: routing of another kind, dense layers not leading."""
        blockers, dense = [], dense_layers(config)
        if any(config.layer(i).mlp.name != "moe" for i in range(dense, config.n_layers)):
            blockers.append(f"dense layers after the first routed one ({arch}'s dense layers lead)")
        if config.mlp.name != "moe":
            return blockers + [f"mlp {config.mlp.name!r} ({arch} routes)"]
        o = routing(config)
        wanted: dict[str, Any] = {"scoring": "sigmoid" if self.sigmoid else "softmax", "score_bias": self.sigmoid}
        wanted |= {"shared_gate": False} | ({} if self.sigmoid else {"normalize_top_k": False})
        wanted |= {"group_by": 2 if self.sigmoid else 1} if o.n_groups > 1 else {}
        blockers += unlike(config, arch, wanted)
        if not o.shared_hidden or (o.hidden and o.shared_hidden % o.hidden):
            blockers.append(f"mlp.shared_hidden={o.shared_hidden} ({arch}'s shared experts are moe_intermediate_size wide)")  # fmt: skip
        if not self.sigmoid and config.position.name == "rotary" and not config.position.options.get("interleaved"):
            blockers.append(f"rotary pairs in halves ({arch} turns neighbouring pairs)")
        return blockers + scale_blockers(config, arch)


V3 = Version("DeepSeek-V3", True, (256, 8, 2048, 1, 8, 4, 2.5, 3))
V2 = Version("DeepSeek-V2", False, (64, 6, 1407, 2, 1, 1, 1.0, 0))
DOTS1_ROUTING = Version("dots.llm1", True, (128, 6, 1408, 2, 1, 1, 1.0, 0))
GLM4 = Version("GLM-4-MoE", True, (128, 8, 1408, 1, 1, 1, 1.0, 1))  # V3's routing, GLM-4.5's defaults


def has_score_bias(config: ModelConfig) -> bool:
    return routes(config) and bool(config.mlp.options.get("score_bias"))


def q_direct(config: ModelConfig) -> bool:
    return not config.attention.options.get("q_lora_rank")


def q_latent(config: ModelConfig) -> bool:
    return not q_direct(config)


def experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """The router and the stacked experts (per expert or stacked, as the MoE families)."""
    z, h = zoo.removesuffix("router.weight"), names[0].removesuffix("gate.weight")
    projections = ("gate_proj", "up_proj", "down_proj")
    return [Rule.copy(zoo, names[0]), *stacked_experts(z + "experts.", h + "experts.", h + "experts.", projections, config)]  # fmt: skip


ATTN = "self_attn."
COUNT = F("", None, Count)
DEEPSEEK_V3 = LLAMA.derive(
    "DeepseekV3ForCausalLM",
    fresh=("layer", "read", "write", "blockers"),
    model_type="deepseek_v3",
    aliases=("sarvam_mla",),  # Sarvam's config, DeepSeek-V3's classes
    description="DeepSeek-V3: multi-head latent attention, leading dense layers, sigmoid-routed grouped experts",
    fields=dict.fromkeys(("head_dim", "qk_head_dim", "moe_intermediate_size", "n_shared_experts", "n_group"), COUNT)
    | dict.fromkeys(("topk_group", "kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim"), COUNT)
    | {"v_head_dim": COUNT, "rope_interleave": F("", None, bool)}
    | dict.fromkeys(("n_routed_experts", "num_experts_per_tok"), F("", None, Experts))
    | {"intermediate_size": F("d_ff", REQUIRED, Count, out=lambda c: c.d_ff), "first_k_dense_replace": F("", None, int)}
    | {"norm_topk_prob": F("", None, bool), "routed_scaling_factor": F("", None, Positive), "mlp_bias": None}
    | {"num_key_value_heads": IGNORED}  # MLA's keys and values are per head, from the latent
    | {"output_router_logits": IGNORED}  # transformers' DeepSeek-V3 adds no balancing term
    | {"num_nextn_predict_layers": IGNORED, "num_mtp_layers": IGNORED}  # multi-token prediction: not in its forward
    | {"moe_layer_freq": F.must(1, "transformers routes every layer from first_k_dense_replace on", int)}
    | {"scoring_func": F.must("sigmoid", "transformers' DeepSeek-V3 scores experts by sigmoid", str)}
    | {"topk_method": F.must("noaux_tc", "transformers' DeepSeek-V3 chooses by the biased scores (noaux_tc)", str)}
    | {name: IGNORED for name in ("ep_size", "aux_loss_alpha", "seq_aux")},  # deployment and training only
    zoo={"attention": {"name": "mla"}, "mlp": {"name": "moe"}},
    accepts={"attention": ()},
    layer={
        "attn_residual.norm.weight": "input_layernorm.weight",
        "attn.q.weight": W(ATTN + "q_proj.weight", when=q_direct),
        "attn.q_a.weight": W(ATTN + "q_a_proj.weight", when=q_latent),
        "attn.q_norm.weight": W(ATTN + "q_a_layernorm.weight", when=q_latent),
        "attn.q_b.weight": W(ATTN + "q_b_proj.weight", when=q_latent),
        "attn.kv_a.weight": ATTN + "kv_a_proj_with_mqa.weight",
        "attn.kv_norm.weight": ATTN + "kv_a_layernorm.weight",
        "attn.kv_b.weight": ATTN + "kv_b_proj.weight",
        "attn.out.weight": ATTN + "o_proj.weight",
        "mlp_residual.norm.weight": "post_attention_layernorm.weight",
        **{f"mlp.{p}.weight": W(f"mlp.{p}_proj.weight", when=dense) for p in ("gate", "up", "down")},
        "mlp.router.weight": W("mlp.gate.weight", when=routes, make=experts),
        "mlp.score_bias.bias": W("mlp.gate.e_score_correction_bias", when=has_score_bias),
        **{
            f"mlp.shared.{p}.weight": W(f"mlp.shared_experts.{p}_proj.weight", when=routes)
            for p in ("gate", "up", "down")
        },  # fmt: skip
    },
    skip=("rotary_emb.inv_freq", "rotary_emb.original_inv_freq"),
    engine_features=frozenset({"layer_pattern", "scale"}),  # the scores' scale: YaRN's mscale_all_dim (scale_blockers)
    read=(V3.read,),
    write=(V3.write,),
    blockers=(V3.blockers,),
)
DEEPSEEK_V2 = DEEPSEEK_V3.derive(
    "DeepseekV2ForCausalLM",
    fresh=("read", "write", "blockers"),
    model_type="deepseek_v2",
    description="DeepSeek-V2: multi-head latent attention, softmax-routed experts (greedy or group-limited), shared experts",
    fields={
        "rope_interleave": None,  # V2 always turns neighbouring pairs
        "num_nextn_predict_layers": None,
        "num_mtp_layers": None,
        "topk_method": F("", None, str),
        "scoring_func": F.must("softmax", "transformers' DeepSeek-V2 scores experts by softmax", str),
        "norm_topk_prob": IGNORED,  # transformers' V2 router never reads it
        "mlp_bias": F.must(False, "biases in the SwiGLU projections are not modelled", bool),
    },
    read=(V2.read,),
    write=(V2.write,),
    blockers=(V2.blockers,),
)


def glm4_moe_attention(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Grouped-query ``qknorm`` attention of its own head_dim: an RMSNorm per head on q and k
    with ``use_qk_norm`` (else none), biases on q, k and v with ``attention_bias``."""
    spec = {"name": "qknorm", "qk_norm": "head" if hf.get("use_qk_norm") else "none", "out_bias": False}
    return {**fields, "attention": {**fields["attention"], **spec, "qkv_bias": bool(hf.get("attention_bias"))}}


def glm4_moe_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    return {**hf, "use_qk_norm": qk_normed(config), "attention_bias": has_qkv_bias(config)}


def glm4_moe_blockers(config: ModelConfig, arch: str) -> list[str]:
    o = config.attention.options
    ok = o.get("qk_norm", "head") in ("head", "none") and not o.get("qk_norm_after") and not o.get("out_bias")
    return (
        [] if ok else [f"attention {dict(o)} ({arch}: QK-norm per head or none, before the rotation; no output bias)"]
    )


def qk_normed(config: ModelConfig) -> bool:
    return config.attention.name == "qknorm" and config.attention.options.get("qk_norm", "head") == "head"


GLM4_MOE_ROTARY = Rotary(share=0.5, partial=True)
MLA_FIELDS = ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim", "qk_head_dim")
MLA_WEIGHTS = ("q", "q_a", "q_b", "kv_a", "kv_norm", "kv_b")
# GLM-4-MoE (GLM-4.5) extends DeepSeek-V3: V3's routing over grouped-query attention, rotary on
# half of each head (halves), optional q/k/v biases and QK-norm per head.
GLM4_MOE = DEEPSEEK_V3.derive(
    "Glm4MoeForCausalLM",
    fresh=("read", "write", "blockers"),
    model_type="glm4_moe",
    description="GLM-4-MoE (GLM-4.5): DeepSeek-V3's routing over grouped-query attention, half-head rotary",
    fields={name: None for name in (*MLA_FIELDS, "rope_interleave")}
    | {"num_key_value_heads": LLAMA.fields["num_key_value_heads"], "head_dim": HEAD_DIM}
    | {"attention_bias": F("", None, bool), "use_qk_norm": F("", None, bool)},
    zoo={"attention": {"name": "qknorm"}},
    layer={f"attn.{name}.weight": None for name in MLA_WEIGHTS}
    | {k: v for k, v in LLAMA.layer.items() if k.startswith("attn.qkv")}
    | {name: W(stored, when=qk_normed) for name, stored in QK_NORMS.items()},
    read=(head_dim(None), llama_read, glm4_moe_attention, GLM4_MOE_ROTARY.read, GLM4.route),
    write=(GLM4_MOE_ROTARY.write, GLM4.write_routing, glm4_moe_write),
    blockers=(GLM4_MOE_ROTARY.blockers, GLM4.blockers, glm4_moe_blockers),
)


def dots1_attention(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """QK-norm per head always; ``attention_bias`` on q, k, v and the output; no sliding layers."""
    layers, window = fields["n_layers"], hf.get("sliding_window")
    types = hf.get("layer_types") or ["full_attention" if window is None or i < hf.get("max_window_layers", 62) else "sliding" for i in range(layers)]  # fmt: skip
    refuse_unless(set(types) <= {"full_attention"}, where, "layer_types", types, "a window on some layers is not modelled here")  # fmt: skip
    bias = bool(hf.get("attention_bias"))
    spec = {"name": "qknorm", "qk_norm": "head", "qkv_bias": bias, "out_bias": bias}
    return {**fields, "attention": {**fields["attention"], **spec}}


def dots1_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    kinds = {"sliding_window": None, "max_window_layers": config.n_layers, "layer_types": ["full_attention"] * config.n_layers}  # fmt: skip
    return {**hf, **kinds, "attention_bias": has_qkv_bias(config)}


def dots1_blockers(config: ModelConfig, arch: str) -> list[str]:
    _, qkv, out = Converter.attention_layout(config)
    ok = qk_normed(config) and qkv == out and not config.attention.options.get("qk_norm_after")
    return [] if ok else [f"attention {dict(config.attention.options)} ({arch}: QK-norm per head, biases on all four or none)"]  # fmt: skip


# dots.llm1 extends GLM-4-MoE: QK-norm per head always, the whole head turned, attention_bias on the output too.
DOTS1 = GLM4_MOE.derive(
    "Dots1ForCausalLM",
    fresh=("read", "write", "blockers"),
    model_type="dots1",
    description="dots.llm1: Qwen3's attention (QK-norm per head), DeepSeek-V3's routing",
    fields={
        "use_qk_norm": None,
        **{name: F("", None) for name in ("sliding_window", "max_window_layers", "layer_types")},
    },  # fmt: skip
    layer={"attn.out.bias": W(ATTN + "o_proj.bias", when=lambda c: Converter.attention_layout(c)[2]), **QK_NORMS},
    read=(head_dim(None), llama_read, dots1_attention, LLAMA_ROTARY.read, DOTS1_ROUTING.route),
    write=(LLAMA_ROTARY.write, DOTS1_ROUTING.write_routing, dots1_write),
    blockers=(LLAMA_ROTARY.blockers, DOTS1_ROUTING.blockers, dots1_blockers),
)

EXAONE_ROUTING = Version("EXAONE-MoE", True, (64, 8, 1024, 1, 1, 1, 2.5, 1))
EXAONE_BIAS = also_at("mlp.", "mlp.gate.")  # under the router in transformers 5's own layout
EXAONE_NAMES = {"n_routed_experts": "num_experts", "n_shared_experts": "num_shared_experts"}


def exaone_route(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """V3's routing under EXAONE's names (``num_experts``, ``num_shared_experts``)."""
    return EXAONE_ROUTING.route({**hf, **{ours: hf[theirs] for ours, theirs in EXAONE_NAMES.items() if theirs in hf}}, fields, where)  # fmt: skip


def exaone_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    out = EXAONE_ROUTING.write_routing(config, hf)
    out |= {theirs: out.pop(ours) for ours, theirs in EXAONE_NAMES.items()}
    return out | {"mlp_layer_types": ["sparse" if routes(config.layer(i)) else "dense" for i in range(config.n_layers)]}


def exaone_window_blockers(config: ModelConfig, arch: str) -> list[str]:
    """EXAONE 4's windows and rotary, its layers' MLPs set apart (the routing's dense layers)."""
    blockers = [b for b in rotary_on_sliding_blockers(config, arch) if not b.startswith("per-layer ")]
    changes = {kind for i in range(config.n_layers) for kind in config.layer_changes(i)} - {"attention", "position", "mlp"}  # fmt: skip
    return blockers + ([f"per-layer {', '.join(sorted(changes))} ({arch} has one design)"] if changes else [])


# EXAONE-MoE extends dots.llm1: EXAONE 4's windows (rotary on the sliding layers only), no biases, EXAONE's names.
EXAONE_MOE = DOTS1.derive(
    "ExaoneMoeForCausalLM",
    fresh=("read", "write", "blockers"),
    model_type="exaone_moe",
    description="EXAONE-MoE: EXAONE 4's attention and windows before each sub-layer, DeepSeek-V3's routing",
    fields={**WINDOW_PATTERN, "max_window_layers": None, "attention_bias": None, "mlp_layer_types": F("", None)}
    | {"num_experts": F("", None, Experts), "num_shared_experts": F("", None, Count)}
    | {"n_routed_experts": None, "n_shared_experts": None},
    zoo={"attention": {"name": "qknorm", "qk_norm": "head", "qkv_bias": False, "out_bias": False}},
    layer={
        "attn.out.bias": None,
        "mlp.score_bias.bias": W("mlp.e_score_correction_bias", when=has_score_bias, make=EXAONE_BIAS),
    },
    engine_features=frozenset({"layer_pattern", "window"}),
    read=(head_dim(None), llama_read, LLAMA_ROTARY.read, rotary_on_sliding(True), exaone_route),
    write=(LLAMA_ROTARY.write, rotary_on_sliding_out, exaone_write),
    blockers=(LLAMA_ROTARY.blockers, EXAONE_ROUTING.blockers, exaone_window_blockers),
)


def mlp_types_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    types = ["sparse" if config.layer(i).mlp.name == "moe" else "dense" for i in range(config.n_layers)]
    return {k: v for k, v in hf.items() if k != "first_k_dense_replace"} | {"mlp_layer_types": types}


LITE = Version("GLM-4 MoE Lite", True, (64, 4, 1536, 1, 1, 1, 1.8, 1))
# GLM-4 MoE Lite (GLM-4.7-Flash) extends DeepSeek-V3: its dense layers named by mlp_layer_types, its own defaults.
GLM4_MOE_LITE = DEEPSEEK_V3.derive(
    "Glm4MoeLiteForCausalLM",
    fresh=("read", "write", "blockers"),
    model_type="glm4_moe_lite",
    description="GLM-4 MoE Lite: DeepSeek-V3's latent attention and routing, dense layers by mlp_layer_types",
    fields={"first_k_dense_replace": None, "num_nextn_predict_layers": None, "mlp_layer_types": F("", None)},
    read=(LITE.read,),
    write=(LITE.write, mlp_types_out),
    blockers=(lambda config, arch: [b for b in LITE.blockers(config, arch) if not b.startswith("dense layers after")],),
)


def dense_latent(interleaved: bool | None) -> Any:
    """A reader of the ``mla`` attention over a dense SwiGLU, its rotary pairs ``interleaved``
    (None: unless ``rope_interleave`` is false)."""

    def read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        pairs = bool(hf.get("rope_interleave", True)) if interleaved is None else interleaved
        fields = latent_attention(hf, fields, where, pairs)
        return {**fields, "mlp": {"name": "swiglu", "hidden": fields["d_ff"]}}

    return read


ROUTED: tuple[str, ...] = (
    "moe_intermediate_size",
    "n_routed_experts",
    "num_experts_per_tok",
    "n_shared_experts",
    "n_group",
)
ROUTED += ("topk_group", "first_k_dense_replace", "norm_topk_prob", "routed_scaling_factor", "output_router_logits")
# Youtu extends DeepSeek-V3: its latent attention over a dense SwiGLU in every layer, a tied head.
YOUTU = DEEPSEEK_V3.derive(
    "YoutuForCausalLM",
    fresh=("read", "write", "blockers"),
    model_type="youtu",
    description="Youtu-LLM: DeepSeek-V3's multi-head latent attention, a dense SwiGLU in every layer",
    fields={name: None for name in (*ROUTED, "num_nextn_predict_layers", "num_mtp_layers")}
    | {"embedding_initializer_range": IGNORED, "tie_word_embeddings": F("tie_embeddings", True, bool)},
    zoo={"mlp": {"name": "swiglu"}},
    engine_features=frozenset({"scale"}),  # YaRN's mscale_all_dim, as V3's
    read=(dense_latent(None),),
    write=(latent_attention_out,),
    blockers=(scale_blockers,),
)


def minicpm_scales(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Embeddings times ``scale_emb``, each sub-layer's output times scale_depth / sqrt(layers),
    the final states divided by hidden_size / dim_model_base (a null: no scaling)."""
    layers, d = fields["n_layers"], fields["d_model"]
    emb, depth, base = float(hf.get("scale_emb", 12)), hf.get("scale_depth", 1.4), hf.get("dim_model_base", 256)
    residual = 1.0 if depth is None else float(depth) / math.sqrt(layers)
    fields = {**fields, "embedding_scale": "none" if emb == 1.0 else emb, "logit_scale": (base or d) / d}
    return {**fields, "placement": {"name": "pre_scaled", "residual_scale": residual}}


def minicpm_blockers(config: ModelConfig, arch: str) -> list[str]:
    base = config.logit_scale * config.d_model
    blockers = [f"logit_scale={config.logit_scale} ({arch}'s is a whole dim_model_base / hidden_size)"] if abs(base - round(base)) > 1e-6 or base < 1 else []  # fmt: skip
    return blockers + (["rotary pairs interleaved (MiniCPM3 turns halves)"] if config.position.options.get("interleaved") else [])  # fmt: skip


# MiniCPM3 extends Youtu: rotary in halves (as Llama's), Granite's multipliers on the embeddings,
# each sub-layer's output and the logits (from scale_emb, scale_depth, dim_model_base).
MINICPM3 = YOUTU.derive(
    "MiniCPM3ForCausalLM",
    model_type="minicpm3",
    description="MiniCPM3: multi-head latent attention, a dense SwiGLU, scaled embeddings, residuals and logits",
    fields={"rope_interleave": None, "embedding_initializer_range": None, "mlp_bias": LLAMA.fields["mlp_bias"]}
    | {
        "scale_emb": F("", 12, Positive, out=lambda c: 1.0 if c.embedding_scale == "none" else float(c.embedding_scale))
    }  # fmt: skip
    | {
        "scale_depth": F(
            "",
            1.4,
            Positive,
            out=lambda c: float(c.placement.options.get("residual_scale", 1.0)) * math.sqrt(c.n_layers),
        )
    }  # fmt: skip
    | {"dim_model_base": F("", 256, Count, out=lambda c: round(c.logit_scale * c.d_model))},
    zoo={"placement": {"name": "pre_scaled"}},
    accepts={"embedding_scale": ("*",), "logit_scale": ("*",)},
    fresh=("read",),
    read=(dense_latent(False), minicpm_scales),
    write=(lambda config, hf: {k: v for k, v in hf.items() if k != "rope_interleave"},),
    blockers=(minicpm_blockers,),
)


SOLAR = Version("Solar Open", True, (128, 8, 1280, 1, 1, 1, 1.0, 0))
MOE_LAYER = {k: v for k, v in DEEPSEEK_V3.layer.items() if k.startswith("mlp.") and ("router" in k or "shared" in k or "score" in k)}  # fmt: skip
# Solar Open extends Llama: DeepSeek-V3's routing in every layer (as GLM-4 MoE's), q/k/v for an
# explicit head_dim, Llama's rotary (transformers' Solar Open turns whole heads only).
SOLAR_OPEN = LLAMA.derive(
    "SolarOpenForCausalLM",
    model_type="solar_open",
    description="Solar Open: Llama's attention, sigmoid-routed grouped experts and a shared one in every layer",
    fields={k: DEEPSEEK_V3.fields[k] for k in ROUTED if k != "first_k_dense_replace"}
    | {"intermediate_size": None, "head_dim": HEAD_DIM, "mlp_bias": None},
    zoo={"attention": qknorm("none"), "mlp": {"name": "moe"}},
    accepts={"attention": ()},
    layer={f"mlp.{p}.weight": None for p in ("gate", "up", "down")} | MOE_LAYER,
    fresh=("read", "write", "blockers"),
    read=(lambda hf, fields, where: {**fields, "d_ff": None}, head_dim(128), llama_read, LLAMA_ROTARY.read)
    + (lambda hf, fields, where: {**fields, "mlp": SOLAR.options(hf, where)},),
    write=(LLAMA_ROTARY.write, SOLAR.routing_out),
    blockers=(
        LLAMA_ROTARY.blockers,
        SOLAR.blockers,
        lambda c, arch: [f"dense layers ({arch} routes in every one)"] if dense_layers(c) else [],
    ),  # fmt: skip
)

FAMILIES = (DEEPSEEK_V3, DEEPSEEK_V2, GLM4_MOE, DOTS1, EXAONE_MOE, GLM4_MOE_LITE, YOUTU, MINICPM3, SOLAR_OPEN)
