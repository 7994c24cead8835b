"""The 2025 sparse families whose attention is local on some layers: GPT-OSS (learned sinks,
sliding and full layers alternating) and Llama 4's text model (chunked layers beside NoPE
ones). Each extends Llama, routed as ``moe``'s families are, with zoo-modern's ``sinks`` or
``chunked`` attention and the routing options those designs added to ``moe``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Count, Epsilon, F, Fraction, ModelConfig, Positive, Rule, W
from zoo_modern.families.llama_kin import default_types, write_layer_types
from zoo_modern.families.llama_like import LLAMA, head_dim, interleaved_qkv
from zoo_modern.families.moe import Routing, options, routed
from zoo_modern.families.readers import periodic, refuse_unless, window_blockers
from zoo_modern.local_attention import ChunkedOptions


def interleaved_pairs(transposed: bool) -> Any:
    """A rule maker: the zoo's ``gate_up`` (E, 2 x hidden[, d]), rows [gate | up], from
    GPT-OSS's ``gate_up_proj`` (E, d, 2 x hidden) or its bias (E, 2 x hidden), whose
    columns interleave gate and up (gate at the even ones)."""

    def make(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
        def load(ts: Any) -> Tensor:
            t = ts[0].transpose(1, 2) if transposed else ts[0]
            return torch.cat([t[:, 0::2], t[:, 1::2]], dim=1)

        def save(t: Tensor) -> list[Tensor]:
            pairs = torch.stack(t.chunk(2, dim=1), dim=2).flatten(1, 2)
            return [(pairs.transpose(1, 2) if transposed else pairs).contiguous()]

        return Rule(zoo, names, load, save)

    return make


def transposed_stack(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The zoo's ``down`` (E, d, hidden) from GPT-OSS's ``down_proj`` (E, hidden, d)."""
    return Rule(zoo, names, lambda ts: ts[0].transpose(1, 2), lambda t: [t.transpose(1, 2).contiguous()])


