"""Mixture-of-experts families (zoo-modern's ``moe`` MLP): Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V3 and V2,
GPT-OSS, Llama 4, GLM-4 MoE Lite, Solar Open."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
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
]
# GPT-OSS: head_dim 16 (twice hidden_size / heads), a window of 5 on layers 0 and 2, 4 experts
# with biases (top 2), YaRN rotary; a swiglu_limit of 1.5 that the perturbed weights reach
GPT_OSS = {**SIZES, "num_hidden_layers": 3, "head_dim": 16, "intermediate_size": 24, "num_local_experts": 4}
GPT_OSS |= {"num_experts_per_tok": 2, "sliding_window": 5, "swiglu_limit": 1.5}
GPT_OSS |= {"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 4.0, "beta_fast": 32.0}}
GPT_OSS["rope_parameters"] |= {"beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 16}
CASES.append(Family("gpt-oss", "gpt_oss", "GptOssConfig", "GptOssForCausalLM", GPT_OSS))
# Llama 4 (text): chunks of 5 on the rotary layers 0-2 and 4-6 with their L2 QK-norm, NoPE
# layers 3 and 7 with tuned queries (a floor of 4 slots: the tuning changes within the prompt);
# head_dim 16, a top-2 of 4 sigmoid router and the shared expert; Llama 3 rotary scaling
LLAMA4 = {**SIZES, "num_hidden_layers": 8, "head_dim": 16, "intermediate_size": 24, "num_local_experts": 4}
LLAMA4 |= {"num_experts_per_tok": 2, "attention_chunk_size": 5, "floor_scale": 4, "attn_scale": 0.5}
LLAMA4 |= {"rope_parameters": {"rope_type": "llama3", "rope_theta": 500.0, "factor": 8.0, "low_freq_factor": 1.0}}
LLAMA4["rope_parameters"] |= {"high_freq_factor": 4.0, "original_max_position_embeddings": 16}
CASES.append(Family("llama4", "llama4_text", "Llama4TextConfig", "Llama4ForCausalLM", LLAMA4))
# GLM-4 MoE Lite: DeepSeek-V3's layout, the second layer dense by mlp_layer_types, ungrouped routing
GLM4_MOE_LITE = {**DEEPSEEK, "q_lora_rank": 12, "mlp_layer_types": ["sparse", "dense", "sparse"]}
GLM4_MOE_LITE |= {"num_experts_per_tok": 3, "routed_scaling_factor": 1.8}
CASES.append(Family("glm4-moe-lite", "glm4_moe_lite", "Glm4MoeLiteConfig", "Glm4MoeLiteForCausalLM", GLM4_MOE_LITE))
# Solar Open: GQA with head_dim 16, 8 sigmoid-routed experts (top 2 of the
# best 2 of 4 groups) and a shared one in every layer
SOLAR_OPEN = {**SIZES, "head_dim": 16, "moe_intermediate_size": 16, "n_routed_experts": 8, "num_experts_per_tok": 2}
SOLAR_OPEN |= {"n_shared_experts": 1, "routed_scaling_factor": 1.5, "n_group": 4, "topk_group": 2}
SOLAR_OPEN |= {"rope_parameters": {"rope_theta": 500.0}}
CASES.append(Family("solar-open", "solar_open", "SolarOpenConfig", "SolarOpenForCausalLM", SOLAR_OPEN))
# Sarvam's MLA model: DeepSeek-V3's classes under its own config (the DeepSeek-V3 table's alias)
SARVAM = {**DEEPSEEK, "q_lora_rank": None, "first_k_dense_replace": 1, "num_experts_per_tok": 2}
CASES.append(Family("sarvam-mla", "deepseek_v3", "SarvamMLAConfig", "DeepseekV3ForCausalLM", SARVAM))
