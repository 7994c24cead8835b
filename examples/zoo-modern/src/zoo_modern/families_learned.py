"""Hugging Face converters for the families whose positions are not rotary: OPT and
GPTBigCode (learned tables), BLOOM and MPT (ALiBi).

- OPT: GPT-2's design with separate q/k/v projections and a position table read from
  row 2 on (``learned`` with ``offset = 2``); pre-norm, or post-norm without a final
  norm (``do_layer_norm_before = false``).
- GPTBigCode (SantaCoder, StarCoder 1): GPT-2's design with ``nn.Linear`` weights and one
  key/value head (multi-query) in a fused ``c_attn`` whose rows are the zoo's [q | k | v].
- MPT: ALiBi whose slopes, for any head count, are the zoo's (BLOOM's) with max_bias 8,
  LayerNorm without its shift, no biases, a fused [q | k | v] ``Wqkv``.
- BLOOM: ALiBi (its slopes are the zoo's for any head count), a LayerNorm on the
  embeddings (``embedding_norm``) and a fused per-head query_key_value.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.plugin import Converter, Count, Epsilon, Fraction, HFFields, ModelConfig, Rule
from zoo_modern.families.readers import ACTIVATIONS_OUT, common_blockers, n_kv_heads, per_head
from zoo_modern.families_classic import activation, attention_blockers, linear, qkv, wanted


def learned_blockers(config: ModelConfig, architecture: str, offset: int | None) -> list[str]:
    """Blockers for any design but ``architecture``'s biased pre-norm LayerNorm stack with learned positions."""
    blockers = wanted(config, architecture, {"norm": "layernorm", "mlp": "standard", "position": "learned"})
    if config.position.name == "learned" and config.position.options.get("offset") != offset:
        blockers.append(
            f"learned positions with offset {config.position.options.get('offset') or 0} ({architecture}: {offset or 0})"
        )
    if not config.bias or config.norm.options.get("shift") is False:
        blockers.append(f"bias=false ({architecture}'s layers and norms have biases)")
    if config.activation.name not in ACTIVATIONS_OUT:
        blockers.append(f"activation {config.activation.name!r}")
    return blockers


# -- OPT -------------------------------------------------------------------------------


class OptFields(HFFields):
    not_null = ("max_position_embeddings",)

    vocab_size: Count = 50272
    hidden_size: Count = 768
    num_hidden_layers: Count = 12
    ffn_dim: Count = 3072
    max_position_embeddings: Count | None = None
    do_layer_norm_before: bool = True
    word_embed_proj_dim: Count | None = None
    dropout: Fraction = 0.1
    attention_dropout: Fraction = 0.0
    num_attention_heads: Count = 12
    activation_function: str = "relu"
    enable_bias: bool = True
    layer_norm_elementwise_affine: bool = True
    tie_word_embeddings: bool = True


