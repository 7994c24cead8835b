"""The few real functions of the family tables: rotary positions (base, share, scaling)
and sliding windows read from ``config.json`` and written back, the export blockers they
imply, and the weight layouts that are more than a rename (q/k/v fused per head)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from zoo.plugin import REQUIRED, Converter, Count, F, Fraction, InteropError, ModelConfig, Positive, RopeTable, Rule, W
from zoo_modern.positions import rotary_dims

DEFAULT_ROPE = ("default", None)
# config.json's rotary fields, typed: a table that is a list or a string, or a base that is
# a string, is refused naming the field before ``rope`` reads them.
ROPE_FIELDS = {"rope_theta": F("", None, Positive), "partial_rotary_factor": F("", None, Fraction)}
ROPE_FIELDS |= {"rope_parameters": F("", None, RopeTable), "rope_scaling": F("", None, RopeTable)}
IGNORED = F("", None)  # read by transformers, changes nothing the zoo computes
#: The sizes a Llama- or NeoX-style config.json must give, under transformers' names.
SIZES = {"vocab_size": F("vocab_size", REQUIRED, Count), "hidden_size": F("d_model", REQUIRED, Count)}
SIZES |= {"num_attention_heads": F("n_heads", REQUIRED, Count), "num_hidden_layers": F("n_layers", REQUIRED, Count)}
SIZES |= {"intermediate_size": F("d_ff", REQUIRED, Count)}


def qknorm(qk_norm: str, **options: Any) -> dict[str, Any]:
    """The ``qknorm`` attention with ``qk_norm`` (``none``: for its own head_dim alone), no biases."""
    return {"name": "qknorm", "qk_norm": qk_norm, "qkv_bias": False, "out_bias": False, **options}


# Hugging Face activation names with an exact zoo activation component.
ACTIVATIONS = {"gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_fast": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh"}
ACTIVATIONS |= {"relu": "relu", "silu": "silu"}


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
SCALINGS = {"linear": (), "dynamic": (), "llama3": ("original_max_position_embeddings", "low_freq_factor", "high_freq_factor")}  # fmt: skip
SCALINGS["yarn"] = ("original_max_position_embeddings", "beta_fast", "beta_slow", "attention_factor", "truncate")
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
    for key in SCALINGS[str(kind)]:
        if table.get(key) is not None:
            spec[SCALING_NAMES.get(key, key)] = table[key]
    if kind != "linear":  # transformers' default: the model's own context
        spec.setdefault("original_max_seq_len", int(hf.get("max_position_embeddings") or 2048))
    if kind == "dynamic":  # transformers grows the base past max_position_embeddings, not the original one
        spec["original_max_seq_len"] = int(hf.get("max_position_embeddings") or 2048)
    mscale, mscale_all = table.get("mscale"), table.get("mscale_all_dim")
    if kind == "yarn" and mscale and mscale_all and "attention_factor" not in spec:
        spec["attention_factor"] = yarn_mscale(spec["factor"], mscale) / yarn_mscale(spec["factor"], mscale_all)
    return spec


def yarn_mscale(factor: float, m: float = 1.0) -> float:
    """YaRN's magnitude scale for a context ``factor`` times longer: 0.1 m ln(factor) + 1 (1 below 1)."""
    return 1.0 if factor <= 1 else 0.1 * m * math.log(factor) + 1.0


def score_mscale(hf: Mapping[str, Any], where: str) -> float:
    """What a scaled rotary's ``mscale_all_dim`` multiplies the scores' scale by (DeepSeek's
    latent attention, as transformers folds it in): mscale(factor, mscale_all_dim)^2, else 1."""
    spec = rope_scaling(hf, where)
    tables = (hf.get("rope_parameters") or {}, hf.get("rope_scaling") or {})
    table = next((t for t in tables if t.get("rope_type", t.get("type")) in SCALINGS), {})
    m = table.get("mscale_all_dim")
    if spec is None or not m:
        return 1.0
    if not isinstance(m, (int, float)) or isinstance(m, bool):
        raise Converter.refuse(where, "rope_scaling.mscale_all_dim", m, "a number (YaRN's scale of every score)")
    return yarn_mscale(spec["factor"], float(m)) ** 2


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


