"""The dense decoder families that extend a Llama-like table by a field or two:
Ministral, Seed-OSS, Helium, ERNIE 4.5;
the ReLU-squared ones: Arcee, Nemotron, Jais 2; GLM and GLM-4; OLMo 3, Cohere 2, EXAONE 4; OLMo; HunYuan; HyperCLOVA X; NanoChat; Apertus; Persimmon; Granite SWA; VaultGemma;
GPT-J's CodeGen; OPT's BioGPT, GPT-2's forerunner GPT; CWM, Apertus 1.5, Ministral 3;
DeepSeek-V3's latent attention over a dense MLP: Youtu, MiniCPM3."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}

CASES = [
    # sliding on the first and third layers only, a window shorter than the prompt
    Family(
        "ministral",
        "ministral",
        "MinistralConfig",
        "MinistralForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "head_dim": 8,  # transformers' Ministral needs it given
            "sliding_window": 5,
            "layer_types": ["sliding_attention", "full_attention", "sliding_attention"],
        },
    ),
    # head_dim 16 (twice hidden_size / heads), q/k/v and output biases
    Family(
        "seed-oss",
        "seed_oss",
        "SeedOssConfig",
        "SeedOssForCausalLM",
        {**SIZES, "num_key_value_heads": 2, "head_dim": 16, "attention_out_bias": True, "residual_dropout": 0.0},
    ),
    Family("helium", "helium", "HeliumConfig", "HeliumForCausalLM", {**SIZES, "num_key_value_heads": 2, "head_dim": 8}),
    # head_dim 16, not hidden_size / heads (8): ERNIE 4.5 0.3B's shape (64 vs 128)
    Family(
        "ernie4_5",
        "ernie4_5",
        "Ernie4_5Config",
        "Ernie4_5ForCausalLM",
        {**SIZES, "num_key_value_heads": 2, "head_dim": 16},
    ),
]
CASES += [
    Family("arcee", "arcee", "ArceeConfig", "ArceeForCausalLM", {**SIZES, "num_key_value_heads": 2}),
    # half of each head rotated, as Nemotron-4's
    Family("nemotron", "nemotron", "NemotronConfig", "NemotronForCausalLM", {**SIZES, "num_key_value_heads": 2}),
    Family("jais2", "jais2", "Jais2Config", "Jais2ForCausalLM", {**SIZES, "num_key_value_heads": 2}),
]
# head_dim 16 (twice hidden_size / heads): 4 of its dimensions rotate, in neighbouring pairs
GLM = {
    **SIZES,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "rope_parameters": {"rope_theta": 500.0, "partial_rotary_factor": 0.25},
}
CASES += [
    Family("glm", "glm", "GlmConfig", "GlmForCausalLM", GLM),
    Family("glm4", "glm4", "Glm4Config", "Glm4ForCausalLM", {**GLM, "attention_bias": False}),
]
# OLMo 3's default layer_types: sliding, sliding, sliding, full
CASES.append(
    Family(
        "olmo3",
        "olmo3",
        "Olmo3Config",
        "Olmo3ForCausalLM",
        {**SIZES, "num_hidden_layers": 4, "num_key_value_heads": 2, "sliding_window": 5},
    )
)
# Cohere 2's and EXAONE 4's default layer_types: sliding (with rotary) x 3, then full (no positions)
CASES += [
    Family(
        "cohere2",
        "cohere2",
        "Cohere2Config",
        "Cohere2ForCausalLM",
        {**SIZES, "num_hidden_layers": 4, "num_key_value_heads": 2, "sliding_window": 5},
    ),
    Family(
        "exaone4",
        "exaone4",
        "Exaone4Config",
        "Exaone4ForCausalLM",
        {**SIZES, "num_hidden_layers": 4, "num_key_value_heads": 2, "sliding_window": 5},
    ),
    # no sliding_window: rotary on every layer, no windows
    Family(
        "exaone4-global",
        "exaone4",
        "Exaone4Config",
        "Exaone4ForCausalLM",
        {**SIZES, "num_key_value_heads": 2, "sliding_window": None, "layer_types": ["full_attention"] * 2},
    ),
]
CASES.append(Family("olmo", "olmo", "OlmoConfig", "OlmoForCausalLM", {**SIZES, "num_key_value_heads": 2}))
# NTK alpha (HunYuan-7B's "dynamic" with alpha 1000): a stretched rotary base
CASES.append(
    Family(
        "hunyuan-dense",
        "hunyuan_v1_dense",
        "HunYuanDenseV1Config",
        "HunYuanDenseV1ForCausalLM",
        {
            **SIZES,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "rope_parameters": {"rope_type": "dynamic", "alpha": 1000.0, "rope_theta": 10000.0, "factor": 1.0},
        },
    )
)
# d_model 32 over 4 shards of 8 rows each for q, v and k; 4 of each head's 8 dimensions rotate
CASES.append(
    Family(
        "codegen",
        "codegen",
        "CodeGenConfig",
        "CodeGenForCausalLM",
        {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_inner": 48, "n_positions": 64},
    )
)
# layer_norm_eps 1e-5 as the final norm's (transformers' BioGPT gives that one no eps of its own)
CASES.append(
    Family(
        "biogpt",
        "biogpt",
        "BioGptConfig",
        "BioGptForCausalLM",
        {**SIZES, "layer_norm_eps": 1e-5, "hidden_dropout_prob": 0.0, "attention_probs_dropout_prob": 0.0},
    )
)
# every multiplier away from 1, as the Granite case's; logits_scaling multiplies here (a residual
# multiplier of 0.22 makes a greedy token of the export the tokenizer's EOS, where the zoo stops)
CASES.append(
    Family(
        "hyperclovax",
        "hyperclovax",
        "HyperCLOVAXConfig",
        "HyperCLOVAXForCausalLM",
        {
            **SIZES,
            "num_key_value_heads": 2,
            "embedding_multiplier": 12.0,
            "residual_multiplier": 0.3,
            "attention_multiplier": 0.015625,
            "logits_scaling": 0.5,
        },
    )
)
# a cap of 2 on the logits, so the soft-capping bends them
CASES.append(
    Family(
        "nanochat",
        "nanochat",
        "NanoChatConfig",
        "NanoChatForCausalLM",
        {**SIZES, "num_key_value_heads": 2, "final_logit_softcapping": 2.0},
    )
)
# Apertus's own default rotary (Llama 3's scaling); xIELU's slopes perturbed with every weight
CASES.append(Family("apertus", "apertus", "ApertusConfig", "ApertusForCausalLM", {**SIZES, "num_key_value_heads": 2}))
# GPT-1: post-norm layers, no final norm, no cache on transformers' side
CASES.append(
    Family(
        "openai-gpt",
        "openai-gpt",
        "OpenAIGPTConfig",
        "OpenAIGPTLMHeadModel",
        {"n_embd": 32, "n_layer": 2, "n_head": 4, "n_positions": 64},
    )
)
CASES += [
    Family("persimmon", "persimmon", "PersimmonConfig", "PersimmonForCausalLM", {**SIZES, "qk_layernorm": True}),
    Family(
        "persimmon-no-qk-norm", "persimmon", "PersimmonConfig", "PersimmonForCausalLM", {**SIZES, "qk_layernorm": False}
    ),
]
# sinks, Granite's multipliers, a full layer then three sliding; rotary bases per layer, one of them none
CASES.append(
    Family(
        "granite-swa",
        "granite_swa",
        "GraniteSWAConfig",
        "GraniteSWAForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 4,
            "num_key_value_heads": 2,
            "sliding_window": 5,
            "layer_rope_theta": [10000.0, 500.0, 0, 500.0],
            "embedding_multiplier": 12.0,
            "residual_multiplier": 0.3,
            "attention_multiplier": 0.25,
            "logits_scaling": 8.0,
        },
    )
)
# Gemma 2's shape without its post-norms: head_dim 16, scores scaled by 12^-1/2 and capped, local/global
CASES.append(
    Family(
        "vaultgemma",
        "vaultgemma",
        "VaultGemmaConfig",
        "VaultGemmaForCausalLM",
        {
            **SIZES,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "query_pre_attn_scalar": 12,
            "sliding_window": 5,
            "attn_logit_softcapping": 1.5,
            "final_logit_softcapping": 2.0,
        },
    )
)
# CWM: head_dim 16 (twice hidden_size / heads), windows of 5 on layers 1-3 (its default types), Llama 3
# rotary; its config requires a bos id and puts Llama 3's eos ids (past this vocabulary) where none is given
CASES.append(
    Family(
        "cwm",
        "cwm",
        "CwmConfig",
        "CwmForCausalLM",
        {**SIZES, "num_hidden_layers": 4, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 5}
        | {"bos_token_id": 0, "eos_token_id": 0},
    )
)
CASES.append(
    Family(
        "apertus1p5",
        "apertus1p5_text",
        "Apertus1p5TextConfig",
        "Apertus1p5TextForCausalLM",
        {**SIZES, "num_key_value_heads": 2},
    )
)
# Youtu: DeepSeek-V3's latent attention (q through its latent, pairs interleaved) over a dense SwiGLU.
# Not exported here: transformers' Youtu zeroes the pad token's embedding row whenever it loads a
# checkpoint (its _init_weights), and the export names the tokenizer's end-of-text as the pad.
LATENT = {**SIZES, "num_key_value_heads": 4, "kv_lora_rank": 16, "q_lora_rank": 12, "qk_rope_head_dim": 8}
LATENT |= {"qk_nope_head_dim": 8, "v_head_dim": 12}
CASES.append(Family("youtu", "youtu", "YoutuConfig", "YoutuForCausalLM", LATENT, export=False))
# MiniCPM3: the same latent attention with halves rotary, scaled embeddings, residuals and logits
MINICPM3 = {**LATENT, "scale_emb": 3.0, "scale_depth": 2.0, "dim_model_base": 8}
CASES.append(Family("minicpm3", "minicpm3", "MiniCPM3Config", "MiniCPM3ForCausalLM", MINICPM3))
# Ministral 3: head_dim 16, a window of 5, YaRN rotary, queries scaled from position 4 on (beta 0.5)
MINISTRAL3 = {**SIZES, "num_key_value_heads": 2, "head_dim": 16, "sliding_window": 5}
MINISTRAL3 |= {"rope_parameters": {"rope_type": "yarn", "rope_theta": 500.0, "factor": 2.0, "beta_fast": 32.0}}
MINISTRAL3["rope_parameters"] |= {"beta_slow": 1.0, "original_max_position_embeddings": 4, "llama_4_scaling_beta": 0.5}
CASES.append(Family("ministral3", "ministral3", "Ministral3Config", "Ministral3ForCausalLM", MINISTRAL3))
