"""How one Hugging Face architecture maps to the zoo: the class a converter subclasses.

For its architecture (``config.json``'s ``architectures[0]``) a converter reads the config
(``config_from_hf``, refusing with ``InteropError`` what the zoo would compute differently),
writes one back (``config_to_hf``, with ``blockers`` naming what it cannot express), and
maps every zoo tensor to stored tensors both ways (``rules``). Plugins register converters
through the ``zoo_register_converters`` hook; ``zoo.interop.hf`` applies them. This module
holds the shared parts only, no family's knowledge (the tables are ``zoo.nn.family``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Self

import torch
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from torch import Tensor

from zoo.errors import InteropError, printable
from zoo.nn.config import MAX_LAYERS

if TYPE_CHECKING:
    from zoo.nn.config import ModelConfig

__all__ = ["ENGINE_FEATURES", "engine_blockers", "engine_features", "MAX_EXPERTS", "Count", "Epsilon", "Experts"]
__all__ += ["Fraction", "HFFields", "Converter", "Layers", "Positive", "RopeTable", "Rule", "refuse"]

KERNELS = ("sdpa", "eager")  # attention kernels; the same weights fit either


#: Engine features a config may use that most architectures lack: a sliding window,
#: attention score soft-capping and scale (attention options), the final logits' cap,
#: and per-layer components.
ENGINE_FEATURES = ("window", "softcap", "scale", "logit_softcap", "layer_pattern")


def engine_features(config: ModelConfig) -> set[str]:
    """The ``ENGINE_FEATURES`` ``config`` uses, in any layer."""
    used = {"logit_softcap"} if config.logit_softcap is not None else set()
    if config.layer_pattern:
        used.add("layer_pattern")
    for i in range(config.n_layers if config.layer_pattern else 1):
        options = config.layer(i).attention.options
        used |= {name for name in ("window", "softcap", "scale") if options.get(name) is not None}
    return used


def engine_blockers(converter: Converter, config: ModelConfig) -> list[str]:
    """One phrase per engine feature ``config`` uses that ``converter`` does not write."""
    missing = sorted(engine_features(config) - converter.engine_features)
    return [f"{name} ({converter.architecture} has none)" for name in missing]


# -- config.json fields, typed ---------------------------------------------------------------

#: A size or count in config.json (layers, heads, widths, vocabulary): a whole number >= 1.
Count = Annotated[int, Field(ge=1, le=1 << 31)]
#: The experts of one layer a converter reads (the largest released mixtures route among
#: a few hundred): a bound checked before a list or a rule per expert is made.
MAX_EXPERTS = 1 << 12
#: A number of layers in config.json, at most the zoo's ``MAX_LAYERS``: checked before a
#: converter builds a per-layer list (windows, ``layer_types``).
Layers = Annotated[int, Field(ge=1, le=MAX_LAYERS)]
#: A number of experts per layer in config.json (``num_experts``, ``num_local_experts``).
Experts = Annotated[int, Field(ge=1, le=MAX_EXPERTS)]
#: A probability (dropout) or share (rotary_pct): 0 to 1.
Fraction = Annotated[float, Field(ge=0.0, le=1.0)]
#: A norm's epsilon: above 0, below 1.
Epsilon = Annotated[float, Field(gt=0.0, lt=1.0)]
#: A positive, finite number (a rotary base).
Positive = Annotated[float, Field(gt=0.0, le=1e30)]


class HFFields(BaseModel):
    """The ``config.json`` fields a converter reads, each typed and bounded; a converter
    subclasses it and calls ``read`` first, so a list, a string, ``0`` heads or a width
    of ``32.7`` is an ``InteropError`` naming the field, never a wrong model or a raw
    exception. Strict: ``32.7`` is not read as ``32``, ``"12"`` not as ``12``, ``1`` not
    as ``true``. Fields the converter does not read are ignored; ``null`` is "not set",
    except for the fields of ``not_null``."""

    model_config = ConfigDict(extra="ignore", strict=True, frozen=True)

    #: Fields that may be left out (the converter then takes a default) but not ``null``:
    #: the converter reads them as numbers, so a ``null`` would be a raw ``TypeError``.
    not_null: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def read(cls, hf: Mapping[str, Any], where: str) -> Self:
        """``hf`` validated (``null`` values dropped: transformers writes them for "not set")."""
        for name in cls.not_null:
            if name in hf and hf[name] is None:
                raise InteropError(
                    f"{where}: {name} is null; a {cls.__name__.removesuffix('Fields')} config.json gives it as a "
                    f"number. Set it, or remove the line for the default"
                )
        try:
            return cls.model_validate({key: value for key, value in hf.items() if value is not None})
        except ValidationError as err:
            first = err.errors()[0]
            field = ".".join(map(str, first["loc"])) or "config.json"
            if first["type"] == "missing":
                raise InteropError(
                    f"{where}: {field} is missing; a {cls.__name__.removesuffix('Fields')} config.json needs it "
                    f"(as an integer)"
                ) from err
            shown = printable(repr(first.get("input")), 60)
            if first["type"] == "less_than_equal":  # a size past what the zoo builds: refused before any per-layer work
                raise InteropError(
                    f"{where}: {field}={shown} is more than the zoo converts (at most "
                    f"{first.get('ctx', {}).get('le')}); this config.json is not a model to build: fix that field"
                ) from err
            raise InteropError(
                f"{where}: {field}={shown}: {first['msg'].lower()}; config.json is malformed (fix that field)"
            ) from err


class RopeTable(BaseModel):
    """``rope_parameters`` / ``rope_scaling``: a table, whatever else it holds."""

    model_config = ConfigDict(extra="allow", strict=True, frozen=True)

    rope_type: str | None = None
    type: str | None = None
    rope_theta: Positive | None = None
    partial_rotary_factor: Annotated[float, Field(gt=0.0, le=1.0)] | None = None


@dataclass(frozen=True)
class Rule:
    """One zoo tensor and the Hugging Face tensor(s) it is made of.

    ``load(hf_tensors) -> zoo_tensor`` and ``save(zoo_tensor) -> hf_tensors`` are inverse;
    names are without the converter's ``prefix``. ``also``: other stored forms of the same
    tensor, read where a file holds one instead (transformers 5 reads an MoE's experts per
    expert or stacked); export writes this one.
    """

    zoo: str
    hf: tuple[str, ...]
    load: Callable[[Sequence[Tensor]], Tensor]
    save: Callable[[Tensor], Sequence[Tensor]]
    also: tuple[Rule, ...] = ()

    def stored_form(self, stored: Mapping[str, Tensor]) -> Rule:
        """This rule, or the first of ``also`` whose every tensor ``stored`` holds where it lacks one of this one's."""
        if all(name in stored for name in self.hf):
            return self
        return next((form for form in self.also if all(name in stored for name in form.hf)), self)

    @classmethod
    def copy(cls, zoo: str, hf: str) -> Rule:
        """The same tensor under another name."""
        return cls(zoo, (hf,), lambda ts: ts[0], lambda t: [t])

    @classmethod
    def transposed(cls, zoo: str, hf: str) -> Rule:
        """A weight stored (in, out), as GPT-2's ``Conv1D`` does; ``nn.Linear`` holds (out, in)."""
        return cls(zoo, (hf,), lambda ts: ts[0].t(), lambda t: [t.t()])

    @classmethod
    def concat(cls, zoo: str, hf: Sequence[str], sizes: Sequence[int]) -> Rule:
        """Separate tensors (``q_proj``, ``k_proj``, ``v_proj``) stacked along dim 0 into one
        fused zoo tensor (``qkv``); ``sizes`` are their lengths along dim 0."""
        sizes = list(sizes)
        return cls(zoo, tuple(hf), lambda ts: torch.cat(list(ts), dim=0), lambda t: list(torch.split(t, sizes, dim=0)))


