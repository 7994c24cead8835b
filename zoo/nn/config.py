"""Model configs: a frozen pydantic model naming one component of each kind.

A component spec is its registered name plus that component's own options, side by
side: ``"sdpa"`` or ``{"name": "gqa", "n_kv_heads": 2}``. Names and options are checked
against the registry at validation time, and the validated config records every
option with its default filled in, so a saved config rebuilds the same model later.

Presets are TOML files of config fields; a ``[preset]`` table may name a preset it
``extends``, a ``description``, and the hub id of its weights (``pretrained``).
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    GetJsonSchemaHandler,
    Strict,
    StrictBool,
    StrictInt,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
)
from pydantic.json_schema import JsonSchemaValue
from pydantic_core import core_schema

from zoo.errors import ConfigError, PresetError, checked_types, printable, quoted
from zoo.nn.contracts import COMPONENT_KINDS, Placement, require_cross
from zoo.nn.registry import KINDS, Registry, default_registry
from zoo.nn.sizes import scaled_sizes

# Upper bounds that refuse an absurd config before anything is allocated.
MAX_VOCAB = 1 << 21
MAX_SEQ_LEN = 1 << 20
MAX_D_MODEL = 1 << 15
MAX_D_FF = 1 << 18
MAX_LAYERS = 1 << 10
MAX_HEADS = 1 << 10
MAX_PARAMETERS = 2_000_000_000_000  # DeepSeek-V3's 671 B and the trillion-parameter mixtures fit

# What a preset's [preset] table may hold; ``pretrained`` is the hub id of its weights,
# ``family`` the family ``zoo list`` groups it under ("GPT-2", "Llama").
PRESET_KEYS = frozenset({"extends", "description", "pretrained", "family"})
HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]{0,95}/)?[A-Za-z0-9][\w.-]{0,95}$")
FAMILY = re.compile(r"[A-Za-z0-9][A-Za-z0-9 ().+-]{0,39}")

# A number that may be written as an int, never as a bool or a string, and is finite.
FiniteFloat = Annotated[float, Strict(), Field(allow_inf_nan=False)]
# A factor on activations: finite and above 0.
Multiplier = Annotated[float, Strict(), Field(gt=0.0, allow_inf_nan=False)]


class ComponentSpec(BaseModel):
    """A component by registered name, with its options beside the name."""

    model_config = ConfigDict(frozen=True, extra="allow")
    kind: ClassVar[str] = ""

    name: str = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _from_name(cls, data: Any) -> Any:
        return {"name": data} if isinstance(data, str) else data

    @property
    def options(self) -> dict[str, Any]:
        """The component's own options (everything but ``name``)."""
        return dict(self.model_extra or {})

    @classmethod
    def __get_pydantic_json_schema__(
        cls, schema: core_schema.CoreSchema, handler: GetJsonSchemaHandler
    ) -> JsonSchemaValue:
        """One alternative per installed component of this kind, with its options."""
        registry = _schema_registry.get() or default_registry()
        choices: list[dict[str, Any]] = []
        for component in registry.components(cls.kind):
            options = component.options_model.model_json_schema()
            properties = {"name": {"const": component.name}, **options.get("properties", {})}
            choice = {
                "type": "object",
                "title": f"{cls.kind}: {component.name}",
                "description": component.description,
                "properties": properties,
                "required": ["name", *options.get("required", [])],
                "additionalProperties": False,
            }
            if "$defs" in options:
                choice["$defs"] = options["$defs"]
            choices.append(choice)
        names = [c.name for c in registry.components(cls.kind)]
        return {"anyOf": [{"type": "string", "enum": names}, *choices], "title": f"{cls.kind} component"}


# The registry whose components ``config_json_schema`` lists (pydantic's schema
# generation takes no context of its own).
_schema_registry: ContextVar[Registry | None] = ContextVar("zoo_schema_registry", default=None)


def config_json_schema(registry: Registry | None = None) -> dict[str, Any]:
    """The JSON schema of ``ModelConfig``, with one alternative per component of ``registry``
    (default: the installed plugins) and that component's options."""
    token = _schema_registry.set(registry)
    try:
        return ModelConfig.model_json_schema()
    finally:
        _schema_registry.reset(token)


