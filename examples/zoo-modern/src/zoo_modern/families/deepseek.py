"""DeepSeek-V3 and V2 (transformers' ``deepseek_v3``, ``deepseek_v2``): V3 extends Llama
(pre-norm RMSNorm, rotary, SwiGLU) with zoo-modern's ``mla`` attention and DeepSeek's routing
as options of ``moe``; V2 extends V3 and routes as V2 did.

- Attention: multi-head latent attention (``q_lora_rank``, ``kv_lora_rank``, the nope/rope/v
  widths); the rotary turns the ``qk_rope_head_dim`` parts, pairs interleaved (V3's
  ``rope_interleave``; V2 always).
- MLP: the first ``first_k_dense_replace`` layers a dense SwiGLU of ``intermediate_size``
  (a ``layer_pattern``), the rest a mixture with ``n_shared_experts`` shared experts as one
  ungated SwiGLU, its weights times ``routed_scaling_factor``. V3: sigmoid scores, the
  ``e_score_correction_bias`` to choose, top-``topk_group`` of ``n_group`` groups (worth
  their top two), renormalised. V2: softmax, ``greedy`` or ``group_limited_greedy`` (a
  group worth its best), never renormalised (transformers' V2 ignores ``norm_topk_prob``).

Not modelled, refused: scaled rotary (YaRN's ``mscale_all_dim`` folds into the scores'
scale), ``attention_bias``. The multi-token-prediction modules (``num_nextn_predict_layers``)
are not part of transformers' forward and are ignored as it ignores them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from zoo.plugin import REQUIRED, Count, Experts, F, ModelConfig, Positive, Rule, W
from zoo_modern.families.llama_like import LLAMA
from zoo_modern.families.moe import stacked_experts
from zoo_modern.families.readers import IGNORED, periodic, refuse_unless, rope, rotary_base
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
    base, fraction = rope(hf, where)
    refuse_unless(fraction == 1.0, where, "partial_rotary_factor", fraction, "the rope parts turn whole")
    position = {"name": "rotary", "base": base, "rotary_dim": rope_dim, "interleaved": interleave}
    return {**fields, "attention": attention, "position": position}


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
        dense = int(hf.get("first_k_dense_replace", self.defaults[-1]) or 0)
        swiglu = {"mlp": {"name": "swiglu", "hidden": fields["d_ff"]}}
        pattern = periodic([swiglu if i < dense else {} for i in range(fields["n_layers"])])
        return {**fields, "mlp": self.options(hf, where), "layer_pattern": [] if pattern == [{}] else pattern}

    def write(self, config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
        a, o, dense = mla(config), routing(config), dense_layers(config)
        out = {**hf, "q_lora_rank": a.get("q_lora_rank") or None, "kv_lora_rank": a.get("kv_lora_rank")}
        out |= {name: a.get(name) for name in ("qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")}
        out |= {"num_key_value_heads": config.n_heads, "first_k_dense_replace": dense}
        width = config.layer(0).mlp.options.get("hidden") if dense else config.d_ff
        out |= {"intermediate_size": width, "moe_intermediate_size": o.hidden, "n_routed_experts": o.n_experts}
        out |= {"num_experts_per_tok": o.top_k, "n_shared_experts": o.shared_hidden // (o.hidden or 1)}
        out |= {"n_group": o.n_groups, "topk_group": o.top_groups, "routed_scaling_factor": o.routed_scale}
        if self.sigmoid:
            out |= {"norm_topk_prob": o.normalize_top_k, "rope_interleave": bool(config.position.options.get("interleaved"))}  # fmt: skip
        else:
            out |= {"topk_method": "group_limited_greedy" if o.n_groups > 1 else "greedy"}
        return out | {"rope_parameters": {"rope_type": "default", "rope_theta": rotary_base(config)}}

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
        blockers += [
            f"mlp.{k}={getattr(o, k)!r} ({arch} routes by {v!r})" for k, v in wanted.items() if getattr(o, k) != v
        ]
        if not o.shared_hidden or (o.hidden and o.shared_hidden % o.hidden):
            blockers.append(f"mlp.shared_hidden={o.shared_hidden} ({arch}'s shared experts are moe_intermediate_size wide)")  # fmt: skip
        if not self.sigmoid and config.position.name == "rotary" and not config.position.options.get("interleaved"):
            blockers.append(f"rotary pairs in halves ({arch} turns neighbouring pairs)")
        return blockers


V3 = Version("DeepSeek-V3", True, (256, 8, 2048, 1, 8, 4, 2.5, 3))
V2 = Version("DeepSeek-V2", False, (64, 6, 1407, 2, 1, 1, 1.0, 0))


def routes(config: ModelConfig) -> bool:
    return config.mlp.name == "moe"


def has_score_bias(config: ModelConfig) -> bool:
    return routes(config) and bool(config.mlp.options.get("score_bias"))


def dense(config: ModelConfig) -> bool:
    return not routes(config)


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
DEEPSEEK_V3 = LLAMA.derive(
    "DeepseekV3ForCausalLM",
    fresh=("layer", "read", "write", "blockers"),
    model_type="deepseek_v3",
    description="DeepSeek-V3: multi-head latent attention, leading dense layers, sigmoid-routed grouped experts",
    fields={
        "num_key_value_heads": IGNORED,  # MLA's keys and values are per head, from the latent
        "head_dim": F("", None, Count),
        "qk_head_dim": F("", None, Count),
        "intermediate_size": F("d_ff", REQUIRED, Count, out=lambda c: c.d_ff),
        "moe_intermediate_size": F("", None, Count),
        "n_routed_experts": F("", None, Experts),
        "num_experts_per_tok": F("", None, Experts),
        "n_shared_experts": F("", None, Count),
        "n_group": F("", None, Count),
        "topk_group": F("", None, Count),
        "first_k_dense_replace": F("", None, int),
        "norm_topk_prob": F("", None, bool),
        "routed_scaling_factor": F("", None, Positive),
        "output_router_logits": IGNORED,  # transformers' DeepSeek-V3 adds no balancing term
        "kv_lora_rank": F("", None, Count),
        "q_lora_rank": F("", None, Count),
        "qk_rope_head_dim": F("", None, Count),
        "qk_nope_head_dim": F("", None, Count),
        "v_head_dim": F("", None, Count),
        "rope_interleave": F("", None, bool),
        "num_nextn_predict_layers": IGNORED,  # multi-token prediction: not in transformers' forward
        "num_mtp_layers": IGNORED,
        "mlp_bias": None,
    },
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
    engine_features=frozenset({"layer_pattern"}),
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
        "norm_topk_prob": IGNORED,  # transformers' V2 router never reads it
        "mlp_bias": F.must(False, "biases in the SwiGLU projections are not modelled", bool),
    },
    read=(V2.read,),
    write=(V2.write,),
    blockers=(V2.blockers,),
)

FAMILIES = (DEEPSEEK_V3, DEEPSEEK_V2)
