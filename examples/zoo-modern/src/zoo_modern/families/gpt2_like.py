"""GPT-2's lineage: learned positions or ALiBi, LayerNorm with biases, a GELU (or ReLU) MLP.

- GPT-Neo: GPT-2 with separate q/k/v (no biases), unscaled scores, local and global layers.
- OPT: GPT-2 with separate q/k/v, positions from row 2 of their table, pre- or post-norm.
- GPTBigCode (SantaCoder, StarCoder 1): GPT-2 with ``nn.Linear`` weights and multi-query attention.
- BLOOM: GPT-2's parts with ALiBi, a LayerNorm on the embeddings and per-head fused q/k/v.
- MPT: ALiBi, LayerNorm without its shift, no biases, a fused [q | k | v] ``Wqkv``.
- XGLM (OPT's layers) and CTRL (GPT-2's): sinusoids in halves, no stored table, embeddings scaled by sqrt(d_model).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.plugin import REQUIRED, Count, Epsilon, F, Fraction, ModelConfig, Rule, W, builtin_family, linear
from zoo_modern.families.readers import (
    ACTIVATIONS,
    IGNORED,
    fused_per_head,
    layer_windows,
    per_head,
    refuse_unless,
    window_blockers,
    window_per_layer,
    with_windows,
)

GPT2 = builtin_family("hf_gpt2.GPT2")
#: GPT-2's fields the relatives below do not have.
GPT2_ONLY = "n_ctx reorder_and_upcast_attn scale_attn_by_inverse_layer_idx is_encoder_decoder pruned_heads".split()
GPT2_ONLY += [f"summary_{k}" for k in ("activation", "first_dropout", "proj_to_labels", "type", "use_proj")]
NOT_GPT2: dict[str, Any] = dict.fromkeys(GPT2_ONLY)
LINEAR = {"attn_residual.norm": "ln_1", "mlp_residual.norm": "ln_2", "mlp.up": "mlp.c_fc", "mlp.down": "mlp.c_proj"}


def neo_windows(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """GPT-Neo's local layers (``attention_types``: [[kinds, repeats], ...]) windowed."""
    layers = fields["n_layers"]
    types = hf.get("attention_types") or [[["global", "local"], layers // 2]]
    kinds: list[str] = []
    try:
        for group, repeats in types:
            kinds += list(group) * int(repeats)
    except (TypeError, ValueError):
        kinds = ["?"]  # refused below
    ok = len(kinds) == layers and not set(kinds) - {"global", "local"}
    refuse_unless(ok, where, "attention_types", types, f"it must expand to num_layers={layers} of 'global'/'local'")
    types = ["sliding_attention" if kind == "local" else "full_attention" for kind in kinds]
    window = hf.get("window_size") or 256
    return with_windows(fields, layer_windows({"layer_types": types}, layers, fields["max_seq_len"], window))


def neo_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    windows = window_per_layer(config)
    kinds = [[["local" if w is not None else "global"], 1] for w in windows]
    return {**hf, "attention_types": kinds, "window_size": next((w for w in windows if w is not None), 256)}


GPT_NEO = GPT2.derive(
    "GPTNeoForCausalLM",
    model_type="gpt_neo",
    description="GPT-Neo: GPT-2's parts, unscaled scores, global and local (sliding-window) layers",
    fresh=("fields", "layer", "read", "write", "blockers"),
    fields={
        "vocab_size": F("vocab_size", REQUIRED, Count),
        "hidden_size": F("d_model", REQUIRED, Count),
        "num_heads": F("n_heads", REQUIRED, Count),
        "num_layers": F("n_layers", REQUIRED, Count),
        "intermediate_size": F("d_ff", None, Count),
        "max_position_embeddings": F("max_seq_len", 2048, Count),
        "window_size": F("", 256, Count),
        "attention_types": F("", None, list[Any]),
        "attention_layers": IGNORED,  # attention_types, expanded
        "classifier_dropout": IGNORED,
        "activation_function": F("activation", "gelu_new", str, ACTIVATIONS),
        "layer_norm_epsilon": F("norm_eps", 1e-5, Epsilon),
        "resid_dropout": F("dropout.residual", 0.0, Fraction),
        "embed_dropout": F("dropout.embedding", 0.0, Fraction),
        "attention_dropout": F("dropout.attention", 0.0, Fraction),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
    },
    zoo={"attention": {"name": "sdpa", "qkv_bias": False, "out_bias": True, "scale": 1.0}},
    layer={
        **linear(LINEAR),
        "attn.qkv.weight": W("attn.attention.{}_proj.weight", "concat", "qkv"),
        **linear({"attn.out": "attn.attention.out_proj"}),
    },
    skip=(".attn.bias", ".attn.masked_bias", ".attention.bias", ".attention.masked_bias"),
    engine_features=frozenset({"window", "scale", "layer_pattern"}),
    read=(neo_windows,),
    write=(neo_write,),
    blockers=(window_blockers,),
)


def opt_layers(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """OPT's final norm (none after post-norm layers, or where ``_remove_final_layer_norm``)."""
    d, proj = fields["d_model"], hf.get("word_embed_proj_dim")
    refuse_unless(proj in (None, d), where, "word_embed_proj_dim", proj, f"project_in/out to {d} are not modelled")
    removed = hf.get("_remove_final_layer_norm", False)
    refuse_unless(isinstance(removed, bool), where, "_remove_final_layer_norm", removed, "it is true or false")
    return {**fields, "final_norm": fields["placement"] == "pre" and not removed}


def opt_blockers(config: ModelConfig, arch: str) -> list[str]:
    blockers = [f"norm_eps={config.norm_eps:g} (OPT's LayerNorms use 1e-5)"] if config.norm_eps != 1e-5 else []
    if config.placement.name == "post" and config.final_norm is not False:
        blockers.append("post-norm with a final norm (OPT's post-norm variant has none)")
    return blockers


OPT = GPT2.derive(
    "OPTForCausalLM",
    model_type="opt",
    description="OPT: learned positions (offset 2), separate q/k/v, pre- or post-norm LayerNorm, biases",
    fresh=("fields", "layer", "top", "read", "write", "blockers"),
    prefix="model.decoder.",
    embedding="embed_tokens.weight",
    fields={
        "vocab_size": F("vocab_size", 50272, Count),
        "hidden_size": F("d_model", 768, Count),
        "num_hidden_layers": F("n_layers", 12, Count),
        "num_attention_heads": F("n_heads", 12, Count),
        "ffn_dim": F("d_ff", 3072, Count),
        "max_position_embeddings": F("max_seq_len", 2048, Count),
        "do_layer_norm_before": F("placement", True, bool, {True: "pre", False: "post"}),
        "_remove_final_layer_norm": F("", False, out=lambda c: c.placement.name == "pre" and c.final_norm is False),
        "word_embed_proj_dim": F("", None, Count, out=lambda c: c.d_model),
        "dropout": F("dropout.residual", 0.1, Fraction),
        "attention_dropout": F("dropout.attention", 0.0, Fraction),
        "activation_function": F("activation", "relu", str, ACTIVATIONS),
        "enable_bias": F.must(True, "OPT without biases is not modelled", bool),
        "layer_norm_elementwise_affine": F.must(True, "OPT without norm scales is not modelled", bool),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        "layerdrop": IGNORED,  # training only
    },
    zoo={
        "placement": None,
        "norm_eps": 1e-5,
        "position": {"name": "learned", "offset": 2},
        "dropout": {"embedding": 0.0},
    },
    accepts={"final_norm": (False,)},
    layer_prefix="layers.{}.",
    layer={
        **linear({"attn_residual.norm": "self_attn_layer_norm", "attn.out": "self_attn.out_proj"}),
        **{f"attn.qkv.{p}": W(f"self_attn.{{}}_proj.{p}", "concat", "qkv") for p in ("weight", "bias")},
        **linear({"mlp_residual.norm": "final_layer_norm", "mlp.up": "fc1", "mlp.down": "fc2"}),
    },
    top={"tok_emb.weight": "embed_tokens.weight", "position.table.weight": "embed_positions.weight"}
    | {
        f"final_norm.{p}": W(f"final_layer_norm.{p}", when=lambda c: c.final_norm is not False)
        for p in ("weight", "bias")
    }
    | {"head.weight": "lm_head.weight"},
    skip=(),
    read=(opt_layers,),
    blockers=(opt_blockers,),
)


def multi_query(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    kv = 1 if hf.get("multi_query", True) else fields["n_heads"]
    return {**fields, "attention": {"name": "sdpa", "n_kv_heads": kv}}


def bigcode_qkv(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Any:
    """c_attn: [q | k | v] with one key/value head (the zoo's rows), else fused per head."""
    one = config.attention.options.get("n_kv_heads") == 1
    return Rule.copy(zoo, names[0]) if one else per_head(zoo, names[0], config.n_heads)


def bigcode_blockers(config: ModelConfig, arch: str) -> list[str]:
    kv = config.attention.options.get("n_kv_heads") or config.n_heads
    return [] if kv in (1, config.n_heads) else [f"{kv} key/value heads (GPTBigCode has 1 or n_heads)"]


GPT_BIGCODE = GPT2.derive(
    "GPTBigCodeForCausalLM",
    model_type="gpt_bigcode",
    description="GPTBigCode (SantaCoder, StarCoder): GPT-2's design, multi-query attention in a fused c_attn",
    fresh=("layer", "blockers"),
    fields={
        **NOT_GPT2,
        "activation_function": F("activation", "gelu_pytorch_tanh", str, ACTIVATIONS),
        "multi_query": F("", True, bool, out=lambda c: c.attention.options.get("n_kv_heads") == 1),
        "num_key_value_heads": IGNORED,  # multi_query, as a number
        "attention_softmax_in_fp32": IGNORED,  # the same in float32
        "scale_attention_softmax_in_fp32": IGNORED,
    },
    accepts={"n_kv_heads": ("1 or n_heads",)},
    layer={
        **linear({**LINEAR, "attn.out": "attn.c_proj"}),
        **{f"attn.qkv.{p}": W(f"attn.c_attn.{p}", make=bigcode_qkv) for p in ("weight", "bias")},
    },
    read=(multi_query,),
    blockers=(bigcode_blockers,),
)


def four_d_model(config: ModelConfig, name: str) -> list[str]:
    """A d_ff other than the 4 * d_model of BLOOM's and MPT's MLPs."""
    ok = config.d_ff in (None, 4 * config.d_model)
    return [] if ok else [f"d_ff={config.d_ff} ({name}'s MLP is 4 * d_model)"]


def bloom_blockers(config: ModelConfig, arch: str) -> list[str]:
    return four_d_model(config, "BLOOM") + (["embedding dropout (BLOOM has none)"] if config.dropout.embedding else [])


BLOOM = GPT2.derive(
    "BloomForCausalLM",
    model_type="bloom",
    description="BLOOM: ALiBi, embedding LayerNorm, fused per-head qkv, LayerNorm with biases",
    fresh=("fields", "layer", "top", "read", "write", "blockers"),
    embedding="word_embeddings.weight",
    fields={
        "vocab_size": F("vocab_size", 250880, Count),
        "hidden_size": F("d_model", 64, Count),
        "n_layer": F("n_layers", 2, Count),
        "n_head": F("n_heads", 8, Count),
        "layer_norm_epsilon": F("norm_eps", 1e-5, Epsilon),
        "apply_residual_connection_post_layernorm": F.must(False, "a residual taken after the norm is not modelled"),
        "hidden_dropout": F("dropout.residual", 0.0, Fraction),
        "attention_dropout": F("dropout.attention", 0.0, Fraction),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        "seq_length": F("max_seq_len", 2048, Count),  # ALiBi sets no limit; BLOOM was trained on 2,048 tokens
        "max_position_embeddings": F("", None, Count),
        "pretraining_tp": IGNORED,  # the same sums, split
        "slow_but_exact": IGNORED,
    },
    zoo={"embedding_norm": True, "activation": "gelu_tanh", "position": {"name": "alibi", "max_bias": 8.0}},
    layer={
        **linear({"attn_residual.norm": "input_layernorm", "attn.out": "self_attention.dense"}),
        **fused_per_head("self_attention.query_key_value"),
        **linear({"mlp_residual.norm": "post_attention_layernorm"}),
        **linear({"mlp.up": "mlp.dense_h_to_4h", "mlp.down": "mlp.dense_4h_to_h"}),
    },
    top={"tok_emb.weight": "word_embeddings.weight", **linear({"embed_norm": "word_embeddings_layernorm"})}
    | linear({"final_norm": "ln_f"})
    | {"head.weight": "lm_head.weight"},
    skip=(),
    read=(
        lambda hf, fields, where: {**fields, "max_seq_len": hf.get("max_position_embeddings") or fields["max_seq_len"]},
    ),
    blockers=(bloom_blockers,),
)

# attn_config entries transformers' MPT reads or ignores, with the value it computes with.
MPT_ATTENTION: dict[str, Any] = {"attn_type": "multihead_attention", "clip_qkv": None, "softmax_scale": None}
MPT_ATTENTION |= {"prefix_lm": False, "qk_ln": False, "attn_uses_sequence_id": False, "alibi": True}
MPT_ATTENTION |= {"alibi_bias_max": 8}


def mpt_attention(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """``attn_config``: each entry transformers reads must hold its value; its dropout is MPT's one."""
    attention = hf.get("attn_config") or {}
    default_scale = (fields["d_model"] / fields["n_heads"]) ** -0.5
    for key, value in attention.items():
        ok = key not in MPT_ATTENTION or value == MPT_ATTENTION[key] or (key, value) == ("softmax_scale", default_scale)
        why = f"transformers' MPT computes with {MPT_ATTENTION.get(key)!r}"
        refuse_unless(ok, where, f"attn_config.{key}", value, why)
    pdrop = attention.get("attn_pdrop", 0.0)
    ok = isinstance(pdrop, (int, float)) and not isinstance(pdrop, bool) and 0 <= pdrop < 1
    refuse_unless(ok, where, "attn_config.attn_pdrop", pdrop, "a dropout is a number in [0, 1)")
    return {**fields, "d_ff": 4 * fields["d_model"], "dropout": {**fields["dropout"], "attention": float(pdrop), "residual": float(pdrop)}}  # fmt: skip


def mpt_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    pdrop = config.dropout.attention  # MptAttentionConfig types attn_pdrop as int: 0.0 is written 0
    return {**hf, "attn_config": {**MPT_ATTENTION, "attn_pdrop": int(pdrop) if pdrop == int(pdrop) else pdrop}}


def mpt_blockers(config: ModelConfig, arch: str) -> list[str]:
    one = ["attention and residual dropouts that differ (MPT has one, attn_pdrop)"]
    return four_d_model(config, "MPT") + (one if config.dropout.attention != config.dropout.residual else [])


MPT = GPT2.derive(
    "MptForCausalLM",
    model_type="mpt",
    description="MPT: ALiBi, LayerNorm without bias, no biases, fused [q | k | v] Wqkv",
    fresh=("fields", "layer", "top", "read", "write", "blockers"),
    fields={
        "d_model": F("d_model", 2048, Count),
        "n_heads": F("n_heads", 16, Count),
        "n_layers": F("n_layers", 24, Count),
        "expansion_ratio": F.must(4, "transformers' MPT has a 4 * d_model MLP", int),
        "max_seq_len": F("max_seq_len", 2048, Count),
        "vocab_size": F("vocab_size", 50368, Count),
        "resid_pdrop": F("", 0.0, Fraction, out=lambda c: c.dropout.residual),  # transformers' MPT uses attn_pdrop
        "emb_pdrop": F("dropout.embedding", 0.0, Fraction),
        "layer_norm_epsilon": F("norm_eps", 1e-5, Epsilon),
        "logit_scale": F.must(None, "scaled logits are not modelled"),
        "no_bias": F.must(True, "MPT with biases is not modelled", bool),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        "attn_config": F("", None, dict[str, Any]),
        **dict.fromkeys(("embedding_fraction", "init_device", "learned_pos_emb", "norm_type"), IGNORED),
        "max_position_embeddings": IGNORED,  # not an MPT field: transformers keeps it and reads max_seq_len
    },
    zoo={"bias": False, "norm": {"name": "layernorm", "shift": False}, "activation": "gelu"}
    | {"position": {"name": "alibi", "max_bias": 8.0}},
    layer_prefix="blocks.{}.",
    layer=linear({"attn_residual.norm": "norm_1", "attn.qkv": "attn.Wqkv", "attn.out": "attn.out_proj"}, False)
    | linear({"mlp_residual.norm": "norm_2", "mlp.up": "ffn.up_proj", "mlp.down": "ffn.down_proj"}, False),
    top={"tok_emb.weight": "wte.weight", "final_norm.weight": "norm_f.weight", "head.weight": "lm_head.weight"},
    skip=(),
    read=(mpt_attention,),
    write=(mpt_write,),
    blockers=(mpt_blockers,),
)

# BioGPT extends OPT: embeddings times sqrt(d_model), BERT's field names, a pre-norm design only.
BIOGPT = OPT.derive(
    "BioGptForCausalLM",
    model_type="biogpt",
    description="BioGPT: OPT's pre-norm layout with embeddings scaled by sqrt(d_model)",
    fresh=("fields", "read", "blockers"),
    prefix="biogpt.",
    head="output_projection.weight",
    top_level=("output_projection.weight",),
    fields={
        "vocab_size": F("vocab_size", 42384, Count),
        "hidden_size": F("d_model", 1024, Count),
        "num_hidden_layers": F("n_layers", 24, Count),
        "num_attention_heads": F("n_heads", 16, Count),
        "intermediate_size": F("d_ff", 4096, Count),
        "max_position_embeddings": F("max_seq_len", 1024, Count),
        "hidden_act": F("activation", "gelu", str, ACTIVATIONS),
        "hidden_dropout_prob": F("dropout.residual", 0.1, Fraction),
        "attention_probs_dropout_prob": F("dropout.attention", 0.1, Fraction),
        "activation_dropout": F.must(0.0, "a dropout inside the MLP is not modelled"),
        "layer_norm_eps": F("norm_eps", 1e-12, Epsilon),  # the layers'; the final norm's is 1e-5
        "scale_embedding": F("embedding_scale", True, bool, {True: "sqrt_d_model", False: "none"}),
        "tie_word_embeddings": F("tie_embeddings", True, bool),
        "layerdrop": IGNORED,  # training only
    },
    zoo={"placement": "pre", "norm_eps": None},
    accepts={"final_norm": (), "embedding_scale": ("sqrt_d_model",)},
    top=linear({"final_norm": "layer_norm"}) | {"head.weight": "output_projection.weight"},
)

#: GPT-2's fields that GPT (OpenAI's first) and CTRL do not have.
NOT_GPT = dict.fromkeys("n_inner activation_function scale_attn_weights add_cross_attention".split() + GPT2_ONLY[1:3])
# GPT (OpenAI's first) extends GPT-2: the norm after each residual sum (post-norm), no final norm, exact
# "gelu" meaning the tanh one, its own names for the embeddings.
OPENAI_GPT = GPT2.derive(
    "OpenAIGPTLMHeadModel",
    model_type="openai-gpt",
    description="GPT (OpenAI, 2018): GPT-2's parts with the norm after each residual sum and no final norm",
    embedding="tokens_embed.weight",
    fields={"vocab_size": F("vocab_size", 40478, Count), "n_positions": F("max_seq_len", 512, Count), "n_ctx": None}
    | NOT_GPT
    | {"afn": F("activation", "gelu", str, {"gelu": "gelu_tanh", "relu": "relu", "silu": "silu", "swish": "silu"})},
    zoo={"placement": "post"},
    top={"tok_emb.weight": "tokens_embed.weight", "position.table.weight": "positions_embed.weight"}
    | {"final_norm.weight": None, "final_norm.bias": None},
    fresh=("read", "write"),
    skip=(".attn.bias", "position_ids"),
)

# XGLM extends OPT: fairseq's sinusoids from row 2 (no stored table), sqrt(d_model) embeddings, pre-norm only,
# ``dropout`` on the embeddings too.
XGLM = OPT.derive(
    "XGLMForCausalLM",
    model_type="xglm",
    description="XGLM: OPT's pre-norm layers, fairseq's sinusoidal positions, embeddings scaled by sqrt(d_model)",
    fresh=("fields", "read"),
    prefix="model.",
    fields={"vocab_size": F("vocab_size", 256008, Count), "max_position_embeddings": F("max_seq_len", 2048, Count)}
    | {"d_model": F("d_model", 1024, Count), "ffn_dim": F("d_ff", 4096, Count), "num_layers": F("n_layers", 24, Count)}
    | {"attention_heads": F("n_heads", 16, Count), "activation_function": F("activation", "gelu", str, ACTIVATIONS)}
    | {"dropout": F("dropout.residual", 0.1, Fraction), "attention_dropout": F("dropout.attention", 0.1, Fraction)}
    | {"activation_dropout": F.must(0.0, "a dropout inside the MLP is not modelled"), "layerdrop": IGNORED}
    | {"scale_embedding": F("embedding_scale", True, bool, {True: "sqrt_d_model", False: "none"})}
    | {"add_cross_attention": F.must(False, "cross-attention layers (XGLM in an encoder-decoder) are not modelled")}
    | {"tie_word_embeddings": F("tie_embeddings", True, bool)},
    zoo={"placement": "pre", "position": {"name": "sinusoidal_halves", "offset": 2, "fairseq": True}},
    accepts={"final_norm": (), "embedding_scale": ("sqrt_d_model",)},
    top={"position.table.weight": None, **linear({"final_norm": "layer_norm"})},
    read=(lambda hf, f, where: {**f, "dropout": {**f["dropout"], "embedding": f["dropout"]["residual"]}},),
    blockers=(lambda c, arch: [f"two dropouts ({arch} has one)"] if c.dropout.embedding != c.dropout.residual else [],),
)

# CTRL extends GPT-2: sinusoids in halves (no stored table), sqrt(d_model) embeddings, separate q/k/v, ReLU, a
# biased head, layer norms of 1e-6.
CTRL = GPT2.derive(
    "CTRLLMHeadModel",
    model_type="ctrl",
    description="CTRL: GPT-2's pre-norm layout, sinusoidal positions in halves, sqrt(d_model) embeddings, a biased head",
    fields=NOT_GPT
    | {"n_embd": F("d_model", 1280, Count), "n_layer": F("n_layers", 48, Count), "dff": F("d_ff", 8192, Count)}
    | {"vocab_size": F("vocab_size", 246534, Count), "n_positions": F("max_seq_len", 256, Count)}
    | {"n_head": F("n_heads", 16, Count), "attn_pdrop": IGNORED}  # transformers' CTRL has no attention dropout
    | {"layer_norm_epsilon": F.must(1e-6, "CTRL's layer norms use 1e-6 (fixed)")},
    zoo={"position": "sinusoidal_halves", "embedding_scale": "sqrt_d_model", "head_bias": True, "activation": "relu"}
    | {"norm_eps": 1e-6},
    layer=linear({"attn_residual.norm": "layernorm1", "mlp_residual.norm": "layernorm2", "mlp.up": "ffn.0"})
    | linear({"mlp.down": "ffn.2", "attn.out": "multi_head_attention.dense"})
    | {f"attn.qkv.{p}": W(f"multi_head_attention.W{{}}.{p}", "concat", "qkv") for p in ("weight", "bias")},
    top={"tok_emb.weight": "w.weight", "position.table.weight": None, **linear({"final_norm": "layernorm"})}
    | linear({"head": "lm_head"}),
    top_level=("lm_head.weight", "lm_head.bias"),
    embedding="w.weight",
    fresh=("layer", "read", "write"),
    blockers=(lambda c, arch: [f"norm_eps={c.norm_eps:g} ({arch}'s is 1e-6)"] if c.norm_eps != 1e-6 else [],),
)

FAMILIES = (GPT_NEO, OPT, GPT_BIGCODE, BLOOM, MPT, BIOGPT, OPENAI_GPT, XGLM, CTRL)
