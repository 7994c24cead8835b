"""What each kind of component promises, and what the model hands to attention.

Components are plain ``nn.Module``s; these base classes hold the defaults so a plugin
overrides only what its scheme needs.

- attention: ``forward(x, ctx) -> y`` with ``x, y`` of shape (B, S, d_model). It owns its
  projections, asks ``ctx.position`` to rotate q/k, stores keys/values in ``ctx.cache``
  and gets its mask from ``ctx.attention_bias``. Set ``records_weights = True`` and
  append (B, H, S, S_k) weights to ``ctx.weights`` when it is a list, to support
  ``model.attention_maps``.
- position: a ``PositionEncoding``: adds to embeddings, rotates q/k, and/or biases scores.
- placement: a ``Placement``: joins a sub-layer to the residual stream, owning its norms.
- norm, activation, mlp: modules from (B, S, d) to (B, S, d).
- init: a callable ``init(model)`` that draws fresh weights in place.

Modules that keep derived buffers (tables of sines, say) implement
``reset_buffers()``; the model calls it whenever it materialises weights from the meta
device, since those buffers are then uninitialised memory.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor, nn

if TYPE_CHECKING:
    from zoo.cache import LayerCache


class PositionEncoding(nn.Module):
    """Base of position components; each method defaults to doing nothing."""

    #: Longest position this encoding can represent, or ``None`` for no limit.
    max_positions: int | None = None

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        """Token embeddings (B, S, d) plus position information; ``positions`` is (B|1, S)."""
        return x

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        """Queries and new keys, (B, H, S, dk), transformed by their ``positions`` (B|1, S)."""
        return q, k

    def score_bias(self, n_heads: int, q_len: int, k_len: int) -> Tensor | None:
        """An additive (n_heads, q_len, k_len) bias on attention scores, or ``None``.

        Queries are the last ``q_len`` of ``k_len`` slots (earlier ones are cached).
        """
        return None


class Placement(nn.Module):
    """Joins a sub-layer to the residual stream: ``forward(x, sublayer, *args)``.

    ``block`` says how one layer's attention and MLP combine; by default one after the
    other. A placement that runs them side by side overrides it.
    """

    #: Whether a model of blocks placed like this wants a norm after the last block.
    final_norm: ClassVar[bool] = True

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        raise NotImplementedError

    @classmethod
    def block(
        cls,
        x: Tensor,
        attn_residual: Placement,
        attn: nn.Module,
        mlp_residual: Placement,
        mlp: nn.Module,
        ctx: AttentionContext,
    ) -> Tensor:
        """One layer: attention joined by ``attn_residual``, then the MLP by ``mlp_residual``."""
        x = attn_residual(x, attn, ctx)
        return mlp_residual(x, mlp)


def residual_output(layer: nn.Linear) -> nn.Linear:
    """Mark ``layer`` as a projection that writes into the residual stream.

    Init schemes (GPT-2's) scale these down by sqrt(2 * n_layers).
    """
    layer.zoo_residual_output = True  # type: ignore[assignment]
    return layer


def is_residual_output(module: nn.Module) -> bool:
    return bool(getattr(module, "zoo_residual_output", False))


@dataclass(frozen=True)
class AttentionContext:
    """What one attention call needs beyond its input: positions, cache and masks."""

    positions: Tensor  # (B|1, S) position of each query token
    position: PositionEncoding | None  # the model's position component; None: no positions
    cache: LayerCache | None = None  # this layer's keys and values so far
    key_padding: Tensor | None = None  # (B, S_k) True where a key is a real token
    causal: bool = True
    memory: Tensor | None = None  # (B, S_m, d) encoder output, for cross-attention
    weights: list[Tensor] | None = None  # when a list, attention appends its weights
    # Masks built for this forward pass, shared by every layer's copy of the context.
    _biases: dict[tuple[object, ...], tuple[Tensor | None, bool]] = field(default_factory=dict, repr=False, compare=False)

    def for_layer(self, cache: LayerCache | None) -> AttentionContext:
        return replace(self, cache=cache) if cache is not self.cache else self

    def attention_bias(
        self, n_heads: int, q_len: int, k_len: int, *, dtype: torch.dtype, device: torch.device
    ) -> tuple[Tensor | None, bool]:
        """``(bias, is_causal)`` for ``scaled_dot_product_attention``.

        ``bias`` is ``None`` or additive of shape (B|1, H|1, q_len, k_len), with a large
        finite negative where attention is forbidden (half of the dtype's lowest, so that
        scores added to it stay finite and rows of padding stay free of NaN, fp16
        included). ``is_causal`` is True only when a plain causal mask suffices. Built
        once per forward pass and shape, then reused by every layer.
        """
        key = (n_heads, q_len, k_len, dtype, device)
        if key not in self._biases:
            self._biases[key] = self._build_bias(n_heads, q_len, k_len, dtype=dtype, device=device)
        return self._biases[key]

    def _build_bias(
        self, n_heads: int, q_len: int, k_len: int, *, dtype: torch.dtype, device: torch.device
    ) -> tuple[Tensor | None, bool]:
        score = self.position.score_bias(n_heads, q_len, k_len) if self.position is not None else None
        causal = self.causal and q_len > 1  # one new query may see every cached key
        if score is None and self.key_padding is None and (not causal or q_len == k_len):
            return None, causal
        neg = torch.finfo(dtype).min / 2  # headroom: a score added to it stays finite in fp16
        if score is not None:
            bias = score.to(device=device, dtype=dtype)[None]  # (1, H, q_len, k_len)
        else:
            bias = torch.zeros(1, 1, q_len, k_len, dtype=dtype, device=device)
        if causal:
            future = torch.ones(q_len, k_len, dtype=torch.bool, device=device).triu(k_len - q_len + 1)
            bias = bias.masked_fill(future, neg)
        if self.key_padding is not None:
            padding = ~self.key_padding[:, None, None, -k_len:].to(device=device, dtype=torch.bool)
            bias = bias.masked_fill(padding, neg)  # (B, H|1, q_len, k_len)
        return bias, False

    def attention_weights(self, scores: Tensor) -> Tensor:
        """Softmax of raw scores (B, H, S, S_k) under this context's mask and score bias,
        for attention written out as math; records them when ``weights`` is a list."""
        _, n_heads, q_len, k_len = scores.shape
        bias, is_causal = self.attention_bias(n_heads, q_len, k_len, dtype=scores.dtype, device=scores.device)
        if is_causal:
            future = torch.ones(q_len, k_len, dtype=torch.bool, device=scores.device).triu(1)
            scores = scores.masked_fill(future, float("-inf"))
        elif bias is not None:
            scores = scores + bias
        weights = torch.softmax(scores, dim=-1)
        if self.weights is not None:
            self.weights.append(weights.detach())
        return weights
