"""Differential attention (Ye et al. 2024, "Differential Transformer"; transformers' DiffLlama).

Query head i of the first half and head i + H/2 are one pair: each scores the keys by its
own softmax, and the pair reads the difference of the two, (p_i - lambda p_{i + H/2}), of
values twice a head wide: value heads j and j + H_kv/2 side by side (j the key/value head
query head i reads). Each pair's output is RMS-normed over its 2 head_dim channels (no
learned scale) and times 1 - lambda_init, so the heads' output is n_heads * head_dim wide as
usual. lambda = exp(lambda_q1 . lambda_k1) - exp(lambda_q2 . lambda_k2) + lambda_init,
from four learned vectors of head_dim; ``lambda_init`` is the layer's (the paper's
0.8 - 0.6 exp(-0.3 l) at depth l, a family sets it per layer).

It is a ``qknorm`` attention (QK-norm off by default): the same projections and weight
names, keys and values cached as ``qknorm`` caches them; n_heads and n_kv_heads even. The
scores are read twice, once per value half (``hook_q`` to ``hook_pattern`` are the first
read's, of each query head's own key/value head, which a hook that patches them changes alone).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import torch
from pydantic import Field
from torch import Tensor, nn

from zoo.plugin import AttentionContext, RegisterComponent
from zoo_modern.norms import PlainRMSNorm
from zoo_modern.qknorm import QkNorm, QkNormAttention, QkNormOptions, check_qknorm


class DiffOptions(QkNormOptions):
    """``qknorm``'s options (QK-norm off) and the layer's lambda_init."""

    qk_norm: QkNorm = Field("none", description="RMSNorm on q and k: head, whole or none (qknorm's)")
    lambda_init: float = Field(0.8, ge=0.0, lt=1.0, description="lambda's offset; outputs times 1 - this (layer l: 0.8 - 0.6 exp(-0.3 l))")  # fmt: skip


class DiffAttention(QkNormAttention):
    """Differential attention over pairs of query heads (see the module's docstring)."""

    Options = DiffOptions

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,
        *,
        lambda_init: float = 0.8,
        norm_eps: float = 1e-6,
        **options: Any,
    ) -> None:
        super().__init__(d_model, n_heads, head_dim, norm_eps=norm_eps, **{"qk_norm": "none", **options})
        self.lambda_init = lambda_init
        self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2 = (
            nn.Parameter(torch.zeros(self.head_dim)) for _ in range(4)
        )
        self.pair_norm = PlainRMSNorm(2 * self.head_dim, norm_eps)

    def reset_parameters(self) -> None:
        """The lambda vectors drawn as the paper's (N(0, 0.1)); the projections are their own modules."""
        for p in (self.lambda_q1, self.lambda_k1, self.lambda_q2, self.lambda_k2):
            nn.init.normal_(p, 0.0, 0.1)

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """Each pair's output (B, H/2, S, 2 dk), which the parent's forward joins as n_heads * dk
        channels. Query head h reads value head j = h // group (hooked: ``hook_v`` and
        ``hook_pattern`` are those of this read) and value head j +- H_kv/2, by the same scores."""
        own = super().attend(q, k, v, ctx)  # (B, H, S, dk)
        other = super().attend(q, k, v.roll(self.n_kv_heads // 2, dims=1), replace(ctx, hooks=None))
        half = self.n_heads // 2  # the first half's pairs read [v_j | v_j+H_kv/2], the second's partners the same
        one = torch.exp(torch.sum(self.lambda_q1 * self.lambda_k1, dtype=torch.float32))
        lam = (one - torch.exp(torch.sum(self.lambda_q2 * self.lambda_k2, dtype=torch.float32))).to(q.dtype)
        first, second = torch.cat([own, other], -1)[:, :half], torch.cat([other, own], -1)[:, half:]
        out: Tensor = (1 - self.lambda_init) * self.pair_norm(first - (lam + self.lambda_init) * second)
        return out  # (B, H/2, S, 2 dk)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, lambda_init={self.lambda_init}"


def check_diff(config: Any, options: DiffOptions) -> None:
    """``qknorm``'s checks, and heads and key/value heads that pair up (both even)."""
    check_qknorm(config, options)
    kv = options.n_kv_heads or config.n_heads
    if config.n_heads % 2 or kv % 2:
        raise ValueError(
            f"attention 'diff' pairs its heads: n_heads ({config.n_heads}) and n_kv_heads ({kv}) must be even"
        )


def register_components(register: RegisterComponent) -> None:
    """Register this module's attention (called from ``zoo_modern.plugin``)."""
    register("attention", "diff", DiffAttention, check=check_diff)