def refuse(where: str, setting: str, value: Any, why: str) -> InteropError:
    """The error for a ``config.json`` setting the zoo does not model (to ``raise``)."""
    shown = repr(value)
    shown = shown if len(shown) <= 60 else shown[:57] + "..."
    return InteropError(f"{where}: {setting}={shown}: {why}; the zoo cannot import this model exactly")


#: The kinds of layer a ``config.json``'s ``layer_types`` may name that the zoo models.
LAYER_KINDS = ("full_attention", "sliding_attention")


def check_layer_types(hf: Mapping[str, Any], where: str, kinds: tuple[str, ...] = LAYER_KINDS) -> None:
    """Refuse a ``layer_types`` that is not one kind per layer, as transformers'
    ``validate_layer_type`` refuses it (a length other than ``num_hidden_layers``), or
    that names a kind of layer the converter does not model (``kinds``: its ``layer_kinds``)."""
    types = hf.get("layer_types")
    if types is None:
        return
    layers = hf.get("num_hidden_layers", hf.get("n_layer"))
    count = f"{layers} " if type(layers) is int else ""
    fix = f"give {count}of {' or '.join(map(repr, kinds))}, one per layer, or leave layer_types out"
    if not isinstance(types, list) or not all(isinstance(kind, str) for kind in types):
        raise refuse(where, "layer_types", types, f"it must be a list of layer kinds; {fix}")
    if type(layers) is int and not 0 < layers <= MAX_LAYERS:
        return  # the fields' bound refuses the count itself, naming it (``Layers``)
    if type(layers) is int and len(types) != layers:
        raise refuse(
            where, "layer_types", types,
            f"it has {len(types)} entries but num_hidden_layers is {layers} (transformers refuses this config too); {fix}",
        )  # fmt: skip
    unknown = sorted(set(types) - set(kinds))
    if unknown:
        raise refuse(
            where, "layer_types", types, f"the zoo does not model {', '.join(map(repr, unknown))} layers; {fix}"
        )


