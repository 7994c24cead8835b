"""Position encodings: ``learned`` (GPT-2), ``sinusoidal`` (2017) and ``none``."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import PositionEncoding, RegisterComponent, hookimpl


class LearnedOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    offset: int | None = Field(None, ge=1, le=1 << 16, description="rows before position 0's (OPT keeps 2)")
    count_padding: bool | None = Field(None, description="number slots, padding included, as BART's decoders do")


class LearnedPositions(PositionEncoding):
    """Learned absolute positions, added to the embeddings (GPT-2); limited to max_seq_len.

    With an ``offset``, position p reads row p + offset of a table that many rows longer
    (OPT's ``embed_positions`` starts at row 2), so such weights load as they are. With
    ``count_padding``, a left-padded row's positions are its slots (BART's decoders)."""

    Options = LearnedOptions

    def __init__(
        self, max_seq_len: int, d_model: int, offset: int | None = None, count_padding: bool | None = None
    ) -> None:
        super().__init__()
        self.offset, self.counts_padding = offset or 0, bool(count_padding)
        self.table = nn.Embedding(max_seq_len + self.offset, d_model)  # GPT-2's wpe
        self.max_positions = max_seq_len

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        table: Tensor = self.table(positions + self.offset if self.offset else positions)
        return x + table  # (B, S, d) + (B|1, S, d)


class SinusoidalOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    base: float = Field(10000.0, gt=1.0, description="wavelengths run from 2*pi to base*2*pi")


class SinusoidalPositions(PositionEncoding):
    """Fixed sinusoidal positions, added to the embeddings (2017); any length.

    PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(...): no parameters.
    """

    Options = SinusoidalOptions

    def __init__(self, d_model: int, base: float = 10000.0) -> None:
        super().__init__()
        if d_model % 2:
            raise ValueError(f"sinusoidal positions need an even d_model, got d_model={d_model}")
        self.d_model, self.base = d_model, base

    def table(self, positions: Tensor) -> Tensor:
        """The encodings of ``positions`` (B|1, S) as (B|1, S, d), in float32."""
        i = torch.arange(0, self.d_model, 2, device=positions.device, dtype=torch.float32)
        inv_freq = self.base ** (-i / self.d_model)  # (d/2,)
        angles = positions[..., None].float() * inv_freq  # (B|1, S, d/2)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (B|1, S, d) interleaved

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions).to(x.dtype)


def _check_even(config: Any, options: Any) -> None:
    if config.d_model % 2:
        raise ValueError(f"sinusoidal positions need an even d_model, got d_model={config.d_model}")


class NoPositions(PositionEncoding):
    """No position information at all (causal attention alone can infer some)."""


@hookimpl
def zoo_register_components(register: RegisterComponent) -> None:
    register("position", "learned", LearnedPositions)
    register("position", "sinusoidal", SinusoidalPositions, check=_check_even)
    register("position", "none", NoPositions)
