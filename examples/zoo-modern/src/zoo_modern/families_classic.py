"""Hugging Face converters for the rotary families before Llama's layout settled: GPT-J,
Phi (1, 1.5, 2) and StableLM, each the zoo's parts in another arrangement.

- GPT-J: attention and MLP in parallel from one LayerNorm, rotary on the first
  ``rotary_dim`` dimensions of each head, turning neighbouring pairs (interleaved), no
  attention biases, a biased MLP and output head.
- Phi: the same parallel layout with rotary in halves (``partial_rotary_factor``) and
  biases everywhere, the head's included.
- StableLM: Llama's layout with LayerNorm (with its shift), partial rotary and, in
  StableLM 2, biases on q, k and v only.

Refusals (``InteropError``) name the config.json field the zoo would compute otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.plugin import Converter, Count, Epsilon, Fraction, HFFields, ModelConfig, Positive, RopeTable, Rule
from zoo_modern.converters import LlamaFamily
from zoo_modern.families.readers import (
    ACTIVATIONS,
    attention_spec,
    common_blockers,
    n_kv_heads,
    rope,
    rotary_base,
    rotary_blockers,
    rotary_spec,
    turned,
)


def partial_rotary(hf: Mapping[str, Any], where: str, head_dim: int, default: float) -> tuple[float, int]:
    """``(base, dimensions turned)`` of a partially rotary family whose transformers config
    defaults ``partial_rotary_factor`` to ``default``."""
    given = "partial_rotary_factor" in hf or "partial_rotary_factor" in (hf.get("rope_parameters") or {})
    base, fraction = rope(hf, where)
    fraction = fraction if given else default
    dims = int(head_dim * fraction)
    if dims % 2 or dims < 2:
        raise Converter.refuse(where, "partial_rotary_factor", fraction, f"it turns {dims} dimensions (odd or none)")
    return base, dims


def activation(hf: Mapping[str, Any], where: str, field: str, default: str) -> str:
    name = hf.get(field, default)
    if name not in ACTIVATIONS:
        raise Converter.refuse(where, field, name, f"supported: {', '.join(sorted(ACTIVATIONS))}")
    return ACTIVATIONS[name]


def wanted(config: ModelConfig, architecture: str, parts: Mapping[str, str]) -> list[str]:
    """A blocker for each kind whose component is not the one ``architecture`` has."""
    return [
        f"{kind} {getattr(config, kind).name!r} ({architecture} has {name})"
        for kind, name in parts.items()
        if getattr(config, kind).name != name
    ]


def attention_blockers(
    config: ModelConfig, architecture: str, kv: int | None, qkv_bias: bool, out_bias: bool
) -> list[str]:
    """Blockers for an attention other than ``kv`` key/value heads (None: any) with these biases."""
    n_kv, has_qkv, has_out = Converter.attention_layout(config)
    blockers = []
    if config.attention.name not in ("sdpa", "eager", "gqa"):
        blockers.append(f"attention {config.attention.name!r} ({architecture} has the zoo's attention layout)")
    if config.attention.options.get("kernel") not in (None, "sdpa", "eager"):
        blockers.append("an attention kernel other than sdpa/eager")
    if kv is not None and n_kv != kv:
        blockers.append(f"{n_kv} key/value heads ({architecture} has {kv})")
    if (has_qkv, has_out) != (qkv_bias, out_bias):
        blockers.append(f"attention biases q/k/v={has_qkv}, out={has_out} ({architecture}: {qkv_bias}, {out_bias})")
    return blockers


def linear(zoo: str, hf: str, bias: bool) -> list[Rule]:
    """A linear layer's weight (and bias) under another name."""
    return [Rule.copy(f"{zoo}.weight", f"{hf}.weight"), *([Rule.copy(f"{zoo}.bias", f"{hf}.bias")] if bias else [])]


def qkv(zoo: str, hf: list[str], sizes: tuple[int, int, int], bias: bool) -> list[Rule]:
    """The zoo's fused qkv from separate q, k and v projections."""
    rules = [Rule.concat(f"{zoo}.weight", [n + ".weight" for n in hf], sizes)]
    return rules + ([Rule.concat(f"{zoo}.bias", [n + ".bias" for n in hf], sizes)] if bias else [])


# -- StableLM --------------------------------------------------------------------------


class StableLmFields(HFFields):
    not_null = ("max_position_embeddings", "layer_norm_eps")

    vocab_size: Count = 50304
    hidden_size: Count = 2560
    intermediate_size: Count = 6912
    num_hidden_layers: Count = 32
    num_attention_heads: Count = 32
    num_key_value_heads: Count | None = None
    hidden_act: str = "silu"
    max_position_embeddings: Count | None = None
    layer_norm_eps: Epsilon | None = None
    use_qkv_bias: bool = False
    qk_layernorm: bool = False
    use_parallel_residual: bool = False
    hidden_dropout: Fraction = 0.0
    attention_dropout: Fraction = 0.0
    tie_word_embeddings: bool = False
    rope_theta: Positive | None = None
    partial_rotary_factor: Fraction | None = None
    rope_parameters: RopeTable | None = None
    rope_scaling: RopeTable | None = None


