"""Sandwich norm (CogView 2021; Gemma 2 normalises both sides too): x + norm(f(norm(x)))."""

from __future__ import annotations

from torch import Tensor, nn

from zoo import Placement


class SandwichNorm(Placement):
    """Sandwich norm, x + norm(f(norm(x))): a norm before and after each sub-layer.

    The second norm bounds what each sub-layer adds, which keeps the residual stream
    from growing layer by layer. The stream itself is never normalised, so the stack
    still wants a final norm.
    """

    final_norm = True

    def __init__(self, norm_in: nn.Module, norm_out: nn.Module) -> None:
        super().__init__()
        self.norm_in = norm_in
        self.norm_out = norm_out

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        return x + self.norm_out(sublayer(self.norm_in(x), *args))
