"""The families of 2025-2026 that extend a Llama-like table: BitNet (unquantised), Cohere Compass (text),
DiffLlama; EXAONE-MoE's kin AFMoE."""

from __future__ import annotations

from family_cases import Family

KINDS = ("sliding_attention", "full_attention")
SIZES = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}

CASES = [
    # the sub-norms before o_proj and down_proj, a ReLU-squared gate
    Family("bitnet", "bitnet", "BitNetConfig", "BitNetForCausalLM", {**SIZES, "num_key_value_heads": 2}),
]
# Cohere 2's layout of layers: sliding with rotary x 3, then full; a rotary table per layer type
COMPASS = {**SIZES, "num_hidden_layers": 4, "num_key_value_heads": 2, "sliding_window": 5}
COMPASS["layer_types"] = ["sliding_attention"] * 3 + ["full_attention"]
CASES += [
    Family(
        "cohere-compass",
        "cohere_compass_text",
        "CohereCompassTextConfig",
        "CohereCompassForCausalLM",
        {
            **COMPASS,
            "rope_parameters": {k: {"rope_type": "default", "rope_theta": t} for k, t in zip(KINDS, (1e3, 5e5))},
        },
    ),
    # no rotary on the full layers (null), logits scaled
    Family(
        "cohere-compass-nope",
        "cohere_compass_text",
        "CohereCompassTextConfig",
        "CohereCompassForCausalLM",
        {
            **COMPASS,
            "logit_scale": 0.5,
            "rope_parameters": {KINDS[0]: {"rope_type": "default", "rope_theta": 10.0}, KINDS[1]: None},
        },
    ),
]
# a dense layer, then routed ones; a full layer every 2nd (rotary on the sliding ones only); sqrt(d) embeddings
AFMOE = {**SIZES, "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 8, "moe_intermediate_size": 16}
AFMOE |= {"num_experts": 4, "num_experts_per_tok": 2, "num_shared_experts": 1, "route_scale": 2.5}
AFMOE |= {"sliding_window": 5, "global_attn_every_n_layers": 2, "mup_enabled": True}
CASES.append(Family("afmoe", "afmoe", "AfmoeConfig", "AfmoeForCausalLM", AFMOE))
# differential attention: 4 heads (16 wide) in 2 pairs, 2 key/value heads; 3 layers, each its own lambda_init
DIFF = {**SIZES, "num_hidden_layers": 3, "num_key_value_heads": 2, "head_dim": 16}
CASES.append(Family("diffllama", "diffllama", "DiffLlamaConfig", "DiffLlamaForCausalLM", DIFF))
