"""Multi-head latent attention (DeepSeek-V2, 2024; DeepSeek-V3): keys and values through a
low-rank latent, so the KV cache holds the latent instead of every head's keys and values.

x goes down to a latent of ``kv_lora_rank`` (normed, ``kv_norm``) and to one rotary key
part of ``qk_rope_head_dim`` that every head shares; ``kv_b`` expands the latent to each
head's key part without positions (``qk_nope_head_dim``) and its value (``v_head_dim``).
A head's query is [nope | rope] of the same widths, from x directly (``q``) or through a
latent of its own (``q_lora_rank``: ``q_a``, ``q_norm``, ``q_b``). Only the rope parts turn
(the model's rotary, whose ``rotary_dim`` is ``qk_rope_head_dim``; DeepSeek's pairs are
interleaved), so positions are decoupled from the compressed part. Scores are scaled by
1 / sqrt(nope + rope), the query's width, unless ``scale`` says otherwise (DeepSeek's YaRN
multiplies it by mscale(factor, mscale_all_dim)^2, read so from config.json).

The cache stores, per position, the normed latent and the turned rotary key
((B, 1, S, kv_lora_rank) as keys, (B, 1, S, rope) as values): kv_lora_rank + rope numbers
instead of 2 x heads x head width. Each step expands what is stored (the naive form;
the absorbed form, folding ``kv_b`` into q and the output, computes the same). Hook
points are the attention's: q, k and v as attended (all heads), scores, pattern and z.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import SCALES_WITH, AttentionContext, RegisterComponent, residual_output

HEAD: dict[str, Any] = {SCALES_WITH: "head_dim"}  # a head's widths follow d_model / n_heads when shrunk


class MlaOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    q_lora_rank: int = Field(
        0, ge=0, description="the query's latent width (0: q straight from x, as V2-Lite)", json_schema_extra={SCALES_WITH: "d_model"}
    )  # fmt: skip
    kv_lora_rank: int = Field(
        32, gt=0, description="the latent keys and values come from: what the cache holds", json_schema_extra={SCALES_WITH: "d_model"}
    )  # fmt: skip
    qk_nope_head_dim: int | None = Field(None, gt=0, description="each head's query/key width without positions (default d_model / n_heads)", json_schema_extra=HEAD)  # fmt: skip
    qk_rope_head_dim: int | None = Field(None, gt=0, description="the rotary part, one key for all heads (default d_model / n_heads)", json_schema_extra=HEAD)  # fmt: skip
    v_head_dim: int | None = Field(None, gt=0, description="each head's value width (default d_model / n_heads)", json_schema_extra=HEAD)  # fmt: skip
    head_dim: int | None = Field(None, gt=0, description="the head width positions read (default d_model / n_heads)", json_schema_extra=HEAD)  # fmt: skip
    latent_eps: float = Field(1e-6, gt=0.0, lt=1.0, description="epsilon of the latents' RMSNorms")
    scale: float | None = Field(
        None, gt=0.0, description="the scores' scale (default 1 / sqrt(nope + rope); DeepSeek's YaRN: times mscale^2)"
    )
    kernel: Literal["sdpa", "eager"] | None = Field(
        None, description="sdpa (default): torch's fused kernel; eager: the explicit math, the same scores"
    )


def check_mla(config: Any, options: MlaOptions) -> None:
    """Decoder-only (no cross-attention), and a rotary position turns exactly the rope parts."""
    if config.architecture == "encoder_decoder":
        raise ValueError(
            "attention 'mla' is self-attention for decoder-only models (its cache holds a latent); an "
            "'encoder_decoder' model would use it for cross-attention too: use 'sdpa' there"
        )
    rope = options.qk_rope_head_dim or config.head_dim
    if rope % 2:
        raise ValueError(f"attention.qk_rope_head_dim={rope} must be even (rotary pairs)")
    if config.position.name == "rotary":
        dims = config.position.options.get("rotary_dim") or config.head_dim
        if dims != rope:
            raise ValueError(
                f"position.rotary_dim={dims}: multi-head latent attention turns only its rope parts, so "
                f"set position.rotary_dim={rope} (attention.qk_rope_head_dim)"
            )


class LatentNorm(nn.Module):
    """RMSNorm of a latent, in float32 (DeepSeek's): weight * x / rms(x)."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(width)), eps

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)

    def forward(self, x: Tensor) -> Tensor:
        y = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * y.to(x.dtype)


