"""Hybrid families with routed experts: each a hybrid of ``hybrids`` with its MLP zoo-modern's ``moe``.

- Granite-MoE-Hybrid (IBM's Granite 4): Bamba's scans, Granite's multipliers, routed and shared experts.
- LFM2-MoE: LFM2's convolutions and attention, leading dense layers, then sigmoid-routed experts.
- Jamba: Bamba with Mamba's S6 scans, attention and routed experts each placed by a period.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Annotated, Any

from pydantic import Field

from zoo.plugin import MAX_EXPERTS, Count, Epsilon, Experts, F, ModelConfig, Rule, W
from zoo_modern.families.deepseek import dense_layers, has_score_bias
from zoo_modern.families.hybrids import BAMBA, LFM2, bamba_write, lfm2_blockers, scan_blockers, scan_layers, scans
from zoo_modern.families.llama_like import GRANITE, LLAMA, LLAMA_ROTARY, granite_read, head_dim, llama_read, mlp_hidden
from zoo_modern.families.moe import (
    GRANITE_ROUTING,
    SHARED_MLP,
    dense,
    granite_experts,
    has_shared,
    options,
    routes,
    stacked_experts,
    unlike,
)
from zoo_modern.families.readers import IGNORED, refuse_unless, with_layer_changes

GRANITE_HYBRID_KINDS = ("linear_attention", "full_attention")
SomeExperts = Annotated[int, Field(ge=0, le=MAX_EXPERTS)]  # 0: the shared MLP alone
ROUTER = replace(GRANITE_ROUTING, shared=None)  # the shared MLP is every layer's, read below


def granite_hybrid_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Scans where ``layer_types`` says; rotary only with "rope"; experts beside the shared MLP, or it alone."""
    types = hf.get("layer_types") or ["linear_attention"] * fields["n_layers"]
    fields = scan_layers(hf, fields, where, [i for i, kind in enumerate(types) if kind == "full_attention"])
    kind = hf.get("position_embedding_type")
    refuse_unless(kind in (None, "rope"), where, "position_embedding_type", kind, "supported: rope, null")
    fields = LLAMA_ROTARY.read(hf, fields, where) if kind == "rope" else {**fields, "position": "none"}
    shared = int(hf.get("shared_intermediate_size", 1024) or 0)
    if not hf.get("num_local_experts", 8):
        return {**fields, "mlp": {"name": "glu", "fused": True, "hidden": shared}}
    fields = ROUTER.read(hf, fields, where)
    return {**fields, "mlp": fields["mlp"] | {"shared_hidden": shared, "shared_gate": False, "shared_fused": True}}


def granite_hybrid_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in hf.items() if k != "attn_layer_indices"}
    out["layer_types"] = [GRANITE_HYBRID_KINDS[not scans(config.layer(i))] for i in range(config.n_layers)]
    out["position_embedding_type"] = "rope" if config.position.name == "rotary" else None
    if config.mlp.name != "moe":
        return out | {"num_local_experts": 0, "shared_intermediate_size": mlp_hidden(config)}
    return ROUTER.write(config, out) | {"shared_intermediate_size": options(config).shared_hidden}


def granite_hybrid_blockers(config: ModelConfig, arch: str) -> list[str]:
    if config.mlp.name == "moe":
        o = options(config)
        ok = not o.shared_hidden or (o.shared_fused and not o.shared_gate)
    else:
        ok = config.mlp.name == "glu" and bool(config.mlp.options.get("fused")) and config.activation.name == "silu"
    return [] if ok else [f"mlp {config.mlp.name!r} ({arch}: moe with an ungated fused shared expert, or that alone)"]


