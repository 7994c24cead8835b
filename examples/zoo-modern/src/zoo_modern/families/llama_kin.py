"""Llama's lineage, continued: the dense families of 2024-2025 that extend a table of
``llama_like`` by a field or two (Ministral, CWM, Ministral 3, Seed-OSS, Helium, ERNIE 4.5, GLM,
GLM-4, OLMo 3, Cohere 2, EXAONE 4, OLMo, HunYuan, HyperCLOVA X, Granite SWA, SmolLM3); the ungated-MLP ones are in
``ungated``.

Each family opens with the one it extends and how; the table says the rest.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from zoo.plugin import Converter, Count, F, Family, Fraction, ModelConfig, Positive, W
from zoo_modern.families.llama_like import (
    COHERE,
    GRANITE,
    HEAD_DIM,
    LLAMA,
    LLAMA_ONLY,
    LLAMA_ROTARY,
    MISTRAL,
    NO_BIAS,
    OLMO2,
    PHI3,
    fused_glu,
    head_dim,
    llama_read,
)
from zoo_modern.families.readers import (
    IGNORED,
    Rotary,
    layer_positions,
    layer_windows,
    periodic,
    qknorm,
    refuse_unless,
    window_blockers,
    window_per_layer,
    with_windows,
)

Reader = Callable[[Mapping[str, Any], dict[str, Any], str], dict[str, Any]]


def typed_windows(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """``sliding_window`` on the layers ``layer_types`` names sliding (all, where it is unset)."""
    windows = layer_windows(hf, fields["n_layers"], fields["max_seq_len"], hf.get("sliding_window"))
    return with_windows(fields, windows)


def write_layer_types(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    windows = window_per_layer(config)
    sizes = {w for w in windows if w is not None}
    types = ["sliding_attention" if w is not None else "full_attention" for w in windows]
    return {**hf, "sliding_window": sizes.pop() if sizes else None, "layer_types": types}


def default_types(window: int | None, sliding: Callable[[int], bool]) -> Reader:
    """A reader of ``sliding_window`` (``window`` by default) on the layers ``layer_types``
    names sliding, or where it is unset, on the layers ``sliding(i)`` picks."""

    def read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        layers = fields["n_layers"]
        types = hf.get("layer_types") or ["sliding_attention" if sliding(i) else "full_attention" for i in range(layers)]  # fmt: skip
        size = hf.get("sliding_window", window)
        return with_windows(fields, layer_windows({"layer_types": types}, layers, fields["max_seq_len"], size))

    return read


LAYER_TYPES = {"sliding_window": F("", None, Count), "layer_types": F("", None)}
# Ministral extends Mistral: the window on the layers layer_types names sliding.
MINISTRAL = MISTRAL.derive(
    "MinistralForCausalLM",
    model_type="ministral",
    description="Ministral: Mistral's layout, the sliding window on the layers layer_types names",
    fields=LAYER_TYPES,
    engine_features=frozenset({"window", "layer_pattern"}),
    fresh=("read", "write", "blockers"),
    read=(*LLAMA.read, typed_windows),
    write=(*LLAMA.write, write_layer_types),
    blockers=(*LLAMA.blockers, window_blockers),
)

QKNORM_NONE = {"name": "qknorm", "qk_norm": "none"}  # qknorm for its head_dim alone, no norms
# CWM extends Ministral: an explicit head_dim, a window of 8192 on 3 layers of 4 (full at 0, 4, ...), Llama 3's rotary.
CWM = MINISTRAL.derive(
    "CwmForCausalLM",
    model_type="cwm",
    description="CWM: Llama's layout, an explicit head_dim, windows on 3 layers of 4",
    fields={"head_dim": HEAD_DIM, "mlp_bias": LLAMA.fields["mlp_bias"]}
    | {"pretraining_tp": LLAMA.fields["pretraining_tp"], "max_position_embeddings": F("max_seq_len", 131072, Count)},
    zoo={"attention": qknorm("none")},
    accepts={"attention": ()},
    fresh=("read",),
    read=(head_dim(128), *LLAMA.read, default_types(8192, lambda i: i % 4 != 0)),
)
OUT_BIAS = {"attn.out.bias": W("self_attn.o_proj.bias", when=lambda c: Converter.attention_layout(c)[2])}


def llama4_scaling(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Ministral 3's queries at position p times 1 + beta * log1p(floor(p / original_max)),
    from its rope_parameters' llama_4_scaling_beta and original_max_position_embeddings."""
    params: Mapping[str, Any] = hf.get("rope_parameters") or {}
    beta: Any = params.get("llama_4_scaling_beta")
    floor: Any = params.get("original_max_position_embeddings")
    for name, value, least in (("llama_4_scaling_beta", beta, 0), ("original_max_position_embeddings", floor, 1)):
        refuse_unless(isinstance(value, (int, float)) and not isinstance(value, bool) and value >= least, where, f"rope_parameters.{name}", value, f"Ministral 3's query scaling needs a number >= {least}")  # fmt: skip
    attention = {**fields["attention"], "temperature": float(beta), "temperature_floor": int(floor)}
    return {**fields, "attention": attention | {"temperature_offset": 0, "temperature_by_token": True}}


