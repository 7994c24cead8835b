"""Position encodings that act inside attention instead of on the embeddings, and one more sinusoid.

- ``rotary`` (RoPE, Su et al. 2021) rotates queries and keys by their positions, so a
  query-key score depends only on how far apart the two tokens are.
- ``alibi`` (Press et al. 2022) adds ``-slope * distance`` to each score, one slope per
  head, and needs no parameters at all.
- ``sinusoidal_halves``: the 2017 sinusoids added to the embeddings, sines then cosines
  (CTRL's and fairseq's layout) where the built-in ``sinusoidal`` interleaves them.

None has a length limit (``max_positions = None``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field, field_validator
from torch import Tensor

from zoo.plugin import SCALES_WITH, PositionEncoding
from zoo_modern.rope_scaling import (
    RopeScaling,
    attention_factor,
    check_scaling,
    default_frequencies,
    dynamic_base,
    scaled_frequencies,
)


class RotaryOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    base: float = Field(10000.0, gt=1.0, description="theta: pair i turns by position * base^(-2i/rotary_dim)")
    rotary_dim: int | None = Field(
        None,
        gt=0,
        description="dimensions of each head that turn, the first ones (default: all; GPT-NeoX style)",
        json_schema_extra={SCALES_WITH: "head_dim"},
    )
    rotary_pct: float | None = Field(
        None, gt=0.0, le=1.0, description="or the fraction of each head that turns (GPT-NeoX's rotary_pct)"
    )
    interleaved: bool | None = Field(
        None, description="turn pairs (2i, 2i+1) (GPT-J, Cohere) instead of (i, i + r/2) (default: halves)"
    )
    # A table checked as a RopeScaling and kept as a plain dict (its schema inline), so a
    # config's JSON schema needs no $defs of its own.
    scaling: dict[str, Any] | None = Field(
        None,
        description="frequencies scaled for a longer context (zoo_modern.rope_scaling)",
        json_schema_extra={k: v for k, v in RopeScaling.model_json_schema().items() if k != "title"},
    )

    @field_validator("scaling")
    @classmethod
    def _scaling(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        return None if value is None else RopeScaling.model_validate(value).model_dump(exclude_none=True)


class Rotary(PositionEncoding):
    """Rotary positions (RoPE) on queries and keys: scores depend on relative position.

    Rotates each pair (x_i, x_{i + r/2}) of the first ``rotary_dim = r`` dimensions of
    every head by the angle position * theta_i and leaves the rest as they are (partial
    rotary, as GPT-NeoX; by default r is the whole head). The pairs are split in halves,
    the layout of LLaMA and GPT-NeoX as Hugging Face implements them, so such weights need
    no permutation; ``interleaved`` pairs neighbours (x_2i, x_2i+1) instead, as GPT-J's
    and Cohere's weights expect. ``scaling`` changes the frequencies theta_i (linear,
    dynamic NTK, YaRN, Llama 3: ``zoo_modern.rope_scaling``). ``prepare`` computes cos/sin
    once per forward pass.
    """

    Options = RotaryOptions

    def __init__(
        self,
        head_dim: int,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        rotary_pct: float | None = None,
        interleaved: bool | None = None,
        scaling: RopeScaling | Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.head_dim, self.base = head_dim, base
        self.rotary_dim = rotary_dims(head_dim, rotary_dim, rotary_pct)
        self.interleaved = bool(interleaved)
        self.scaling = RopeScaling.model_validate(scaling) if isinstance(scaling, Mapping) else scaling
        self.scale = attention_factor(self.scaling)

    def angles(self, positions: Tensor) -> Tensor:
        """Rotation angles (B|1, S, r/2) in float32 for ``positions`` (B|1, S)."""
        r, scaling = self.rotary_dim, self.scaling
        if scaling is None:
            inv_freq = default_frequencies(r, self.base, positions.device)  # (r/2,): theta_i
        elif scaling.kind == "dynamic":
            inv_freq = default_frequencies(r, dynamic_base(self.base, r, scaling, positions), positions.device)
        else:
            inv_freq = scaled_frequencies(r, self.base, scaling, positions.device)
        return positions[..., None].float() * inv_freq  # (B|1, S, r/2)

    def prepare(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of the angles, (B|1, 1, S, r/2): the same for every head and layer."""
        angles = self.angles(positions)[:, None]
        if self.scale != 1.0:  # YaRN's attention factor
            return angles.cos() * self.scale, angles.sin() * self.scale
        return angles.cos(), angles.sin()

    def rotate(self, q: Tensor, k: Tensor, state: tuple[Tensor, Tensor]) -> tuple[Tensor, Tensor]:
        cos, sin = state
        turn = _rotate_pairs if self.interleaved else _rotate
        return turn(q, cos, sin, self.rotary_dim), turn(k, cos, sin, self.rotary_dim)

    def extra_repr(self) -> str:
        extra = (", interleaved" if self.interleaved else "") + (
            f", scaling={self.scaling.kind}" if self.scaling else ""
        )
        return f"head_dim={self.head_dim}, rotary_dim={self.rotary_dim}, base={self.base:g}{extra}"