class Converter:
    """Reads (and, when ``config_to_hf`` is overridden, writes) one Hugging Face architecture.

    Subclass it, set the class attributes, implement ``config_from_hf`` and ``rules``,
    and register an instance from a plugin's ``zoo_register_converters`` hook.
    """

    #: ``config.json``'s ``architectures[0]``, e.g. ``"LlamaForCausalLM"``.
    architecture: ClassVar[str] = ""
    #: ``config.json``'s ``model_type``, e.g. ``"llama"``.
    model_type: ClassVar[str] = ""
    #: Other model types transformers builds with this architecture's classes (its config
    #: alone differs: InternLM3's ``LlamaForCausalLM``); read, exported as ``model_type``.
    model_type_aliases: ClassVar[tuple[str, ...]] = ()
    description: ClassVar[str] = ""
    #: Prefix of the base model's tensors (``"model."``); rules name tensors without it.
    prefix: ClassVar[str] = ""
    #: Tensors stored without the prefix (the head).
    top_level: ClassVar[tuple[str, ...]] = ("lm_head.weight",)
    #: The token embedding and the output head, as rules name them (for tied heads).
    embedding: ClassVar[str] = ""
    head: ClassVar[str] = "lm_head.weight"

    def config_from_hf(self, hf: Mapping[str, Any], where: str) -> dict[str, Any]:
        """Zoo config fields for ``config.json`` ``hf``; ``InteropError`` for what is not modelled."""
        raise NotImplementedError

    def rules(self, config: ModelConfig) -> list[Rule]:
        """Every zoo tensor of a model of ``config`` and how it maps to Hugging Face tensors."""
        raise NotImplementedError

    def skip(self, name: str) -> bool:
        """Whether a stored tensor is not a weight (a saved mask or rotary table)."""
        return False

    #: The engine's features (``ENGINE_FEATURES``) this converter writes back; a config
    #: using any other is refused for export (``engine_blockers``), whatever ``blockers`` says.
    engine_features: ClassVar[frozenset[str]] = frozenset()
    #: The kinds ``config.json``'s ``layer_types`` may name for this architecture (a
    #: hybrid's own, such as LFM2's ``"conv"``, besides the attention kinds).
    layer_kinds: ClassVar[tuple[str, ...]] = LAYER_KINDS

    @property
    def exports(self) -> bool:
        """Whether this converter writes its architecture too (``config_to_hf`` overridden)."""
        return type(self).config_to_hf is not Converter.config_to_hf

    def blockers(self, config: ModelConfig) -> list[str]:
        """What in ``config`` this architecture cannot express, one phrase each; [] fits."""
        return [] if self.exports else [f"{self.architecture} is import-only"]

    def config_to_hf(self, config: ModelConfig) -> dict[str, Any]:
        """``config.json`` fields (without ``architectures``/``model_type``/``dtype``)."""
        raise NotImplementedError

    @staticmethod
    def attention_layout(config: ModelConfig) -> tuple[int, bool, bool]:
        """``(n_kv_heads, qkv_bias, out_bias)`` of ``config``'s attention, defaults filled in
        (all key/value heads, the config's ``bias``), whichever attention names them."""
        options = config.attention.options
        n_kv = options.get("n_kv_heads") or config.n_heads
        qkv_bias = config.bias if options.get("qkv_bias") is None else bool(options["qkv_bias"])
        out_bias = config.bias if options.get("out_bias") is None else bool(options["out_bias"])
        return int(n_kv), qkv_bias, out_bias

    @staticmethod
    def refuse(where: str, setting: str, value: Any, why: str) -> InteropError:
        """The ``InteropError`` for a ``config.json`` setting not modelled (to ``raise``)."""
        return refuse(where, setting, value, why)

    def with_kernel(self, fields: dict[str, Any], kernel: str) -> dict[str, Any]:
        """``fields`` with the attention run by ``kernel`` ("sdpa" or "eager")."""
        spec = fields.get("attention", "sdpa")
        spec = {"name": spec} if isinstance(spec, str) else dict(spec)
        if spec["name"] in KERNELS:
            spec["name"] = kernel
        else:
            spec["kernel"] = kernel
        return {**fields, "attention": spec}

    # -- names ----------------------------------------------------------------------

    def local_name(self, stored: str) -> str:
        """A stored tensor's name as rules write it (the prefix removed if present)."""
        return stored.removeprefix(self.prefix) if self.prefix else stored

    def stored_name(self, name: str) -> str:
        """The name a rule's tensor is written under."""
        return name if name in self.top_level else f"{self.prefix}{name}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.architecture}>"


