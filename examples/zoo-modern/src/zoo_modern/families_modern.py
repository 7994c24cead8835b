"""Hugging Face converters for the families of 2024 built from zoo-modern's parts: Qwen3,
Gemma, OLMo 2 and Phi-3, each a ``LlamaFamily`` with other parts.

- Qwen3: Llama's layout, an explicit head_dim and an RMSNorm per head on q and k
  (attention ``qknorm``).
- Gemma: GeGLU (``glu`` with ``gelu_tanh``), RMSNorm with a unit offset
  (``rmsnorm_offset``), embeddings scaled by sqrt(d_model), multi-query attention with
  head_dim 256, a tied head.
- OLMo 2: the norm after each sub-layer (``post_sublayer``) and QK-norm over the whole
  projection (``qknorm`` with ``qk_norm = "whole"``).
- Granite: Llama with multipliers on the embeddings (``embedding_scale`` a number), on
  each sub-layer's output (placement ``pre_scaled``), on the scores (``qknorm``'s
  ``scale``) and on the logits (``logit_scale``).
- Cohere (Command R): attention and MLP side by side from one LayerNorm without bias
  (``parallel`` with ``shared_norm``), interleaved rotary read as halves by reordering
  q and k per head, and ``logit_scale``.
- Phi-3: Llama's math with q/k/v and gate/up stored fused (``qkv_proj``,
  ``gate_up_proj``); the zoo's ``qkv`` already has that layout, and ``glu`` takes
  ``fused``. Its ``sliding_window`` (Phi-3 mini's 2,047) is the attention's ``window``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar

import torch
from torch import Tensor

from zoo.plugin import Converter, Count, Epsilon, ModelConfig, Positive, Rule
from zoo_modern.converters import LlamaFamily, LlamaFields, Qwen2
from zoo_modern.families.readers import (
    ACTIVATIONS,
    layer_windows,
    n_kv_heads,
    qwen_windows,
    window_blockers,
    window_per_layer,
    with_windows,
)


class GemmaFields(LlamaFields):
    """The Gemma fields read beyond Llama's."""

    use_bidirectional_attention: bool | None = None


class Phi3Fields(LlamaFields):
    """The Phi-3 fields read beyond Llama's."""

    resid_pdrop: float | None = None
    embd_pdrop: float | None = None
    original_max_position_embeddings: Count | None = None


def qknorm_spec(kv: int, head_dim: int, qk_norm: str) -> dict[str, Any]:
    """The ``qknorm`` attention of these families: no biases, ``kv`` key/value heads."""
    return {"name": "qknorm", "n_kv_heads": kv, "head_dim": head_dim, "qk_norm": qk_norm, "qkv_bias": False, "out_bias": False}  # fmt: skip


def qknorm_blockers(config: ModelConfig, architecture: str, qk_norm: str) -> list[str]:
    """What in ``config``'s attention a family with ``qknorm`` attention of ``qk_norm`` cannot express."""
    options = config.attention.options
    if config.attention.name != "qknorm" or options.get("qk_norm") != qk_norm:
        return [f"attention {config.attention.name!r} ({architecture} has qknorm with qk_norm={qk_norm!r})"]
    if options.get("qk_norm_offset") or options.get("scale") is not None:
        return [f"a QK-norm offset or an attention scale ({architecture} has neither)"]
    return []


def qk_norm_rules(config: ModelConfig) -> list[Rule]:
    """The q and k norms of every layer (Hugging Face's ``self_attn.q_norm`` / ``k_norm``)."""
    return [
        Rule.copy(f"blocks.{i}.attn.{p}_norm.weight", f"layers.{i}.self_attn.{p}_norm.weight")
        for i in range(config.n_layers)
        for p in "qk"
    ]


def explicit_head_dim(hf: Mapping[str, Any], default: int) -> int:
    """``head_dim`` as transformers reads it: config.json's, else the config class's default."""
    return int(hf.get("head_dim") or default)


class Qwen3(LlamaFamily):
    """Qwen3: Llama's layout with head_dim 128 and an RMSNorm per head on q and k."""

    architecture = "Qwen3ForCausalLM"
    model_type = "qwen3"
    description = "Qwen3: Llama's layout plus QK-norm per head and an explicit head_dim"
    max_seq_len = Qwen2.max_seq_len  # the same sliding-window switches

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        return qwen_windows(self, hf, where, super().config_from_hf(hf, where))

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        return qknorm_spec(kv, explicit_head_dim(hf, 128), "head")  # Qwen3Config's head_dim is 128

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        return qknorm_blockers(config, self.architecture, "head")

    def rules(self, config: ModelConfig) -> list[Rule]:
        return [*super().rules(config), *qk_norm_rules(config)]

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        del hf["mlp_bias"]
        return {**hf, "use_sliding_window": False, "sliding_window": None, "max_window_layers": config.n_layers}


