"""Activations: elementwise functions used inside the MLP."""

from __future__ import annotations

from torch import nn

from zoo.plugin import RegisterComponent, hookimpl


def relu() -> nn.Module:
    """ReLU, max(0, x): the 2017 Transformer's choice."""
    return nn.ReLU()


def gelu() -> nn.Module:
    """GELU with the exact erf, x * Phi(x)."""
    return nn.GELU()


def gelu_tanh() -> nn.Module:
    """GELU with the tanh approximation: what GPT-2's weights were trained with."""
    return nn.GELU(approximate="tanh")


def silu() -> nn.Module:
    """SiLU (swish), x * sigmoid(x): the gate of SwiGLU."""
    return nn.SiLU()


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    for factory in (relu, gelu, gelu_tanh, silu):
        register("activation", factory.__name__, factory)
