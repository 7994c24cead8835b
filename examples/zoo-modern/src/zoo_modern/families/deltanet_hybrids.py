"""Gated DeltaNet hybrids: zoo-modern's ``gated_deltanet`` layers between attention layers by
``layer_types`` (``linear_attention``/``full_attention``), the ``linear_*`` fields its sizes:
Qwen3.5, Qwen3-Next and Qwen3.5-MoE (Qwen3.5 with routed experts) and OLMo Hybrid.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Converter, Count, F, ModelConfig, Rule, W
from zoo_modern.deltanet import head_sizes
from zoo_modern.families.llama_like import LLAMA_ROTARY, OLMO2, QWEN3, head_dim, llama_read
from zoo_modern.families.moe import Routing, routed
from zoo_modern.families.readers import Rotary, periodic, refuse_unless

KINDS = ("linear_attention", "full_attention")
#: The mixer's options, Qwen3-Next's config.json names of them and transformers' defaults there.
DELTA = {"n_k_heads": ("linear_num_key_heads", 16), "n_v_heads": ("linear_num_value_heads", 32), "k_head_dim": ("linear_key_head_dim", 128), "v_head_dim": ("linear_value_head_dim", 128), "conv_kernel": ("linear_conv_kernel_dim", 4)}  # fmt: skip
LINEAR = "linear_attn."
SIZES = {name: F("", None, Count) for name, _ in DELTA.values()}


def linear(config: ModelConfig) -> bool:
    return config.attention.name == "gated_deltanet"


def attends(config: ModelConfig) -> bool:
    return not linear(config)


def delta_sizes(config: ModelConfig) -> dict[str, int]:
    """A ``gated_deltanet`` layer's sizes, the mixer's defaults filled in."""
    o = config.attention.options
    return head_sizes(config.d_model, config.n_heads, o) | {"conv_kernel": o.get("conv_kernel", 4)}


def delta_pattern(hf: Mapping[str, Any], fields: dict[str, Any], where: str, types: Any, entry: Any) -> dict[str, Any]:
    """``types`` as a layer pattern: DeltaNet layers of the ``linear_*`` sizes in ``hf``, changing ``entry`` too."""
    ok = isinstance(types, list) and len(types) == fields["n_layers"] and set(types) <= set(KINDS)
    refuse_unless(ok, where, "layer_types", types, f"give {fields['n_layers']} of 'linear_attention'/'full_attention'")  # fmt: skip
    spec = {"name": "gated_deltanet", **entry.get("attention", {})} | {o: hf[name] for o, (name, _) in DELTA.items()}
    refuse_unless(spec["n_v_heads"] % spec["n_k_heads"] == 0, where, "linear_num_value_heads", spec["n_v_heads"], "a multiple of linear_num_key_heads")  # fmt: skip
    pattern = periodic([{**entry, "attention": spec} if kind == "linear_attention" else {} for kind in types])
    return {**fields, "layer_pattern": [] if pattern == [{}] else pattern}


def next_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    every = 4 if hf.get("full_attention_interval") is None else hf["full_attention_interval"]
    refuse_unless(type(every) is int and every > 0, where, "full_attention_interval", every, "a whole number >= 1")
    types = hf.get("layer_types") or ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(fields["n_layers"])]  # fmt: skip
    return delta_pattern({name: hf.get(name) or d for name, d in DELTA.values()}, fields, where, types, {})


def next_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    kinds = [KINDS[attends(config.layer(i))] for i in range(config.n_layers)]  # 0: linear_attention, 1: full
    first = next((config.layer(i) for i in range(config.n_layers) if linear(config.layer(i))), None)
    sizes = delta_sizes(first) if first is not None else {o: d for o, (_, d) in DELTA.items()}
    return {**hf, "layer_types": kinds, **{name: sizes[o] for o, (name, _) in DELTA.items()}}


def delta_blockers(entry: Mapping[str, Any], fixed: Mapping[str, Any], gated: bool) -> Any:
    """DeltaNet layers changing more than ``entry``, differing in size or from ``fixed``; attention not ``gated``."""

    def blockers(config: ModelConfig, arch: str) -> list[str]:
        found, sizes = [], set()
        for i, layer in ((i, config.layer(i)) for i in range(config.n_layers)):
            other = set(config.layer_changes(i)) - ({"attention", *entry} if linear(layer) else set())
            if linear(layer):
                other |= {kind for kind, name in entry.items() if getattr(layer, kind).name != name}
                sizes.add(tuple(delta_sizes(layer).items()))  # chunk_size changes no sums
                off = [f"{o}={layer.attention.options.get(o)}" for o, v in fixed.items() if (layer.attention.options.get(o) or None) != v]  # fmt: skip
                found += [f"layer {i}'s DeltaNet has {', '.join(off)} ({arch} has {fixed})"] if off else []
            found += [f"layer {i} changes {', '.join(sorted(other))} ({arch} has one design per kind of layer)"] if other else []  # fmt: skip
        found += [f"DeltaNet layers whose sizes differ ({arch} has one set of linear_* fields)"] if len(sizes) > 1 else []  # fmt: skip
        gate = config.attention.options.get("output_gate")
        return found + ([f"output_gate={not gated} ({arch}'s attention is {'' if gated else 'not '}gated)"] if bool(gate) != gated else [])  # fmt: skip

    return blockers


def reordered(zoo: str, names: tuple[str, ...], order: Tensor, sizes: list[int]) -> Rule:
    """A zoo tensor whose row r is row ``order[r]`` of the stored tensors stacked (of ``sizes`` rows)."""
    back = order.argsort()
    return Rule(zoo, names, lambda ts: torch.cat(list(ts))[order], lambda t: list(torch.split(t[back], sizes)))


def grouped_in_proj(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """in_proj from in_proj_qkvz and in_proj_ba, rows by key head ([q | k | v | z], [b | a] of its value heads)."""
    s = delta_sizes(config)
    n_k, dk, dv, share = s["n_k_heads"], s["k_head_dim"], s["v_head_dim"], s["n_v_heads"] // s["n_k_heads"]
    qkvz, ba = torch.arange(n_k * (2 * dk + 2 * share * dv)).view(n_k, -1), torch.arange(n_k * 2 * share).view(n_k, -1)
    parts = torch.split(qkvz, [dk, dk, share * dv, share * dv], 1) + torch.split(ba + qkvz.numel(), [share, share], 1)
    return reordered(zoo, names, torch.cat([p.flatten() for p in parts]), [qkvz.numel(), ba.numel()])


def stacked(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """in_proj (or the convolution) from projections stored apart: q, k, v (or qkv), z or g (the gate), b, a."""
    s = delta_sizes(config)
    key, value, heads = s["n_k_heads"] * s["k_head_dim"], s["n_v_heads"] * s["v_head_dim"], s["n_v_heads"]
    rows = {"q": key, "k": key, "v": value, "qkv": 2 * key + value, "z": value, "g": value, "b": heads, "a": heads}
    parts = [name.split(".")[-2].removeprefix("in_proj_").split("_")[0] for name in names]
    return Rule.concat(zoo, names, [rows[p] for p in parts])


def gated_qkv(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """qkv, rows [q | k | v | gate], from q_proj (each head's query, then its gate), k_proj and v_proj."""
    q = torch.arange(2 * config.n_heads * config.head_dim).view(config.n_heads, 2, -1)
    kv = Converter.attention_layout(config)[0] * config.head_dim
    order = torch.cat([q[:, 0].flatten(), q.numel() + torch.arange(2 * kv), q[:, 1].flatten()])
    return reordered(zoo, names, order, [q.numel(), kv, kv])


NEXT_ROTARY = Rotary(share=0.25, partial=True)
ATTENTION = {f"attn.{p}.weight": W(f"self_attn.{hf}.weight", when=attends) for p, hf in (("out", "o_proj"), ("q_norm", "q_norm"), ("k_norm", "k_norm"))}  # fmt: skip
MIXER = {f"attn.{p}": W(LINEAR + p, when=linear) for p in ("A_log", "dt_bias", "norm.weight", "out_proj.weight")}
QWEN_LAYER = {"attn.qkv.weight": W("self_attn.{}_proj.weight", parts="qkv", when=attends, make=gated_qkv), "attn.qkv.bias": None, **ATTENTION, **MIXER}  # fmt: skip
QWEN_LAYER |= {"attn.in_proj.weight": W(LINEAR + "in_proj_{}.weight", parts=("qkv", "z", "b", "a"), when=linear, make=stacked), "attn.conv.weight": W(LINEAR + "conv1d.weight", when=linear)}  # fmt: skip
# Qwen3.5 extends Qwen3: DeltaNet layers by layer_types, output-gated attention, 1 + w norms, a quarter of each head turned.
QWEN3_5 = QWEN3.derive(
    "Qwen3_5ForCausalLM",
    model_type="qwen3_5_text",
    description="Qwen3.5: gated DeltaNet layers between output-gated attention layers, a dense SwiGLU MLP",
    fresh=("read", "write", "blockers"),
    fields=SIZES | {"full_attention_interval": F("", None), "rms_norm_eps": F("norm_eps", 1e-6, float)} | dict.fromkeys(("use_sliding_window", "sliding_window", "max_window_layers")),
    zoo={"norm": "rmsnorm_offset", "attention": QWEN3.zoo["attention"] | {"qk_norm_offset": True, "output_gate": True}},
    layer=QWEN_LAYER, engine_features=frozenset({"layer_pattern"}), layer_kinds=KINDS,
    ignored=("mtp.",),  # the multi-token-prediction layers, which transformers never loads either
    read=(head_dim(256), llama_read, NEXT_ROTARY.read, next_read), write=(NEXT_ROTARY.write, next_write),
    blockers=(NEXT_ROTARY.blockers, delta_blockers({}, {"negative_eigenvalues": None, "gate_norm_eps": None}, gated=True)),
)  # fmt: skip
# Qwen3-Next extends Qwen3.5: routed experts with a gated shared expert; in_proj stored grouped by key head.
QWEN3_NEXT = routed(
    QWEN3_5, "Qwen3NextForCausalLM", Routing(defaults=(512, 10, 512, True), shared=True, sparse_layers=True),
    model_type="qwen3_next",
    description="Qwen3-Next: Qwen3.5's gated DeltaNet and gated attention layers, routed experts with a shared one",
    layer={"attn.in_proj.weight": W(LINEAR + "in_proj_{}.weight", parts=("qkvz", "ba"), when=linear, make=grouped_in_proj)},
)  # fmt: skip


# Qwen3.5-MoE extends Qwen3.5 as Qwen3-Next does, its in_proj stored apart: no intermediate_size, always renormalised.
QWEN3_5_MOE = routed(
    QWEN3_5, "Qwen3_5MoeForCausalLM", Routing(defaults=(256, 8, 512, True), always_normalized=True, shared=True),
    model_type="qwen3_5_moe_text",
    description="Qwen3.5-MoE: Qwen3.5's gated DeltaNet and gated attention layers, routed experts with a shared one",
    fields={"intermediate_size": F("d_ff", None, Count)},
    write=(lambda config, hf: {k: v for k, v in hf.items() if k != "intermediate_size"},),
)  # fmt: skip


def olmo_hybrid_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """transformers' defaults: attention every 4th layer (or the last), key heads 3/4 d / n_k wide, values twice."""
    layers, heads, rope = fields["n_layers"], fields["n_heads"], hf.get("rope_parameters")
    types = hf.get("layer_types") or ["full_attention" if i % 4 == 3 or (layers < 4 and i == layers - 1) else "linear_attention" for i in range(layers)]  # fmt: skip
    refuse_unless(isinstance(types, list) and set(KINDS) <= set(types), where, "layer_types", types, "OLMo Hybrid has both kinds of layer (transformers refuses others)")  # fmt: skip
    n_k = hf.get("linear_num_key_heads") or heads
    dk = hf.get("linear_key_head_dim") or int(0.75 * fields["d_model"] / n_k)
    given = (n_k, hf.get("linear_num_value_heads") or heads, dk, hf.get("linear_value_head_dim") or 2 * dk, hf.get("linear_conv_kernel_dim") or 4)  # fmt: skip
    sizes = dict(zip([name for name, _ in DELTA.values()], given, strict=True))
    mixer = {"negative_eigenvalues": bool(hf.get("linear_allow_neg_eigval", True)), "gate_norm_eps": 1e-5}
    nope = isinstance(rope, Mapping) and rope.get("rope_theta", 0) is None
    fields = {**fields, "position": "none"} if nope else LLAMA_ROTARY.read(hf, fields, where)
    return delta_pattern(sizes, fields, where, types, {"placement": "pre", "attention": mixer})


def olmo_hybrid_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    first = next(config.layer(i) for i in range(config.n_layers) if linear(config.layer(i)))
    rope = {"rope_parameters": {"rope_type": "default", "rope_theta": None}} if config.position.name == "none" else LLAMA_ROTARY.write(config, {})  # fmt: skip
    return {**hf, **rope, "linear_allow_neg_eigval": bool(first.attention.options.get("negative_eigenvalues"))}


def by_kind(attention: str, linear_name: str) -> W:
    """A norm stored as ``attention`` in attention layers, ``linear_name`` in DeltaNet ones (as saved)."""
    return W(attention, make=lambda zoo, names, c: Rule.copy(zoo, names[0] if attends(c) else names[0].removesuffix(attention) + linear_name))  # fmt: skip


OLMO_FIELDS = SIZES | {"layer_types": F("", None), "head_dim": None, "num_key_value_heads": F("attention.n_kv_heads", None, Count)}  # fmt: skip
OLMO_FIELDS |= {f"linear_{name}": F("", None) for name in "allow_neg_eigval a_log_min a_log_max dt_min dt_max dt_init_floor".split()}  # fmt: skip
OLMO_LAYER = {"attn.qkv.weight": W("self_attn.{}_proj.weight", "concat", "qkv", when=attends), "attn.qkv.bias": None, **ATTENTION}  # fmt: skip
OLMO_LAYER |= {k: W(w.hf.replace("norm.", "o_norm.").replace("out_proj", "o_proj"), when=linear) for k, w in MIXER.items()}  # fmt: skip
OLMO_LAYER |= {"attn.in_proj.weight": W(LINEAR + "{}_proj.weight", parts="qkvgba", when=linear, make=stacked), "attn.conv.weight": W(LINEAR + "{}_conv1d.weight", parts="qkv", when=linear, make=stacked)}  # fmt: skip
OLMO_LAYER |= {"attn_residual.norm.weight": by_kind("feedforward_layer_norm.weight", "attention_layer_norm.weight"), "mlp_residual.norm.weight": by_kind("post_feedforward_layernorm.weight", "feedforward_layer_norm.weight")}  # fmt: skip
# OLMo Hybrid extends OLMo 2: DeltaNet layers (pre-norm, Llama's) between its post-norm QK-norm attention.
OLMO_HYBRID = OLMO2.derive(
    "OlmoHybridForCausalLM",
    model_type="olmo_hybrid",
    description="OLMo Hybrid: gated DeltaNet layers (beta in [0, 2]) between OLMo 2's post-norm attention layers",
    fresh=("read", "write", "blockers"), fields=OLMO_FIELDS, layer=OLMO_LAYER, accepts={"position": ("none",)},
    engine_features=frozenset({"layer_pattern"}), layer_kinds=KINDS,
    read=(head_dim(None), llama_read, olmo_hybrid_read), write=(next_write, olmo_hybrid_write),
    blockers=(LLAMA_ROTARY.blockers, delta_blockers({"placement": "pre"}, {"gate_norm_eps": 1e-5}, gated=False)),
)  # fmt: skip

FAMILIES = (QWEN3_5, QWEN3_NEXT, QWEN3_5_MOE, OLMO_HYBRID)
