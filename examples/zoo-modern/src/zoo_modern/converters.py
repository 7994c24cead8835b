"""Hugging Face converters for the families zoo-modern's parts build: Llama, Mistral,
Qwen2 and GPT-NeoX (Pythia), registered from ``plugin.py`` the way GPT-2's is from the
built-ins.

Each maps ``config.json`` to a zoo config (refusing, with ``InteropError``, any setting
the zoo would compute differently) and lists how every weight maps both ways. The
Llama family keeps q, k and v in separate matrices that the zoo's attention fuses into
one ``qkv`` ([q | k | v] rows); GPT-NeoX fuses them per head ([q_h | k_h | v_h] for
each head h), which is a reshape away from the zoo's order.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from torch import Tensor

from zoo.plugin import (
    Converter,
    Count,
    Epsilon,
    Fraction,
    HFFields,
    InteropError,
    ModelConfig,
    Positive,
    RopeTable,
    Rule,
)
from zoo_modern.mlp import swiglu_hidden
from zoo_modern.positions import rotary_dims

DEFAULT_ROPE = ("default", None)
# Hugging Face activation names with an exact zoo activation component.
ACTIVATIONS = {
    "gelu": "gelu",
    "gelu_new": "gelu_tanh",
    "gelu_fast": "gelu_tanh",
    "gelu_pytorch_tanh": "gelu_tanh",
    "relu": "relu",
    "silu": "silu",
}
ACTIVATIONS_OUT = {"gelu": "gelu", "gelu_tanh": "gelu_new", "relu": "relu", "silu": "silu"}


class LlamaFields(HFFields):
    """The config.json fields the Llama-family converters read (Llama, Mistral, Qwen2), typed."""

    not_null = ("max_position_embeddings", "rms_norm_eps")

    hidden_size: Count
    num_attention_heads: Count
    num_hidden_layers: Count
    intermediate_size: Count
    vocab_size: Count
    num_key_value_heads: Count | None = None
    head_dim: Count | None = None
    hidden_act: str = "silu"
    max_position_embeddings: Count | None = None
    rms_norm_eps: Epsilon | None = None
    rope_theta: Positive | None = None
    partial_rotary_factor: Fraction | None = None
    rope_parameters: RopeTable | None = None
    rope_scaling: RopeTable | None = None
    attention_dropout: Fraction | None = None
    tie_word_embeddings: bool | None = None
    attention_bias: bool | None = None
    mlp_bias: bool | None = None
    sliding_window: Count | None = None
    use_sliding_window: bool | None = None
    layer_types: list[str] | None = None


class NeoXFields(HFFields):
    """The config.json fields the GPT-NeoX converter reads, typed."""

    not_null = ("max_position_embeddings", "layer_norm_eps")

    hidden_size: Count
    num_attention_heads: Count
    num_hidden_layers: Count
    intermediate_size: Count
    vocab_size: Count
    hidden_act: str = "gelu"
    max_position_embeddings: Count | None = None
    layer_norm_eps: Epsilon | None = None
    rotary_pct: Fraction | None = None
    rotary_emb_base: Positive | None = None
    rope_parameters: RopeTable | None = None
    rope_scaling: RopeTable | None = None
    attention_dropout: Fraction | None = None
    hidden_dropout: Fraction | None = None
    use_parallel_residual: bool | None = None
    attention_bias: bool | None = None
    tie_word_embeddings: bool | None = None


def rope(
    hf: Mapping[str, Any],
    where: str,
    *,
    theta: str = "rope_theta",
    pct: str = "partial_rotary_factor",
    scaled: bool = False,
) -> tuple[float, float]:
    """``(base, fraction of head_dim rotated)`` from ``rope_parameters`` (transformers 5)
    or the older top-level fields; refuses scaled variants (linear, dynamic, yarn, llama3)
    unless ``scaled`` (the caller then reads them with ``rope_scaling``)."""
    params = hf.get("rope_parameters") or {}
    scaling = hf.get("rope_scaling") or {}
    allowed = DEFAULT_ROPE + (tuple(SCALINGS) if scaled else ())
    for source, table in (("rope_parameters", params), ("rope_scaling", scaling)):
        kind = table.get("rope_type", table.get("type"))
        if kind not in allowed:
            why = "this rotary scaling is not modelled" if scaled else "scaled rotary positions are not modelled"
            raise Converter.refuse(where, f"{source}.rope_type", kind, why)
    base = params.get("rope_theta", hf.get(theta, 10000.0))
    fraction = params.get("partial_rotary_factor", hf.get(pct, 1.0))
    for value, name, inner, default in (
        (base, theta, "rope_theta", 10000.0),
        (fraction, pct, "partial_rotary_factor", 1.0),
    ):
        if value is None:  # null where it is read: a number, or the line left out for the default
            field = f"rope_parameters.{inner}" if inner in params else name
            raise InteropError(f"{where}: {field} is null; give it as a number, or remove it for {default}")
    return float(base), float(fraction)


# config.json's rotary scalings the zoo computes exactly (zoo_modern.rope_scaling), with
# the keys each reads besides factor; the zoo's names of them.
SCALINGS = {
    "linear": (),
    "dynamic": (),
    "yarn": ("original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate"),
    "llama3": ("original_max_position_embeddings", "low_freq_factor", "high_freq_factor"),
}
SCALING_NAMES = {"original_max_position_embeddings": "original_max_seq_len"}


def rope_scaling(hf: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """The zoo's ``position.scaling`` for config.json's rotary scaling (``rope_parameters``,
    else the older ``rope_scaling``), or None for plain rotary; ``rope`` has refused kinds
    the zoo does not compute."""
    tables = [hf.get("rope_parameters") or {}, hf.get("rope_scaling") or {}]
    source, table = next(
        (
            (name, t)
            for name, t in zip(("rope_parameters", "rope_scaling"), tables, strict=True)
            if t.get("rope_type", t.get("type")) in SCALINGS
        ),
        ("", {}),
    )
    if not table:
        return None
    kind = table.get("rope_type", table.get("type"))
    factor = table.get("factor")
    if not isinstance(factor, (int, float)) or isinstance(factor, bool) or not 0 < factor <= 1e6:
        raise Converter.refuse(where, f"{source}.factor", factor, f"{kind} rotary scaling needs a factor > 0")
    spec: dict[str, Any] = {"kind": kind, "factor": float(factor)}
    for key in SCALINGS[kind]:
        if table.get(key) is not None:
            spec[SCALING_NAMES.get(key, key)] = table[key]
    if kind != "linear":  # transformers' default: the model's own context
        spec.setdefault("original_max_seq_len", int(hf.get("max_position_embeddings") or 2048))
    if kind == "dynamic":  # transformers grows the base past max_position_embeddings, not the original one
        spec["original_max_seq_len"] = int(hf.get("max_position_embeddings") or 2048)
    mscale, mscale_all = table.get("mscale"), table.get("mscale_all_dim")
    if kind == "yarn" and mscale and mscale_all and "attention_factor" not in spec:

        def get(scale: float, m: float) -> float:
            return 1.0 if scale <= 1 else 0.1 * m * math.log(scale) + 1.0

        spec["attention_factor"] = get(spec["factor"], mscale) / get(spec["factor"], mscale_all)
    return spec


def scaling_to_hf(config: ModelConfig) -> dict[str, Any]:
    """``rope_parameters`` entries for a config's rotary scaling (none for plain rotary)."""
    scaling = config.position.options.get("scaling")
    if not scaling:
        return {}
    names = {zoo: hf for hf, zoo in SCALING_NAMES.items()}
    out = {names.get(k, k): v for k, v in scaling.items() if v is not None and k != "kind"}
    if scaling["kind"] == "dynamic":
        out.pop("original_max_position_embeddings", None)
    return {"rope_type": scaling["kind"], **out}


