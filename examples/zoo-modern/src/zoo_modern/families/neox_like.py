"""GPT-NeoX's lineage: attention and MLP side by side, partial rotary, LayerNorm with biases.

- GPT-NeoX (Pythia): parallel residual (two norms), or pre-norm; q/k/v fused per head.
- GPT-J: NeoX with one norm for both branches, interleaved rotary on ``rotary_dim``,
  no attention biases, a biased output head.
- CodeGen: GPT-J with q, v and k fused in one ``qkv_proj``, split over four shards.
- Phi (1, 1.5, 2): GPT-J's layout with rotary in halves and biases everywhere.
- Falcon: NeoX's layout with multi-query or grouped attention fused per group, or sequential.
- GPT-NeoX Japanese: NeoX's sequential layout, no biases but the last layer's attention output.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Converter, Count, Epsilon, F, Family, Fraction, ModelConfig, Rule, W, linear
from zoo_modern.families.readers import (
    ACTIVATIONS,
    IGNORED,
    ROPE_FIELDS,
    SIZES,
    Rotary,
    fused_per_head,
    refuse_unless,
    turned,
    with_layer_changes,
)

ROPE = {k: ROPE_FIELDS[k] for k in ("rope_parameters", "rope_scaling")}
SHARED_NORM = {"name": "parallel", "shared_norm": True}


def two_norms(config: ModelConfig, arch: str) -> list[str]:
    """NeoX's parallel layout has a norm per branch (a shared one is GPT-J's)."""
    if config.placement.name == "parallel" and config.placement.options.get("shared_norm"):
        return [f"placement {config.placement.name!r} with one norm ({arch}'s branches have one each)"]
    return []


def exact_pct(config: ModelConfig, arch: str) -> list[str]:
    if config.position.name == "rotary" and int(config.head_dim * (turned(config) / config.head_dim)) != turned(config):
        return ["a rotary_dim that rotary_pct cannot express exactly"]
    return []


NEOX_ROTARY = Rotary("rotary_emb_base", "rotary_pct", partial=True)
NEOX = Family(
    architecture="GPTNeoXForCausalLM",
    model_type="gpt_neox",
    description="GPT-NeoX / Pythia: parallel residual, partial rotary, LayerNorm, fused per-head qkv",
    prefix="gpt_neox.",
    embedding="embed_in.weight",
    head="embed_out.weight",
    top_level=("embed_out.weight",),
    fields={
        **SIZES,
        "hidden_act": F("activation", "gelu", str, ACTIVATIONS),
        "max_position_embeddings": F("max_seq_len", 2048, Count),
        "layer_norm_eps": F("norm_eps", 1e-5, Epsilon),
        "rotary_pct": F("", None, Fraction),
        "rotary_emb_base": ROPE_FIELDS["rope_theta"],
        **ROPE,
        "attention_dropout": F("dropout.attention", 0.0, Fraction),
        "hidden_dropout": F("dropout.residual", 0.0, Fraction),
        "use_parallel_residual": F("placement", True, bool, {True: "parallel", False: "pre"}),
        "attention_bias": F.must(True, "the zoo's NeoX layout has attention biases", bool),
        "tie_word_embeddings": F("tie_embeddings", False, bool),
        "classifier_dropout": IGNORED,
    },
    zoo={"bias": True, "attention": {"name": "sdpa", "qkv_bias": True, "out_bias": True}, "norm": "layernorm"}
    | {"position": "rotary", "mlp": "standard", "init": "gpt2"},
    accepts={"attention": ("eager",)},
    layer={
        **linear({"attn_residual.norm": "input_layernorm", "attn.out": "attention.dense"}),
        **fused_per_head("attention.query_key_value"),
        **linear({"mlp_residual.norm": "post_attention_layernorm"}),
        **linear({"mlp.up": "mlp.dense_h_to_4h", "mlp.down": "mlp.dense_4h_to_h"}),
    },
    top={
        "tok_emb.weight": "embed_in.weight",
        **linear({"final_norm": "final_layer_norm"}),
        "head.weight": "embed_out.weight",
    },
    skip=("rotary_emb.inv_freq", "attention.bias", "attention.masked_bias"),
    read=(NEOX_ROTARY.read,),
    write=(NEOX_ROTARY.write,),
    blockers=(NEOX_ROTARY.blockers, two_norms, exact_pct),
)


INTERLEAVED = {"name": "rotary", "base": 10000.0, "interleaved": True}


def gptj_rotary(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    head_dim, dims = fields["d_model"] // fields["n_heads"], hf.get("rotary_dim") or 64
    refuse_unless(dims % 2 == 0 and dims <= head_dim, where, "rotary_dim", dims, f"the zoo turns an even number <= head_dim={head_dim}")  # fmt: skip
    return {**fields, "position": INTERLEAVED | ({"rotary_dim": dims} if dims != head_dim else {})}


GPTJ = NEOX.derive(
    "GPTJForCausalLM",
    model_type="gptj",
    description="GPT-J: parallel attention+MLP (one norm), interleaved partial rotary, biased MLP and head",
    fresh=("fields", "layer", "top", "read", "write", "blockers"),
    prefix="transformer.",
    embedding="wte.weight",
    head="lm_head.weight",
    top_level=("lm_head.weight", "lm_head.bias"),
    fields={"vocab_size": F("vocab_size", 50400, Count), "n_positions": F("max_seq_len", 2048, Count)}
    | {"n_embd": F("d_model", 4096, Count), "n_layer": F("n_layers", 28, Count), "n_head": F("n_heads", 16, Count)}
    | {"rotary_dim": F("", 64, Count, out=turned), "n_inner": F("d_ff", None, Count)}
    | {"activation_function": F("activation", "gelu_new", str, ACTIVATIONS)}
    | {"resid_pdrop": F("dropout.residual", 0.0, Fraction), "embd_pdrop": F("dropout.embedding", 0.0, Fraction)}
    | {"attn_pdrop": F("dropout.attention", 0.0, Fraction), "layer_norm_epsilon": F("norm_eps", 1e-5, Epsilon)}
    | {"tie_word_embeddings": F("tie_embeddings", False, bool)},
    zoo={"head_bias": True, "placement": SHARED_NORM, "position": INTERLEAVED}
    | {"attention": {"name": "sdpa", "qkv_bias": False, "out_bias": False}},
    layer_prefix="h.{}.",
    layer={
        **linear({"attn_residual.norm": "ln_1"}),
        "attn.qkv.weight": W("attn.{}_proj.weight", "concat", "qkv"),
        **linear({"attn.out": "attn.out_proj"}, bias=False),
        **linear({"mlp.up": "mlp.fc_in", "mlp.down": "mlp.fc_out"}),
    },
    top={"tok_emb.weight": "wte.weight", **linear({"final_norm": "ln_f", "head": "lm_head"})},
    skip=("attn.bias", "attn.masked_bias", "embed_positions"),
    read=(gptj_rotary,),
    blockers=(Rotary(interleaved=True, partial=True).blockers,),
)

SHARDS = 4  # CodeGen's fused projection interleaves the 4 model-parallel shards it was trained with


def codegen_qkv(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The zoo's [q | k | v] from CodeGen's ``qkv_proj``: rows per shard [q_s | v_s | k_s]."""

    def load(ts: Sequence[Tensor]) -> Tensor:
        q, v, k = ts[0].reshape(SHARDS, 3, -1, ts[0].shape[-1]).unbind(1)
        return torch.cat([t.reshape(-1, ts[0].shape[-1]) for t in (q, k, v)])

    def save(t: Tensor) -> list[Tensor]:
        q, k, v = (part.reshape(SHARDS, -1, t.shape[-1]) for part in t.chunk(3))
        return [torch.stack([q, v, k], dim=1).reshape(t.shape)]

    return Rule(zoo, names, load, save)


