"""Llama's lineage with an ungated MLP (up, activation, down): Arcee's ReLU squared and
the families that extend it (Nemotron, Jais 2, NanoChat, Apertus, Persimmon, Apertus 1.5).

Each family opens with the one it extends and how; the table says the rest.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import REQUIRED, Count, Epsilon, F, Fraction, ModelConfig, Positive, Rule, W, linear
from zoo_modern.families.llama_kin import NORM_WEIGHTS
from zoo_modern.families.llama_like import LLAMA, LLAMA_ONLY, QK_NORMS, llama_read, qk_reordered
from zoo_modern.families.readers import Rotary, fused_per_head, qknorm


def ungated(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The MLP ``up, act, down`` of width ``intermediate_size`` (no gated width to read)."""
    return {**fields, "mlp": {k: v for k, v in fields["mlp"].items() if k != "hidden"}}


RELU2 = F("activation", "relu2", str, {"relu2": "relu2"})
NO_BIASES = {"qkv_bias": False, "out_bias": False}
# Arcee extends Llama: an ungated MLP, up then ReLU squared then down.
ARCEE = LLAMA.derive(
    "ArceeForCausalLM",
    model_type="arcee",
    description="Arcee (AFM): Llama's layout with an ungated ReLU-squared MLP",
    fields={"hidden_act": RELU2, "intermediate_size": F("d_ff", REQUIRED, Count)}
    | {"max_position_embeddings": F("max_seq_len", 4096, Count)},
    zoo={"mlp": {"name": "standard"}},
    layer={"mlp.gate.weight": None},
    read=(ungated,),
)


