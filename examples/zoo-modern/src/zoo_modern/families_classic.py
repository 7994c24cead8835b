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
    ACTIVATIONS_OUT,
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


# -- GPT-J -----------------------------------------------------------------------------


class GPTJFields(HFFields):
    not_null = ("n_positions", "layer_norm_epsilon", "rotary_dim")

    vocab_size: Count = 50400
    n_positions: Count | None = None
    n_embd: Count = 4096
    n_layer: Count = 28
    n_head: Count = 16
    rotary_dim: Count | None = None
    n_inner: Count | None = None
    activation_function: str = "gelu_new"
    resid_pdrop: Fraction = 0.0
    embd_pdrop: Fraction = 0.0
    attn_pdrop: Fraction = 0.0
    layer_norm_epsilon: Epsilon | None = None
    tie_word_embeddings: bool = False


class GPTJ(Converter):
    """GPT-J: parallel attention and MLP from one LayerNorm, interleaved partial rotary."""

    architecture = "GPTJForCausalLM"
    model_type = "gptj"
    description = "GPT-J: parallel attention+MLP (one norm), interleaved partial rotary, biased MLP and head"
    prefix = "transformer."
    top_level = ("lm_head.weight", "lm_head.bias")
    embedding = "wte.weight"

    def skip(self, name: str) -> bool:
        return name.endswith(("attn.bias", "attn.masked_bias", "embed_positions"))

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = GPTJFields.read(hf, where)
        d, heads, layers, vocab = fields.n_embd, fields.n_head, fields.n_layer, fields.vocab_size
        head_dim = d // heads
        rotary_dim = fields.rotary_dim or 64
        if rotary_dim % 2 or rotary_dim > head_dim:
            raise self.refuse(where, "rotary_dim", rotary_dim, f"the zoo turns an even number <= head_dim={head_dim}")
        dropout = {"embedding": fields.embd_pdrop, "attention": fields.attn_pdrop, "residual": fields.resid_pdrop}
        return {
            "vocab_size": vocab,
            "max_seq_len": fields.n_positions or 2048,
            "d_model": d,
            "n_layers": layers,
            "n_heads": heads,
            "d_ff": fields.n_inner or 4 * d,
            "dropout": dropout,
            "bias": True,
            "head_bias": True,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": fields.layer_norm_epsilon or 1e-5,
            "attention": {"name": "sdpa", "qkv_bias": False, "out_bias": False},
            "norm": "layernorm",
            "placement": {"name": "parallel", "shared_norm": True},
            "activation": activation(hf, where, "activation_function", "gelu_new"),
            "position": {**rotary_spec(10000.0, None if rotary_dim == head_dim else rotary_dim), "interleaved": True},
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        rules = [Rule.copy("tok_emb.weight", "wte.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"h.{i}."
            d = config.d_model
            rules += [
                *linear(z + "attn_residual.norm", h + "ln_1", True),
                *qkv(z + "attn.qkv", [h + f"attn.{p}_proj" for p in "qkv"], (d, d, d), False),
                *linear(z + "attn.out", h + "attn.out_proj", False),
                *linear(z + "mlp.up", h + "mlp.fc_in", True),
                *linear(z + "mlp.down", h + "mlp.fc_out", True),
            ]
        return [*rules, *linear("final_norm", "ln_f", True), *linear("head", "lm_head", True)]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture, head_bias=True)
        blockers += wanted(config, self.architecture, {"placement": "parallel", "norm": "layernorm", "mlp": "standard"})
        blockers += wanted(config, self.architecture, {"position": "rotary"})
        if config.placement.name == "parallel" and not config.placement.options.get("shared_norm"):
            blockers.append("a parallel layout with two norms (GPT-J's ln_1 feeds attention and MLP)")
        blockers += attention_blockers(config, self.architecture, config.n_heads, False, False)
        blockers += rotary_blockers(config, self.architecture, interleaved=True)
        if config.position.name == "rotary" and rotary_base(config) != 10000.0:
            blockers.append("a rotary base other than 10000 (GPT-J's is fixed)")
        if not config.bias or config.norm.options.get("shift") is False:
            blockers.append("bias=false (GPT-J's MLP and norms have biases)")
        if config.activation.name not in ACTIVATIONS_OUT:
            blockers.append(f"activation {config.activation.name!r}")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return {
            "vocab_size": config.vocab_size,
            "n_positions": config.max_seq_len,
            "n_embd": config.d_model,
            "n_layer": config.n_layers,
            "n_head": config.n_heads,
            "rotary_dim": turned(config),
            "n_inner": config.d_ff,
            "activation_function": ACTIVATIONS_OUT[config.activation.name],
            "resid_pdrop": config.dropout.residual,
            "embd_pdrop": config.dropout.embedding,
            "attn_pdrop": config.dropout.attention,
            "layer_norm_epsilon": config.norm_eps,
            "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": None,
            "eos_token_id": None,
        }


# -- Phi -------------------------------------------------------------------------------


class PhiFields(HFFields):
    not_null = ("max_position_embeddings", "layer_norm_eps")

    vocab_size: Count = 51200
    hidden_size: Count = 2048
    intermediate_size: Count = 8192
    num_hidden_layers: Count = 24
    num_attention_heads: Count = 32
    num_key_value_heads: Count | None = None
    resid_pdrop: Fraction = 0.0
    embd_pdrop: Fraction = 0.0
    attention_dropout: Fraction = 0.0
    hidden_act: str = "gelu_new"
    max_position_embeddings: Count | None = None
    layer_norm_eps: Epsilon | None = None
    tie_word_embeddings: bool = False
    rope_theta: Positive | None = None
    partial_rotary_factor: Fraction | None = None
    rope_parameters: RopeTable | None = None
    rope_scaling: RopeTable | None = None
    qk_layernorm: bool = False


class Phi(Converter):
    """Phi 1/1.5/2: parallel attention and MLP from one LayerNorm, partial rotary, biases everywhere."""

    architecture = "PhiForCausalLM"
    model_type = "phi"
    description = "Phi-1/1.5/2: parallel attention+MLP (one norm), partial rotary, biases everywhere"
    prefix = "model."
    top_level = ("lm_head.weight", "lm_head.bias")
    embedding = "embed_tokens.weight"

    def skip(self, name: str) -> bool:
        return name.endswith("rotary_emb.inv_freq")

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = PhiFields.read(hf, where)
        if fields.qk_layernorm:
            raise self.refuse(where, "qk_layernorm", True, "LayerNorms on queries and keys are not modelled for Phi")
        d, heads, layers = fields.hidden_size, fields.num_attention_heads, fields.num_hidden_layers
        base, rotary_dim = partial_rotary(hf, where, d // heads, 0.5)
        head_dim = d // heads
        dropout = {
            "embedding": fields.embd_pdrop,
            "attention": fields.attention_dropout,
            "residual": fields.resid_pdrop,
        }
        return {
            "vocab_size": fields.vocab_size,
            "max_seq_len": int(fields.max_position_embeddings or 2048),
            "d_model": d,
            "n_layers": layers,
            "n_heads": heads,
            "d_ff": fields.intermediate_size,
            "dropout": dropout,
            "bias": True,
            "head_bias": True,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": float(fields.layer_norm_eps or 1e-5),
            "attention": {"name": "sdpa", "n_kv_heads": fields.num_key_value_heads or heads},
            "norm": "layernorm",
            "placement": {"name": "parallel", "shared_norm": True},
            "activation": activation(hf, where, "hidden_act", "gelu_new"),
            "position": rotary_spec(base, None if rotary_dim == head_dim else rotary_dim),
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        d, kv = config.d_model, n_kv_heads(config) * config.head_dim
        rules = [Rule.copy("tok_emb.weight", "embed_tokens.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            rules += [
                *linear(z + "attn_residual.norm", h + "input_layernorm", True),
                *qkv(z + "attn.qkv", [h + f"self_attn.{p}_proj" for p in "qkv"], (d, kv, kv), True),
                *linear(z + "attn.out", h + "self_attn.dense", True),
                *linear(z + "mlp.up", h + "mlp.fc1", True),
                *linear(z + "mlp.down", h + "mlp.fc2", True),
            ]
        return [*rules, *linear("final_norm", "final_layernorm", True), *linear("head", "lm_head", True)]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture, head_bias=True)
        parts = {"placement": "parallel", "norm": "layernorm", "mlp": "standard", "position": "rotary"}
        blockers += wanted(config, self.architecture, parts)
        if config.placement.name == "parallel" and not config.placement.options.get("shared_norm"):
            blockers.append("a parallel layout with two norms (Phi's input_layernorm feeds attention and MLP)")
        blockers += attention_blockers(config, self.architecture, None, True, True)
        blockers += rotary_blockers(config, self.architecture)
        if not config.bias or config.norm.options.get("shift") is False:
            blockers.append("bias=false (Phi's layers and norms have biases)")
        if config.activation.name not in ACTIVATIONS_OUT:
            blockers.append(f"activation {config.activation.name!r}")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        base, fraction = rotary_base(config), turned(config) / config.head_dim
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "intermediate_size": config.d_ff,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": config.n_heads,
            "num_key_value_heads": n_kv_heads(config),
            "hidden_act": ACTIVATIONS_OUT[config.activation.name],
            "max_position_embeddings": config.max_seq_len,
            "layer_norm_eps": config.norm_eps,
            "partial_rotary_factor": fraction,
            "rope_theta": base,
            "rope_parameters": {"rope_type": "default", "rope_theta": base, "partial_rotary_factor": fraction},
            "qk_layernorm": False,
            "tie_word_embeddings": config.tie_embeddings,
            "resid_pdrop": config.dropout.residual,
            "embd_pdrop": config.dropout.embedding,
            "attention_dropout": config.dropout.attention,
            "bos_token_id": None,
            "eos_token_id": None,
        }


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


CONVERTERS: tuple[Converter, ...] = (GPTJ(), Phi(), StableLm())
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

__all__ = ["CONVERTERS", "GPTJ", "PRESETS", "Phi", "StableLm"]
