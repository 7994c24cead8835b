"""Grouped-query attention (Ainslie et al. 2023): fewer key/value heads than query heads.

Query heads come in ``n_heads / n_kv_heads`` groups; each group shares one key/value
head. Only the key/value heads are projected and cached, so the KV cache (the memory
that limits batch size and context when decoding) shrinks by that factor.
``n_kv_heads = 1`` is multi-query attention; ``n_kv_heads = n_heads`` is standard
multi-head attention, weight for weight.

zoo's own attention already takes ``n_kv_heads`` (litgpt's way), so ``gqa`` is only a
registration: its default of one key/value head, and a choice of kernel.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from zoo.plugin import SCALES_WITH, Attention, AttentionOptions, EagerAttention, SdpaAttention


class GqaOptions(AttentionOptions):
    """The zoo attention's options (window, softcap, scale, biases), one key/value head by default."""

    n_kv_heads: int = Field(
        1,
        gt=0,
        description="key/value heads; 1 is multi-query, n_heads is multi-head",
        json_schema_extra={SCALES_WITH: "n_heads"},
    )
    kernel: Literal["sdpa", "eager"] = Field(
        "sdpa", description="sdpa: torch's fused kernel; eager: the explicit math, can return weights"
    )


def gqa(
    d_model: int,
    n_heads: int,
    n_kv_heads: int = 1,
    kernel: Literal["sdpa", "eager"] = "sdpa",
    bias: bool = True,
    dropout: float = 0.0,
    attn_dropout: float | None = None,
    **options: Any,
) -> Attention:
    """Grouped-query attention: n_kv_heads key/value heads shared by groups of query heads;
    the base attention's other options (``AttentionOptions``) pass through."""
    attention = EagerAttention if kernel == "eager" else SdpaAttention
    return attention(
        d_model, n_heads, n_kv_heads=n_kv_heads, bias=bias, dropout=dropout, attn_dropout=attn_dropout, **options
    )


#: The attention ``gqa`` makes, for ``isinstance`` checks: zoo's, with ``n_kv_heads``.
GroupedQueryAttention = Attention


def check_gqa(config: Any, options: GqaOptions) -> None:
    n_heads, n_kv = config.n_heads, options.n_kv_heads
    if n_kv > n_heads or n_heads % n_kv:
        fits = [h for h in range(1, n_heads + 1) if n_heads % h == 0]
        raise ValueError(
            f"attention.n_kv_heads={n_kv} must divide n_heads={n_heads} (each key/value head "
            f"serves an equal group of query heads); pick one of {', '.join(map(str, fits))}"
        )
