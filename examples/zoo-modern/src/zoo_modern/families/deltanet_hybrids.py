"""Gated DeltaNet hybrids: layers of zoo-modern's ``gated_deltanet`` mixer between attention layers.

- Qwen3-Next extends Qwen3 (QK-norm per head, an explicit head_dim) with ``layer_types``:
  ``linear_attention`` layers mix by ``gated_deltanet`` (the ``linear_*`` fields are its sizes,
  one set for all such layers), ``full_attention`` ones attend (without the field, every
  ``full_attention_interval``-th layer, 4); an output gate on attention (``qknorm``'s
  ``output_gate``: q_proj emits each head's query and gate side by side, kept by the zoo as
  rows after q, k and v); rotary on a quarter of each head, head_dim 256 by default; every norm
  but the mixer's gated one scaled by 1 + w (``rmsnorm_offset``, the q/k norms too); a routed
  MoE in every layer with Qwen2-MoE's sigmoid-gated shared expert.
- Qwen3.5 (its text model, ``qwen3_5_text``) extends Qwen3-Next: a dense SwiGLU MLP; the
  mixer's projections stored apart. Its multimodal rotary (mrope) turns text as plain rotary.
- OLMo Hybrid extends OLMo 2 (post-norm, QK-norm over the whole projection): DeltaNet layers
  pre-norm as Llama's, beta in [0, 2] (``linear_allow_neg_eigval``), the output norm's epsilon
  FLA's 1e-5; no positions where ``rope_parameters`` names no theta, as released.

The mixer's in_proj is one zoo tensor, rows [q | k | v | z | b | a] of all heads. Qwen3-Next
stores two, ``in_proj_qkvz`` and ``in_proj_ba``, grouped by key head ([q | k | v | z] and
[b | a] of each key head's value heads), reordered on import and back on export; Qwen3.5
four and OLMo Hybrid six, stacked as they are. The multi-token-prediction weights (``mtp.*``)
of the released Qwen checkpoints are not modelled: read past, as transformers does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Count, F, ModelConfig, Rule, W
from zoo_modern.families.llama_like import LLAMA_ROTARY, OLMO2, QWEN3, head_dim, llama_read
from zoo_modern.families.moe import ROUTING as ROUTING_FIELDS
from zoo_modern.families.moe import Routing, routed
from zoo_modern.families.readers import Rotary, periodic, refuse_unless

KINDS = ("linear_attention", "full_attention")
#: The ``gated_deltanet`` options and Qwen3-Next's config.json names of them, with transformers' defaults.
DELTA = {
    "n_k_heads": ("linear_num_key_heads", 16),
    "n_v_heads": ("linear_num_value_heads", 32),
    "k_head_dim": ("linear_key_head_dim", 128),
    "v_head_dim": ("linear_value_head_dim", 128),
    "conv_kernel": ("linear_conv_kernel_dim", 4),
}


def linear(config: ModelConfig) -> bool:
    return config.attention.name == "gated_deltanet"


def attends(config: ModelConfig) -> bool:
    return not linear(config)


def delta_sizes(config: ModelConfig) -> dict[str, int]:
    """A ``gated_deltanet`` layer's options, the mixer's defaults filled in."""
    o = config.attention.options
    n_k = o.get("n_k_heads") or config.n_heads
    dk = o.get("k_head_dim") or config.d_model // config.n_heads
    sizes = {"n_k_heads": n_k, "n_v_heads": o.get("n_v_heads") or n_k, "k_head_dim": dk}
    return sizes | {"v_head_dim": o.get("v_head_dim") or dk, "conv_kernel": o.get("conv_kernel", 4)}


def delta_pattern(
    hf: Mapping[str, Any], fields: dict[str, Any], where: str, types: Any, entry: Mapping[str, Any] = {}
) -> dict[str, Any]:
    """The layer pattern of ``types``: DeltaNet mixers of the ``linear_*`` sizes (``hf`` holding
    them all) on the ``linear_attention`` layers, with ``entry``'s other changes, attention elsewhere."""
    layers = fields["n_layers"]
    ok = isinstance(types, list) and len(types) == layers and set(types) <= set(KINDS)
    refuse_unless(ok, where, "layer_types", types, f"give {layers} of 'linear_attention'/'full_attention'")
    spec: dict[str, Any] = {"name": "gated_deltanet", **entry.get("attention", {})}
    spec |= {option: hf[name] for option, (name, _) in DELTA.items()}
    why = "a multiple of linear_num_key_heads"
    refuse_unless(spec["n_v_heads"] % spec["n_k_heads"] == 0, where, "linear_num_value_heads", spec["n_v_heads"], why)
    linear_layer = {**entry, "attention": spec}
    pattern = periodic([linear_layer if kind == "linear_attention" else {} for kind in types])
    return {**fields, "layer_pattern": [] if pattern == [{}] else pattern}


