"""Mixture-of-experts families of 2025-2026 (zoo-modern's ``families/moe_2026.py``): HY3, Mellum, Flint, Kolibri 1, MiniCPM5-MoE, Aria (text)."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2}
EXPERTS = {"intermediate_size": 40, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}

RoPE_BASES = {"full_attention": 50000.0, "sliding_attention": 100.0}

CASES = [
    Family(  # QK-norm per head (head_dim 16), a dense first layer, then sigmoid-routed experts scaled by 2.5
        "hy-v3",
        "hy_v3",
        "HYV3Config",
        "HYV3ForCausalLM",
        {**SIZES, **EXPERTS, "head_dim": 16, "router_scaling_factor": 2.5, "num_shared_experts": 2},
    ),
]
CASES += [
    Family(  # a dense first layer, windows of 5 on the sliding layers, each layer type's rotary base
        "mellum",
        "mellum",
        "MellumConfig",
        "MellumForCausalLM",
        {**SIZES, **EXPERTS, "num_hidden_layers": 4, "head_dim": 16, "sliding_window": 5}
        | {"layer_types": ["sliding_attention", "full_attention", "sliding_attention", "full_attention"]}
        | {"mlp_layer_types": ["dense", "sparse", "sparse", "sparse"], "norm_topk_prob": False}
        | {"rope_parameters": {k: {"rope_type": "default", "rope_theta": t} for k, t in RoPE_BASES.items()}},
    ),
]
CASES += [
    Family(  # full, full, sliding, sliding (rotary on these alone), a dense first layer, an ungated shared expert
        "flint",
        "flint",
        "FlintConfig",
        "FlintForCausalLM",
        {**SIZES, **EXPERTS, "num_hidden_layers": 4, "head_dim": 16, "sliding_window": 5, "mlp_only_layers": [0]}
        | {"layer_types": ["full_attention", "full_attention", "sliding_attention", "sliding_attention"]}
        | {"shared_expert_intermediate_size": 24},
    ),
]
CASES += [
    Family(  # output-gated attention, a dense first layer, V3's routing in 2 groups of 2, scaled by 1.5
        "minicpm5-moe",
        "minicpm5_moe",
        "MiniCPM5MoeConfig",
        "MiniCPM5MoeForCausalLM",
        {**SIZES, **{k: v for k, v in EXPERTS.items() if k != "num_experts"}, "n_routed_experts": 4, "head_dim": 16}
        | {"n_group": 2, "topk_group": 1, "routed_scaling_factor": 1.5},
    ),
]
CASES += [
    Family(  # experts stored (in, out), top-2 of 4, a shared expert three experts wide
        "aria-text",
        "aria_text",
        "AriaTextConfig",
        "AriaTextForCausalLM",
        {**SIZES, "intermediate_size": 16, "moe_num_experts": 4, "moe_topk": 2, "moe_num_shared_experts": 3},
    ),
]
CASES += [
    Family(  # sliding, full (no rotary), sliding, full; sigmoid routing renormalised, an ungated shared expert
        "kolibri1",
        "kolibri1",
        "Kolibri1Config",
        "Kolibri1ForCausalLM",
        {**SIZES, **{k: v for k, v in EXPERTS.items() if k != "intermediate_size"}, "num_hidden_layers": 4}
        | {"head_dim": 16, "sliding_window": 5, "norm_topk_prob": True, "shared_expert_intermediate_size": 24},
    ),
]
