"""Mixture-of-experts families: each its dense relative with the MLP replaced by zoo-modern's ``moe``.

- Mixtral extends Mistral: top-2 of 8 experts, the top-k weights renormalised.
- Qwen2-MoE extends Qwen2: top-4 of 60, ``norm_topk_prob``, a shared expert behind a sigmoid gate.
- Qwen3-MoE extends Qwen3: top-8 of 128.
- OLMoE extends Llama: QK-norm over the whole projection, top-8 of 64, not renormalised.

Only designs whose every layer routes are read (``decoder_sparse_step`` / ``mlp_only_layers``
mixing dense layers in are refused: a zoo config has one MLP for all layers). Router jitter
(training only) and OLMoE's ``clip_qkv`` are refused. ``router_aux_loss_coef`` becomes the
``aux_loss_weight`` when ``output_router_logits`` is on (transformers adds the term only then).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Experts, F, Family, Fraction, ModelConfig, Rule, W
from zoo_modern.families.llama_like import LLAMA, MISTRAL, QK_NORMS, QWEN2, QWEN3, head_dim
from zoo_modern.families.readers import qknorm, refuse_unless
from zoo_modern.mlp import swiglu_hidden
from zoo_modern.moe import MoeOptions

EXPERTS = ("num_local_experts", "num_experts", "num_experts_per_tok")  # bounded before a rule per expert
EVERY_LAYER = "every layer must route (a zoo config has one MLP for all layers)"
ROUTING = (
    "num_local_experts num_experts num_experts_per_tok moe_intermediate_size norm_topk_prob output_router_logits "
    "shared_expert_intermediate_size decoder_sparse_step mlp_only_layers router_aux_loss_coef"
).split()


def options(config: ModelConfig) -> MoeOptions:
    return MoeOptions.model_validate(config.mlp.options)


def expert_hidden(config: ModelConfig) -> int:
    o = options(config)
    return o.hidden or swiglu_hidden(config.d_ff or 4 * config.d_model, o.multiple_of)


@dataclass(frozen=True)
class Routing:
    """How a family names and defaults its routing (read, written and checked as one)."""

    block: str = "mlp"
    projections: tuple[str, str, str] = ("gate_proj", "up_proj", "down_proj")
    experts_field: str = "num_experts"
    hidden_field: str = "moe_intermediate_size"
    defaults: tuple[int, int, int, bool] = (8, 2, 14336, True)  # experts, top-k, width, norm_topk_prob
    always_normalized: bool = False
    shared: bool = False
    sparse_layers: bool = False

    def read(self, hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        experts, top_k, hidden, normalized = self.defaults
        experts = hf.get(self.experts_field, hf.get("num_local_experts", hf.get("num_experts", experts)))
        refuse_unless(bool(experts), where, self.experts_field, experts, "a mixture without experts is dense")
        if self.sparse_layers:
            step = int(hf.get("decoder_sparse_step") or 1)
            refuse_unless(step == 1, where, "decoder_sparse_step", step, EVERY_LAYER)
            dense = [i for i in hf.get("mlp_only_layers") or [] if 0 <= i < fields["n_layers"]]
            refuse_unless(not dense, where, "mlp_only_layers", dense, EVERY_LAYER)
        aux = float(hf.get("router_aux_loss_coef") or 0.0) if hf.get("output_router_logits") else 0.0
        mlp = {"name": "moe", "n_experts": int(experts), "top_k": int(hf.get("num_experts_per_tok") or top_k)}
        mlp |= {"hidden": int(hf.get(self.hidden_field) or hidden), "aux_loss_weight": aux}
        mlp["normalize_top_k"] = True if self.always_normalized else bool(hf.get("norm_topk_prob", normalized))
        if self.shared:
            mlp |= {"shared_hidden": int(hf.get("shared_expert_intermediate_size") or 5632), "shared_gate": True}
        return {**fields, "mlp": mlp}

    def write(self, config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
        o = options(config)
        out = {**hf, "intermediate_size": config.d_ff or expert_hidden(config), self.experts_field: o.n_experts}
        out |= {self.hidden_field: expert_hidden(config), "num_experts_per_tok": o.top_k}
        out |= {"output_router_logits": o.aux_loss_weight > 0, "router_aux_loss_coef": o.aux_loss_weight}
        out |= {} if self.always_normalized else {"norm_topk_prob": o.normalize_top_k}
        out |= {"shared_expert_intermediate_size": o.shared_hidden} if self.shared else {}
        return out | ({"decoder_sparse_step": 1, "mlp_only_layers": []} if self.sparse_layers else {})

    def blockers(self, config: ModelConfig, arch: str) -> list[str]:
        if config.mlp.name != "moe":
            return []  # named by the table's mlp
        o, blockers = options(config), []
        if self.always_normalized and not o.normalize_top_k:
            blockers.append(f"normalize_top_k=false ({arch} always renormalises the top-k weights)")
        if bool(o.shared_hidden) != self.shared:
            blockers.append(f"a shared expert {'missing' if self.shared else 'present'} ({arch})")
        if self.shared and not o.shared_gate:
            blockers.append(f"shared_gate=false ({arch} gates its shared expert)")
        return blockers

    def experts(self, zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
        """The router, the stacked experts and the shared expert. Stored as ``save_pretrained``
        writes them (one tensor per expert and projection); read that way or stacked, as
        transformers 5 holds them (``mlp.experts.gate_up_proj``, ``down_proj``, under ``mlp.``)."""
        z, h = zoo.removesuffix("router.weight"), names[0].removesuffix("gate.weight")
        native = h.removesuffix(f"{self.block}.") + "mlp."
        router = Rule.copy(zoo, names[0])  # Mixtral's, under block_sparse_moe., is under mlp. when stacked
        rules = [replace(router, also=(Rule.copy(zoo, native + "gate.weight"),)) if h != native else router]
        rules += stacked_experts(z + "experts.", h + "experts.", native + "experts.", self.projections, config)
        if self.shared:
            rules += [Rule.copy(f"{z}shared.{p}.weight", f"{h}shared_expert.{p}_proj.weight") for p in ("gate", "up", "down")]  # fmt: skip
            rules.append(Rule.copy(z + "shared_gate.weight", h + "shared_expert_gate.weight"))
        return rules


def stacked_experts(
    zoo: str, hf: str, native: str, projections: tuple[str, str, str], config: ModelConfig
) -> list[Rule]:
    """The zoo's ``gate_up`` (E, 2 x hidden, d), rows [gate | up], and ``down`` (E, d, hidden)
    from one tensor per expert and projection (``hf``: ``experts.{e}.gate_proj.weight``), or
    from transformers 5's stacked ``gate_up_proj`` and ``down_proj`` (``native``)."""
    gate, up, down = projections
    n = options(config).n_experts
    pairs = tuple(f"{hf}{e}.{p}.weight" for e in range(n) for p in (gate, up))
    downs = tuple(f"{hf}{e}.{down}.weight" for e in range(n))

    def stack_pairs(ts: Sequence[Tensor]) -> Tensor:
        return torch.stack([torch.cat([ts[i], ts[i + 1]]) for i in range(0, len(ts), 2)])

    def split_pairs(t: Tensor) -> list[Tensor]:
        return [half for expert in t for half in expert.chunk(2)]

    stacked = (
        Rule.copy(zoo + "gate_up.weight", native + "gate_up_proj"),
        Rule.copy(zoo + "down.weight", native + "down_proj"),
    )
    return [
        Rule(stacked[0].zoo, pairs, stack_pairs, split_pairs, also=stacked[:1]),
        Rule(stacked[1].zoo, downs, lambda ts: torch.stack(list(ts)), lambda t: list(t.unbind(0)), also=stacked[1:]),
    ]


