"""Hugging Face converters for mixture-of-experts families, each the Llama-family layout of
its dense relative with the MLP replaced by zoo-modern's ``moe``:

- Mixtral: Mistral's layout, top-2 of 8 experts, the top-k weights renormalised.
- Qwen2-MoE (Qwen1.5-MoE): Qwen2's layout, top-4 of 60 experts (``norm_topk_prob``: renormalised
  or not), plus a shared expert scaled by a sigmoid gate.
- Qwen3-MoE: Qwen3's layout (QK-norm per head), top-8 of 128, renormalised.
- OLMoE: Llama's layout with QK-norm over the whole projection, top-8 of 64, not renormalised.

Only designs whose every layer routes are read: a config that mixes dense and routed
layers (``decoder_sparse_step`` / ``mlp_only_layers``) is refused, since a zoo config has
one MLP for all layers. Router jitter (Mixtral's ``router_jitter_noise``, training only)
and OLMoE's ``clip_qkv`` are not modelled and refused. ``router_aux_loss_coef`` becomes
the MoE's ``aux_loss_weight`` when ``output_router_logits`` is on (transformers adds the
term only then), else 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar

from pydantic import Field

from zoo.plugin import Converter, Count, Fraction, ModelConfig, Rule
from zoo_modern.converters import LlamaFamily, LlamaFields, Mistral, Qwen2
from zoo_modern.families_modern import Qwen3, qk_norm_rules, qknorm_blockers, qknorm_spec
from zoo_modern.mlp import swiglu_hidden
from zoo_modern.moe import MoeOptions


class MoeFields(LlamaFields):
    """The config.json fields of routing, typed (on top of the Llama family's)."""

    num_local_experts: Annotated[int, Field(ge=0)] | None = None
    num_experts: Annotated[int, Field(ge=0)] | None = None
    num_experts_per_tok: Count | None = None
    moe_intermediate_size: Count | None = None
    shared_expert_intermediate_size: Count | None = None
    norm_topk_prob: bool | None = None
    decoder_sparse_step: Count | None = None
    mlp_only_layers: list[int] | None = None
    router_jitter_noise: Fraction | None = None
    router_aux_loss_coef: Annotated[float, Field(ge=0.0)] | None = None
    output_router_logits: bool | None = None
    qkv_bias: bool | None = None
    clip_qkv: float | None = None
    sliding_window: Annotated[int, Field(ge=0)] | None = None  # Qwen2-MoE writes 0 for none


def moe_options(config: ModelConfig) -> MoeOptions:
    """The ``moe`` MLP's options, defaults filled in."""
    return MoeOptions.model_validate(config.mlp.options)


def expert_hidden(config: ModelConfig) -> int:
    options = moe_options(config)
    return options.hidden or swiglu_hidden(config.d_ff or 4 * config.d_model, options.multiple_of)


def dense_width(config: ModelConfig) -> int:
    """``intermediate_size`` of a Qwen MoE: its dense layers' width, unused where every layer
    routes; the config's ``d_ff``, so that it reads back as it was."""
    return config.d_ff or expert_hidden(config)


EVERY_LAYER = "every layer must route (a zoo config has one MLP for all layers)"


class MoeFamily(LlamaFamily):
    """What the MoE converters share: the routing fields read and written, the routed MLP's
    rules in place of SwiGLU's, and the blockers of a ``moe`` MLP. A family subclasses it
    before its dense relative (``class Mixtral(MoeFamily, Mistral)``)."""

    #: The HF module names: the MoE block, an expert's gate/up/down.
    block: ClassVar[str] = "mlp"
    projections: ClassVar[tuple[str, str, str]] = ("gate_proj", "up_proj", "down_proj")
    #: config.json's names of the expert count and an expert's width.
    experts_field: ClassVar[str] = "num_experts"
    hidden_field: ClassVar[str] = "moe_intermediate_size"
    #: transformers' defaults for a field left out: experts, top-k, expert width, norm_topk_prob.
    defaults: ClassVar[tuple[int, int, int, bool]] = (8, 2, 14336, True)
    #: Whether the top-k are always renormalised (Mixtral: no ``norm_topk_prob`` field).
    always_normalized: ClassVar[bool] = False
    shared: ClassVar[bool] = False  # a sigmoid-gated shared expert (Qwen2-MoE)
    sparse_layers: ClassVar[bool] = False  # decoder_sparse_step / mlp_only_layers (the Qwens)

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        MoeFields.read(hf, where)
        if hf.get("router_jitter_noise"):
            why = "noise on the router's input in training is not modelled"
            raise self.refuse(where, "router_jitter_noise", hf["router_jitter_noise"], why)
        experts, top_k, hidden, normalized = self.defaults
        experts = hf.get(self.experts_field, hf.get("num_local_experts", hf.get("num_experts", experts)))
        if not experts:
            raise self.refuse(where, self.experts_field, experts, f"a {self.architecture} without experts is dense")
        if self.sparse_layers:
            self.check_every_layer_routes(hf, where)
        if hf.get("sliding_window") == 0:  # transformers' Qwen2-MoE default: no window
            hf = {**hf, "sliding_window": None}
        fields = super().config_from_hf(hf, where)
        mlp = {
            "name": "moe",
            "n_experts": int(experts),
            "top_k": int(hf.get("num_experts_per_tok") or top_k),
            "hidden": int(hf.get(self.hidden_field) or hidden),
            "normalize_top_k": True if self.always_normalized else bool(hf.get("norm_topk_prob", normalized)),
            "aux_loss_weight": float(hf.get("router_aux_loss_coef") or 0.0) if hf.get("output_router_logits") else 0.0,
        }
        if self.shared:
            mlp |= {"shared_hidden": int(hf.get("shared_expert_intermediate_size") or 5632), "shared_gate": True}
        return {**fields, "mlp": mlp}

    def check_every_layer_routes(self, hf: Mapping[str, Any], where: str) -> None:
        step = int(hf.get("decoder_sparse_step") or 1)
        if step != 1:
            raise self.refuse(where, "decoder_sparse_step", step, EVERY_LAYER)
        layers = int(hf.get("num_hidden_layers") or 1)
        dense = [i for i in hf.get("mlp_only_layers") or [] if 0 <= i < layers]
        if dense:
            raise self.refuse(where, "mlp_only_layers", dense, EVERY_LAYER)

    def moe_rules(self, config: ModelConfig, i: int) -> list[Rule]:
        z, h = f"blocks.{i}.mlp.", f"layers.{i}.{self.block}."
        rules = [Rule.copy(z + "router.weight", h + "gate.weight")]
        for e in range(moe_options(config).n_experts):
            pairs = zip(("gate", "up", "down"), self.projections, strict=True)
            rules += [Rule.copy(f"{z}experts.{e}.{p}.weight", f"{h}experts.{e}.{q}.weight") for p, q in pairs]
        if self.shared:
            rules += [Rule.copy(f"{z}shared.{p}.weight", f"{h}shared_expert.{p}_proj.weight") for p in ("gate", "up", "down")]  # fmt: skip
            rules.append(Rule.copy(z + "shared_gate.weight", h + "shared_expert_gate.weight"))
        return rules

    def rules(self, config: ModelConfig) -> list[Rule]:
        """The dense relative's rules with each layer's SwiGLU rules replaced by the MoE's."""
        rules = [rule for rule in super().rules(config) if ".mlp." not in rule.zoo]
        return rules + [rule for i in range(config.n_layers) for rule in self.moe_rules(config, i)]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = [b for b in super().blockers(config) if not b.startswith("mlp ")]
        if config.mlp.name != "moe":
            return [*blockers, f"mlp {config.mlp.name!r} ({self.architecture} has mixture-of-experts MLPs, 'moe')"]
        options = moe_options(config)
        if self.always_normalized and not options.normalize_top_k:
            blockers.append(f"normalize_top_k=false ({self.architecture} always renormalises the top-k weights)")
        if bool(options.shared_hidden) != self.shared:
            blockers.append(f"a shared expert {'missing' if self.shared else 'present'} ({self.architecture})")
        if self.shared and not options.shared_gate:
            blockers.append(f"shared_gate=false ({self.architecture} gates its shared expert)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        options = moe_options(config)
        hf = {
            **super().config_to_hf(config),
            self.experts_field: options.n_experts,
            self.hidden_field: expert_hidden(config),
            "num_experts_per_tok": options.top_k,
            "output_router_logits": options.aux_loss_weight > 0,
            "router_aux_loss_coef": options.aux_loss_weight,
        }
        if not self.always_normalized:
            hf["norm_topk_prob"] = options.normalize_top_k
        if self.shared:
            hf["shared_expert_intermediate_size"] = options.shared_hidden
        if self.sparse_layers:
            hf |= {"decoder_sparse_step": 1, "mlp_only_layers": []}
        return hf


class Mixtral(MoeFamily, Mistral):
    """Mixtral: Mistral's layout with top-2-of-8 routed SwiGLU experts, renormalised."""

    architecture = "MixtralForCausalLM"
    model_type = "mixtral"
    description = "Mixtral: Mistral's layout, top-k routed SwiGLU experts (renormalised)"
    block = "block_sparse_moe"
    projections = ("w1", "w3", "w2")
    experts_field = "num_local_experts"
    hidden_field = "intermediate_size"
    always_normalized = True

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return {**super().config_to_hf(config), "router_jitter_noise": 0.0}


class Qwen2Moe(MoeFamily, Qwen2):
    """Qwen2-MoE (Qwen1.5-MoE): Qwen2's layout, routed experts plus a sigmoid-gated shared expert."""

    architecture = "Qwen2MoeForCausalLM"
    model_type = "qwen2_moe"
    description = "Qwen2-MoE: Qwen2's layout, top-k routed experts and a sigmoid-gated shared expert"
    defaults = (60, 4, 1408, False)
    shared = True
    sparse_layers = True

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        if hf.get("qkv_bias") is False:
            raise self.refuse(where, "qkv_bias", False, "the zoo's Qwen2-MoE has q/k/v biases")

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return {**super().config_to_hf(config), "intermediate_size": dense_width(config), "qkv_bias": True}


class Qwen3Moe(MoeFamily, Qwen3):
    """Qwen3-MoE: Qwen3's layout (QK-norm per head, explicit head_dim), top-k routed experts."""

    architecture = "Qwen3MoeForCausalLM"
    model_type = "qwen3_moe"
    description = "Qwen3-MoE: Qwen3's layout (QK-norm per head), top-k routed experts"
    defaults = (128, 8, 768, False)
    sparse_layers = True

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        return {**super().config_to_hf(config), "intermediate_size": dense_width(config)}


class Olmoe(MoeFamily):
    """OLMoE: Llama's layout with QK-norm over the whole projection, top-k routed experts."""

    architecture = "OlmoeForCausalLM"
    model_type = "olmoe"
    description = "OLMoE: Llama's layout, QK-norm over the whole q and k, top-k routed experts"
    hidden_field = "intermediate_size"
    defaults = (64, 8, 2048, False)

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        super().check(hf, where)
        if hf.get("clip_qkv") is not None:
            raise self.refuse(where, "clip_qkv", hf["clip_qkv"], "clamping q, k and v is not modelled")

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        super().attention(hf, where, kv)  # refuses a head_dim other than hidden_size / heads
        return qknorm_spec(kv, int(hf["hidden_size"]) // int(hf["num_attention_heads"]), "whole")

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        return qknorm_blockers(config, self.architecture, "whole")

    def rules(self, config: ModelConfig) -> list[Rule]:
        return [*super().rules(config), *qk_norm_rules(config)]

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        for name in ("mlp_bias", "head_dim"):
            del hf[name]
        return {**hf, "clip_qkv": None, "pad_token_id": None}


CONVERTERS: tuple[Converter, ...] = (Mixtral(), Qwen2Moe(), Qwen3Moe(), Olmoe())
#: The presets of these families' released weights (``presets/<name>.toml``).
PRESETS = ("mixtral-8x7b", "qwen1.5-moe-a2.7b", "qwen3-30b-a3b", "olmoe-1b-7b")

__all__ = ["CONVERTERS", "PRESETS", "Mixtral", "Olmoe", "Qwen2Moe", "Qwen3Moe"]
