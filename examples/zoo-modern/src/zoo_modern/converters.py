"""Hugging Face converters for the families zoo-modern's parts build: Llama, Mistral,
Qwen2 and GPT-NeoX (Pythia), registered from ``plugin.py`` the way GPT-2's is from the
built-ins.

Each maps ``config.json`` to a zoo config (refusing, with ``InteropError``, any setting
the zoo would compute differently) and lists how every weight maps both ways. The
Llama family keeps q, k and v in separate matrices that the zoo's attention fuses into
one ``qkv`` ([q | k | v] rows); GPT-NeoX fuses them per head ([q_h | k_h | v_h] for
each head h), which is a reshape away from the zoo's order.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from zoo.plugin import (
    Converter,
    Count,
    Epsilon,
    Fraction,
    HFFields,
    InteropError,
    ModelConfig,
    Positive,
    RopeTable,
    Rule,
)
from zoo_modern.families.readers import (
    attention_spec,
    common_blockers,
    layer_windows,
    n_kv_heads,
    qwen_windows,
    rope,
    rope_scaling,
    rotary_base,
    rotary_blockers,
    rotary_spec,
    scaling_to_hf,
    turned,
    window_blockers,
    window_per_layer,
    with_windows,
)
from zoo_modern.mlp import swiglu_hidden


class LlamaFields(HFFields):
    """The config.json fields the Llama-family converters read (Llama, Mistral, Qwen2), typed."""

    not_null = ("max_position_embeddings", "rms_norm_eps")

    hidden_size: Count
    num_attention_heads: Count
    num_hidden_layers: Count
    intermediate_size: Count
    vocab_size: Count
    num_key_value_heads: Count | None = None
    head_dim: Count | None = None
    hidden_act: str = "silu"
    max_position_embeddings: Count | None = None
    rms_norm_eps: Epsilon | None = None
    rope_theta: Positive | None = None
    partial_rotary_factor: Fraction | None = None
    rope_parameters: RopeTable | None = None
    rope_scaling: RopeTable | None = None
    attention_dropout: Fraction | None = None
    tie_word_embeddings: bool | None = None
    attention_bias: bool | None = None
    mlp_bias: bool | None = None
    sliding_window: Count | None = None
    use_sliding_window: bool | None = None
    layer_types: list[str] | None = None


class LlamaFamily(Converter):
    """LLaMA's design: pre-norm RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases."""

    architecture = "LlamaForCausalLM"
    model_type = "llama"
    description = "LLaMA: RMSNorm, rotary, SwiGLU, grouped-query attention, no biases"
    prefix = "model."
    embedding = "embed_tokens.weight"
    qkv_bias = False  # Qwen2 has biases on q, k and v

    def skip(self, name: str) -> bool:
        return name.endswith("rotary_emb.inv_freq")

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        """Refuse the family's settings the zoo does not model."""
        if hf.get("attention_bias"):
            raise self.refuse(
                where, "attention_bias", True, "biases on q/k/v/o projections are not modelled for this family"
            )
        if hf.get("mlp_bias"):
            raise self.refuse(where, "mlp_bias", True, "biases in the SwiGLU projections are not modelled")

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        LlamaFields.read(hf, where)  # every field read below has its type and range
        self.check(hf, where)
        try:
            d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
            layers, hidden, vocab = int(hf["num_hidden_layers"]), int(hf["intermediate_size"]), int(hf["vocab_size"])
        except (KeyError, TypeError, ValueError) as err:
            raise InteropError(f"{where}: a {self.architecture} config.json needs {err} as an integer") from err
        kv = int(hf.get("num_key_value_heads") or heads)
        if hf.get("hidden_act", "silu") != "silu":
            raise self.refuse(where, "hidden_act", hf["hidden_act"], "the SwiGLU gate is SiLU in the zoo")
        base, fraction = rope(hf, where, scaled=True)
        if fraction != 1.0:
            raise self.refuse(where, "partial_rotary_factor", fraction, "this family rotates the whole head")
        scaling = rope_scaling(hf, where)
        return {
            "vocab_size": vocab,
            "max_seq_len": self.max_seq_len(hf, where),
            "d_model": d,
            "n_layers": layers,
            "n_heads": heads,
            "d_ff": hidden,
            "dropout": {"attention": float(hf.get("attention_dropout") or 0.0)},
            "bias": False,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
            "norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
            "attention": self.attention(hf, where, kv),
            "norm": "rmsnorm",
            "placement": "pre",
            "activation": "silu",
            "position": {**rotary_spec(base), **({"scaling": scaling} if scaling else {})},
            "mlp": {"name": "swiglu", "hidden": hidden},
            "init": "gpt2",
        }

    def max_seq_len(self, hf: Mapping[str, Any], where: str) -> int:
        return int(hf.get("max_position_embeddings", 2048))

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        """The attention spec of ``config.json`` ``hf`` with ``kv`` key/value heads (subclasses
        with other attentions override it)."""
        d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        if hf.get("head_dim") not in (None, d // heads):
            raise self.refuse(
                where,
                "head_dim",
                hf["head_dim"],
                f"the zoo's head_dim is hidden_size / num_attention_heads = {d // heads}",
            )
        return attention_spec(kv, self.qkv_bias)

    def rules(self, config: ModelConfig) -> list[Rule]:
        d, kv = config.n_heads * config.head_dim, n_kv_heads(config) * config.head_dim
        rules = [Rule.copy("tok_emb.weight", "embed_tokens.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            qkv = [h + f"self_attn.{p}_proj" for p in "qkv"]
            rules += [
                Rule.copy(z + "attn_residual.norm.weight", h + "input_layernorm.weight"),
                Rule.concat(z + "attn.qkv.weight", [n + ".weight" for n in qkv], (d, kv, kv)),
                *([Rule.concat(z + "attn.qkv.bias", [n + ".bias" for n in qkv], (d, kv, kv))] if self.qkv_bias else []),
                Rule.copy(z + "attn.out.weight", h + "self_attn.o_proj.weight"),
                Rule.copy(z + "mlp_residual.norm.weight", h + "post_attention_layernorm.weight"),
                Rule.copy(z + "mlp.gate.weight", h + "mlp.gate_proj.weight"),
                Rule.copy(z + "mlp.up.weight", h + "mlp.up_proj.weight"),
                Rule.copy(z + "mlp.down.weight", h + "mlp.down_proj.weight"),
            ]
        return [*rules, Rule.copy("final_norm.weight", "norm.weight"), Rule.copy("head.weight", "lm_head.weight")]

    #: The components of this family's layers (``blockers`` refuses others for export).
    parts: ClassVar[Mapping[str, str]] = {"placement": "pre", "norm": "rmsnorm", "position": "rotary", "mlp": "swiglu"}
    #: The family's embedding scale (``config.embedding_scale``).
    embedding_scale: ClassVar[str] = "none"
    #: Whether the family writes numeric embedding and logit scales (Granite's multipliers).
    multipliers: ClassVar[bool] = False

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        """What in ``config``'s attention this family cannot express (see ``blockers``)."""
        if config.attention.name not in ("sdpa", "eager", "gqa"):
            return [f"attention {config.attention.name!r} ({self.architecture} has grouped-query attention)"]
        return []

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture, self.embedding_scale, self.multipliers)
        for kind, name in self.parts.items():
            if getattr(config, kind).name != name:
                blockers.append(f"{kind} {getattr(config, kind).name!r} ({self.architecture} has {name})")
        blockers += self.attention_blockers(config)
        if config.position.name == "rotary" and turned(config) != config.head_dim:
            blockers.append("partial rotary (this family rotates the whole head)")
        blockers += rotary_blockers(config, self.architecture, scaling=True)
        if config.attention.options.get("kernel") not in (None, "sdpa", "eager"):
            blockers.append("an attention kernel other than sdpa/eager")
        if config.bias:
            blockers.append(f"bias=true ({self.architecture} has no biases)")
        _, qkv_bias, out_bias = self.attention_layout(config)
        if qkv_bias != self.qkv_bias:
            blockers.append(
                f"q/k/v biases {'on' if qkv_bias else 'off'} ({self.architecture} has them {'on' if self.qkv_bias else 'off'})"
            )
        if out_bias:
            blockers.append(f"an output-projection bias ({self.architecture}'s o_proj has none)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        base = rotary_base(config)
        options = config.mlp.options
        hidden = options.get("hidden") or swiglu_hidden(
            config.d_ff or 4 * config.d_model, options.get("multiple_of", 256)
        )
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "intermediate_size": hidden,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": config.n_heads,
            "num_key_value_heads": n_kv_heads(config),
            "head_dim": config.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": config.max_seq_len,
            "rms_norm_eps": config.norm_eps,
            "rope_theta": base,
            "rope_parameters": {"rope_type": "default", "rope_theta": base, **scaling_to_hf(config)},
            "tie_word_embeddings": config.tie_embeddings,
            "attention_dropout": config.dropout.attention,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": None,
            "eos_token_id": None,
        }


class Mistral(LlamaFamily):
    """Mistral: Llama's layout, every layer within one sliding window (``attention.window``)."""

    architecture = "MistralForCausalLM"
    model_type = "mistral"
    description = "Mistral: Llama's layout with a sliding attention window"
    engine_features = frozenset({"window"})

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        pass  # MistralConfig has no bias switches

    def max_seq_len(self, hf: Mapping[str, Any], where: str) -> int:
        return int(hf.get("max_position_embeddings", 4096 * 32))

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = super().config_from_hf(hf, where)
        windows = layer_windows(hf, fields["n_layers"], fields["max_seq_len"], hf.get("sliding_window"))
        return with_windows(fields, windows)

    def blockers(self, config: ModelConfig) -> list[str]:
        windows = set(window_per_layer(config))
        uniform = [] if len(windows) == 1 else ["a window in some layers only (Mistral windows every layer alike)"]
        return super().blockers(config) + window_blockers(config, self.architecture) + uniform

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        for name in ("attention_bias", "mlp_bias"):
            del hf[name]
        return {**hf, "sliding_window": window_per_layer(config)[0]}


class Qwen2(LlamaFamily):
    """Qwen2: Llama's layout with biases on q, k and v (none on o_proj or the MLP); with
    ``use_sliding_window``, the layers from ``max_window_layers`` on slide (a layer pattern)."""

    architecture = "Qwen2ForCausalLM"
    model_type = "qwen2"
    description = "Qwen2: Llama's layout plus q/k/v biases, sliding windows from max_window_layers"
    qkv_bias = True
    engine_features = frozenset({"window", "layer_pattern"})

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        pass  # Qwen2 always has q/k/v biases and nothing else

    def max_seq_len(self, hf: Mapping[str, Any], where: str) -> int:
        return int(hf.get("max_position_embeddings", 32768))

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        return qwen_windows(self, hf, where, super().config_from_hf(hf, where))

    def blockers(self, config: ModelConfig) -> list[str]:
        return super().blockers(config) + window_blockers(config, self.architecture)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        for name in ("attention_bias", "mlp_bias", "head_dim"):
            del hf[name]
        windows = window_per_layer(config)
        sizes = {w for w in windows if w is not None}
        if not sizes:
            return {**hf, "use_sliding_window": False, "sliding_window": None, "max_window_layers": config.n_layers}
        types = ["sliding_attention" if w is not None else "full_attention" for w in windows]
        full = next((i for i, w in enumerate(windows) if w is not None), config.n_layers)
        return {
            **hf,
            "use_sliding_window": True,
            "sliding_window": sizes.pop(),
            "max_window_layers": full,
            "layer_types": types,
        }


CONVERTERS: tuple[Converter, ...] = (LlamaFamily(), Mistral(), Qwen2())

__all__ = ["CONVERTERS", "LlamaFamily", "Mistral", "Qwen2"]