def rotary_dims(head_dim: int, rotary_dim: int | None = None, rotary_pct: float | None = None) -> int:
    """How many dimensions of each head turn: ``rotary_dim``, else ``int(head_dim * rotary_pct)``
    (GPT-NeoX's rule), else all."""
    if rotary_dim is not None and rotary_pct is not None:
        raise ValueError("rotary takes rotary_dim or rotary_pct, not both; drop one")
    dims = rotary_dim if rotary_dim is not None else int(head_dim * rotary_pct) if rotary_pct is not None else head_dim
    if dims % 2 or not 0 < dims <= head_dim:
        raise ValueError(
            f"rotary positions turn pairs of dimensions, so the rotary dimensions must be even and "
            f"in 2..head_dim={head_dim}, got {dims}; change rotary_dim/rotary_pct, d_model or n_heads"
        )
    return dims


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, dims: int) -> Tensor:
    """x (B, H, S, dk) with each pair (x1_i, x2_i) of its first ``dims`` turned, in float32."""
    turned, kept = x[..., :dims].float(), x[..., dims:]
    x1, x2 = turned.chunk(2, dim=-1)  # (B, H, S, dims/2) each
    rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).to(x.dtype)  # (B, H, S, dims)
    return rotated if dims == x.shape[-1] else torch.cat((rotated, kept), dim=-1)


def _rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor, dims: int) -> Tensor:
    """x (B, H, S, dk) with each neighbouring pair (x_2i, x_2i+1) of its first ``dims`` turned."""
    turned, kept = x[..., :dims].float(), x[..., dims:]
    x1, x2 = turned[..., 0::2], turned[..., 1::2]  # (B, H, S, dims/2) each
    rotated = torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2).to(x.dtype)
    return rotated if dims == x.shape[-1] else torch.cat((rotated, kept), dim=-1)


class AlibiOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    max_bias: float = Field(8.0, gt=0.0, description="slopes run from 2^(-max_bias/n) to 2^(-max_bias)")


def alibi_slopes(n_heads: int, max_bias: float = 8.0) -> list[float]:
    """The ALiBi paper's per-head slopes.

    For n heads, n a power of two: the geometric sequence 2^(-8/n), 2^(-16/n), ...,
    2^(-8). Otherwise: those of the largest power of two p below n, then every other
    slope of 2p (the ones that interleave with the first p) until there are n.
    """

    def geometric(n: int) -> list[float]:
        return [2.0 ** (-max_bias * (i + 1) / n) for i in range(n)]

    p = 2 ** math.floor(math.log2(n_heads))
    return geometric(p) + geometric(2 * p)[0::2][: n_heads - p]