# -- applying rules -----------------------------------------------------------------


def state_from_hf(
    converter: Converter,
    tensors: Mapping[str, Tensor],
    config: ModelConfig,
    expected: Mapping[str, Tensor],
    where: str,
    *,
    allow_nonfinite: bool = False,
) -> dict[str, Tensor]:
    """Zoo state dict from Hugging Face tensors (local names), checked name by name, shape
    by shape, and value by value: weights must be floating point and (unless
    ``allow_nonfinite``) finite, else an ``InteropError`` names the tensor."""
    check_weights(tensors, where, allow_nonfinite=allow_nonfinite)
    remaining = dict(tensors)
    state: dict[str, Tensor] = {}
    missing: list[str] = []
    for rule in converter.rules(config):
        if rule.zoo == "head.weight" and config.tie_embeddings:
            for name in rule.hf:
                remaining.pop(name, None)  # a stored copy of the tied head (checked by from_hf)
            continue
        rule = rule.stored_form(remaining)
        parts = [remaining.pop(name, None) for name in rule.hf]
        if any(p is None for p in parts):
            missing += [n for n, p in zip(rule.hf, parts, strict=True) if p is None]
            continue
        want = tuple(expected[rule.zoo].shape)
        shapes = ", ".join(f"{n} {tuple(p.shape)}" for n, p in zip(rule.hf, parts, strict=True))  # type: ignore[union-attr]
        try:
            tensor = rule.load(parts)  # type: ignore[arg-type]
        except RuntimeError as err:
            raise InteropError(f"{where}: cannot combine {shapes} into the zoo's {rule.zoo} {want}: {err}") from err
        if tuple(tensor.shape) != want:
            raise InteropError(
                f"{where}: {shapes} make a {rule.zoo} of shape {tuple(tensor.shape)}, but the config "
                f"implies {want}; the weights and the config disagree"
            )
        state[rule.zoo] = tensor.contiguous()
    if missing:
        raise InteropError(f"{where}: missing {converter.architecture} tensors: {listing(missing)}")
    if remaining:
        raise InteropError(
            f"{where}: tensors {converter.architecture}'s layout does not have (another architecture, "
            f"or a variant the zoo cannot import exactly): {listing(sorted(remaining))}"
        )
    if config.tie_embeddings:
        state["head.weight"] = state["tok_emb.weight"]
    return state