def llama4_scaling_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    options = config.attention.options
    extra = {"llama_4_scaling_beta": options.get("temperature", 0.0), "original_max_position_embeddings": options.get("temperature_floor", 8192)}  # fmt: skip
    return {**hf, "rope_parameters": {**hf["rope_parameters"], **extra}}


# Ministral 3 extends Mistral: an explicit head_dim, YaRN rotary, every query scaled by its position (Llama 4's rule).
MINISTRAL3 = MISTRAL.derive(
    "Ministral3ForCausalLM",
    model_type="ministral3",
    description="Ministral 3: Mistral's layout, an explicit head_dim, queries scaled by position as Llama 4's NoPE layers",
    fields={"head_dim": HEAD_DIM, "max_position_embeddings": F("max_seq_len", 262144, Count)},
    zoo={"attention": qknorm("none", temperature_offset=0, temperature_by_token=True)},
    accepts={"attention": ()},
    before=(head_dim(128),),
    read=(llama4_scaling,),
    write=(llama4_scaling_out,),
)


# Seed-OSS extends Llama: an explicit head_dim (128), biases on q/k/v (and optionally the output), a residual dropout.
SEED_OSS = LLAMA.derive(
    "SeedOssForCausalLM",
    model_type="seed_oss",
    description="Seed-OSS: Llama's layout with q/k/v biases, an explicit head_dim and a residual dropout",
    fields={"attention_bias": F("attention.qkv_bias", True, bool), "head_dim": HEAD_DIM}
    | {"attention_out_bias": F("attention.out_bias", False, bool)}
    | {"residual_dropout": F("dropout.residual", 0.1, Fraction)},
    zoo={"attention": QKNORM_NONE},
    accepts={"attention": ()},
    layer=OUT_BIAS,
    before=(head_dim(128),),
)

# Helium extends Llama: rotary pairs interleaved (read as halves, q and k reordered, as Cohere's).
HELIUM = LLAMA.derive(
    "HeliumForCausalLM",
    model_type="helium",
    description="Helium: Llama's layout with interleaved rotary pairs (q and k reordered on the way in)",
    fields={"max_position_embeddings": F("max_seq_len", 4096, Count)},
    layer={"attn.qkv.weight": COHERE.layer["attn.qkv.weight"]},
)

# ERNIE 4.5 extends Helium: an explicit head_dim (128), a tied head, no biases (use_bias).
ERNIE4_5 = HELIUM.derive(
    "Ernie4_5ForCausalLM",
    model_type="ernie4_5",
    description="ERNIE 4.5: Helium's interleaved rotary, an explicit head_dim, a tied head",
    fields={**NO_BIAS, "head_dim": HEAD_DIM, "tie_word_embeddings": F("tie_embeddings", True, bool)}
    | {"use_bias": F.must(False, "biases on every projection are not modelled", bool)},
    zoo={"attention": QKNORM_NONE},
    accepts={"attention": ()},
    before=(head_dim(128),),
)