#: The spec class of each kind (``AttentionSpec``, ``NormSpec``, ...), made from the
#: declaration of the kinds, ``zoo.nn.contracts.COMPONENT_KINDS``.
SPECS: dict[str, type[ComponentSpec]] = {
    kind.name: type(f"{kind.name.capitalize()}Spec", (ComponentSpec,), {"kind": kind.name, "__module__": __name__})
    for kind in COMPONENT_KINDS
}
globals().update({spec.__name__: spec for spec in SPECS.values()})  # zoo.nn.config.AttentionSpec: picklable by name


class Dropout(BaseModel):
    """Dropout probabilities; a single number sets all three."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    embedding: FiniteFloat = Field(0.0, ge=0.0, lt=1.0, description="after token + position embedding")
    attention: FiniteFloat = Field(0.0, ge=0.0, lt=1.0, description="on the attention weights")
    residual: FiniteFloat = Field(0.0, ge=0.0, lt=1.0, description="on each sub-layer's output")

    @model_validator(mode="before")
    @classmethod
    def _from_number(cls, data: Any) -> Any:
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return {"embedding": data, "attention": data, "residual": data}
        return data


#: The kinds a layer of ``layer_pattern`` may change (``init`` acts on the whole model).
LAYER_KINDS: tuple[str, ...] = tuple(kind.name for kind in COMPONENT_KINDS if kind.part)

LayerChange = Annotated[str, Field(min_length=1)] | dict[str, Any]


class LayerSpec(BaseModel):
    """One entry of ``layer_pattern``: what its layers have instead of the model's
    components. Per kind, a name (another component, with its own options) or a mapping
    of options (the model's component with them changed; with ``name``, another one):
    ``{"attention": {"window": 4096}}``, ``{"position": "none"}``. ``{}`` changes nothing."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    __annotations__ = {kind: "LayerChange | None" for kind in LAYER_KINDS}  # one optional field per kind
    vars().update({kind: None for kind in LAYER_KINDS})

    @model_serializer(mode="plain")
    def changes(self) -> dict[str, Any]:
        """The kinds this entry changes, with their change (also what it saves as)."""
        return {kind: getattr(self, kind) for kind in LAYER_KINDS if getattr(self, kind) is not None}


def changed_spec(spec: ComponentSpec, change: str | Mapping[str, Any]) -> dict[str, Any]:
    """``spec`` with a layer's ``change``: options merged into the same component, or
    another component (a new name) with only the options given."""
    old = spec.model_dump()
    new = {"name": change} if isinstance(change, str) else dict(change)
    return {**old, **new} if new.get("name", old["name"]) == old["name"] else new


class ModelConfig(BaseModel):
    """Everything needed to build a model: sizes, switches, and one component per kind."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    architecture: Literal["decoder", "encoder_decoder"] = Field(
        "decoder", description="decoder-only language model, or the 2017 encoder-decoder"
    )
    # Sizes are strict integers (True is not 1) and flags real booleans ("yes" is not True).
    vocab_size: StrictInt = Field(gt=0, le=MAX_VOCAB)
    max_seq_len: StrictInt = Field(
        gt=0,
        le=MAX_SEQ_LEN,
        description="the context the model is built for: learned positions hold no more; positions without a table "
        "run past it (generate warns)",
    )
    d_model: StrictInt = Field(gt=0, le=MAX_D_MODEL)
    n_layers: StrictInt = Field(gt=0, le=MAX_LAYERS)
    n_heads: StrictInt = Field(gt=0, le=MAX_HEADS)
    # Encoder-decoder only; None in the input means n_layers there, and stays None for a decoder.
    n_encoder_layers: StrictInt | None = Field(
        None, gt=0, le=MAX_LAYERS, description="encoder layers (encoder_decoder only; default n_layers)"
    )
    # None in the input means 4 * d_model; always an int once validated.
    d_ff: StrictInt | None = Field(None, gt=0, le=MAX_D_FF, description="MLP hidden size (default 4*d_model)")
    dropout: Dropout = Dropout()
    bias: StrictBool = Field(True, description="biases in linear layers and norms")
    tie_embeddings: StrictBool = Field(True, description="output head shares the token embedding")
    embedding_scale: Literal["none", "sqrt_d_model"] | Multiplier = Field(
        "none", description="token embeddings times sqrt(d_model), or times a number (Granite's embedding_multiplier)"
    )
    head_output: Literal["logits", "log_softmax"] = "logits"
    logit_scale: Multiplier = Field(1.0, description="the head's logits times this (Granite: 1 / logits_scaling)")
    norm_eps: FiniteFloat = Field(1e-5, gt=0.0, lt=1.0)
    final_norm: StrictBool | None = Field(
        None, description="norm after the last block (default: as the placement says)"
    )
    logit_softcap: FiniteFloat | None = Field(
        None, gt=0.0, description="cap the final logits smoothly: cap * tanh(logits / cap) (Gemma 2)"
    )
    layer_pattern: tuple[LayerSpec, ...] = Field(
        (),
        max_length=MAX_LAYERS,
        description="per-layer components, repeated over the layers: layer i has entry i % len (e.g. "
        "[{attention = {window = 4096}}, {}] alternates local and global attention)",
    )
    head_bias: StrictBool = Field(False, description="a bias on the output head (GPT-J, Phi)")
    embedding_norm: StrictBool = Field(False, description="a norm on the embeddings, before the first block (BLOOM)")

    # One field per kind of component (``COMPONENT_KINDS``), after the fields above, its
    # default that kind's: ``attention: AttentionSpec = AttentionSpec(name="sdpa")``, ...
    __annotations__.update({kind.name: SPECS[kind.name] for kind in COMPONENT_KINDS})
    vars().update({kind.name: SPECS[kind.name](name=kind.default) for kind in COMPONENT_KINDS})

    if TYPE_CHECKING:  # the component fields, made above, as type checkers see them

        def __getattr__(self, kind: str) -> ComponentSpec: ...

    @model_validator(mode="after")
    def _check(self, info: ValidationInfo) -> ModelConfig:
        if self.d_ff is None:
            object.__setattr__(self, "d_ff", 4 * self.d_model)  # derived: stays out of fields_set
        if self.architecture == "encoder_decoder":
            if self.n_encoder_layers is None:
                object.__setattr__(self, "n_encoder_layers", self.n_layers)  # derived, like d_ff
        elif self.n_encoder_layers is not None:
            raise ValueError(
                f"n_encoder_layers={self.n_encoder_layers} is set, but a {self.architecture!r} "
                f"model has no encoder; drop n_encoder_layers or set architecture='encoder_decoder'"
            )
        if self.d_model % self.n_heads:
            raise ValueError(
                f"d_model={self.d_model} is not divisible by n_heads={self.n_heads}; "
                f"pick n_heads among {_divisors(self.d_model)}"
            )
        if self.estimated_parameters() > MAX_PARAMETERS:
            raise ValueError(
                f"this config has about {self.estimated_parameters():,} parameters, over the "
                f"limit of {MAX_PARAMETERS:,}; reduce d_model, n_layers, d_ff or vocab_size"
            )
        registry = (info.context or {}).get("registry") or default_registry()
        for kind in KINDS:
            object.__setattr__(self, kind, self._filled(registry, kind, getattr(self, kind), kind))
        self._check_pattern(registry)
        placement = registry.get("placement", self.placement.name).factory
        if self.architecture == "encoder_decoder" and isinstance(placement, type) and issubclass(placement, Placement):
            require_cross(placement, self.placement.name)  # its block must take the decoder's cross-attention
        return self

    def _filled(self, registry: Registry, kind: str, spec: ComponentSpec, where: str) -> ComponentSpec:
        """``spec`` checked against its component (options, ``check``), every option filled in."""
        component = registry.get(kind, spec.name)  # UnknownComponentError passes through
        try:
            options = component.options_model.model_validate(spec.options)
        except ValidationError as err:
            raise ValueError(f"{where} {spec.name!r} options: {_describe(err, prefix=where)}") from None
        _check_option_types(where, spec.name, spec.options, options)
        if component.check is not None:
            component.check(self, options)
        return type(spec)(name=spec.name, **_set_options(options))

    def _check_pattern(self, registry: Registry) -> None:
        """Each entry of ``layer_pattern`` makes valid components; a decoder's layers only.
        A pattern longer than the model (a preset cut to fewer layers) uses its first entries."""
        pattern = self.layer_pattern
        if not pattern:
            return
        if self.architecture != "decoder":
            raise ValueError(
                f"layer_pattern is set, but an {self.architecture!r} model has one design for every "
                f"layer; drop layer_pattern or set architecture='decoder'"
            )
        for j, entry in enumerate(pattern):
            for kind, change in entry.changes().items():
                try:
                    spec = SPECS[kind].model_validate(changed_spec(getattr(self, kind), change))
                except ValidationError as err:
                    raise ValueError(f"layer_pattern[{j}].{kind}: {_describe(err)}") from None
                self._filled(registry, kind, spec, f"layer_pattern[{j}].{kind}")

    def layer(self, index: int) -> ModelConfig:
        """The config layer ``index`` is made from: the model's, with the components its
        ``layer_pattern`` entry changes (``self`` when there is no pattern)."""
        if not self.layer_pattern:
            return self
        changes = self.layer_pattern[index % len(self.layer_pattern)].changes()
        if not changes:
            return self
        specs = {kind: SPECS[kind].model_validate(changed_spec(getattr(self, kind), c)) for kind, c in changes.items()}
        return self.model_copy(update={**specs, "layer_pattern": ()})

    def layer_changes(self, index: int) -> dict[str, Any]:
        """The kinds layer ``index`` has other than the model's (its pattern entry's changes)."""
        if not self.layer_pattern:
            return {}
        return self.layer_pattern[index % len(self.layer_pattern)].changes()

    def estimated_parameters(self) -> int:
        """A quick upper estimate, used to refuse absurd sizes before allocating."""
        d_ff = self.d_ff or 4 * self.d_model
        per_layer = 4 * self.d_model**2 + 3 * self.d_model * d_ff
        embeddings = (self.vocab_size + self.max_seq_len) * self.d_model
        layers = self.n_layers * per_layer
        if self.architecture == "encoder_decoder":  # encoder layers, and cross-attention per decoder layer
            layers += (self.n_encoder_layers or self.n_layers) * per_layer + self.n_layers * 4 * self.d_model**2
        return layers + embeddings * (1 if self.tie_embeddings else 2)

    @property
    def head_dim(self) -> int:
        """Width of each attention head: the attention's ``head_dim`` option where it has
        one (Gemma, Qwen3), else d_model / n_heads; rotary positions read this too."""
        return int(self.attention.options.get("head_dim") or self.d_model // self.n_heads)

    def options(self, kind: str) -> dict[str, Any]:
        """The options of the component of ``kind`` (everything but its name)."""
        options: dict[str, Any] = getattr(self, kind).options
        return options


def _check_option_types(kind: str, name: str, given: Mapping[str, Any], options: BaseModel) -> None:
    """What pydantic's lax mode lets through in a plugin's options: ``True`` for a number,
    ``1`` or ``"yes"`` for a flag, and infinite or NaN floats. Checked here, for every
    plugin, rather than trusting each options model to be strict."""
    for key, value in given.items():
        validated = getattr(options, key, None)
        where = f"{kind} {name!r} option {key}"
        if isinstance(value, bool) and isinstance(validated, (int, float)) and not isinstance(validated, bool):
            raise ValueError(f"{where}: expects a number, got {value!r}; write the number itself")
        if isinstance(validated, bool) and not isinstance(value, bool):
            raise ValueError(f"{where}: expects true or false, got {value!r}")
        if isinstance(validated, float) and not math.isfinite(validated):
            raise ValueError(f"{where}: must be a finite number, got {validated!r}")


def _set_options(options: BaseModel) -> dict[str, Any]:
    """Every option with its value, defaults filled in, except those left at a default of
    ``None`` ("as the config says", like attention's ``n_kv_heads``)."""
    fields = type(options).model_fields
    return {k: v for k, v in options.model_dump().items() if v is not None or fields[k].default is not None}


def _divisors(n: int) -> str:
    small = [d for d in range(1, min(n, 64) + 1) if n % d == 0]
    return ", ".join(map(str, small))


def _describe(err: ValidationError, prefix: str = "") -> str:
    """One line per pydantic error: ``field.path: message (got value)``."""
    lines = []
    for item in err.errors():
        where = ".".join(printable(p, 60) for p in (prefix, *item["loc"]) if p != "")
        got = item.get("input")
        shown = f" (got {quoted(got, 60)})" if got is not None and not isinstance(got, dict) else ""
        message = printable(item["msg"].removeprefix("Value error, "), 300)
        lines.append(f"{where}: {message}{shown}" if where else f"{message}{shown}")
    return "; ".join(lines)


# -- building configs from presets and overrides ---------------------------------------


def validate_config(
    data: Mapping[str, Any], *, registry: Registry | None = None, source: str = "config"
) -> ModelConfig:
    """Validate ``data`` into a ``ModelConfig``, raising ``ConfigError`` with every problem."""
    try:
        return ModelConfig.model_validate(dict(data), context={"registry": registry})
    except ValidationError as err:
        raise ConfigError(f"invalid {source}: {_describe(err)}") from err


def apply_overrides(base: Mapping[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """``base`` with ``overrides`` applied; a component swap drops the old one's options.

    ``placement="post"`` swaps the component; ``attention={"n_kv_heads": 2}`` changes an
    option of the current one; ``dropout=0.1`` or ``dropout={"attention": 0.0}`` set
    dropouts.
    """
    merged = dict(base)
    for key, value in overrides.items():
        if key in KINDS:
            old = _spec_dict(key, merged.get(key, ModelConfig.model_fields[key].default))
            new = _spec_dict(key, value)
            same = new.get("name", old.get("name")) == old.get("name")
            merged[key] = {**old, **new} if same else new
        elif key == "dropout" and isinstance(value, Mapping):
            merged[key] = {**_dropout_dict(merged.get("dropout", {})), **value}
        else:
            merged[key] = value
    return merged


def _spec_dict(kind: str, value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"name": value}
    if isinstance(value, ComponentSpec):
        return value.model_dump()
    if isinstance(value, Mapping):
        return dict(value)
    raise ConfigError(
        f"{kind}: a component must be given as a name or a mapping with 'name', got {value!r}; "
        f"e.g. {kind}={ModelConfig.model_fields[kind].default.name!r}"
    )


def _dropout_dict(value: Any) -> dict[str, Any]:
    """The dropouts ``value`` sets (a mapping or one number), to merge an override into."""
    if isinstance(value, Mapping):
        return dict(value)
    try:
        return Dropout.model_validate(value).model_dump()
    except ValidationError as err:
        raise ConfigError(f"invalid dropout: {_describe(err, prefix='dropout')}") from err


def config_dict(config: ModelConfig) -> dict[str, Any]:
    """The fields a user set (derived ones like a default ``d_ff`` stay derived)."""
    return config.model_dump(exclude_unset=True)


def resolve_config(
    name_or_config: str | ModelConfig | Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    registry: Registry | None = None,
) -> ModelConfig:
    """A preset name, a config or a mapping, with overrides, validated into a config. Sizes
    relative to d_model or to a head's width that the overrides leave unset follow the
    d_model and n_heads they set (``zoo.nn.sizes``)."""
    registry = registry or default_registry()
    if isinstance(name_or_config, str):
        base, source = preset_dict(name_or_config, registry), f"config for preset {name_or_config!r}"
    elif isinstance(name_or_config, ModelConfig):
        if not overrides:
            return name_or_config
        base, source = config_dict(name_or_config), "config"
    elif isinstance(name_or_config, Mapping):
        base, source = dict(name_or_config), "config"
    else:
        raise ConfigError(f"expected a preset name, a ModelConfig or a mapping, got {type(name_or_config).__name__}")
    if overrides:
        source = f"{source} with overrides {sorted(overrides)}"
        base = apply_overrides(base, scaled_sizes(base, overrides, registry))
    return validate_config(base, registry=registry, source=source)


def _read_preset(name: str, registry: Registry) -> tuple[dict[str, Any], dict[str, Any], str]:
    """A preset's config fields, its ``[preset]`` table, and where it came from."""
    preset = registry.preset(name)
    source = preset.source
    if isinstance(source, ModelConfig):
        return config_dict(source), {}, f"preset {name!r} from plugin {preset.plugin.name!r}"
    if isinstance(source, Mapping):
        data, where = dict(source), f"preset {name!r} from plugin {preset.plugin.name!r}"
    else:
        path = Path(source) if isinstance(source, (str, os.PathLike)) else source  # or a Traversable
        where = f"preset {name!r} ({path})"
        try:
            data = tomllib.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
            raise PresetError(f"cannot read {where}: {err}. Fix the TOML file.") from err
    meta = data.pop("preset", {})
    if not isinstance(meta, Mapping) or set(meta) - PRESET_KEYS:
        raise PresetError(f"{where}: the [preset] table may only hold {', '.join(map(repr, sorted(PRESET_KEYS)))}")
    weights = meta.get("pretrained")
    if weights is not None and not (isinstance(weights, str) and HUB_ID.match(weights)):
        raise PresetError(
            f"{where}: [preset] pretrained = {printable(repr(weights))[:80]} is not a hub id; write the id of "
            f'the weights, e.g. pretrained = "openai-community/gpt2"'
        )
    family = meta.get("family")
    if family is not None and not (isinstance(family, str) and FAMILY.fullmatch(family)):
        raise PresetError(
            f"{where}: [preset] family = {printable(repr(family))[:80]} is not a family name; write up to 40 "
            f'letters, digits, spaces or ().+- starting with a letter or digit, e.g. family = "GPT-2"'
        )
    return data, dict(meta), where


def preset_dict(name: str, registry: Registry | None = None, _seen: tuple[str, ...] = ()) -> dict[str, Any]:
    """The raw config fields of preset ``name``, with ``extends`` resolved."""
    registry = registry or default_registry()
    if name in _seen:
        raise PresetError(f"presets extend each other in a cycle: {' -> '.join((*_seen, name))}")
    data, meta, where = _read_preset(name, registry)
    parent = meta.get("extends")
    if parent is None:
        return data
    try:
        base = preset_dict(parent, registry, (*_seen, name))
    except PresetError as err:
        raise PresetError(f"{where} extends {parent!r}: {err}") from err
    return apply_overrides(base, data)


def preset_description(name: str, registry: Registry | None = None) -> str:
    """The description a preset was registered with, or its ``[preset]`` table's; ``""``
    for a preset that cannot be read (its error shows when it is used)."""
    registry = registry or default_registry()
    if registry.preset(name).description:
        return registry.preset(name).description
    try:
        _, meta, _ = _read_preset(name, registry)
    except PresetError:
        return ""
    return str(meta.get("description", ""))


def preset_pretrained(name: str, registry: Registry | None = None) -> str | None:
    """The hub id of the weights preset ``name`` names (``[preset] pretrained``), or None.

    Not inherited through ``extends``: ``gpt2-medium`` extends ``gpt2-small`` but names
    its own weights. A preset that cannot be read has none (its error shows when used).
    """
    try:
        _, meta, _ = _read_preset(name, registry or default_registry())
    except PresetError:
        return None
    weights = meta.get("pretrained")
    return weights if isinstance(weights, str) else None


def preset_family(name: str, registry: Registry | None = None, _seen: tuple[str, ...] = ()) -> str | None:
    """The family preset ``name`` belongs to (``[preset] family``), else its parent's through
    ``extends``, else None (a plugin's preset may name none). A preset that cannot be read,
    or a cycle of ``extends``, has none (its error shows when it is used)."""
    registry = registry or default_registry()
    try:
        _, meta, _ = _read_preset(name, registry)
    except PresetError:
        return None
    family, parent = meta.get("family"), meta.get("extends")
    if isinstance(family, str):
        return family
    if isinstance(parent, str) and parent not in (*_seen, name):
        return preset_family(parent, registry, (*_seen, name))
    return None


@checked_types()
def get_config(name: str, *, registry: Registry | None = None, **overrides: Any) -> ModelConfig:
    """The validated config of preset ``name``, with optional overrides."""
    return resolve_config(name, overrides, registry=registry)


__all__ = [
    "ModelConfig",
    "LayerSpec",
    "ComponentSpec",
    "Dropout",
    "validate_config",
    "config_json_schema",
    "apply_overrides",
    "resolve_config",
    "preset_dict",
    "preset_family",
    "preset_pretrained",
    "get_config",
]
