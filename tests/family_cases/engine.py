"""The families that need the engine's features (issue 28, item 4): sliding windows (all
layers, or some by a layer pattern), soft-capping, per-layer components."""

from __future__ import annotations

from family_cases import Family

LLAMA_SIZES = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}

CASES = [
    Family(
        "mistral-window",
        "mistral",
        "MistralConfig",
        "MistralForCausalLM",
        {**LLAMA_SIZES, "num_key_value_heads": 2, "sliding_window": 5},
    ),
    # Phi-3 mini's window (2,047 of 4,096 positions), shorter than the harness's context
    Family(
        "phi3-window",
        "phi3",
        "Phi3Config",
        "Phi3ForCausalLM",
        {**LLAMA_SIZES, "num_key_value_heads": 2, "sliding_window": 5},
    ),
    Family(
        "qwen2-window",
        "qwen2",
        "Qwen2Config",
        "Qwen2ForCausalLM",
        {
            **LLAMA_SIZES,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "use_sliding_window": True,
            "sliding_window": 4,
            "max_window_layers": 1,
        },
    ),
]

STARCODER2_SIZES = {**LLAMA_SIZES, "num_key_value_heads": 2, "intermediate_size": 48}
CASES += [
    Family("starcoder2", "starcoder2", "Starcoder2Config", "Starcoder2ForCausalLM", {**STARCODER2_SIZES}),
    Family(
        "starcoder2-window",
        "starcoder2",
        "Starcoder2Config",
        "Starcoder2ForCausalLM",
        {**STARCODER2_SIZES, "sliding_window": 6, "tie_word_embeddings": False},
    ),
]
CASES += [
    Family(
        "qwen3-window",
        "qwen3",
        "Qwen3Config",
        "Qwen3ForCausalLM",
        {
            **LLAMA_SIZES,
            "num_hidden_layers": 3,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "use_sliding_window": True,
            "sliding_window": 4,
            "max_window_layers": 1,
        },
        export=False,  # the zoo writes Qwen3 without windows yet (the Qwen3 converter refuses them for export)
    ),
]

GEMMA2 = {
    **LLAMA_SIZES,
    "num_hidden_layers": 3,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "query_pre_attn_scalar": 12,
    "sliding_window": 5,
    "attn_logit_softcapping": 1.5,
    "final_logit_softcapping": 2.0,
}
CASES += [
    Family("gemma2", "gemma2", "Gemma2Config", "Gemma2ForCausalLM", GEMMA2),
    Family(
        "gemma2-uncapped",
        "gemma2",
        "Gemma2Config",
        "Gemma2ForCausalLM",
        {**GEMMA2, "attn_logit_softcapping": None, "final_logit_softcapping": None, "head_dim": 8},
    ),
]

GEMMA3 = {
    **LLAMA_SIZES,
    "num_hidden_layers": 3,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "query_pre_attn_scalar": 12,
    "sliding_window": 5,
    "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
}
CASES += [
    Family("gemma3", "gemma3_text", "Gemma3TextConfig", "Gemma3ForCausalLM", GEMMA3),
    Family(
        "gemma3-capped",
        "gemma3_text",
        "Gemma3TextConfig",
        "Gemma3ForCausalLM",
        {**GEMMA3, "attn_logit_softcapping": 1.5, "final_logit_softcapping": 2.0, "layer_types": None},
    ),
]

GPT_NEO = {"hidden_size": 32, "num_layers": 2, "num_heads": 4, "intermediate_size": 48, "window_size": 5}
CASES += [
    Family(
        "gpt-neo",
        "gpt_neo",
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        {**GPT_NEO, "attention_types": [[["global", "local"], 1]]},
    ),
    Family(
        "gpt-neo-local",
        "gpt_neo",
        "GPTNeoConfig",
        "GPTNeoForCausalLM",
        {
            **GPT_NEO,
            "num_layers": 3,
            "attention_types": [[["local"], 2], [["global"], 1]],
            "activation_function": "gelu",
        },
    ),
]

SMOLLM3 = {**LLAMA_SIZES, "num_hidden_layers": 4, "num_key_value_heads": 2}
CASES += [
    Family("smollm3", "smollm3", "SmolLM3Config", "SmolLM3ForCausalLM", SMOLLM3),
    Family(
        "smollm3-window",
        "smollm3",
        "SmolLM3Config",
        "SmolLM3ForCausalLM",
        {**SMOLLM3, "no_rope_layers": [1, 0, 1, 0], "use_sliding_window": True, "sliding_window": 5},
    ),
]
