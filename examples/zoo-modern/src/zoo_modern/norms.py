"""Norms from after 2017, beside the built-in ``layernorm`` and ``rmsnorm``.

- ``rmsnorm_offset`` (Gemma): RMSNorm whose scale is stored as an offset from one,
  x / rms(x) * (1 + w), computed in float32. Its weight starts at 0, the identity, so
  weight decay pulls the scale towards 1 rather than towards 0.

- ``rmsnorm_plain`` (NanoChat): RMSNorm with no learned scale, in float32, x / rms(x).
- ``layernorm_plain`` (OLMo): LayerNorm with no learned scale or shift, computed in
  float32, (x - mean(x)) / std(x).

LayerNorm without a bias is the built-in ``layernorm`` with ``bias = false`` in the
config (it follows ``config.bias``, as OLMo's and Cohere's do).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.plugin import RegisterComponent


class OffsetRMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) * (1 + w), in float32, returned in x's dtype (Gemma's order:
    the product is rounded once, not the normalised x before it)."""

    def __init__(self, d_model: int, norm_eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = norm_eps
        self.weight = nn.Parameter(torch.zeros(d_model))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.weight)  # a scale of 1 + 0: the identity

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return (h * (1.0 + self.weight.float())).type_as(x)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.eps}"


def rmsnorm_offset(d_model: int, norm_eps: float = 1e-6) -> OffsetRMSNorm:
    """RMSNorm with a unit offset, x / rms(x) * (1 + w), weight starting at 0 (Gemma)."""
    return OffsetRMSNorm(d_model, norm_eps)


class PlainLayerNorm(nn.Module):
    """(x - mean(x)) / sqrt(var(x) + eps) in float32, returned in x's dtype: no parameters."""

    def __init__(self, d_model: int, norm_eps: float = 1e-5) -> None:
        super().__init__()
        self.shape, self.eps = (d_model,), norm_eps

    def forward(self, x: Tensor) -> Tensor:
        return F.layer_norm(x.float(), self.shape, None, None, self.eps).type_as(x)

    def extra_repr(self) -> str:
        return f"{self.shape}, eps={self.eps}, no parameters"


def layernorm_plain(d_model: int, norm_eps: float = 1e-5) -> PlainLayerNorm:
    """LayerNorm with no learned scale or shift, in float32 (OLMo)."""
    return PlainLayerNorm(d_model, norm_eps)


class PlainRMSNorm(nn.Module):
    """x / sqrt(mean(x^2) + eps) in float32, returned in x's dtype: no parameters."""

    def __init__(self, d_model: int, norm_eps: float = 1e-6) -> None:
        super().__init__()
        self.d_model, self.eps = d_model, norm_eps

    def forward(self, x: Tensor) -> Tensor:
        h = x.float()
        return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)).type_as(x)

    def extra_repr(self) -> str:
        return f"({self.d_model},), eps={self.eps}, no parameters"


def rmsnorm_plain(d_model: int, norm_eps: float = 1e-6) -> PlainRMSNorm:
    """RMSNorm with no learned scale, in float32 (NanoChat)."""
    return PlainRMSNorm(d_model, norm_eps)


def register_components(register: RegisterComponent) -> None:
    """Register this module's norms (called from ``zoo_modern.plugin``)."""
    register("norm", "rmsnorm_offset", rmsnorm_offset)
    register("norm", "layernorm_plain", layernorm_plain)
    register("norm", "rmsnorm_plain", rmsnorm_plain)