def routed(parent: Family, architecture: str, routing: Routing, **changes: Any) -> Family:
    """``parent`` with every layer's MLP a routed mixture of SwiGLU experts."""
    fields = {name: F("", None, Experts if name in EXPERTS else Any) for name in ROUTING} | changes.pop("fields", {})
    fields["router_jitter_noise"] = F.must(0.0, "noise on the router's input in training is not modelled", Fraction)
    layer: dict[str, Any] = {f"mlp.{p}.weight": None for p in ("gate", "up", "down")}
    layer["mlp.router.weight"] = W(f"{routing.block}.gate.weight", make=routing.experts)
    return parent.derive(
        architecture,
        fields=fields,
        zoo={"mlp": {"name": "moe"}} | changes.pop("zoo", {}),
        layer=layer | changes.pop("layer", {}),
        read=(routing.read, *changes.pop("read", ())),
        write=(routing.write,),
        blockers=(routing.blockers,),
        **changes,
    )


MIXTRAL = routed(
    MISTRAL,
    "MixtralForCausalLM",
    Routing("block_sparse_moe", ("w1", "w3", "w2"), "num_local_experts", "intermediate_size", always_normalized=True),
    model_type="mixtral",
    description="Mixtral: Mistral's layout, top-k routed SwiGLU experts (renormalised)",
)
QWEN2_MOE = routed(
    QWEN2,
    "Qwen2MoeForCausalLM",
    Routing(defaults=(60, 4, 1408, False), shared=True, sparse_layers=True),
    model_type="qwen2_moe",
    description="Qwen2-MoE: Qwen2's layout, top-k routed experts and a sigmoid-gated shared expert",
    fields={"qkv_bias": F.must(True, "the zoo's Qwen2-MoE has q/k/v biases", bool)},
)
QWEN3_MOE = routed(
    QWEN3,
    "Qwen3MoeForCausalLM",
    Routing(defaults=(128, 8, 768, False), sparse_layers=True),
    model_type="qwen3_moe",
    description="Qwen3-MoE: Qwen3's layout (QK-norm per head), top-k routed experts",
)
OLMOE = routed(
    LLAMA,
    "OlmoeForCausalLM",
    Routing(hidden_field="intermediate_size", defaults=(64, 8, 2048, False)),
    model_type="olmoe",
    description="OLMoE: Llama's layout, QK-norm over the whole q and k, top-k routed experts",
    fields={"mlp_bias": None, "clip_qkv": F.must(None, "clamping q, k and v is not modelled")},
    zoo={"attention": qknorm("whole")},
    accepts={"attention": ()},
    layer=QK_NORMS,
    read=(head_dim(None),),
)

FAMILIES = (MIXTRAL, QWEN2_MOE, QWEN3_MOE, OLMOE)
