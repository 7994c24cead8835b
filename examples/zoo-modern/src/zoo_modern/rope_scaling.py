"""Rotary scaling: the frequency tables that stretch a rotary model's context.

Each kind changes the inverse frequencies theta_i = base^(-2i/r) of ``Rotary``, as the
released checkpoints that use it were trained (and as transformers computes them):

- ``linear`` (position interpolation, Chen et al. 2023): every frequency / factor;
- ``dynamic`` (dynamic NTK): the base grows with the longest position seen in the call,
  base * (factor * L / L0 - (factor - 1))^(r / (r - 2)) for L > L0; below L0 unchanged
  (keys cached before the base grew keep their angles, as in transformers; a model
  read from Hugging Face has max_seq_len = L0, so its base grows only past max_seq_len,
  where generation warns);
- ``yarn`` (Peng et al. 2023): low frequencies interpolated, high ones kept, a linear
  ramp between (beta_fast / beta_slow rotations), and cos/sin scaled by an attention
  factor (0.1 ln(factor) + 1 unless given);
- ``llama3`` (Llama 3.1): wavelengths above L0 / low_freq_factor divided by factor,
  below L0 / high_freq_factor kept, smoothly blended between (no blend where the two
  factors are equal, Llama 4 Scout's).

L0 is ``original_max_seq_len``, the context the model was pretrained with.
"""

from __future__ import annotations

import math
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor


class RopeScaling(BaseModel):
    """One rotary scaling: its kind and the numbers that kind reads (others stay unset)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    kind: Literal["linear", "dynamic", "yarn", "llama3"] = Field(description="how the frequencies are scaled")
    factor: float = Field(gt=0.0, le=1e6, description="how many times longer the context is meant to be")
    original_max_seq_len: int | None = Field(
        None, gt=0, description="L0: the pretraining context (dynamic, yarn, llama3 need it)"
    )
    low_freq_factor: float | None = Field(None, gt=0.0, description="llama3: wavelengths above L0 / this are scaled")
    high_freq_factor: float | None = Field(None, gt=0.0, description="llama3: wavelengths below L0 / this are kept")
    beta_fast: float | None = Field(None, gt=0.0, description="yarn: rotations where the ramp starts (default 32)")
    beta_slow: float | None = Field(None, gt=0.0, description="yarn: rotations where the ramp ends (default 1)")
    attention_factor: float | None = Field(None, gt=0.0, description="yarn: cos/sin scale (default from factor)")
    truncate: bool | None = Field(None, description="yarn: round the ramp's ends to whole dimensions (default true)")


def check_scaling(scaling: RopeScaling) -> None:
    """Refuse a scaling that lacks the numbers its kind reads."""
    needs = {
        "linear": (),
        "dynamic": ("original_max_seq_len",),
        "yarn": ("original_max_seq_len",),
        "llama3": ("original_max_seq_len", "low_freq_factor", "high_freq_factor"),
    }[scaling.kind]
    missing = [name for name in needs if getattr(scaling, name) is None]
    if missing:
        raise ValueError(f"rotary scaling {scaling.kind!r} needs {', '.join(missing)}; add it to position.scaling")


def default_frequencies(dims: int, base: float | Tensor, device: torch.device | None = None) -> Tensor:
    """theta_i = base^(-2i/dims), (dims/2,), float32."""
    i = torch.arange(0, dims, 2, device=device, dtype=torch.float32)
    out: Tensor = 1.0 / base ** (i / dims)
    return out


def scaled_frequencies(dims: int, base: float, scaling: RopeScaling, device: torch.device | None = None) -> Tensor:
    """The inverse frequencies (dims/2,) of a static scaling (all but ``dynamic``)."""
    inv_freq = default_frequencies(dims, base, device)
    if scaling.kind == "linear":
        return inv_freq / scaling.factor
    if scaling.kind == "llama3":
        return llama3(inv_freq, scaling)
    if scaling.kind == "yarn":
        return yarn(inv_freq, dims, base, scaling)
    return inv_freq  # dynamic: scaled per call (``dynamic_base``)


def llama3(inv_freq: Tensor, s: RopeScaling) -> Tensor:
    factor, low, high, context = s.factor, s.low_freq_factor, s.high_freq_factor, s.original_max_seq_len
    assert low is not None and high is not None and context is not None
    wavelen = 2 * math.pi / inv_freq
    scaled = torch.where(wavelen > context / low, inv_freq / factor, inv_freq)
    if high == low:  # no band to blend over (Llama 4 Scout's 1 and 1): scaled above L0 / low, kept below
        return scaled
    smooth = (context / wavelen - low) / (high - low)
    blended = (1 - smooth) * scaled / factor + smooth * scaled
    medium = (wavelen >= context / high) & (wavelen <= context / low)
    return torch.where(medium, blended, scaled)


def yarn(inv_freq: Tensor, dims: int, base: float, s: RopeScaling) -> Tensor:
    context = s.original_max_seq_len
    assert context is not None

    def dim_of(rotations: float) -> float:  # the dimension that turns ``rotations`` times over L0
        return dims * math.log(context / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = dim_of(s.beta_fast or 32), dim_of(s.beta_slow or 1)
    if s.truncate is not False:
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dims - 1)
    if low == high:
        high += 0.001  # no zero-width ramp
    ramp = ((torch.arange(dims // 2, dtype=torch.float32, device=inv_freq.device) - low) / (high - low)).clamp(0, 1)
    keep = 1 - ramp  # 1: extrapolate (keep the frequency), 0: interpolate (divide by factor)
    return inv_freq / s.factor * (1 - keep) + inv_freq * keep


def attention_factor(scaling: RopeScaling | None) -> float:
    """What cos and sin are multiplied by: YaRN's attention factor, else 1."""
    if scaling is None or scaling.kind != "yarn":
        return 1.0
    if scaling.attention_factor is not None:
        return scaling.attention_factor
    return 1.0 if scaling.factor <= 1 else 0.1 * math.log(scaling.factor) + 1.0


def dynamic_base(base: float, dims: int, scaling: RopeScaling, positions: Tensor) -> Tensor:
    """Dynamic NTK's base for a call whose longest position is ``positions.max()``: the
    base itself up to L0, grown beyond (a tensor op, so compiled graphs do not break)."""
    context = scaling.original_max_seq_len
    assert context is not None
    length = torch.clamp(positions.max().float() + 1, min=float(context))
    return base * ((scaling.factor * length / context) - (scaling.factor - 1)) ** (dims / (dims - 2))