def rotary_spec(base: float, rotary_dim: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"name": "rotary", "base": base}
    if rotary_dim is not None:
        spec["rotary_dim"] = rotary_dim
    return spec


def attention_spec(n_kv_heads: int, qkv_bias: bool = False) -> dict[str, Any]:
    """zoo's attention for a Llama-family layer: grouped-query (``n_kv_heads``), with
    q/k/v biases for Qwen2, never an output bias."""
    return {"name": "sdpa", "n_kv_heads": n_kv_heads, "qkv_bias": qkv_bias, "out_bias": False}


def n_kv_heads(config: ModelConfig) -> int:
    """Key/value heads of a config's attention (n_heads for plain multi-head attention)."""
    return Converter.attention_layout(config)[0]


def turned(config: ModelConfig) -> int:
    """Dimensions per head a rotary config turns."""
    options = config.position.options
    return rotary_dims(config.head_dim, options.get("rotary_dim"), options.get("rotary_pct"))


def rotary_base(config: ModelConfig) -> float:
    return float(config.position.options.get("base", 10000.0))


class LlamaFamily(Converter):
    """LLaMA's design: pre-norm RMSNorm, rotary positions, SwiGLU, grouped-query attention, no biases."""

    architecture = "LlamaForCausalLM"
    model_type = "llama"
    description = "LLaMA: RMSNorm, rotary, SwiGLU, grouped-query attention, no biases"
    prefix = "model."
    embedding = "embed_tokens.weight"
    qkv_bias = False  # Qwen2 has biases on q, k and v

    def skip(self, name: str) -> bool:
        return name.endswith("rotary_emb.inv_freq")

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        """Refuse the family's settings the zoo does not model."""
        if hf.get("attention_bias"):
            raise self.refuse(
                where, "attention_bias", True, "biases on q/k/v/o projections are not modelled for this family"
            )
        if hf.get("mlp_bias"):
            raise self.refuse(where, "mlp_bias", True, "biases in the SwiGLU projections are not modelled")

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        LlamaFields.read(hf, where)  # every field read below has its type and range
        self.check(hf, where)
        try:
            d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
            layers, hidden, vocab = int(hf["num_hidden_layers"]), int(hf["intermediate_size"]), int(hf["vocab_size"])
        except (KeyError, TypeError, ValueError) as err:
            raise InteropError(f"{where}: a {self.architecture} config.json needs {err} as an integer") from err
        kv = int(hf.get("num_key_value_heads") or heads)
        if hf.get("hidden_act", "silu") != "silu":
            raise self.refuse(where, "hidden_act", hf["hidden_act"], "the SwiGLU gate is SiLU in the zoo")
        base, fraction = rope(hf, where, scaled=True)
        if fraction != 1.0:
            raise self.refuse(where, "partial_rotary_factor", fraction, "this family rotates the whole head")
        scaling = rope_scaling(hf, where)
        return {
            "vocab_size": vocab,
            "max_seq_len": self.max_seq_len(hf, where),
            "d_model": d,
            "n_layers": layers,
            "n_heads": heads,
            "d_ff": hidden,
            "dropout": {"attention": float(hf.get("attention_dropout") or 0.0)},
            "bias": False,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
            "norm_eps": float(hf.get("rms_norm_eps", 1e-6)),
            "attention": self.attention(hf, where, kv),
            "norm": "rmsnorm",
            "placement": "pre",
            "activation": "silu",
            "position": {**rotary_spec(base), **({"scaling": scaling} if scaling else {})},
            "mlp": {"name": "swiglu", "hidden": hidden},
            "init": "gpt2",
        }

    def max_seq_len(self, hf: Mapping[str, Any], where: str) -> int:
        return int(hf.get("max_position_embeddings", 2048))

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        """The attention spec of ``config.json`` ``hf`` with ``kv`` key/value heads (subclasses
        with other attentions override it)."""
        d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        if hf.get("head_dim") not in (None, d // heads):
            raise self.refuse(
                where,
                "head_dim",
                hf["head_dim"],
                f"the zoo's head_dim is hidden_size / num_attention_heads = {d // heads}",
            )
        return attention_spec(kv, self.qkv_bias)

    def rules(self, config: ModelConfig) -> list[Rule]:
        d, kv = config.n_heads * config.head_dim, n_kv_heads(config) * config.head_dim
        rules = [Rule.copy("tok_emb.weight", "embed_tokens.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            qkv = [h + f"self_attn.{p}_proj" for p in "qkv"]
            rules += [
                Rule.copy(z + "attn_residual.norm.weight", h + "input_layernorm.weight"),
                Rule.concat(z + "attn.qkv.weight", [n + ".weight" for n in qkv], (d, kv, kv)),
                *([Rule.concat(z + "attn.qkv.bias", [n + ".bias" for n in qkv], (d, kv, kv))] if self.qkv_bias else []),
                Rule.copy(z + "attn.out.weight", h + "self_attn.o_proj.weight"),
                Rule.copy(z + "mlp_residual.norm.weight", h + "post_attention_layernorm.weight"),
                Rule.copy(z + "mlp.gate.weight", h + "mlp.gate_proj.weight"),
                Rule.copy(z + "mlp.up.weight", h + "mlp.up_proj.weight"),
                Rule.copy(z + "mlp.down.weight", h + "mlp.down_proj.weight"),
            ]
        return [*rules, Rule.copy("final_norm.weight", "norm.weight"), Rule.copy("head.weight", "lm_head.weight")]

    #: The components of this family's layers (``blockers`` refuses others for export).
    parts: ClassVar[Mapping[str, str]] = {"placement": "pre", "norm": "rmsnorm", "position": "rotary", "mlp": "swiglu"}
    #: The family's embedding scale (``config.embedding_scale``).
    embedding_scale: ClassVar[str] = "none"
    #: Whether the family writes numeric embedding and logit scales (Granite's multipliers).
    multipliers: ClassVar[bool] = False

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        """What in ``config``'s attention this family cannot express (see ``blockers``)."""
        if config.attention.name not in ("sdpa", "eager", "gqa"):
            return [f"attention {config.attention.name!r} ({self.architecture} has grouped-query attention)"]
        return []

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture, self.embedding_scale, self.multipliers)
        for kind, name in self.parts.items():
            if getattr(config, kind).name != name:
                blockers.append(f"{kind} {getattr(config, kind).name!r} ({self.architecture} has {name})")
        blockers += self.attention_blockers(config)
        if config.position.name == "rotary" and turned(config) != config.head_dim:
            blockers.append("partial rotary (this family rotates the whole head)")
        blockers += rotary_blockers(config, self.architecture, scaling=True)
        if config.attention.options.get("kernel") not in (None, "sdpa", "eager"):
            blockers.append("an attention kernel other than sdpa/eager")
        if config.bias:
            blockers.append(f"bias=true ({self.architecture} has no biases)")
        _, qkv_bias, out_bias = self.attention_layout(config)
        if qkv_bias != self.qkv_bias:
            blockers.append(
                f"q/k/v biases {'on' if qkv_bias else 'off'} ({self.architecture} has them {'on' if self.qkv_bias else 'off'})"
            )
        if out_bias:
            blockers.append(f"an output-projection bias ({self.architecture}'s o_proj has none)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        base = rotary_base(config)
        options = config.mlp.options
        hidden = options.get("hidden") or swiglu_hidden(
            config.d_ff or 4 * config.d_model, options.get("multiple_of", 256)
        )
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "intermediate_size": hidden,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": config.n_heads,
            "num_key_value_heads": n_kv_heads(config),
            "head_dim": config.head_dim,
            "hidden_act": "silu",
            "max_position_embeddings": config.max_seq_len,
            "rms_norm_eps": config.norm_eps,
            "rope_theta": base,
            "rope_parameters": {"rope_type": "default", "rope_theta": base, **scaling_to_hf(config)},
            "tie_word_embeddings": config.tie_embeddings,
            "attention_dropout": config.dropout.attention,
            "attention_bias": False,
            "mlp_bias": False,
            "bos_token_id": None,
            "eos_token_id": None,
        }


def rotary_blockers(
    config: ModelConfig, architecture: str, *, interleaved: bool = False, scaling: bool = False
) -> list[str]:
    """A rotary config's pair layout and scaling, where ``architecture`` has another."""
    options, blockers = config.position.options, []
    if config.position.name != "rotary":
        return blockers
    if bool(options.get("interleaved")) != interleaved:
        pairs = "neighbouring pairs (2i, 2i+1)" if interleaved else "halves (i, i + r/2)"
        blockers.append(f"interleaved={bool(options.get('interleaved'))} ({architecture} turns {pairs})")
    if options.get("scaling") and not scaling:
        blockers.append(f"a rotary scaling ({architecture}'s converter writes plain rotary)")
    return blockers


def common_blockers(
    config: ModelConfig,
    architecture: str,
    embedding_scale: str = "none",
    multipliers: bool = False,
    *,
    head_bias: bool = False,
    embedding_norm: bool = False,
) -> list[str]:
    """Switches no Hugging Face causal LM of these families has (``embedding_scale``: the
    family's; ``multipliers``: the family writes any numeric embedding and logit scale;
    ``head_bias`` and ``embedding_norm``: what ``architecture`` has of those two)."""
    blockers = []
    if config.architecture != "decoder":
        blockers.append(f"architecture {config.architecture!r} ({architecture} is decoder-only)")
    if config.final_norm is False:
        blockers.append(f"final_norm=false ({architecture} always has a final norm)")
    numeric = multipliers and not isinstance(config.embedding_scale, str)
    if config.embedding_scale != embedding_scale and not numeric:
        blockers.append(f"embedding_scale={config.embedding_scale!r} ({architecture} has {embedding_scale!r})")
    if config.head_output != "logits":
        blockers.append(f"head_output={config.head_output!r} ({architecture}'s head returns logits)")
    if config.logit_scale != 1.0 and not multipliers:
        blockers.append(f"logit_scale={config.logit_scale!r} ({architecture} does not scale its logits)")
    if config.head_bias != head_bias:
        has = "has" if head_bias else "has no"
        blockers.append(f"head_bias={str(config.head_bias).lower()} ({architecture}'s output head {has} bias)")
    if config.embedding_norm != embedding_norm:
        does = "normalises" if embedding_norm else "does not normalise"
        blockers.append(f"embedding_norm={str(config.embedding_norm).lower()} ({architecture} {does} its embeddings)")
    return blockers


class Mistral(LlamaFamily):
    """Mistral: Llama's layout, every layer within one sliding window (``attention.window``)."""

    architecture = "MistralForCausalLM"
    model_type = "mistral"
    description = "Mistral: Llama's layout with a sliding attention window"
    engine_features = frozenset({"window"})

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        pass  # MistralConfig has no bias switches

    def max_seq_len(self, hf: Mapping[str, Any], where: str) -> int:
        return int(hf.get("max_position_embeddings", 4096 * 32))

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        fields = super().config_from_hf(hf, where)
        windows = layer_windows(hf, fields["n_layers"], fields["max_seq_len"], hf.get("sliding_window"))
        return with_windows(fields, windows)

    def blockers(self, config: ModelConfig) -> list[str]:
        windows = set(window_per_layer(config))
        uniform = [] if len(windows) == 1 else ["a window in some layers only (Mistral windows every layer alike)"]
        return super().blockers(config) + window_blockers(config, self.architecture) + uniform

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        for name in ("attention_bias", "mlp_bias"):
            del hf[name]
        return {**hf, "sliding_window": window_per_layer(config)[0]}


def layer_windows(hf: Mapping[str, Any], n_layers: int, length: int, window: Any) -> list[int | None]:
    """Each layer's sliding window from ``config.json`` (``layer_types``, when given, says
    which layers slide; else all do), None for a full layer or one whose window covers
    the whole context (it changes nothing)."""
    if window is None or int(window) >= length:
        return [None] * n_layers
    types = hf.get("layer_types") or ["sliding_attention"] * n_layers
    return [int(window) if kind == "sliding_attention" else None for kind in types]


def with_windows(fields: dict[str, Any], windows: list[int | None]) -> dict[str, Any]:
    """Config ``fields`` with per-layer ``windows``: one attention option when every layer
    has the same, else a ``layer_pattern`` of one entry per layer."""
    if len(set(windows)) == 1:
        if windows[0] is None:
            return fields
        return {**fields, "attention": {**fields["attention"], "window": windows[0]}}
    return {**fields, "layer_pattern": periodic([{"attention": {"window": w}} if w else {} for w in windows])}


def periodic(entries: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The shortest prefix of ``entries`` that repeats to make them all (a layer pattern:
    Gemma 2's two entries, not one per layer)."""
    for period in range(1, len(entries) + 1):
        if all(entries[i] == entries[i % period] for i in range(len(entries))):
            return entries[:period]
    return entries


def window_per_layer(config: ModelConfig) -> list[int | None]:
    """The sliding window of each layer of ``config`` (None: full attention)."""
    return [config.layer(i).attention.options.get("window") for i in range(config.n_layers)]


def window_blockers(config: ModelConfig, architecture: str) -> list[str]:
    """What a pattern changes besides the attention window, and more than one window size."""
    blockers = []
    changes = {kind for i in range(config.n_layers) for kind in config.layer_changes(i)}
    if changes - {"attention"}:
        blockers.append(f"per-layer {', '.join(sorted(changes - {'attention'}))} ({architecture} has one design)")
    for i in range(config.n_layers):
        options = config.layer(i).attention.options
        if {k: v for k, v in options.items() if k != "window"} != {
            k: v for k, v in config.attention.options.items() if k != "window"
        } or config.layer(i).attention.name != config.attention.name:
            blockers.append(f"attention of layer {i} differs beyond its window ({architecture} has one attention)")
            break
    if len({w for w in window_per_layer(config) if w is not None}) > 1:
        blockers.append(f"more than one window size ({architecture} has one sliding_window)")
    return blockers


def qwen_windows(converter: Converter, hf: Mapping[str, Any], where: str, fields: dict[str, Any]) -> dict[str, Any]:
    """``fields`` with Qwen's sliding windows: with ``use_sliding_window``, the layers that
    ``layer_types`` names sliding, else those from ``max_window_layers`` on (Qwen2, Qwen3)."""
    layers = fields["n_layers"]
    window = hf.get("sliding_window") if hf.get("use_sliding_window") else None
    if window is not None and not hf.get("layer_types"):
        first = hf.get("max_window_layers", 28)
        if not isinstance(first, int) or isinstance(first, bool) or first < 0:
            raise converter.refuse(where, "max_window_layers", first, "it must be a whole number >= 0")
        hf = {**hf, "layer_types": ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]}
    types = hf.get("layer_types")
    if (
        window is not None
        and types is not None
        and (len(types) != layers or set(types) - {"sliding_attention", "full_attention"})
    ):
        raise converter.refuse(where, "layer_types", types, f"give {layers} of 'sliding_attention'/'full_attention'")
    return with_windows(fields, layer_windows(hf, layers, fields["max_seq_len"], window))


class Qwen2(LlamaFamily):
    """Qwen2: Llama's layout with biases on q, k and v (none on o_proj or the MLP); with
    ``use_sliding_window``, the layers from ``max_window_layers`` on slide (a layer pattern)."""

    architecture = "Qwen2ForCausalLM"
    model_type = "qwen2"
    description = "Qwen2: Llama's layout plus q/k/v biases, sliding windows from max_window_layers"
    qkv_bias = True
    engine_features = frozenset({"window", "layer_pattern"})

    def check(self, hf: Mapping[str, Any], where: str) -> None:
        pass  # Qwen2 always has q/k/v biases and nothing else

    def max_seq_len(self, hf: Mapping[str, Any], where: str) -> int:
        return int(hf.get("max_position_embeddings", 32768))

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        return qwen_windows(self, hf, where, super().config_from_hf(hf, where))

    def blockers(self, config: ModelConfig) -> list[str]:
        return super().blockers(config) + window_blockers(config, self.architecture)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        for name in ("attention_bias", "mlp_bias", "head_dim"):
            del hf[name]
        windows = window_per_layer(config)
        sizes = {w for w in windows if w is not None}
        if not sizes:
            return {**hf, "use_sliding_window": False, "sliding_window": None, "max_window_layers": config.n_layers}
        types = ["sliding_attention" if w is not None else "full_attention" for w in windows]
        full = next((i for i, w in enumerate(windows) if w is not None), config.n_layers)
        return {
            **hf,
            "use_sliding_window": True,
            "sliding_window": sizes.pop(),
            "max_window_layers": full,
            "layer_types": types,
        }


# -- GPT-NeoX ----------------------------------------------------------------------------


def per_head_to_zoo(t: Tensor, heads: int) -> Tensor:
    """NeoX's fused rows [q_h | k_h | v_h] per head -> the zoo's [q | k | v]."""
    return t.reshape(heads, 3, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def zoo_to_per_head(t: Tensor, heads: int) -> Tensor:
    """The zoo's fused [q | k | v] rows -> NeoX's [q_h | k_h | v_h] per head."""
    return t.reshape(3, heads, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def per_head(zoo: str, hf: str, heads: int) -> Rule:
    return Rule(zoo, (hf,), lambda ts: per_head_to_zoo(ts[0], heads), lambda t: [zoo_to_per_head(t, heads)])


class GPTNeoX(Converter):
    """GPT-NeoX / Pythia: parallel attention and MLP, partial rotary, LayerNorm, biases."""

    architecture = "GPTNeoXForCausalLM"
    model_type = "gpt_neox"
    description = "GPT-NeoX / Pythia: parallel residual, partial rotary, LayerNorm, fused per-head qkv"
    prefix = "gpt_neox."
    top_level = ("embed_out.weight",)
    embedding = "embed_in.weight"
    head = "embed_out.weight"

    def skip(self, name: str) -> bool:
        return name.endswith(("rotary_emb.inv_freq", "attention.bias", "attention.masked_bias"))

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        NeoXFields.read(hf, where)  # every field read below has its type and range
        try:
            d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
            layers, hidden, vocab = int(hf["num_hidden_layers"]), int(hf["intermediate_size"]), int(hf["vocab_size"])
        except (KeyError, TypeError, ValueError) as err:
            raise InteropError(f"{where}: a GPTNeoXForCausalLM config.json needs {err} as an integer") from err
        if hf.get("attention_bias", True) is not True:
            raise self.refuse(
                where, "attention_bias", hf["attention_bias"], "the zoo's NeoX layout has attention biases"
            )
        activation = hf.get("hidden_act", "gelu")
        if activation not in ACTIVATIONS:
            raise self.refuse(where, "hidden_act", activation, f"supported: {', '.join(sorted(ACTIVATIONS))}")
        base, fraction = rope(hf, where, theta="rotary_emb_base", pct="rotary_pct")
        head_dim = d // heads
        rotary_dim = int(head_dim * fraction)
        if rotary_dim % 2 or rotary_dim < 2:
            raise self.refuse(
                where,
                "rotary_pct",
                fraction,
                f"it rotates {rotary_dim} of {head_dim} dimensions; the zoo needs an even number >= 2",
            )
        dropout = float(hf.get("hidden_dropout") or 0.0)
        return {
            "vocab_size": vocab,
            "max_seq_len": int(hf.get("max_position_embeddings", 2048)),
            "d_model": d,
            "n_layers": layers,
            "n_heads": heads,
            "d_ff": hidden,
            "dropout": {"attention": float(hf.get("attention_dropout") or 0.0), "residual": dropout},
            "bias": True,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", False)),
            "norm_eps": float(hf.get("layer_norm_eps", 1e-5)),
            "attention": "sdpa",
            "norm": "layernorm",
            "placement": "parallel" if hf.get("use_parallel_residual", True) else "pre",
            "activation": ACTIVATIONS[activation],
            "position": rotary_spec(base, None if rotary_dim == head_dim else rotary_dim),
            "mlp": "standard",
            "init": "gpt2",
        }

    def rules(self, config: ModelConfig) -> list[Rule]:
        heads = config.n_heads
        rules = [Rule.copy("tok_emb.weight", "embed_in.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            rules += [
                Rule.copy(z + "attn_residual.norm.weight", h + "input_layernorm.weight"),
                Rule.copy(z + "attn_residual.norm.bias", h + "input_layernorm.bias"),
                per_head(z + "attn.qkv.weight", h + "attention.query_key_value.weight", heads),
                per_head(z + "attn.qkv.bias", h + "attention.query_key_value.bias", heads),
                Rule.copy(z + "attn.out.weight", h + "attention.dense.weight"),
                Rule.copy(z + "attn.out.bias", h + "attention.dense.bias"),
                Rule.copy(z + "mlp_residual.norm.weight", h + "post_attention_layernorm.weight"),
                Rule.copy(z + "mlp_residual.norm.bias", h + "post_attention_layernorm.bias"),
                Rule.copy(z + "mlp.up.weight", h + "mlp.dense_h_to_4h.weight"),
                Rule.copy(z + "mlp.up.bias", h + "mlp.dense_h_to_4h.bias"),
                Rule.copy(z + "mlp.down.weight", h + "mlp.dense_4h_to_h.weight"),
                Rule.copy(z + "mlp.down.bias", h + "mlp.dense_4h_to_h.bias"),
            ]
        return [
            *rules,
            Rule.copy("final_norm.weight", "final_layer_norm.weight"),
            Rule.copy("final_norm.bias", "final_layer_norm.bias"),
            Rule.copy("head.weight", "embed_out.weight"),
        ]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture)
        if config.placement.name not in ("parallel", "pre") or config.placement.options.get("shared_norm"):
            blockers.append(f"placement {config.placement.name!r} (GPT-NeoX is parallel with two norms, or pre-norm)")
        wanted = {"norm": "layernorm", "position": "rotary", "mlp": "standard"}
        for kind, name in wanted.items():
            if getattr(config, kind).name != name:
                blockers.append(f"{kind} {getattr(config, kind).name!r} (GPT-NeoX has {name})")
        n_kv, qkv_bias, out_bias = self.attention_layout(config)
        if config.attention.name not in ("sdpa", "eager") or n_kv != config.n_heads or not (qkv_bias and out_bias):
            blockers.append(f"attention {config.attention.name!r} (GPT-NeoX has multi-head attention with biases)")
        if config.activation.name not in ACTIVATIONS_OUT:
            blockers.append(f"activation {config.activation.name!r}")
        if not config.bias:
            blockers.append("bias=false (GPT-NeoX's projections and norms have biases)")
        if config.position.name == "rotary" and int(config.head_dim * (turned(config) / config.head_dim)) != turned(
            config
        ):
            blockers.append("a rotary_dim that rotary_pct cannot express exactly")
        return blockers + rotary_blockers(config, self.architecture)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        base = rotary_base(config)
        fraction = turned(config) / config.head_dim
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "intermediate_size": config.d_ff,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": config.n_heads,
            "hidden_act": ACTIVATIONS_OUT[config.activation.name],
            "max_position_embeddings": config.max_seq_len,
            "layer_norm_eps": config.norm_eps,
            "rotary_pct": fraction,
            "rotary_emb_base": base,
            "rope_parameters": {"rope_type": "default", "rope_theta": base, "partial_rotary_factor": fraction},
            "use_parallel_residual": config.placement.name == "parallel",
            "tie_word_embeddings": config.tie_embeddings,
            "attention_dropout": config.dropout.attention,
            "hidden_dropout": config.dropout.residual,
            "attention_bias": True,
            "bos_token_id": None,
            "eos_token_id": None,
        }


CONVERTERS: tuple[Converter, ...] = (LlamaFamily(), Mistral(), Qwen2(), GPTNeoX())

__all__ = ["CONVERTERS", "GPTNeoX", "LlamaFamily", "Mistral", "Qwen2"]