HYBRID_READ = ("layer_types", "position_embedding_type", "router_aux_loss_coef", "output_router_logits")
GRANITE_FIELDS = ("embedding_multiplier", "residual_multiplier", "attention_multiplier", "logits_scaling")
# Granite-MoE-Hybrid extends Bamba: Granite's multipliers, layer_types for the scans, rotary
# optional and whole, Granite-MoE-Shared's experts (the shared MLP alone when there are none).
GRANITE_MOE_HYBRID = BAMBA.derive(
    "GraniteMoeHybridForCausalLM",
    fresh=("read", "write", "blockers"),
    model_type="granitemoehybrid",
    description="Granite-MoE-Hybrid (Granite 4): Bamba's scans, Granite's multipliers, routed and shared experts",
    fields={name: GRANITE.fields[name] for name in GRANITE_FIELDS}
    | {"num_local_experts": F("", None, SomeExperts), "num_experts_per_tok": F("", None, Experts)}
    | {name: F("", None) for name in HYBRID_READ}
    | {"shared_intermediate_size": F("", None, Count), "attn_layer_indices": None, "z_loss_coefficient": None}
    | {"max_position_embeddings": F("max_seq_len", 2048, Count), "rms_norm_eps": F("norm_eps", 1e-6, Epsilon)}
    | {"num_key_value_heads": LLAMA.fields["num_key_value_heads"]},
    zoo={**GRANITE.zoo, "mlp": {"name": "moe"}},
    accepts={**GRANITE.accepts, "mlp": ("glu",), "position": ("none",)},
    layer={f"mlp.{p}.weight": None for p in ("gate", "up", "down")}
    | {"mlp.router.weight": W("block_sparse_moe.router.layer.weight", when=routes, make=granite_experts)}
    | {f"mlp.shared.{z}.weight": W(f"shared_mlp.{h}.weight", when=has_shared) for z, h in SHARED_MLP}
    | {f"mlp.{z}.weight": W(f"shared_mlp.{h}.weight", when=dense) for z, h in SHARED_MLP}
    | {"mlp_residual.norm.weight": "post_attention_layernorm.weight"},
    top={"final_norm.weight": "norm.weight"},
    engine_features=frozenset({"layer_pattern", "scale"}),
    layer_kinds=GRANITE_HYBRID_KINDS,
    read=(llama_read, head_dim(None), granite_read, granite_hybrid_read),
    write=(LLAMA_ROTARY.write, bamba_write, granite_hybrid_write),
    blockers=(LLAMA_ROTARY.blockers, scan_blockers, ROUTER.blockers, granite_hybrid_blockers),
)


LFM2_MLP = (("gate", "w1"), ("up", "w3"), ("down", "w2"))  # LFM2's names of a SwiGLU's projections
LFM2_ROUTING = "num_experts num_experts_per_tok moe_intermediate_size num_dense_layers use_expert_bias".split()
LFM2_ROUTING += ["norm_topk_prob", "routed_scaling_factor"]


def lfm2_moe_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The first ``num_dense_layers`` a SwiGLU of ``intermediate_size`` as given, the rest routed."""
    width, dense = int(hf["intermediate_size"]), int(hf.get("num_dense_layers", 2) or 0)
    mlp = {"name": "moe", "n_experts": int(hf.get("num_experts") or 32), "top_k": int(hf.get("num_experts_per_tok") or 4)}  # fmt: skip
    mlp |= {"hidden": int(hf.get("moe_intermediate_size") or 1792), "scoring": "sigmoid", "top_k_eps": 1e-6}
    mlp |= {"score_bias": bool(hf.get("use_expert_bias", True)), "normalize_top_k": bool(hf.get("norm_topk_prob", True))}  # fmt: skip
    mlp |= {"routed_scale": float(hf.get("routed_scaling_factor") or 1.0), "shared_hidden": 0, "aux_loss_weight": 0.0}
    fields = with_layer_changes(fields, [{"mlp": {"name": "swiglu", "hidden": width}} if i < dense else {} for i in range(fields["n_layers"])])  # fmt: skip
    return {**fields, "d_ff": width, "mlp": mlp}


def lfm2_moe_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    o, dense = options(config), dense_layers(config)
    out = {**hf, "intermediate_size": config.layer(0).mlp.options.get("hidden") if dense else config.d_ff}
    out |= {"num_dense_layers": dense, "num_experts": o.n_experts, "num_experts_per_tok": o.top_k}
    out |= {"moe_intermediate_size": o.hidden, "use_expert_bias": o.score_bias, "norm_topk_prob": o.normalize_top_k}
    return out | {"routed_scaling_factor": o.routed_scale}


def lfm2_moe_blockers(config: ModelConfig, arch: str) -> list[str]:
    """LFM2's, its dense layers set apart; routing by sigmoid scores as LFM2-MoE routes."""
    blockers = [b for b in lfm2_blockers(config, arch) if not re.match(r"layer \d+ changes mlp \(", b)]
    if any(not routes(config.layer(i)) for i in range(dense_layers(config), config.n_layers)):
        blockers.append(f"dense layers after the first routed one ({arch}'s dense layers lead)")
    if not routes(config):
        return blockers + [f"mlp {config.mlp.name!r} ({arch} routes)"]
    return blockers + unlike(config, arch, {"scoring": "sigmoid", "top_k_eps": 1e-6, "n_groups": 1, "shared_hidden": 0})