# CodeGen extends GPT-J: q, v and k in one qkv_proj, its rows interleaved over four shards.
CODEGEN = GPTJ.derive(
    "CodeGenForCausalLM",
    model_type="codegen",
    description="CodeGen: GPT-J's layout with q, v and k fused in one qkv_proj over four shards",
    fields={"n_ctx": IGNORED},  # transformers reads n_positions; n_ctx changes nothing
    layer={"attn.qkv.weight": W("attn.qkv_proj.weight", make=codegen_qkv)},
    skip=("attn.causal_mask", "embed_positions"),
)

PHI_ROTARY = Rotary(share=0.5, partial=True)
PHI = GPTJ.derive(
    "PhiForCausalLM",
    model_type="phi",
    description="Phi-1/1.5/2: parallel attention+MLP (one norm), partial rotary, biases everywhere",
    fresh=("fields", "layer", "top", "read", "blockers"),
    prefix="model.",
    embedding="embed_tokens.weight",
    fields={"vocab_size": F("vocab_size", 51200, Count), "hidden_size": F("d_model", 2048, Count), **ROPE_FIELDS}
    | {"intermediate_size": F("d_ff", 8192, Count), "num_hidden_layers": F("n_layers", 24, Count)}
    | {"num_attention_heads": F("n_heads", 32, Count), "num_key_value_heads": F("attention.n_kv_heads", None, Count)}
    | {"resid_pdrop": F("dropout.residual", 0.0, Fraction), "embd_pdrop": F("dropout.embedding", 0.0, Fraction)}
    | {"max_position_embeddings": F("max_seq_len", 2048, Count)}
    | {"tie_word_embeddings": F("tie_embeddings", False, bool)}
    | {"hidden_act": F("activation", "gelu_new", str, ACTIVATIONS), "layer_norm_eps": F("norm_eps", 1e-5, Epsilon)}
    | {"attention_dropout": F("dropout.attention", 0.0, Fraction)}
    | {"qk_layernorm": F.must(False, "LayerNorms on queries and keys are not modelled for Phi", bool)},
    zoo={"attention": {"name": "sdpa", "qkv_bias": True, "out_bias": True}, "position": "rotary"},
    layer_prefix="layers.{}.",
    layer={
        **linear({"attn_residual.norm": "input_layernorm"}),
        **{f"attn.qkv.{p}": W(f"self_attn.{{}}_proj.{p}", "concat", "qkv") for p in ("weight", "bias")},
        **linear({"attn.out": "self_attn.dense", "mlp.up": "mlp.fc1", "mlp.down": "mlp.fc2"}),
    },
    top={"tok_emb.weight": "embed_tokens.weight", **linear({"final_norm": "final_layernorm", "head": "lm_head"})},
    skip=("rotary_emb.inv_freq",),
    read=(PHI_ROTARY.read,),
    write=(PHI_ROTARY.write,),
    blockers=(PHI_ROTARY.blockers,),
)


