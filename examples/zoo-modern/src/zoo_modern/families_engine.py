"""Hugging Face converters for the families that need the engine's features beyond
Llama's: Starcoder2 (LayerNorm, GELU MLP, biases everywhere, grouped-query attention and
a sliding window over every layer).

- Gemma 2: Gemma's parts (GeGLU, unit-offset RMSNorm, scaled embeddings, head_dim 256)
  with a norm on both sides of each sub-layer (``sandwich``), local and global layers
  alternating (a ``layer_pattern`` of windows), soft-capped scores and logits and a
  score scale of query_pre_attn_scalar^-1/2.

- Gemma 3 (text): Gemma 2's layout with QK-norm per head (scaled by 1 + w), five local
  layers to one global by default, and local layers turning by their own rotary base
  (``rope_local_base_freq``): a pattern entry changes their window and their position.

- GPT-Neo: GPT-2's parts (LayerNorm, learned positions, GELU MLP) without q/k/v biases
  or the 1/sqrt(d) score scale, global and local (windowed) layers as ``attention_types``
  lists them.

- SmolLM3: Llama's layout with no rotary in every 4th layer (``no_rope_layers``: a
  pattern entry with ``position = "none"``), optional windows on the NoPE layers.

Mistral's and Qwen2's windows are read by their converters in ``converters.py``; the
window helpers there (``layer_windows``, ``with_windows``, ``window_blockers``) serve
these too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

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
from zoo_modern.converters import LlamaFamily, LlamaFields
from zoo_modern.families.readers import (
    ACTIVATIONS,
    ACTIVATIONS_OUT,
    common_blockers,
    layer_windows,
    n_kv_heads,
    periodic,
    rope,
    rotary_base,
    rotary_spec,
    turned,
    window_blockers,
    window_per_layer,
    with_windows,
)
from zoo_modern.families_modern import Gemma, GemmaFields, qk_norm_rules, qknorm_spec


class Starcoder2Fields(HFFields):
    """The config.json fields the Starcoder2 converter reads, typed."""

    not_null = ("max_position_embeddings", "norm_epsilon")

    hidden_size: Count
    num_attention_heads: Count
    num_hidden_layers: Count
    intermediate_size: Count
    vocab_size: Count
    num_key_value_heads: Count | None = None
    hidden_act: str = "gelu_pytorch_tanh"
    max_position_embeddings: Count | None = None
    norm_epsilon: Epsilon | None = None
    rope_theta: Positive | None = None
    rope_parameters: RopeTable | None = None
    rope_scaling: RopeTable | None = None
    sliding_window: Count | None = None
    attention_dropout: Fraction | None = None
    residual_dropout: Fraction | None = None
    embedding_dropout: Fraction | None = None
    use_bias: bool | None = None
    tie_word_embeddings: bool | None = None


class Starcoder2(Converter):
    """Starcoder2: pre-norm LayerNorm, rotary, a GELU MLP, grouped-query attention, biases
    on every projection, one sliding window for every layer."""

    architecture = "Starcoder2ForCausalLM"
    model_type = "starcoder2"
    description = "Starcoder2: LayerNorm, rotary, GELU MLP, grouped-query attention with biases, sliding window"
    prefix = "model."
    embedding = "embed_tokens.weight"
    engine_features = frozenset({"window"})

    def skip(self, name: str) -> bool:
        return name.endswith("rotary_emb.inv_freq")

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        Starcoder2Fields.read(hf, where)  # every field read below has its type and range
        try:
            d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
            layers, hidden, vocab = int(hf["num_hidden_layers"]), int(hf["intermediate_size"]), int(hf["vocab_size"])
        except (KeyError, TypeError, ValueError) as err:
            raise InteropError(f"{where}: a {self.architecture} config.json needs {err} as an integer") from err
        if hf.get("use_bias", True) is not True:
            raise self.refuse(
                where, "use_bias", hf["use_bias"], "the zoo's norms would lose their biases with the projections'"
            )
        activation = hf.get("hidden_act", "gelu_pytorch_tanh")
        if activation not in ACTIVATIONS:
            raise self.refuse(where, "hidden_act", activation, f"supported: {', '.join(sorted(ACTIVATIONS))}")
        base, fraction = rope(hf, where)
        if fraction != 1.0:
            raise self.refuse(where, "partial_rotary_factor", fraction, "Starcoder2 rotates the whole head")
        length = int(hf.get("max_position_embeddings", 4096))
        fields = {
            "vocab_size": vocab,
            "max_seq_len": length,
            "d_model": d,
            "n_layers": layers,
            "n_heads": heads,
            "d_ff": hidden,
            "dropout": {
                "embedding": float(hf.get("embedding_dropout") or 0.0),
                "attention": float(hf.get("attention_dropout") or 0.0),
                "residual": float(hf.get("residual_dropout") or 0.0),
            },
            "bias": True,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
            "norm_eps": float(hf.get("norm_epsilon", 1e-5)),
            "attention": {"name": "sdpa", "n_kv_heads": int(hf.get("num_key_value_heads") or heads)},
            "norm": "layernorm",
            "placement": "pre",
            "activation": ACTIVATIONS[activation],
            "position": rotary_spec(base),
            "mlp": "standard",
            "init": "gpt2",
        }
        return with_windows(fields, layer_windows({}, layers, length, hf.get("sliding_window")))

    def rules(self, config: ModelConfig) -> list[Rule]:
        d, kv = config.d_model, n_kv_heads(config) * config.head_dim
        rules = [Rule.copy("tok_emb.weight", "embed_tokens.weight")]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            qkv = [h + f"self_attn.{p}_proj" for p in "qkv"]
            for p in ("weight", "bias"):
                rules += [
                    Rule.copy(z + f"attn_residual.norm.{p}", h + f"input_layernorm.{p}"),
                    Rule.concat(z + f"attn.qkv.{p}", [n + f".{p}" for n in qkv], (d, kv, kv)),
                    Rule.copy(z + f"attn.out.{p}", h + f"self_attn.o_proj.{p}"),
                    Rule.copy(z + f"mlp_residual.norm.{p}", h + f"post_attention_layernorm.{p}"),
                    Rule.copy(z + f"mlp.up.{p}", h + f"mlp.c_fc.{p}"),
                    Rule.copy(z + f"mlp.down.{p}", h + f"mlp.c_proj.{p}"),
                ]
        return [
            *rules,
            *(Rule.copy(f"final_norm.{p}", f"norm.{p}") for p in ("weight", "bias")),
            Rule.copy("head.weight", "lm_head.weight"),
        ]

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = common_blockers(config, self.architecture) + window_blockers(config, self.architecture)
        wanted = {"placement": "pre", "norm": "layernorm", "position": "rotary", "mlp": "standard"}
        for kind, name in wanted.items():
            if getattr(config, kind).name != name:
                blockers.append(f"{kind} {getattr(config, kind).name!r} ({self.architecture} has {name})")
        if config.attention.name not in ("sdpa", "eager", "gqa"):
            blockers.append(f"attention {config.attention.name!r} ({self.architecture} has grouped-query attention)")
        if config.position.name == "rotary" and turned(config) != config.head_dim:
            blockers.append("partial rotary (Starcoder2 rotates the whole head)")
        if config.activation.name not in ACTIVATIONS_OUT:
            blockers.append(f"activation {config.activation.name!r}")
        _, qkv_bias, out_bias = self.attention_layout(config)
        if not (config.bias and qkv_bias and out_bias):
            blockers.append(f"a projection or norm without bias ({self.architecture} has biases everywhere)")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        base = rotary_base(config)
        return {
            "vocab_size": config.vocab_size,
            "hidden_size": config.d_model,
            "intermediate_size": config.d_ff,
            "num_hidden_layers": config.n_layers,
            "num_attention_heads": config.n_heads,
            "num_key_value_heads": n_kv_heads(config),
            "hidden_act": ACTIVATIONS_OUT[config.activation.name],
            "max_position_embeddings": config.max_seq_len,
            "norm_epsilon": config.norm_eps,
            "rope_theta": base,
            "rope_parameters": {"rope_type": "default", "rope_theta": base},
            "sliding_window": window_per_layer(config)[0],
            "attention_dropout": config.dropout.attention,
            "residual_dropout": config.dropout.residual,
            "embedding_dropout": config.dropout.embedding,
            "use_bias": True,
            "tie_word_embeddings": config.tie_embeddings,
            "bos_token_id": None,
            "eos_token_id": None,
        }


class Gemma2Fields(GemmaFields):
    """The Gemma 2 fields read beyond Gemma's."""

    hidden_activation: str | None = None
    query_pre_attn_scalar: Positive | None = None
    final_logit_softcapping: Positive | None = None
    attn_logit_softcapping: Positive | None = None
    sliding_window: Count | None = None
    layer_types: list[str] | None = None


