"""MLPs: the position-wise feed-forward sub-layer, d_model -> d_ff -> d_model."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.plugin import RegisterComponent, hookimpl, residual_output


class StandardMLP(nn.Module):
    """Linear, activation, Linear, dropout (GPT-2, 2017): FFN(x) = act(x W1 + b1) W2 + b2."""

    def __init__(self, d_model: int, d_ff: int, activation: nn.Module, bias: bool = True, dropout: float = 0.0) -> None:
        super().__init__()
        self.up = nn.Linear(d_model, d_ff, bias=bias)  # GPT-2's c_fc
        self.act = activation
        self.down = residual_output(nn.Linear(d_ff, d_model, bias=bias))  # GPT-2's c_proj
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        out: Tensor = self.drop(self.down(self.act(self.up(x))))
        return out


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    register("mlp", "standard", StandardMLP)
