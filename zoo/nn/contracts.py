"""What each kind of component promises, what its constructor may ask for, and what the
model hands to attention.

Components are plain ``nn.Module``s (or, for ``init``, a callable ``init(model)``) with
explicit constructor arguments, so each one also works on its own::

    SdpaAttention(d_model=768, n_heads=12, bias=True, dropout=0.1)

When the model makes one, it fills each constructor argument by name:

- the component's own options (its options model: declared with ``Options``, passed to
  ``register``, or derived from the constructor signature, see ``options_from_signature``);
- a size or switch of the config, by the names in ``CONFIG_ARGUMENTS`` (``d_model``,
  ``n_heads``, ``head_dim``, ``bias``, ``norm_eps``, ``dropout`` = residual dropout,
  ``attn_dropout``, ..., and ``config`` itself);
- a fresh module of another kind, for an argument named after the kind (``norm``,
  ``activation``) or ``<kind>_<suffix>`` (``norm_in``, ``norm_out``).

The kinds:

- attention: ``forward(x, ctx) -> y`` with ``x, y`` of shape (B, S, d_model). It owns its
  projections, turns q/k with ``ctx.rotate``, stores keys/values in ``ctx.cache`` and
  turns q, k, v into per-head outputs with ``ctx.attend`` (the mask, the fused kernel,
  and the hook points q, k, v, scores and pattern), then projects them with a layer
  marked ``residual_output`` (whose input is the hook point z). Two optional attributes:
  ``cache_window = N`` when a later position needs only the last N - 1 of its cache (a
  chunk's keys; the model then gives it a ``RollingLayerCache``), and ``attends = False``
  for a token mixer without scores (a short convolution): it has no q/k/v/scores/pattern
  points, may keep any per-position state in ``ctx.cache`` (``update`` stores any
  (B, *, S, *) pair) and reads padding from ``ctx.padding``.
- position: a ``PositionEncoding``: adds to embeddings, rotates q/k (with the state its
  ``prepare`` made once per forward), and/or biases scores.
- placement: a ``Placement``: joins a sub-layer to the residual stream, owning its norms.
  A layer's two (around attention, around the MLP) are made together by its ``pair``,
  and its ``block`` says how they combine.
- norm, activation, mlp: modules from (B, S, d) to (B, S, d). An MLP's hook points are
  its activation's input (pre: a module the part maker made, or a ``torch.nn``
  activation module) and its ``residual_output`` projection's input (post).
- init: a callable ``init(model)`` that draws fresh weights in place.

Hook points (``zoo.nn.hooks``) come from these promises, so a component writes no hook
code: the model names the places, torch module hooks reach them only while a hook is
set, and ``ctx.attend`` carries the attention's points.

Modules that keep derived buffers (tables of sines, say) implement
``reset_buffers()``; the model calls it whenever it materialises weights from the meta
device, since those buffers are then uninitialised memory.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple

from pydantic import BaseModel, ConfigDict, create_model
from torch import Tensor, nn

from zoo.nn.attention import AttentionContext
from zoo.nn.kinds import COMPONENT_KINDS as COMPONENT_KINDS  # declared there, torch-free
from zoo.nn.kinds import ComponentKind as ComponentKind

#: Constructor arguments the model fills from the config, by name (see ``zoo.nn.parts``).
CONFIG_ARGUMENTS: tuple[str, ...] = (
    "config",  # the whole ModelConfig, for what the names below do not cover
    "vocab_size",
    "max_seq_len",
    "d_model",
    "n_layers",
    "n_heads",
    "head_dim",  # the attention's head_dim option, else d_model // n_heads
    "n_encoder_layers",
    "d_ff",
    "bias",
    "norm_eps",
    "dropout",  # config.dropout.residual: on each sub-layer's output
    "attn_dropout",  # config.dropout.attention: on the attention weights
    "embedding_dropout",  # config.dropout.embedding
)


#: Kinds whose modules a constructor may ask for by argument name (``norm``, ``norm_in``).
PART_KINDS: tuple[str, ...] = tuple(kind.name for kind in COMPONENT_KINDS if kind.part)


def part_kind(argument: str) -> str | None:
    """The kind a constructor argument asks a module of (``norm_in`` -> ``norm``), or None."""
    if argument in CONFIG_ARGUMENTS:
        return None
    kind = argument.split("_", 1)[0]
    return kind if kind in PART_KINDS else None


def signature_of(factory: Callable[..., Any]) -> inspect.Signature | None:
    """``inspect.signature(factory)``, or None where it has none; computed once per factory
    (a model build asks for each component's signature many times, ``zoo list`` for ten
    models), wrappers made with ``functools.wraps`` sharing their wrapped factory's."""
    try:
        return _signature(inspect.unwrap(factory))
    except (TypeError, ValueError):
        return None


@functools.lru_cache(maxsize=1024)
def _signature(factory: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(factory)


def constructor_parameters(factory: Callable[..., Any]) -> list[inspect.Parameter]:
    """The named parameters of ``factory`` (a class's ``__init__`` without ``self``)."""
    signature = signature_of(factory)
    if signature is None:
        return []
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return [p for p in signature.parameters.values() if p.kind in kinds]


def options_from_signature(factory: Callable[..., Any]) -> type[BaseModel]:
    """The options model of a component registered without one: ``factory.Options`` if it
    declares one, else one field per constructor argument the model does not fill (not a
    config argument, not another kind's module), typed and defaulted as in the signature.
    A subclass that inherits ``Options`` (one of ``SdpaAttention``, say) and takes more
    arguments gets them as options beside the inherited ones.

    Options refuse unknown names and non-finite floats.
    """
    declared = getattr(factory, "Options", None)
    if not (isinstance(declared, type) and issubclass(declared, BaseModel)):
        declared = None
    elif "Options" in vars(factory):  # its own: it says which options there are
        return declared
    fields = _signature_fields(factory, set(declared.model_fields) if declared is not None else set())
    name = f"{getattr(factory, '__name__', 'Component')}Options"
    if declared is not None:
        return declared if not fields else create_model(name, __base__=declared, **fields)
    config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=True)
    return create_model(name, __config__=config, **fields)