def gemma2_layer_types(hf: Mapping[str, Any], layers: int, where: str) -> list[str]:
    """``layer_types`` as transformers fills it for Gemma 2: given, else local then global."""
    types = hf.get("layer_types") or ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(layers)]
    if len(types) != layers or set(types) - {"sliding_attention", "full_attention"}:
        raise Converter.refuse(where, "layer_types", types, f"give {layers} of 'sliding_attention'/'full_attention'")
    return list(types)


class Gemma2(Gemma):
    """Gemma 2: Gemma with sandwich norms, alternating local/global attention, soft-capped
    scores and logits, and scores scaled by query_pre_attn_scalar^-1/2."""

    architecture = "Gemma2ForCausalLM"
    model_type = "gemma2"
    description = "Gemma 2: Gemma's parts, sandwich norms, local/global layers, soft-capped scores and logits"
    parts: ClassVar[Mapping[str, str]] = {**Gemma.parts, "placement": "sandwich"}
    engine_features = frozenset({"window", "softcap", "scale", "logit_softcap", "layer_pattern"})

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        Gemma2Fields.read(hf, where)
        activation = hf.get("hidden_activation") or "gelu_pytorch_tanh"
        fields = super().config_from_hf({**hf, "hidden_act": activation}, where)
        heads, d = int(hf["num_attention_heads"]), int(hf["hidden_size"])
        head_dim = int(hf.get("head_dim") or 256)
        kv = int(hf.get("num_key_value_heads") or heads)
        attention = qknorm_spec(kv, head_dim, "none")
        attention["scale"] = float(hf.get("query_pre_attn_scalar", 256)) ** -0.5
        if hf.get("attn_logit_softcapping", 50.0) is not None:
            attention["softcap"] = float(hf.get("attn_logit_softcapping", 50.0))
        cap = hf.get("final_logit_softcapping", 30.0)
        fields = {**fields, "attention": attention, "placement": "sandwich"}
        fields["logit_softcap"] = None if cap is None else float(cap)
        types = gemma2_layer_types(hf, fields["n_layers"], where)
        window = hf.get("sliding_window", 4096)
        del d
        return with_windows(
            fields, layer_windows({"layer_types": types}, fields["n_layers"], fields["max_seq_len"], window)
        )

    def rules(self, config: ModelConfig) -> list[Rule]:
        rules = [r for r in super().rules(config) if "_residual.norm." not in r.zoo]
        for i in range(config.n_layers):
            z, h = f"blocks.{i}.", f"layers.{i}."
            rules += [
                Rule.copy(z + "attn_residual.norm_in.weight", h + "input_layernorm.weight"),
                Rule.copy(z + "attn_residual.norm_out.weight", h + "post_attention_layernorm.weight"),
                Rule.copy(z + "mlp_residual.norm_in.weight", h + "pre_feedforward_layernorm.weight"),
                Rule.copy(z + "mlp_residual.norm_out.weight", h + "post_feedforward_layernorm.weight"),
            ]
        return rules

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        options = config.attention.options
        if config.attention.name != "qknorm" or options.get("qk_norm") != "none" or options.get("qk_norm_offset"):
            return [f"attention {config.attention.name!r} ({self.architecture} has qknorm with qk_norm='none')"]
        return []

    def blockers(self, config: ModelConfig) -> list[str]:
        return super().blockers(config) + window_blockers(config, self.architecture)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        options = config.attention.options
        windows = window_per_layer(config)
        scale = options.get("scale")
        scalar = config.head_dim if scale is None else float(scale) ** -2
        del hf["hidden_act"]
        return {
            **hf,
            "hidden_activation": "gelu_pytorch_tanh",
            "head_dim": config.head_dim,
            "query_pre_attn_scalar": round(scalar) if abs(scalar - round(scalar)) < 1e-6 else scalar,
            "attn_logit_softcapping": options.get("softcap"),
            "final_logit_softcapping": config.logit_softcap,
            "sliding_window": next((w for w in windows if w is not None), None),
            "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows],
        }


