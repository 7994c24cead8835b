"""Hybrid families, whose layers mix tokens in more than one way: LFM2 (short gated
convolutions between attention layers), Bamba, Granite-MoE-Hybrid and Nemotron-H (Mamba-2 scans between
attention layers, Granite's with routed experts, Nemotron-H's MLP-only layers)."""

from __future__ import annotations

from family_cases import Family

CASES = [
    # conv, attention, conv, attention; the MLP's width by LFM2's rule: 2/3 of 60, times 1.5, rounded up to 16 = 64
    Family(
        "lfm2",
        "lfm2",
        "Lfm2Config",
        "Lfm2ForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 60,
            "block_multiple_of": 16,
            "block_ffn_dim_multiplier": 1.5,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "layer_types": ["conv", "full_attention", "conv", "full_attention"],
        },
    ),
    # biases on the convolutions, a kernel of 4, an untied head
    Family(
        "lfm2-conv-bias",
        "lfm2",
        "Lfm2Config",
        "Lfm2ForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 48,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 4,
            "conv_bias": True,
            "conv_L_cache": 4,
            "tie_word_embeddings": False,
            "layer_types": ["full_attention", "conv", "conv"],
        },
    ),
]

BAMBA = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "mamba_n_heads": 8,
    "mamba_d_head": 8,
    "mamba_d_state": 8,
    "mamba_n_groups": 2,
    "mamba_chunk_size": 5,
}
CASES += [
    # scan, attention, scan, scan: two groups of 4 heads, chunks of 5 (a prompt of 12 spans three)
    Family(
        "bamba",
        "bamba",
        "BambaConfig",
        "BambaForCausalLM",
        {**BAMBA, "num_hidden_layers": 4, "attn_layer_indices": [1]},
    ),  # fmt: skip
    # attention first, 'auto' head width (2 * 32 / 16 = 4), a kernel of 3 with biases everywhere, a tied head
    Family(
        "bamba-biased",
        "bamba",
        "BambaConfig",
        "BambaForCausalLM",
        {
            **BAMBA,
            "num_hidden_layers": 3,
            "attn_layer_indices": [0],
            "mamba_n_heads": 16,
            "mamba_d_head": "auto",
            "mamba_d_conv": 3,
            "mamba_proj_bias": True,
            "tie_word_embeddings": True,
        },
    ),
]

NEMOTRON_H = {
    "hidden_size": 32,
    "intermediate_size": 48,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "mamba_num_heads": 8,
    "mamba_head_dim": 8,
    "ssm_state_size": 8,
    "n_groups": 2,
    "chunk_size": 5,
}
CASES += [
    # scan, MLP, attention (heads of 16, wider than 32 / 4), scan, MLP: the kinds by layers_block_type
    Family(
        "nemotron-h",
        "nemotron_h",
        "NemotronHConfig",
        "NemotronHForCausalLM",
        {**NEMOTRON_H, "layers_block_type": ["linear_attention", "mlp", "full_attention", "linear_attention", "mlp"]},
    ),
    # a scan narrower than expand * hidden (6 heads of 8 = 48, not 64), as Nemotron-H-4B's and Nano-9B-v2's are
    Family(
        "nemotron-h-narrow",
        "nemotron_h",
        "NemotronHConfig",
        "NemotronHForCausalLM",
        {**NEMOTRON_H, "mamba_num_heads": 6, "layers_block_type": ["linear_attention", "full_attention", "mlp"]},
    ),
    # the older files' letters, attention first, a kernel of 3, biases on the scans' projections
    Family(
        "nemotron-h-pattern",
        "nemotron_h",
        "NemotronHConfig",
        "NemotronHForCausalLM",
        {
            **NEMOTRON_H,
            "hybrid_override_pattern": "*M-M",
            "conv_kernel": 3,
            "use_bias": True,
            "n_groups": 1,
            "mlp_hidden_act": "relu2",
        },
    ),
]

