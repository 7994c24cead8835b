"""The families of 2024 that zoo-modern's newer parts build: Qwen3 (QK-norm per head), Gemma
(GeGLU, unit-offset RMSNorm, scaled embeddings), OLMo 2 (norm after each sub-layer, QK-norm
over the projection) and Phi-3 (fused projections)."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}

CASES = [
    # head_dim 16 is twice hidden_size / num_attention_heads: q, k and v are wider than d_model
    Family("qwen3", "qwen3", "Qwen3Config", "Qwen3ForCausalLM", {**SIZES, "num_key_value_heads": 2, "head_dim": 16}),
    Family(
        "qwen3-tied",
        "qwen3",
        "Qwen3Config",
        "Qwen3ForCausalLM",
        {**SIZES, "num_key_value_heads": 4, "head_dim": 8, "tie_word_embeddings": True},
    ),
    # gemma-2b's shape: one key/value head, head_dim = hidden_size / num_attention_heads
    Family("gemma", "gemma", "GemmaConfig", "GemmaForCausalLM", {**SIZES, "num_key_value_heads": 1, "head_dim": 8}),
    # gemma-7b's shape: head_dim (12) not hidden_size / num_attention_heads (8)
    Family(
        "gemma-head-dim",
        "gemma",
        "GemmaConfig",
        "GemmaForCausalLM",
        {**SIZES, "num_key_value_heads": 4, "head_dim": 12},
    ),
    Family("olmo2", "olmo2", "Olmo2Config", "Olmo2ForCausalLM", {**SIZES, "num_key_value_heads": 2}),
    Family("phi3", "phi3", "Phi3Config", "Phi3ForCausalLM", {**SIZES, "num_key_value_heads": 2}),
]
