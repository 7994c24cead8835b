"""Activations from after 2020, beside the built-in ``relu``, ``gelu``, ``gelu_tanh`` and ``silu``.

- ``relu2`` (So et al. 2021, Primer): ReLU squared, max(0, x)^2, the ungated MLP's
  activation of Nemotron, Arcee and Jais 2.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from zoo.plugin import RegisterComponent


class ReLUSquared(nn.Module):
    """max(0, x)^2."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.square(torch.relu(x))


def relu2() -> nn.Module:
    """ReLU squared, max(0, x)^2 (Primer; Nemotron, Arcee)."""
    return ReLUSquared()


def register_components(register: RegisterComponent) -> None:
    """Register this module's activations (called from ``zoo_modern.plugin``)."""
    register("activation", "relu2", relu2)
