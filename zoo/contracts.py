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
  marked ``residual_output`` (whose input is the hook point z).
- position: a ``PositionEncoding``: adds to embeddings, rotates q/k (with the state its
  ``prepare`` made once per forward), and/or biases scores.
- placement: a ``Placement``: joins a sub-layer to the residual stream, owning its norms.
  A layer's two (around attention, around the MLP) are made together by its ``pair``,
  and its ``block`` says how they combine.
- norm, activation, mlp: modules from (B, S, d) to (B, S, d). An MLP's hook points are
  its activation's input (pre: a module the part maker made, or a ``torch.nn``
  activation module) and its ``residual_output`` projection's input (post).
- init: a callable ``init(model)`` that draws fresh weights in place.

Hook points (``zoo.hooks``) come from these promises, so a component writes no hook
code: the model names the places, torch module hooks reach them only while a hook is
set, and ``ctx.attend`` carries the attention's points.

Modules that keep derived buffers (tables of sines, say) implement
``reset_buffers()``; the model calls it whenever it materialises weights from the meta
device, since those buffers are then uninitialised memory.
"""

from __future__ import annotations

import functools
import inspect
import math
import typing
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple, Protocol

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, create_model
from torch import Tensor, nn

if TYPE_CHECKING:
    from zoo.cache import LayerCache

#: Constructor arguments the model fills from the config, by name (see ``zoo.components``).
CONFIG_ARGUMENTS: tuple[str, ...] = (
    "config",  # the whole ModelConfig, for what the names below do not cover
    "vocab_size",
    "max_seq_len",
    "d_model",
    "n_layers",
    "n_heads",
    "head_dim",  # d_model // n_heads
    "n_encoder_layers",
    "d_ff",
    "bias",
    "norm_eps",
    "dropout",  # config.dropout.residual: on each sub-layer's output
    "attn_dropout",  # config.dropout.attention: on the attention weights
    "embedding_dropout",  # config.dropout.embedding
)


@dataclass(frozen=True)
class ComponentKind:
    """One kind of component: its name (a config field, the ``kind`` of ``register``), the
    component a config uses when it names none, and whether it is a module another
    constructor may ask for by argument name (``init`` is applied to the model instead)."""

    name: str
    default: str
    part: bool = True


#: Every kind of component, declared once: ``KINDS`` (the registry), ``PART_KINDS``, the
#: config's spec classes and fields and the ablation's axes derive from it, in this order.
#: A new kind is one entry here, plus what its components promise (above) for the model to use.
COMPONENT_KINDS: tuple[ComponentKind, ...] = (
    ComponentKind("attention", "sdpa"),
    ComponentKind("norm", "layernorm"),
    ComponentKind("placement", "pre"),
    ComponentKind("activation", "gelu"),
    ComponentKind("position", "learned"),
    ComponentKind("mlp", "standard"),
    ComponentKind("init", "gpt2", part=False),
)

#: Kinds whose modules a constructor may ask for by argument name (``norm``, ``norm_in``).
PART_KINDS: tuple[str, ...] = tuple(kind.name for kind in COMPONENT_KINDS if kind.part)

#: The additive mask value for forbidden scores: half of float16's lowest, so a mask
#: built in any float dtype converts to any other, and a score added to it stays finite.
MASKED = torch.finfo(torch.float16).min / 2


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

    Options refuse unknown names and non-finite floats.
    """
    declared = getattr(factory, "Options", None)
    if isinstance(declared, type) and issubclass(declared, BaseModel):
        return declared
    target = factory.__init__ if isinstance(factory, type) else factory  # type: ignore[misc]
    try:
        hints = typing.get_type_hints(target, include_extras=True)
    except (NameError, TypeError, AttributeError):  # an annotation that does not resolve: any value
        hints = {}
    fields: dict[str, Any] = {}
    for parameter in constructor_parameters(factory):
        name = parameter.name
        if name in CONFIG_ARGUMENTS or part_kind(name) is not None:
            continue
        default = ... if parameter.default is inspect.Parameter.empty else parameter.default
        fields[name] = (hints.get(name, Any), default)
    config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False, arbitrary_types_allowed=True)
    name = f"{getattr(factory, '__name__', 'Component')}Options"
    return create_model(name, __config__=config, **fields)


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

    A layer asks for its two placements at once, with ``pair``, and runs them with
    ``block``: by default two independent ones, one sub-layer after the other. A
    placement that runs attention and MLP side by side overrides both.
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


def residual_output(layer: nn.Linear) -> nn.Linear:
    """Mark ``layer`` as a projection that writes into the residual stream.

    Init schemes (GPT-2's) scale these down by sqrt(2 * n_layers).
    """
    layer.zoo_residual_output = True  # type: ignore[assignment]
    return layer


def is_residual_output(module: nn.Module) -> bool:
    return bool(getattr(module, "zoo_residual_output", False))


class LayerPoints(Protocol):
    """One attention layer's hook points while hooks are set (``zoo.hooks`` makes it)."""

    def point(self, name: str, x: Tensor) -> Tensor:
        """``x`` as the hooks at ``name`` leave it (read, or replaced)."""
        ...

    def wants(self, *names: str) -> bool:
        """Whether a hook is set at any of ``names`` (then scores are computed explicitly)."""
        ...


