"""Mixture-of-experts families: each its dense relative with the MLP replaced by zoo-modern's ``moe``.

- Mixtral extends Mistral: top-2 of 8 experts, the top-k weights renormalised.
- Qwen2-MoE extends Qwen2: top-4 of 60, ``norm_topk_prob``, a shared expert behind a sigmoid gate.
- Qwen3-MoE extends Qwen3: top-8 of 128.
- OLMoE extends Llama: QK-norm over the whole projection, top-8 of 64, not renormalised.
- Granite-MoE extends Granite: its multipliers, top-k renormalised, the experts stored stacked;
  Granite-MoE-Shared adds an ungated shared expert (``shared_intermediate_size``); Granite-MoE-SWA
  adds Granite SWA's attention sinks, windows and rotary base per layer.
- ERNIE 4.5-MoE extends ERNIE 4.5: softmax scores chosen with a score bias, renormalised,
  ungated shared experts, dense layers off ``moe_layer_interval`` and its start and end.
- HunYuan-MoE extends HunYuan (dense): top-k renormalised, an ungated shared MLP as wide as
  each expert; ``num_experts`` or ``moe_topk`` per layer (lists) are refused.
- Phi-3.5-MoE extends Mixtral: SparseMixer's routing (``router_jitter_noise`` its distance),
  LayerNorm with its shift, ``attention_bias`` on all four projections, ``lm_head_bias``.
- FlexOlmo extends OLMo 2: OLMoE's routing behind OLMo 2's norms after each sub-layer.
- MiniMax-M2 extends OLMoE: Mixtral's names, sigmoid scores chosen with a score bias
  (renormalised), rotary on ``rotary_dim`` of each head.

Only designs whose every layer routes are read (``decoder_sparse_step`` / ``mlp_only_layers``
mixing dense layers in are refused: a zoo config has one MLP for all layers). Router jitter
(training only) and OLMoE's ``clip_qkv`` are refused. ``router_aux_loss_coef`` becomes the
``aux_loss_weight`` when ``output_router_logits`` is on (transformers adds the term only then).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import Tensor

from zoo.plugin import Converter, Count, Experts, F, Family, Fraction, ModelConfig, Rule, W
from zoo_modern.families.llama_kin import ERNIE4_5, GRANITE_SWA, HUNYUAN, LAYER_TYPES
from zoo_modern.families.llama_like import (
    GRANITE,
    HEAD_DIM,
    LLAMA,
    MISTRAL,
    OLMO2,
    QK_NORMS,
    QWEN2,
    QWEN3,
    has_qkv_bias,
    head_dim,
    llama_read,
)
from zoo_modern.families.readers import IGNORED, Rotary, periodic, qknorm, refuse_unless
from zoo_modern.mlp import swiglu_hidden
from zoo_modern.moe import MoeOptions

Maker = Callable[[str, tuple[str, ...], ModelConfig], Rule]
EXPERTS = ("num_local_experts", "num_experts", "num_experts_per_tok")  # bounded before a rule per expert
EVERY_LAYER = "every layer must route (a zoo config has one MLP for all layers)"
ROUTING = (
    "num_local_experts num_experts num_experts_per_tok moe_intermediate_size norm_topk_prob output_router_logits "
    "shared_expert_intermediate_size decoder_sparse_step mlp_only_layers router_aux_loss_coef"
).split()


def options(config: ModelConfig) -> MoeOptions:
    return MoeOptions.model_validate(config.mlp.options)


def routes(config: ModelConfig) -> bool:
    """Whether a layer's MLP (``config.layer(i)``) is the mixture."""
    return config.mlp.name == "moe"


def dense(config: ModelConfig) -> bool:
    return not routes(config)


def has_shared(config: ModelConfig) -> bool:
    return routes(config) and bool(options(config).shared_hidden)


def unlike(config: ModelConfig, arch: str, wanted: Mapping[str, Any]) -> list[str]:
    """A blocker per routing option of ``config`` other than ``wanted`` (how ``arch`` routes)."""
    o = options(config)
    return [f"mlp.{k}={getattr(o, k)!r} ({arch} routes by {v!r})" for k, v in wanted.items() if getattr(o, k) != v]


