"""Gemma 2, Gemma 3 and SmolLM3, the families not yet moved to tables: converter classes
on the Llama-family base (``LlamaFamily``) and Gemma's, kept until each is a ``Family``
table like its relatives in ``llama_like``. Registered from ``zoo_modern.families``."""

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
    Layers,
    ModelConfig,
    Positive,
    RopeTable,
    Rule,
)
from zoo_modern.families.readers import (
    ACTIVATIONS,
    attention_spec,
    common_blockers,
    layer_windows,
    n_kv_heads,
    periodic,
    rope,
    rope_scaling,
    rotary_base,
    rotary_blockers,
    rotary_spec,
    scaling_to_hf,
    turned,
    window_blockers,
    window_per_layer,
    with_windows,
)
from zoo_modern.mlp import swiglu_hidden


class LlamaFields(HFFields):
    """The config.json fields the Llama-family converters read (Llama, Mistral, Qwen2), typed."""

    not_null = ("max_position_embeddings", "rms_norm_eps")

    hidden_size: Count
    num_attention_heads: Count
    num_hidden_layers: Layers
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


class GemmaFields(LlamaFields):
    """The Gemma fields read beyond Llama's."""

    use_bidirectional_attention: bool | None = None


def qknorm_spec(kv: int, head_dim: int, qk_norm: str) -> dict[str, Any]:
    """The ``qknorm`` attention of these families: no biases, ``kv`` key/value heads."""
    return {"name": "qknorm", "n_kv_heads": kv, "head_dim": head_dim, "qk_norm": qk_norm, "qkv_bias": False, "out_bias": False}  # fmt: skip


def qknorm_blockers(config: ModelConfig, architecture: str, qk_norm: str) -> list[str]:
    """What in ``config``'s attention a family with ``qknorm`` attention of ``qk_norm`` cannot express."""
    options = config.attention.options
    if config.attention.name != "qknorm" or options.get("qk_norm") != qk_norm:
        return [f"attention {config.attention.name!r} ({architecture} has qknorm with qk_norm={qk_norm!r})"]
    if options.get("qk_norm_offset") or options.get("scale") is not None:
        return [f"a QK-norm offset or an attention scale ({architecture} has neither)"]
    return []


def qk_norm_rules(config: ModelConfig) -> list[Rule]:
    """The q and k norms of every layer (Hugging Face's ``self_attn.q_norm`` / ``k_norm``)."""
    return [
        Rule.copy(f"blocks.{i}.attn.{p}_norm.weight", f"layers.{i}.self_attn.{p}_norm.weight")
        for i in range(config.n_layers)
        for p in "qk"
    ]


def explicit_head_dim(hf: Mapping[str, Any], default: int) -> int:
    """``head_dim`` as transformers reads it: config.json's, else the config class's default."""
    return int(hf.get("head_dim") or default)


class Gemma(LlamaFamily):
    """Gemma: GeGLU, RMSNorm scaled by 1 + w, embeddings times sqrt(d_model), a tied head."""

    architecture = "GemmaForCausalLM"
    model_type = "gemma"
    description = "Gemma: GeGLU, unit-offset RMSNorm, sqrt(d_model)-scaled embeddings, head_dim 256"
    parts: ClassVar[Mapping[str, str]] = {
        "placement": "pre", "norm": "rmsnorm_offset", "position": "rotary", "mlp": "glu", "activation": "gelu_tanh",
    }  # fmt: skip
    embedding_scale = "sqrt_d_model"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        GemmaFields.read(hf, where)
        if hf.get("use_bidirectional_attention"):
            raise self.refuse(where, "use_bidirectional_attention", True, "the zoo's decoder attends causally")
        activation = hf.get("hidden_act", "gelu_pytorch_tanh")
        if activation not in ACTIVATIONS:
            raise self.refuse(where, "hidden_act", activation, f"supported: {', '.join(sorted(ACTIVATIONS))}")
        # transformers reads Gemma's legacy "gelu" as the tanh approximation, as the weights were trained
        act = "gelu_tanh" if activation == "gelu" else ACTIVATIONS[activation]
        fields = super().config_from_hf({**hf, "hidden_act": "silu"}, where)  # the gate is checked above
        return {
            **fields,
            "tie_embeddings": bool(hf.get("tie_word_embeddings", True)),
            "norm": "rmsnorm_offset",
            "activation": act,
            "mlp": {"name": "glu", "hidden": fields["d_ff"]},
            "embedding_scale": "sqrt_d_model",
        }

    def attention(self, hf: Mapping[str, Any], where: str, kv: int) -> dict[str, Any]:
        d, heads = int(hf["hidden_size"]), int(hf["num_attention_heads"])
        head_dim = explicit_head_dim(hf, 256)  # GemmaConfig's head_dim is 256
        if head_dim == d // heads:
            return super().attention({**hf, "head_dim": None}, where, kv)
        return qknorm_spec(kv, head_dim, "none")

    def attention_blockers(self, config: ModelConfig) -> list[str]:
        if config.attention.name == "qknorm":
            return qknorm_blockers(config, self.architecture, "none")
        return super().attention_blockers(config)

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        hf = super().config_to_hf(config)
        del hf["mlp_bias"]
        return {**hf, "hidden_act": "gelu_pytorch_tanh", "pad_token_id": None}


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


CONVERTERS: tuple[Converter, ...] = (Gemma2(), Gemma3(), SmolLM3())