class MultiHeadLatentAttention(nn.Module):
    """Attention whose keys and values come from a cached low-rank latent (DeepSeek-V2/V3)."""

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        q_lora_rank: int = 0,
        kv_lora_rank: int = 32,
        qk_nope_head_dim: int | None = None,
        qk_rope_head_dim: int | None = None,
        v_head_dim: int | None = None,
        head_dim: int | None = None,
        latent_eps: float = 1e-6,
        scale: float | None = None,
        kernel: str | None = None,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        head = head_dim or d_model // n_heads
        self.n_heads, self.rank = n_heads, kv_lora_rank
        self.nope, self.rope, self.v_dim = (w or head for w in (qk_nope_head_dim, qk_rope_head_dim, v_head_dim))
        self.n_kv_heads = n_heads  # every head's keys and values, expanded from the one latent
        self.qk_head_dim, self.v_head_dim = self.nope + self.rope, self.v_dim  # what hook_q/k and hook_v hold
        width = n_heads * (self.nope + self.rope)
        if q_lora_rank:
            self.q_a = nn.Linear(d_model, q_lora_rank, bias=bias)
            self.q_norm = LatentNorm(q_lora_rank, latent_eps)
            self.q_b = nn.Linear(q_lora_rank, width, bias=False)
        else:
            self.q = nn.Linear(d_model, width, bias=False)
        self.kv_a = nn.Linear(d_model, kv_lora_rank + self.rope, bias=bias)  # rows [latent | rope key]
        self.kv_norm = LatentNorm(kv_lora_rank, latent_eps)
        self.kv_b = nn.Linear(kv_lora_rank, n_heads * (self.nope + self.v_dim), bias=False)
        self.out = residual_output(nn.Linear(n_heads * self.v_dim, d_model, bias=bias))
        self.dropout, self.explicit = dropout, kernel == "eager"
        self.scale = scale  # None: 1 / sqrt(nope + rope)
        self.resid_drop = nn.Dropout(dropout)

    def queries(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """Each head's query parts, (B, H, S, nope) and (B, H, S, rope)."""
        q = self.q_b(self.q_norm(self.q_a(x))) if hasattr(self, "q_b") else self.q(x)
        q = q.view(*x.shape[:2], self.n_heads, self.nope + self.rope).transpose(1, 2)
        nope, rope = q.split([self.nope, self.rope], dim=-1)
        return nope, rope

    def expand(self, latent: Tensor, rope_key: Tensor) -> tuple[Tensor, Tensor]:
        """Keys (B, H, S_k, nope + rope) and values (B, H, S_k, v) from the latents (B, 1, S_k, .)."""
        kv = self.kv_b(latent[:, 0]).view(latent.shape[0], latent.shape[2], self.n_heads, -1).transpose(1, 2)
        k_nope, v = kv.split([self.nope, self.v_dim], dim=-1)
        k = torch.cat([k_nope, rope_key.expand(-1, self.n_heads, -1, -1)], dim=-1)
        return k, v

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        batch, seq, _ = x.shape
        q_nope, q_rope = self.queries(x)
        latent, rope_key = self.kv_a(x).split([self.rank, self.rope], dim=-1)
        latent = self.kv_norm(latent).view(batch, 1, seq, self.rank)
        q_rope, rope_key = ctx.rotate(q_rope, rope_key.view(batch, 1, seq, self.rope))
        if ctx.cache is not None:  # the latents are what is kept
            latent, rope_key = ctx.cache.update(latent, rope_key)
        k, v = self.expand(latent, rope_key)
        q = torch.cat([q_nope, q_rope], dim=-1)
        dropout = self.dropout if self.training else 0.0
        z = ctx.attend(q, k, v, dropout=dropout, explicit=self.explicit, scale=self.scale or 1 / math.sqrt(q.shape[-1]))
        out: Tensor = self.resid_drop(self.out(z.transpose(1, 2).reshape(batch, seq, -1)))
        return out

    def extra_repr(self) -> str:
        sizes = f"heads={self.n_heads}, kv_lora_rank={self.rank}, nope={self.nope}, rope={self.rope}, v={self.v_dim}"
        return sizes + (f", scale={self.scale:.6g}" if self.scale else "")


def register_components(register: RegisterComponent) -> None:
    """Register the attention (called from ``zoo_modern.plugin``)."""
    register("attention", "mla", MultiHeadLatentAttention, MlaOptions, check=check_mla)