class ALiBi(PositionEncoding):
    """ALiBi: a per-head linear penalty on query-key distance; no parameters, any length.

    Attention with linear biases: score(i, j) -= slope_h * |i - j|.

    The bias depends on slot distances only, so it ignores ``positions`` (left
    padding shifts queries and keys alike). ``slopes`` is a derived buffer, kept in
    float32 and on the model's device, so the bias is built where attention runs.
    """

    Options = AlibiOptions
    slopes: Tensor

    def __init__(self, n_heads: int, max_bias: float = 8.0) -> None:
        super().__init__()
        self.n_heads, self.max_bias = n_heads, max_bias
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads, max_bias)), persistent=False)

    def reset_buffers(self) -> None:
        """Refill ``slopes`` after materialising from the meta device (on the CPU where they
        are still there, as when weights were assigned and buffers left: ``model.to`` moves them)."""
        device = self.slopes.device if self.slopes.device.type != "meta" else torch.device("cpu")
        self.slopes = torch.tensor(alibi_slopes(self.n_heads, self.max_bias), device=device)

    def score_bias(self, n_heads: int, q_len: int, k_len: int) -> Tensor:
        slopes = self.slopes
        if n_heads != self.n_heads:
            slopes = torch.tensor(alibi_slopes(n_heads, self.max_bias), device=slopes.device)
        keys = torch.arange(k_len, device=slopes.device)
        queries = torch.arange(k_len - q_len, k_len, device=slopes.device)  # the newest q_len slots
        distance = (queries[:, None] - keys[None, :]).abs()  # (q_len, k_len)
        return -slopes.float()[:, None, None] * distance  # (H, q_len, k_len)

    def extra_repr(self) -> str:
        return f"n_heads={self.n_heads}, max_bias={self.max_bias:g}"


class HalvesOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    base: float = Field(10000.0, gt=1.0, description="wavelengths run from 2*pi to base*2*pi")
    offset: int = Field(0, ge=0, le=1 << 16, description="position p is encoded as p + offset (fairseq's XGLM: 2)")
    fairseq: bool = Field(False, description="frequencies base^(-i/(d/2 - 1)), fairseq's, not base^(-2i/d)")


class SinusoidalHalves(PositionEncoding):
    """Fixed sinusoidal positions, added to the embeddings, in halves; no parameters, any length.

    PE(p, i) = sin((p + offset) w_i) and PE(p, d/2 + i) = cos(...), for i < d/2, with
    w_i = base^(-2i/d) (CTRL) or, ``fairseq``, base^(-i/(d/2 - 1)) (XGLM's, from row
    ``offset`` = 2 of its table); each computed in float32 as those models compute it.
    """

    Options = HalvesOptions

    def __init__(self, d_model: int, base: float = 10000.0, offset: int = 0, fairseq: bool = False) -> None:
        super().__init__()
        self.d_model, self.base, self.offset, self.fairseq = d_model, base, offset, fairseq

    def table(self, positions: Tensor) -> Tensor:
        """The encodings of ``positions`` (B|1, S) as (B|1, S, d), in float32."""
        half = self.d_model // 2
        i = torch.arange(half, device=positions.device, dtype=torch.float32)
        if self.fairseq:
            inv_freq = torch.exp(i * -(math.log(self.base) / (half - 1)))  # (d/2,)
        else:
            inv_freq = 1 / torch.pow(self.base, 2 * i / self.d_model)
        angles = (positions[..., None] + self.offset).float() * inv_freq  # (B|1, S, d/2)
        return torch.cat((angles.sin(), angles.cos()), dim=-1)

    def embed(self, x: Tensor, positions: Tensor) -> Tensor:
        return x + self.table(positions).to(x.dtype)

    def extra_repr(self) -> str:
        return f"d_model={self.d_model}, base={self.base:g}, offset={self.offset}" + (
            ", fairseq" if self.fairseq else ""
        )


def check_halves(config: Any, options: HalvesOptions) -> None:
    least = 4 if options.fairseq else 2
    if config.d_model % 2 or config.d_model < least:
        raise ValueError(f"sinusoidal_halves needs an even d_model of at least {least}, got {config.d_model}")


def check_rotary(config: Any, options: RotaryOptions) -> None:
    head_dim = config.head_dim
    if head_dim % 2:
        raise ValueError(
            f"rotary positions turn pairs of dimensions, so head_dim = d_model / n_heads must be "
            f"even, got {head_dim}; change d_model or n_heads"
        )
    rotary_dims(head_dim, options.rotary_dim, options.rotary_pct)
    if options.scaling is not None:
        check_scaling(RopeScaling.model_validate(options.scaling))