def lfm2_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """The router (``feed_forward.gate``) and the experts, their projections named w1, w3, w2."""
    z, h = zoo.removesuffix("router.weight"), names[0].removesuffix("gate.weight")
    return [Rule.copy(zoo, names[0]), *stacked_experts(z + "experts.", h + "experts.", h + "experts.", ("w1", "w3", "w2"), config)]  # fmt: skip


def jamba_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """The router (``feed_forward.router``) and the experts, stored as the other families store them."""
    z, h = zoo.removesuffix("router.weight"), names[0].removesuffix("router.weight")
    return [Rule.copy(zoo, names[0]), *stacked_experts(z + "experts.", h + "experts.", h + "experts.", ("gate_proj", "up_proj", "down_proj"), config)]  # fmt: skip


# LFM2-MoE extends LFM2: leading dense layers, then sigmoid-routed experts chosen with an expert bias.
LFM2_MOE = LFM2.derive(
    "Lfm2MoeForCausalLM",
    fresh=("blockers",),
    model_type="lfm2_moe",
    description="LFM2-MoE: LFM2's convolutions and attention, leading dense layers, then sigmoid-routed experts",
    fields={name: F("", None, Experts if name.startswith("num_experts") else Any) for name in LFM2_ROUTING}
    | {name: IGNORED for name in ("block_auto_adjust_ff_dim", "block_ffn_dim_multiplier", "block_multiple_of")}
    | {"output_router_logits": IGNORED},  # transformers' LFM2-MoE adds no balancing term
    zoo={"mlp": {"name": "moe"}},
    layer={f"mlp.{z}.weight": W(f"feed_forward.{h}.weight", when=dense) for z, h in LFM2_MLP}
    | {"mlp.router.weight": W("feed_forward.gate.weight", when=routes, make=lfm2_experts)}
    | {"mlp.score_bias.bias": W("feed_forward.expert_bias", when=has_score_bias)},
    read=(lfm2_moe_read,),
    write=(lfm2_moe_write,),
    blockers=(LLAMA_ROTARY.blockers, lfm2_moe_blockers),
)


def every(hf: Mapping[str, Any], period: str, offset: str, defaults: tuple[int, int], layers: int) -> list[bool]:
    """The layers ``i % period == offset`` (Jamba's attention and expert layers)."""
    p, o = (int(d if hf.get(k) is None else hf[k]) for k, d in zip((period, offset), defaults, strict=True))
    return [i % max(p, 1) == o for i in range(layers)]


def period_of(at: list[bool]) -> tuple[int, int]:
    """The (period, offset) that picks the layers ``at`` says (period len + 1: none of them)."""
    first = at.index(True) if True in at else len(at)
    return next(((p, first % p) for p in range(1, len(at) + 1) if at == [i % p == first % p for i in range(len(at))]), (len(at) + 1, len(at)))  # fmt: skip


