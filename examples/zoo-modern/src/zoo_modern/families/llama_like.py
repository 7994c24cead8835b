"""Llama's lineage: pre-norm RMSNorm, rotary, a gated MLP, grouped-query attention.

Each family after Llama opens with the one it extends and how; the table says the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import REQUIRED, Converter, Count, Epsilon, F, Family, Fraction, ModelConfig, Positive, Rule, W
from zoo_modern.families.readers import (
    ACTIVATIONS,
    IGNORED,
    ROPE_FIELDS,
    SIZES,
    Rotary,
    layer_windows,
    qknorm,
    qwen_windows,
    refuse_unless,
    window_blockers,
    window_per_layer,
    with_windows,
)
from zoo_modern.mlp import swiglu_hidden

#: A reordering of a q or k projection's rows, given its number of heads.
Reorder = Callable[[Tensor, int], Tensor]

ROPE = ROPE_FIELDS
NO_BIAS = {"attention_bias": None, "mlp_bias": None}  # fields of Llama's config its relatives lack
LLAMA_ONLY = dict.fromkeys(("mlp_bias", "head_dim", "pretraining_tp"))  # and others
LLAMA_ROTARY = Rotary(scaled=True)


def has_qkv_bias(config: ModelConfig) -> bool:
    return Converter.attention_layout(config)[1]


def mlp_hidden(config: ModelConfig) -> int:
    """``intermediate_size``: the gated MLP's width (the zoo's default where none is set)."""
    options = config.mlp.options
    return int(options.get("hidden") or swiglu_hidden(config.d_ff or 4 * config.d_model, options.get("multiple_of", 256)))  # fmt: skip


def llama_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Key/value heads (all, unless given), the gated MLP's width, and a head_dim that is
    hidden_size / heads unless the attention takes its own (``attention.head_dim``)."""
    d, heads, attention = fields["d_model"], fields["n_heads"], dict(fields["attention"])
    if attention.get("head_dim") is None:
        why = f"the zoo's head_dim is hidden_size / num_attention_heads = {d // heads}"
        refuse_unless(hf.get("head_dim") in (None, d // heads), where, "head_dim", hf.get("head_dim"), why)
    attention.setdefault("n_kv_heads", heads)
    return {**fields, "attention": attention, "mlp": {**fields["mlp"], "hidden": fields["d_ff"]}}


def head_dim(default: int | None) -> Any:
    """A reader of an explicit ``head_dim`` (transformers' ``default``; None: hidden_size / heads)."""

    def read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        size = hf.get("head_dim") or default or fields["d_model"] // fields["n_heads"]
        return {**fields, "attention": {**fields["attention"], "head_dim": int(size)}}

    return read


QK_NORMS = {f"attn.{p}_norm.weight": f"self_attn.{p}_norm.weight" for p in "qk"}
HEAD_DIM = F("", None, Count, out=lambda c: c.head_dim)

LLAMA = Family(
    architecture="LlamaForCausalLM",
    model_type="llama",
    aliases=("internlm3", "iquestcoder"),  # InternLM3's and IQuest-Coder's configs, Llama's classes
    description="LLaMA: RMSNorm, rotary, SwiGLU, grouped-query attention, no biases",
    prefix="model.",
    embedding="embed_tokens.weight",
    fields={**SIZES, "intermediate_size": F("d_ff", REQUIRED, Count, out=mlp_hidden), "head_dim": HEAD_DIM}
    | {"num_key_value_heads": F("attention.n_kv_heads", None, Count), "pretraining_tp": IGNORED}  # tp: the same sums
    | {**ROPE, "hidden_act": F("activation", "silu", str, {"silu": "silu"})}
    | {"tie_word_embeddings": F("tie_embeddings", False, bool), "rms_norm_eps": F("norm_eps", 1e-6, Epsilon)}
    | {"max_position_embeddings": F("max_seq_len", 2048, Count)}
    | {"attention_dropout": F("dropout.attention", 0.0, Fraction)}
    | {"attention_bias": F.must(False, "biases on q/k/v/o projections are not modelled for this family", bool)}
    | {"mlp_bias": F.must(False, "biases in the SwiGLU projections are not modelled", bool)},
    zoo={"bias": False, "attention": {"name": "sdpa", "qkv_bias": False, "out_bias": False}, "norm": "rmsnorm"}
    | {"placement": "pre", "position": "rotary", "mlp": {"name": "swiglu"}, "init": "gpt2"},
    accepts={"attention": ("eager", "gqa")},
    layer={
        "attn_residual.norm.weight": "input_layernorm.weight",
        "attn.qkv.weight": W("self_attn.{}_proj.weight", "concat", "qkv"),
        "attn.qkv.bias": W("self_attn.{}_proj.bias", "concat", "qkv", when=has_qkv_bias),
        "attn.out.weight": "self_attn.o_proj.weight",
        "mlp_residual.norm.weight": "post_attention_layernorm.weight",
        **{f"mlp.{p}.weight": f"mlp.{p}_proj.weight" for p in ("gate", "up", "down")},
    },
    top={"tok_emb.weight": "embed_tokens.weight", "final_norm.weight": "norm.weight", "head.weight": "lm_head.weight"},
    skip=("rotary_emb.inv_freq",),
    read=(llama_read, LLAMA_ROTARY.read),
    write=(LLAMA_ROTARY.write,),
    blockers=(LLAMA_ROTARY.blockers,),
)


def every_layer_window(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """One ``sliding_window`` for every layer (Mistral's, Phi-3's, Starcoder2's)."""
    window = hf.get("sliding_window")
    return with_windows(fields, layer_windows({}, fields["n_layers"], fields["max_seq_len"], window))


def one_window(config: ModelConfig, arch: str) -> list[str]:
    uniform = len(set(window_per_layer(config))) == 1
    return window_blockers(config, arch) + ([] if uniform else [f"a window in some layers only ({arch} windows every layer alike)"])  # fmt: skip


# Mistral extends Llama: one sliding window over every layer.
MISTRAL = LLAMA.derive(
    "MistralForCausalLM",
    model_type="mistral",
    description="Mistral: Llama's layout with a sliding attention window",
    fields={
        **NO_BIAS,
        "max_position_embeddings": F("max_seq_len", 4096 * 32, Count),
        "sliding_window": F("", None, Count, out=lambda c: window_per_layer(c)[0]),
    },  # fmt: skip
    engine_features=frozenset({"window"}),
    read=(every_layer_window,),
    blockers=(one_window,),
)


def qwen_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    windows = window_per_layer(config)
    sizes = {w for w in windows if w is not None}
    if not sizes:
        return {**hf, "use_sliding_window": False, "sliding_window": None, "max_window_layers": config.n_layers}
    types = ["sliding_attention" if w is not None else "full_attention" for w in windows]
    full = next((i for i, w in enumerate(windows) if w is not None), config.n_layers)
    return {**hf, "use_sliding_window": True, "sliding_window": sizes.pop(), "max_window_layers": full, "layer_types": types}  # fmt: skip


QWEN_WINDOWS = {f: F("", None) for f in ("use_sliding_window", "sliding_window", "max_window_layers", "layer_types")}
# Qwen2 extends Llama: biases on q, k and v; windows from max_window_layers on.
QWEN2 = LLAMA.derive(
    "Qwen2ForCausalLM",
    model_type="qwen2",
    description="Qwen2: Llama's layout plus q/k/v biases, sliding windows from max_window_layers",
    fields={**NO_BIAS, **QWEN_WINDOWS, "head_dim": None, "max_position_embeddings": F("max_seq_len", 32768, Count)},
    zoo={"attention": {"name": "sdpa", "qkv_bias": True, "out_bias": False}},
    engine_features=frozenset({"window", "layer_pattern"}),
    read=(qwen_windows,),
    write=(qwen_write,),
    blockers=(window_blockers,),
)

# Qwen3 extends Qwen2: no biases, an explicit head_dim, an RMSNorm per head on q and k.
QWEN3 = QWEN2.derive(
    "Qwen3ForCausalLM",
    model_type="qwen3",
    description="Qwen3: Llama's layout plus QK-norm per head and an explicit head_dim",
    fields={"attention_bias": LLAMA.fields["attention_bias"], "head_dim": HEAD_DIM},
    zoo={"attention": qknorm("head")},
    accepts={"attention": ()},
    layer=QK_NORMS,
    before=(head_dim(128),),
)


def gemma_attention(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """head_dim 256 by default; one other than hidden_size / heads is ``qknorm``'s own."""
    size = int(hf.get("head_dim") or 256)
    if size == fields["d_model"] // fields["n_heads"]:
        return fields
    return {**fields, "attention": {**fields["attention"], "name": "qknorm", "qk_norm": "none", "head_dim": size}}


GELU_TANH = {"gelu_pytorch_tanh": "gelu_tanh", **ACTIVATIONS, "gelu": "gelu_tanh"}  # Gemma's "gelu" is the tanh one
BIDIRECTIONAL = F.must(False, "the zoo's decoder attends causally", bool)
# Gemma extends Llama: GeGLU, RMSNorm scaled by 1 + w, embeddings times sqrt(d_model), head_dim 256, a tied head.
GEMMA = LLAMA.derive(
    "GemmaForCausalLM",
    model_type="gemma",
    description="Gemma: GeGLU, unit-offset RMSNorm, sqrt(d_model)-scaled embeddings, head_dim 256",
    fields={"mlp_bias": None, "hidden_act": F("activation", "gelu_pytorch_tanh", str, GELU_TANH)}
    | {"tie_word_embeddings": F("tie_embeddings", True, bool), "use_bidirectional_attention": BIDIRECTIONAL},
    zoo={"norm": "rmsnorm_offset", "mlp": {"name": "glu"}, "embedding_scale": "sqrt_d_model"}
    | {"activation": "gelu_tanh"},
    accepts={"attention": ("eager", "gqa", "qknorm")},
    before=(gemma_attention,),
)

# OLMo 2 extends Llama: the norm after each sub-layer, QK-norm over the whole projection.
OLMO2 = LLAMA.derive(
    "Olmo2ForCausalLM",
    model_type="olmo2",
    description="OLMo 2: norm after each sub-layer (x + norm(f(x))), QK-norm over the whole q and k",
    fields={"mlp_bias": None},
    zoo={"placement": "post_sublayer", "attention": qknorm("whole")},
    accepts={"attention": ()},
    layer={"attn_residual.norm.weight": "post_attention_layernorm.weight"}
    | {"mlp_residual.norm.weight": "post_feedforward_layernorm.weight", **QK_NORMS},
    before=(head_dim(None),),
)


def fused_glu(config: ModelConfig, arch: str) -> list[str]:
    fused = config.mlp.name != "glu" or config.mlp.options.get("fused")
    return [] if fused else [f"glu with fused=false ({arch} stores gate and up as one gate_up_proj)"]


# Phi-3 extends Mistral: q/k/v and gate/up stored fused, dropouts of its own; no longrope scaling.
PHI3 = MISTRAL.derive(
    "Phi3ForCausalLM",
    model_type="phi3",
    description="Phi-3: Llama's math with fused qkv_proj and gate_up_proj, a sliding window (no longrope scaling)",
    fields={"resid_pdrop": F("dropout.residual", 0.0, Fraction), "embd_pdrop": F("dropout.embedding", 0.0, Fraction)}
    | {"max_position_embeddings": F("max_seq_len", 4096, Count)}
    | {"original_max_position_embeddings": F("", None, Count, out=lambda c: c.max_seq_len)},
    zoo={"mlp": {"name": "glu", "fused": True}, "activation": "silu"},
    layer={"attn.qkv.weight": "self_attn.qkv_proj.weight", "attn.qkv.bias": None}
    | {"mlp.gate.weight": None, "mlp.up.weight": None, "mlp.gate_up.weight": "mlp.gate_up_proj.weight"},
    blockers=(fused_glu,),
)


def granite_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    embedding = float(hf.get("embedding_multiplier") or 1.0)
    return {**fields, "embedding_scale": "none" if embedding == 1.0 else embedding, "logit_scale": 1.0 / float(hf.get("logits_scaling") or 1.0)}  # fmt: skip


# Granite extends Llama: multipliers on the embeddings, each sub-layer's output, the scores and the logits.
GRANITE = LLAMA.derive(
    "GraniteForCausalLM",
    model_type="granite",
    description="Granite: Llama's layout with embedding, residual, attention and logit multipliers",
    fields={
        "embedding_multiplier": F(
            "", None, Positive, out=lambda c: 1.0 if c.embedding_scale == "none" else float(c.embedding_scale)
        ),  # fmt: skip
        "residual_multiplier": F(
            "placement.residual_scale",
            1.0,
            Positive,
            out=lambda c: float(c.placement.options.get("residual_scale", 1.0)),
        ),  # fmt: skip
        "attention_multiplier": F(
            "attention.scale", 1.0, Positive, out=lambda c: float(c.attention.options.get("scale") or c.head_dim**-0.5)
        ),  # fmt: skip
        "logits_scaling": F("", None, Positive, out=lambda c: 1.0 / c.logit_scale),
    },
    zoo={"placement": {"name": "pre_scaled"}, "attention": qknorm("none")},
    accepts={"attention": (), "embedding_scale": ("*",), "logit_scale": ("*",)},
    engine_features=frozenset({"scale"}),
    read=(head_dim(None), granite_read),
)


def interleaved_to_halves(t: Tensor, heads: int) -> Tensor:
    """Rows of a q or k projection, each head's rotary pairs interleaved (2i, 2i + 1), as
    Cohere turns them, reordered into halves (i, i + dk/2), as the zoo's rotary does. The
    same reordering of q and k leaves every score as it was."""
    return t.reshape(heads, -1, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape)


def halves_to_interleaved(t: Tensor, heads: int) -> Tensor:
    """The inverse of ``interleaved_to_halves``."""
    return t.reshape(heads, 2, -1, *t.shape[1:]).transpose(1, 2).reshape(t.shape)


def qk_reordered(to_zoo: Reorder, to_hf: Reorder) -> Callable[[str, tuple[str, ...], ModelConfig], Rule]:
    """A weight rule maker: the zoo's fused ``qkv`` from q/k/v projections whose q and k rows
    are reordered per head (``to_zoo(rows, heads)`` on import, ``to_hf`` on export), v as it is."""

    def make(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
        heads, kv = config.n_heads, Converter.attention_layout(config)[0]
        sizes = [heads * config.head_dim, kv * config.head_dim, kv * config.head_dim]

        def load(ts: Sequence[Tensor]) -> Tensor:
            return torch.cat([to_zoo(ts[0], heads), to_zoo(ts[1], kv), ts[2]])

        def save(t: Tensor) -> list[Tensor]:
            q, k, v = torch.split(t, sizes, dim=0)
            return [to_hf(q, heads), to_hf(k, kv), v]

        return Rule(zoo, names, load, save)

    return make


#: Cohere's q/k/v projections, each head's rotary pairs interleaved.
interleaved_qkv = qk_reordered(interleaved_to_halves, halves_to_interleaved)


# Cohere extends Llama: attention and MLP side by side from one bias-free LayerNorm,
# interleaved rotary read as halves (q and k reordered), logits times logit_scale.
COHERE = LLAMA.derive(
    "CohereForCausalLM",
    model_type="cohere",
    description="Cohere / Command R: parallel attention and MLP from one LayerNorm (no bias), logit_scale",
    fields={"mlp_bias": None, "rms_norm_eps": IGNORED, "layer_norm_eps": F("norm_eps", 1e-5, Epsilon)}
    | {"logit_scale": F("logit_scale", 0.0625, Positive), "tie_word_embeddings": F("tie_embeddings", True, bool)}
    | {"use_qk_norm": F.must(False, "Cohere's per-head LayerNorm on q and k is not modelled", bool)},
    zoo={"norm": "layernorm", "placement": {"name": "parallel", "shared_norm": True}},
    accepts={"logit_scale": ("*",)},
    layer={"attn.qkv.weight": W("self_attn.{}_proj.weight", parts="qkv", make=interleaved_qkv)}
    | {"mlp_residual.norm.weight": None},
)

STABLELM_ROTARY = Rotary(share=0.25, partial=True)
NAMES = {"attn_residual.norm": "input_layernorm", "attn.out": "self_attn.o_proj", "mlp.up": "mlp.c_fc"}
NAMES |= {"mlp_residual.norm": "post_attention_layernorm", "mlp.down": "mlp.c_proj"}
# StableLM extends Llama: LayerNorm (with its shift), partial rotary, optional q/k/v biases.
STABLELM = LLAMA.derive(
    "StableLmForCausalLM",
    model_type="stablelm",
    description="StableLM: Llama's layout with LayerNorm, partial rotary, optional q/k/v biases",
    fields={**NO_BIAS, "rms_norm_eps": None, "layer_norm_eps": F("norm_eps", 1e-5, Epsilon)}
    | {"use_qkv_bias": F("attention.qkv_bias", False, bool), "hidden_dropout": F("dropout.residual", 0.0, Fraction)}
    | {"qk_layernorm": F.must(False, "this StableLM variant is not modelled", bool)}
    | {"use_parallel_residual": F.must(False, "this StableLM variant is not modelled", bool)}
    | {"max_position_embeddings": F("max_seq_len", 4096, Count)},
    zoo={"norm": {"name": "layernorm", "shift": True}, "attention": {"name": "sdpa", "out_bias": False}},
    layer={f"{z}.bias": f"{NAMES[z]}.bias" for z in ("attn_residual.norm", "mlp_residual.norm")},
    top={"final_norm.bias": "norm.bias"},
    fresh=("read", "write", "blockers"),
    read=(llama_read, STABLELM_ROTARY.read),
    write=(STABLELM_ROTARY.write,),
    blockers=(STABLELM_ROTARY.blockers,),
)

STARCODER2_ROTARY = Rotary()
# Starcoder2 extends Mistral: LayerNorm, a GELU MLP, biases on every projection.
STARCODER2 = MISTRAL.derive(
    "Starcoder2ForCausalLM",
    model_type="starcoder2",
    description="Starcoder2: LayerNorm, rotary, GELU MLP, grouped-query attention with biases, sliding window",
    fields={
        "rms_norm_eps": None,
        "norm_epsilon": F("norm_eps", 1e-5, Epsilon),
        "max_position_embeddings": F("max_seq_len", 4096, Count),
        "hidden_act": F("activation", "gelu_pytorch_tanh", str, ACTIVATIONS),
        "use_bias": F.must(True, "the zoo's norms would lose their biases with the projections'", bool),
        "residual_dropout": F("dropout.residual", 0.0, Fraction),
        "embedding_dropout": F("dropout.embedding", 0.0, Fraction),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        "intermediate_size": F("d_ff", REQUIRED, Count),
    },
    zoo={"bias": True, "norm": "layernorm", "mlp": "standard"}
    | {"attention": {"name": "sdpa", "qkv_bias": True, "out_bias": True}},
    fresh=("layer", "read", "write", "blockers"),
    layer={f"attn.qkv.{p}": W(f"self_attn.{{}}_proj.{p}", "concat", "qkv") for p in ("weight", "bias")}
    | {f"{z}.{p}": f"{h}.{p}" for z, h in NAMES.items() for p in ("weight", "bias")},
    top={"final_norm.bias": "norm.bias"},
    read=(
        lambda hf, fields, where: {
            **fields,
            "attention": {**fields["attention"], "n_kv_heads": hf.get("num_key_value_heads") or fields["n_heads"]},
        },
        STARCODER2_ROTARY.read,
        every_layer_window,
    ),  # fmt: skip
    write=(STARCODER2_ROTARY.write,),
    blockers=(STARCODER2_ROTARY.blockers, one_window),
)

FAMILIES = (LLAMA, MISTRAL, QWEN2, QWEN3, GEMMA, OLMO2, PHI3, GRANITE, COHERE, STABLELM, STARCODER2)