class Gemma(LlamaFamily):
    """Gemma: GeGLU, RMSNorm scaled by 1 + w, embeddings times sqrt(d_model), a tied head."""

    architecture = "GemmaForCausalLM"
    model_type = "gemma"
    description = "Gemma: GeGLU, unit-offset RMSNorm, sqrt(d_model)-scaled embeddings, head_dim 256"
    parts: ClassVar[Mapping[str, str]] = {
        "placement": "pre", "norm": "rmsnorm_offset", "position": "rotary", "mlp": "glu", "activation": "gelu_tanh",
    }  # fmt: skip
    embedding_scale = "sqrt_d_model"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        GemmaFields.read(hf, where)
        if hf.get("use_bidirectional_attention"):
            raise self.refuse(where, "use_bidirectional_attention", True, "the zoo's decoder attends causally")
        activation = hf.get("hidden_act", "gelu_pytorch_tanh")
        if activation not in ACTIVATIONS:
            raise self.refuse(where, "hidden_act", activation, f"supported: {', '.join(sorted(ACTIVATIONS))}")
        # transformers reads Gemma's legacy "gelu" as the tanh approximation, as the weights were trained
        act = "gelu_tanh" if activation == "gelu" else ACTIVATIONS[activation]
        fields = super().config_from_hf({**hf, "hidden_act": "silu"}, where)  # the gate is checked above
        return {
            **fields,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
            "norm": "rmsnorm_offset",
            "activation": act,
            "mlp": {"name": "glu", "hidden": fields["d_ff"]},
            "embedding_scale": "sqrt_d_model",
        }

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        head_dim = explicit_head_dim(hf, 256)  # GemmaConfig's head_dim is 256
        if head_dim == d // heads:
            return super().attention({**hf, "head_dim": None}, where, kv)
        return qknorm_spec(kv, head_dim, "none")

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        if config.attention.name == "qknorm":
            return qknorm_blockers(config, self.architecture, "none")
        return super().attention_blockers(config)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        del hf["mlp_bias"]
        return {**hf, "hidden_act": "gelu_pytorch_tanh", "pad_token_id": None}


