"""The decoders of encoder-decoder families, read as causal LMs (``XForCausalLM``): OPT's layers, positions
numbered by slot (padding counted), the unused cross-attention weights skipped (transformers makes them anew).

- BART, PLBart, MVP, TrOCR: post-norm, a LayerNorm on the embeddings, learned positions from row 2;
- mBART (pre-norm, a final norm), Pegasus and Blenderbot (no embedding norm, a stored table from row 0), Marian.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from zoo.plugin import Count, F, Family, Fraction, W, linear
from zoo_modern.families.gpt2_like import OPT, XGLM
from zoo_modern.families.readers import ACTIVATIONS, IGNORED, refuse_unless

CROSS = tuple(f".encoder_attn{p}.{w}" for p in (".q_proj", ".k_proj", ".v_proj", ".out_proj", "_layer_norm") for w in ("weight", "bias"))  # fmt: skip
ENCODER_ONLY = "encoder_layers encoder_ffn_dim encoder_attention_heads encoder_layerdrop classifier_dropout"
# keys of released fairseq-era configs that transformers 5 reads nowhere (each design is fixed by its class)
ENCODER_ONLY += " normalize_before add_final_layer_norm static_position_embeddings normalize_embedding add_bias_logits"
NO_EMBED_NORM = {"embed_norm.weight": None, "embed_norm.bias": None}
BY_SLOT = {"name": "learned", "count_padding": True}  # positions numbered by slot, padding included


def defaults(family: Family, **values: Any) -> dict[str, F]:
    """``family``'s fields with other transformers defaults."""
    return {name: dataclasses.replace(family.fields[name], default=value) for name, value in values.items()}


# BART extends OPT: BART's field names, post-norm only, a LayerNorm on the embeddings, optional sqrt(d_model)
# embeddings, positions from row 2 by slot, dropout on the embeddings too.
BART = OPT.derive(
    "BartForCausalLM",
    model_type="bart",
    description="BART's decoder: post-norm, embedding LayerNorm, learned positions from row 2",
    fresh=("fields",),
    fields={"vocab_size": F("vocab_size", 50265, Count), "max_position_embeddings": F("max_seq_len", 1024, Count)}
    | {"d_model": F("d_model", 1024, Count), "decoder_ffn_dim": F("d_ff", 4096, Count)}
    | {"decoder_layers": F("n_layers", 12, Count), "decoder_attention_heads": F("n_heads", 16, Count)}
    | {"activation_function": F("activation", "gelu", str, {**ACTIVATIONS, "swish": "silu"})}
    | {"dropout": F("dropout.residual", 0.1, Fraction), "attention_dropout": F("dropout.attention", 0.0, Fraction)}
    | {"activation_dropout": F.must(0.0, "a dropout inside the MLP is not modelled"), "decoder_layerdrop": IGNORED}
    | {"scale_embedding": F("embedding_scale", False, bool, {True: "sqrt_d_model", False: "none"})}
    | {"tie_word_embeddings": F("tie_embeddings", True, bool), "forced_eos_token_id": IGNORED}  # a generation setting
    | dict.fromkeys(ENCODER_ONLY.split(), IGNORED),
    zoo={"placement": "post", "embedding_norm": True, "position": {**BY_SLOT, "offset": 2}},
    accepts={"embedding_scale": ("sqrt_d_model",)},
    top=linear({"embed_norm": "layernorm_embedding"}),
    skip=CROSS,
    read=XGLM.read,
    blockers=XGLM.blockers[-1:],
)
# PLBart extends BART: other defaults.
PLBART = BART.derive(
    "PLBartForCausalLM",
    model_type="plbart",
    description="PLBart's decoder: BART's",
    fields=defaults(BART, vocab_size=50005, d_model=768, decoder_ffn_dim=3072, decoder_layers=6)
    | defaults(BART, decoder_attention_heads=12, attention_dropout=0.1, scale_embedding=True),
)
# MVP extends BART: prompts (``use_prompt``) refused.
MVP = BART.derive(
    "MvpForCausalLM",
    model_type="mvp",
    description="MVP's decoder: BART's, without its prompts",
    fields=defaults(BART, vocab_size=50267)
    | {"use_prompt": F.must(False, "MVP's prompt modules are not modelled"), "prompt_length": IGNORED}
    | {"prompt_mid_dim": IGNORED},
)
# TrOCR extends BART: the embedding LayerNorm optional, learned positions only, the head named output_projection.
TROCR = BART.derive(
    "TrOCRForCausalLM",
    model_type="trocr",
    description="TrOCR's decoder: BART's, the embedding LayerNorm optional",
    head="output_projection.weight",
    top_level=("output_projection.weight",),
    fields=defaults(BART, max_position_embeddings=512)
    | {"layernorm_embedding": F("embedding_norm", True, bool), "cross_attention_hidden_size": IGNORED}
    | {"use_learned_position_embeddings": F.must(True, "its sinusoids (fairseq's, skipping padding) are not modelled")},
    accepts={"embedding_norm": (False,)},
    top={f"embed_norm.{p}": W(f"layernorm_embedding.{p}", when=lambda c: c.embedding_norm) for p in ("weight", "bias")}
    | {"head.weight": "output_projection.weight"},
)
# mBART extends BART: pre-norm, a final LayerNorm.
MBART = BART.derive(
    "MBartForCausalLM",
    model_type="mbart",
    description="mBART's decoder: pre-norm, embedding and final LayerNorms, learned positions from row 2",
    zoo={"placement": "pre"},
    accepts={"final_norm": ()},
    top=linear({"final_norm": "layer_norm"}),
)
# Pegasus extends mBART: no embedding norm, the sinusoids stored as a table from row 0.
PEGASUS = MBART.derive(
    "PegasusForCausalLM",
    model_type="pegasus",
    description="Pegasus's decoder: pre-norm, a final LayerNorm, a stored sinusoid table",
    zoo={"embedding_norm": False, "position": BY_SLOT},
    top=NO_EMBED_NORM,
)
# Blenderbot extends Pegasus: other defaults (its table is learned).
BLENDERBOT = PEGASUS.derive(
    "BlenderbotForCausalLM",
    model_type="blenderbot",
    description="Blenderbot's decoder: pre-norm, a final LayerNorm, learned positions",
    fields=defaults(BART, vocab_size=8008, max_position_embeddings=128, d_model=2560, decoder_ffn_dim=10240)
    | defaults(BART, decoder_layers=24, decoder_attention_heads=32)
    | {"encoder_no_repeat_ngram_size": IGNORED},
)


def one_vocabulary(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    size = hf.get("decoder_vocab_size")  # Marian's embedding rows; its head has vocab_size
    refuse_unless(size in (None, fields["vocab_size"]), where, "decoder_vocab_size", size, "it must be vocab_size")
    return fields


# Marian extends BART: no embedding norm, the sinusoids stored as a table from row 0, one vocabulary.
MARIAN = BART.derive(
    "MarianForCausalLM",
    model_type="marian",
    description="Marian's decoder: post-norm, a stored sinusoid table",
    fields=defaults(BART, vocab_size=58101)
    | {"share_encoder_decoder_embeddings": IGNORED}
    | {"decoder_vocab_size": F("", None, Count, out=lambda c: c.vocab_size)},
    zoo={"embedding_norm": False, "position": BY_SLOT},
    top=NO_EMBED_NORM,
    read=(one_vocabulary,),
)

FAMILIES = (BART, PLBART, MVP, TROCR, MBART, PEGASUS, BLENDERBOT, MARIAN)
