"""SwiGLU (Shazeer 2020, used by PaLM and LLaMA): a gated MLP, down(silu(gate(x)) * up(x))."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import residual_output


class SwiGluOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    hidden: int | None = Field(None, gt=0, description="hidden size (default: 2/3 of d_ff, rounded up to multiple_of)")
    multiple_of: int = Field(256, gt=0, description="the default hidden size is rounded up to a multiple of this")


def swiglu_hidden(d_ff: int, multiple_of: int = 256) -> int:
    """LLaMA's rule: 2/3 of d_ff, rounded up to ``multiple_of``.

    Three matrices of 2/3 * d_ff hold as many weights as the standard MLP's two of d_ff;
    gpt2-small's d_ff 3072 gives exactly 2048.
    """
    return multiple_of * math.ceil(int(2 * d_ff / 3) / multiple_of)


class SwiGLU(nn.Module):
    """down(silu(gate(x)) * up(x)); the gate is always SiLU (``config.activation`` is unused)."""

    def __init__(self, d_model: int, hidden: int, bias: bool, dropout: float) -> None:
        super().__init__()
        self.gate = nn.Linear(d_model, hidden, bias=bias)
        self.up = nn.Linear(d_model, hidden, bias=bias)
        self.act = nn.SiLU()  # a module, so the contract's mlp.hook_pre sees the gate
        self.down = residual_output(nn.Linear(hidden, d_model, bias=bias))
        self.drop = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        return self.drop(self.down(self.act(self.gate(x)) * self.up(x)))  # (B, S, d)


def swiglu(
    d_model: int, d_ff: int, hidden: int | None = None, multiple_of: int = 256, bias: bool = True, dropout: float = 0.0
) -> SwiGLU:
    """Gated MLP down(silu(gate(x)) * up(x)) (PaLM, LLaMA); hidden 2/3 of d_ff, rounded."""
    return SwiGLU(d_model, hidden or swiglu_hidden(d_ff, multiple_of), bias, dropout)