class Olmo2(LlamaFamily):
    """OLMo 2: Llama's parts with the norm after each sub-layer and QK-norm over the whole projection."""

    architecture = "Olmo2ForCausalLM"
    model_type = "olmo2"
    description = "OLMo 2: norm after each sub-layer (x + norm(f(x))), QK-norm over the whole q and k"
    parts: ClassVar[Mapping[str, str]] = {
        "placement": "post_sublayer", "norm": "rmsnorm", "position": "rotary", "mlp": "swiglu",
    }  # fmt: skip

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        if hf.get("attention_bias"):
            raise self.refuse(
                where, "attention_bias", True, "biases on q/k/v/o projections are not modelled for OLMo 2"
            )

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        return {**super().config_from_hf(hf, where), "placement": "post_sublayer"}

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        return qknorm_spec(kv, explicit_head_dim(hf, d // heads), "whole")

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        return qknorm_blockers(config, self.architecture, "whole")

    def rules(self, config: ModelConfig) -> list[Rule]:
        after = {"attn_residual": "post_attention_layernorm", "mlp_residual": "post_feedforward_layernorm"}
        rules = []
        for rule in super().rules(config):
            names = rule.zoo.split(".")  # blocks.{i}.attn_residual.norm.weight: the norm after attention
            if names[0] == "blocks" and names[2] in after:
                rule = Rule.copy(rule.zoo, f"layers.{names[1]}.{after[names[2]]}.weight")
            rules.append(rule)
        return [*rules, *qk_norm_rules(config)]

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        del hf["mlp_bias"]
        return {**hf, "pad_token_id": None}


class Phi3(LlamaFamily):
    """Phi-3: Llama's math with fused q/k/v and gate/up projections, every layer within one
    sliding window when ``sliding_window`` is set (as Mistral's); no long-context rotary scaling."""

    architecture = "Phi3ForCausalLM"
    model_type = "phi3"
    description = "Phi-3: Llama's math with fused qkv_proj and gate_up_proj, a sliding window (no longrope scaling)"
    engine_features = frozenset({"window"})
    parts: ClassVar[Mapping[str, str]] = {"placement": "pre", "norm": "rmsnorm", "position": "rotary", "mlp": "glu", "activation": "silu"}  # fmt: skip

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        pass  # Phi3Config has no bias switches

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        Phi3Fields.read(hf, where)
        fields = super().config_from_hf(hf, where)
        dropout = {
            "attention": fields["dropout"]["attention"],
            "residual": float(hf.get("resid_pdrop") or 0.0),
            "embedding": float(hf.get("embd_pdrop") or 0.0),
        }
        fields = {**fields, "dropout": dropout, "mlp": {"name": "glu", "hidden": fields["d_ff"], "fused": True}}
        hf = {**hf, "layer_types": None}  # Phi3Config windows every layer alike
        return with_windows(
            fields, layer_windows(hf, fields["n_layers"], fields["max_seq_len"], hf.get("sliding_window"))
        )

    def max_seq_len(self, hf: Mapping[str, Any], where: str) -> int:
        return int(hf.get("max_position_embeddings", 4096))

    def rules(self, config: ModelConfig) -> list[Rule]:
        rules = [Rule.copy("tok_emb.weight", "embed_tokens.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            rules += [
                Rule.copy(z + "attn_residual.norm.weight", h + "input_layernorm.weight"),
                Rule.copy(z + "attn.qkv.weight", h + "self_attn.qkv_proj.weight"),  # rows [q | k | v], as the zoo's
                Rule.copy(z + "attn.out.weight", h + "self_attn.o_proj.weight"),
                Rule.copy(z + "mlp_residual.norm.weight", h + "post_attention_layernorm.weight"),
                Rule.copy(z + "mlp.gate_up.weight", h + "mlp.gate_up_proj.weight"),  # rows [gate | up]
                Rule.copy(z + "mlp.down.weight", h + "mlp.down_proj.weight"),
            ]
        return [*rules, Rule.copy("final_norm.weight", "norm.weight"), Rule.copy("head.weight", "lm_head.weight")]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = super().blockers(config)
        if config.mlp.name == "glu" and not config.mlp.options.get("fused"):
            blockers.append("glu with fused=false (Phi-3 stores gate and up as one gate_up_proj)")
        if len(set(window_per_layer(config))) > 1:
            blockers.append("a window in some layers only (Phi-3 windows every layer alike)")
        return blockers + window_blockers(config, self.architecture)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        for name in ("attention_bias", "mlp_bias"):
            del hf[name]
        return {
            **hf,
            "original_max_position_embeddings": config.max_seq_len,
            "sliding_window": window_per_layer(config)[0],
            "resid_pdrop": config.dropout.residual,
            "embd_pdrop": config.dropout.embedding,
            "pad_token_id": None,
        }


class GraniteFields(LlamaFields):
    """The Granite multipliers, beyond Llama's fields."""

    embedding_multiplier: Positive | None = None
    residual_multiplier: Positive | None = None
    attention_multiplier: Positive | None = None
    logits_scaling: Positive | None = None


class Granite(LlamaFamily):
    """Granite: Llama with four multipliers, on the embeddings, on each sub-layer's output, on
    the attention scores (in place of 1 / sqrt(head_dim)) and on the logits (1 / logits_scaling)."""

    architecture = "GraniteForCausalLM"
    model_type = "granite"
    engine_features = frozenset({*LlamaFamily.engine_features, "scale"})  # attention_multiplier
    description = "Granite: Llama's layout with embedding, residual, attention and logit multipliers"
    parts: ClassVar[Mapping[str, str]] = {
        "placement": "pre_scaled", "norm": "rmsnorm", "position": "rotary", "mlp": "swiglu",
    }  # fmt: skip
    multipliers = True

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        GraniteFields.read(hf, where)
        fields = super().config_from_hf(hf, where)
        embedding = float(hf.get("embedding_multiplier") or 1.0)
        return {
            **fields,
            "embedding_scale": "none" if embedding == 1.0 else embedding,
            "logit_scale": 1.0 / float(hf.get("logits_scaling") or 1.0),
            "placement": {"name": "pre_scaled", "residual_scale": float(hf.get("residual_multiplier") or 1.0)},
        }

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        super().attention(hf, where, kv)  # head_dim is hidden_size / num_attention_heads
        d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        spec = qknorm_spec(kv, d // heads, "none")
        return {**spec, "scale": float(hf.get("attention_multiplier") or 1.0)}  # GraniteConfig's default is 1

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        options = config.attention.options
        wide = config.head_dim != config.d_model // config.n_heads
        if config.attention.name != "qknorm" or options.get("qk_norm") != "none" or wide:
            return [f"attention {config.attention.name!r} (Granite has qknorm with qk_norm='none' and a scale)"]
        return []

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        embedding = config.embedding_scale
        scale = config.attention.options.get("scale")
        return {
            **hf,
            "embedding_multiplier": 1.0 if embedding == "none" else float(embedding),
            "residual_multiplier": float(config.placement.options.get("residual_scale", 1.0)),
            "attention_multiplier": config.head_dim**-0.5 if scale is None else float(scale),
            "logits_scaling": 1.0 / config.logit_scale,
        }


class CohereFields(LlamaFields):
    """The Cohere fields read beyond Llama's (its norm is a LayerNorm with its own eps)."""

    not_null = ("max_position_embeddings", "layer_norm_eps")

    layer_norm_eps: Epsilon | None = None
    logit_scale: Positive | None = None
    use_qk_norm: bool | None = None


def interleaved_to_halves(t: Tensor, heads: int) -> Tensor:
    """Rows of a q or k projection, each head's rotary pairs interleaved (2i, 2i + 1), as
    Cohere turns them, reordered into halves (i, i + dk/2), as the zoo's rotary does. The
    same reordering of q and k leaves every score as it was."""
    return t.reshape(heads, -1, 2, *t.shape[1:]).transpose(1, 2).reshape(t.shape)


def halves_to_interleaved(t: Tensor, heads: int) -> Tensor:
    """The inverse of ``interleaved_to_halves``."""
    return t.reshape(heads, 2, -1, *t.shape[1:]).transpose(1, 2).reshape(t.shape)


def interleaved_qkv(zoo: str, names: list[str], heads: int, kv_heads: int, sizes: tuple[int, int, int]) -> Rule:
    """The zoo's fused ``qkv`` from Cohere's q/k/v projections, q and k reordered per head."""

    def load(ts: Sequence[Tensor]) -> Tensor:
        return torch.cat([interleaved_to_halves(ts[0], heads), interleaved_to_halves(ts[1], kv_heads), ts[2]])

    def save(t: Tensor) -> list[Tensor]:
        q, k, v = torch.split(t, list(sizes), dim=0)
        return [halves_to_interleaved(q, heads), halves_to_interleaved(k, kv_heads), v]

    return Rule(zoo, tuple(names), load, save)


class Cohere(LlamaFamily):
    """Cohere (Command R): attention and MLP in parallel from one bias-free LayerNorm, rotary
    on interleaved pairs (read as halves, q and k reordered), logits times logit_scale."""

    architecture = "CohereForCausalLM"
    model_type = "cohere"
    description = "Cohere / Command R: parallel attention and MLP from one LayerNorm (no bias), logit_scale"
    parts: ClassVar[Mapping[str, str]] = {
        "placement": "parallel", "norm": "layernorm", "position": "rotary", "mlp": "swiglu",
    }  # fmt: skip
    multipliers = True  # a logit scale; the embeddings are checked in ``blockers``

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        CohereFields.read(hf, where)
        if hf.get("use_qk_norm"):
            raise self.refuse(where, "use_qk_norm", True, "Cohere's per-head LayerNorm on q and k is not modelled")
        fields = super().config_from_hf({k: v for k, v in hf.items() if k != "rms_norm_eps"}, where)
        return {
            **fields,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
            "norm_eps": float(hf.get("layer_norm_eps") or 1e-5),
            "norm": "layernorm",  # follows bias = false: no bias
            "placement": {"name": "parallel", "shared_norm": True},
            "logit_scale": float(hf.get("logit_scale") or 0.0625),  # CohereConfig's default
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        heads, kv_heads = config.n_heads, n_kv_heads(config)
        sizes = (heads * config.head_dim, kv_heads * config.head_dim, kv_heads * config.head_dim)
        rules = [Rule.copy("tok_emb.weight", "embed_tokens.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            qkv = [h + f"self_attn.{p}_proj.weight" for p in "qkv"]
            rules += [
                Rule.copy(z + "attn_residual.norm.weight", h + "input_layernorm.weight"),
                interleaved_qkv(z + "attn.qkv.weight", qkv, heads, kv_heads, sizes),
                Rule.copy(z + "attn.out.weight", h + "self_attn.o_proj.weight"),
                *(Rule.copy(z + f"mlp.{p}.weight", h + f"mlp.{p}_proj.weight") for p in ("gate", "up", "down")),
            ]
        return [*rules, Rule.copy("final_norm.weight", "norm.weight"), Rule.copy("head.weight", "lm_head.weight")]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = super().blockers(config)
        if config.embedding_scale != "none":
            blockers.append(f"embedding_scale={config.embedding_scale!r} (Cohere does not scale embeddings)")
        if config.placement.name == "parallel" and not config.placement.options.get("shared_norm"):
            blockers.append("parallel with two norms (Cohere's attention and MLP share one)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        for name in ("mlp_bias", "rms_norm_eps"):
            del hf[name]
        extra = {"layer_norm_eps": config.norm_eps, "logit_scale": config.logit_scale, "use_qk_norm": False}
        return {**hf, **extra, "pad_token_id": None}


CONVERTERS: tuple[Converter, ...] = (Qwen3(), Gemma(), Olmo2(), Phi3(), Granite(), Cohere())
#: The presets of these families' released weights (``presets/<name>.toml``).
PRESETS = ("qwen3-0.6b", "gemma-2b", "olmo-2-1b", "phi-3-mini", "granite-3-2b", "command-r")

__all__ = ["CONVERTERS", "Cohere", "Gemma", "Granite", "Olmo2", "Phi3", "Qwen3"]