class Gemma3Fields(Gemma2Fields):
    """The Gemma 3 fields read beyond Gemma 2's."""

    rope_local_base_freq: Positive | None = None
    sliding_window_pattern: Count | None = None


def gemma3_rope(hf: Mapping[str, Any], where: str) -> tuple[float, float]:
    """``(global base, local base)``: from ``rope_parameters`` per layer type
    (transformers 5), else ``rope_theta`` and ``rope_local_base_freq``; scaled variants refused."""
    params = hf.get("rope_parameters") or {}
    if "full_attention" in params or "sliding_attention" in params:
        tables = {kind: dict(params.get(kind) or {}) for kind in ("full_attention", "sliding_attention")}
    else:
        tables = {
            "full_attention": {**params, **(hf.get("rope_scaling") or {}), "rope_theta": hf.get("rope_theta", 1e6)},
            "sliding_attention": {"rope_theta": hf.get("rope_local_base_freq", 1e4)},
        }
    for kind, table in tables.items():
        rope_type = table.get("rope_type", table.get("type", "default"))
        if rope_type != "default":
            raise Converter.refuse(
                where, f"rope_parameters.{kind}.rope_type", rope_type, "scaled rotary is not modelled"
            )
        base = table.get("rope_theta", 1e6 if kind == "full_attention" else 1e4)
        if not isinstance(base, (int, float)) or isinstance(base, bool) or base <= 1:
            raise Converter.refuse(where, f"rope_parameters.{kind}.rope_theta", base, "it must be a number > 1")
    return float(tables["full_attention"].get("rope_theta", 1e6)), float(
        tables["sliding_attention"].get("rope_theta", 1e4)
    )