GLM_ROTARY = Rotary(share=0.5, partial=True, interleaved=True)
# GLM extends Llama: q/k/v biases, gate and up fused (as Phi-3's), interleaved rotary on half of each head.
GLM = LLAMA.derive(
    "GlmForCausalLM",
    model_type="glm",
    description="GLM-4 (0414's forerunner): q/k/v biases, fused gate_up_proj, interleaved rotary on half of each head",
    fields={"mlp_bias": None, "attention_bias": F("attention.qkv_bias", True, bool), "head_dim": HEAD_DIM}
    | {"max_position_embeddings": F("max_seq_len", 131072, Count)},
    zoo={"attention": {**QKNORM_NONE, "out_bias": False}, "mlp": PHI3.zoo["mlp"], "activation": "silu"}
    | {"position": {"name": "rotary", "interleaved": True}},
    accepts={"attention": ()},
    layer={"mlp.gate.weight": None, "mlp.up.weight": None, "mlp.gate_up.weight": "mlp.gate_up_proj.weight"},
    fresh=("read", "write", "blockers"),
    before=(head_dim(None),),
    read=(llama_read, GLM_ROTARY.read),
    write=(GLM_ROTARY.write,),
    blockers=(GLM_ROTARY.blockers, fused_glu),
)

SANDWICH = {"attn_residual.norm_in.weight": "input_layernorm.weight", "mlp_residual.norm_out.weight": "post_mlp_layernorm.weight"}  # fmt: skip
SANDWICH |= {"attn_residual.norm_out.weight": "post_self_attn_layernorm.weight", "mlp_residual.norm_in.weight": "post_attention_layernorm.weight"}  # fmt: skip
# GLM-4 extends GLM: a norm before and after each sub-layer (sandwich).
GLM4 = GLM.derive(
    "Glm4ForCausalLM",
    model_type="glm4",
    description="GLM-4 (0414): GLM's layout with a norm before and after each sub-layer",
    zoo={"placement": "sandwich"},
    layer={"attn_residual.norm.weight": None, "mlp_residual.norm.weight": None, **SANDWICH},
)

KINDS = ("sliding_attention", "full_attention")
VARIES = ("attention", "position")  # what a layer of a family with rotary on some layers only may change


def one_rope_table(hf: Mapping[str, Any], where: str) -> Mapping[str, Any]:
    """``config.json`` with ``rope_parameters`` per layer type (OLMo 3's) as one table, where both are the same."""
    params = hf.get("rope_parameters") or {}
    if not set(KINDS) & set(params):  # an older file: transformers scales the full layers' rotary only by rope_scaling
        scaling = hf.get("rope_scaling") or {}
        kind = scaling.get("rope_type", scaling.get("type"))
        why = "transformers' OLMo 3 scales only the full-attention layers' rotary; the zoo reads one rotary for every layer"
        refuse_unless(kind in (None, "default"), where, "rope_scaling", scaling, why)
        return hf
    tables = [dict(params.get(kind) or {}) for kind in KINDS]
    why = "the zoo reads one rotary for every layer; these tables differ"
    refuse_unless(tables[0] == tables[1], where, "rope_parameters", params, why)
    return {**hf, "rope_parameters": tables[0]}