def turned(config: ModelConfig) -> int:
    """Dimensions per head a rotary config turns."""
    options = config.position.options
    return rotary_dims(config.head_dim, options.get("rotary_dim"), options.get("rotary_pct"))


def rotary_base(config: ModelConfig) -> float:
    return float(config.position.options.get("base", 10000.0))


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


def with_layer_changes(fields: dict[str, Any], entries: list[dict[str, Any]]) -> dict[str, Any]:
    """``fields`` with ``entries`` (one per layer, each the changes of that layer) merged into
    the layer pattern they have (a hybrid's mixers, a family's windows)."""
    have = fields.get("layer_pattern") or [{}]
    pattern = periodic([{**have[i % len(have)], **entry} for i, entry in enumerate(entries)])
    return {**fields, "layer_pattern": [] if pattern == [{}] else pattern}


def window_per_layer(config: ModelConfig) -> list[int | None]:
    """The sliding window of each layer of ``config`` (None: full attention)."""
    return [config.layer(i).attention.options.get("window") for i in range(config.n_layers)]


def window_blockers(config: ModelConfig, architecture: str, varies: tuple[str, ...] = ("attention",)) -> list[str]:
    """What a pattern changes besides the parts that may vary by layer (``varies``: the
    attention window, a family's own per-layer positions), and more than one window size."""
    blockers = []
    changes = {kind for i in range(config.n_layers) for kind in config.layer_changes(i)} - set(varies)
    if changes:
        blockers.append(f"per-layer {', '.join(sorted(changes))} ({architecture} has one design)")
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


