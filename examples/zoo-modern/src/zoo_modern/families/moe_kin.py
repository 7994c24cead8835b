"""Mixture-of-experts families whose layers differ beyond their MLP (windows, dense layers).

Cohere 2-MoE extends Cohere 2: its layers' windows and rotary as Cohere 2's (the full ones
turned too where ``prefix_dense_sliding_window_pattern`` is 1 and the layer is dense), dense
SwiGLU layers by ``mlp_layer_types`` (``prefix_dense_intermediate_size`` wide), the rest
routed: top-k of the logits, then their softmax (renormalised) or sigmoids
(``expert_selection_fn``, ``norm_topk_prob``), shared experts summed or averaged
(``shared_expert_combination_strategy``); RMSNorm where ``rms_norm_eps`` is set.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from zoo.plugin import Count, Experts, F, ModelConfig, W
from zoo_modern.families.llama_kin import COHERE2, rotary_on_sliding_blockers
from zoo_modern.families.llama_like import HEAD_DIM
from zoo_modern.families.moe import Routing, dense, has_shared, options, routes, unlike
from zoo_modern.families.readers import IGNORED, refuse_unless, window_per_layer, with_layer_changes

CHOICES = ("softmax", "sigmoid")
COMBINE = ("sum", "average")
SWIGLU = ("gate", "up", "down")  # a SwiGLU's projections, dense and shared


def cohere2_moe_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The norm, the routing, the shared experts and the dense layers (see the module)."""
    layers, width, choice = fields["n_layers"], int(hf["intermediate_size"]), hf.get("expert_selection_fn", "softmax")
    combine, types = hf.get("shared_expert_combination_strategy", "average"), hf.get("mlp_layer_types") or ["sparse"] * layers  # fmt: skip
    refuse_unless(choice in CHOICES, where, "expert_selection_fn", choice, "supported: softmax, sigmoid")
    refuse_unless(combine in COMBINE, where, "shared_expert_combination_strategy", combine, "supported: sum, average")
    refuse_unless(isinstance(types, list) and len(types) == layers and set(types) <= {"dense", "sparse"}, where, "mlp_layer_types", types, f"give {layers} of 'dense'/'sparse'")  # fmt: skip
    experts, top_k = int(hf.get("num_experts") or 8), int(hf.get("num_experts_per_tok") or 2)
    mlp = {"name": "moe", "n_experts": experts, "top_k": top_k}
    mlp |= {"hidden": width, "scoring": choice, "normalize_top_k": choice == "softmax" or bool(hf.get("norm_topk_prob", True))}  # fmt: skip
    mlp |= {"top_k_eps": 0.0, "shared_hidden": width * int(hf.get("num_shared_experts") or 0), "shared_gate": False}
    mlp |= {"shared_average": combine == "average", "aux_loss_weight": 0.0}
    turned = hf.get("prefix_dense_sliding_window_pattern", 1) == 1
    dense = {"mlp": {"name": "swiglu", "hidden": int(hf.get("prefix_dense_intermediate_size") or width)}}
    dense |= {"position": fields["position"]} if turned else {}  # a full dense layer turned too
    fields = with_layer_changes(fields, [dense if kind == "dense" else {} for kind in types])
    norm = {"norm": "rmsnorm", "norm_eps": float(hf["rms_norm_eps"])} if hf.get("rms_norm_eps") is not None else {}
    return {**fields, **norm, "mlp": mlp}


