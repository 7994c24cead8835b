"""Norm placement: where the norm sits relative to the residual connection."""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from zoo.contracts import Placement
from zoo.hookspecs import hookimpl


class PreNorm(Placement):
    """x + f(norm(x)): GPT-2 and most models since; the stack ends with a final norm."""

    final_norm = True

    def __init__(self, builder: Any) -> None:
        super().__init__()
        self.norm = builder.norm()

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        return x + sublayer(self.norm(x), *args)


class PostNorm(Placement):
    """norm(x + f(x)): the 2017 Transformer; each block's output is already normalised."""

    final_norm = False

    def __init__(self, builder: Any) -> None:
        super().__init__()
        self.norm = builder.norm()

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        return self.norm(x + sublayer(x, *args))


def pre(builder: Any, options: Any) -> Placement:
    """Pre-norm, x + f(norm(x)): GPT-2 and most models since."""
    return PreNorm(builder)


def post(builder: Any, options: Any) -> Placement:
    """Post-norm, norm(x + f(x)): the 2017 Transformer."""
    return PostNorm(builder)


@hookimpl
def zoo_register_components(register: Any) -> None:
    register("placement", "pre", pre)
    register("placement", "post", post)
