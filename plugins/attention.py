"""Multi-head attention: ``sdpa`` (fused kernel, the default) and ``eager`` (the math).

Both project q, k and v with one fused (d, 3d) linear layer. Fused because one large
matmul runs faster than three small ones, and because it is GPT-2's own layout
(``c_attn``), so Hugging Face weights import with a transpose and no split.
"""

from __future__ import annotations

import math
from typing import Any

import torch.nn.functional as F
from torch import Tensor, nn

from zoo.contracts import AttentionContext, residual_output
from zoo.hookspecs import hookimpl


class MultiHeadAttention(nn.Module):
    """Projections, positions and cache; subclasses choose how scores become outputs."""

    records_weights = False

    def __init__(self, builder: Any) -> None:
        super().__init__()
        c = builder.config
        self.n_heads, self.head_dim, self.d_model = c.n_heads, c.head_dim, c.d_model
        self.qkv = nn.Linear(c.d_model, 3 * c.d_model, bias=c.bias)  # GPT-2's c_attn
        self.out = residual_output(nn.Linear(c.d_model, c.d_model, bias=c.bias))  # GPT-2's c_proj
        self.attn_dropout = c.dropout.attention
        self.resid_drop = nn.Dropout(c.dropout.residual)

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.project(x, ctx)  # (B, H, S, dk), (B, H, S_k, dk) x 2
        y = self.attend(q, k, v, ctx)  # (B, H, S, dk)
        y = y.transpose(1, 2).reshape(batch, seq, self.d_model)  # (B, S, d)
        return self.resid_drop(self.out(y))

    def project(self, x: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Queries from ``x``; keys and values from ``x`` (or ``ctx.memory``), cached."""
        batch, seq, _ = x.shape
        heads, dk = self.n_heads, self.head_dim
        if ctx.memory is None:
            qkv = self.qkv(x).view(batch, seq, 3, heads, dk)  # (B, S, 3, H, dk)
            q, k, v = qkv.permute(2, 0, 3, 1, 4)  # 3 x (B, H, S, dk)
            if ctx.position is not None:
                q, k = ctx.position.rotate(q, k, ctx.positions)
            if ctx.cache is not None:
                k, v = ctx.cache.update(k, v)
            return q, k, v
        # Cross-attention: the same weights, queries from x, keys and values from memory.
        weight, bias = self.qkv.weight, self.qkv.bias
        d = self.d_model
        q = F.linear(x, weight[:d], None if bias is None else bias[:d])
        q = q.view(batch, seq, heads, dk).transpose(1, 2)  # (B, H, S, dk)
        if ctx.cache is not None and ctx.cache.length:
            return q, *ctx.cache.contents()  # memory's keys and values, computed once
        memory = ctx.memory
        kv = F.linear(memory, weight[d:], None if bias is None else bias[d:])
        k, v = kv.view(batch, memory.shape[1], 2, heads, dk).permute(2, 0, 3, 1, 4)  # 2 x (B, H, S_m, dk)
        if ctx.cache is not None:
            k, v = ctx.cache.update(k, v)
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        raise NotImplementedError


class SdpaAttention(MultiHeadAttention):
    """torch's fused ``scaled_dot_product_attention`` (flash / memory-efficient kernels)."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        bias, is_causal = ctx.attention_bias(
            self.n_heads, q.shape[2], k.shape[2], dtype=q.dtype, device=q.device
        )
        dropout = self.attn_dropout if self.training else 0.0
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias, dropout_p=dropout, is_causal=is_causal)


class EagerAttention(MultiHeadAttention):
    """softmax(q k^T / sqrt(dk) + mask) v, written out; can return the weights."""

    records_weights = True

    def __init__(self, builder: Any) -> None:
        super().__init__(builder)
        self.drop = nn.Dropout(builder.config.dropout.attention)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)  # (B, H, S, S_k)
        weights = ctx.attention_weights(scores)  # softmax under the causal/padding mask
        return self.drop(weights) @ v  # (B, H, S, dk)


def sdpa(builder: Any, options: Any) -> nn.Module:
    """Multi-head attention with torch's fused scaled_dot_product_attention (default)."""
    return SdpaAttention(builder)


def eager(builder: Any, options: Any) -> nn.Module:
    """Multi-head attention as explicit math: scores, mask, softmax, dropout; returns weights."""
    return EagerAttention(builder)


@hookimpl
def zoo_register_components(register: Any) -> None:
    register("attention", "sdpa", sdpa)
    register("attention", "eager", eager)