class Gemma3(Gemma2):
    """Gemma 3 (text): Gemma 2 with QK-norm per head (1 + w), local layers (5 of every 6 by
    default) with their own rotary base, no soft-capping by default."""

    architecture = "Gemma3ForCausalLM"
    model_type = "gemma3_text"
    description = "Gemma 3 (text): Gemma 2's layout, QK-norm, 5 local : 1 global layers, a local rotary base"
    engine_features = frozenset({"window", "scale", "logit_softcap", "layer_pattern"})  # scores are never capped

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        Gemma3Fields.read({k: v for k, v in hf.items() if k != "rope_parameters"}, where)
        if hf.get("use_bidirectional_attention"):
            raise self.refuse(where, "use_bidirectional_attention", True, "the zoo's decoder attends causally")
        base, local = gemma3_rope(hf, where)
        layers = int(hf["num_hidden_layers"])
        every = int(hf.get("sliding_window_pattern") or 6)
        types = hf.get("layer_types") or [
            "sliding_attention" if (i + 1) % every else "full_attention" for i in range(layers)
        ]
        plain = {k: v for k, v in hf.items() if k not in ("rope_parameters", "rope_scaling", "rope_local_base_freq")}
        fields = super().config_from_hf(
            {
                **plain,
                "rope_theta": base,
                "layer_types": types,
                "sliding_window": hf.get("sliding_window", 4096),
                "attn_logit_softcapping": None,  # transformers' Gemma 3 reads it but never caps scores
                "final_logit_softcapping": hf.get("final_logit_softcapping"),
            },
            where,
        )
        fields["attention"] = {**fields["attention"], "qk_norm": "head", "qk_norm_offset": True}
        windows = layer_windows({"layer_types": types}, layers, fields["max_seq_len"], hf.get("sliding_window", 4096))
        entries = []
        for kind, window in zip(types, windows, strict=True):
            entry: dict[str, Any] = {}
            if window is not None:
                entry["attention"] = {"window": window}
            if kind == "sliding_attention" and local != base:
                entry["position"] = {"base": local}
            entries.append(entry)
        fields.pop("layer_pattern", None)
        if any(entries):
            fields["layer_pattern"] = periodic(entries)
        return fields

    def rules(self, config: ModelConfig) -> list[Rule]:
        return [*super().rules(config), *qk_norm_rules(config)]

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        options = config.attention.options
        if config.attention.name != "qknorm" or options.get("qk_norm") != "head" or not options.get("qk_norm_offset"):
            return [f"attention {config.attention.name!r} ({self.architecture} has qknorm, per head, with an offset)"]
        return []

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = [b for b in super().blockers(config) if not b.startswith("per-layer position")]
        bases = {rotary_base(config.layer(i)) for i, w in enumerate(window_per_layer(config)) if w is not None}
        full = {rotary_base(config.layer(i)) for i, w in enumerate(window_per_layer(config)) if w is None}
        names = {config.layer(i).position.name for i in range(config.n_layers)}
        if names != {"rotary"} or len(bases) > 1 or (full and full != {rotary_base(config)}):
            blockers.append(f"positions other than one rotary base per layer type ({self.architecture})")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        windows = window_per_layer(config)
        local = next((rotary_base(config.layer(i)) for i, w in enumerate(windows) if w is not None), 10000.0)
        for name in ("rope_theta", "rope_parameters"):
            hf.pop(name, None)
        return {
            **hf,
            "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": rotary_base(config)},
                "sliding_attention": {"rope_type": "default", "rope_theta": local},
            },
            "use_bidirectional_attention": False,
        }