def layer_positions(config: ModelConfig, arch: str, bases: bool = False) -> list[str]:
    """The layers whose position is neither none nor the model's rotary (``bases``: a rotary
    that differs from the model's in its base alone is the layer's own)."""
    model, own = config.position, "rotary, of a base per layer," if bases else "rotary"

    def rest(options: Mapping[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in options.items() if not (bases and k == "base")}

    return [
        f"layer {i}'s position {p.name!r} ({arch} has the model's {own} or none)"
        for i, p in enumerate(config.layer(i).position for i in range(config.n_layers))
        if p.name != "none" and ({p.name, model.name} != {"rotary"} or rest(p.options) != rest(model.options))
    ]


def qwen_windows(hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
    """``fields`` with Qwen's sliding windows: with ``use_sliding_window``, the layers that
    ``layer_types`` names sliding, else those from ``max_window_layers`` on (Qwen2, Qwen3)."""
    layers = fields["n_layers"]
    window = hf.get("sliding_window") if hf.get("use_sliding_window") else None
    if window is not None and not hf.get("layer_types"):
        first = hf.get("max_window_layers", 28)
        good = isinstance(first, int) and not isinstance(first, bool) and first >= 0
        refuse_unless(good, where, "max_window_layers", first, "it must be a whole number >= 0")
        hf = {**hf, "layer_types": ["sliding_attention" if i >= first else "full_attention" for i in range(layers)]}
    return with_windows(fields, layer_windows(hf, layers, fields["max_seq_len"], window))


def per_head_to_zoo(t: Tensor, heads: int) -> Tensor:
    """NeoX's fused rows [q_h | k_h | v_h] per head -> the zoo's [q | k | v]."""
    return t.reshape(heads, 3, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def zoo_to_per_head(t: Tensor, heads: int) -> Tensor:
    """The zoo's fused [q | k | v] rows -> NeoX's [q_h | k_h | v_h] per head."""
    return t.reshape(3, heads, -1, *t.shape[1:]).transpose(0, 1).reshape(t.shape)


def per_head(zoo: str, hf: str, heads: int) -> Rule:
    return Rule(zoo, (hf,), lambda ts: per_head_to_zoo(ts[0], heads), lambda t: [zoo_to_per_head(t, heads)])


def fused_per_head(hf: str) -> dict[str, W]:
    """The zoo's ``attn.qkv`` weight and bias from ``hf`` (``weight``/``bias``) fused per head."""

    def make(zoo: str, names: tuple[str, ...], config: ModelConfig) -> Rule:
        return per_head(zoo, names[0], config.n_heads)

    return {f"attn.qkv.{p}": W(f"{hf}.{p}", make=make) for p in ("weight", "bias")}


def refuse_unless(ok: bool, where: str, setting: str, value: Any, why: str) -> None:
    """Raise the refusal of ``setting=value`` (``why``) unless ``ok``."""
    if not ok:
        raise Converter.refuse(where, setting, value, why)


@dataclass(frozen=True)
class Rotary:
    """A family's rotary positions, read, written and checked: the base from ``theta`` (or
    ``rope_parameters``), the share of each head turned from ``pct`` (transformers'
    default ``share``; ``partial``: a share below 1 is modelled), scalings if ``scaled``."""

    theta: str = "rope_theta"
    pct: str = "partial_rotary_factor"
    share: float = 1.0
    partial: bool = False
    scaled: bool = False
    interleaved: bool = False

    def read(self, hf: Mapping[str, Any], fields: dict[str, Any], where: str) -> dict[str, Any]:
        base, fraction = rope(hf, where, theta=self.theta, pct=self.pct, scaled=self.scaled)
        given = self.pct in hf or "partial_rotary_factor" in (hf.get("rope_parameters") or {})
        fraction = fraction if given or not self.partial else self.share
        attention = fields.get("attention")
        explicit = attention.get("head_dim") if isinstance(attention, dict) else None  # qknorm's own
        head_dim = fields.get("head_dim") or explicit or fields["d_model"] // fields["n_heads"]
        dims = int(head_dim * fraction)
        if not self.partial and fraction != 1.0:
            raise Converter.refuse(
                where, self.pct, fraction, f"{fields.get('_arch', 'this family')} rotates the whole head"
            )
        refuse_unless(dims % 2 == 0 and dims >= 2, where, self.pct, fraction, f"it turns {dims} of {head_dim} dimensions; the zoo needs an even number >= 2")  # fmt: skip
        spec = dict(fields["position"]) if isinstance(fields.get("position"), dict) else {"name": "rotary"}
        spec |= {"base": base} | ({"rotary_dim": dims} if dims != head_dim else {})
        scaling = rope_scaling(hf, where) if self.scaled else None
        return {**fields, "position": spec | ({"scaling": scaling} if scaling else {})}

    def write(self, config: ModelConfig, hf: dict[str, Any]) -> dict[str, Any]:
        base, fraction = rotary_base(config), turned(config) / config.head_dim
        share = {"partial_rotary_factor": fraction} if self.partial else {}
        params = {"rope_type": "default", "rope_theta": base, **share, **scaling_to_hf(config)}
        return {**hf, self.theta: base, **({self.pct: fraction} if self.partial else {}), "rope_parameters": params}

    def blockers(self, config: ModelConfig, arch: str) -> list[str]:
        """A rotary config's pair layout, scaling and share of each head, where ``arch`` has another."""
        options, blockers = config.position.options, list[str]()
        if config.position.name != "rotary":
            return blockers
        if bool(options.get("interleaved")) != self.interleaved:
            pairs = "neighbouring pairs (2i, 2i+1)" if self.interleaved else "halves (i, i + r/2)"
            blockers.append(f"interleaved={bool(options.get('interleaved'))} ({arch} turns {pairs})")
        if options.get("scaling") and not self.scaled:
            blockers.append(f"a rotary scaling ({arch}'s converter writes plain rotary)")
        if not self.partial and turned(config) != config.head_dim:
            blockers.append(f"partial rotary ({arch} rotates the whole head)")
        return blockers
