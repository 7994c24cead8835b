"""Mixture-of-experts families of 2025-2026, each a table of ``deepseek`` or ``moe`` and the few fields it adds.

- HY3 (``hy_v3``) extends EXAONE-MoE: V3's sigmoid routing in one group, always renormalised, over
  QK-normed grouped-query attention, no windows; its own names (``router_scaling_factor``,
  ``router.gate``, ``expert_bias``, ``shared_mlp``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from zoo.plugin import F, ModelConfig, Positive, Rule, W
from zoo_modern.families.deepseek import EXAONE_MOE, EXAONE_NAMES, Version, exaone_write, experts, has_score_bias
from zoo_modern.families.llama_like import LLAMA_ROTARY, head_dim, llama_read
from zoo_modern.families.moe import routes, unlike
from zoo_modern.families.readers import IGNORED, window_blockers

NO_BIAS = "biases on the projections are not modelled"
HY3 = Version("HY3", True, (192, 8, 1536, 1, 1, 1, 2.826, 1))
HY3_NAMES = {**EXAONE_NAMES, "routed_scaling_factor": "router_scaling_factor"}
V3_ONLY = ("first_k_dense_replace", "n_group", "topk_group", "norm_topk_prob")  # V3's, not HY3's


def hy3_route(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """V3's routing under HY3's names, one group, renormalised; dense layers by ``mlp_layer_types`` (the first)."""
    given = {k: v for k, v in hf.items() if k not in (*V3_ONLY, *HY3_NAMES)}
    return HY3.route(given | {ours: hf[theirs] for ours, theirs in HY3_NAMES.items() if theirs in hf}, fields, where)


def hy3_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """The router under ``router.gate`` (transformers 5's ``gate`` too), the experts as V3's."""
    router, *rest = experts(zoo, (names[0].replace("router.gate", "gate"),), config)
    return [replace(Rule.copy(zoo, names[0]), also=(router,)), *rest]


# HY3 extends EXAONE-MoE: no windows, one group of experts, always renormalised, its own names.
HY_V3 = EXAONE_MOE.derive(
    "HYV3ForCausalLM",
    model_type="hy_v3",
    description="HY3: QK-normed grouped-query attention, sigmoid-routed experts with a score bias and a shared one",
    fields=dict.fromkeys(("sliding_window", "sliding_window_pattern", "layer_types", "routed_scaling_factor", *V3_ONLY))
    | {"router_scaling_factor": F("", None, Positive), "enable_moe_fp32_combine": IGNORED}  # float32 sums: no change
    | {"attention_bias": F.must(False, NO_BIAS, bool), "mlp_bias": F.must(False, NO_BIAS, bool)},
    layer={"mlp.router.weight": W("mlp.router.gate.weight", when=routes, make=hy3_experts)}
    | {"mlp.score_bias.bias": W("mlp.expert_bias", when=has_score_bias)}
    | {f"mlp.shared.{p}.weight": W(f"mlp.shared_mlp.{p}_proj.weight", when=routes) for p in ("gate", "up", "down")},
    engine_features=frozenset({"layer_pattern"}),
    fresh=("read", "write", "blockers"),
    read=(head_dim(128), llama_read, LLAMA_ROTARY.read, hy3_route),
    write=(LLAMA_ROTARY.write, lambda c, hf: {HY3_NAMES.get(k, k): v for k, v in exaone_write(c, hf).items() if k not in V3_ONLY}),
    blockers=(LLAMA_ROTARY.blockers, lambda c, arch: [b for b in HY3.blockers(c, arch) if not b.startswith("dense layers after")])
    + (lambda c, arch: window_blockers(c, arch, ("mlp",)) + (unlike(c, arch, {"n_groups": 1, "normalize_top_k": True}) if routes(c) else []),),
)  # fmt: skip

FAMILIES = (HY_V3,)
