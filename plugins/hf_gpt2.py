"""The GPT-2 converter (``GPT2LMHeadModel``), registered through the same hook a
third-party converter uses (``zoo_register_converters``). GPT-2's ``Conv1D`` weights are
stored (in, out) and its fused ``c_attn`` is the zoo's ``qkv``: a transpose is the whole conversion.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zoo.plugin import (
    KERNELS,
    Converter,
    Count,
    Epsilon,
    F,
    Family,
    Fraction,
    RegisterConverter,
    W,
    converter,
    hookimpl,
    linear,
)

if TYPE_CHECKING:
    from zoo.plugin import ModelConfig

#: GPT-2's Conv1D layers, stored (in, out): the transpose of the zoo's ``nn.Linear``.
CONV1D = {"attn.qkv": "attn.c_attn", "attn.out": "attn.c_proj", "mlp.up": "mlp.c_fc", "mlp.down": "mlp.c_proj"}
#: Hugging Face activation names -> zoo activations ("gelu_new", "gelu_fast", "gelu_pytorch_tanh": one tanh GELU).
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}
ACTIVATIONS |= {"relu": "relu", "silu": "silu", "swish": "silu"}
OFF = "is not modelled by the zoo; set it to false, as GPT-2 has it"


def context(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """``n_positions``, else the older ``n_ctx``, else GPT2Config's 1,024."""
    return {**fields, "max_seq_len": hf.get("n_positions", hf.get("n_ctx") or 1024)}


def end_of_text(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    """The GPT-2 tokenizer's <|endoftext|> (50256) as bos and eos, where the vocabulary has it."""
    eot = 50256 if config.vocab_size > 50256 else None
    return {**hf, "bos_token_id": eot, "eos_token_id": eot}


def plain(config: ModelConfig, arch: str) -> list[str]:
    """GPT-2's parts take no options (the table refuses other parts and key/value heads); every projection biased."""
    blockers = [
        f"{kind} {getattr(config, kind).name!r} (GPT-2's has no options)"
        for kind, name in (("placement", "pre"), ("norm", "layernorm"), ("position", "learned"), ("mlp", "standard"))
        if getattr(config, kind).options and getattr(config, kind).name == name
    ]
    n_kv, qkv_bias, out_bias = Converter.attention_layout(config)
    if n_kv == config.n_heads and not (qkv_bias and out_bias) and config.bias:
        blockers.append("attention without some of its biases (GPT-2's c_attn and c_proj have them)")
    return blockers


GPT2 = Family(
    architecture="GPT2LMHeadModel",
    model_type="gpt2",
    description="GPT-2: pre-norm LayerNorm, learned positions, GELU (tanh), fused c_attn",
    prefix="transformer.",
    embedding="wte.weight",
    fields={
        "vocab_size": F("vocab_size", 50257, Count),
        "n_positions": F("max_seq_len", 1024, Count),
        "n_ctx": F("", None, Count),
        "n_embd": F("d_model", 768, Count),
        "n_layer": F("n_layers", 12, Count),
        "n_head": F("n_heads", 12, Count),
        "n_inner": F("d_ff", None, Count),
        "activation_function": F("activation", "gelu_new", str, ACTIVATIONS),
        "resid_pdrop": F("dropout.residual", 0.1, Fraction),
        "embd_pdrop": F("dropout.embedding", 0.1, Fraction),
        "attn_pdrop": F("dropout.attention", 0.1, Fraction),
        "layer_norm_epsilon": F("norm_eps", 1e-5, Epsilon),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        "scale_attn_weights": F.must(True, "scores not divided by sqrt(head_dim) are not modelled", bool),
        "add_cross_attention": F.must(False, f"cross-attention layers (an encoder-decoder GPT-2) {OFF}", bool),
        "scale_attn_by_inverse_layer_idx": F.must(False, f"scores divided by the layer index {OFF}", bool),
        "reorder_and_upcast_attn": F.must(
            False, "attention upcast to float32 in half precision (in float32 it changes nothing: set it to false)"
        ),
        "is_encoder_decoder": F.must(False, "an encoder-decoder model is not modelled", bool),
        "pruned_heads": F.must({}, "models with pruned heads are not supported"),
        **{f"summary_{k}": F("", None) for k in ("activation", "first_dropout", "proj_to_labels", "type", "use_proj")},
    },
    zoo={"bias": True, "attention": "sdpa", "norm": "layernorm", "placement": "pre", "position": "learned"}
    | {"mlp": "standard", "init": "gpt2"},
    accepts={"attention": KERNELS},
    layer_prefix="h.{}.",
    layer={
        **linear({"attn_residual.norm": "ln_1", "mlp_residual.norm": "ln_2"}),
        **{f"{z}.weight": W(f"{h}.weight", "transposed") for z, h in CONV1D.items()},
        **{f"{z}.bias": f"{h}.bias" for z, h in CONV1D.items()},
    },
    top={"tok_emb.weight": "wte.weight", "position.table.weight": "wpe.weight", **linear({"final_norm": "ln_f"})}
    | {"head.weight": "lm_head.weight"},
    skip=(".attn.bias", ".attn.masked_bias"),
    read=(context,),
    write=(end_of_text,),
    blockers=(plain,),
)


@hookimpl
def zoo_register_converters(register: RegisterConverter) -> None:
    register(converter(GPT2))