class StableLm(LlamaFamily):
    """StableLM (2): Llama's layout with LayerNorm, partial rotary and optional q/k/v biases."""

    architecture = "StableLmForCausalLM"
    model_type = "stablelm"
    description = "StableLM: Llama's layout with LayerNorm, partial rotary, optional q/k/v biases"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = StableLmFields.read(hf, where)
        for name in ("qk_layernorm", "use_parallel_residual"):
            if getattr(fields, name):
                raise self.refuse(where, name, True, "this StableLM variant is not modelled")
        if fields.hidden_act != "silu":
            raise self.refuse(where, "hidden_act", fields.hidden_act, "the SwiGLU gate is SiLU in the zoo")
        d, heads = fields.hidden_size, fields.num_attention_heads
        base, rotary_dim = partial_rotary(hf, where, d // heads, 0.25)
        head_dim = d // heads
        return {
            "vocab_size": fields.vocab_size,
            "max_seq_len": int(fields.max_position_embeddings or 4096),
            "d_model": d,
            "n_layers": fields.num_hidden_layers,
            "n_heads": heads,
            "d_ff": fields.intermediate_size,
            "dropout": {"attention": fields.attention_dropout, "residual": fields.hidden_dropout},
            "bias": False,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": float(fields.layer_norm_eps or 1e-5),
            "attention": attention_spec(fields.num_key_value_heads or heads, fields.use_qkv_bias),
            "norm": {"name": "layernorm", "shift": True},
            "placement": "pre",
            "activation": "silu",
            "position": rotary_spec(base, None if rotary_dim == head_dim else rotary_dim),
            "mlp": {"name": "swiglu", "hidden": fields.intermediate_size},
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        rules = super().rules(config)
        if self.attention_layout(config)[1]:  # StableLM 2's q/k/v biases
            d, kv = config.d_model, n_kv_heads(config) * config.head_dim
            for i in range(config.n_layers):
                names = [f"layers.{i}.self_attn.{p}_proj.bias" for p in "qkv"]
                rules.append(Rule.concat(f"blocks.{i}.attn.qkv.bias", names, (d, kv, kv)))
        norms = [r for r in rules if r.zoo.endswith("norm.weight")]
        return rules + [
            Rule.copy(r.zoo.removesuffix("weight") + "bias", r.hf[0].removesuffix("weight") + "bias") for r in norms
        ]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture)
        blockers += wanted(
            config, self.architecture, {"placement": "pre", "norm": "layernorm", "mlp": "swiglu", "position": "rotary"}
        )
        _, qkv_bias, _ = self.attention_layout(config)
        blockers += attention_blockers(config, self.architecture, None, qkv_bias, False)
        blockers += rotary_blockers(config, self.architecture)
        if config.bias:
            blockers.append("bias=true (StableLM's MLP and output projection have none)")
        if config.norm.name == "layernorm" and config.norm.options.get("shift") is not True:
            blockers.append("a LayerNorm without its shift (StableLM's norms have biases)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        base, fraction = rotary_base(config), turned(config) / config.head_dim
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "intermediate_size": config.mlp.options.get("hidden") or config.d_ff,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": config.n_heads,
            "num_key_value_heads": n_kv_heads(config),
            "hidden_act": "silu",
            "max_position_embeddings": config.max_seq_len,
            "layer_norm_eps": config.norm_eps,
            "use_qkv_bias": self.attention_layout(config)[1],
            "qk_layernorm": False,
            "use_parallel_residual": False,
            "partial_rotary_factor": fraction,
            "rope_theta": base,
            "rope_parameters": {"rope_type": "default", "rope_theta": base, "partial_rotary_factor": fraction},
            "tie_word_embeddings": config.tie_embeddings,
            "hidden_dropout": config.dropout.residual,
            "attention_dropout": config.dropout.attention,
            "bos_token_id": None,
            "eos_token_id": None,
        }


CONVERTERS: tuple[Converter, ...] = (StableLm(),)
#: The presets of released checkpoints of these families and of OPT, GPTBigCode, BLOOM,
#: Falcon, MPT and Llama 3 (``presets/<name>.toml``; ``plugin.py`` registers them).
PRESETS = (
    "gpt-j-6b",
    "phi-2",
    "stablelm-2-1.6b",
    "opt-125m",
    "santacoder",
    "bloom-560m",
    "falcon-7b",
    "mpt-7b",
    "llama-3.2-1b",
)

__all__ = ["CONVERTERS", "PRESETS", "StableLm"]