class SmolLM3Fields(LlamaFields):
    """The SmolLM3 fields read beyond Llama's."""

    no_rope_layers: list[int] | None = None
    no_rope_layer_interval: Count | None = None


class SmolLM3(LlamaFamily):
    """SmolLM3: Llama's layout, a tied head, no rotary in the layers ``no_rope_layers``
    marks 0 (every 4th by default), windows on the layers ``layer_types`` makes sliding."""

    architecture = "SmolLM3ForCausalLM"
    model_type = "smollm3"
    description = "SmolLM3: Llama's layout, no rotary (NoPE) every 4th layer, a tied head"
    engine_features = frozenset({"window", "layer_pattern"})

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        SmolLM3Fields.read(hf, where)
        fields = super().config_from_hf(hf, where)
        layers = fields["n_layers"]
        every = int(hf.get("no_rope_layer_interval") or 4)
        rope = hf.get("no_rope_layers") or [int((i + 1) % every != 0) for i in range(layers)]
        if len(rope) != layers or set(rope) - {0, 1}:
            raise self.refuse(where, "no_rope_layers", rope, f"give {layers} of 1 (rotary) or 0 (none)")
        window = hf.get("sliding_window") if hf.get("use_sliding_window") else None
        types = hf.get("layer_types") or [
            "sliding_attention" if window is not None and not r else "full_attention" for r in rope
        ]
        if len(types) != layers or set(types) - {"sliding_attention", "full_attention"}:
            raise self.refuse(where, "layer_types", types, f"give {layers} of 'sliding_attention'/'full_attention'")
        windows = layer_windows({"layer_types": types}, layers, fields["max_seq_len"], window)
        entries = []
        for r, w in zip(rope, windows, strict=True):
            entry: dict[str, Any] = {} if r else {"position": "none"}
            if w is not None:
                entry["attention"] = {"window": w}
            entries.append(entry)
        fields = {**fields, "tie_embeddings": bool(hf.get("tie_word_embeddings", True))}
        return {**fields, "layer_pattern": periodic(entries)} if any(entries) else fields

    def blockers(self, config: ModelConfig) -> list[str]:
        blockers = [b for b in super().blockers(config) + window_blockers(config, self.architecture)]
        blockers = [b for b in blockers if not b.startswith("per-layer position")]
        changes = {kind for i in range(config.n_layers) for kind in config.layer_changes(i)} - {"attention", "position"}
        if changes:
            blockers.append(f"per-layer {', '.join(sorted(changes))} ({self.architecture} has one design)")
        if {config.layer(i).position.name for i in range(config.n_layers)} - {"rotary", "none"} or any(
            config.layer(i).position != config.position
            for i in range(config.n_layers)
            if config.layer(i).position.name == "rotary"
        ):
            blockers.append(f"layer positions other than the rotary or none ({self.architecture})")
        return blockers

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        windows = window_per_layer(config)
        sizes = {w for w in windows if w is not None}
        return {
            **hf,
            "pad_token_id": None,  # SmolLM3Config's default (128004) may not fit the vocabulary
            "no_rope_layers": [int(config.layer(i).position.name != "none") for i in range(config.n_layers)],
            "use_sliding_window": bool(sizes),
            "sliding_window": next(iter(sizes), None),
            "layer_types": ["sliding_attention" if w is not None else "full_attention" for w in windows],
        }


CONVERTERS: tuple[Converter, ...] = (Starcoder2(), Gemma2(), Gemma3(), SmolLM3())
#: Presets of released checkpoints of these families (TOML files in ``presets/``).
PRESETS: tuple[str, ...] = ("starcoder2-3b", "gemma-2-2b", "gemma-3-1b", "gpt-neo-125m", "smollm3-3b")

__all__ = ["CONVERTERS", "SmolLM3", "Gemma2", "Gemma3", "PRESETS", "Starcoder2"]
