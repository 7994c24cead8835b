"""Gated MLPs (GLU variants, Shazeer 2020): down(act(gate(x)) * up(x)).

- ``swiglu`` (PaLM, LLaMA): the gate is always SiLU.
- ``glu``: the gate is the config's ``activation``, so one component is every variant:
  ``silu`` SwiGLU, ``gelu`` / ``gelu_tanh`` GeGLU (Gemma), ``relu`` ReGLU; with ``sub_norm``
  an RMSNorm over the hidden width before ``down`` (BitNet).
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import SCALES_WITH, RegisterComponent, residual_output


class SwiGluOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    hidden: int | None = Field(
        None,
        gt=0,
        description="hidden size (default: 2/3 of d_ff, rounded up to multiple_of)",
        json_schema_extra={SCALES_WITH: "d_model"},
    )
    multiple_of: int = Field(256, gt=0, description="the default hidden size is rounded up to a multiple of this")


def swiglu_hidden(d_ff: int, multiple_of: int = 256) -> int:
    """LLaMA's rule: 2/3 of d_ff, rounded up to ``multiple_of``.

    Three matrices of 2/3 * d_ff hold as many weights as the standard MLP's two of d_ff;
    gpt2-small's d_ff 3072 gives exactly 2048.
    """
    return multiple_of * math.ceil(int(2 * d_ff / 3) / multiple_of)


class GLU(nn.Module):
    """down(act(gate(x)) * up(x)): a gated MLP whose gate is ``activation``; ``fused``: gate
    and up as one projection ``gate_up`` of rows [gate | up] (Phi-3's ``gate_up_proj``);
    ``sub_norm``: an RMSNorm (epsilon ``norm_eps``) on the product before ``down``."""

    def __init__(
        self,
        d_model: int,
        hidden: int,
        activation: nn.Module,
        bias: bool,
        dropout: float,
        fused: bool = False,
        sub_norm: bool = False,
        norm_eps: float = 1e-6,
    ) -> None:
        super().__init__()
        self.fused = fused
        if fused:
            self.gate_up = nn.Linear(d_model, 2 * hidden, bias=bias)
        else:
            self.gate = nn.Linear(d_model, hidden, bias=bias)
            self.up = nn.Linear(d_model, hidden, bias=bias)
        self.act = activation  # a module, so the contract's mlp.hook_pre sees the gate
        self.down = residual_output(nn.Linear(hidden, d_model, bias=bias))
        self.drop = nn.Dropout(dropout)
        self.sub_norm = nn.RMSNorm(hidden, eps=norm_eps) if sub_norm else None

    def forward(self, x: Tensor) -> Tensor:
        if self.fused:
            gate, up = self.gate_up(x).chunk(2, dim=-1)  # (B, S, hidden) each
        else:
            gate, up = self.gate(x), self.up(x)
        h = self.act(gate) * up  # (B, S, hidden)
        out: Tensor = self.drop(self.down(h if self.sub_norm is None else self.sub_norm(h)))  # (B, S, d)
        return out


class SwiGLU(GLU):
    """down(silu(gate(x)) * up(x)); the gate is always SiLU (``config.activation`` is unused)."""

    def __init__(self, d_model: int, hidden: int, bias: bool, dropout: float) -> None:
        super().__init__(d_model, hidden, nn.SiLU(), bias, dropout)


def swiglu(
    d_model: int, d_ff: int, hidden: int | None = None, multiple_of: int = 256, bias: bool = True, dropout: float = 0.0
) -> SwiGLU:
    """Gated MLP down(silu(gate(x)) * up(x)) (PaLM, LLaMA); hidden 2/3 of d_ff, rounded."""
    return SwiGLU(d_model, hidden or swiglu_hidden(d_ff, multiple_of), bias, dropout)


class GluOptions(SwiGluOptions):
    fused: bool = Field(False, description="gate and up as one projection, rows [gate | up] (Phi-3)")
    sub_norm: bool = Field(False, description="an RMSNorm over the hidden width before the down projection (BitNet)")


def glu(
    d_model: int,
    d_ff: int,
    activation: nn.Module,
    hidden: int | None = None,
    multiple_of: int = 256,
    fused: bool = False,
    sub_norm: bool = False,
    bias: bool = True,
    dropout: float = 0.0,
    norm_eps: float = 1e-6,
) -> GLU:
    """Gated MLP down(act(gate(x)) * up(x)) gated by the config's activation: SwiGLU, GeGLU, ReGLU.

    The hidden size defaults to 2/3 of d_ff, rounded up to ``multiple_of``."""
    return GLU(
        d_model, hidden or swiglu_hidden(d_ff, multiple_of), activation, bias, dropout, fused, sub_norm, norm_eps
    )


def register_components(register: RegisterComponent) -> None:
    """Register the GLU of any gate (called from ``zoo_modern.plugin``; ``swiglu`` is registered there)."""
    register("mlp", "glu", glu, GluOptions)
