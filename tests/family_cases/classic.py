"""The older families and the scalings of the ones already read: GPT-J, OPT, GPTBigCode,
Phi, StableLM, BLOOM, Falcon, MPT, XGLM, CTRL, GPT-NeoX Japanese, and Llama 3's (and the other) rotary scalings."""

from __future__ import annotations

from family_cases import Family

LLAMA = {"hidden_size": 32, "intermediate_size": 40, "num_hidden_layers": 2, "num_attention_heads": 4}
LLAMA3_ROPE = {
    "rope_type": "llama3",
    "rope_theta": 500000.0,
    "factor": 32.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position_embeddings": 8,  # short, so the blend touches every kind of frequency
}

GPT2_SIZES = {"n_embd": 32, "n_layer": 2, "n_head": 4}
OPT = {"hidden_size": 32, "ffn_dim": 48, "num_hidden_layers": 2, "num_attention_heads": 4, "word_embed_proj_dim": 32}

FALCON = {"hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 4, "ffn_hidden_size": 40}

CASES = [
    Family("falcon", "falcon", "FalconConfig", "FalconForCausalLM", FALCON),  # Falcon-7B's layout
    Family(
        "falcon-new-architecture",
        "falcon",
        "FalconConfig",
        "FalconForCausalLM",
        {**FALCON, "new_decoder_architecture": True, "num_kv_heads": 2, "bias": True},
    ),
    Family(
        "falcon-sequential",
        "falcon",
        "FalconConfig",
        "FalconForCausalLM",
        {**FALCON, "parallel_attn": False, "multi_query": False, "bias": True},
    ),
    Family("opt", "opt", "OPTConfig", "OPTForCausalLM", OPT),
    Family("opt-post-norm", "opt", "OPTConfig", "OPTForCausalLM", {**OPT, "do_layer_norm_before": False}),
    Family("gpt-bigcode", "gpt_bigcode", "GPTBigCodeConfig", "GPTBigCodeForCausalLM", GPT2_SIZES),
    Family(
        "gpt-bigcode-mha",
        "gpt_bigcode",
        "GPTBigCodeConfig",
        "GPTBigCodeForCausalLM",
        {**GPT2_SIZES, "multi_query": False, "n_inner": 40},
    ),
    Family("mpt", "mpt", "MptConfig", "MptForCausalLM", {"d_model": 32, "n_layers": 2, "n_heads": 4}),
    Family("mpt-6-heads", "mpt", "MptConfig", "MptForCausalLM", {"d_model": 36, "n_layers": 2, "n_heads": 6}),
    # fairseq's sinusoids from row 2, sqrt(d_model) embeddings, dropout on the embeddings too
    Family(
        "xglm",
        "xglm",
        "XGLMConfig",
        "XGLMForCausalLM",
        {"d_model": 32, "ffn_dim": 48, "num_layers": 2, "attention_heads": 4},
    ),
    Family(
        "ctrl", "ctrl", "CTRLConfig", "CTRLLMHeadModel", {**GPT2_SIZES, "dff": 48}
    ),  # sines then cosines, a biased head
    # the last layer's attention alone adds an output bias; half of each head rotates
    Family(
        "gpt-neox-japanese",
        "gpt_neox_japanese",
        "GPTNeoXJapaneseConfig",
        "GPTNeoXJapaneseForCausalLM",
        {
            "hidden_size": 32,
            "num_attention_heads": 4,
            "num_hidden_layers": 3,
            "intermediate_multiple_size": 2,
            "rope_parameters": {"rope_theta": 500.0, "partial_rotary_factor": 0.5},
        },
    ),
    Family("bloom", "bloom", "BloomConfig", "BloomForCausalLM", {"hidden_size": 36, "n_layer": 2, "n_head": 6}),
    Family(
        "gptj",
        "gptj",
        "GPTJConfig",
        "GPTJForCausalLM",
        {"n_embd": 32, "n_layer": 2, "n_head": 4, "rotary_dim": 4, "n_inner": 48},
    ),
    Family(
        "phi",
        "phi",
        "PhiConfig",
        "PhiForCausalLM",
        {"hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2, "num_attention_heads": 4},
    ),
    Family(
        "phi-gqa",
        "phi",
        "PhiConfig",
        "PhiForCausalLM",
        {**LLAMA, "num_key_value_heads": 2, "partial_rotary_factor": 0.75, "hidden_act": "gelu"},
    ),
    Family(
        "stablelm",
        "stablelm",
        "StableLmConfig",
        "StableLmForCausalLM",
        {**LLAMA, "num_key_value_heads": 2},
    ),
    Family(
        "stablelm-2",
        "stablelm",
        "StableLmConfig",
        "StableLmForCausalLM",
        {**LLAMA, "num_key_value_heads": 4, "use_qkv_bias": True, "partial_rotary_factor": 0.5},
    ),
    Family("llama3", "llama", "LlamaConfig", "LlamaForCausalLM", {**LLAMA, "rope_parameters": LLAMA3_ROPE}),
    Family(
        "llama-linear-rope",
        "llama",
        "LlamaConfig",
        "LlamaForCausalLM",
        {**LLAMA, "rope_parameters": {"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}},
    ),
    Family(
        "llama-yarn",
        "llama",
        "LlamaConfig",
        "LlamaForCausalLM",
        {
            **LLAMA,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 10000.0,
                "factor": 4.0,
                "original_max_position_embeddings": 16,
            },
        },
    ),
    Family(
        "llama-dynamic",
        "llama",
        "LlamaConfig",
        "LlamaForCausalLM",
        {**LLAMA, "rope_parameters": {"rope_type": "dynamic", "rope_theta": 10000.0, "factor": 2.0}},
    ),
]
