"""Norms: ``layernorm`` (GPT-2, 2017) and ``rmsnorm`` (LLaMA and most models since)."""

from __future__ import annotations

from torch import nn

from zoo.plugin import RegisterComponent, hookimpl


def layernorm(d_model: int, norm_eps: float = 1e-5, bias: bool = True, shift: bool | None = None) -> nn.Module:
    """LayerNorm: subtract the mean, divide by the std, then scale and shift.

    ``shift``: whether it adds a learned bias; default the config's ``bias`` (StableLM and
    Falcon have one in their norms but not in their linear layers)."""
    return nn.LayerNorm(d_model, eps=norm_eps, bias=bias if shift is None else shift)


def rmsnorm(d_model: int, norm_eps: float = 1e-5) -> nn.Module:
    """RMSNorm: divide by the root mean square, then scale; no mean, no bias."""
    return nn.RMSNorm(d_model, eps=norm_eps)


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    register("norm", "layernorm", layernorm)
    register("norm", "rmsnorm", rmsnorm)
