"""Placements from after 2017.

- ``sandwich`` (CogView 2021; Gemma 2 normalises both sides too): x + norm(f(norm(x))).
- ``post_sublayer`` (OLMo 2's reordered norm): x + norm(f(x)), the norm on what each
  sub-layer adds, none on its input.
- ``pre_scaled`` (Granite): x + s * f(norm(x)), pre-norm with a factor on what each
  sub-layer adds.
- ``sandwich_scaled`` (HyperCLOVA X): x + s * norm(f(norm(x))), the sandwich with
  ``pre_scaled``'s factor.
- ``parallel`` (GPT-J 2021, GPT-NeoX, PaLM): attention and MLP read the same input and
  both add to the residual, x + attn(norm1(x)) + mlp(norm2(x)); with ``shared_norm`` one
  norm feeds both (GPT-J). One layer is then one step of the residual stream, not two.
"""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import AttentionContext, Placement, RegisterComponent


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
        out: Tensor = x + self.norm_out(sublayer(self.norm_in(x), *args))
        return out


class PostSublayerNorm(Placement):
    """Norm after each sub-layer, x + norm(f(x)) (OLMo 2).

    Each sub-layer reads the raw residual stream and its output is normalised before it
    is added, so no layer adds more than the norm's scale allows. The stream is never
    normalised, so the stack wants a final norm."""

    final_norm = True

    def __init__(self, norm: nn.Module) -> None:
        super().__init__()
        self.norm = norm

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        out: Tensor = x + self.norm(sublayer(x, *args))
        return out


class ScaledPreNormOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    residual_scale: float = Field(
        1.0, gt=0.0, description="factor on each sub-layer's output (Granite's residual_multiplier)"
    )


class ScaledPreNorm(Placement):
    """Pre-norm with a factor on each sub-layer's output, x + s * f(norm(x)) (Granite).

    ``residual_scale`` s below 1 keeps many layers from adding a large total to the
    stream; with s = 1 it is ``pre``."""

    Options = ScaledPreNormOptions
    final_norm = True

    def __init__(self, norm: nn.Module, residual_scale: float = 1.0) -> None:
        super().__init__()
        self.norm, self.residual_scale = norm, residual_scale

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        out: Tensor = sublayer(self.norm(x), *args)
        return x + out * self.residual_scale

    def extra_repr(self) -> str:
        return f"residual_scale={self.residual_scale:g}"


class ScaledSandwichNorm(SandwichNorm):
    """Sandwich norm with a factor on each sub-layer's normed output, x + s * norm(f(norm(x)))
    (HyperCLOVA X); with s = 1 it is ``sandwich``."""

    Options = ScaledPreNormOptions

    def __init__(self, norm_in: nn.Module, norm_out: nn.Module, residual_scale: float = 1.0) -> None:
        super().__init__(norm_in, norm_out)
        self.residual_scale = residual_scale

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        out: Tensor = self.norm_out(sublayer(self.norm_in(x), *args))
        return x + out * self.residual_scale

    def extra_repr(self) -> str:
        return f"residual_scale={self.residual_scale:g}"


class ParallelOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    shared_norm: bool = Field(False, description="one norm feeds attention and MLP (GPT-J); false: one each (GPT-NeoX)")


class Parallel(Placement):
    """Parallel attention and MLP, x + attn(norm1(x)) + mlp(norm2(x)) (GPT-J, GPT-NeoX, PaLM).

    A layer's two of these (one per sub-layer) each own a norm; with a shared norm,
    ``pair`` makes the MLP's without one, and ``block`` feeds it the attention's. On its
    own (``forward``) one with a norm is pre-norm.
    """

    Options = ParallelOptions
    final_norm = True

    def __init__(self, norm: nn.Module | None, shared_norm: bool = False) -> None:
        super().__init__()
        self.shared_norm = shared_norm
        self.norm = norm  # None: the MLP's half of a shared-norm pair

    def forward(self, x: Tensor, sublayer: nn.Module, *args: object) -> Tensor:
        assert self.norm is not None, "the MLP's half of a shared-norm parallel pair runs only in its block"
        out: Tensor = x + sublayer(self.norm(x), *args)
        return out

    @classmethod
    def pair(cls, make: Callable[..., Placement]) -> tuple[Placement, Placement]:
        attn_residual = make()
        shared = isinstance(attn_residual, Parallel) and attn_residual.shared_norm
        return attn_residual, make(norm=None) if shared else make()

    @classmethod
    def block(  # type: ignore[override]  # no ``cross``: the config refuses it in an encoder-decoder
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
        out: Tensor = x + attn(h, ctx) + mlp(m)
        return out


def register_components(register: RegisterComponent) -> None:
    """Register the placements added since ``sandwich`` and ``parallel`` (called from ``zoo_modern.plugin``)."""
    register("placement", "post_sublayer", PostSublayerNorm)
    register("placement", "pre_scaled", ScaledPreNorm)
    register("placement", "sandwich_scaled", ScaledSandwichNorm)
