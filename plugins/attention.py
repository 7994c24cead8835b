"""Multi-head attention: ``sdpa`` (fused kernel, the default) and ``eager`` (the math).

One implementation covers multi-head, grouped-query and multi-query attention through
``n_kv_heads`` (litgpt's way): query heads come in ``n_heads / n_kv_heads`` groups that
share one key/value head, and only the key/value heads are projected and cached.

q, k and v come from one fused linear layer with rows ``[q | k | v]``. Fused because one
large matmul runs faster than three small ones, and because with ``n_kv_heads = n_heads``
it is GPT-2's own layout (``c_attn``), so Hugging Face weights import with a transpose
and no split.
"""

from __future__ import annotations

from typing import Any

import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.contracts import AttentionContext, residual_output
from zoo.hookspecs import RegisterComponent, hookimpl


class AttentionOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    n_kv_heads: int | None = Field(
        None, gt=0, description="key/value heads (default n_heads); 1 is multi-query, fewer is grouped-query"
    )
    qkv_bias: bool | None = Field(None, description="bias on the q/k/v projection (default: the config's bias)")
    out_bias: bool | None = Field(None, description="bias on the output projection (default: the config's bias)")


class Attention(nn.Module):
    """Projections, rotation, cache and mask; subclasses choose how scores become outputs.

    ``n_kv_heads`` key/value heads (default ``n_heads``) serve equal groups of query
    heads: query head h reads key/value head h // (n_heads / n_kv_heads), as in LLaMA 2.
    """

    Options = AttentionOptions

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        *,
        n_kv_heads: int | None = None,
        bias: bool = True,
        qkv_bias: bool | None = None,
        out_bias: bool | None = None,
        dropout: float = 0.0,
        attn_dropout: float | None = None,
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if d_model % n_heads or n_heads % n_kv_heads:
            raise ValueError(
                f"attention needs n_heads={n_heads} to divide d_model={d_model} and "
                f"n_kv_heads={n_kv_heads} to divide n_heads"
            )
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.head_dim = d_model // n_heads
        kv_dim = n_kv_heads * self.head_dim
        self.qkv = nn.Linear(
            d_model, d_model + 2 * kv_dim, bias=bias if qkv_bias is None else qkv_bias
        )  # GPT-2's c_attn
        self.out = residual_output(nn.Linear(d_model, d_model, bias=bias if out_bias is None else out_bias))  # c_proj
        self.attn_dropout = dropout if attn_dropout is None else attn_dropout
        self.resid_drop = nn.Dropout(dropout)

    @property
    def groups(self) -> int:
        """Query heads per key/value head."""
        return self.n_heads // self.n_kv_heads

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.project(x, ctx)  # (B, H, S, dk), (B, H_kv, S_k, dk) x 2
        y = self.attend(q, k, v, ctx)  # (B, H, S, dk)
        y = y.transpose(1, 2).reshape(batch, seq, self.d_model)  # (B, S, d)
        out: Tensor = self.resid_drop(self.out(y))
        return out

    def project(self, x: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Queries from ``x``; keys and values (H_kv heads) from ``x`` or ``ctx.memory``, cached."""
        batch, seq, _ = x.shape
        d, dk, kv_dim = self.d_model, self.head_dim, self.n_kv_heads * self.head_dim
        if ctx.memory is None:
            q, k, v = self.qkv(x).split((d, kv_dim, kv_dim), dim=-1)
            q = q.view(batch, seq, self.n_heads, dk).transpose(1, 2)  # (B, H, S, dk)
            k = k.view(batch, seq, self.n_kv_heads, dk).transpose(1, 2)  # (B, H_kv, S, dk)
            v = v.view(batch, seq, self.n_kv_heads, dk).transpose(1, 2)  # (B, H_kv, S, dk)
            q, k = ctx.rotate(q, k)
            if ctx.cache is not None:
                k, v = ctx.cache.update(k, v)  # stores H_kv heads only
            return q, k, v
        # Cross-attention: the same weights, queries from x, keys and values from memory.
        weight, bias = self.qkv.weight, self.qkv.bias
        q = F.linear(x, weight[:d], None if bias is None else bias[:d])
        q = q.view(batch, seq, self.n_heads, dk).transpose(1, 2)  # (B, H, S, dk)
        if ctx.cache is not None and ctx.cache.length:
            return q, *ctx.cache.contents()  # memory's keys and values, computed once
        memory = ctx.memory
        kv = F.linear(memory, weight[d:], None if bias is None else bias[d:])
        kv = kv.view(batch, memory.shape[1], 2, self.n_kv_heads, dk)  # (B, S_m, 2, H_kv, dk)
        k, v = kv.permute(2, 0, 3, 1, 4)  # 2 x (B, H_kv, S_m, dk)
        if ctx.cache is not None:
            k, v = ctx.cache.update(k, v)
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        raise NotImplementedError

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}"


class SdpaAttention(Attention):
    """Multi-head attention with torch's fused scaled_dot_product_attention (default).

    Scores and pattern are never materialised, unless a hook asks for them.
    """

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        return ctx.attend(q, k, v, dropout=self.attn_dropout if self.training else 0.0)  # (B, H, S, dk)


class EagerAttention(Attention):
    """Multi-head attention as explicit math: scores, mask, softmax, dropout."""

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """softmax(q k^T / sqrt(dk) + mask) v, with each group of query heads against its kv head."""
        return ctx.attend(q, k, v, dropout=self.attn_dropout if self.training else 0.0, explicit=True)


def check_kv_heads(config: Any, options: AttentionOptions) -> None:
    """``n_kv_heads`` must split the query heads into equal groups."""
    n_heads, n_kv = config.n_heads, options.n_kv_heads
    if n_kv is not None and (n_kv > n_heads or n_heads % n_kv):
        fits = [h for h in range(1, n_heads + 1) if n_heads % h == 0]
        raise ValueError(
            f"attention.n_kv_heads={n_kv} must divide n_heads={n_heads} (each key/value head "
            f"serves an equal group of query heads); pick one of {', '.join(map(str, fits))}"
        )


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    register("attention", "sdpa", SdpaAttention, check=check_kv_heads)
    register("attention", "eager", EagerAttention, check=check_kv_heads)