@dataclass(frozen=True)
class AttentionContext:
    """What one attention call needs beyond its input; inputs only, made once per forward.

    ``mask`` and ``is_causal`` go straight to ``scaled_dot_product_attention``: ``mask``
    is ``None`` or additive, (B|1, H|1, S_q, S_k), with ``MASKED`` where attention is
    forbidden; ``is_causal`` is True only when a plain causal mask suffices (then
    ``mask`` is None).
    """

    mask: Tensor | None = None
    is_causal: bool = False
    encoding: PositionEncoding | None = None  # the model's position component; None: no rotation
    rotation: Any = None  # what ``encoding.prepare(positions)`` made for this forward
    cache: LayerCache | None = None  # this layer's keys and values so far
    memory: Tensor | None = None  # (B, S_m, d) encoder output, for cross-attention
    hooks: LayerPoints | None = None  # this layer's hook points, only while hooks are set

    def for_layer(self, cache: LayerCache | None) -> AttentionContext:
        if cache is self.cache:
            return self
        return AttentionContext(self.mask, self.is_causal, self.encoding, self.rotation, cache, self.memory, self.hooks)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, *, dropout: float = 0.0, explicit: bool = False) -> Tensor:
        """softmax(q k^T / sqrt(dk) + mask) v per head, (B, H, S, dk), for q (B, H, S, dk) and
        k, v (B, H_kv, S_k, dk): each group of H / H_kv query heads reads one key/value head.

        The fused ``scaled_dot_product_attention`` by default; the explicit math with
        ``explicit`` (the eager kernel) or when a hook asks for the scores or the pattern.
        Hook points, as the kernel reads them: ``hook_q``, ``hook_k``, ``hook_v`` (after
        rotation, keys and values with the cache), ``hook_scores`` (masked, before the
        softmax) and ``hook_pattern`` (after it, before dropout).
        """
        hooks = self.hooks
        if hooks is not None:
            q, k, v = hooks.point("hook_q", q), hooks.point("hook_k", k), hooks.point("hook_v", v)
            explicit = explicit or hooks.wants("hook_scores", "hook_pattern")
        if not explicit:
            mask = self.mask if self.mask is None or self.mask.dtype == q.dtype else self.mask.to(q.dtype)
            return F.scaled_dot_product_attention(
                q,
                k,
                v,
                attn_mask=mask,
                dropout_p=dropout,
                is_causal=self.is_causal,
                enable_gqa=k.shape[1] != q.shape[1],
            )  # (B, H, S, dk)
        batch, heads, q_len, dk = q.shape
        kv_heads, k_len = k.shape[1], k.shape[2]
        grouped = q.view(batch, kv_heads, heads // kv_heads, q_len, dk)  # (B, H_kv, G, S, dk)
        scores = grouped @ k[:, :, None].transpose(-2, -1) / math.sqrt(dk)  # (B, H_kv, G, S, S_k)
        scores = scores.view(batch, heads, q_len, k_len)  # (B, H, S, S_k)
        mask = self.mask_for(scores)
        if mask is not None:
            scores = scores + mask
        if hooks is not None:
            scores = hooks.point("hook_scores", scores)
        weights = scores.softmax(dim=-1)
        if hooks is not None:
            weights = hooks.point("hook_pattern", weights)
        if dropout:
            weights = F.dropout(weights, dropout)
        weights = weights.view(batch, kv_heads, heads // kv_heads, q_len, k_len)
        return (weights @ v[:, :, None]).view(batch, heads, q_len, dk)  # (B, H, S, dk)

    def rotate(self, q: Tensor, k: Tensor) -> tuple[Tensor, Tensor]:
        """Queries and new keys turned by the position encoding (unchanged without one)."""
        if self.encoding is None:
            return q, k
        return self.encoding.rotate(q, k, self.rotation)

    def mask_for(self, scores: Tensor) -> Tensor | None:
        """The additive mask for ``scores`` (B, H, S_q, S_k) in their dtype, causal included
        (for attention written out as math, which cannot use ``is_causal``)."""
        q_len, k_len = scores.shape[-2:]
        if self.is_causal:
            future = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).triu(k_len - q_len + 1)
            return torch.zeros((), dtype=scores.dtype, device=scores.device).masked_fill(future, MASKED)
        return None if self.mask is None else self.mask.to(scores.dtype)


def make_mask(
    *,
    q_len: int,
    k_len: int,
    n_heads: int,
    causal: bool,
    key_padding: Tensor | None,
    encoding: PositionEncoding | None,
    dtype: torch.dtype,
    device: torch.device,
) -> tuple[Tensor | None, bool]:
    """``(mask, is_causal)`` for one forward pass: the causal structure, padding (B, k_len,
    True for real keys) and the encoding's score bias, combined once for every layer.

    Queries are the last ``q_len`` of ``k_len`` slots; one new query sees every cached key.
    """
    score = encoding.score_bias(n_heads, q_len, k_len) if encoding is not None else None
    causal = causal and q_len > 1
    if score is None and key_padding is None and (not causal or q_len == k_len):
        return None, causal
    if score is not None:
        mask = score.to(device=device, dtype=dtype)[None]  # (1, H, q_len, k_len)
    else:
        mask = torch.zeros(1, 1, q_len, k_len, dtype=dtype, device=device)
    if causal:
        future = torch.ones(q_len, k_len, dtype=torch.bool, device=device).triu(k_len - q_len + 1)
        mask = mask.masked_fill(future, MASKED)
    if key_padding is not None:
        padding = ~key_padding[:, None, None, -k_len:].to(device=device, dtype=torch.bool)
        mask = mask.masked_fill(padding, MASKED)  # (B, H|1, q_len, k_len)
    return mask, False