def check_weights(tensors: Mapping[str, Tensor], where: str, *, allow_nonfinite: bool = False) -> None:
    """Refuse integer or bool weights (they cannot be a model's parameters) and, unless
    ``allow_nonfinite``, NaN or infinite values (a model that outputs garbage)."""
    check_storage(tensors, where)
    for name, tensor in tensors.items():
        if not tensor.is_floating_point():
            raise InteropError(
                f"{where}: the tensor {name[:120]!r} holds {str(tensor.dtype).removeprefix('torch.')} values; "
                f"model weights are floating point (float32, float16 or bfloat16): the file is not a model's weights"
            )
        if not allow_nonfinite and tensor.numel() and not bool(torch.isfinite(tensor).all()):
            bad = int((~torch.isfinite(tensor)).sum())
            raise InteropError(
                f"{where}: the tensor {name[:120]!r} holds {bad:,} NaN or infinite value(s); a model with them "
                f"generates garbage. Restore the weights from a copy, or load them anyway with "
                f"allow_nonfinite=True"
            )


def check_storage(tensors: Mapping[str, Tensor], where: str) -> None:
    """Refuse tensors whose shape claims more elements than their storage holds (stride
    0, overlapping strides): a few kB of file that would be expanded into gigabytes. Run
    before anything copies a tensor."""
    for name, tensor in tensors.items():
        storage = tensor.untyped_storage().nbytes()
        need = tensor.numel() * tensor.element_size()
        overlapping = any(stride == 0 and size > 1 for size, stride in zip(tensor.shape, tensor.stride(), strict=True))
        if overlapping or need > storage - tensor.storage_offset() * tensor.element_size():
            raise InteropError(
                f"{where}: the tensor {name[:120]!r} declares shape {tuple(tensor.shape)} ({need:,} bytes) over "
                f"{storage:,} bytes of storage (repeated or overlapping elements); a saved weight holds each "
                f"element once: the file is damaged or crafted"
            )


def state_to_hf(converter: Converter, state: Mapping[str, Tensor], config: ModelConfig) -> dict[str, Tensor]:
    """Hugging Face tensors (stored names, on the CPU, contiguous) from a zoo state dict."""
    tensors: dict[str, Tensor] = {}
    for rule in converter.rules(config):
        if rule.zoo == "head.weight" and config.tie_embeddings:
            continue  # transformers ties the head to the embedding itself
        parts = rule.save(state[rule.zoo].detach().to("cpu"))
        for name, part in zip(rule.hf, parts, strict=True):
            tensors[converter.stored_name(name)] = part.contiguous()
    return tensors


def untie_if_stored(
    converter: Converter, fields: dict[str, Any], tensors: Mapping[str, Tensor], where: str
) -> dict[str, Any]:
    """A head stored beside a tied embedding but different from it: keep both, as
    transformers does (warning), so the model computes the same logits."""
    head, embedding = tensors.get(converter.head), tensors.get(converter.embedding)
    if not fields.get("tie_embeddings", True) or head is None or embedding is None:
        return fields
    if head.shape == embedding.shape and torch.equal(head, embedding):
        return fields
    warnings.warn(
        f"{where}: the config ties the head to the embedding (tie_word_embeddings), but the stored "
        f"{converter.head!r} differs from {converter.embedding!r}; loading the stored head untied, as "
        f"transformers does. Set tie_word_embeddings to false to silence this",
        UserWarning,
        stacklevel=4,
    )
    return {**fields, "tie_embeddings": False}


def listing(names: Sequence[str], limit: int = 6) -> str:
    """``a, b, c and N more``: names for an error message, each shown with repr."""
    more = f" and {len(names) - limit} more" if len(names) > limit else ""
    return ", ".join(repr(n)[:80] for n in names[:limit]) + more