def next_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """``layer_types``, or attention every ``full_attention_interval``-th layer; transformers' sizes."""
    types = hf.get("layer_types")
    if types is None:
        every = hf.get("full_attention_interval")
        every = 4 if every is None else every
        refuse_unless(type(every) is int and every > 0, where, "full_attention_interval", every, "a whole number >= 1")
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(fields["n_layers"])]
    sizes = {name: hf.get(name) or default for name, default in DELTA.values()}
    return delta_pattern(sizes, fields, where, types)


def next_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    kinds = ["linear_attention" if linear(config.layer(i)) else "full_attention" for i in range(config.n_layers)]
    first = next((config.layer(i) for i in range(config.n_layers) if linear(config.layer(i))), None)
    sizes = delta_sizes(first) if first is not None else {o: d for o, (_, d) in DELTA.items()}
    return {**hf, "layer_types": kinds, **{name: sizes[o] for o, (name, _) in DELTA.items()}}


def delta_blockers(entry: Mapping[str, Any], fixed: Mapping[str, Any], gated: bool) -> Any:
    """The blockers of a family whose DeltaNet layers change ``entry`` alone (beyond the mixer),
    their options ``fixed`` as given (what config.json cannot say), attention ``gated`` or not."""
    allowed = {"attention", *entry}

    def blockers(config: ModelConfig, arch: str) -> list[str]:
        found, seen = [], set()
        for i in range(config.n_layers):
            changes, layer = config.layer_changes(i), config.layer(i)
            if linear(layer):
                other = set(changes) - allowed
                other |= {kind for kind, value in entry.items() if getattr(layer, kind).name != value}
                seen.add(tuple(sorted(delta_sizes(layer).items())))  # chunk_size changes no sums
                off = [f"{o}={layer.attention.options.get(o)}" for o, v in fixed.items() if (layer.attention.options.get(o) or None) != v]  # fmt: skip
                found += [f"layer {i}'s DeltaNet has {', '.join(off)} ({arch} has {fixed})"] if off else []
            else:
                other = set(changes)
            if other:
                found.append(f"layer {i} changes {', '.join(sorted(other))} ({arch} has one design per kind of layer)")
        if len(seen) > 1:
            found.append(f"DeltaNet layers whose sizes differ ({arch} has one set of linear_* fields)")
        if bool(config.attention.options.get("output_gate")) != gated:
            found.append(f"output_gate={not gated} ({arch}'s attention is {'' if gated else 'not '}gated)")
        return found

    return blockers


