"""The Falcon converter (``FalconForCausalLM``), both ways, for its rotary variants:

- Falcon-7B's: attention and MLP in parallel from one LayerNorm, one key/value head,
  q/k/v fused as [q | k | v] (the zoo's own rows);
- the new decoder architecture (Falcon-40B, 180B): grouped key/value heads, q/k/v fused
  per group as [q_g1 .. q_gG | k_g | v_g], and one norm per sub-layer (or one shared);
- the sequential layout (``parallel_attn = false``): pre-norm with two norms, q/k/v fused
  per head, or one key/value head.

LayerNorms always have their shift; the linear layers have biases as ``bias`` says.
Falcon's ALiBi variant (scores and biases scaled together) is refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Converter, Count, Epsilon, Fraction, HFFields, ModelConfig, RopeTable, Rule
from zoo_modern.families.readers import (
    ACTIVATIONS_OUT,
    common_blockers,
    n_kv_heads,
    rope,
    rope_scaling,
    rotary_base,
    rotary_blockers,
    rotary_spec,
    scaling_to_hf,
    turned,
)
from zoo_modern.families_classic import activation, attention_blockers, linear, wanted


class FalconFields(HFFields):
    not_null = ("max_position_embeddings",)

    vocab_size: Count = 65024
    hidden_size: Count = 4544
    num_hidden_layers: Count = 32
    num_attention_heads: Count = 71
    num_ln_in_parallel_attn: Count | None = None
    layer_norm_epsilon: Epsilon | None = None
    hidden_dropout: Fraction | None = None
    attention_dropout: Fraction | None = None
    num_kv_heads: Count | None = None
    alibi: bool = False
    new_decoder_architecture: bool = False
    multi_query: bool = True
    parallel_attn: bool = True
    bias: bool = False
    max_position_embeddings: Count | None = None
    rope_parameters: RopeTable | None = None
    rope_scaling: RopeTable | None = None
    ffn_hidden_size: Count | None = None
    activation: str = "gelu"
    tie_word_embeddings: bool = True


def grouped_to_zoo(t: Tensor, kv: int, group: int) -> Tensor:
    """Falcon's rows per key/value group [q_g1 .. q_gG | k_g | v_g] -> the zoo's [q | k | v]."""
    rest = t.shape[1:]
    g = t.reshape(kv, group + 2, -1, *rest)  # (kv, G + 2, hd, ...)
    q, k, v = g[:, :group], g[:, group], g[:, group + 1]
    return torch.cat([x.reshape(-1, *rest) for x in (q, k, v)])


def zoo_to_grouped(t: Tensor, kv: int, group: int) -> Tensor:
    """The zoo's [q | k | v] rows -> Falcon's [q_g1 .. q_gG | k_g | v_g] per key/value group."""
    rest, hd = t.shape[1:], t.shape[0] // (kv * (group + 2))
    q, k, v = t.split((kv * group * hd, kv * hd, kv * hd))
    parts = [q.reshape(kv, group, hd, *rest), k.reshape(kv, 1, hd, *rest), v.reshape(kv, 1, hd, *rest)]
    return torch.cat(parts, dim=1).reshape(t.shape)


def grouped(zoo: str, hf: str, kv: int, group: int) -> Rule:
    return Rule(zoo, (hf,), lambda ts: grouped_to_zoo(ts[0], kv, group), lambda t: [zoo_to_grouped(t, kv, group)])


class Falcon(Converter):
    """Falcon: parallel (or sequential) layers, multi-query or grouped attention, rotary."""

    architecture = "FalconForCausalLM"
    model_type = "falcon"
    description = "Falcon: parallel attention+MLP, multi-query or grouped attention in a fused qkv, rotary"
    prefix = "transformer."
    embedding = "word_embeddings.weight"

    def layout(self, hf: FalconFields) -> tuple[int, str]:
        """(key/value heads, how q/k/v are fused: "rows", "grouped" or "per_head")."""
        if hf.new_decoder_architecture:
            return hf.num_kv_heads or hf.num_attention_heads, "grouped"
        if hf.multi_query:
            return 1, "rows"
        return hf.num_attention_heads, "per_head"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = FalconFields.read(hf, where)
        if fields.alibi:
            raise self.refuse(where, "alibi", True, "Falcon's ALiBi (biases scaled with the scores) is not modelled")
        if fields.new_decoder_architecture and not fields.parallel_attn:
            raise self.refuse(where, "parallel_attn", False, "the new decoder architecture is parallel in transformers")
        if not fields.new_decoder_architecture and not fields.multi_query:
            if fields.num_kv_heads not in (None, fields.num_attention_heads):
                raise self.refuse(where, "num_kv_heads", fields.num_kv_heads, "the old layout has one per head")
        kv, _ = self.layout(fields)
        two_norms = fields.new_decoder_architecture and (fields.num_ln_in_parallel_attn or 2) == 2
        if fields.parallel_attn:
            placement: Any = {"name": "parallel", "shared_norm": not two_norms}
        else:
            placement = "pre"
        base, fraction = rope(hf, where, scaled=True)
        if fraction != 1.0:
            raise self.refuse(where, "partial_rotary_factor", fraction, "Falcon rotates the whole head")
        scaling = rope_scaling(hf, where)
        d = fields.hidden_size
        dropout = {"attention": fields.attention_dropout or 0.0, "residual": fields.hidden_dropout or 0.0}
        return {
            "vocab_size": fields.vocab_size,
            "max_seq_len": fields.max_position_embeddings or 2048,
            "d_model": d,
            "n_layers": fields.num_hidden_layers,
            "n_heads": fields.num_attention_heads,
            "d_ff": fields.ffn_hidden_size or 4 * d,
            "dropout": dropout,
            "bias": fields.bias,
            "tie_embeddings": fields.tie_word_embeddings,
            "norm_eps": fields.layer_norm_epsilon or 1e-5,
            "attention": {"name": "sdpa", "n_kv_heads": kv},
            "norm": {"name": "layernorm", "shift": True},
            "placement": placement,
            "activation": activation(hf, where, "activation", "gelu"),
            "position": {**rotary_spec(base), **({"scaling": scaling} if scaling else {})},
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        kv, heads, bias = n_kv_heads(config), config.n_heads, config.bias
        placement = config.placement
        rules = [Rule.copy("tok_emb.weight", "word_embeddings.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"h.{i}."
            fused = f"{h}self_attention.query_key_value"
            # one layout for all three: per group [q_g.. | k_g | v_g] is [q | k | v] for one
            # key/value head (Falcon-7B) and [q_h | k_h | v_h] per head for one per head
            qkv = [grouped(f"{z}attn.qkv.{p}", f"{fused}.{p}", kv, heads // kv) for p in ("weight", "bias")[: 1 + bias]]
            if placement.name == "parallel" and not placement.options.get("shared_norm"):
                norms = [
                    *linear(z + "attn_residual.norm", h + "ln_attn", True),
                    *linear(z + "mlp_residual.norm", h + "ln_mlp", True),
                ]
            elif placement.name == "parallel":
                norms = linear(z + "attn_residual.norm", h + "input_layernorm", True)
            else:
                norms = [
                    *linear(z + "attn_residual.norm", h + "input_layernorm", True),
                    *linear(z + "mlp_residual.norm", h + "post_attention_layernorm", True),
                ]
            rules += [
                *norms,
                *qkv,
                *linear(z + "attn.out", h + "self_attention.dense", bias),
                *linear(z + "mlp.up", h + "mlp.dense_h_to_4h", bias),
                *linear(z + "mlp.down", h + "mlp.dense_4h_to_h", bias),
            ]
        return [*rules, *linear("final_norm", "ln_f", True), Rule.copy("head.weight", "lm_head.weight")]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture)
        blockers += wanted(config, self.architecture, {"norm": "layernorm", "mlp": "standard", "position": "rotary"})
        if config.placement.name not in ("parallel", "pre"):
            blockers.append(f"placement {config.placement.name!r} (Falcon is parallel, or pre-norm)")
        kv = n_kv_heads(config)
        if config.placement.name == "pre" and kv not in (1, config.n_heads):
            blockers.append(f"{kv} key/value heads in a pre-norm layout (Falcon's sequential layers have 1 or n_heads)")
        blockers += attention_blockers(config, self.architecture, None, config.bias, config.bias)
        blockers += rotary_blockers(config, self.architecture, scaling=True)
        if config.position.name == "rotary" and turned(config) != config.head_dim:
            blockers.append("partial rotary (Falcon rotates the whole head)")
        if config.norm.name == "layernorm" and config.norm.options.get("shift") is False:
            blockers.append("a LayerNorm without its shift (Falcon's norms have biases)")
        if config.norm.name == "layernorm" and config.norm.options.get("shift") is None and not config.bias:
            blockers.append("a LayerNorm without its shift (Falcon's norms have biases; set norm.shift=true)")
        if config.activation.name not in ACTIVATIONS_OUT:
            blockers.append(f"activation {config.activation.name!r}")
        if config.dropout.embedding:
            blockers.append("embedding dropout (Falcon has none)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        kv, parallel = n_kv_heads(config), config.placement.name == "parallel"
        shared = parallel and bool(config.placement.options.get("shared_norm"))
        new = parallel and (not shared or kv not in (1, config.n_heads))
        base = rotary_base(config)
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": config.n_heads,
            "num_kv_heads": kv,
            "num_ln_in_parallel_attn": (1 if shared else 2) if new else None,
            "new_decoder_architecture": new,
            "multi_query": kv == 1,
            "parallel_attn": parallel,
            "bias": config.bias,
            "alibi": False,
            "layer_norm_epsilon": config.norm_eps,
            "max_position_embeddings": config.max_seq_len,
            "rope_theta": base,
            "rope_parameters": {"rope_type": "default", "rope_theta": base, **scaling_to_hf(config)},
            "ffn_hidden_size": config.d_ff,
            "activation": ACTIVATIONS_OUT[config.activation.name],
            "tie_word_embeddings": config.tie_embeddings,
            "hidden_dropout": config.dropout.residual,
            "attention_dropout": config.dropout.attention,
            "bos_token_id": None,
            "eos_token_id": None,
        }


CONVERTERS: tuple[Converter, ...] = (Falcon(),)

__all__ = ["CONVERTERS", "Falcon"]