def also_at(old: str, new: str, make: Maker | None = None) -> Maker:
    """A rule maker: the tensor under its stored name, or (transformers 5's own layout) under that
    name with ``old`` replaced by ``new``; ``make``: how either is read (a copy by default)."""

    def build(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
        one = make or (lambda z, n, c: Rule.copy(z, n[0]))
        return replace(one(zoo, names, config), also=(one(zoo, (names[0].replace(old, new),), config),))

    return build


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
    shared: bool | None = False  # None: an optional shared expert the family reads itself
    sparse_layers: bool = False
    shared_width: str = "shared_expert_intermediate_size"
    shared_gate: bool = True  # Qwen2-MoE's sigmoid gate on the shared expert (Llama 4's has none)
    top_k_field: str = "num_experts_per_tok"

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
        mlp = {"name": "moe", "n_experts": int(experts), "top_k": int(hf.get(self.top_k_field) or top_k)}
        mlp |= {"hidden": int(hf.get(self.hidden_field) or hidden), "aux_loss_weight": aux}
        mlp["normalize_top_k"] = True if self.always_normalized else bool(hf.get("norm_topk_prob", normalized))
        if self.shared:
            mlp |= {"shared_hidden": int(hf.get(self.shared_width) or 5632), "shared_gate": self.shared_gate}
        return {**fields, "mlp": mlp}

    def write(self, config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
        o = options(config)
        out = {**hf, "intermediate_size": config.d_ff or expert_hidden(config), self.experts_field: o.n_experts}
        out |= {self.hidden_field: expert_hidden(config), self.top_k_field: o.top_k}
        out |= {"output_router_logits": o.aux_loss_weight > 0, "router_aux_loss_coef": o.aux_loss_weight}
        out |= {} if self.always_normalized else {"norm_topk_prob": o.normalize_top_k}
        out |= {self.shared_width: o.shared_hidden} if self.shared else {}
        return out | ({"decoder_sparse_step": 1, "mlp_only_layers": []} if self.sparse_layers else {})

    def blockers(self, config: ModelConfig, arch: str) -> list[str]:
        if config.mlp.name != "moe":
            return []  # named by the table's mlp
        o, blockers = options(config), []
        if self.always_normalized and not o.normalize_top_k:
            blockers.append(f"normalize_top_k=false ({arch} always renormalises the top-k weights)")
        if self.shared is not None and bool(o.shared_hidden) != self.shared:
            blockers.append(f"a shared expert {'missing' if self.shared else 'present'} ({arch})")
        if self.shared and o.shared_gate != self.shared_gate:
            blockers.append(f"shared_gate={str(o.shared_gate).lower()} ({arch}'s shared expert differs)")
        if self.shared and self.shared_width == self.hidden_field and o.shared_hidden != expert_hidden(config):
            blockers.append(f"a shared expert of width {o.shared_hidden} ({arch}'s is as wide as each expert)")
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
    fields = {name: F("", None, Experts if name in EXPERTS else Any) for name in ROUTING}
    fields["router_jitter_noise"] = F.must(0.0, "noise on the router's input in training is not modelled", Fraction)
    fields |= changes.pop("fields", {})
    layer: dict[str, Any] = {f"mlp.{p}.weight": None for p in ("gate", "up", "down")}
    layer["mlp.router.weight"] = W(f"{routing.block}.gate.weight", make=routing.experts)
    return parent.derive(
        architecture,
        fields=fields,
        zoo={"mlp": {"name": "moe"}} | changes.pop("zoo", {}),
        layer=layer | changes.pop("layer", {}),
        read=(routing.read, *changes.pop("read", ())),
        write=(routing.write, *changes.pop("write", ())),
        blockers=(routing.blockers, *changes.pop("blockers", ())),
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


def granite_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """Granite-MoE's router (``router.layer``) and experts, stored stacked as the zoo holds
    them: ``input_linear`` (E, 2 x hidden, d), rows [gate | up], and ``output_linear``;
    transformers 5's own names (``router.weight``, ``experts.gate_up_proj``) read too."""
    z, h = zoo.removesuffix("router.weight"), names[0].removesuffix("router.layer.weight")
    pairs = [("router.weight", "router.layer.weight", "router.weight")]
    pairs += [("experts.gate_up.weight", "input_linear.weight", "experts.gate_up_proj")]
    pairs += [("experts.down.weight", "output_linear.weight", "experts.down_proj")]
    return [replace(Rule.copy(z + a, h + b), also=(Rule.copy(z + a, h + c),)) for a, b, c in pairs]


def granite_shared(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """A shared expert of ``shared_intermediate_size`` (0: none), ungated, gate and up fused."""
    width = int(hf.get("shared_intermediate_size") or 0)
    return {**fields, "mlp": {**fields["mlp"], "shared_hidden": width, "shared_gate": False, "shared_fused": True}}


def granite_shared_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    return {**hf, "shared_intermediate_size": options(config).shared_hidden}


def granite_shared_blockers(config: ModelConfig, arch: str) -> list[str]:
    o = options(config)
    wrong = o.shared_hidden and (o.shared_gate or not o.shared_fused)
    return [f"a gated or unfused shared expert ({arch}'s is ungated, gate and up one input_linear)"] if wrong else []


GRANITE_ROUTING = Routing("block_sparse_moe", experts_field="num_local_experts", hidden_field="intermediate_size", always_normalized=True)  # fmt: skip
# Granite-MoE extends Granite: every MLP top-k routed (softmax over the top k: renormalised), experts stacked.
GRANITE_MOE = routed(
    GRANITE,
    "GraniteMoeForCausalLM",
    GRANITE_ROUTING,
    model_type="granitemoe",
    description="Granite-MoE: Granite's multipliers, top-k routed SwiGLU experts stored stacked",
    layer={"mlp.router.weight": W("block_sparse_moe.router.layer.weight", make=granite_experts)},
)


SHARED_MLP = (("gate_up", "input_linear"), ("down", "output_linear"))
# Granite-MoE-Shared extends Granite-MoE: an ungated shared expert, gate and up one input_linear.
GRANITE_MOE_SHARED = routed(
    GRANITE,
    "GraniteMoeSharedForCausalLM",
    replace(GRANITE_ROUTING, shared=None),
    model_type="granitemoeshared",
    description="Granite-MoE-Shared: Granite-MoE with an ungated shared SwiGLU expert",
    fields={"shared_intermediate_size": F("", None, Count)},
    layer={"mlp.router.weight": GRANITE_MOE.layer["mlp.router.weight"]}
    | {f"mlp.shared.{z}.weight": W(f"shared_mlp.{h}.weight", when=has_shared) for z, h in SHARED_MLP},
    read=(granite_shared,),
    write=(granite_shared_write,),
    blockers=(granite_shared_blockers,),
)


def native_first(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """Granite-MoE's rules, written under transformers 5's names (Granite-MoE-SWA reads no others)."""
    return [replace(r.also[0], also=(replace(r, also=()),)) for r in granite_experts(zoo, names, config)]


# Granite-MoE-SWA extends Granite-MoE-Shared: Granite SWA's sinks, windows on 3 layers of 4 and rotary base per layer.
GRANITE_MOE_SWA = GRANITE_MOE_SHARED.derive(
    "GraniteMoeSWAForCausalLM",
    model_type="granitemoe_swa",
    description="Granite-MoE-SWA: Granite-MoE-Shared's experts, Granite SWA's sinks, windows and rotary bases per layer",
    fields={**LAYER_TYPES, "layer_rope_theta": F("", None)},
    zoo={"attention": GRANITE_SWA.zoo["attention"]},
    layer={"attn.sinks": "self_attn.sinks", "mlp.router.weight": W("block_sparse_moe.router.layer.weight", make=native_first)},
    engine_features=GRANITE_SWA.engine_features,
    read=GRANITE_SWA.read[-2:], write=GRANITE_SWA.write[-1:], blockers=GRANITE_SWA.blockers[-1:],
)  # fmt: skip


def moe_layers(hf: Mapping[str, Any], layers: int) -> list[bool]:
    """ERNIE 4.5-MoE's routed layers: every ``moe_layer_interval``-th from ``moe_layer_start_index`` to the end index."""
    given = {k: hf.get(k) for k in ("moe_layer_start_index", "moe_layer_end_index", "moe_layer_interval")}
    start, end, every = (int(d if v is None else v) for v, d in zip(given.values(), (1, -1, 1), strict=True))
    end = layers - 1 if end == -1 else end
    return [(i + 1) % max(every, 1) == 0 and start <= i <= end for i in range(layers)]


def ernie_moe_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Softmax scores chosen with the score bias, renormalised; ungated shared experts
    (``moe_num_shared_experts`` x ``moe_intermediate_size``); dense SwiGLU layers elsewhere."""
    shared = int(hf.get("moe_num_shared_experts", 2) or 0) * fields["mlp"]["hidden"]
    mlp = {**fields["mlp"], "score_bias": True, "shared_hidden": shared, "shared_gate": False}
    swiglu = {"mlp": {"name": "swiglu", "hidden": fields["d_ff"]}}
    pattern = periodic([{} if moe else swiglu for moe in moe_layers(hf, fields["n_layers"])])
    return {**fields, "mlp": mlp, "layer_pattern": [] if pattern == [{}] else pattern}


def ernie_moe_layers(config: ModelConfig) -> dict[str, int] | None:
    """The start, end and interval fields that give ``config``'s routed layers (None: none do)."""
    routed_at = [routes(config.layer(i)) for i in range(config.n_layers)]
    at = [i for i, r in enumerate(routed_at) if r] or [0]
    first, last = at[0], at[-1]
    for every in range(1, config.n_layers + 1):
        found = {"moe_layer_start_index": first, "moe_layer_end_index": last, "moe_layer_interval": every}
        if moe_layers(found, config.n_layers) == routed_at:
            return found
    return None


def ernie_moe_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    o = options(config)
    width = next((config.layer(i).mlp.options.get("hidden") for i in range(config.n_layers) if dense(config.layer(i))), None)  # fmt: skip
    out = {**hf, **(ernie_moe_layers(config) or {}), "moe_num_shared_experts": o.shared_hidden // expert_hidden(config)}
    return out | {"intermediate_size": width or config.d_ff or expert_hidden(config), "moe_norm_min": 1e-12}


def ernie_moe_blockers(config: ModelConfig, arch: str) -> list[str]:
    o, blockers = options(config), [] if ernie_moe_layers(config) else [f"routed layers no interval gives ({arch})"]
    wanted = {"scoring": "softmax", "score_bias": True, "shared_gate": False, "n_groups": 1, "routed_scale": 1.0}
    blockers += unlike(config, arch, wanted)
    return blockers + ([f"mlp.shared_hidden={o.shared_hidden} ({arch}: experts wide)"] if o.shared_hidden % expert_hidden(config) else [])  # fmt: skip


def one_row(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
    """The score bias, stored as one row (1, E) (ERNIE's ``moe_statics``), held as (E,)."""
    return Rule(zoo, names, lambda ts: ts[0].reshape(-1), lambda t: [t.reshape(1, -1)])


GATE_UP_DOWN = ("gate", "up", "down")
SCORE_ROW = also_at("mlp.", "mlp.gate.", one_row)  # under the router in transformers 5's own layout
ERNIE_MOE_FIELDS = {"moe_num_experts": F("", None, Experts), "moe_k": F("", None, Experts)}
ERNIE_MOE_FIELDS |= {f"moe_layer_{k}": F("", None, int) for k in ("start_index", "end_index", "interval")}
ERNIE_MOE_FIELDS |= {"moe_num_shared_experts": F("", None, int), "num_nextn_predict_layers": IGNORED}
ERNIE_MOE_FIELDS |= {
    "moe_norm_min": IGNORED
}  # the floor of the top-k sum it renormalises by: softmax scores never reach it
# ERNIE 4.5-MoE extends ERNIE 4.5: softmax routing chosen with a score bias, renormalised, shared experts, dense layers.
ERNIE4_5_MOE = routed(
    ERNIE4_5,
    "Ernie4_5_MoeForCausalLM",
    Routing(
        experts_field="moe_num_experts",
        top_k_field="moe_k",
        defaults=(64, 6, 1536, True),
        always_normalized=True,
        shared=None,
    ),  # fmt: skip
    model_type="ernie4_5_moe",
    description="ERNIE 4.5-MoE: ERNIE 4.5's layout, softmax routing with a score bias, shared experts, dense layers",
    fields=ERNIE_MOE_FIELDS,
    layer={f"mlp.{p}.weight": W(f"mlp.{p}_proj.weight", when=dense) for p in ("gate", "up", "down")}
    | {"mlp.router.weight": W("mlp.gate.weight", when=routes, make=Routing().experts)}
    | {"mlp.score_bias.bias": W("mlp.moe_statics.e_score_correction_bias", when=routes, make=SCORE_ROW)}
    | {f"mlp.shared.{p}.weight": W(f"mlp.shared_experts.{p}_proj.weight", when=has_shared) for p in GATE_UP_DOWN},
    engine_features=frozenset({"layer_pattern"}),
    read=(ernie_moe_read,),
    write=(ernie_moe_write,),
    blockers=(ernie_moe_blockers,),
)


def hunyuan_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """The router under ``gate.wg``, the experts as the other families store them."""
    _, *experts = Routing().experts(zoo, (names[0].removesuffix("wg.weight") + "weight",), config)
    return [Rule.copy(zoo, names[0]), *experts]


def shared_as_wide(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """An ungated shared expert as wide as each routed one (HunYuan-MoE's ``shared_mlp``)."""
    return {**fields, "mlp": {**fields["mlp"], "shared_hidden": fields["mlp"]["hidden"], "shared_gate": False}}


def shared_as_wide_blockers(config: ModelConfig, arch: str) -> list[str]:
    o = options(config)
    ok = o.shared_hidden == expert_hidden(config) and not o.shared_gate
    return [] if ok else [f"mlp.shared_hidden={o.shared_hidden} ({arch}: an ungated shared expert as wide as each)"]


# HunYuan-MoE extends HunYuan (dense): top-k renormalised softmax routing, an ungated shared MLP as wide as an expert.
HUNYUAN_MOE = routed(
    HUNYUAN,
    "HunYuanMoEV1ForCausalLM",
    Routing(
        hidden_field="intermediate_size",
        top_k_field="moe_topk",
        defaults=(1, 1, 11008, True),
        always_normalized=True,
        shared=None,
    ),  # fmt: skip
    model_type="hunyuan_v1_moe",
    description="HunYuan-MoE: HunYuan's attention, top-k routed experts beside an ungated shared MLP",
    fields={"moe_topk": F("", None, Experts)},
    layer={"mlp.router.weight": W("mlp.gate.wg.weight", make=hunyuan_experts)}
    | {f"mlp.shared.{p}.weight": f"mlp.shared_mlp.{p}_proj.weight" for p in ("gate", "up", "down")},
    read=(shared_as_wide,),
    blockers=(shared_as_wide_blockers,),
)

# FlexOlmo extends OLMo 2 as OLMoE extends Llama: OLMoE's routing behind OLMo 2's norms after each sub-layer.
FLEX_OLMO = routed(
    OLMO2,
    "FlexOlmoForCausalLM",
    Routing(hidden_field="intermediate_size", defaults=(7, 5, 11008, False)),
    model_type="flex_olmo",
    description="FlexOlmo: OLMo 2's layout (norms after each sub-layer, QK-norm), OLMoE's routed experts",
)


def sigmoid_routing(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Each expert's sigmoid scores, chosen with the score bias (V3's, without its groups)."""
    return {**fields, "mlp": {**fields["mlp"], "scoring": "sigmoid", "score_bias": True}}


def sigmoid_blockers(config: ModelConfig, arch: str) -> list[str]:
    return unlike(config, arch, {"scoring": "sigmoid", "score_bias": True, "n_groups": 1, "routed_scale": 1.0})


def minimax_rotary(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Rotary on ``rotary_dim`` of each head (the released files' field) or ``partial_rotary_factor``."""
    share, size = hf.get("rotary_dim"), fields["attention"]["head_dim"]
    given = "partial_rotary_factor" in hf or "partial_rotary_factor" in (hf.get("rope_parameters") or {})
    return MINIMAX_ROTARY.read({**hf, "partial_rotary_factor": share / size} if share and not given else hf, fields, where)  # fmt: skip


MINIMAX_ROTARY = Rotary(partial=True)
MINIMAX_BIAS = also_at("block_sparse_moe.", "mlp.")  # under mlp. in transformers 5's own layout
# MiniMax-M2 extends OLMoE: Mixtral's names, sigmoid scores chosen with a score bias, rotary on part of each head.
MINIMAX_M2 = routed(
    LLAMA,
    "MiniMaxM2ForCausalLM",
    Routing(
        "block_sparse_moe",
        ("w1", "w3", "w2"),
        "num_local_experts",
        "intermediate_size",
        (256, 8, 1536, True),
        always_normalized=True,
    ),  # fmt: skip
    fresh=("read", "write", "blockers"),
    model_type="minimax_m2",
    description="MiniMax-M2: OLMoE's QK-norm, sigmoid-routed experts with a score bias, partial rotary",
    fields={**OLMOE.fields, "clip_qkv": None, "head_dim": HEAD_DIM, "rotary_dim": F("", None, Count)},
    zoo=OLMOE.zoo,
    accepts=OLMOE.accepts,
    layer={**QK_NORMS, "mlp.score_bias.bias": W("block_sparse_moe.e_score_correction_bias", make=MINIMAX_BIAS)},
    before=(head_dim(128), llama_read, minimax_rotary),
    read=(sigmoid_routing,),
    write=(MINIMAX_ROTARY.write,),
    blockers=(MINIMAX_ROTARY.blockers, sigmoid_blockers),
)


def phimoe_read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """SparseMixer's routing (``router_jitter_noise`` its distance); ``attention_bias`` on q, k, v and the output."""
    bias, eps = bool(hf.get("attention_bias")), hf.get("router_jitter_noise")
    mlp = {**fields["mlp"], "scoring": "sparsemixer", "normalize_top_k": False, "mixer_eps": 0.01 if eps is None else float(eps)}  # fmt: skip
    return {**fields, "attention": {**fields["attention"], "qkv_bias": bias, "out_bias": bias}, "mlp": mlp}


def phimoe_write(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in hf.items() if k != "norm_topk_prob"}
    return {**out, "attention_bias": has_qkv_bias(config), "router_jitter_noise": options(config).mixer_eps}


def phimoe_blockers(config: ModelConfig, arch: str) -> list[str]:
    _, qkv, out = Converter.attention_layout(config)
    blockers = [] if qkv == out else [f"biases on q/k/v or the output alone ({arch}: attention_bias on all four)"]
    scoring = options(config).scoring if config.mlp.name == "moe" else "sparsemixer"
    return blockers + ([] if scoring == "sparsemixer" else [f"mlp.scoring={scoring!r} ({arch} routes by SparseMixer)"])


def phimoe_experts(zoo: str, names: tuple[str, ...], config: ModelConfig) -> list[Rule]:
    """Mixtral's, the router under ``mlp.router`` in transformers 5's own layout."""
    router, *experts = PHIMOE_ROUTING.experts(zoo, names, config)
    return [replace(router, also=(Rule.copy(zoo, names[0].replace("block_sparse_moe.gate", "mlp.router")),)), *experts]


PHIMOE_ROUTING = Routing("block_sparse_moe", ("w1", "w3", "w2"), "num_local_experts", "intermediate_size", (16, 2, 6400, False))  # fmt: skip
NORM_BIASES = {f"{z}.bias": f"{h}.bias" for z, h in (("attn_residual.norm", "input_layernorm"), ("mlp_residual.norm", "post_attention_layernorm"))}  # fmt: skip
# Phi-3.5-MoE extends Mixtral: SparseMixer's routing, LayerNorm with its shift, optional biases on the projections and the head.
PHIMOE = routed(
    MISTRAL,
    "PhimoeForCausalLM",
    PHIMOE_ROUTING,
    model_type="phimoe",
    description="Phi-3.5-MoE: Mixtral's layout with SparseMixer routing, LayerNorm, optional biases",
    fields={"attention_bias": F("", None, bool), "router_jitter_noise": F("", None, Fraction)}
    | {"input_jitter_noise": F.must(0.0, "noise on the experts' input in training is not modelled", Fraction)}
    | {"lm_head_bias": F("head_bias", False, bool)},
    zoo={"norm": {"name": "layernorm", "shift": True}, "attention": {"name": "sdpa"}},
    accepts={"head_bias": (True, False)},
    layer={**NORM_BIASES, "attn.out.bias": W("self_attn.o_proj.bias", when=lambda c: Converter.attention_layout(c)[2])}
    | {"mlp.router.weight": W("block_sparse_moe.gate.weight", make=phimoe_experts)},
    top={"final_norm.bias": "norm.bias", "head.bias": W("lm_head.bias", when=lambda c: c.head_bias)},
    top_level=("lm_head.weight", "lm_head.bias"),
    read=(phimoe_read,),
    write=(phimoe_write,),
    blockers=(phimoe_blockers,),
)

FAMILIES: tuple[Family, ...] = (MIXTRAL, QWEN2_MOE, QWEN3_MOE, OLMOE, GRANITE_MOE, GRANITE_MOE_SHARED, ERNIE4_5_MOE)
FAMILIES += (GRANITE_MOE_SWA, HUNYUAN_MOE, PHIMOE, FLEX_OLMO, MINIMAX_M2)