def clamped_experts(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """GPT-OSS's routing extras: a router bias, experts' product clamped and sharpened."""
    mlp = {**fields["mlp"], "router_bias": True, "up_shift": 1.0}
    mlp |= {"alpha": float(hf.get("swiglu_alpha") or 1.702), "limit": float(hf.get("swiglu_limit") or 7.0)}
    return {**fields, "mlp": mlp}


EXPERTS = "mlp.experts."
# GPT-OSS extends Llama, routed as Mixtral (softmax over the top-k): learned sinks per head with
# an explicit head_dim and biases everywhere, windows on every other layer, experts with biases
# stored stacked (gate and up interleaved), their SwiGLU clamped at swiglu_limit, a router bias.
GPT_OSS = routed(
    LLAMA,
    "GptOssForCausalLM",
    Routing(experts_field="num_local_experts", hidden_field="intermediate_size", always_normalized=True),
    model_type="gpt_oss",
    description="GPT-OSS: attention sinks, sliding/full layers alternating, top-k experts with biases, clamped SwiGLU",
    fields={"sliding_window": F("", 128, Count), "layer_types": F("", None)}
    | {"head_dim": F("", 64, Count, out=lambda c: c.head_dim)}
    | {"swiglu_alpha": F("", 1.702, Positive, out=lambda c: options(c).alpha)}
    | {"swiglu_limit": F("", 7.0, Positive, out=lambda c: options(c).limit)}
    | {"attention_bias": F.must(True, "GPT-OSS's q/k/v/o projections have biases", bool), "mlp_bias": None}
    | {"max_position_embeddings": F("max_seq_len", 131072, Count), "rms_norm_eps": F("norm_eps", 1e-5, Epsilon)}
    | {"experts_per_token": F("", None), "initial_context_length": F("", None)},  # released, read by no one
    zoo={"bias": True, "attention": {"name": "sinks", "qkv_bias": True, "out_bias": True}}
    | {"mlp": {"name": "moe", "router_bias": True, "up_shift": 1.0}},
    accepts={"attention": ()},
    layer={"attn.sinks": "self_attn.sinks", "attn.out.bias": "self_attn.o_proj.bias"}
    | {"mlp.router.weight": "mlp.router.weight", "mlp.router.bias": "mlp.router.bias"}
    | {"mlp.experts.gate_up.weight": W(EXPERTS + "gate_up_proj", make=interleaved_pairs(True))}
    | {"mlp.experts.gate_up.bias": W(EXPERTS + "gate_up_proj_bias", make=interleaved_pairs(False))}
    | {"mlp.experts.down.weight": W(EXPERTS + "down_proj", make=transposed_stack)}
    | {"mlp.experts.down.bias": EXPERTS + "down_proj_bias"},
    engine_features=frozenset({"window", "layer_pattern"}),
    before=(head_dim(64),),
    read=(clamped_experts, default_types(128, lambda i: i % 2 == 0)),
    write=(write_layer_types,),
    blockers=(window_blockers,),
)


def llama4_layers(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Each layer's attention: rotary with an L2 QK-norm after it (``use_qk_norm``), chunked
    where ``layer_types`` says so, on the layers ``no_rope_layers`` marks 1 (3 of 4 by
    default); the others without positions, their queries temperature-tuned."""
    layers, base = fields["n_layers"], {k: v for k, v in fields["attention"].items() if k != "name"}
    every = int(hf.get("no_rope_layer_interval") or 4)
    ropes = hf.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
    chunk = hf.get("attention_chunk_size", 8192)
    types = hf.get("layer_types") or ["chunked_attention" if r and chunk else "full_attention" for r in ropes]
    refuse_unless(len(ropes) == layers and set(ropes) <= {0, 1}, where, "no_rope_layers", ropes, f"give {layers} of 0/1")  # fmt: skip
    refuse_unless(len(types) == layers and set(types) <= set(LLAMA4_KINDS) and bool(chunk) >= ("chunked_attention" in types), where, "layer_types", types, f"give {layers} of {'/'.join(LLAMA4_KINDS)} (chunked ones with an attention_chunk_size)")  # fmt: skip
    moe = hf.get("moe_layers")
    refuse_unless(moe is None or list(moe) == list(range(layers)), where, "moe_layers", moe, "every layer must route (a zoo config has one MLP for all layers)")  # fmt: skip
    entries: list[dict[str, Any]] = []
    for rope, kind in zip(ropes, types, strict=True):
        attention = {**base, "name": "chunked" if kind == "chunked_attention" else "qknorm", "qk_norm": "none"}
        attention |= {"chunk_size": int(chunk)} if kind == "chunked_attention" else {}
        if rope and hf.get("use_qk_norm", True):
            attention |= {"qk_norm": "head", "qk_norm_plain": True, "qk_norm_after": True}
        if not rope and hf.get("attn_temperature_tuning", True):
            attention |= {"temperature": float(hf.get("attn_scale", 0.1)), "temperature_floor": int(hf.get("floor_scale", 8192))}  # fmt: skip
        entries.append({"attention": attention} | ({} if rope else {"position": "none"}))
    mlp = {**fields["mlp"], "scoring": "sigmoid", "normalize_top_k": False, "weight_input": True}
    pattern = periodic(entries)
    fields = {**fields, **entries[0], "mlp": mlp} if len(pattern) == 1 else {**fields, "attention": entries[0]["attention"], "mlp": mlp}  # fmt: skip
    return {**fields, "layer_pattern": pattern} if len(pattern) > 1 else fields


def llama4_layers_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    layers = [config.layer(i) for i in range(config.n_layers)]
    chunks = {int(c.attention.options.get("chunk_size", 8192)) for c in layers if c.attention.name == "chunked"}
    tuned = [c.attention.options for c in layers if c.attention.options.get("temperature")]
    out = {**hf, "no_rope_layers": [int(c.position.name != "none") for c in layers], "moe_layers": list(range(len(layers)))}  # fmt: skip
    out |= {"layer_types": ["chunked_attention" if c.attention.name == "chunked" else "full_attention" for c in layers]}  # fmt: skip
    out |= {"attention_chunk_size": chunks.pop() if chunks else None, "attn_temperature_tuning": bool(tuned)}
    out |= {"use_qk_norm": any(c.attention.options.get("qk_norm") == "head" for c in layers)}
    return out | {"attn_scale": tuned[0]["temperature"] if tuned else 0.1, "floor_scale": tuned[0].get("temperature_floor", 8192) if tuned else 8192}  # fmt: skip


#: The attention options a Llama 4 layer sets, at their defaults; and those every layer shares.
LAYER_OPTIONS = {"qk_norm": "none", "qk_norm_plain": False, "qk_norm_after": False, "chunk_size": 8192}
LAYER_OPTIONS |= {"temperature": 0.0, "temperature_floor": 8192}
SHARED_OPTIONS = ("n_kv_heads", "head_dim", "qkv_bias", "out_bias", "kernel")
UNSET = ChunkedOptions().model_dump()  # every other option must hold its default


def layer_design(config: ModelConfig) -> tuple[Any, ...]:
    options = config.attention.options
    return (config.attention.name, config.position.name, *(options.get(k, d) for k, d in LAYER_OPTIONS.items()))


def llama4_blockers(config: ModelConfig, arch: str) -> list[str]:
    """Each layer one of Llama 4's: rotary (the L2 QK-norm on all or none, chunked or not) or
    NoPE (temperature-tuned all alike), one rotary, no other attention option."""
    layers, blockers = [config.layer(i) for i in range(config.n_layers)], []
    base = {"n_layers": config.n_layers, "attention": {}, "mlp": {}, "position": config.position.name}
    wanted = llama4_layers(llama4_layers_out(config, {}), base, arch)
    want = [ModelConfig.model_validate({**config.model_dump(), **wanted, "mlp": config.mlp.model_dump()}).layer(i) for i in range(config.n_layers)]  # fmt: skip
    for i, (have, should) in enumerate(zip(layers, want, strict=True)):
        options = have.attention.options.items()
        extra = {k for k, v in options if k not in LAYER_OPTIONS and k not in SHARED_OPTIONS and v != UNSET.get(k)}
        if layer_design(have) != layer_design(should) or extra or have.position.name not in ("rotary", "none"):
            blockers.append(f"layer {i}'s attention or position ({arch}'s layers: rotary with an L2 QK-norm, or NoPE)")
        elif have.position.name == "rotary" and have.position != config.position:
            blockers.append(f"layer {i}'s rotary ({arch} has one)")
    changes = {kind for i in range(config.n_layers) for kind in config.layer_changes(i)} - {"attention", "position"}
    return blockers + ([f"per-layer {', '.join(sorted(changes))} ({arch} has one MLP)"] if changes else [])


LLAMA4_KINDS = ("chunked_attention", "full_attention")
FF, UNREAD = "feed_forward.", F("", None)
# Llama 4 (text) extends Llama: rotary in neighbouring pairs (q and k reordered, as Cohere's) with an
# L2 QK-norm after it and chunked attention on 3 layers of 4, the fourth NoPE with tuned queries;
# every layer routed: sigmoid scores of the top-k weighting the experts' inputs, an ungated shared expert.
LLAMA4 = routed(
    LLAMA,
    "Llama4ForCausalLM",
    Routing(
        "feed_forward",
        experts_field="num_local_experts",
        hidden_field="intermediate_size",
        defaults=(16, 1, 8192, False),
        shared=True,
        shared_width="intermediate_size",
        shared_gate=False,
    ),  # fmt: skip
    model_type="llama4_text",
    description="Llama 4 (text): chunked rotary layers with an L2 QK-norm, NoPE layers, routed experts and a shared one",
    fields={
        name: UNREAD for name in ("no_rope_layers", "no_rope_layer_interval", "attention_chunk_size", "layer_types")
    }
    | {name: UNREAD for name in ("moe_layers", "use_qk_norm", "attn_temperature_tuning", "attn_scale", "floor_scale")}
    | {
        "interleave_moe_layer_step": F.must(
            1, "every layer must route (a zoo config has one MLP for all layers)", Count
        )
    }
    | {"intermediate_size_mlp": UNREAD, "head_dim": F("", 128, Count, out=lambda c: c.head_dim), "mlp_bias": None}
    | {"router_jitter_noise": F.must(0.0, "noise on the router's input in training is not modelled", Fraction)}
    | {"max_position_embeddings": F("max_seq_len", 4096 * 32, Count), "rms_norm_eps": F("norm_eps", 1e-5, Epsilon)},
    zoo={"attention": {"name": "chunked", "qkv_bias": False, "out_bias": False}},
    accepts={"attention": ("qknorm",)},
    layer={"attn.qkv.weight": W("self_attn.{}_proj.weight", parts="qkv", make=interleaved_qkv)}
    | {"mlp.router.weight": FF + "router.weight"}
    | {"mlp.experts.gate_up.weight": W(FF + "experts.gate_up_proj", make=transposed_stack)}
    | {"mlp.experts.down.weight": W(FF + "experts.down_proj", make=transposed_stack)}
    | {f"mlp.shared.{p}.weight": f"{FF}shared_expert.{p}_proj.weight" for p in ("gate", "up", "down")},
    engine_features=frozenset({"layer_pattern"}),
    layer_kinds=LLAMA4_KINDS,
    before=(head_dim(128),),
    read=(llama4_layers,),
    write=(llama4_layers_out,),
    blockers=(llama4_blockers,),
)

FAMILIES = (GPT_OSS, LLAMA4)
