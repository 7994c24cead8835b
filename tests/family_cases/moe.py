"""Mixture-of-experts families (zoo-modern's ``moe`` MLP): Mixtral, Qwen2-MoE, Qwen3-MoE, OLMoE, DeepSeek-V3 and V2,
Granite-MoE (and its shared expert), GPT-OSS, Llama 4, GLM-4 MoE Lite, Solar Open."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2}
NO_IDS = {
    "pad_token_id": None,
    "bos_token_id": None,
    "eos_token_id": None,
}  # FlexOlmo's defaults are past a tiny vocabulary
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

#: DeepSeek's YaRN as its released configs give it (V2-Lite's mscale), over 16 pretraining positions.
YARN = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0, "original_max_position_embeddings": 16}
YARN |= {"beta_fast": 32, "beta_slow": 1, "mscale": 0.707, "mscale_all_dim": 0.707}

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
    Family(  # V2-Lite's layout: q straight from x, greedy softmax routing, two shared experts, its YaRN
        "deepseek-v2-lite",
        "deepseek_v2",
        "DeepseekV2Config",
        "DeepseekV2ForCausalLM",
        {**DEEPSEEK, "q_lora_rank": None, "n_shared_experts": 2, "topk_method": "greedy", "rope_parameters": YARN},
    ),
    Family(  # the released V3's YaRN: frequencies stretched 4x past 16 positions, cos/sin scaled by
        # mscale / mscale_all_dim's factor, every score by mscale(4, mscale_all_dim)^2
        "deepseek-v3-yarn",
        "deepseek_v3",
        "DeepseekV3Config",
        "DeepseekV3ForCausalLM",
        {
            **DEEPSEEK,
            "q_lora_rank": 12,
            "first_k_dense_replace": 1,
            "n_group": 4,
            "topk_group": 2,
            "rope_parameters": {**YARN, "mscale": 1.0, "mscale_all_dim": 0.8},
        },
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
    Family(  # Granite SWA's sinks, windows (full, sliding x3) and rotary bases (one layer without) over those experts
        "granitemoe-swa",
        "granitemoe_swa",
        "GraniteMoeSWAConfig",
        "GraniteMoeSWAForCausalLM",
        {**SIZES, **GRANITE, "intermediate_size": 16, "shared_intermediate_size": 24, "num_local_experts": 4}
        | {"num_hidden_layers": 4, "sliding_window": 5, "layer_rope_theta": [10000.0, 500.0, 0, 500.0]},
    ),
    Family(  # V3's routing over grouped-query attention with biases and QK-norm, head_dim 16, half of each head turned
        "glm4-moe",
        "glm4_moe",
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        {
            **{k: v for k, v in DEEPSEEK.items() if not k.startswith(("kv_", "qk_", "v_"))},
            "num_key_value_heads": 2,
            "head_dim": 16,
            "attention_bias": True,
            "use_qk_norm": True,
            "n_group": 4,
            "topk_group": 2,
            "routed_scaling_factor": 1.5,
        },
    ),
    Family(  # no biases, no QK-norm, transformers' default of one dense layer, every expert in one group
        "glm4-moe-plain",
        "glm4_moe",
        "Glm4MoeConfig",
        "Glm4MoeForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 3,
            "intermediate_size": 40,
            "moe_intermediate_size": 16,
            "n_routed_experts": 6,
            "num_experts_per_tok": 2,
        },
    ),
    Family(  # QK-norm per head, biases on q, k, v and the output, one dense layer, 8 experts in 4 groups
        "dots1",
        "dots1",
        "Dots1Config",
        "Dots1ForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 3,
            "intermediate_size": 40,
            "moe_intermediate_size": 16,
            "n_routed_experts": 8,
            "n_shared_experts": 1,
            "num_experts_per_tok": 3,
            "first_k_dense_replace": 1,
            "n_group": 4,
            "topk_group": 2,
            "norm_topk_prob": True,
            "routed_scaling_factor": 2.0,
            "attention_bias": True,
        },
    ),
    Family(  # routed from layer 1 to 3, every other: layers 1 and 3; a score bias chooses, two shared experts
        "ernie4_5-moe",
        "ernie4_5_moe",
        "Ernie4_5_MoeConfig",
        "Ernie4_5_MoeForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 4,
            "head_dim": 8,
            "intermediate_size": 40,
            "moe_intermediate_size": 16,
            "moe_num_experts": 6,
            "moe_k": 2,
            "moe_layer_interval": 2,
        },
    ),
    Family(  # QK-norm after the rotation, NTK-alpha rotary, an ungated shared MLP beside 6 experts
        "hunyuan-moe",
        "hunyuan_v1_moe",
        "HunYuanMoEV1Config",
        "HunYuanMoEV1ForCausalLM",
        {
            **SIZES,
            "head_dim": 8,
            "intermediate_size": 16,
            "num_experts": 6,
            "moe_topk": 2,
            "rope_parameters": {"rope_type": "dynamic", "alpha": 1000.0, "rope_theta": 10000.0, "factor": 1.0},
        },
    ),
    Family(  # norms after each sub-layer, QK-norm over the whole projection, renormalised
        "flex-olmo",
        "flex_olmo",
        "FlexOlmoConfig",
        "FlexOlmoForCausalLM",
        {
            **SIZES,
            **NO_IDS,
            "intermediate_size": 16,
            "num_experts": 5,
            "num_experts_per_tok": 2,
            "norm_topk_prob": True,
        },
    ),
    Family(  # heads of 16 (wider than 32 / 4), QK-norm over the whole projection, 8 of 16 dimensions turned
        "minimax-m2",
        "minimax_m2",
        "MiniMaxM2Config",
        "MiniMaxM2ForCausalLM",
        {
            **SIZES,
            "head_dim": 16,
            "intermediate_size": 16,
            "num_local_experts": 6,
            "num_experts_per_tok": 2,
            "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
        },
    ),
    Family(  # windows of 6 on 3 layers of 4 (rotary only there), the first layer dense, 8 experts in 2 groups
        "exaone-moe",
        "exaone_moe",
        "ExaoneMoeConfig",
        "ExaoneMoeForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 4,
            "intermediate_size": 40,
            "moe_intermediate_size": 16,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "n_group": 2,
            "topk_group": 1,
            "sliding_window": 6,
        },
    ),
    Family(  # SparseMixer's routing (a wide distance, so near ties share their softmax), biases everywhere, a window
        "phimoe",
        "phimoe",
        "PhimoeConfig",
        "PhimoeForCausalLM",
        {
            **SIZES,
            "intermediate_size": 16,
            "num_local_experts": 6,
            "router_jitter_noise": 0.3,
            "attention_bias": True,
            "lm_head_bias": True,
            "sliding_window": 8,
        },
    ),
    Family(  # windows of 6 on 3 layers of 4 (rotary there), a dense first layer turned though full, shared experts averaged
        "cohere2-moe",
        "cohere2_moe",
        "Cohere2MoeConfig",
        "Cohere2MoeForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 4,
            "head_dim": 8,
            "intermediate_size": 16,
            "prefix_dense_intermediate_size": 40,
            "num_experts": 6,
            "num_shared_experts": 1,
            "sliding_window": 6,
            "layer_types": ["full_attention", "sliding_attention", "sliding_attention", "full_attention"],
            "mlp_layer_types": ["dense", "sparse", "sparse", "sparse"],
        },
    ),
    Family(  # sigmoid scores over the top-k logits, renormalised; RMSNorm; shared experts summed; no dense layers
        "cohere2-moe-sigmoid",
        "cohere2_moe",
        "Cohere2MoeConfig",
        "Cohere2MoeForCausalLM",
        {
            **SIZES,
            "head_dim": 8,
            "intermediate_size": 16,
            "num_experts": 6,
            "num_shared_experts": 1,
            "expert_selection_fn": "sigmoid",
            "shared_expert_combination_strategy": "sum",
            "rms_norm_eps": 1e-5,
            "sliding_window": 6,
        },
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
