"""Mixture-of-experts families (zoo-modern's ``moe`` MLP): Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V3 and V2,
Granite-MoE (and its shared expert)."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
GRANITE = {"embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2, "logits_scaling": 2.0}
DEEPSEEK = {
    **SIZES,
    "num_hidden_layers": 3,
    "num_key_value_heads": 4,
    "intermediate_size": 40,
    "moe_intermediate_size": 16,
    "n_routed_experts": 8,
    "num_experts_per_tok": 2,
    "n_shared_experts": 1,
    "kv_lora_rank": 16,
    "qk_rope_head_dim": 8,
    "qk_nope_head_dim": 8,
    "v_head_dim": 12,
}

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
    Family(  # latent attention with a q latent; one dense layer, then 8 experts in 4 groups, 2 of them used
        "deepseek-v3",
        "deepseek_v3",
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        {
            **DEEPSEEK,
            "q_lora_rank": 12,
            "first_k_dense_replace": 1,
            "n_group": 4,
            "topk_group": 2,
            "num_experts_per_tok": 3,
        },
    ),
    Family(  # q straight from x (V2-Lite's layout), halves rotary, every layer routed, ungrouped
        "deepseek-v3-direct-q",
        "deepseek_v3",
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        {
            **DEEPSEEK,
            "q_lora_rank": None,
            "rope_interleave": False,
            "first_k_dense_replace": 0,
            "n_group": 1,
            "topk_group": 1,
            "norm_topk_prob": False,
            "routed_scaling_factor": 1.5,
        },
    ),
    Family(  # softmax routing limited to the best 2 of 4 groups (a group worth its best), one dense layer
        "deepseek-v2",
        "deepseek_v2",
        "DeepseekV2Config",
        "DeepseekV2ForCausalLM",
        {
            **DEEPSEEK,
            "q_lora_rank": 12,
            "first_k_dense_replace": 1,
            "topk_method": "group_limited_greedy",
            "n_group": 4,
            "topk_group": 2,
            "num_experts_per_tok": 3,
            "routed_scaling_factor": 1.5,
        },
    ),
    Family(  # V2-Lite's layout: q straight from x, greedy softmax routing, two shared experts
        "deepseek-v2-lite",
        "deepseek_v2",
        "DeepseekV2Config",
        "DeepseekV2ForCausalLM",
        {**DEEPSEEK, "q_lora_rank": None, "n_shared_experts": 2, "topk_method": "greedy"},
    ),
    Family(  # Granite's multipliers all set; experts stored stacked (input_linear, output_linear)
        "granitemoe",
        "granitemoe",
        "GraniteMoeConfig",
        "GraniteMoeForCausalLM",
        {**SIZES, **GRANITE, "intermediate_size": 16, "num_local_experts": 6, "num_experts_per_tok": 2},
    ),
    Family(  # an ungated shared expert, its gate and up one input_linear
        "granitemoe-shared",
        "granitemoeshared",
        "GraniteMoeSharedConfig",
        "GraniteMoeSharedForCausalLM",
        {**SIZES, **GRANITE, "intermediate_size": 16, "shared_intermediate_size": 24, "num_local_experts": 4},
    ),
]