def jamba_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Mamba scans (their B, C and time step RMSNorms) but where ``attn_layer_period`` and
    its offset say; experts where ``expert_layer_period`` and its offset say, else a SwiGLU."""
    layers, experts = fields["n_layers"], int(hf.get("num_experts") or 16)
    rank = hf.get("mamba_dt_rank", "auto")
    refuse_unless(rank == "auto" or (type(rank) is int and rank > 0), where, "mamba_dt_rank", rank, "a whole number > 0 or 'auto'")  # fmt: skip
    scan = {"name": "mamba", "bcdt_norm": True, "bcdt_weights": True, "bcdt_eps": fields["norm_eps"]}
    scan |= {o: hf[n] for o, n in JAMBA_SCAN.items() if hf.get(n) is not None} | ({} if rank == "auto" else {"dt_rank": rank})  # fmt: skip
    attends = every(hf, "attn_layer_period", "attn_layer_offset", (8, 4), layers)
    routed = every(hf, "expert_layer_period", "expert_layer_offset", (2, 1), layers) if experts > 1 else [False] * layers  # fmt: skip
    swiglu = {"mlp": {"name": "swiglu", "hidden": fields["d_ff"]}}
    entries = [({} if a else {"attention": scan}) | ({} if r else swiglu) for a, r in zip(attends, routed, strict=True)]
    aux = float(hf.get("router_aux_loss_coef") or 0.0) if hf.get("output_router_logits") else 0.0
    mlp = {"name": "moe", "n_experts": experts, "top_k": int(hf.get("num_experts_per_tok") or 2), "hidden": fields["d_ff"]}  # fmt: skip
    fields = {**fields, "mlp": mlp | {"normalize_top_k": False, "aux_loss_weight": aux}, "position": "none"}
    return with_layer_changes(fields, entries) if any(routed) else {**with_layer_changes(fields, entries), **swiglu}


def jamba_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    at = [not mamba(config.layer(i)) for i in range(config.n_layers)]
    routed = [routes(config.layer(i)) for i in range(config.n_layers)]
    scan = next((config.layer(i).attention.options for i in range(config.n_layers) if not at[i]), {})
    out = {**hf, **{n: scan.get(o, JAMBA_DEFAULTS[o]) for o, n in JAMBA_SCAN.items()}, "mamba_dt_rank": scan.get("dt_rank") or "auto"}  # fmt: skip
    out |= dict(zip(("attn_layer_period", "attn_layer_offset"), period_of(at), strict=True))
    out |= dict(zip(("expert_layer_period", "expert_layer_offset"), period_of(routed), strict=True))
    o = options(config) if any(routed) else None
    return out | ({"num_experts": o.n_experts, "num_experts_per_tok": o.top_k} if o else {"num_experts": 1})


def jamba_blockers(config: ModelConfig, arch: str) -> list[str]:
    at = [not mamba(config.layer(i)) for i in range(config.n_layers)]
    routed = [routes(config.layer(i)) for i in range(config.n_layers)]
    blockers = []
    for what, picked in (("attention", at), ("expert", routed)):
        period, offset = period_of(picked)
        if any(picked) and [i % period == offset for i in range(len(picked))] != picked:
            blockers.append(f"{what} layers no period and offset pick ({arch} places them by a period)")
    scans = {tuple(sorted(config.layer(i).attention.options.items())) for i in range(config.n_layers) if not at[i]}
    blockers += [f"scan layers whose mamba options differ ({arch} has one set of mamba_* fields)"] if len(scans) > 1 else []  # fmt: skip
    want = {"bcdt_norm": True, "bcdt_weights": True, "bcdt_eps": config.norm_eps}
    blockers += [f"a mamba mixer without {k}={v!r} ({arch})" for opts in scans for k, v in want.items() if dict(opts).get(k) != v]  # fmt: skip
    if any(routed) and options(config).normalize_top_k:
        blockers.append(f"normalize_top_k=true ({arch} weighs by the top-k softmax as it is)")
    return blockers


def mamba(config: ModelConfig) -> bool:
    return config.attention.name == "mamba"


def scan_bias(option: str) -> Callable[[ModelConfig], bool]:
    """Whether a layer scans with its ``option`` bias (``proj_bias``, ``conv_bias``)."""
    return lambda config: mamba(config) and bool(config.attention.options.get(option, JAMBA_DEFAULTS[option]))


def attends_jamba(config: ModelConfig) -> bool:
    return not mamba(config)


JAMBA_SCAN = {"d_state": "mamba_d_state", "expand": "mamba_expand", "conv_kernel": "mamba_d_conv"}
JAMBA_SCAN |= {"conv_bias": "mamba_conv_bias", "proj_bias": "mamba_proj_bias"}
JAMBA_DEFAULTS = {"d_state": 16, "expand": 2, "conv_kernel": 4, "conv_bias": True, "proj_bias": False}
JAMBA_FIELDS: dict[str, F | None] = {name: F("", None) for name in ("attn_layer_period", "attn_layer_offset", "expert_layer_period", "expert_layer_offset")}  # fmt: skip
JAMBA_FIELDS |= {name: F("", None) for name in (*JAMBA_SCAN.values(), "mamba_dt_rank", "router_aux_loss_coef", "output_router_logits")}  # fmt: skip
JAMBA_FIELDS |= {"num_experts": F("", None, Experts), "num_experts_per_tok": F("", None, Experts)}
JAMBA_FIELDS |= {name: IGNORED for name in ("use_mamba_kernels", "use_mambapy", "use_associative_scan", "num_logits_to_keep")}  # fmt: skip
JAMBA_FIELDS |= {name: None for name in ("attn_layer_indices", "mamba_n_heads", "mamba_d_head", "mamba_n_groups", "mamba_chunk_size", "time_step_limit", "z_loss_coefficient", "rope_theta", "rope_parameters", "partial_rotary_factor")}  # fmt: skip
MAMBA_NAMES = {f"attn.{p}": f"mamba.{p}" for p in ("x_proj.weight", "dt_proj.weight", "dt_proj.bias", "A_log", "D")}
MAMBA_NAMES |= {f"attn.{z}.weight": f"mamba.{h}.weight" for z, h in (("in_proj", "in_proj"), ("conv", "conv1d"), ("out_proj", "out_proj"))}  # fmt: skip
MAMBA_NAMES |= {f"attn.bcdt_scales.{i}": f"mamba.{n}_layernorm.weight" for i, n in enumerate(("dt", "b", "c"))}
MAMBA_BIASES = {f"attn.{z}.bias": (f"mamba.{h}.bias", o) for z, h, o in (("in_proj", "in_proj", "proj_bias"), ("conv", "conv1d", "conv_bias"), ("out_proj", "out_proj", "proj_bias"))}  # fmt: skip
# Jamba extends Bamba: Mamba's S6 scans (RMSNorms on B, C and the time step) for Mamba-2's, attention
# without positions at attn_layer_period, routed experts at expert_layer_period (a SwiGLU elsewhere).
JAMBA = BAMBA.derive(
    "JambaForCausalLM",
    fresh=("layer", "read", "write", "blockers"),
    model_type="jamba",
    description="Jamba: Mamba scans and attention layers interleaved, routed experts every other layer",
    fields=JAMBA_FIELDS | {"rms_norm_eps": F("norm_eps", 1e-6, Epsilon)},
    zoo={"position": "none", "mlp": {"name": "moe"}},
    accepts={"mlp": ("swiglu",)},
    layer={
        "attn_residual.norm.weight": "input_layernorm.weight",
        "attn.qkv.weight": W("self_attn.{}_proj.weight", "concat", "qkv", when=attends_jamba),
        "attn.out.weight": W("self_attn.o_proj.weight", when=attends_jamba),
        **{z: W(h, when=mamba) for z, h in MAMBA_NAMES.items()},
        **{z: W(h, when=scan_bias(o)) for z, (h, o) in MAMBA_BIASES.items()},
        "mlp_residual.norm.weight": "pre_ff_layernorm.weight",
        **{f"mlp.{p}.weight": W(f"feed_forward.{p}_proj.weight", when=dense) for p in ("gate", "up", "down")},
        "mlp.router.weight": W("feed_forward.router.weight", when=routes, make=jamba_experts),
    },
    read=(llama_read, jamba_read),
    write=(jamba_write,),
    blockers=(jamba_blockers,),  # a position other than none: refused by the table (zoo)
)

FAMILIES = (GRANITE_MOE_HYBRID, LFM2_MOE, JAMBA)
