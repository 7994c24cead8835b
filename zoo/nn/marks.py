"""Marks the model reads off a component's modules, so components write no model code:
``residual_output`` flags a projection that writes into the residual stream (init schemes
scale it down; its input is a hook point)."""

from __future__ import annotations

from torch import nn


def residual_output(layer: nn.Linear) -> nn.Linear:
    """Mark ``layer`` as a projection that writes into the residual stream.

    Init schemes (GPT-2's) scale these down by sqrt(2 * n_layers).
    """
    layer.zoo_residual_output = True  # type: ignore[assignment]
    return layer


def is_residual_output(module: nn.Module) -> bool:
    return bool(getattr(module, "zoo_residual_output", False))