class Opt(Converter):
    """OPT: GPT-2's design, separate q/k/v, positions from row 2 of their table."""

    architecture = "OPTForCausalLM"
    model_type = "opt"
    description = "OPT: learned positions (offset 2), separate q/k/v, pre- or post-norm LayerNorm, biases"
    prefix = "model.decoder."
    embedding = "embed_tokens.weight"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = OptFields.read(hf, where)
        d = fields.hidden_size
        if fields.word_embed_proj_dim not in (None, d):
            raise self.refuse(
                where,
                "word_embed_proj_dim",
                fields.word_embed_proj_dim,
                f"project_in/out to and from {d} are not modelled",
            )
        for name, value in (
            ("enable_bias", fields.enable_bias),
            ("layer_norm_elementwise_affine", fields.layer_norm_elementwise_affine),
        ):
            if not value:
                raise self.refuse(where, name, False, "OPT without biases or norm scales is not modelled")
        pre, removed = fields.do_layer_norm_before, hf.get("_remove_final_layer_norm", False)
        if not isinstance(removed, bool):
            raise self.refuse(where, "_remove_final_layer_norm", removed, "it is true or false")
        final_norm = pre and not removed
        dropout = {"embedding": 0.0, "attention": fields.attention_dropout, "residual": fields.dropout}
        return {
            "vocab_size": fields.vocab_size,
            "max_seq_len": fields.max_position_embeddings or 2048,
            "d_model": d,
            "n_layers": fields.num_hidden_layers,
            "n_heads": fields.num_attention_heads,
            "d_ff": fields.ffn_dim,
            "dropout": dropout,
            "bias": True,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": 1e-5,  # OPT's LayerNorms take torch's default
            "final_norm": final_norm,
            "attention": "sdpa",
            "norm": "layernorm",
            "placement": "pre" if pre else "post",
            "activation": activation(hf, where, "activation_function", "relu"),
            "position": {"name": "learned", "offset": 2},
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        d = config.d_model
        rules = [
            Rule.copy("tok_emb.weight", "embed_tokens.weight"),
            Rule.copy("position.table.weight", "embed_positions.weight"),
        ]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            rules += [
                *linear(z + "attn_residual.norm", h + "self_attn_layer_norm", True),
                *qkv(z + "attn.qkv", [h + f"self_attn.{p}_proj" for p in "qkv"], (d, d, d), True),
                *linear(z + "attn.out", h + "self_attn.out_proj", True),
                *linear(z + "mlp_residual.norm", h + "final_layer_norm", True),
                *linear(z + "mlp.up", h + "fc1", True),
                *linear(z + "mlp.down", h + "fc2", True),
            ]
        final = linear("final_norm", "final_layer_norm", True) if config.final_norm is not False else []
        return [*rules, *final, Rule.copy("head.weight", "lm_head.weight")]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = [b for b in common_blockers(config, self.architecture) if not b.startswith("final_norm")]
        blockers += wanted(
            config,
            self.architecture,
            {"placement": config.placement.name if config.placement.name in ("pre", "post") else "pre"},
        )
        blockers += learned_blockers(config, self.architecture, 2)
        blockers += attention_blockers(config, self.architecture, config.n_heads, True, True)
        has_final = config.final_norm is not False
        if config.placement.name == "post" and has_final:
            blockers.append("post-norm with a final norm (OPT's post-norm variant has none)")
        if config.norm_eps != 1e-5:
            blockers.append(f"norm_eps={config.norm_eps:g} (OPT's LayerNorms use 1e-5)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        pre = config.placement.name == "pre"
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "num_hidden_layers": config.n_layers,
            "ffn_dim": config.d_ff,
            "max_position_embeddings": config.max_seq_len,
            "do_layer_norm_before": pre,
            "_remove_final_layer_norm": pre and config.final_norm is False,
            "word_embed_proj_dim": config.d_model,
            "dropout": config.dropout.residual,
            "attention_dropout": config.dropout.attention,
            "num_attention_heads": config.n_heads,
            "activation_function": ACTIVATIONS_OUT[config.activation.name],
            "enable_bias": True,
            "layer_norm_elementwise_affine": True,
            "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": None,
            "eos_token_id": None,
            "pad_token_id": None,
        }


# -- GPTBigCode ------------------------------------------------------------------------


class BigCodeFields(HFFields):
    not_null = ("n_positions", "layer_norm_epsilon")

    vocab_size: Count = 50257
    n_positions: Count | None = None
    n_embd: Count = 768
    n_layer: Count = 12
    n_head: Count = 12
    n_inner: Count | None = None
    activation_function: str = "gelu_pytorch_tanh"
    resid_pdrop: Fraction = 0.1
    embd_pdrop: Fraction = 0.1
    attn_pdrop: Fraction = 0.1
    layer_norm_epsilon: Epsilon | None = None
    scale_attn_weights: bool = True
    multi_query: bool = True
    add_cross_attention: bool = False
    tie_word_embeddings: bool = True


class GPTBigCode(Converter):
    """GPTBigCode (SantaCoder, StarCoder 1): GPT-2's design with multi-query attention."""

    architecture = "GPTBigCodeForCausalLM"
    model_type = "gpt_bigcode"
    description = "GPTBigCode (SantaCoder, StarCoder): GPT-2's design, multi-query attention in a fused c_attn"
    prefix = "transformer."
    embedding = "wte.weight"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = BigCodeFields.read(hf, where)
        if not fields.scale_attn_weights:
            raise self.refuse(
                where, "scale_attn_weights", False, "attention scores are always divided by sqrt(head_dim)"
            )
        if fields.add_cross_attention:
            raise self.refuse(where, "add_cross_attention", True, "cross-attention layers are not modelled")
        heads = fields.n_head
        dropout = {"embedding": fields.embd_pdrop, "attention": fields.attn_pdrop, "residual": fields.resid_pdrop}
        return {
            "vocab_size": fields.vocab_size,
            "max_seq_len": fields.n_positions or 1024,
            "d_model": fields.n_embd,
            "n_layers": fields.n_layer,
            "n_heads": heads,
            "d_ff": fields.n_inner or 4 * fields.n_embd,
            "dropout": dropout,
            "bias": True,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": fields.layer_norm_epsilon or 1e-5,
            "attention": {"name": "sdpa", "n_kv_heads": 1 if fields.multi_query else heads},
            "norm": "layernorm",
            "placement": "pre",
            "activation": activation(hf, where, "activation_function", "gelu_pytorch_tanh"),
            "position": "learned",
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        multi_query = n_kv_heads(config) == 1
        rules = [Rule.copy("tok_emb.weight", "wte.weight"), Rule.copy("position.table.weight", "wpe.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"h.{i}."
            fused = (
                linear(z + "attn.qkv", h + "attn.c_attn", True)  # [q | k | v], one key/value head
                if multi_query
                else [per_head(z + f"attn.qkv.{p}", h + f"attn.c_attn.{p}", config.n_heads) for p in ("weight", "bias")]
            )
            rules += [
                *linear(z + "attn_residual.norm", h + "ln_1", True),
                *fused,
                *linear(z + "attn.out", h + "attn.c_proj", True),
                *linear(z + "mlp_residual.norm", h + "ln_2", True),
                *linear(z + "mlp.up", h + "mlp.c_fc", True),
                *linear(z + "mlp.down", h + "mlp.c_proj", True),
            ]
        return [*rules, *linear("final_norm", "ln_f", True), Rule.copy("head.weight", "lm_head.weight")]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture)
        blockers += wanted(config, self.architecture, {"placement": "pre"})
        blockers += learned_blockers(config, self.architecture, None)
        if n_kv_heads(config) not in (1, config.n_heads):
            blockers.append(f"{n_kv_heads(config)} key/value heads (GPTBigCode has 1 or n_heads)")
        blockers += attention_blockers(config, self.architecture, None, True, True)
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
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
            "multi_query": n_kv_heads(config) == 1,
            "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": None,
            "eos_token_id": None,
        }


# -- BLOOM -----------------------------------------------------------------------------


class BloomFields(HFFields):
    not_null = ("layer_norm_epsilon",)

    vocab_size: Count = 250880
    hidden_size: Count = 64
    n_layer: Count = 2
    n_head: Count = 8
    layer_norm_epsilon: Epsilon | None = None
    apply_residual_connection_post_layernorm: bool = False
    hidden_dropout: Fraction = 0.0
    attention_dropout: Fraction = 0.0
    tie_word_embeddings: bool = True
    seq_length: Count | None = None
    max_position_embeddings: Count | None = None


class Bloom(Converter):
    """BLOOM: ALiBi, a LayerNorm on the embeddings, fused per-head query_key_value."""

    architecture = "BloomForCausalLM"
    model_type = "bloom"
    description = "BLOOM: ALiBi, embedding LayerNorm, fused per-head qkv, LayerNorm with biases"
    prefix = "transformer."
    embedding = "word_embeddings.weight"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = BloomFields.read(hf, where)
        if fields.apply_residual_connection_post_layernorm:
            raise self.refuse(
                where,
                "apply_residual_connection_post_layernorm",
                True,
                "a residual taken after the norm is not modelled",
            )
        d = fields.hidden_size
        return {
            "vocab_size": fields.vocab_size,
            # ALiBi sets no limit; BLOOM was trained on 2,048 tokens
            "max_seq_len": fields.max_position_embeddings or fields.seq_length or 2048,
            "d_model": d,
            "n_layers": fields.n_layer,
            "n_heads": fields.n_head,
            "d_ff": 4 * d,
            "dropout": {"attention": fields.attention_dropout, "residual": fields.hidden_dropout},
            "bias": True,
            "embedding_norm": True,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": fields.layer_norm_epsilon or 1e-5,
            "attention": "sdpa",
            "norm": "layernorm",
            "placement": "pre",
            "activation": "gelu_tanh",  # bloom_gelu: the tanh approximation
            "position": {"name": "alibi", "max_bias": 8.0},
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        heads = config.n_heads
        rules = [
            Rule.copy("tok_emb.weight", "word_embeddings.weight"),
            *linear("embed_norm", "word_embeddings_layernorm", True),
        ]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"h.{i}."
            rules += [
                *linear(z + "attn_residual.norm", h + "input_layernorm", True),
                per_head(z + "attn.qkv.weight", h + "self_attention.query_key_value.weight", heads),
                per_head(z + "attn.qkv.bias", h + "self_attention.query_key_value.bias", heads),
                *linear(z + "attn.out", h + "self_attention.dense", True),
                *linear(z + "mlp_residual.norm", h + "post_attention_layernorm", True),
                *linear(z + "mlp.up", h + "mlp.dense_h_to_4h", True),
                *linear(z + "mlp.down", h + "mlp.dense_4h_to_h", True),
            ]
        return [*rules, *linear("final_norm", "ln_f", True), Rule.copy("head.weight", "lm_head.weight")]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture, embedding_norm=True)
        blockers += wanted(
            config, self.architecture, {"placement": "pre", "norm": "layernorm", "mlp": "standard", "position": "alibi"}
        )
        blockers += attention_blockers(config, self.architecture, config.n_heads, True, True)
        if config.position.name == "alibi" and config.position.options.get("max_bias") != 8.0:
            blockers.append("ALiBi slopes with max_bias other than 8 (BLOOM's)")
        if config.d_ff != 4 * config.d_model:
            blockers.append(f"d_ff={config.d_ff} (BLOOM's MLP is 4 * d_model)")
        if config.activation.name != "gelu_tanh":
            blockers.append(f"activation {config.activation.name!r} (BLOOM's GELU is the tanh approximation)")
        if not config.bias or config.norm.options.get("shift") is False:
            blockers.append("bias=false (BLOOM's layers and norms have biases)")
        if config.dropout.embedding:
            blockers.append("embedding dropout (BLOOM has none)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "n_layer": config.n_layers,
            "n_head": config.n_heads,
            "layer_norm_epsilon": config.norm_eps,
            "apply_residual_connection_post_layernorm": False,
            "hidden_dropout": config.dropout.residual,
            "attention_dropout": config.dropout.attention,
            "tie_word_embeddings": config.tie_embeddings,
            "seq_length": config.max_seq_len,
            "bos_token_id": None,
            "eos_token_id": None,
        }


# -- MPT -------------------------------------------------------------------------------


class MptFields(HFFields):
    not_null = ("layer_norm_epsilon", "max_seq_len")

    d_model: Count = 2048
    n_heads: Count = 16
    n_layers: Count = 24
    expansion_ratio: Count = 4
    max_seq_len: Count | None = None
    vocab_size: Count = 50368
    resid_pdrop: Fraction = 0.0
    emb_pdrop: Fraction = 0.0
    layer_norm_epsilon: Epsilon | None = None
    logit_scale: float | str | None = None
    no_bias: bool = True
    tie_word_embeddings: bool = True
    attn_config: dict[str, Any] | None = None


# attn_config entries transformers' MPT reads or ignores, with the value it computes with;
# another value in config.json is refused (the original model would compute otherwise).
MPT_ATTENTION = {
    "attn_type": "multihead_attention",
    "clip_qkv": None,
    "softmax_scale": None,
    "prefix_lm": False,
    "qk_ln": False,
    "attn_uses_sequence_id": False,
    "alibi": True,
    "alibi_bias_max": 8,
}


class Mpt(Converter):
    """MPT: ALiBi (MPT's slopes are the zoo's), LayerNorm without bias, no biases, fused Wqkv."""

    architecture = "MptForCausalLM"
    model_type = "mpt"
    description = "MPT: ALiBi, LayerNorm without bias, no biases, fused [q | k | v] Wqkv"
    prefix = "transformer."
    embedding = "wte.weight"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = MptFields.read(hf, where)
        attention = fields.attn_config or {}
        default_scale = (fields.d_model / fields.n_heads) ** -0.5
        for key, value in attention.items():
            if key not in MPT_ATTENTION or value == MPT_ATTENTION[key]:
                continue
            if key == "softmax_scale" and value == default_scale:
                continue  # the default, written out
            why = f"transformers' MPT computes with {MPT_ATTENTION[key]!r}"
            raise self.refuse(where, f"attn_config.{key}", value, why)
        if fields.logit_scale is not None:
            raise self.refuse(where, "logit_scale", fields.logit_scale, "scaled logits are not modelled")
        if fields.expansion_ratio != 4:
            raise self.refuse(
                where, "expansion_ratio", fields.expansion_ratio, "transformers' MPT has a 4 * d_model MLP"
            )
        pdrop = attention.get("attn_pdrop", 0.0)
        if not isinstance(pdrop, (int, float)) or isinstance(pdrop, bool) or not 0 <= pdrop < 1:
            raise self.refuse(where, "attn_config.attn_pdrop", pdrop, "a dropout is a number in [0, 1)")
        d = fields.d_model
        return {
            "vocab_size": fields.vocab_size,
            "max_seq_len": fields.max_seq_len or 2048,
            "d_model": d,
            "n_layers": fields.n_layers,
            "n_heads": fields.n_heads,
            "d_ff": 4 * d,
            "dropout": {"embedding": fields.emb_pdrop, "attention": float(pdrop), "residual": float(pdrop)},
            "bias": False,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": fields.layer_norm_epsilon or 1e-5,
            "attention": "sdpa",
            "norm": {"name": "layernorm", "shift": False},
            "placement": "pre",
            "activation": "gelu",
            "position": {"name": "alibi", "max_bias": 8.0},
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        rules = [Rule.copy("tok_emb.weight", "wte.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"blocks.{i}."
            rules += [
                Rule.copy(z + "attn_residual.norm.weight", h + "norm_1.weight"),
                Rule.copy(z + "attn.qkv.weight", h + "attn.Wqkv.weight"),
                Rule.copy(z + "attn.out.weight", h + "attn.out_proj.weight"),
                Rule.copy(z + "mlp_residual.norm.weight", h + "norm_2.weight"),
                Rule.copy(z + "mlp.up.weight", h + "ffn.up_proj.weight"),
                Rule.copy(z + "mlp.down.weight", h + "ffn.down_proj.weight"),
            ]
        return [*rules, Rule.copy("final_norm.weight", "norm_f.weight"), Rule.copy("head.weight", "lm_head.weight")]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture)
        parts = {"placement": "pre", "norm": "layernorm", "mlp": "standard", "position": "alibi", "activation": "gelu"}
        blockers += wanted(config, self.architecture, parts)
        blockers += attention_blockers(config, self.architecture, config.n_heads, False, False)
        if config.position.name == "alibi" and config.position.options.get("max_bias") != 8.0:
            blockers.append("ALiBi slopes with max_bias other than 8 (transformers' MPT uses 8)")
        if config.d_ff != 4 * config.d_model:
            blockers.append(f"d_ff={config.d_ff} (MPT's MLP is 4 * d_model)")
        if config.bias:
            blockers.append("bias=true (MPT's layers have no biases)")
        if config.norm.options.get("shift"):
            blockers.append("a LayerNorm with a shift (MPT's norms have no bias)")
        if config.dropout.attention != config.dropout.residual:
            blockers.append("attention and residual dropouts that differ (MPT has one, attn_pdrop)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        pdrop = config.dropout.attention
        return {
            "vocab_size": config.vocab_size,
            "d_model": config.d_model,
            "n_heads": config.n_heads,
            "n_layers": config.n_layers,
            "expansion_ratio": 4,
            "max_seq_len": config.max_seq_len,
            "emb_pdrop": config.dropout.embedding,
            "resid_pdrop": config.dropout.residual,
            "layer_norm_epsilon": config.norm_eps,
            "no_bias": True,
            # MptAttentionConfig types attn_pdrop as int: 0.0 is written 0
            "attn_config": {**MPT_ATTENTION, "attn_pdrop": int(pdrop) if pdrop == int(pdrop) else pdrop},
            "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": None,
            "eos_token_id": None,
        }


CONVERTERS: tuple[Converter, ...] = (Opt(), GPTBigCode(), Bloom(), Mpt())

__all__ = ["CONVERTERS", "Bloom", "GPTBigCode", "Mpt", "Opt"]
