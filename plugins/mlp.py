"""MLPs: the position-wise feed-forward sub-layer, d_model -> d_ff -> d_model."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from zoo.contracts import residual_output
from zoo.hookspecs import hookimpl


class StandardMLP(nn.Module):
    """Linear, activation, Linear, dropout: FFN(x) = act(x W1 + b1) W2 + b2."""

    def __init__(self, builder: Any) -> None:
        super().__init__()
        c = builder.config
        self.up = nn.Linear(c.d_model, c.d_ff, bias=c.bias)  # GPT-2's c_fc
        self.act = builder.activation()
        self.down = residual_output(nn.Linear(c.d_ff, c.d_model, bias=c.bias))  # GPT-2's c_proj
        self.drop = nn.Dropout(c.dropout.residual)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.down(self.act(self.up(x))))


def standard(builder: Any, options: Any) -> nn.Module:
    """Linear, activation, Linear, dropout (GPT-2, 2017)."""
    return StandardMLP(builder)


@hookimpl
def zoo_register_components(register: Any) -> None:
    register("mlp", "standard", standard)
