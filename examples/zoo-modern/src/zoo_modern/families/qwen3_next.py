"""Qwen3-Next: Qwen3-MoE's layers with gated DeltaNet mixers in three of every four.

Qwen3-Next extends Qwen3 (QK-norm per head, an explicit head_dim) with:

- ``layer_types``: ``linear_attention`` layers mix by zoo-modern's ``gated_deltanet`` (the
  ``linear_*`` fields are its sizes, one set for all such layers), ``full_attention`` ones
  attend; without the field every ``full_attention_interval``-th layer (4) attends.
- an output gate on attention (``qknorm``'s ``output_gate``): q_proj emits each head's query
  and gate side by side, which the zoo keeps as rows after q, k and v;
- rotary on a quarter of each head (``partial_rotary_factor``), head_dim 256 by default;
- every norm but the mixers' gated one scaled by 1 + w (``rmsnorm_offset``, the q/k norms too);
- a routed MoE in every layer with Qwen2-MoE's sigmoid-gated shared expert.

The mixer's in_proj is two tensors in transformers, ``in_proj_qkvz`` and ``in_proj_ba``, each
grouped by key head ([q | k | v | z] and [b | a] of each key head's value heads); the zoo's is
one, rows [q | k | v | z | b | a] of all heads, reordered on import and back on export. The
multi-token-prediction weights (``mtp.*``) of the released checkpoints are not modelled.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Count, F, ModelConfig, Rule, W
from zoo_modern.families.llama_like import QWEN3, head_dim, llama_read
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


def next_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The layer pattern of DeltaNet mixers and attention, from ``layer_types`` or the interval."""
    layers = fields["n_layers"]
    types = hf.get("layer_types")
    if types is None:
        every = hf.get("full_attention_interval") or 4
        refuse_unless(type(every) is int and every > 0, where, "full_attention_interval", every, "a whole number >= 1")
        types = ["full_attention" if (i + 1) % every == 0 else "linear_attention" for i in range(layers)]
    ok = isinstance(types, list) and len(types) == layers and set(types) <= set(KINDS)
    refuse_unless(ok, where, "layer_types", types, f"give {layers} of 'linear_attention'/'full_attention'")
    spec: dict[str, Any] = {"name": "gated_deltanet"}
    spec |= {option: hf.get(name) or d for option, (name, d) in DELTA.items()}
    refuse_unless(spec["n_v_heads"] % spec["n_k_heads"] == 0, where, "linear_num_value_heads", spec["n_v_heads"], "a multiple of linear_num_key_heads")  # fmt: skip
    pattern = periodic([{"attention": spec} if kind == "linear_attention" else {} for kind in types])
    return {**fields, "layer_pattern": [] if pattern == [{}] else pattern}


def next_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    kinds = ["linear_attention" if linear(config.layer(i)) else "full_attention" for i in range(config.n_layers)]
    first = next((config.layer(i) for i in range(config.n_layers) if linear(config.layer(i))), None)
    sizes = delta_sizes(first) if first is not None else {o: d for o, (_, d) in DELTA.items()}
    return {**hf, "layer_types": kinds, **{name: sizes[o] for o, (name, _) in DELTA.items()}}


def next_blockers(config: ModelConfig, arch: str) -> list[str]:
    """A pattern that changes anything but the mixer, or DeltaNet layers whose options differ."""
    blockers, seen = [], set()
    for i in range(config.n_layers):
        changes, layer = config.layer_changes(i), config.layer(i)
        if set(changes) - {"attention"}:
            blockers.append(f"layer {i} changes {', '.join(sorted(set(changes) - {'attention'}))} ({arch} has one design)")  # fmt: skip
        elif linear(layer):
            seen.add(tuple(sorted(delta_sizes(layer).items())))  # chunk_size changes no sums
        elif "attention" in changes:
            blockers.append(f"layer {i}'s attention differs from the model's ({arch} has one attention)")
    if len(seen) > 1:
        blockers.append(f"DeltaNet layers whose sizes differ ({arch} has one set of linear_* fields)")
    if not config.attention.options.get("output_gate"):
        blockers.append(f"attention without output_gate ({arch} gates every attention output)")
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
    engine_features=frozenset({"layer_pattern"}),
    layer_kinds=KINDS,
    read=(head_dim(256), llama_read, NEXT_ROTARY.read, ROUTING.read, next_read),
    write=(NEXT_ROTARY.write, ROUTING.write, next_write),
    blockers=(NEXT_ROTARY.blockers, ROUTING.blockers, next_blockers),
)


def split_in_proj(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The zoo's in_proj from Qwen3.5's four projections, in_proj_qkv, _z, _b and _a, stacked as they are."""
    s = delta_sizes(config)
    key, value = s["n_k_heads"] * s["k_head_dim"], s["n_v_heads"] * s["v_head_dim"]
    stored = [names[0].replace("in_proj_qkv", f"in_proj_{p}") for p in ("qkv", "z", "b", "a")]
    return Rule.concat(zoo, stored, (2 * key + value, value, s["n_v_heads"], s["n_v_heads"]))


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
    blockers=(NEXT_ROTARY.blockers, next_blockers),
)

FAMILIES = (QWEN3_NEXT, QWEN3_5)
