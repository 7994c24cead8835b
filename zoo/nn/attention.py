"""Attention's math, shared by every attention component: the context a layer's attention
receives, ``attend`` (the fused kernel or the explicit softmax, grouped heads, the hook
points q, k, v, scores and pattern) and the mask made once per forward pass.

An attention component (``zoo.nn.contracts`` says what it promises) owns its projections
and calls ``ctx.rotate``, ``ctx.cache`` and ``ctx.attend``; this module is what those do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.nn.marks import SCALES_WITH, residual_output

if TYPE_CHECKING:
    from zoo.nn.cache import LayerCache

#: The additive mask value for forbidden scores: half of float16's lowest, so a mask
#: built in any float dtype converts to any other, and a score added to it stays finite.
MASKED = torch.finfo(torch.float16).min / 2


class PositionAware(Protocol):
    """What attention asks of the model's position component (``PositionEncoding`` is one):
    to turn queries and keys, and to bias scores."""

    def rotate(self, q: Tensor, k: Tensor, state: Any) -> tuple[Tensor, Tensor]: ...

    def score_bias(self, n_heads: int, q_len: int, k_len: int) -> Tensor | None: ...


class LayerPoints(Protocol):
    """One attention layer's hook points while hooks are set (``zoo.nn.hooks`` makes it)."""

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
    encoding: PositionAware | None = None  # the model's position component; None: no rotation
    rotation: Any = None  # what ``encoding.prepare(positions)`` made for this forward
    cache: LayerCache | None = None  # this layer's keys and values so far
    memory: Tensor | None = None  # (B, S_m, d) encoder output, for cross-attention
    hooks: LayerPoints | None = None  # this layer's hook points, only while hooks are set
    # (B, cached + S), True for real tokens, or None without padding: for a mixer that reads no mask (a convolution)
    padding: Tensor | None = None

    def for_layer(self, cache: LayerCache | None) -> AttentionContext:
        if cache is self.cache:
            return self
        return replace(self, cache=cache)

    def with_mask(self, mask: Tensor | None, is_causal: bool) -> AttentionContext:
        """This context with another mask (a windowed layer's, ``make_mask(window=...)``)."""
        return replace(self, mask=mask, is_causal=is_causal)

    def attend(
        self,
        q: Tensor,
        k: Tensor,
        v: Tensor,
        *,
        dropout: float = 0.0,
        explicit: bool = False,
        scale: float | None = None,
        softcap: float | None = None,
        sinks: Tensor | None = None,
    ) -> Tensor:
        """softmax(q k^T * scale + mask) v per head, (B, H, S, dk), for q (B, H, S, dk) and
        k, v (B, H_kv, S_k, dk): each group of H / H_kv query heads reads one key/value head.

        ``scale`` defaults to 1 / sqrt(dk); ``softcap`` caps the scores at +-softcap
        smoothly (``softcap * tanh(scores / softcap)``, Gemma 2), before the mask;
        ``sinks`` (H,) are per-head logits that join each softmax's denominator and no
        value (GPT-OSS's attention sinks): a head may attend to nothing, its weights then
        summing to less than 1.
        The fused ``scaled_dot_product_attention`` by default; the explicit math with
        ``explicit`` (the eager kernel), with ``softcap`` or ``sinks`` (the fused kernel
        has neither) or when a hook asks for the scores or the pattern.
        Hook points, as the kernel reads them: ``hook_q``, ``hook_k``, ``hook_v`` (after
        rotation, keys and values with the cache), ``hook_scores`` (masked, before the
        softmax) and ``hook_pattern`` (after it, before dropout).
        """
        hooks = self.hooks
        explicit = explicit or softcap is not None or sinks is not None
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
                scale=scale,
                enable_gqa=k.shape[1] != q.shape[1],
            )  # (B, H, S, dk)
        batch, heads, q_len, dk = q.shape
        kv_heads, k_len = k.shape[1], k.shape[2]
        grouped = q.view(batch, kv_heads, heads // kv_heads, q_len, dk)  # (B, H_kv, G, S, dk)
        scores = grouped @ k[:, :, None].transpose(-2, -1)  # (B, H_kv, G, S, S_k)
        scores = scores.view(batch, heads, q_len, k_len) * (1 / math.sqrt(dk) if scale is None else scale)
        if softcap is not None:
            scores = softcap * torch.tanh(scores / softcap)  # (B, H, S, S_k)
        mask = self.mask_for(scores)
        if mask is not None:
            scores = scores + mask
        if hooks is not None:
            scores = hooks.point("hook_scores", scores)
        weights = scores.softmax(dim=-1) if sinks is None else sink_softmax(scores, sinks)
        if hooks is not None:
            weights = hooks.point("hook_pattern", weights)
        if dropout:
            weights = F.dropout(weights, dropout)
        weights = weights.view(batch, kv_heads, heads // kv_heads, q_len, k_len)
        return (weights @ v[:, :, None]).view(batch, heads, q_len, v.shape[-1])  # (B, H, S, dv): dv may differ (MLA)

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


def sink_softmax(scores: Tensor, sinks: Tensor) -> Tensor:
    """softmax over the keys of ``scores`` (B, H, S, S_k) with one more logit per head,
    ``sinks`` (H,), in each denominator: exp(s_j) / (exp(sink) + sum_i exp(s_i))."""
    sink = sinks.to(scores.dtype)[None, :, None, None].expand(*scores.shape[:-1], 1)  # (B, H, S, 1)
    return torch.cat([scores, sink], dim=-1).softmax(dim=-1)[..., :-1]  # (B, H, S, S_k)


def make_mask(
    *,
    q_len: int,
    k_len: int,
    n_heads: int,
    causal: bool,
    key_padding: Tensor | None,
    encoding: PositionAware | None,
    dtype: torch.dtype,
    device: torch.device,
    window: int | None = None,
) -> tuple[Tensor | None, bool]:
    """``(mask, is_causal)`` for one forward pass: the causal structure, padding (B, k_len,
    True for real keys) and the encoding's score bias, combined once for every layer
    (once per window for windowed layers).

    Queries are the last ``q_len`` of ``k_len`` slots; one new query sees every cached key,
    or with a ``window`` the keys of the last ``window`` slots up to its own: key slot j is
    visible to query slot i iff i - window < j <= i (transformers' sliding window).
    """
    score = encoding.score_bias(n_heads, q_len, k_len) if encoding is not None else None
    causal = causal and q_len > 1
    banded = window is not None and window < k_len  # some key falls out of the last query's window
    if score is None and key_padding is None and not banded and (not causal or q_len == k_len):
        return None, causal
    if score is not None:
        mask = score.to(device=device, dtype=dtype)[None]  # (1, H, q_len, k_len)
    else:
        mask = torch.zeros(1, 1, q_len, k_len, dtype=dtype, device=device)
    if causal:
        future = torch.ones(q_len, k_len, dtype=torch.bool, device=device).triu(k_len - q_len + 1)
        mask = mask.masked_fill(future, MASKED)
    if banded and window is not None:
        past = torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len - window)
        mask = mask.masked_fill(past, MASKED)
    if key_padding is not None:
        padding = ~key_padding[:, None, None, -k_len:].to(device=device, dtype=torch.bool)
        mask = mask.masked_fill(padding, MASKED)  # (B, H|1, q_len, k_len)
    return mask, False


class AttentionOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    n_kv_heads: int | None = Field(
        None,
        gt=0,
        description="key/value heads (default n_heads); 1 is multi-query, fewer is grouped-query",
        json_schema_extra={SCALES_WITH: "n_heads"},
    )
    qkv_bias: bool | None = Field(None, description="bias on the q/k/v projection (default: the config's bias)")
    out_bias: bool | None = Field(None, description="bias on the output projection (default: the config's bias)")
    window: int | None = Field(
        None, gt=0, description="sliding window: each query sees the last `window` positions, its own included"
    )
    softcap: float | None = Field(None, gt=0.0, description="cap scores smoothly at +-softcap (Gemma 2)")
    scale: float | None = Field(None, gt=0.0, description="score scale (default 1/sqrt(head_dim))")


class Attention(nn.Module):
    """Multi-head attention: one fused q/k/v projection, rotation, the cache, ``attend``
    and the output projection.

    One implementation covers multi-head, grouped-query and multi-query attention through
    ``n_kv_heads`` (litgpt's way): ``n_kv_heads`` key/value heads (default ``n_heads``)
    serve equal groups of query heads, query head h reading key/value head
    h // (n_heads / n_kv_heads) as in LLaMA 2, and only the key/value heads are projected
    and cached. q, k and v come from one linear layer with rows ``[q | k | v]``: one large
    matmul runs faster than three small ones, and with ``n_kv_heads = n_heads`` it is
    GPT-2's own layout (``c_attn``), so Hugging Face weights import with a transpose.

    ``kernel`` (a class attribute): ``sdpa``, torch's fused kernel (scores never
    materialised unless a hook asks for them), or ``eager``, the explicit softmax;
    subclasses may override ``attend``.
    """

    Options = AttentionOptions
    kernel: ClassVar[Literal["sdpa", "eager"]] = "sdpa"

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
        window: int | None = None,
        softcap: float | None = None,
        scale: float | None = None,
    ) -> None:
        super().__init__()
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        self.window, self.softcap, self.scale = window, softcap, scale  # the model masks by ``window``
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
        """Per-head outputs (B, H, S, dk): the fused kernel, or the explicit math for ``eager``."""
        dropout = self.attn_dropout if self.training else 0.0
        return ctx.attend(
            q, k, v, dropout=dropout, explicit=self.kernel == "eager", scale=self.scale, softcap=self.softcap
        )

    def extra_repr(self) -> str:
        extra = "".join(
            f", {name}={value}" for name in ("window", "softcap", "scale") if (value := getattr(self, name)) is not None
        )
        return f"d_model={self.d_model}, n_heads={self.n_heads}, n_kv_heads={self.n_kv_heads}{extra}"


class SdpaAttention(Attention):
    """Multi-head attention with torch's fused scaled_dot_product_attention (default).

    Scores and pattern are never materialised, unless a hook asks for them.
    """

    kernel = "sdpa"


class EagerAttention(Attention):
    """Multi-head attention as explicit math: softmax(q k^T / sqrt(dk) + mask) v, with
    each group of query heads against its key/value head."""

    kernel = "eager"


def check_kv_heads(config: Any, options: AttentionOptions) -> None:
    """``n_kv_heads`` must split the query heads into equal groups."""
    n_heads, n_kv = config.n_heads, options.n_kv_heads
    if n_kv is not None and (n_kv > n_heads or n_heads % n_kv):
        fits = [h for h in range(1, n_heads + 1) if n_heads % h == 0]
        raise ValueError(
            f"attention.n_kv_heads={n_kv} must divide n_heads={n_heads} (each key/value head "
            f"serves an equal group of query heads); pick one of {', '.join(map(str, fits))}"
        )
