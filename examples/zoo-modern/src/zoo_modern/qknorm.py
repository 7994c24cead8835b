"""Attention with the options of the 2024 designs: an explicit head width, QK-norm and a
score scale, on top of zoo's grouped-query ``Attention``.

- ``head_dim``: each head's width, independent of d_model / n_heads (Gemma: 256 with
  d_model 3072 and 16 heads; Qwen3: 128). q is projected to n_heads * head_dim, k and v
  to n_kv_heads * head_dim, and the output projection takes n_heads * head_dim back to
  d_model. A rotary position reads the same ``head_dim`` (the config's ``head_dim`` is
  the attention's).
- ``qk_norm`` (Dehghani et al. 2023): an RMSNorm on queries and keys before rotation,
  which keeps scores from growing with the weights. ``head``: over each head's
  head_dim, one scale shared by all heads (Qwen3, Gemma 3, OLMoE); ``whole``: over the
  whole projection, n_heads * head_dim (OLMo 2); ``none``. With ``qk_norm_offset`` the
  norm's scale is stored as 1 + w (Gemma 3); with ``qk_norm_after`` the norm follows the
  rotation (HunYuan); with ``qk_norm_plain`` the norms learn no scale (NanoChat); with
  ``qk_norm_layernorm`` they are LayerNorms with a bias (Persimmon).
- ``scale``: the factor on q k^T (default 1 / sqrt(head_dim)); Granite's
  ``attention_multiplier``, Gemma 2's query_pre_attn_scalar^-1/2.
- ``temperature`` (Llama 4's NoPE layers' "temperature tuning"): q at cache slot p times
  1 + temperature * log1p(floor((p + temperature_offset) / temperature_floor)), sharper
  scores far into a long context where no rotation tells the positions apart; 0 (the
  default) is off. Ministral 3 scales every layer so, p counted from each row's first
  real token (``temperature_by_token``, its position ids) with an offset of 0.
- ``output_gate`` (Qwen3-Next): each head's output times sigmoid of a gate projected
  from x (one per output channel) before the output projection, ``out(y * sigmoid(g))``.
- ``sub_norm`` (BitNet): an RMSNorm over the heads' output (n_heads * head_dim) before the
  output projection, ``out(norm(y))``.

q, k and v still come from one fused linear layer (rows ``[q | k | v]``, then the gate's).
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import Field
from torch import Tensor, nn

from zoo.plugin import (
    SCALES_WITH,
    Attention,
    AttentionContext,
    AttentionOptions,
    RegisterComponent,
    check_kv_heads,
    residual_output,
)
from zoo_modern.norms import OffsetRMSNorm, PlainRMSNorm

QkNorm = Literal["head", "whole", "none"]


class QkNormOptions(AttentionOptions):
    """The zoo attention's options (window, softcap, ...) and the 2024 designs'."""

    n_kv_heads: int | None = Field(
        None,
        gt=0,
        description="key/value heads (default n_heads); 1 is multi-query, fewer is grouped-query",
        json_schema_extra={SCALES_WITH: "n_heads"},
    )
    head_dim: int | None = Field(
        None,
        gt=0,
        description="width of each head (default d_model / n_heads)",
        json_schema_extra={SCALES_WITH: "head_dim"},
    )
    qk_norm: QkNorm = Field(
        "head",
        description="RMSNorm on q and k before rotation: head (per head, Qwen3), whole (the whole projection, "
        "OLMo 2) or none",
    )
    qk_norm_offset: bool = Field(False, description="the q/k norms scale by 1 + w (Gemma 3) instead of w")
    qk_norm_after: bool = Field(
        False, description="the q/k norms follow the rotation (HunYuan) instead of preceding it"
    )
    qk_norm_plain: bool = Field(False, description="the q/k norms learn no scale (NanoChat)")
    qk_norm_layernorm: bool = Field(False, description="the q/k norms are LayerNorms with a bias (Persimmon)")
    scale: float | None = Field(None, gt=0.0, description="factor on q k^T (default 1 / sqrt(head_dim))")
    temperature: float = Field(0.0, ge=0.0, description="q times 1 + this * log1p(floor((slot + 1) / floor)); 0: off")
    temperature_floor: int = Field(8192, gt=0, description="slots per step of the temperature's log (Llama 4: 8192)")
    temperature_offset: int = Field(
        1, ge=0, description="added to the slot before dividing (Llama 4: 1, Ministral 3: 0)"
    )
    temperature_by_token: bool = Field(
        False, description="count slots from each row's first real token (Ministral 3), not the cache's first (Llama 4)"
    )
    output_gate: bool = Field(False, description="the heads' output times sigmoid(a gate from x) (Qwen3-Next)")
    sub_norm: bool = Field(False, description="an RMSNorm over the heads' output before the output projection (BitNet)")
    kernel: Literal["sdpa", "eager"] = Field("sdpa", description="sdpa: torch's fused kernel; eager: the explicit math")
    qkv_bias: bool | None = Field(None, description="bias on the q/k/v projection (default: the config's bias)")
    out_bias: bool | None = Field(None, description="bias on the output projection (default: the config's bias)")


def qk_norms(
    qk_norm: QkNorm, offset: bool, sizes: tuple[int, int], eps: float, plain: bool = False, layernorm: bool = False
) -> tuple[nn.Module, nn.Module]:
    """The norms on q and k, of widths ``sizes`` (a head's, or each whole projection's);
    ``plain``: without a learned scale; ``layernorm``: LayerNorms with a bias."""
    if qk_norm == "none":
        return nn.Identity(), nn.Identity()
    if layernorm:
        return nn.LayerNorm(sizes[0], eps=eps), nn.LayerNorm(sizes[1], eps=eps)
    if plain:
        return PlainRMSNorm(sizes[0], eps), PlainRMSNorm(sizes[1], eps)
    if offset:
        return OffsetRMSNorm(sizes[0], eps), OffsetRMSNorm(sizes[1], eps)
    return nn.RMSNorm(sizes[0], eps=eps), nn.RMSNorm(sizes[1], eps=eps)


class QkNormAttention(Attention):
    """Grouped-query attention with an explicit head_dim, QK-norm and a score scale (Qwen3, OLMo 2).

    See the module's docstring; with ``qk_norm="none"``, no scale and ``head_dim =
    d_model / n_heads`` it is zoo's ``Attention``, weight for weight. ``sinks``: per-head
    sink logits a subclass learns (``zoo_modern.local_attention``), none here."""

    Options = QkNormOptions
    sinks: nn.Parameter | None

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,
        *,
        n_kv_heads: int | None = None,
        qk_norm: QkNorm = "head",
        qk_norm_offset: bool = False,
        qk_norm_after: bool = False,
        qk_norm_plain: bool = False,
        qk_norm_layernorm: bool = False,
        scale: float | None = None,
        temperature: float = 0.0,
        temperature_floor: int = 8192,
        temperature_offset: int = 1,
        temperature_by_token: bool = False,
        output_gate: bool = False,
        sub_norm: bool = False,
        kernel: Literal["sdpa", "eager"] = "sdpa",
        bias: bool = True,
        qkv_bias: bool | None = None,
        out_bias: bool | None = None,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
        attn_dropout: float | None = None,
        window: int | None = None,
        softcap: float | None = None,
    ) -> None:
        super().__init__(
            d_model, n_heads, n_kv_heads=n_kv_heads, bias=bias, qkv_bias=qkv_bias, out_bias=out_bias,
            dropout=dropout, attn_dropout=attn_dropout, window=window, softcap=softcap,
        )  # fmt: skip
        head_dim = head_dim or d_model // n_heads  # None: the option left at its default
        self.head_dim, self.qk_norm, self.eager = head_dim, qk_norm, kernel == "eager"
        self.q_dim, self.kv_dim = n_heads * head_dim, self.n_kv_heads * head_dim
        self.gate_dim = self.q_dim if output_gate else 0  # the gate's rows follow q, k and v
        rows = self.q_dim + 2 * self.kv_dim + self.gate_dim
        self.qkv = nn.Linear(d_model, rows, bias=bias if qkv_bias is None else qkv_bias)
        self.out = residual_output(nn.Linear(self.q_dim, d_model, bias=bias if out_bias is None else out_bias))
        sizes = (head_dim, head_dim) if qk_norm == "head" else (self.q_dim, self.kv_dim)
        self.q_norm, self.k_norm = qk_norms(qk_norm, qk_norm_offset, sizes, norm_eps, qk_norm_plain, qk_norm_layernorm)
        self.after = qk_norm_after and qk_norm == "head"  # a norm over the whole projection precedes the heads
        # q is multiplied by this before the kernel divides by sqrt(head_dim): scores scale by ``scale``.
        self.q_factor = 1.0 if scale is None else scale * math.sqrt(head_dim)
        self.register_parameter("sinks", None)
        self.sub_norm = nn.RMSNorm(self.q_dim, eps=norm_eps) if sub_norm else None
        self.temperature, self.temperature_floor = temperature, temperature_floor
        self.temperature_offset, self.temperature_by_token = temperature_offset, temperature_by_token

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v = self.project(x, ctx)  # (B, H, S, dk), (B, H_kv, S_k, dk) x 2
        y = self.attend(q, k, v, ctx)  # (B, H, S, dk)
        y = y.transpose(1, 2).reshape(batch, seq, self.q_dim)  # (B, S, H * dk)
        if self.gate_dim:
            y = y * torch.sigmoid(self.rows(x, -self.gate_dim, None))
        if self.sub_norm is not None:
            y = self.sub_norm(y)
        out: Tensor = self.resid_drop(self.out(y))  # (B, S, d)
        return out

    def rows(self, x: Tensor, start: int | None, stop: int | None) -> Tensor:
        """``qkv`` of x for its rows ``start:stop`` alone."""
        bias = self.qkv.bias
        return F.linear(x, self.qkv.weight[start:stop], None if bias is None else bias[start:stop])

    def heads(self, t: Tensor, norm: nn.Module, n: int) -> Tensor:
        """(B, S, n * dk) -> (B, n, S, dk), normed per head or as a whole."""
        batch, seq, _ = t.shape
        t = norm(t) if self.qk_norm == "whole" else t
        t = t.view(batch, seq, n, self.head_dim)
        t = norm(t) if self.qk_norm == "head" else t
        return t.transpose(1, 2)

    def project(self, x: Tensor, ctx: AttentionContext) -> tuple[Tensor, Tensor, Tensor]:
        """Queries from ``x``; keys and values (H_kv heads) from ``x`` or ``ctx.memory``, cached;
        q and k normed before rotation."""
        kv_end = self.q_dim + 2 * self.kv_dim
        if ctx.memory is None:
            qkv = self.rows(x, None, kv_end) if self.gate_dim else self.qkv(x)
            q, k, v = qkv.split((self.q_dim, self.kv_dim, self.kv_dim), dim=-1)
        else:  # cross-attention: queries from x, keys and values from the encoder's output
            q = self.rows(x, None, self.q_dim)
            if ctx.cache is not None and ctx.cache.length:
                return self.heads(q, self.q_norm, self.n_heads), *ctx.cache.contents()
            kv = self.rows(ctx.memory, self.q_dim, kv_end)
            k, v = torch.split(kv, [self.kv_dim, self.kv_dim], dim=-1)
        before = (nn.Identity(), nn.Identity()) if self.after else (self.q_norm, self.k_norm)
        q = self.heads(q, before[0], self.n_heads)  # (B, H, S, dk)
        k = self.heads(k, before[1], self.n_kv_heads)  # (B, H_kv, S_k, dk)
        v = self.heads(v, nn.Identity(), self.n_kv_heads)
        if ctx.memory is None:
            q, k = ctx.rotate(q, k)
        if self.after:
            q, k = self.q_norm(q), self.k_norm(k)
        if ctx.cache is not None:
            k, v = ctx.cache.update(k, v)  # stores H_kv heads only
        return q, k, v

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """Per-head outputs (B, H, S, dk); with ``scale`` set, q is scaled first (hook_q sees it so)."""
        dropout = self.attn_dropout if self.training else 0.0
        if self.q_factor != 1.0:
            q = q * self.q_factor
        if self.temperature:
            q = q * self.temperatures(q, k, ctx)
        return ctx.attend(q, k, v, dropout=dropout, explicit=self.eager, softcap=self.softcap, sinks=self.sinks)

    def temperatures(self, q: Tensor, k: Tensor, ctx: AttentionContext) -> Tensor:
        """Each query's factor (S, 1), or (B, 1, S, 1) by token, at its slot p
        (``temperature``'s definition)."""
        end = ctx.cache.length if ctx.cache is not None else k.shape[2]  # slots seen, these included
        slots = torch.arange(end - q.shape[2], end, device=q.device, dtype=torch.float32)[:, None]
        if self.temperature_by_token and ctx.padding is not None:  # from each row's first real slot
            slots = slots - ctx.padding.to(torch.int64).argmax(dim=-1)[:, None, None, None]
        steps = torch.floor((slots + self.temperature_offset) / self.temperature_floor).clamp(min=0)
        return (torch.log1p(steps) * self.temperature + 1.0).to(q.dtype)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, head_dim={self.head_dim}, qk_norm={self.qk_norm}"


def check_qknorm(config: Any, options: QkNormOptions) -> None:
    """``n_kv_heads`` must split the query heads into equal groups; a norm after the rotation is per head."""
    check_kv_heads(config, options)  # it reads n_kv_heads only
    if options.qk_norm_after and options.qk_norm != "head":
        raise ValueError(f"qk_norm_after follows the rotation per head; give qk_norm='head', not {options.qk_norm!r}")


def register_components(register: RegisterComponent) -> None:
    """Register this module's attention (called from ``zoo_modern.plugin``)."""
    register("attention", "qknorm", QkNormAttention, check=check_qknorm)
