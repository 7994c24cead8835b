"""The families read before the zoo grew a zoo: GPT-2 (built in), Llama, Mistral, Qwen2 and
GPT-NeoX (zoo-modern)."""

from __future__ import annotations

from family_cases import Family

LLAMA_SIZES = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}

CASES = [
    Family("gpt2", "gpt2", "GPT2Config", "GPT2LMHeadModel", {"n_embd": 32, "n_layer": 2, "n_head": 4}),
    Family("llama", "llama", "LlamaConfig", "LlamaForCausalLM", {**LLAMA_SIZES, "num_key_value_heads": 2}),
    Family(
        "mistral",
        "mistral",
        "MistralConfig",
        "MistralForCausalLM",
        {**LLAMA_SIZES, "num_key_value_heads": 2, "sliding_window": None},
    ),
    Family("qwen2", "qwen2", "Qwen2Config", "Qwen2ForCausalLM", {**LLAMA_SIZES, "num_key_value_heads": 2}),
    Family(
        "gpt-neox",
        "gpt_neox",
        "GPTNeoXConfig",
        "GPTNeoXForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "rotary_pct": 0.5,
        },
    ),
]
# Model types transformers builds with Llama's classes (its config alone differs): read by the
# Llama table (its aliases), as their config.json names LlamaForCausalLM; exported as llama.
CASES += [
    Family(
        "internlm3",
        "llama",
        "InternLM3Config",
        "LlamaForCausalLM",
        {**LLAMA_SIZES, "num_key_value_heads": 2, "head_dim": 8},
    ),
    Family(
        "iquestcoder",
        "llama",
        "IQuestCoderConfig",
        "LlamaForCausalLM",
        {**LLAMA_SIZES, "num_key_value_heads": 2, "head_dim": 8},
    ),
]
