"""Hugging Face converters for mixture-of-experts families: Mixtral and Qwen2-MoE, each the
Llama-family layout of its dense relative with the MLP replaced by zoo-modern's ``moe``.

Only designs whose every layer routes are read: a config that mixes dense and routed
layers (Qwen2-MoE's ``decoder_sparse_step`` / ``mlp_only_layers``) is refused, since a zoo
config has one MLP for all layers. Router jitter (Mixtral's ``router_jitter_noise``,
training only) is not modelled and refused.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import Field

from zoo.plugin import Converter, Count, Fraction, ModelConfig, Rule
from zoo_modern.converters import LlamaFields, Mistral, Qwen2
from zoo_modern.mlp import swiglu_hidden
from zoo_modern.moe import MoeOptions


class MoeFields(LlamaFields):
    """The config.json fields of routing, typed (on top of the Llama family's)."""

    num_local_experts: Count | None = None
    num_experts: int | None = None
    num_experts_per_tok: Count | None = None
    moe_intermediate_size: Count | None = None
    shared_expert_intermediate_size: Count | None = None
    norm_topk_prob: bool | None = None
    decoder_sparse_step: Count | None = None
    mlp_only_layers: list[int] | None = None
    router_jitter_noise: Fraction | None = None
    router_aux_loss_coef: float | None = None
    output_router_logits: bool | None = None
    qkv_bias: bool | None = None
    sliding_window: Annotated[int, Field(ge=0)] | None = None  # Qwen2-MoE writes 0 for none


def aux_weight(hf: Mapping[str, Any]) -> float:
    """The load-balancing weight transformers trains with: ``router_aux_loss_coef`` when
    ``output_router_logits`` is on (its training loss adds the term only then), else 0."""
    return float(hf.get("router_aux_loss_coef") or 0.0) if hf.get("output_router_logits") else 0.0


def moe_options(config: ModelConfig) -> MoeOptions:
    """The ``moe`` MLP's options, defaults filled in."""
    return MoeOptions.model_validate(config.mlp.options)


def routing_to_hf(config: ModelConfig) -> dict[str, Any]:
    """The config.json fields every MoE family shares: experts, top-k, the aux-loss weight."""
    options = moe_options(config)
    weight = options.aux_loss_weight
    return {
        "num_experts_per_tok": options.top_k,
        "output_router_logits": weight > 0,
        "router_aux_loss_coef": weight,
    }


def expert_hidden(config: ModelConfig) -> int:
    options = moe_options(config)
    return options.hidden or swiglu_hidden(config.d_ff or 4 * config.d_model, options.multiple_of)


class MoeFamily:
    """What the MoE converters share: the routed MLP's rules in place of SwiGLU's, and the
    blockers of a ``moe`` MLP. Mixed into a Llama-family converter (before it)."""

    #: The HF module names: the MoE block, the router in it, an expert's gate/up/down.
    block: ClassVar[str] = "mlp"
    router: ClassVar[str] = "gate"
    projections: ClassVar[tuple[str, str, str]] = ("gate_proj", "up_proj", "down_proj")
    #: Whether the family renormalises the top-k weights always (Mixtral), or as configured (None).
    normalizes: ClassVar[bool | None] = None
    shared: ClassVar[bool] = False  # a gated shared expert (Qwen2-MoE)

    def moe_rules(self, config: ModelConfig, i: int) -> list[Rule]:
        z, h = f"blocks.{i}.mlp.", f"layers.{i}.{self.block}."
        gate, up, down = self.projections
        rules = [Rule.copy(z + "router.weight", h + f"{self.router}.weight")]
        for e in range(moe_options(config).n_experts):
            ze, he = f"{z}experts.{e}.", f"{h}experts.{e}."
            rules += [
                Rule.copy(ze + p + ".weight", he + q + ".weight")
                for p, q in zip(("gate", "up", "down"), (gate, up, down), strict=True)
            ]
        if self.shared:
            rules += [
                Rule.copy(f"{z}shared.{p}.weight", f"{h}shared_expert.{p}_proj.weight") for p in ("gate", "up", "down")
            ]
            rules.append(Rule.copy(z + "shared_gate.weight", h + "shared_expert_gate.weight"))
        return rules

    def with_moe_rules(self, config: ModelConfig, dense: list[Rule]) -> list[Rule]:
        """``dense`` (the Llama family's rules) with each layer's SwiGLU rules replaced."""
        rules = [rule for rule in dense if ".mlp." not in rule.zoo]
        return rules + [rule for i in range(config.n_layers) for rule in self.moe_rules(config, i)]

    def moe_blockers(self, config: ModelConfig, dense: list[str], architecture: str) -> list[str]:
        blockers = [b for b in dense if not b.startswith("mlp ")]
        if config.mlp.name != "moe":
            return [*blockers, f"mlp {config.mlp.name!r} ({architecture} has mixture-of-experts MLPs, 'moe')"]
        options = moe_options(config)
        if self.normalizes is not None and options.normalize_top_k != self.normalizes:
            blockers.append(f"normalize_top_k={not self.normalizes} ({architecture} always renormalises)")
        if bool(options.shared_hidden) != self.shared:
            blockers.append(f"a shared expert {'missing' if self.shared else 'present'} ({architecture})")
        if self.shared and not options.shared_gate:
            blockers.append(f"shared_gate=false ({architecture} gates its shared expert)")
        return blockers


class Mixtral(MoeFamily, Mistral):
    """Mixtral: Mistral's layout with top-2-of-8 routed SwiGLU experts, renormalised."""

    architecture = "MixtralForCausalLM"
    model_type = "mixtral"
    description = "Mixtral: Mistral's layout, top-k routed SwiGLU experts (renormalised)"
    block = "block_sparse_moe"
    projections = ("w1", "w3", "w2")
    normalizes = True

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        MoeFields.read(hf, where)
        if hf.get("router_jitter_noise"):
            raise self.refuse(
                where,
                "router_jitter_noise",
                hf["router_jitter_noise"],
                "noise on the router's input in training is not modelled",
            )
        fields = super().config_from_hf(hf, where)
        mlp = {
            "name": "moe",
            "n_experts": int(hf.get("num_local_experts") or 8),
            "top_k": int(hf.get("num_experts_per_tok") or 2),
            "hidden": int(hf["intermediate_size"]),
            "normalize_top_k": True,
            "aux_loss_weight": aux_weight(hf),
        }
        return {**fields, "mlp": mlp}

    def rules(self, config: ModelConfig) -> list[Rule]:
        return self.with_moe_rules(config, super().rules(config))

    def blockers(self, config: ModelConfig) -> list[str]:
        return self.moe_blockers(config, super().blockers(config), self.architecture)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return {
            **super().config_to_hf(config),
            **routing_to_hf(config),
            "intermediate_size": expert_hidden(config),
            "num_local_experts": moe_options(config).n_experts,
            "router_jitter_noise": 0.0,
        }


class Qwen2Moe(MoeFamily, Qwen2):
    """Qwen2-MoE (Qwen1.5-MoE): Qwen2's layout, routed experts plus a sigmoid-gated shared expert."""

    architecture = "Qwen2MoeForCausalLM"
    model_type = "qwen2_moe"
    description = "Qwen2-MoE: Qwen2's layout, top-k routed experts and a sigmoid-gated shared expert"
    shared = True

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        MoeFields.read(hf, where)
        layers = int(hf.get("num_hidden_layers") or 1)
        if hf.get("qkv_bias") is False:
            raise self.refuse(where, "qkv_bias", False, "the zoo's Qwen2-MoE has q/k/v biases")
        experts = hf.get("num_experts", 60)
        if not experts:
            raise self.refuse(where, "num_experts", experts, "a Qwen2-MoE without experts is Qwen2: convert it as one")
        step = int(hf.get("decoder_sparse_step") or 1)
        if step != 1:
            raise self.refuse(
                where, "decoder_sparse_step", step, "every layer must route (a zoo config has one MLP for all layers)"
            )
        dense = [i for i in hf.get("mlp_only_layers") or [] if 0 <= i < layers]
        if dense:
            raise self.refuse(
                where, "mlp_only_layers", dense, "every layer must route (a zoo config has one MLP for all layers)"
            )
        if hf.get("sliding_window") == 0:  # transformers' Qwen2-MoE default: no window
            hf = {**hf, "sliding_window": None}
        fields = super().config_from_hf(hf, where)
        mlp = {
            "name": "moe",
            "n_experts": int(experts),
            "top_k": int(hf.get("num_experts_per_tok") or 4),
            "hidden": int(hf.get("moe_intermediate_size") or 1408),
            "normalize_top_k": bool(hf.get("norm_topk_prob", False)),
            "shared_hidden": int(hf.get("shared_expert_intermediate_size") or 5632),
            "shared_gate": True,
            "aux_loss_weight": aux_weight(hf),
        }
        return {**fields, "mlp": mlp}

    def rules(self, config: ModelConfig) -> list[Rule]:
        return self.with_moe_rules(config, super().rules(config))

    def blockers(self, config: ModelConfig) -> list[str]:
        return self.moe_blockers(config, super().blockers(config), self.architecture)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        options, hidden = moe_options(config), expert_hidden(config)
        return {
            **super().config_to_hf(config),
            **routing_to_hf(config),
            "intermediate_size": hidden,  # the dense layers' width: there are none
            "moe_intermediate_size": hidden,
            "num_experts": options.n_experts,
            "norm_topk_prob": options.normalize_top_k,
            "shared_expert_intermediate_size": options.shared_hidden,
            "decoder_sparse_step": 1,
            "mlp_only_layers": [],
            "qkv_bias": True,
        }


CONVERTERS: tuple[Converter, ...] = (Mixtral(), Qwen2Moe())

__all__ = ["CONVERTERS", "Mixtral", "Qwen2Moe"]
