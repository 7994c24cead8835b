"""Position encodings that act inside attention instead of on the embeddings.

- ``rotary`` (RoPE, Su et al. 2021) rotates queries and keys by their positions, so a
  query-key score depends only on how far apart the two tokens are.
- ``alibi`` (Press et al. 2022) adds ``-slope * distance`` to each score, one slope per
  head, and needs no parameters at all.

Neither has a length limit (``max_positions = None``).
"""

from __future__ import annotations

import math
from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor

from zoo import PositionEncoding


class RotaryOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    base: float = Field(10000.0, gt=1.0, description="theta: pair i turns by position * base^(-2i/rotary_dim)")
    rotary_dim: int | None = Field(None, gt=0, description="rotate only the first rotary_dim dims of each head; None: all")
    rotary_pct: float | None = Field(
        None, gt=0.0, le=1.0, description="rotate this fraction of each head (GPT-NeoX's rotary_pct); None: all"
    )


def rotary_dims(head_dim: int, rotary_dim: int | None = None, rotary_pct: float | None = None) -> int:
    """How many dimensions of each head turn: ``rotary_dim``, else ``int(head_dim * rotary_pct)``
    (GPT-NeoX's rounding), else all."""
    if rotary_dim is not None:
        return rotary_dim
    if rotary_pct is not None:
        return int(head_dim * rotary_pct)
    return head_dim


class Rotary(PositionEncoding):
    """Rotates each pair (x_i, x_{i + dk/2}) of q and k by the angle position * theta_i.

    The pairs are split in halves, not interleaved: the layout of LLaMA as Hugging Face
    implements it, so such weights need no permutation. With ``rotary_dim`` < head_dim
    only the first ``rotary_dim`` dimensions turn (pairs split in halves within them)
    and the rest pass through, as in GPT-NeoX (Pythia).
    """

    def __init__(self, head_dim: int, base: float, rotary_dim: int | None = None) -> None:
        super().__init__()
        self.head_dim, self.base = head_dim, base
        self.rotary_dim = rotary_dim or head_dim

    def angles(self, positions: Tensor) -> Tensor:
        """Rotation angles (B|1, S, rotary_dim/2) in float32 for ``positions`` (B|1, S)."""
        i = torch.arange(0, self.rotary_dim, 2, device=positions.device, dtype=torch.float32)
        inv_freq = 1.0 / self.base ** (i / self.rotary_dim)  # (rotary_dim/2,): theta_i
        return positions[..., None].float() * inv_freq  # (B|1, S, rotary_dim/2)

    def rotate(self, q: Tensor, k: Tensor, positions: Tensor) -> tuple[Tensor, Tensor]:
        angles = self.angles(positions)[:, None]  # (B|1, 1, S, rotary_dim/2): the same for every head
        cos, sin = angles.cos(), angles.sin()
        return self._rotate(q, cos, sin), self._rotate(k, cos, sin)

    def _rotate(self, x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
        if self.rotary_dim == self.head_dim:
            return _rotate_pairs(x, cos, sin)
        turned, passed = x.split((self.rotary_dim, self.head_dim - self.rotary_dim), dim=-1)
        return torch.cat((_rotate_pairs(turned, cos, sin), passed), dim=-1)  # (B, H, S, dk)

    def extra_repr(self) -> str:
        partial = f", rotary_dim={self.rotary_dim}" if self.rotary_dim != self.head_dim else ""
        return f"head_dim={self.head_dim}, base={self.base:g}{partial}"


def _rotate_pairs(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """x (B, H, S, dk) with each pair (x1_i, x2_i) turned by its angle, in float32."""
    x1, x2 = x.float().chunk(2, dim=-1)  # (B, H, S, dk/2) each
    rotated = torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)  # (B, H, S, dk)
    return rotated.to(x.dtype)


class AlibiOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
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
    """Attention with linear biases: score(i, j) -= slope_h * |i - j|.

    The bias depends on slot distances only, so it ignores ``positions`` (left
    padding shifts queries and keys alike). ``slopes`` is a derived buffer, kept in
    float32 and on the model's device, so the bias is built where attention runs.
    """

    def __init__(self, n_heads: int, max_bias: float) -> None:
        super().__init__()
        self.n_heads, self.max_bias = n_heads, max_bias
        self.register_buffer("slopes", torch.tensor(alibi_slopes(n_heads, max_bias)), persistent=False)

    def reset_buffers(self) -> None:
        """Refill ``slopes`` after materialising from the meta device."""
        self.slopes = torch.tensor(alibi_slopes(self.n_heads, self.max_bias), device=self.slopes.device)

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


def rotary(builder: Any, options: RotaryOptions) -> PositionEncoding:
    """Rotary positions (RoPE) on queries and keys: scores depend on relative position."""
    return Rotary(builder.config.head_dim, options.base, rotary_dims(builder.config.head_dim, options.rotary_dim, options.rotary_pct))


def check_rotary(config: Any, options: RotaryOptions) -> None:
    head_dim = config.head_dim
    if options.rotary_dim is not None and options.rotary_pct is not None:
        raise ValueError("position: set rotary_dim or rotary_pct, not both (they say the same thing)")
    turned = rotary_dims(head_dim, options.rotary_dim, options.rotary_pct)
    if options.rotary_dim is None and options.rotary_pct is None and head_dim % 2:
        raise ValueError(
            f"rotary positions turn pairs of dimensions, so head_dim = d_model / n_heads must be "
            f"even, got {head_dim}; change d_model or n_heads"
        )
    if turned % 2 or not 2 <= turned <= head_dim:
        raise ValueError(
            f"position: rotary turns {turned} of head_dim={head_dim} dimensions (rotary_dim="
            f"{options.rotary_dim}, rotary_pct={options.rotary_pct}); it must be an even number from 2 "
            f"to head_dim (pairs of the first dimensions of each head)"
        )


def alibi(builder: Any, options: AlibiOptions) -> PositionEncoding:
    """ALiBi: a per-head linear penalty on query-key distance; no parameters, any length."""
    return ALiBi(builder.config.n_heads, options.max_bias)
