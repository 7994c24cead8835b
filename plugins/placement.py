"""Norm placement: where the norm sits relative to the residual connection."""

from __future__ import annotations

from torch import Tensor, nn

from zoo.plugin import Placement, RegisterComponent, hookimpl


class PreNorm(Placement):
    """Pre-norm, x + f(norm(x)): GPT-2 and most models since."""

    final_norm = True  # the stack ends with a final norm

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        out: Tensor = sublayer(self.norm(x), *args)
        return x + out


class PostNorm(Placement):
    """Post-norm, norm(x + f(x)): the 2017 Transformer."""

    final_norm = False  # each block's output is already normalised

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        out: Tensor = self.norm(x + sublayer(x, *args))
        return out


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    register("placement", "pre", PreNorm)
    register("placement", "post", PostNorm)
