"""Position encodings: ``learned`` (GPT-2), ``sinusoidal`` (2017) and ``none``."""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.contracts import PositionEncoding
from zoo.hookspecs import hookimpl


class LearnedPositions(PositionEncoding):
    """A trained vector per position, added to the token embedding (GPT-2's ``wpe``)."""

    def __init__(self, builder: Any) -> None:
        super().__init__()
        c = builder.config
        self.table = nn.Embedding(c.max_seq_len, c.d_model)
        self.max_positions = c.max_seq_len

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions)  # (B, S, d) + (B|1, S, d)


class SinusoidalOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    base: float = Field(10000.0, gt=1.0, description="wavelengths run from 2*pi to base*2*pi")


class SinusoidalPositions(PositionEncoding):
    """PE(p, 2i) = sin(p / base^(2i/d)), PE(p, 2i+1) = cos(...): fixed, no parameters,
    defined for any position."""

    def __init__(self, builder: Any, options: SinusoidalOptions) -> None:
        super().__init__()
        self.d_model, self.base = builder.config.d_model, options.base

    def table(self, positions: Tensor) -> Tensor:
        """The encodings of ``positions`` (B|1, S) as (B|1, S, d), in float32."""
        i = torch.arange(0, self.d_model, 2, device=positions.device, dtype=torch.float32)
        inv_freq = self.base ** (-i / self.d_model)  # (d/2,)
        angles = positions[..., None].float() * inv_freq  # (B|1, S, d/2)
        return torch.stack((angles.sin(), angles.cos()), dim=-1).flatten(-2)  # (B|1, S, d) interleaved

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions).to(x.dtype)


def learned(builder: Any, options: Any) -> PositionEncoding:
    """Learned absolute positions, added to the embeddings (GPT-2); limited to max_seq_len."""
    return LearnedPositions(builder)


def sinusoidal(builder: Any, options: SinusoidalOptions) -> PositionEncoding:
    """Fixed sinusoidal positions, added to the embeddings (2017); any length."""
    return SinusoidalPositions(builder, options)


def _check_even(config: Any, options: Any) -> None:
    if config.d_model % 2:
        raise ValueError(f"sinusoidal positions need an even d_model, got d_model={config.d_model}")


def none(builder: Any, options: Any) -> PositionEncoding:
    """No position information at all (causal attention alone can infer some)."""
    return PositionEncoding()


@hookimpl
def zoo_register_components(register: Any) -> None:
    register("position", "learned", learned)
    register("position", "sinusoidal", sinusoidal, SinusoidalOptions, check=_check_even)
    register("position", "none", none)