def cohere2_moe_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    o, kinds = options(config), ["dense" if dense(config.layer(i)) else "sparse" for i in range(config.n_layers)]
    width = next((config.layer(i).mlp.options.get("hidden") for i in range(config.n_layers) if kinds[i] == "dense"), None)  # fmt: skip
    windows = window_per_layer(config)
    turned = any(kinds[i] == "dense" and windows[i] is None and config.layer(i).position.name != "none" for i in range(config.n_layers))  # fmt: skip
    out = {**hf, "layer_types": ["full_attention" if w is None else "sliding_attention" for w in windows]}
    out |= {"mlp_layer_types": kinds, "prefix_dense_intermediate_size": width, "prefix_dense_sliding_window_pattern": 1 if turned else 4}  # fmt: skip
    out |= {"intermediate_size": o.hidden, "num_experts": o.n_experts, "num_experts_per_tok": o.top_k}
    out |= {"expert_selection_fn": o.scoring, "norm_topk_prob": o.normalize_top_k, "num_shared_experts": o.shared_hidden // (o.hidden or 1)}  # fmt: skip
    out |= {"shared_expert_combination_strategy": "average" if o.shared_average else "sum"}
    return out | ({"rms_norm_eps": config.norm_eps} if config.norm.name == "rmsnorm" else {"rms_norm_eps": None})


def cohere2_moe_blockers(config: ModelConfig, arch: str) -> list[str]:
    """Cohere 2's windows (a dense full layer may turn), routing as Cohere 2-MoE routes."""
    blockers = [b for b in rotary_on_sliding_blockers(config, arch) if not b.startswith("per-layer ")]
    blockers = [b for b in blockers if not any(b.startswith(f"layer {i} has rotary alone") for i in range(config.n_layers) if dense(config.layer(i)))]  # fmt: skip
    changes = {kind for i in range(config.n_layers) for kind in config.layer_changes(i)} - {"attention", "position", "mlp"}  # fmt: skip
    blockers += [f"per-layer {', '.join(sorted(changes))} ({arch} has one design)"] if changes else []
    if dense(config):
        return blockers + [f"mlp {config.mlp.name!r} ({arch} routes)"]
    o = options(config)
    wanted: dict[str, Any] = {"score_bias": False, "n_groups": 1, "shared_gate": False, "top_k_eps": 0.0}
    wanted |= {"routed_scale": 1.0} | ({"normalize_top_k": True} if o.scoring == "softmax" else {})
    if o.hidden and o.shared_hidden % o.hidden:
        blockers.append(f"mlp.shared_hidden={o.shared_hidden} ({arch}'s shared experts are intermediate_size wide)")
    return blockers + unlike(config, arch, wanted)


ROUTED = ("num_experts", "num_experts_per_tok")
COHERE2_MOE_FIELDS = {name: F("", None, Experts) for name in ROUTED} | {"num_shared_experts": F("", None, int)}
COHERE2_MOE_FIELDS |= {name: F("", None) for name in ("shared_expert_combination_strategy", "expert_selection_fn", "mlp_layer_types")}  # fmt: skip
COHERE2_MOE_FIELDS |= {name: F("", None) for name in ("prefix_dense_sliding_window_pattern", "norm_topk_prob", "rms_norm_eps")}  # fmt: skip
COHERE2_MOE_FIELDS |= {"prefix_dense_intermediate_size": F("", None, Count), "head_dim": HEAD_DIM}
COHERE2_MOE_FIELDS |= {"output_router_logits": IGNORED}  # transformers' Cohere 2-MoE adds no balancing term
# Cohere 2-MoE extends Cohere 2: routed experts (softmax or sigmoid over the top-k logits), shared experts, dense layers.
COHERE2_MOE = COHERE2.derive(
    "Cohere2MoeForCausalLM",
    model_type="cohere2_moe",
    description="Cohere 2-MoE (Command A+): Cohere 2's layers, routed and shared experts, dense layers",
    fields=COHERE2_MOE_FIELDS,
    zoo={"mlp": {"name": "moe"}},
    accepts={"norm": ("rmsnorm",), "mlp": ("swiglu",)},
    layer={f"mlp.{p}.weight": W(f"mlp.{p}_proj.weight", when=dense) for p in SWIGLU}
    | {"mlp.router.weight": W("mlp.gate.weight", when=routes, make=Routing().experts)}
    | {f"mlp.shared.{p}.weight": W(f"mlp.shared_experts.{p}_proj.weight", when=has_shared) for p in SWIGLU},
    fresh=("blockers",),
    read=(cohere2_moe_read,),
    write=(cohere2_moe_write,),
    blockers=(*COHERE2.blockers[:-1], cohere2_moe_blockers),
)

FAMILIES = (COHERE2_MOE,)
