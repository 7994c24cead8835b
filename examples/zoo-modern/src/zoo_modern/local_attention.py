"""Two attentions of the 2025 open models, on top of zoo's grouped-query ``Attention``.

- ``sinks`` (GPT-OSS): a learned logit per head joins every softmax's denominator and
  no value, so a head can put its weight on "nothing" instead of on the first tokens
  (the attention sinks of Xiao et al. 2023, learned). Weights then sum to less than 1.
  With ``window`` it is GPT-OSS's sliding layer; alternate with ``layer_pattern``.
- ``chunked`` (Llama 4's local layers): a query sees only the keys of its own chunk of
  ``chunk_size`` positions, causally. Chunks start at each row's first real token (0,
  C, 2C, ... after any left padding, as transformers' ``chunked_overlay``), so a padded
  row reads as it would alone. The cache keeps only the last ``chunk_size - 1`` keys,
  all a later query can see.

Both are ``qknorm`` attentions (``QkNormAttention``) with ``qk_norm`` off by default: the
same projections and weight names, so every option of it (``n_kv_heads``, ``head_dim``,
QK-norm, ``softcap``, ``scale``, biases) applies: GPT-OSS's heads are 64 wide at d_model
2880, Llama 4's chunked layers norm q and k after the rotation.
"""

from __future__ import annotations

from typing import Any, Literal

import torch
from pydantic import Field
from torch import Tensor, nn

from zoo.plugin import MASKED, AttentionContext, RegisterComponent
from zoo_modern.qknorm import QkNorm, QkNormAttention, QkNormOptions, check_qknorm


class SinkOptions(QkNormOptions):
    """``qknorm``'s options (QK-norm off), and the kernel every attention takes (from_hf sets it)."""

    qk_norm: QkNorm = Field("none", description="RMSNorm on q and k: head, whole or none (qknorm's)")
    kernel: Literal["sdpa", "eager"] | None = Field(  # type: ignore[assignment]
        None, description="unused: the scores are written out, for the sinks (taken as every attention's, for from_hf)"
    )


class SinkAttention(QkNormAttention):
    """Attention with a learned sink logit per head in the softmax's denominator (GPT-OSS).

    The scores are written out (the fused kernel has no sinks); ``sinks`` (n_heads,)
    start at 0, a sink as likely as a key scoring 0."""

    Options = SinkOptions

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,
        *,
        kernel: str | None = None,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
        attn_dropout: float | None = None,
        **options: Any,
    ) -> None:
        del kernel  # the scores are always written out
        config = {"norm_eps": norm_eps, "dropout": dropout, "attn_dropout": attn_dropout}  # named: the model fills them
        super().__init__(d_model, n_heads, head_dim, kernel="eager", **{"qk_norm": "none", **config, **options})
        self.sinks = nn.Parameter(torch.zeros(n_heads))

    def reset_parameters(self) -> None:
        """Sinks at 0 (the projections are their own modules, drawn by the init scheme)."""
        if self.sinks is not None:
            nn.init.zeros_(self.sinks)


class ChunkedOptions(QkNormOptions):
    """``qknorm``'s options (QK-norm off) and the chunk's length."""

    qk_norm: QkNorm = Field("none", description="RMSNorm on q and k: head, whole or none (qknorm's)")
    chunk_size: int = Field(8192, gt=0, description="positions per chunk; a query sees its chunk's keys up to itself")


class ChunkedAttention(QkNormAttention):
    """Attention within chunks of chunk_size positions, causal inside each (Llama 4)."""

    Options = ChunkedOptions

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,
        *,
        chunk_size: int = 8192,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
        attn_dropout: float | None = None,
        **options: Any,
    ) -> None:
        config = {"norm_eps": norm_eps, "dropout": dropout, "attn_dropout": attn_dropout}  # named: the model fills them
        super().__init__(d_model, n_heads, head_dim, **{"qk_norm": "none", **config, **options})
        self.chunk_size = chunk_size
        self.cache_window = chunk_size  # the model keeps the last chunk_size - 1 keys

    def attend(self, q: Tensor, k: Tensor, v: Tensor, ctx: AttentionContext) -> Tensor:
        """The zoo attention under the model's mask with other chunks' keys masked too."""
        return super().attend(q, k, v, ctx.with_mask(chunk_mask(ctx, q, k, self.chunk_size), False))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, chunk_size={self.chunk_size}"


def chunk_mask(ctx: AttentionContext, q: Tensor, k: Tensor, chunk_size: int) -> Tensor:
    """The additive mask (B|1, H|1, S, S_k) of ``ctx`` (padding, score bias) with each
    query's future and other chunks masked: key slot j is visible to query slot i iff
    j <= i and (j - p) // chunk_size == (i - p) // chunk_size, p the row's first real slot.
    Queries and keys are the last slots seen so far (the cache's ``length`` counts them
    all; its keys may be the last few)."""
    q_len, k_len = q.shape[2], k.shape[2]
    end = ctx.cache.length if ctx.cache is not None else k_len  # slots seen, these included
    query = torch.arange(end - q_len, end, device=q.device)[:, None]  # (S, 1)
    key = torch.arange(end - k_len, end, device=q.device)[None]  # (1, S_k)
    if ctx.padding is not None:  # count from each row's first real token: (B, 1, S, 1) and (B, 1, 1, S_k)
        first = ctx.padding.to(torch.int64).argmax(dim=-1)[:, None, None, None]
        query, key = query - first, key - first
    hidden = (key > query) | (key // chunk_size != query // chunk_size)  # (S, S_k), or (B, 1, S, S_k) with padding
    base = ctx.mask if ctx.mask is not None else torch.zeros(1, 1, q_len, k_len, device=q.device)
    return base.to(q.dtype).masked_fill(hidden, MASKED)


def check_decoder_only(config: Any, name: str) -> None:
    """Refuse an encoder-decoder: its cross-attention reads a whole memory, not a causal past."""
    if config.architecture == "encoder_decoder":
        raise ValueError(
            f"attention {name!r} is causal by construction, for decoder-only models; an 'encoder_decoder' "
            f"model uses it for its bidirectional encoder and cross-attention too: use 'sdpa' (or 'sinks') there"
        )


def check_sinks(config: Any, options: SinkOptions) -> None:
    """``qknorm``'s checks (equal key/value groups, a norm after the rotation per head)."""
    check_qknorm(config, options)


def check_chunked(config: Any, options: ChunkedOptions) -> None:
    """``qknorm``'s checks, a decoder-only model, and no sliding window on top of the chunks."""
    check_qknorm(config, options)
    check_decoder_only(config, "chunked")
    if options.window is not None:
        raise ValueError(
            f"attention.window={options.window} with 'chunked': a layer is either local by chunks or by a sliding "
            f"window; drop attention.window (or use attention 'sdpa' with a window)"
        )


def register_components(register: RegisterComponent) -> None:
    """Register this module's attentions (called from ``zoo_modern.plugin``)."""
    register("attention", "sinks", SinkAttention, check=check_sinks)
    register("attention", "chunked", ChunkedAttention, check=check_chunked)
