"""Mixture-of-experts families (zoo-modern's ``moe`` MLP): Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}

CASES = [
    Family(
        "mixtral",
        "mixtral",
        "MixtralConfig",
        "MixtralForCausalLM",
        {**SIZES, "intermediate_size": 24, "num_local_experts": 4, "num_experts_per_tok": 2, "sliding_window": None},
    ),
    Family(
        "qwen2-moe",
        "qwen2_moe",
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            **SIZES,
            "intermediate_size": 40,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 24,
            "num_experts": 6,
            "num_experts_per_tok": 3,
        },
    ),
    Family(  # norm_topk_prob: the top-k weights renormalised, as Mixtral always does
        "qwen2-moe-normalized",
        "qwen2_moe",
        "Qwen2MoeConfig",
        "Qwen2MoeForCausalLM",
        {
            **SIZES,
            "intermediate_size": 40,
            "moe_intermediate_size": 16,
            "shared_expert_intermediate_size": 24,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "norm_topk_prob": True,
        },
    ),
    Family(  # head_dim 2x hidden_size / heads, as Qwen3's
        "qwen3-moe",
        "qwen3_moe",
        "Qwen3MoeConfig",
        "Qwen3MoeForCausalLM",
        {
            **SIZES,
            "head_dim": 16,
            "intermediate_size": 40,
            "moe_intermediate_size": 16,
            "num_experts": 6,
            "num_experts_per_tok": 2,
            "norm_topk_prob": True,
        },
    ),
    Family(
        "olmoe",
        "olmoe",
        "OlmoeConfig",
        "OlmoeForCausalLM",
        {**SIZES, "intermediate_size": 16, "num_experts": 6, "num_experts_per_tok": 3},
    ),
]
