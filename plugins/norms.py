"""Norms: ``layernorm`` (GPT-2, 2017) and ``rmsnorm`` (LLaMA and most models since)."""

from __future__ import annotations

from typing import Any

from torch import nn

from zoo.hookspecs import hookimpl


def layernorm(builder: Any, options: Any) -> nn.Module:
    """LayerNorm: subtract the mean, divide by the std, then scale and shift."""
    c = builder.config
    return nn.LayerNorm(c.d_model, eps=c.norm_eps, bias=c.bias)


def rmsnorm(builder: Any, options: Any) -> nn.Module:
    """RMSNorm: divide by the root mean square, then scale; no mean, no bias."""
    c = builder.config
    return nn.RMSNorm(c.d_model, eps=c.norm_eps)


@hookimpl
def zoo_register_components(register: Any) -> None:
    register("norm", "layernorm", layernorm)
    register("norm", "rmsnorm", rmsnorm)
