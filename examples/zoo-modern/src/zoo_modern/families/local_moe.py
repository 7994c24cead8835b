"""The 2025 sparse families whose attention is local on some layers: GPT-OSS (learned sinks,
sliding and full layers alternating) and Llama 4's text model (chunked layers beside NoPE
ones). Each extends an MoE family of ``moe`` with zoo-modern's ``sinks`` or ``chunked``
attention and the routing options those designs added to ``moe``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Count, Epsilon, F, ModelConfig, Positive, Rule, W
from zoo_modern.families.llama_kin import KINDS, write_layer_types
from zoo_modern.families.llama_like import LLAMA, head_dim
from zoo_modern.families.moe import Routing, options, routed
from zoo_modern.families.readers import layer_windows, refuse_unless, window_blockers, with_windows


def alternating_windows(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The ``sliding_window`` (128) on the layers ``layer_types`` names sliding (every other
    one, from the first, where it is unset)."""
    layers = fields["n_layers"]
    types = hf.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    refuse_unless(len(types) == layers and not set(types) - set(KINDS), where, "layer_types", types, f"give {layers} of 'sliding_attention'/'full_attention'")  # fmt: skip
    return with_windows(fields, layer_windows({"layer_types": types}, layers, fields["max_seq_len"], hf.get("sliding_window", 128)))  # fmt: skip


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
    fields={
        "sliding_window": F("", 128, Count),
        "layer_types": F("", None),
        "head_dim": F("", 64, Count, out=lambda c: c.head_dim),
    }  # fmt: skip
    | {"swiglu_alpha": F("", 1.702, Positive, out=lambda c: options(c).alpha)}
    | {"swiglu_limit": F("", 7.0, Positive, out=lambda c: options(c).limit)}
    | {"attention_bias": F.must(True, "GPT-OSS's q/k/v/o projections have biases", bool), "mlp_bias": None}
    | {"max_position_embeddings": F("max_seq_len", 131072, Count), "rms_norm_eps": F("norm_eps", 1e-5, Epsilon)},
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
    read=(clamped_experts, alternating_windows),
    write=(write_layer_types,),
    blockers=(window_blockers,),
)

FAMILIES = (GPT_OSS,)