def grouped_to_zoo(t: Tensor, kv: int, group: int) -> Tensor:
    """Falcon's rows per key/value group [q_g1 .. q_gG | k_g | v_g] -> the zoo's [q | k | v]."""
    rest = t.shape[1:]
    g = t.reshape(kv, group + 2, -1, *rest)  # (kv, G + 2, hd, ...)
    q, k, v = g[:, :group], g[:, group], g[:, group + 1]
    return torch.cat([x.reshape(-1, *rest) for x in (q, k, v)])


def zoo_to_grouped(t: Tensor, kv: int, group: int) -> Tensor:
    """The zoo's [q | k | v] rows -> Falcon's [q_g1 .. q_gG | k_g | v_g] per key/value group."""
    rest, hd = t.shape[1:], t.shape[0] // (kv * (group + 2))
    q, k, v = torch.split(t, [kv * group * hd, kv * hd, kv * hd])
    parts = [q.reshape(kv, group, hd, *rest), k.reshape(kv, 1, hd, *rest), v.reshape(kv, 1, hd, *rest)]
    return torch.cat(parts, dim=1).reshape(t.shape)


def grouped(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """One layout for Falcon's three: per group [q_g.. | k_g | v_g] is [q | k | v] for one
    key/value head (Falcon-7B) and [q_h | k_h | v_h] for one per head."""
    kv = Converter.attention_layout(config)[0]
    group = config.n_heads // kv
    return Rule(zoo, names, lambda ts: grouped_to_zoo(ts[0], kv, group), lambda t: [zoo_to_grouped(t, kv, group)])


def falcon_layout(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Key/value heads and norms of the three layouts (Falcon-7B's, the new decoder, sequential)."""
    new, parallel, heads = hf.get("new_decoder_architecture", False), hf.get("parallel_attn", True), fields["n_heads"]
    refuse_unless(not new or parallel, where, "parallel_attn", False, "the new decoder architecture is parallel in transformers")  # fmt: skip
    kv_field = hf.get("num_kv_heads")
    if not new and not hf.get("multi_query", True):
        refuse_unless(kv_field in (None, heads), where, "num_kv_heads", kv_field, "the old layout has one per head")
    kv = (kv_field or heads) if new else 1 if hf.get("multi_query", True) else heads
    stated = hf.get("num_key_value_heads")  # transformers 5 writes the heads its layout gives
    refuse_unless(stated in (None, kv), where, "num_key_value_heads", stated, f"this layout gives {kv} (num_kv_heads, multi_query)")  # fmt: skip
    two = new and (hf.get("num_ln_in_parallel_attn") or 2) == 2
    placement = {"name": "parallel", "shared_norm": not two} if parallel else "pre"
    return {**fields, "attention": {"name": "sdpa", "n_kv_heads": kv}, "placement": placement, "d_ff": fields["d_ff"] or 4 * fields["d_model"]}  # fmt: skip


def falcon_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    kv, parallel = Converter.attention_layout(config)[0], config.placement.name == "parallel"
    shared = parallel and bool(config.placement.options.get("shared_norm"))
    new = parallel and (not shared or kv not in (1, config.n_heads))
    norms = (1 if shared else 2) if new else None
    layout = {"new_decoder_architecture": new, "multi_query": kv == 1, "parallel_attn": parallel}
    return {**hf, "num_kv_heads": kv, "num_key_value_heads": kv, "num_ln_in_parallel_attn": norms, **layout}


def falcon_blockers(config: ModelConfig, arch: str) -> list[str]:
    (kv, qkv_bias, out_bias), blockers = Converter.attention_layout(config), []
    if config.placement.name not in ("parallel", "pre"):
        blockers.append(f"placement {config.placement.name!r} (Falcon is parallel, or pre-norm)")
    if config.placement.name == "pre" and kv not in (1, config.n_heads):
        blockers.append(f"{kv} key/value heads in a pre-norm layout (Falcon's sequential layers have 1 or n_heads)")
    if (qkv_bias, out_bias) != (config.bias, config.bias):
        blockers.append(f"attention biases q/k/v={qkv_bias}, out={out_bias} (Falcon: {config.bias}, {config.bias})")
    if config.norm.name == "layernorm" and config.norm.options.get("shift") is not True:
        blockers.append("a LayerNorm without its shift (Falcon's norms have biases; set norm.shift=true)")
    return blockers + (["embedding dropout (Falcon has none)"] if config.dropout.embedding else [])


def falcon_norms(config: ModelConfig) -> dict[str, str]:
    if config.placement.name != "parallel":
        return {"attn_residual.norm": "input_layernorm", "mlp_residual.norm": "post_attention_layernorm"}
    if config.placement.options.get("shared_norm"):
        return {"attn_residual.norm": "input_layernorm"}
    return {"attn_residual.norm": "ln_attn", "mlp_residual.norm": "ln_mlp"}


def falcon_norm(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule | None:
    """``attn_residual.norm.weight`` -> the stored norm of this layout (none: the shared one)."""
    module, _, param = zoo.rpartition(".")
    layer, _, local = module.partition(".")[2].partition(".")
    stored = falcon_norms(config).get(local)
    return None if stored is None else Rule.copy(zoo, f"{names[0]}{stored}.{param}")


FALCON_ROTARY = Rotary(scaled=True)
FALCON_NORMS = [f"{n}.{p}" for n in ("attn_residual.norm", "mlp_residual.norm") for p in ("weight", "bias")]
FALCON = NEOX.derive(
    "FalconForCausalLM",
    model_type="falcon",
    description="Falcon: parallel attention+MLP, multi-query or grouped attention in a fused qkv, rotary",
    fresh=("fields", "layer", "top", "read", "write", "blockers"),
    prefix="transformer.",
    embedding="word_embeddings.weight",
    head="lm_head.weight",
    top_level=("lm_head.weight",),
    fields={"vocab_size": F("vocab_size", 65024, Count), "hidden_size": F("d_model", 4544, Count), **ROPE}
    | {"num_hidden_layers": F("n_layers", 32, Count), "num_attention_heads": F("n_heads", 71, Count)}
    | {"layer_norm_epsilon": F("norm_eps", 1e-5, Epsilon), "hidden_dropout": F("dropout.residual", 0.0, Fraction)}
    | {"attention_dropout": F("dropout.attention", 0.0, Fraction), "rope_theta": ROPE_FIELDS["rope_theta"]}
    | dict.fromkeys(("num_ln_in_parallel_attn", "num_kv_heads", "num_key_value_heads"), F("", None, Count))
    | {"alibi": F.must(False, "Falcon's ALiBi (biases scaled with the scores) is not modelled", bool)}
    | {"new_decoder_architecture": F("", False, bool), "multi_query": F("", True, bool), "bias": F("bias", False, bool)}
    | {"parallel_attn": F("", True, bool), "max_position_embeddings": F("max_seq_len", 2048, Count)}
    | {"ffn_hidden_size": F("d_ff", None, Count), "activation": F("activation", "gelu", str, ACTIVATIONS)}
    | {"tie_word_embeddings": F("tie_embeddings", True, bool)},
    zoo={"bias": None, "attention": "sdpa", "norm": {"name": "layernorm", "shift": True}, "placement": None},
    accepts={"n_kv_heads": ("any",)},
    layer_prefix="h.{}.",
    layer={
        **dict.fromkeys(FALCON_NORMS, W("", make=falcon_norm)),
        "attn.qkv.weight": W("self_attention.query_key_value.weight", make=grouped),
        "attn.qkv.bias": W("self_attention.query_key_value.bias", make=grouped, when=lambda c: c.bias),
        **linear({"attn.out": "self_attention.dense", "mlp.up": "mlp.dense_h_to_4h"}, bias=lambda c: c.bias),
        **linear({"mlp.down": "mlp.dense_4h_to_h"}, bias=lambda c: c.bias),
    },
    top={"tok_emb.weight": "word_embeddings.weight", **linear({"final_norm": "ln_f"}), "head.weight": "lm_head.weight"},
    skip=(),
    read=(falcon_layout, FALCON_ROTARY.read),
    write=(falcon_write, FALCON_ROTARY.write),
    blockers=(FALCON_ROTARY.blockers, falcon_blockers),
)


def last_bias(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """d_ff = ``intermediate_multiple_size`` * hidden; an output bias on the last layer's attention alone."""
    fields = {**fields, "d_ff": fields["d_model"] * int(hf.get("intermediate_multiple_size") or 4)}
    return with_layer_changes(fields, [{}] * (fields["n_layers"] - 1) + [{"attention": {"out_bias": True}}])


def last_bias_blockers(config: ModelConfig, arch: str) -> list[str]:
    want = last_bias({}, {"n_layers": config.n_layers, "d_model": 0}, "")["layer_pattern"]
    wrong = [f"d_ff={config.d_ff} ({arch}'s is a multiple of d_model)"] if (config.d_ff or 0) % config.d_model else []
    if [entry.changes() for entry in config.layer_pattern] != want:
        wrong.append(f"a layer pattern ({arch}'s layers differ in the last one's output bias alone)")
    return wrong


# GPT-NeoX Japanese extends GPT-NeoX: sequential, no biases but the norms' and the last layer's attention output
# (``dense_bias``), d_ff a multiple of hidden_size, a tied head.
NEOX_JAPANESE = NEOX.derive(
    "GPTNeoXJapaneseForCausalLM",
    model_type="gpt_neox_japanese",
    description="GPT-NeoX Japanese: NeoX's fused qkv and partial rotary, sequential, one bias on the last layer's output",
    prefix="gpt_neox_japanese.",
    fields={"intermediate_size": None, "use_parallel_residual": None, "attention_bias": None}
    | {"tie_word_embeddings": F("tie_embeddings", True, bool), "classifier_dropout": None}
    | {"attention_dropout": F("dropout.attention", 0.1, Fraction)}
    | {"intermediate_multiple_size": F("", 4, Count, out=lambda c: (c.d_ff or 4 * c.d_model) // c.d_model)},
    zoo={"bias": False, "norm": {"name": "layernorm", "shift": True}, "placement": "pre"}
    | {"attention": {"name": "sdpa", "qkv_bias": False, "out_bias": False}},
    layer={"attn.qkv.bias": None, "mlp.up.bias": None, "mlp.down.bias": None}
    | {"attn.out.bias": W("attention.dense_bias", when=lambda c: Converter.attention_layout(c)[2])},
    engine_features=frozenset({"layer_pattern"}),
    read=(last_bias,),
    blockers=(last_bias_blockers,),
)

FAMILIES = (NEOX, GPTJ, CODEGEN, PHI, FALCON, NEOX_JAPANESE)