def plus_one(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """A norm scale stored as an offset from one (Nemotron's LayerNorm1P: w + 1)."""

    def load(ts: Sequence[Tensor]) -> Tensor:
        return ts[0] + 1.0

    return Rule(zoo, names, load, lambda t: [t - 1.0])


NORMS = (("attn_residual.norm", "input_layernorm"), ("mlp_residual.norm", "post_attention_layernorm"))
NEMOTRON_ROTARY = Rotary(share=0.5, partial=True)
# Nemotron extends Arcee: LayerNorm with a bias whose scale is stored as w - 1, half the head rotated.
NEMOTRON = ARCEE.derive(
    "NemotronForCausalLM",
    model_type="nemotron",
    description="Nemotron: Arcee's ReLU-squared MLP, LayerNorm (scale stored as w - 1), partial rotary",
    fields={"rms_norm_eps": None, "norm_eps": F("norm_eps", 1e-5, Epsilon)},
    zoo={"norm": {"name": "layernorm", "shift": True}},
    layer={f"{z}.weight": W(f"{h}.weight", make=plus_one) for z, h in NORMS}
    | {f"{z}.bias": f"{h}.bias" for z, h in NORMS},
    top={"final_norm.weight": W("norm.weight", make=plus_one), "final_norm.bias": "norm.bias"},
    fresh=("read", "write", "blockers"),
    read=(llama_read, NEMOTRON_ROTARY.read, ungated),
    write=(NEMOTRON_ROTARY.write,),
    blockers=(NEMOTRON_ROTARY.blockers,),
)

# Jais 2 extends Arcee: LayerNorm, biases on every projection.
JAIS2 = ARCEE.derive(
    "Jais2ForCausalLM",
    model_type="jais2",
    description="Jais 2: Arcee's ReLU-squared MLP, LayerNorm, biases on every projection",
    fields={"rms_norm_eps": None, "layer_norm_eps": F("norm_eps", 1e-5, Epsilon)}
    | {"max_position_embeddings": F("max_seq_len", 8192, Count)}
    | {b: F.must(True, "Jais 2 without biases is not modelled", bool) for b in ("attention_bias", "mlp_bias")},
    zoo={"bias": True, "norm": "layernorm", "attention": {"name": "sdpa", "qkv_bias": True, "out_bias": True}},
    layer={f"{z}.bias": f"{h}.bias" for z, h in (*NORMS, ("attn.out", "self_attn.o_proj"))}
    | {f"mlp.{p}.bias": f"mlp.{p}_proj.bias" for p in ("up", "down")},
    top={"final_norm.bias": "norm.bias"},
)


def flip_second_half(t: Tensor, heads: int) -> Tensor:
    """Rows of a q or k projection with the second half of each head negated: NanoChat's
    rotary turns the other way (rotate_half as [x2, -x1]), and this turns it back, leaving
    every score (its norm after the rotation too) as it was. Its own inverse."""
    halves = t.reshape(heads, 2, -1, *t.shape[1:])
    return torch.cat([halves[:, :1], -halves[:, 1:]], dim=1).reshape(t.shape)


#: NanoChat's q/k/v projections, q and k with the second half of each head negated.
flipped_rotary_qkv = qk_reordered(flip_second_half, flip_second_half)


# NanoChat extends Arcee: norms without scales (the embeddings normed too), QK-norm after a
# rotary turned the other way, soft-capped logits, the MLP as fc1 and fc2.
NANOCHAT = ARCEE.derive(
    "NanoChatForCausalLM",
    model_type="nanochat",
    description="NanoChat: Arcee's ReLU-squared MLP, RMSNorms without scales (embeddings too), QK-norm after rotary, capped logits",
    fields={**LLAMA_ONLY, "final_logit_softcapping": F("logit_softcap", 15.0, Positive)}
    | {"max_position_embeddings": F("max_seq_len", 2048, Count)},
    zoo={"norm": "rmsnorm_plain", "embedding_norm": True}
    | {"attention": {"name": "qknorm", "qk_norm_after": True, "qk_norm_plain": True, **NO_BIASES}},
    engine_features=frozenset({"logit_softcap"}),
    accepts={"attention": ()},
    layer=NORM_WEIGHTS
    | {"attn.qkv.weight": W("self_attn.{}_proj.weight", parts="qkv", make=flipped_rotary_qkv)}
    | {"mlp.up.weight": "mlp.fc1.weight", "mlp.down.weight": "mlp.fc2.weight"},
    top={"final_norm.weight": None},
)

XIELU_TENSORS = {f"mlp.act.{t}": f"mlp.act_fn.{t}" for t in ("alpha_p", "alpha_n", "beta", "eps")}
# Apertus extends Arcee: xIELU in place of ReLU squared, QK-norm per head, its norms named for their sub-layers.
APERTUS = ARCEE.derive(
    "ApertusForCausalLM",
    model_type="apertus",
    description="Apertus: Arcee's ungated MLP with a learned xIELU, QK-norm per head, Llama 3's rotary",
    fields={**LLAMA_ONLY, "hidden_act": F("activation", "xielu", str, {"xielu": "xielu"})}
    | {"max_position_embeddings": F("max_seq_len", 65536, Count)},
    zoo={"attention": qknorm("head")},
    accepts={"attention": ()},
    layer={
        "attn_residual.norm.weight": "attention_layernorm.weight",
        "mlp_residual.norm.weight": "feedforward_layernorm.weight",
    }
    | QK_NORMS
    | XIELU_TENSORS,
)


def qk_layernorm(config: ModelConfig) -> bool:
    return config.attention.options.get("qk_norm") == "head"


PERSIMMON_ROTARY = Rotary(share=0.5, partial=True)
PERSIMMON_QK = {
    f"attn.{q}_norm.{p}": W(f"self_attn.{q}_layernorm.{p}", when=qk_layernorm) for q in "qk" for p in ("weight", "bias")
}
# Persimmon extends Jais 2: q/k/v fused per head, a LayerNorm with a bias on each q and k head, half of each head rotated.
PERSIMMON = JAIS2.derive(
    "PersimmonForCausalLM",
    model_type="persimmon",
    description="Persimmon: Jais 2's ReLU-squared layout, q/k/v fused per head, LayerNorm per q and k head, partial rotary",
    fields={**LLAMA_ONLY, "attention_bias": None, "hidden_dropout": F("dropout.residual", 0.0, Fraction)}
    | {"qk_layernorm": F("attention.qk_norm", True, bool, {True: "head", False: "none"})}
    | {"max_position_embeddings": F("max_seq_len", 16384, Count)}
    | {"attention_dropout": F("dropout.attention", 0.0, Fraction)},
    zoo={"attention": {"name": "qknorm", "qk_norm_layernorm": True, "qkv_bias": True, "out_bias": True}},
    accepts={"attention": ()},
    layer=fused_per_head("self_attn.query_key_value")
    | linear({"attn.out": "self_attn.dense", "mlp.up": "mlp.dense_h_to_4h", "mlp.down": "mlp.dense_4h_to_h"})
    | PERSIMMON_QK,
    top=linear({"final_norm": "final_layernorm"}),
    fresh=("read", "write", "blockers"),
    read=(llama_read, PERSIMMON_ROTARY.read, ungated),
    write=(PERSIMMON_ROTARY.write,),
    blockers=(PERSIMMON_ROTARY.blockers,),
)


# Apertus 1.5 (text) extends Apertus: a larger vocabulary (the multimodal tokens); a pruned head refused.
APERTUS1P5 = APERTUS.derive(
    "Apertus1p5TextForCausalLM",
    model_type="apertus1p5_text",
    description="Apertus 1.5 (text): Apertus's layers over a vocabulary with image and audio tokens",
    fields={"output_vocab_size": F.must(None, "an output head narrower than the vocabulary is not modelled")},
)

FAMILIES = (ARCEE, NEMOTRON, JAIS2, NANOCHAT, APERTUS, PERSIMMON, APERTUS1P5)