GRANITE_HYBRID = {
    **{k: v for k, v in BAMBA.items() if k != "intermediate_size"},
    **{"embedding_multiplier": 3.0, "residual_multiplier": 0.5, "attention_multiplier": 0.2, "logits_scaling": 2.0},
    "intermediate_size": 16,
    "shared_intermediate_size": 24,
    "num_local_experts": 4,
    "num_experts_per_tok": 2,
}
CASES += [
    # scan, attention, scan: Granite's multipliers, routed experts beside the shared MLP, no positions
    Family(
        "granitemoe-hybrid",
        "granitemoehybrid",
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridForCausalLM",
        {
            **GRANITE_HYBRID,
            "num_hidden_layers": 3,
            "layer_types": ["linear_attention", "full_attention", "linear_attention"],
        },  # fmt: skip
    ),
    # attention first, rotary, no experts: the shared MLP alone (Granite 4.0-H-Micro's layout)
    Family(
        "granitemoe-hybrid-dense",
        "granitemoehybrid",
        "GraniteMoeHybridConfig",
        "GraniteMoeHybridForCausalLM",
        {
            **GRANITE_HYBRID,
            "num_hidden_layers": 2,
            "layer_types": ["full_attention", "linear_attention"],
            "position_embedding_type": "rope",
            "num_local_experts": 0,
        },
    ),
]
CASES.append(
    # conv, attention, conv: the first layer dense (48 wide, no width rule), then 6 experts chosen with an expert bias
    Family(
        "lfm2-moe",
        "lfm2_moe",
        "Lfm2MoeConfig",
        "Lfm2MoeForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 48,
            "moe_intermediate_size": 16,
            "num_hidden_layers": 3,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_dense_layers": 1,
            "num_experts": 6,
            "num_experts_per_tok": 2,
            "routed_scaling_factor": 1.5,
            "layer_types": ["conv", "full_attention", "conv"],
        },
    )
)
CASES.append(
    # scan, attention, scan, scan: experts in layers 1 and 3, a SwiGLU in 0 and 2; RMSNorms on B, C and dt
    Family(
        "jamba",
        "jamba",
        "JambaConfig",
        "JambaForCausalLM",
        {
            "hidden_size": 32,
            "intermediate_size": 16,
            "num_hidden_layers": 4,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_experts": 4,
            "num_experts_per_tok": 2,
            "attn_layer_period": 4,
            "attn_layer_offset": 1,
            "mamba_d_state": 8,
            "mamba_dt_rank": 4,
        },
    )
)
QWEN3_NEXT = {
    "hidden_size": 32,
    "intermediate_size": 40,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 8,
    "linear_value_head_dim": 6,
    "moe_intermediate_size": 16,
    "shared_expert_intermediate_size": 24,
    "num_experts": 4,
    "num_experts_per_tok": 2,
}
CASES += [
    # DeltaNet, DeltaNet, DeltaNet, attention (full_attention_interval's default of 4); rotary on a quarter of 8.
    # head_dim 8, not QWEN3_NEXT's 16 (the next case keeps it): at 16 this draw's logits differ by 1.3e-4 on an
    # AVX-512 CPU, where transformers' own float32 result is 1.5e-4 from its float64 one (the zoo's 0.6e-4).
    Family(
        "qwen3-next",
        "qwen3_next",
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        {**QWEN3_NEXT, "num_hidden_layers": 4, "head_dim": 8},
    ),
    # attention first by layer_types, equal key and value heads, a kernel of 3, half the head rotated, unnormalised
    Family(
        "qwen3-next-layer-types",
        "qwen3_next",
        "Qwen3NextConfig",
        "Qwen3NextForCausalLM",
        {
            **QWEN3_NEXT,
            "num_hidden_layers": 3,
            "layer_types": ["full_attention", "linear_attention", "linear_attention"],
            "linear_num_value_heads": 2,
            "linear_conv_kernel_dim": 3,
            "partial_rotary_factor": 0.5,
            "norm_topk_prob": False,
        },
    ),
]
CASES += [
    # Qwen3.5: Qwen3-Next's layers with a dense SwiGLU MLP, its mixer's projections apart; rotary by rope_parameters
    Family(
        "qwen3.5",
        "qwen3_5_text",
        "Qwen3_5TextConfig",
        "Qwen3_5ForCausalLM",
        {
            **{k: v for k, v in QWEN3_NEXT.items() if "expert" not in k and "moe" not in k},
            "num_hidden_layers": 4,
            "rope_parameters": {"rope_type": "default", "rope_theta": 1000.0, "partial_rotary_factor": 0.5},
        },
    ),
]
CASES += [
    # Qwen3.5-MoE: Qwen3-Next's experts (always renormalised) over Qwen3.5's mixer, its projections apart; two layers
    # (four carry the DeltaNet scan's float32 noise past 1e-4, as qwen3-next's do)
    Family(
        "qwen3.5-moe",
        "qwen3_5_moe_text",
        "Qwen3_5MoeTextConfig",
        "Qwen3_5MoeForCausalLM",
        {k: v for k, v in QWEN3_NEXT.items() if k != "intermediate_size"}
        | {"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]},
    ),
]

OLMO_HYBRID = {"hidden_size": 32, "intermediate_size": 40, "num_attention_heads": 4, "num_key_value_heads": 2}
CASES += [
    # DeltaNet (pre-norm) x3, attention (OLMo 2's post-norm) by the default pattern; key heads of 0.75 * 32 / 4 = 6,
    # value heads of 12, beta in [0, 2], rotary
    Family(
        "olmo-hybrid",
        "olmo_hybrid",
        "OlmoHybridConfig",
        "OlmoHybridForCausalLM",
        {**OLMO_HYBRID, "num_hidden_layers": 4},
    ),
    # as released: no positions, beta in [0, 1], attention first, sizes given
    Family(
        "olmo-hybrid-nope",
        "olmo_hybrid",
        "OlmoHybridConfig",
        "OlmoHybridForCausalLM",
        {
            **OLMO_HYBRID,
            "num_hidden_layers": 3,
            "layer_types": ["full_attention", "linear_attention", "linear_attention"],
            "rope_parameters": {"rope_type": "default", "rope_theta": None},
            "linear_allow_neg_eigval": False,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 8,
            "linear_value_head_dim": 8,
            "linear_conv_kernel_dim": 3,
        },
    ),
]