def rope_per_type(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    return LLAMA_ROTARY.read(one_rope_table(hf, where), fields, where)


def write_rope_per_type(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    return {**hf, "rope_parameters": {kind: hf["rope_parameters"] for kind in KINDS}}


# OLMo 3 extends OLMo 2: sliding windows on the layers layer_types names (3 of 4), a rotary table per layer type.
OLMO3 = OLMO2.derive(
    "Olmo3ForCausalLM",
    model_type="olmo3",
    description="OLMo 3: OLMo 2's layout, sliding windows on 3 layers of 4 (layer_types)",
    fields=LAYER_TYPES,
    engine_features=frozenset({"window", "layer_pattern"}),
    fresh=("read", "write", "blockers"),
    before=(head_dim(None),),
    read=(llama_read, rope_per_type, typed_windows),
    write=(LLAMA_ROTARY.write, write_rope_per_type, write_layer_types),
    blockers=(LLAMA_ROTARY.blockers, window_blockers),
)


def rotary_on_sliding(without_window: bool) -> Reader:
    """A reader of rotary and the window on the layers ``layer_types`` names sliding, neither
    on the full ones (Cohere 2's, EXAONE 4's); with no ``sliding_window``, rotary on every
    layer (``without_window``, EXAONE 4) or on none (Cohere 2)."""

    def read(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        layers, window = fields["n_layers"], hf.get("sliding_window")
        every = hf.get("sliding_window_pattern", 4) if window is not None else 0
        refuse_unless(isinstance(every, int) and not isinstance(every, bool), where, "sliding_window_pattern", every, "give a whole number")  # fmt: skip
        types = hf.get("layer_types") or ["sliding_attention" if every and (i + 1) % every else "full_attention" for i in range(layers)]  # fmt: skip
        if window is None and without_window:
            return fields
        windows = layer_windows({"layer_types": types}, layers, fields["max_seq_len"], window)
        turns = [kind == "sliding_attention" and window is not None for kind in types]
        entries = [({"attention": {"window": w}} if w else {}) if turn else {"position": "none"} for turn, w in zip(turns, windows, strict=True)]  # fmt: skip
        return {**fields, "layer_pattern": periodic(entries)} if any(entries) else fields

    return read


def rotary_on_sliding_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    turns = [config.layer(i).position.name != "none" for i in range(config.n_layers)]
    sizes = {w for w in window_per_layer(config) if w is not None}
    types = ["sliding_attention" if turn else "full_attention" for turn in turns]
    return {**hf, "sliding_window": sizes.pop() if sizes else config.max_seq_len, "layer_types": types}


def rotary_on_sliding_blockers(config: ModelConfig, arch: str) -> list[str]:
    blockers = window_blockers(config, arch, VARIES) + layer_positions(config, arch)
    windows, sizes = window_per_layer(config), {w for w in window_per_layer(config) if w is not None}
    for i in range(config.n_layers):
        turns = config.layer(i).position.name != "none"
        if turns != (windows[i] is not None) and sizes:
            blockers.append(f"layer {i} has {'rotary' if turns else 'a window'} alone ({arch} has both or neither)")
    return blockers


WINDOW_PATTERN = {**LAYER_TYPES, "sliding_window_pattern": F("", None)}
# Cohere 2 extends Cohere: windows and rotary on the layers layer_types names sliding, no positions on the full ones.
COHERE2 = COHERE.derive(
    "Cohere2ForCausalLM",
    model_type="cohere2",
    description="Cohere 2 (Command R7B, A): Cohere's layout, rotary and a window on 3 layers of 4, no positions on the rest",
    fields={**WINDOW_PATTERN, "max_position_embeddings": F("max_seq_len", 8192, Count)},
    engine_features=frozenset({"window", "layer_pattern"}),
    read=(rotary_on_sliding(False),),
    write=(rotary_on_sliding_out,),
    blockers=(rotary_on_sliding_blockers,),
)

# EXAONE 4 extends OLMo 2: QK-norm per head; Cohere 2's windows, rotary on every layer without a sliding_window.
EXAONE4 = OLMO2.derive(
    "Exaone4ForCausalLM",
    model_type="exaone4",
    description="EXAONE 4: OLMo 2's norms after each sub-layer, QK-norm per head, Cohere 2's windows (rotary on the sliding layers)",
    fields={**WINDOW_PATTERN, "head_dim": None, "attention_bias": None},
    zoo={"attention": qknorm("head")},
    engine_features=frozenset({"window", "layer_pattern"}),
    read=(rotary_on_sliding(True),),
    write=(rotary_on_sliding_out,),
    blockers=(rotary_on_sliding_blockers,),
)


def olmo_eps(config: ModelConfig, arch: str) -> list[str]:
    return [] if config.norm_eps == 1e-5 else [f"norm_eps={config.norm_eps} ({arch}'s norms divide with 1e-5)"]


NORM_WEIGHTS = {"attn_residual.norm.weight": None, "mlp_residual.norm.weight": None}
# OLMo extends Llama: LayerNorm without a learned scale or shift; q/k/v never clamped here (clip_qkv).
OLMO = LLAMA.derive(
    "OlmoForCausalLM",
    model_type="olmo",
    description="OLMo: Llama's layout with LayerNorm that learns no scale or shift",
    fields={**LLAMA_ONLY, "rms_norm_eps": None}
    | {"clip_qkv": F.must(None, "clamping q, k and v is not modelled (OLMo 1.7's clip_qkv)")},
    zoo={"norm": "layernorm_plain", "norm_eps": 1e-5},
    layer=NORM_WEIGHTS,
    top={"final_norm.weight": None},
    blockers=(olmo_eps,),
)


def ntk_alpha(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """HunYuan's "dynamic" rotary with a fixed ``alpha``, which only stretches the base:
    theta * alpha^(d / (d - 2)), read as plain rotary of that base."""
    params = dict(hf.get("rope_parameters") or {})
    if params.get("rope_type", params.get("type")) == "dynamic" and params.get("alpha"):
        dim = fields["attention"].get("head_dim") or fields["d_model"] // fields["n_heads"]
        theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0))) * float(params["alpha"]) ** (
            dim / (dim - 2)
        )
        hf = {**hf, "rope_parameters": {"rope_type": "default", "rope_theta": theta}, "rope_scaling": None}
    return LLAMA_ROTARY.read(hf, fields, where)


# HunYuan (dense) extends Llama: an RMSNorm per head on q and k after the rotation; NTK alpha read as a rotary base.
HUNYUAN = LLAMA.derive(
    "HunYuanDenseV1ForCausalLM",
    model_type="hunyuan_v1_dense",
    description="HunYuan (dense): Llama's layout, QK-norm per head after the rotation, NTK-alpha rotary",
    fields={"mlp_bias": None, "eod_token_id": F("", None), "head_dim": HEAD_DIM},
    zoo={"attention": qknorm("head", qk_norm_after=True)},
    accepts={"attention": ()},
    layer={f"attn.{p}_norm.weight": f"self_attn.{n}_layernorm.weight" for p, n in (("q", "query"), ("k", "key"))},
    fresh=("read",),
    before=(head_dim(None),),
    read=(llama_read, ntk_alpha),
)

# HyperCLOVA X extends Granite: a norm after each sub-layer too (scaled sandwich), logits times logits_scaling.
HYPERCLOVAX = GRANITE.derive(
    "HyperCLOVAXForCausalLM",
    model_type="hyperclovax",
    description="HyperCLOVA X: Granite's multipliers, a norm before and after each sub-layer, logits times logits_scaling",
    fields={
        "attention_multiplier": F("attention.scale", None, Positive, out=GRANITE.fields["attention_multiplier"].out),
        "logits_scaling": F("logit_scale", 1.0, Positive),
        "use_post_norm": F.must(
            True, "HyperCLOVA X without its post-norms is Granite's layout: convert it as Granite", bool
        ),
    },
    zoo={"placement": {"name": "sandwich_scaled"}},
    layer={**NORM_WEIGHTS, **SANDWICH}
    | {"attn_residual.norm_out.weight": "post_norm1.weight", "mlp_residual.norm_out.weight": "post_norm2.weight"},
    read=(lambda hf, fields, where: {**fields, "logit_scale": float(hf.get("logits_scaling") or 1.0)},),
)


def per_layer_rotary(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """Granite SWA's layers: the window on those ``layer_types`` names sliding (a full layer
    every 4 by default), each layer's rotary base from ``layer_rope_theta`` (0: no rotary)."""
    layers, base = fields["n_layers"], fields["position"]["base"]
    types = hf.get("layer_types") or ["full_attention" if i % 4 == 0 else "sliding_attention" for i in range(layers)]
    thetas = hf.get("layer_rope_theta") or [base] * layers
    good = len(thetas) == layers and all(isinstance(t, (int, float)) and not isinstance(t, bool) and (t == 0 or t > 1) for t in thetas)  # fmt: skip
    refuse_unless(good, where, "layer_rope_theta", thetas, f"give {layers} rotary bases > 1 (0: no rotary)")
    windows = layer_windows({"layer_types": types}, layers, fields["max_seq_len"], hf.get("sliding_window", 128))
    entries: list[dict[str, Any]] = []
    for window, theta in zip(windows, thetas, strict=True):
        entry: dict[str, Any] = {"attention": {"window": window}} if window else {}
        if float(theta) != base:
            entry["position"] = {**fields["position"], "base": float(theta)} if theta else "none"
        entries.append(entry)
    return {**fields, "layer_pattern": periodic(entries)} if any(entries) else fields


def no_head_dim(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """The attention's head_dim as hidden_size / heads, the only one ``sinks`` has."""
    attention, plain = dict(fields["attention"]), fields["d_model"] // fields["n_heads"]
    refuse_unless(attention.pop("head_dim", plain) == plain, where, "head_dim", hf.get("head_dim"), f"the zoo's sinks attention has head_dim = hidden_size / num_attention_heads = {plain}")  # fmt: skip
    return {**fields, "attention": attention}


def per_layer_rotary_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    positions = [config.layer(i).position for i in range(config.n_layers)]
    thetas = [float(p.options.get("base", 10000.0)) if p.name == "rotary" else 0.0 for p in positions]
    return {**write_layer_types(config, hf), "layer_rope_theta": thetas}


def per_layer_rotary_blockers(config: ModelConfig, arch: str) -> list[str]:
    return window_blockers(config, arch, VARIES) + layer_positions(config, arch, bases=True)


# Granite SWA extends Granite: a learned sink per head, windows on 3 layers of 4, a rotary base per layer (0: none).
GRANITE_SWA = GRANITE.derive(
    "GraniteSWAForCausalLM",
    model_type="granite_swa",
    description="Granite SWA: Granite's multipliers, attention sinks, windows on 3 layers of 4, a rotary base per layer",
    fields={**LAYER_TYPES, "layer_rope_theta": F("", None), "max_position_embeddings": F("max_seq_len", 8192, Count)}
    | {"tie_word_embeddings": F("tie_embeddings", True, bool)},
    zoo={"attention": {"name": "sinks", "qkv_bias": False, "out_bias": False}},
    layer={"attn.sinks": "self_attn.sinks"},
    engine_features=frozenset({"scale", "window", "layer_pattern"}),
    read=(no_head_dim, per_layer_rotary),
    write=(per_layer_rotary_out,),
    blockers=(per_layer_rotary_blockers,),
)


def nope_layers(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """SmolLM3's layers: no rotary where ``no_rope_layers`` is 0 (every
    ``no_rope_layer_interval``-th, 4, by default); with ``use_sliding_window``, the window on
    the layers ``layer_types`` names sliding (by default the ones without rotary)."""
    layers, every = fields["n_layers"], int(hf.get("no_rope_layer_interval") or 4)
    rope = hf.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
    why = f"give {layers} of 1 (rotary) or 0 (none)"
    refuse_unless(len(rope) == layers and not set(rope) - {0, 1}, where, "no_rope_layers", rope, why)
    window = hf.get("sliding_window") if hf.get("use_sliding_window") else None
    types = hf.get("layer_types") or [
        "sliding_attention" if window is not None and not r else "full_attention" for r in rope
    ]
    windows = layer_windows({"layer_types": types}, layers, fields["max_seq_len"], window)
    entries = [
        ({} if r else {"position": "none"}) | ({"attention": {"window": w}} if w is not None else {})
        for r, w in zip(rope, windows, strict=True)
    ]
    return {**fields, "layer_pattern": periodic(entries)} if any(entries) else fields


def nope_layers_out(config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
    hf = write_layer_types(config, hf)
    rope = [int(config.layer(i).position.name != "none") for i in range(config.n_layers)]
    return {**hf, "no_rope_layers": rope, "use_sliding_window": hf["sliding_window"] is not None}


def nope_blockers(config: ModelConfig, arch: str) -> list[str]:
    return window_blockers(config, arch, VARIES) + layer_positions(config, arch)


# SmolLM3 extends Llama: no rotary (NoPE) every 4th layer, optional windows, a tied head.
SMOLLM3 = LLAMA.derive(
    "SmolLM3ForCausalLM",
    model_type="smollm3",
    description="SmolLM3: Llama's layout, no rotary (NoPE) every 4th layer, a tied head",
    fields={**LAYER_TYPES, "no_rope_layers": F("", None, list[int]), "no_rope_layer_interval": F("", None, Count)}
    | {"use_sliding_window": F("", None, bool), "tie_word_embeddings": F("tie_embeddings", True, bool)}
    | {"max_position_embeddings": F("max_seq_len", 32768, Count), "max_window_layers": IGNORED},  # in released files
    engine_features=frozenset({"window", "layer_pattern"}),
    read=(nope_layers,),
    write=(nope_layers_out,),
    blockers=(nope_blockers,),
)

FAMILIES: tuple[Family, ...] = (MINISTRAL, CWM, MINISTRAL3, SEED_OSS, HELIUM, ERNIE4_5, GLM, GLM4, OLMO3, COHERE2)
FAMILIES += (EXAONE4, OLMO, HUNYUAN, HYPERCLOVAX, GRANITE_SWA, SMOLLM3)
