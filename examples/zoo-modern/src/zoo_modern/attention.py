"""Grouped-query attention (Ainslie et al. 2023): fewer key/value heads than query heads.

Query heads come in ``n_heads / n_kv_heads`` groups; each group shares one key/value
head. Only the key/value heads are projected and cached, so the KV cache (the memory
that limits batch size and context when decoding) shrinks by that factor.
``n_kv_heads = 1`` is multi-query attention; ``n_kv_heads = n_heads`` is standard
multi-head attention, weight for weight (the fused ``qkv`` layer then has the built-in
layout).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo import AttentionContext, residual_output


class GqaOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    n_kv_heads: int = Field(1, gt=0, description="key/value heads; 1 is multi-query, n_heads is multi-head")
    kernel: Literal["sdpa", "eager"] = Field(
        "sdpa", description="sdpa: torch's fused kernel; eager: the explicit math, can return weights"
    )
    qkv_bias: bool | None = Field(None, description="bias on the q/k/v projection (default: the config's bias; Qwen2: true)")
    out_bias: bool | None = Field(None, description="bias on the output projection (default: the config's bias)")


class GroupedQueryAttention(nn.Module):
    """Causal self-attention whose query heads share ``n_kv_heads`` key/value heads.

    Query head h reads key/value head h // (n_heads / n_kv_heads), as in LLaMA 2.
    """

    def __init__(self, builder: Any, options: GqaOptions) -> None:
        super().__init__()
        c = builder.config
        self.n_heads, self.n_kv_heads = c.n_heads, options.n_kv_heads
        self.head_dim, self.d_model = c.head_dim, c.d_model
        self.kernel = options.kernel
        self.records_weights = options.kernel == "eager"  # model.attention_maps works with eager
        kv_dim = self.n_kv_heads * self.head_dim
        qkv_bias = c.bias if options.qkv_bias is None else options.qkv_bias
        out_bias = c.bias if options.out_bias is None else options.out_bias
        self.qkv = nn.Linear(c.d_model, c.d_model + 2 * kv_dim, bias=qkv_bias)  # [q | k | v] rows
        self.out = residual_output(nn.Linear(c.d_model, c.d_model, bias=out_bias))
        self.attn_dropout = c.dropout.attention
        self.drop = nn.Dropout(c.dropout.attention)
        self.resid_drop = nn.Dropout(c.dropout.residual)

    @property
    def groups(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.project(x, ctx)  # (B, H, S, dk), (B, H_kv, S_k, dk) x 2
        y = self.attend_eager(q, k, v, ctx) if self.kernel == "eager" else self.attend_sdpa(q, k, v, ctx)
        y = y.transpose(1, 2).reshape(batch, seq, self.d_model)  # (B, S, d)
        return self.resid_drop(self.out(y))

    def project(self, x: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Queries from ``x``; keys and values (H_kv heads) from ``x`` or ``ctx.memory``, cached."""
        batch, seq, _ = x.shape
        d, kv_dim = self.d_model, self.n_kv_heads * self.head_dim
        if ctx.memory is None:
            q, k, v = self.qkv(x).split((d, kv_dim, kv_dim), dim=-1)
            q = q.view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, S, dk)
            k = k.view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, S, dk)
            v = v.view(batch, seq, self.n_kv_heads, self.head_dim).transpose(1, 2)  # (B, H_kv, S, dk)
            if ctx.position is not None:
                q, k = ctx.position.rotate(q, k, ctx.positions)
            if ctx.cache is not None:
                k, v = ctx.cache.update(k, v)  # stores H_kv heads only
            return q, k, v
        # Cross-attention: queries from x, keys and values from the encoder's memory.
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(x, weight[:d], None if bias is None else bias[:d])
        q = q.view(batch, seq, self.n_heads, self.head_dim).transpose(1, 2)  # (B, H, S, dk)
        if ctx.cache is not None and ctx.cache.length:
            return q, *ctx.cache.contents()  # the memory's keys and values, computed once
        memory = ctx.memory
        kv = F.linear(memory, weight[d:], None if bias is None else bias[d:])
        kv = kv.view(batch, memory.shape[1], 2, self.n_kv_heads, self.head_dim)  # (B, S_m, 2, H_kv, dk)
        k, v = kv.permute(2, 0, 3, 1, 4)  # 2 x (B, H_kv, S_m, dk)
        if ctx.cache is not None:
            k, v = ctx.cache.update(k, v)
        return q, k, v

    def attend_sdpa(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        bias, is_causal = ctx.attention_bias(self.n_heads, q.shape[2], k.shape[2], dtype=q.dtype, device=q.device)
        return F.scaled_dot_product_attention(
            q, k, v,
            attn_mask=bias,
            dropout_p=self.attn_dropout if self.training else 0.0,
            is_causal=is_causal,
            enable_gqa=self.groups > 1,
        )  # (B, H, S, dk)

    def attend_eager(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """softmax(q k^T / sqrt(dk) + bias) v, with each group of query heads against its kv head."""
        batch, heads, q_len, dk = q.shape
        k_len = k.shape[2]
        grouped = q.view(batch, self.n_kv_heads, self.groups, q_len, dk)  # (B, H_kv, G, S, dk)
        scores = grouped @ k[:, :, None].transpose(-2, -1) / math.sqrt(dk)  # (B, H_kv, G, S, S_k)
        scores = scores.view(batch, heads, q_len, k_len)  # (B, H, S, S_k)
        weights = ctx.attention_weights(scores)  # softmax under the causal/padding mask
        weights = self.drop(weights).view(batch, self.n_kv_heads, self.groups, q_len, k_len)
        y = weights @ v[:, :, None]  # (B, H_kv, G, S, dk)
        return y.view(batch, heads, q_len, dk)  # (B, H, S, dk)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}, kernel={self.kernel}"


def gqa(builder: Any, options: GqaOptions) -> nn.Module:
    """Grouped-query attention: n_kv_heads key/value heads shared by groups of query heads."""
    return GroupedQueryAttention(builder, options)


def check_gqa(config: Any, options: GqaOptions) -> None:
    n_heads, n_kv = config.n_heads, options.n_kv_heads
    if n_kv > n_heads or n_heads % n_kv:
        fits = [h for h in range(1, n_heads + 1) if n_heads % h == 0]
        raise ValueError(
            f"attention.n_kv_heads={n_kv} must divide n_heads={n_heads} (each key/value head "
            f"serves an equal group of query heads); pick one of {', '.join(map(str, fits))}"
        )
