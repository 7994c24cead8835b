"""Placements from after 2017.

- ``sandwich`` (CogView 2021; Gemma 2 normalises both sides too): x + norm(f(norm(x))).
- ``parallel`` (GPT-J 2021, GPT-NeoX, PaLM): attention and MLP read the same input and
  both add to the residual, x + attn(norm1(x)) + mlp(norm2(x)); with ``shared_norm`` one
  norm feeds both (GPT-J). One layer is then one step of the residual stream, not two.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo import AttentionContext, Placement


class SandwichNorm(Placement):
    """Pre-norm plus a norm on the sub-layer's output before it joins the residual.

    The second norm bounds what each sub-layer adds, which keeps the residual stream
    from growing layer by layer. The stream itself is never normalised, so the stack
    still wants a final norm.
    """

    final_norm = True

    def __init__(self, builder: Any) -> None:
        super().__init__()
        self.norm_in = builder.norm()
        self.norm_out = builder.norm()

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        return x + self.norm_out(sublayer(self.norm_in(x), *args))


def sandwich(builder: Any, options: Any) -> Placement:
    """Sandwich norm, x + norm(f(norm(x))): a norm before and after each sub-layer."""
    return SandwichNorm(builder)


class ParallelOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    shared_norm: bool = Field(False, description="one norm feeds attention and MLP (GPT-J); false: one each (GPT-NeoX)")


class Parallel(Placement):
    """Attention and MLP side by side: x + attn(norm1(x)) + mlp(norm2(x)).

    Each layer has two of these (one per sub-layer), each owning its norm; with a shared
    norm the MLP's has none and reads the attention's. ``block`` runs the pair; on its
    own (``forward``) it is pre-norm.
    """

    final_norm = True

    def __init__(self, norm: nn.Module | None) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        assert self.norm is not None, "a shared-norm parallel placement runs only as a pair (block)"
        return x + sublayer(self.norm(x), *args)

    @classmethod
    def block(
        cls,
        x: Tensor,
        attn_residual: Placement,
        attn: nn.Module,
        mlp_residual: Placement,
        mlp: nn.Module,
        ctx: AttentionContext,
    ) -> Tensor:
        h = attn_residual.norm(x)  # type: ignore[operator]
        m = h if mlp_residual.norm is None else mlp_residual.norm(x)  # type: ignore[operator]
        return x + attn(h, ctx) + mlp(m)


def parallel(builder: Any, options: ParallelOptions) -> Placement:
    """Parallel attention and MLP, x + attn(norm1(x)) + mlp(norm2(x)) (GPT-J, GPT-NeoX, PaLM)."""
    if not options.shared_norm:
        return Parallel(builder.norm())
    # A block asks for its attention's placement, then its MLP's: the second of each
    # pair shares the first one's norm, so it gets none of its own.
    second = getattr(builder, "_zoo_modern_parallel_pending", False)
    builder._zoo_modern_parallel_pending = not second
    return Parallel(None if second else builder.norm())


def check_parallel(config: Any, options: ParallelOptions) -> None:
    if config.architecture != "decoder":
        raise ValueError(
            f"placement 'parallel' joins a decoder layer's attention and MLP; an {config.architecture!r} "
            f"model has cross-attention between them. Use placement 'pre' or 'post'"
        )
