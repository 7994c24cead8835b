"""A Hugging Face family as a table: one engine makes a ``Converter`` from it.

A ``Family`` names each ``config.json`` field once (``F``): a rename into a zoo config
field (with transformers' default, its type, and a value map such as the activation
names), or a switch the zoo does not model (``F.must``: any other value is refused). The
same entry reads, writes and refuses; a field the table does not name must hold an "off"
value (null, false) or the file is refused, naming it. Zoo fields every model of the family
has are constants (``zoo``), checked again for export. Weights are one template per layer
(``layer``: zoo name -> Hugging Face name or ``W``), a ``Rule`` each, so one mapping serves
both ways. The few real functions (rotary, windows) are ``read``/``write``/``blockers``
hooks. A family derives from its nearest relative (``Family.derive``) and states only what
differs.
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pydantic import create_model

from zoo.errors import InteropError
from zoo.nn.converter import LAYER_KINDS, Converter, Count, HFFields, Layers, Rule, check_layer_types, refuse

if TYPE_CHECKING:
    from zoo.nn.config import ModelConfig

__all__ = ["REQUIRED", "F", "Family", "W", "builtin_family", "converter", "linear", "zoo_value"]

REQUIRED: Any = ...  # a field config.json must give
#: ``config.json`` fields of every architecture that change no computation (transformers'
#: bookkeeping, token ids, initialisation and caching switches).
HARMLESS = frozenset(
    "_name_or_path architectures model_type dtype torch_dtype transformers_version id2label label2id "
    "problem_type return_dict output_attentions output_hidden_states chunk_size_feed_forward "
    "is_encoder_decoder bos_token_id eos_token_id pad_token_id sep_token_id decoder_start_token_id "
    "initializer_range init_std use_cache tokenizer_class task_specific_params _attn_implementation "
    "finetuning_task prefix torchscript pruned_heads tie_encoder_decoder is_decoder cache_implementation".split()
)

Reader = Callable[[Mapping[str, Any], dict[str, Any], str], dict[str, Any]]
Writer = Callable[["ModelConfig", dict[str, Any]], dict[str, Any]]
Blocker = Callable[["ModelConfig", str], list[str]]


@dataclass(frozen=True)
class F:
    """One ``config.json`` field: read into the zoo field ``to`` (a dotted path such as
    ``dropout.attention`` or ``attention.n_kv_heads``), or, with ``to=None``, a switch that
    must hold ``default`` (``why`` says what another value would mean)."""

    to: str | None
    default: Any = REQUIRED
    kind: Any = Any
    map: Mapping[Any, Any] | None = None  # config.json value -> zoo value (refused if absent)
    why: str = "the zoo does not model another value"
    out: Callable[[ModelConfig], Any] | None = None  # how export writes it, when not the path's value

    @classmethod
    def must(cls, default: Any, why: str, kind: Any = Any) -> F:
        """A switch the zoo models only at ``default``."""
        return cls(None, default, kind, why=why)


@dataclass(frozen=True)
class W:
    """How one zoo tensor is stored: ``hf`` (``{}`` filled by each of ``parts``, concatenated
    along rows), ``how`` (copy, transposed, concat), ``when`` the config has it; ``make``
    for another layout (``make(zoo, hf_names, config) -> Rule``)."""

    hf: str
    how: str = "copy"
    parts: str | tuple[str, ...] = ""
    when: Callable[[ModelConfig], bool] | None = None
    make: Callable[[str, tuple[str, ...], ModelConfig], Rule | list[Rule] | None] | None = None

    def rule(self, zoo: str, prefix: str, config: ModelConfig) -> Rule | list[Rule] | None:
        if self.when is not None and not self.when(config):
            return None
        names = tuple(prefix + self.hf.format(p) for p in self.parts) if self.parts else (prefix + self.hf,)
        if self.make is not None:
            return self.make(zoo, names, config)
        if self.how == "transposed":
            return Rule.transposed(zoo, names[0])
        if self.how == "concat":
            kv = Converter.attention_layout(config)[0] * config.head_dim
            return Rule.concat(zoo, names, (config.n_heads * config.head_dim, kv, kv))
        return Rule.copy(zoo, names[0])


Template = Mapping[str, "str | W | None"]


def linear(names: Mapping[str, str], bias: bool | Callable[[ModelConfig], bool] = True) -> dict[str, str | W]:
    """Weight (and bias, where ``bias`` holds) of each zoo layer under its stored name."""
    out: dict[str, str | W] = {}
    for zoo, hf in names.items():
        out[f"{zoo}.weight"] = f"{hf}.weight"
        if bias is True:
            out[f"{zoo}.bias"] = f"{hf}.bias"
        elif bias is not False:
            out[f"{zoo}.bias"] = W(f"{hf}.bias", when=bias)
    return out


@dataclass(frozen=True)
class Family:
    """One architecture, as data (see the module's docstring)."""

    architecture: str
    model_type: str
    description: str
    prefix: str
    embedding: str
    fields: Mapping[str, F]
    zoo: Mapping[str, Any]
    layer: Template
    top: Template
    layer_prefix: str = "layers.{}."
    head: str = "lm_head.weight"
    top_level: tuple[str, ...] = ("lm_head.weight",)
    skip: tuple[str, ...] = ()
    #: Prefixes of stored weights the architecture's own model never loads (transformers'
    #: ``_keys_to_ignore_on_load_unexpected``: Qwen3-Next's multi-token-prediction ``mtp.``).
    ignored: tuple[str, ...] = ()
    read: tuple[Reader, ...] = ()
    write: tuple[Writer, ...] = ()
    blockers: tuple[Blocker, ...] = ()
    engine_features: frozenset[str] = frozenset()
    layer_kinds: tuple[str, ...] = LAYER_KINDS  # what config.json's layer_types may name
    #: Zoo component kinds and the names export accepts beyond the ``zoo`` constant's.
    accepts: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    extends: str = ""
    aliases: tuple[str, ...] = ()  # other model types of this architecture (not inherited)

    def derive(
        self, architecture: str, fresh: tuple[str, ...] = (), before: tuple[Reader, ...] = (), **changes: Any
    ) -> Family:
        """A family that differs from this one by ``changes``: tables (``fields``, ``zoo``,
        ``layer``, ``top``, ``accepts``) merged, a ``None`` entry dropping the parent's;
        hooks (``read``, ``write``, ``blockers``) run after the parent's; a table or hook
        named in ``fresh`` is replaced instead; ``before``: readers that run before the parent's."""
        merged: dict[str, Any] = {"architecture": architecture, "extends": self.architecture, "aliases": ()}
        merged |= {name: type(getattr(self, name))() for name in fresh}
        for name, value in changes.items():
            old = getattr(self, name)
            if name in fresh:
                pass
            elif isinstance(old, Mapping):
                value = {k: v for k, v in {**old, **value}.items() if v is not None}
            elif isinstance(old, tuple) and name in ("read", "write", "blockers"):
                value = old + tuple(value)
            merged[name] = value
        merged["read"] = before + merged.get("read", self.read)
        return dataclasses.replace(self, **merged)


# -- reading -----------------------------------------------------------------------------


def _fields_model(family: Family) -> type[HFFields]:
    """The typed, bounded fields of ``family`` (``HFFields``), generated from its table."""
    specs: dict[str, Any] = {}
    for name, entry in family.fields.items():
        # a count of layers meets the zoo's own bound, before a reader builds a list per layer
        kind = Layers if entry.kind is Count and entry.to in ("n_layers", "n_encoder_layers") else entry.kind
        specs[name] = (kind, ...) if entry.default is REQUIRED else (kind | None, None)
    not_null = tuple(
        n for n, e in family.fields.items() if e.default not in (None, REQUIRED) and e.kind not in (Any, bool)
    )
    model: type[HFFields] = create_model(
        family.architecture.removesuffix("ForCausalLM").removesuffix("LMHeadModel") + "Fields",
        __base__=HFFields,
        **specs,
    )
    model.not_null = not_null
    return model


def _put(fields: dict[str, Any], path: str, value: Any) -> None:
    """``fields[a][b] = value`` for ``path`` ``a.b`` (a component name becomes its spec)."""
    head, _, rest = path.partition(".")
    if not rest:
        fields[head] = value
        return
    inner = fields.get(head)
    inner = {"name": inner} if isinstance(inner, str) else dict(inner or {})
    _put(inner, rest, value)
    fields[head] = inner


#: How to get full-precision weights from a quantised checkpoint, by ``quant_method``.
QUANTIZED_FIXES = {
    "fp8": "for FP8, dequantise them with their scales, e.g. DeepSeek's fp8_cast_bf16.py",
    "mxfp4": "for MXFP4 (GPT-OSS's experts), load them with transformers' Mxfp4Config(dequantize=True) and save them",
}


def refuse_quantized(hf: Mapping[str, Any], where: str) -> None:
    """Refuse quantised weights (DeepSeek-V3's FP8 blocks and their scales) by name, with the
    fix: the zoo reads full-precision tensors only."""
    quantization = hf.get("quantization_config")
    if quantization:
        method = quantization.get("quant_method") if isinstance(quantization, Mapping) else quantization
        hint = QUANTIZED_FIXES.get(str(method), "dequantised")
        raise InteropError(
            f"{where}: quantization_config (quant_method {method!r}): the weights are stored quantised, "
            f"which the zoo does not read; use the checkpoint's bf16 (or float32) weights ({hint}) and "
            "remove quantization_config from config.json"
        )


def read_config(family: Family, model: type[HFFields], hf: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Zoo config fields of ``config.json`` ``hf`` by ``family``'s table (``layer_types``
    checked before a hook reads it)."""
    refuse_quantized(hf, where)
    model.read(hf, where)
    check_layer_types(hf, where, family.layer_kinds)
    for name, value in hf.items():
        if name not in family.fields and name not in HARMLESS and value not in (None, False, [], {}):
            raise refuse(where, name, value, f"{family.architecture}'s converter does not read this setting")
    fields: dict[str, Any] = {}
    for path, value in family.zoo.items():
        _put(fields, path, value)
    for name, entry in family.fields.items():
        value = hf.get(name)
        value = entry.default if value is None else value
        if entry.to == "":
            continue  # read by one of the family's functions
        if entry.to is None:
            if value != entry.default:
                raise refuse(where, name, value, entry.why)
            continue
        if entry.map is not None:
            if value not in entry.map:
                raise refuse(where, name, value, f"supported: {', '.join(map(str, entry.map))}")
            value = entry.map[value]
        if value is not REQUIRED and (value is not None or "." not in entry.to):
            _put(fields, entry.to, value)  # an option left unset is the component's default
    for reader in family.read:
        fields = reader(hf, fields, where)
    return fields


# -- writing -----------------------------------------------------------------------------


def zoo_value(config: ModelConfig, path: str) -> Any:
    """The value at a zoo path of ``config`` (a component's option, default filled where known)."""
    head, _, rest = path.partition(".")
    value = getattr(config, head)
    if not rest:
        return value.name if hasattr(value, "options") else value
    if hasattr(value, "options"):  # a component spec
        if rest == "n_kv_heads":
            return Converter.attention_layout(config)[0]
        return value.options.get(rest)
    return getattr(value, rest)


def write_config(family: Family, config: ModelConfig) -> dict[str, Any]:
    """``config.json`` fields of ``config`` by ``family``'s table (the reading, reversed)."""
    hf: dict[str, Any] = {}
    for name, entry in family.fields.items():
        if entry.out is not None:
            hf[name] = entry.out(config)
        elif entry.to == "":
            continue
        elif entry.to is None:
            hf[name] = entry.default
        else:
            value = zoo_value(config, entry.to)
            if entry.map is not None:
                value = next((k for k, v in entry.map.items() if v == value), value)
            hf[name] = value
    hf = {**hf, "bos_token_id": None, "eos_token_id": None, "pad_token_id": None}
    for writer in family.write:
        hf = writer(config, hf)
    return hf


# -- weights and blockers ------------------------------------------------------------------


def rules(family: Family, config: ModelConfig) -> list[Rule]:
    """Every zoo tensor of ``config`` and its stored tensors, from the layer template (a
    layer's ``W.when`` and ``W.make`` see that layer's config, ``config.layer(i)``)."""
    out: list[Rule] = []

    def add(template: Template, zoo_prefix: str, hf_prefix: str, where: ModelConfig) -> None:
        for zoo, how in template.items():
            spec = W(how) if isinstance(how, str) else how
            rule = None if spec is None else spec.rule(zoo_prefix + zoo, hf_prefix, where)
            out.extend([] if rule is None else rule if isinstance(rule, list) else [rule])

    add({k: v for k, v in family.top.items() if k == "tok_emb.weight"}, "", "", config)
    for i in range(config.n_layers):  # each layer by its own config: a hybrid's mixers differ
        add(family.layer, f"blocks.{i}.", family.layer_prefix.format(i), config.layer(i))
    add({k: v for k, v in family.top.items() if k != "tok_emb.weight"}, "", "", config)
    return out


#: Zoo fields a family's ``zoo`` constants fix, with how export names a difference.
SWITCHES: tuple[str, ...] = ("architecture", "final_norm", "embedding_scale", "head_output", "logit_scale", "head_bias")
SWITCHES += ("embedding_norm", "bias")
DEFAULTS: dict[str, Any] = {"architecture": "decoder", "final_norm": None, "embedding_scale": "none"}
DEFAULTS |= {"head_output": "logits", "logit_scale": 1.0, "head_bias": False, "embedding_norm": False}


def table_blockers(family: Family, config: ModelConfig) -> list[str]:
    """What in ``config`` differs from the family's constant parts and switches."""
    arch, blockers = family.architecture, []
    for name in SWITCHES:
        want = family.zoo.get(name, DEFAULTS.get(name))
        have = getattr(config, name)
        if name in family.accepts and (have in family.accepts[name] or "*" in family.accepts[name]):
            continue
        if name in family.zoo or name in DEFAULTS:
            if have != want and not (name == "final_norm" and have is not False and want is not False):
                shown = str(have).lower() if isinstance(have, bool) else repr(have)
                blockers.append(f"{name}={shown} ({arch} has {want!r})")
    for name, entry in family.fields.items():
        if entry.map is not None and entry.to and entry.out is None:
            value = zoo_value(config, entry.to)
            if value not in entry.map.values():
                blockers.append(
                    f"{entry.to} {value!r} ({arch}'s {name} has {', '.join(map(repr, entry.map.values()))})"
                )
    for kind in ("placement", "norm", "position", "mlp", "activation", "attention"):
        spec = family.zoo.get(kind)
        if spec is None:
            continue
        want = spec if isinstance(spec, str) else spec["name"]
        have = getattr(config, kind).name
        if have != want and have not in family.accepts.get(kind, ()):
            blockers.append(f"{kind} {have!r} ({arch} has {want})")
        elif not isinstance(spec, str):
            blockers += option_blockers(family, config, kind, spec)
    if config.attention.options.get("kernel") not in (None, "sdpa", "eager"):
        blockers.append("an attention kernel other than sdpa/eager")
    kv = Converter.attention_layout(config)[0]
    if kv != config.n_heads and not any(e.to == "attention.n_kv_heads" for e in family.fields.values()):
        if "n_kv_heads" not in family.accepts:
            blockers.append(f"{kv} key/value heads ({arch} has one per query head)")
    return blockers


def option_blockers(family: Family, config: ModelConfig, kind: str, spec: Mapping[str, Any]) -> list[str]:
    """The options of ``kind`` that the family fixes (``zoo``) and ``config`` sets otherwise."""
    blockers, layout = [], Converter.attention_layout(config)
    for option, want in spec.items():
        if option == "name":
            continue
        have = getattr(config, kind).options.get(option)
        if kind == "attention" and option in ("n_kv_heads", "qkv_bias", "out_bias"):
            have = layout[("n_kv_heads", "qkv_bias", "out_bias").index(option)]
        if have != want and not (have is None and want is False):  # an option left unset is off
            blockers.append(f"{kind} {option}={have!r} ({family.architecture} has {option}={want!r})")
    return blockers


def converter(family: Family) -> Converter:
    """The ``Converter`` of ``family``: reading, writing, refusals and weights from its table."""
    model = _fields_model(family)

    class TableConverter(Converter):
        architecture = family.architecture
        model_type = family.model_type
        model_type_aliases = family.aliases
        description = family.description
        prefix = family.prefix
        top_level = family.top_level
        embedding = family.embedding
        head = family.head
        engine_features = family.engine_features
        layer_kinds = family.layer_kinds
        table = family

        def skip(self, name: str) -> bool:
            stored_only = bool(family.ignored) and name.startswith(family.ignored)  # weights never loaded
            return stored_only or (bool(family.skip) and name.endswith(family.skip))

        def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
            return read_config(family, model, hf, where)

        def rules(self, config: ModelConfig) -> list[Rule]:
            return rules(family, config)

        def blockers(self, config: ModelConfig) -> list[str]:
            found = table_blockers(family, config)
            for blocker in family.blockers:
                found += blocker(config, family.architecture)
            return found

        def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
            return write_config(family, config)

    TableConverter.__name__ = TableConverter.__qualname__ = family.architecture.removesuffix("ForCausalLM")
    return TableConverter()


def builtin_family(name: str) -> Family:
    """The table of a built-in plugin (``"hf_gpt2.GPT2"``), for a family that derives from it
    (imported by name, as the registry imports the built-in plugins)."""
    module, _, attr = name.partition(".")
    table: Family = getattr(importlib.import_module(f"zoo.plugins.{module}"), attr)
    return table