def _signature_fields(factory: Callable[..., Any], known: set[str]) -> dict[str, Any]:
    """An options field (type, default) per constructor argument of ``factory`` the model
    does not fill and ``known`` lacks."""
    target = factory.__init__ if isinstance(factory, type) else factory  # type: ignore[misc]
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except (NameError, TypeError, AttributeError):  # an annotation that does not resolve: any value
        hints = {}
    fields: dict[str, Any] = {}
    for parameter in constructor_parameters(factory):
        name = parameter.name
        if name in CONFIG_ARGUMENTS or part_kind(name) is not None or name in known:
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (hints.get(name, Any), default)
    return fields


def legacy_arguments(factory: Callable[..., Any]) -> bool:
    """Whether ``factory`` takes ``(builder, options)``, the contract before explicit arguments."""
    return [p.name for p in constructor_parameters(factory)][:1] == ["builder"]


class PositionEncoding(nn.Module):
    """Base of position components; each method defaults to doing nothing.

    Per forward pass the model calls ``prepare(positions)`` once and hands what it
    returns to every layer's ``rotate``, so tables such as rotary's cos/sin are computed
    once, not once per layer.
    """

    #: Longest position this encoding can represent, or ``None`` for no limit.
    max_positions: int | None = None
    #: Whether positions number a row's slots, padding included, as BART's decoders do
    #: (transformers gives them no position ids): decoding a left-padded batch then starts a
    #: row's first token at its slot, not at 0.
    counts_padding: bool = False

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Token embeddings (B, S, d) plus position information; ``positions`` is (B|1, S)."""
        return x

    def prepare(self, positions: Tensor) -> Any:
        """State for ``rotate`` from the query ``positions`` (B|1, S), once per forward."""
        return None

    def rotate(self, q: Tensor, k: Tensor, state: Any) -> tuple[Tensor, Tensor]:
        """Queries and new keys, (B, H, S, dk), transformed with ``prepare``'s state."""
        return q, k

    def score_bias(self, n_heads: int, q_len: int, k_len: int) -> Tensor | None:
        """An additive (n_heads, q_len, k_len) bias on attention scores, or ``None``.

        Queries are the last ``q_len`` of ``k_len`` slots (earlier ones are cached).
        """
        return None


class Placement(nn.Module):
    """Joins a sub-layer to the residual stream: ``forward(x, sublayer, *args)``.

    A layer asks for its two placements at once, with ``pair``, and runs them one
    sub-layer after the other (the model's ``Block.forward`` writes that out). A placement
    that combines them otherwise (attention and MLP side by side) overrides ``block``.
    """

    #: Whether a model of blocks placed like this wants a norm after the last block.
    final_norm: ClassVar[bool] = True

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        raise NotImplementedError

    @classmethod
    def pair(cls, make: Callable[..., Placement]) -> tuple[Placement, Placement]:
        """One layer's placements, around its attention and around its MLP.

        ``make(**arguments)`` makes one as configured, with ``arguments`` in place of what
        the model would fill in (``make(norm=None)``: no norm of its own). Both halves
        come from one call, so they can share what they own without state kept elsewhere.
        """
        return make(), make()

    @classmethod
    def block(
        cls,
        x: Tensor,
        attn_residual: Placement,
        attn: nn.Module,
        mlp_residual: Placement,
        mlp: nn.Module,
        ctx: AttentionContext,
        cross: CrossAttention | None = None,
    ) -> Tensor:
        """One layer: attention joined by ``attn_residual``, then (in an encoder-decoder's
        decoder) the cross-attention by its own placement, then the MLP by ``mlp_residual``.

        A placement that overrides ``block`` without a ``cross`` argument places
        decoder-only layers; the zoo refuses it for an encoder-decoder (``takes_cross``)."""
        x = attn_residual(x, attn, ctx)
        if cross is not None:
            x = cross.residual(x, cross.attn, cross.ctx)
        out: Tensor = mlp_residual(x, mlp)
        return out


class CrossAttention(NamedTuple):
    """An encoder-decoder's cross-attention sub-layer, for ``Placement.block``: its
    placement, the attention (queries from the target, keys and values from the encoder's
    output) and its context."""

    residual: Placement
    attn: nn.Module
    ctx: AttentionContext


def wires_layer(placement: type[Placement]) -> bool:
    """Whether ``placement`` combines a layer's sub-layers itself (overrides ``block``, as a
    parallel layout does), instead of the model's one-after-the-other."""
    return placement.block.__func__ is not Placement.block.__func__  # type: ignore[attr-defined]


def takes_cross(placement: type[Placement]) -> bool:
    """Whether ``placement``'s ``block`` can place a decoder layer with cross-attention."""
    return "cross" in inspect.signature(placement.block).parameters


def require_cross(placement: type[Placement], name: str) -> None:
    """Refuse ``placement`` (registered as ``name``) for an encoder-decoder when its
    ``block`` takes no cross-attention: it places decoder-only layers."""
    if not takes_cross(placement):
        raise ValueError(
            f"placement {name!r} combines a decoder-only layer's attention and MLP (its block takes no "
            f"cross-attention), so it cannot place an 'encoder_decoder' model's decoder layers; use "
            f"placement 'pre' or 'post'"
        )
