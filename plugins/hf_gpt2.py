"""The GPT-2 converter (``GPT2LMHeadModel``), registered through the same hook a
third-party converter uses (``zoo_register_converters``).

GPT-2's linear layers are ``Conv1D``s that store weights as (in, out), the transpose of
``nn.Linear``; the fused ``c_attn`` is exactly the zoo attention's fused ``qkv``, so a
transpose is the whole conversion. Anything the zoo would compute differently is
refused with an ``InteropError``, never loaded into a model that silently differs.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from zoo.plugin import (
    KERNELS,
    Converter,
    Count,
    Epsilon,
    Fraction,
    HFFields,
    InteropError,
    RegisterConverter,
    Rule,
    hookimpl,
    refuse,
)

if TYPE_CHECKING:
    from zoo.plugin import ModelConfig

# Hugging Face activation names -> zoo activation components. "gelu_new", "gelu_fast"
# and "gelu_pytorch_tanh" are the same tanh approximation written three ways.
ACTIVATIONS = {
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "gelu": "gelu",
    "relu": "relu",
    "silu": "silu",
    "swish": "silu",
}
ACTIVATIONS_OUT = {"gelu_tanh": "gelu_new", "gelu": "gelu", "relu": "relu", "silu": "silu"}
# The causal-mask buffers old transformers versions saved with the weights.
MASK_BUFFER = re.compile(r"h\.\d+\.attn\.(bias|masked_bias)")
# GPT2Config's defaults, for fields an older config.json leaves out.
HF_DEFAULTS: dict[str, Any] = {
    "vocab_size": 50257,
    "n_positions": 1024,
    "n_embd": 768,
    "n_layer": 12,
    "n_head": 12,
    "n_inner": None,
    "activation_function": "gelu_new",
    "resid_pdrop": 0.1,
    "embd_pdrop": 0.1,
    "attn_pdrop": 0.1,
    "layer_norm_epsilon": 1e-5,
    "tie_word_embeddings": True,
}
REFUSALS = {
    "add_cross_attention": "cross-attention layers (an encoder-decoder GPT-2)",
    "scale_attn_by_inverse_layer_idx": "attention scores divided by the layer index",
    "reorder_and_upcast_attn": (
        "attention upcast to float32 in half precision (in float32 it changes nothing, "
        "so for a float32 model you may set it to false)"
    ),
    "is_encoder_decoder": "an encoder-decoder model",
}


class GPT2Fields(HFFields):
    """The GPT2Config fields the converter reads, typed (``GPT2.config_from_hf`` checks them first)."""

    not_null = ("n_positions",)

    vocab_size: Count = 50257
    n_positions: Count | None = None
    n_ctx: Count | None = None
    n_embd: Count = 768
    n_layer: Count = 12
    n_head: Count = 12
    n_inner: Count | None = None
    activation_function: str = "gelu_new"
    resid_pdrop: Fraction = 0.1
    embd_pdrop: Fraction = 0.1
    attn_pdrop: Fraction = 0.1
    layer_norm_epsilon: Epsilon = 1e-5
    tie_word_embeddings: bool = True
    scale_attn_weights: bool = True
    add_cross_attention: bool = False
    scale_attn_by_inverse_layer_idx: bool = False
    reorder_and_upcast_attn: bool = False
    is_encoder_decoder: bool = False
    pruned_heads: dict[str, list[int]] | None = None


class GPT2(Converter):
    """GPT-2 (``GPT2LMHeadModel``): pre-norm LayerNorm, learned positions, fused c_attn."""

    architecture = "GPT2LMHeadModel"
    model_type = "gpt2"
    description = "GPT-2: pre-norm LayerNorm, learned positions, GELU (tanh), fused c_attn"
    prefix = "transformer."
    embedding = "wte.weight"

    def skip(self, name: str) -> bool:
        return MASK_BUFFER.fullmatch(name) is not None

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        GPT2Fields.read(hf, where)  # every field read below has its type and range
        for flag, meaning in REFUSALS.items():
            if hf.get(flag):
                raise InteropError(
                    f"{where}: {flag}=true ({meaning}) is not modelled by the zoo; this model cannot be imported exactly"
                )
        if hf.get("scale_attn_weights", True) is not True:
            raise InteropError(
                f"{where}: scale_attn_weights=false (scores not divided by sqrt(head_dim)) is not "
                f"modelled by the zoo; this model cannot be imported exactly"
            )
        if hf.get("pruned_heads"):
            raise refuse(where, "pruned_heads", hf["pruned_heads"], "models with pruned heads are not supported")
        get = {**HF_DEFAULTS, **{k: v for k, v in hf.items() if v is not None or k == "n_inner"}}
        activation = get["activation_function"]
        if activation not in ACTIVATIONS:
            raise InteropError(
                f"{where}: activation_function={activation!r} has no zoo equivalent; "
                f"supported: {', '.join(sorted(ACTIVATIONS))}"
            )
        return {
            "vocab_size": get["vocab_size"],
            "max_seq_len": hf.get("n_positions", hf.get("n_ctx", HF_DEFAULTS["n_positions"])),
            "d_model": get["n_embd"],
            "n_layers": get["n_layer"],
            "n_heads": get["n_head"],
            "d_ff": get["n_inner"],  # None: 4 * d_model, as in GPT-2
            "dropout": {"embedding": get["embd_pdrop"], "attention": get["attn_pdrop"], "residual": get["resid_pdrop"]},
            "bias": True,
            "tie_embeddings": bool(get["tie_word_embeddings"]),
            "embedding_scale": "none",
            "head_output": "logits",
            "norm_eps": get["layer_norm_epsilon"],
            "attention": "sdpa",
            "norm": "layernorm",
            "placement": "pre",
            "activation": ACTIVATIONS[activation],
            "position": "learned",
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        rules = [Rule.copy("tok_emb.weight", "wte.weight"), Rule.copy("position.table.weight", "wpe.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"h.{i}."
            rules += [
                Rule.copy(z + "attn_residual.norm.weight", h + "ln_1.weight"),
                Rule.copy(z + "attn_residual.norm.bias", h + "ln_1.bias"),
                Rule.transposed(z + "attn.qkv.weight", h + "attn.c_attn.weight"),
                Rule.copy(z + "attn.qkv.bias", h + "attn.c_attn.bias"),
                Rule.transposed(z + "attn.out.weight", h + "attn.c_proj.weight"),
                Rule.copy(z + "attn.out.bias", h + "attn.c_proj.bias"),
                Rule.copy(z + "mlp_residual.norm.weight", h + "ln_2.weight"),
                Rule.copy(z + "mlp_residual.norm.bias", h + "ln_2.bias"),
                Rule.transposed(z + "mlp.up.weight", h + "mlp.c_fc.weight"),
                Rule.copy(z + "mlp.up.bias", h + "mlp.c_fc.bias"),
                Rule.transposed(z + "mlp.down.weight", h + "mlp.c_proj.weight"),
                Rule.copy(z + "mlp.down.bias", h + "mlp.c_proj.bias"),
            ]
        return [
            *rules,
            Rule.copy("final_norm.weight", "ln_f.weight"),
            Rule.copy("final_norm.bias", "ln_f.bias"),
            Rule.copy("head.weight", "lm_head.weight"),
        ]

    def blockers(self, config: ModelConfig) -> list[str]:
        wanted = {
            "placement": ("pre", "GPT-2 normalises before each sub-layer"),
            "norm": ("layernorm", "GPT-2 uses LayerNorm"),
            "position": ("learned", "GPT-2 stores a learned position table (wpe)"),
            "mlp": ("standard", "GPT-2's MLP is c_fc, activation, c_proj"),
        }
        blockers = []
        if config.architecture != "decoder":
            blockers.append(f"architecture {config.architecture!r} (GPT-2 is decoder-only)")
        for kind, (name, why) in wanted.items():
            spec = getattr(config, kind)
            if spec.name != name or spec.options:
                blockers.append(f"{kind} {spec.name!r} ({why})")
        n_kv, qkv_bias, out_bias = self.attention_layout(config)
        if config.attention.name not in KERNELS or n_kv != config.n_heads:
            blockers.append(
                f"attention {config.attention.name!r} (GPT-2 has plain multi-head attention with a fused c_attn)"
            )
        elif not (qkv_bias and out_bias) and config.bias:
            blockers.append("attention without some of its biases (GPT-2's c_attn and c_proj have them)")
        if config.activation.name not in ACTIVATIONS_OUT:
            blockers.append(f"activation {config.activation.name!r} (GPT-2 configs name {', '.join(ACTIVATIONS_OUT)})")
        if config.final_norm is False:
            blockers.append("final_norm=false (GPT-2 always has ln_f)")
        if not config.bias:
            blockers.append("bias=false (GPT-2's linear layers and norms have biases)")
        if config.embedding_scale != "none":
            blockers.append(f"embedding_scale={config.embedding_scale!r} (GPT-2 does not scale its embeddings)")
        if config.head_output != "logits":
            blockers.append(f"head_output={config.head_output!r} (GPT-2's head returns logits)")
        if config.logit_scale != 1.0:
            blockers.append(f"logit_scale={config.logit_scale!r} (GPT-2 does not scale its logits)")
        if config.head_bias:
            blockers.append("head_bias=true (GPT-2's lm_head has no bias)")
        if config.embedding_norm:
            blockers.append("embedding_norm=true (GPT-2 does not normalise its embeddings)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        has_gpt2_eot = config.vocab_size > 50256  # the GPT-2 tokenizer's <|endoftext|>
        return {
            "vocab_size": config.vocab_size,
            "n_positions": config.max_seq_len,
            "n_embd": config.d_model,
            "n_layer": config.n_layers,
            "n_head": config.n_heads,
            "n_inner": config.d_ff,
            "activation_function": ACTIVATIONS_OUT[config.activation.name],
            "resid_pdrop": config.dropout.residual,
            "embd_pdrop": config.dropout.embedding,
            "attn_pdrop": config.dropout.attention,
            "layer_norm_epsilon": config.norm_eps,
            "scale_attn_weights": True,
            "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False,
            "add_cross_attention": False,
            "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": 50256 if has_gpt2_eot else None,
            "eos_token_id": 50256 if has_gpt2_eot else None,
        }


@hookimpl
def zoo_register_converters(register: RegisterConverter) -> None:
    register(GPT2())
