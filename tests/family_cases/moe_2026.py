"""Mixture-of-experts families of 2025-2026 (zoo-modern's ``families/moe_2026.py``): HY3."""

from __future__ import annotations

from family_cases import Family

SIZES = {"hidden_size": 32, "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2}
EXPERTS = {"intermediate_size": 40, "moe_intermediate_size": 16, "num_experts": 4, "num_experts_per_tok": 2}

CASES = [
    Family(  # QK-norm per head (head_dim 16), a dense first layer, then sigmoid-routed experts scaled by 2.5
        "hy-v3",
        "hy_v3",
        "HYV3Config",
        "HYV3ForCausalLM",
        {**SIZES, **EXPERTS, "head_dim": 16, "router_scaling_factor": 2.5, "num_shared_experts": 2},
    ),
]
