"""The decoders of encoder-decoder families read as causal LMs: BART, PLBart, MVP, TrOCR, mBART, Pegasus,
Blenderbot, Marian (transformers sizes their caches by the encoder's layers, so the encoder's match)."""

from __future__ import annotations

from family_cases import Family

DECODER = {"d_model": 32, "decoder_ffn_dim": 48, "decoder_layers": 2, "decoder_attention_heads": 4}
BART = {**DECODER, "encoder_layers": 2, "encoder_ffn_dim": 48, "encoder_attention_heads": 4}
BART |= {"forced_eos_token_id": None}  # else transformers' generate forces EOS at the last step
LEGACY = {"normalize_before": True, "add_final_layer_norm": True, "static_position_embeddings": True}
LEGACY |= {"normalize_embedding": True, "add_bias_logits": True}
SCALED, GELU_NEW, UNNORMED = (
    {"scale_embedding": True},
    {"activation_function": "gelu_new"},
    {"layernorm_embedding": False},
)

CASES = [
    Family("bart", "bart", "BartConfig", "BartForCausalLM", BART),
    Family("bart-scaled", "bart", "BartConfig", "BartForCausalLM", {**BART, **SCALED, **GELU_NEW}),
    Family("plbart", "plbart", "PLBartConfig", "PLBartForCausalLM", BART),  # sqrt(d_model) embeddings by default
    Family("mvp", "mvp", "MvpConfig", "MvpForCausalLM", BART),
    Family("trocr", "trocr", "TrOCRConfig", "TrOCRForCausalLM", DECODER),
    Family("trocr-unnormed", "trocr", "TrOCRConfig", "TrOCRForCausalLM", {**DECODER, **UNNORMED, **SCALED}),
    # with the keys released configs carry that transformers 5 reads nowhere (facebook/mbart-large-cc25's, Pegasus's)
    Family("mbart", "mbart", "MBartConfig", "MBartForCausalLM", {**BART, **LEGACY}),
    Family("pegasus", "pegasus", "PegasusConfig", "PegasusForCausalLM", {**BART, **SCALED, **LEGACY}),
    Family("blenderbot", "blenderbot", "BlenderbotConfig", "BlenderbotForCausalLM", BART),
    Family("marian", "marian", "MarianConfig", "MarianForCausalLM", {**BART, "activation_function": "swish"}),
]