def grouped_in_proj(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The zoo's in_proj, rows [q | k | v | z | b | a], from transformers' in_proj_qkvz and
    in_proj_ba, whose rows run key head by key head ([q | k | v | z] and [b | a] of each)."""
    s = delta_sizes(config)
    n_k, dk, dv, share = s["n_k_heads"], s["k_head_dim"], s["v_head_dim"], s["n_v_heads"] // s["n_k_heads"]
    qkvz, ba = [dk, dk, share * dv, share * dv], [share, share]
    names = (names[0], names[0].replace("in_proj_qkvz", "in_proj_ba"))

    def load(ts: Sequence[Tensor]) -> Tensor:
        by_head = [t.reshape(n_k, -1, t.shape[-1]) for t in ts]  # (n_k, rows of a key head, d)
        parts = torch.split(by_head[0], qkvz, dim=1) + torch.split(by_head[1], ba, dim=1)
        return torch.cat([part.flatten(0, 1) for part in parts])

    def save(t: Tensor) -> list[Tensor]:
        parts = [p.reshape(n_k, -1, t.shape[-1]) for p in torch.split(t, [n_k * size for size in qkvz + ba])]
        return [torch.cat(parts[:4], dim=1).flatten(0, 1), torch.cat(parts[4:], dim=1).flatten(0, 1)]

    return Rule(zoo, names, load, save)


def gated_qkv(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The zoo's qkv, rows [q | k | v | gate], from q_proj (each head's query, then its gate), k_proj and v_proj."""
    heads, size = config.n_heads, config.head_dim

    def load(ts: Sequence[Tensor]) -> Tensor:
        q, gate = ts[0].reshape(heads, 2, size, -1).unbind(1)
        return torch.cat([q.flatten(0, 1), ts[1], ts[2], gate.flatten(0, 1)])

    def save(t: Tensor) -> list[Tensor]:
        kv = (t.shape[0] - 2 * heads * size) // 2
        q, k, v, gate = torch.split(t, [heads * size, kv, kv, heads * size])
        return [torch.stack([q.reshape(heads, size, -1), gate.reshape(heads, size, -1)], 1).flatten(0, 2), k, v]

    return Rule(zoo, names, load, save)


NEXT_ROTARY = Rotary(share=0.25, partial=True)
QWEN_BLOCKERS = delta_blockers({}, {"negative_eigenvalues": None, "gate_norm_eps": None}, gated=True)
ROUTING = Routing(defaults=(512, 10, 512, True), shared=True, sparse_layers=True)
LINEAR = "linear_attn."
# Qwen3-Next extends Qwen3(-MoE): DeltaNet layers by layer_types, gated attention, offset norms, a shared expert.
_ROUTED = routed(QWEN3, "Qwen3NextForCausalLM", ROUTING)
QWEN3_NEXT = _ROUTED.derive(
    "Qwen3NextForCausalLM",
    model_type="qwen3_next",
    description="Qwen3-Next: gated DeltaNet layers and output-gated attention, routed experts with a shared one",
    fresh=("read", "write", "blockers"),
    fields={
        **{name: F("", None, Count) for name, _ in DELTA.values()},
        **{name: None for name in ("use_sliding_window", "sliding_window", "max_window_layers")},
        "full_attention_interval": F("", None),
        "rms_norm_eps": F("norm_eps", 1e-6, float),
    },
    zoo={
        "norm": "rmsnorm_offset",
        "attention": {**QWEN3.zoo["attention"], "qk_norm_offset": True, "output_gate": True},
    },
    layer={
        "attn.qkv.weight": W("self_attn.{}_proj.weight", parts="qkv", when=attends, make=gated_qkv),
        "attn.qkv.bias": None,
        "attn.out.weight": W("self_attn.o_proj.weight", when=attends),
        **{
            k: W(v, when=attends)
            for k, v in (
                ("attn.q_norm.weight", "self_attn.q_norm.weight"),
                ("attn.k_norm.weight", "self_attn.k_norm.weight"),
            )
        },  # fmt: skip
        "attn.in_proj.weight": W(LINEAR + "in_proj_qkvz.weight", when=linear, make=grouped_in_proj),
        "attn.conv.weight": W(LINEAR + "conv1d.weight", when=linear),
        **{f"attn.{p}": W(LINEAR + p, when=linear) for p in ("A_log", "dt_bias", "norm.weight", "out_proj.weight")},
    },
    ignored=("mtp.",),  # the multi-token-prediction layers, which transformers never loads either
    engine_features=frozenset({"layer_pattern"}),
    layer_kinds=KINDS,
    read=(head_dim(256), llama_read, NEXT_ROTARY.read, ROUTING.read, next_read),
    write=(NEXT_ROTARY.write, ROUTING.write, next_write),
    blockers=(NEXT_ROTARY.blockers, ROUTING.blockers, QWEN_BLOCKERS),
)


def split_in_proj(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The zoo's in_proj from Qwen3.5's four projections, in_proj_qkv, _z, _b and _a, stacked as they are."""
    s = delta_sizes(config)
    key, value = s["n_k_heads"] * s["k_head_dim"], s["n_v_heads"] * s["v_head_dim"]
    stored = [names[0].replace("in_proj_qkv", f"in_proj_{p}") for p in ("qkv", "z", "b", "a")]
    return Rule.concat(zoo, stored, (2 * key + value, value, s["n_v_heads"], s["n_v_heads"]))


def separate_in_proj(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The zoo's in_proj from OLMo Hybrid's six projections, q, k, v, g (the output gate), b
    and a; or its convolution from the three of q, k and v (``q_conv1d``, as its files store them)."""
    s = delta_sizes(config)
    key, value = s["n_k_heads"] * s["k_head_dim"], s["n_v_heads"] * s["v_head_dim"]
    if names[0].endswith("q_conv1d.weight"):
        return Rule.concat(zoo, [names[0].replace("q_", f"{p}_") for p in "qkv"], (key, key, value))
    stored = [names[0].replace("q_proj", f"{p}_proj") for p in "qkvgba"]
    return Rule.concat(zoo, stored, (key, key, value, value, s["n_v_heads"], s["n_v_heads"]))


# Qwen3.5 extends Qwen3-Next: a dense SwiGLU MLP in every layer; in_proj as four plain projections.
QWEN3_5 = QWEN3_NEXT.derive(
    "Qwen3_5ForCausalLM",
    model_type="qwen3_5_text",
    description="Qwen3.5: Qwen3-Next's gated DeltaNet and gated attention layers with a dense SwiGLU MLP",
    fields={name: None for name in ROUTING_FIELDS},
    zoo={"mlp": {"name": "swiglu"}},
    layer={
        "mlp.router.weight": None,
        **{f"mlp.{p}.weight": f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")},
        "attn.in_proj.weight": W(LINEAR + "in_proj_qkv.weight", when=linear, make=split_in_proj),
    },
    fresh=("read", "write", "blockers"),
    read=(head_dim(256), llama_read, NEXT_ROTARY.read, next_read),
    write=(NEXT_ROTARY.write, next_write),
    blockers=(NEXT_ROTARY.blockers, QWEN_BLOCKERS),
)


def olmo_hybrid_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The pattern with transformers' defaults: attention at every 4th layer (and the last if
    none), key heads of 3/4 of hidden_size over their count, value heads twice as wide; the
    DeltaNet layers pre-norm, their output norm's epsilon FLA's 1e-5."""
    layers, heads = fields["n_layers"], fields["n_heads"]
    types = hf.get("layer_types") or ["full_attention" if i % 4 == 3 or (layers < 4 and i == layers - 1) else "linear_attention" for i in range(layers)]  # fmt: skip
    ok = isinstance(types, list) and {"linear_attention", "full_attention"} <= set(types)
    refuse_unless(ok, where, "layer_types", types, "OLMo Hybrid has both kinds of layer (transformers refuses others)")
    n_k = hf.get("linear_num_key_heads") or heads
    dk = hf.get("linear_key_head_dim") or int(0.75 * fields["d_model"] / n_k)
    sizes = {"linear_num_key_heads": n_k, "linear_num_value_heads": hf.get("linear_num_value_heads") or heads}
    sizes |= {"linear_key_head_dim": dk, "linear_value_head_dim": hf.get("linear_value_head_dim") or 2 * dk}
    sizes |= {"linear_conv_kernel_dim": hf.get("linear_conv_kernel_dim") or 4}
    negative = bool(hf.get("linear_allow_neg_eigval", True))
    entry = {"placement": "pre", "attention": {"negative_eigenvalues": negative, "gate_norm_eps": 1e-5}}
    return delta_pattern(sizes, fields, where, types, entry)


def olmo_hybrid_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    first = next(config.layer(i) for i in range(config.n_layers) if linear(config.layer(i)))
    return {**hf, "linear_allow_neg_eigval": bool(first.attention.options.get("negative_eigenvalues"))}


def nope_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """No positions where ``rope_parameters`` names no ``rope_theta`` (the released checkpoints), else rotary."""
    params = hf.get("rope_parameters")
    if isinstance(params, Mapping) and params.get("rope_theta", 0) is None:
        return {**fields, "position": "none"}
    return LLAMA_ROTARY.read(hf, fields, where)


def nope_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    if config.position.name == "none":
        return {**hf, "rope_parameters": {"rope_type": "default", "rope_theta": None}}
    return LLAMA_ROTARY.write(config, hf)


def by_kind(attention: str, linear_name: str) -> W:
    """A norm stored as ``attention`` in the attention layers, ``linear_name`` in the DeltaNet ones
    (the names of OLMo Hybrid's files: transformers renames input_layernorm to attention_layer_norm
    and post_attention_layernorm to feedforward_layer_norm when it saves, in both kinds of layer)."""

    def make(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
        return Rule.copy(zoo, names[0] if attends(config) else names[0].removesuffix(attention) + linear_name)

    return W(attention, make=make)


# OLMo Hybrid extends OLMo 2: DeltaNet layers (pre-norm, Llama's) by layer_types between OLMo 2's
# post-norm QK-norm attention layers; beta in [0, 2]; no positions unless rope_parameters names a theta.
OLMO_HYBRID = OLMO2.derive(
    "OlmoHybridForCausalLM",
    model_type="olmo_hybrid",
    description="OLMo Hybrid: gated DeltaNet layers (beta in [0, 2]) between OLMo 2's post-norm attention layers",
    fresh=("read", "write", "blockers"),
    fields={
        **{name: F("", None, Count) for name, _ in DELTA.values()},
        "linear_allow_neg_eigval": F("", None, bool),
        **{f"linear_{name}": F("", None) for name in ("a_log_min", "a_log_max", "dt_min", "dt_max", "dt_init_floor")},
        "layer_types": F("", None),
        "num_key_value_heads": F("attention.n_kv_heads", None, Count),
        "head_dim": None,
    },
    layer={
        "attn_residual.norm.weight": by_kind("feedforward_layer_norm.weight", "attention_layer_norm.weight"),
        "mlp_residual.norm.weight": by_kind("post_feedforward_layernorm.weight", "feedforward_layer_norm.weight"),
        "attn.qkv.weight": W("self_attn.{}_proj.weight", "concat", "qkv", when=attends),
        "attn.qkv.bias": None,
        "attn.out.weight": W("self_attn.o_proj.weight", when=attends),
        **{f"attn.{p}_norm.weight": W(f"self_attn.{p}_norm.weight", when=attends) for p in "qk"},
        "attn.in_proj.weight": W(LINEAR + "q_proj.weight", when=linear, make=separate_in_proj),
        "attn.conv.weight": W(LINEAR + "q_conv1d.weight", when=linear, make=separate_in_proj),
        **{f"attn.{p}": W(LINEAR + p, when=linear) for p in ("A_log", "dt_bias")},
        "attn.norm.weight": W(LINEAR + "o_norm.weight", when=linear),
        "attn.out_proj.weight": W(LINEAR + "o_proj.weight", when=linear),
    },
    accepts={"position": ("none",)},
    engine_features=frozenset({"layer_pattern"}),
    layer_kinds=KINDS,
    read=(head_dim(None), llama_read, nope_read, olmo_hybrid_read),
    write=(nope_write, next_write, olmo_hybrid_write),
    blockers=(LLAMA_ROTARY.blockers, delta_blockers({"placement": "pre"}, {"gate_norm_eps": 1e-5}, gated=False)),
)

FAMILIES = (QWEN3_NEXT, QWEN3_5, OLMO_HYBRID)
