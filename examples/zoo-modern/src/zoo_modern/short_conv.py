"""A short-convolution token mixer in place of attention (LFM2's ``Lfm2ShortConv``).

``in_proj`` makes three streams of width d from x: gates b and c, and h. The mixer
convolves b * h over time with a causal depthwise kernel of ``kernel_size`` positions
(each channel its own filter), gates the result with c and projects it back:
``out_proj(c * conv(b * h))``. A position reads only the last ``kernel_size`` positions,
so decoding carries just the last ``kernel_size - 1`` values of b * h in the layer's
cache (a ``RollingLayerCache``, the model's for ``cache_window``), not keys and values.

It registers as an ``attention`` (the kind a block's token mixer is) with
``attends = False``: no q, k, v, scores or pattern, so those hook points are absent;
``attn.hook_z`` is ``out_proj``'s input in n_heads groups of channels. Padded positions
are zeroed before the convolution, so left padding never reaches a real token. A hybrid
like LFM2's alternates it with attention through ``layer_pattern``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from zoo.plugin import AttentionContext, RegisterComponent, residual_output


class ShortConv(nn.Module):
    """Gated causal depthwise convolution over time, out_proj(c * conv(b * h)) (LFM2)."""

    attends: ClassVar[bool] = False  # a token mixer without scores: no attention hook points

    def __init__(
        self, d_model: int, kernel_size: int = 3, conv_bias: bool | None = None, bias: bool = True, dropout: float = 0.0
    ) -> None:
        """``kernel_size``: positions each output reads, its own included; ``conv_bias``:
        bias on the projections and the convolution (default: the config's bias)."""
        super().__init__()
        if kernel_size < 2:
            raise ValueError(f"attention.kernel_size={kernel_size}: a short convolution reads 2 positions or more")
        bias = bias if conv_bias is None else conv_bias
        self.d_model, self.kernel_size = d_model, kernel_size
        self.cache_window = kernel_size  # the model's cache keeps the last kernel_size - 1 inputs
        self.in_proj = nn.Linear(d_model, 3 * d_model, bias=bias)  # rows [b | c | h]
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, groups=d_model, bias=bias)  # (d, 1, L)
        self.out_proj = residual_output(nn.Linear(d_model, d_model, bias=bias))
        self.resid_drop = nn.Dropout(dropout)

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        seq = x.shape[1]
        b, c, h = self.in_proj(x).chunk(3, dim=-1)  # (B, S, d) each
        bh = b * h
        if ctx.padding is not None:  # padding contributes nothing to the later positions
            bh = bh * ctx.padding[:, -seq:, None].to(bh.dtype)
        past = bh
        if ctx.cache is not None:  # the last kernel_size - 1 inputs before these, then these
            stored, _ = ctx.cache.update(bh[:, None], bh[:, None, :, :0])  # (B, 1, kept + S, d), no values
            past = stored[:, 0]
        window = seq + self.kernel_size - 1
        past = past[:, -window:].transpose(1, 2)  # (B, d, <= S + L - 1)
        past = F.pad(past, (window - past.shape[-1], 0))  # zeros before the first position
        mixed = F.conv1d(past, self.conv.weight, self.conv.bias, groups=self.d_model)  # (B, d, S)
        out: Tensor = self.resid_drop(self.out_proj(c * mixed.transpose(1, 2)))  # (B, S, d)
        return out

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, kernel_size={self.kernel_size}"


def check_short_conv(config: Any, options: Any) -> None:
    """A decoder-only model: the mixer is causal and reads no encoder memory."""
    if config.architecture == "encoder_decoder":
        raise ValueError(
            "attention 'short_conv' mixes a causal past, for decoder-only models; an 'encoder_decoder' model "
            "would use it for its bidirectional encoder and cross-attention too: use 'sdpa' there"
        )


def register_components(register: RegisterComponent) -> None:
    """Register the mixer (called from ``zoo_modern.plugin``)."""
    register("attention", "short_conv", ShortConv, check=check_short_conv)
