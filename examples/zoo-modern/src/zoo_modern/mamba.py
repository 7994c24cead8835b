"""Mamba's selective state-space mixer (S6) in place of attention (transformers' ``MambaMixer``;
with ``bcdt_norm``, Falcon-Mamba's; with learned scales, ``bcdt_weights``, Jamba's).

``in_proj`` makes two streams from x, the scan's input and a gate z (``expand * d`` each).
The input passes a causal depthwise convolution of ``conv_kernel`` positions and a SiLU;
``x_proj`` then reads from it a low-rank time step (``dt_rank``) and B and C (``d_state``
each), ``dt_proj`` lifts the time step to one per channel. Each channel c runs its own
recurrence over a ``d_state`` state:

    h_t = exp(dt_t * A_c) * h_{t-1} + dt_t * B_t * x_t,    y_t = h_t . C_t + D_c * x_t

with ``A = -exp(A_log)`` (c, n) and ``dt = softplus(dt_proj(...))``; the output is
``out_proj(y * silu(z))``. Falcon-Mamba RMS-normalises the time step, B and C (no weights,
``bcdt_eps``) before using them. The scan runs position by position in float32, as
transformers' own torch path does.

Decoding keeps per layer the convolution's last ``conv_kernel - 1`` inputs (``cache_window``)
and the state (``LayerCache.state``, (B, expand * d, d_state)). A padded position adds
nothing to either: its convolution input and output are zeroed, and so is its time step.
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import AttentionContext, RegisterComponent, hook_point, residual_output
from zoo_modern.mamba2 import causal_conv


class MambaOptions(BaseModel):
    """The mixer's sizes and switches, by transformers' ``MambaConfig`` where it has one."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    d_state: int = Field(16, gt=0, description="the state's size per channel (state_size)")
    expand: int = Field(2, gt=0, description="the scan's width over d_model")
    conv_kernel: int = Field(4, ge=2, description="positions the causal convolution reads, its own included")
    dt_rank: int | None = Field(None, gt=0, description="the time step's low rank (time_step_rank; default d / 16)")
    conv_bias: bool = Field(True, description="bias on the convolution (use_conv_bias)")
    proj_bias: bool | None = Field(None, description="bias on in_proj and out_proj (default: the config's bias)")
    bcdt_norm: bool = Field(False, description="RMS-normalise B, C and the time step, without weights (Falcon-Mamba)")
    bcdt_eps: float = Field(1e-6, gt=0, description="that norm's epsilon (mixer_rms_eps)")
    bcdt_weights: bool = Field(False, description="learned scales on those norms, RMSNorms (Jamba's b/c/dt_layernorm)")
    kernel: Literal["sdpa", "eager"] | None = Field(
        None, description="unused: a scan has no attention kernel (taken as every attention's, for from_hf)"
    )


def selective_scan(x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor, state: Tensor | None) -> tuple[Tensor, Tensor]:  # fmt: skip
    """The recurrence without its D skip: outputs (B, S, C) and the state after the last
    position (B, C, N), for x and time steps dt (B, S, C), A (C, N), and B, C (B, S, N);
    ``state`` the state before the first position (None: zero). In float32."""
    x, dt, b, c = x.float(), dt.float(), b.float(), c.float()
    state = x.new_zeros(x.shape[0], *a.shape) if state is None else state.float()
    decay = torch.exp(dt[..., None] * a)  # (B, S, C, N)
    added = (dt * x)[..., None] * b[:, :, None]  # (B, S, C, N)
    if x.is_meta:  # shapes only (``zoo info`` at a 1M-token context): the same ops, all positions at once
        states = decay * added
        return torch.einsum("bscn,bsn->bsc", states, c), states[:, -1]
    outputs = []
    for t in range(x.shape[1]):
        state = decay[:, t] * state + added[:, t]
        outputs.append(torch.einsum("bcn,bn->bc", state, c[:, t]))
    return torch.stack(outputs, dim=1), state


def weightless_rms(x: Tensor, eps: float) -> Tensor:
    """x / rms(x) over the last dimension, in float32 (Falcon-Mamba's norms of B, C and dt)."""
    out = x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + eps)
    return out.to(x.dtype)


class Mamba(nn.Module):
    """Mamba's selective state-space mixer: out_proj(s6(conv(x)) * silu(z))."""

    attends: ClassVar[bool] = False  # a token mixer without scores: no attention hook points
    Options = MambaOptions

    def __init__(
        self,
        d_model: int,
        d_state: int = 16,
        expand: int = 2,
        conv_kernel: int = 4,
        dt_rank: int | None = None,
        conv_bias: bool = True,
        proj_bias: bool | None = None,
        bcdt_norm: bool = False,
        bcdt_eps: float = 1e-6,
        bcdt_weights: bool = False,
        bias: bool = False,
        dropout: float = 0.0,
        kernel: str | None = None,
    ) -> None:
        """``expand``: the scan's width over d_model; ``d_state``: the state's size per
        channel; ``dt_rank``: the time step's rank (default ceil(d / 16)); ``proj_bias``:
        biases on in_proj and out_proj (default: the config's); ``bcdt_norm``: Falcon-Mamba's norms
        (``bcdt_weights``: with learned scales, Jamba's)."""
        super().__init__()
        if conv_kernel < 2 or min(d_state, expand) < 1:
            raise ValueError("attention 'mamba': conv_kernel >= 2 and d_state, expand >= 1")
        inner, self.dt_rank = expand * d_model, dt_rank or math.ceil(d_model / 16)
        self.d_model, self.inner, self.d_state = d_model, inner, d_state
        self.bcdt_eps = bcdt_eps if bcdt_norm else None
        self.cache_window = conv_kernel  # the model's cache keeps the last conv_kernel - 1 inputs
        bias = bias if proj_bias is None else proj_bias
        self.in_proj = nn.Linear(d_model, 2 * inner, bias=bias)  # rows [x | z]
        self.conv = nn.Conv1d(inner, inner, conv_kernel, groups=inner, bias=conv_bias)
        self.conv_act = hook_point(nn.SiLU(), "hook_conv")  # (B, S, inner): x after the convolution
        self.x_proj = nn.Linear(inner, self.dt_rank + 2 * d_state, bias=False)  # rows [dt | B | C]
        self.dt_proj = nn.Linear(self.dt_rank, inner)
        self.A_log = nn.Parameter(torch.empty(inner, d_state))
        self.D = nn.Parameter(torch.empty(inner))
        self.scan_out = hook_point(nn.Identity(), "hook_scan")  # (B, S, inner): y with D's skip, before the gate
        self.out_proj = residual_output(nn.Linear(inner, d_model, bias=bias))
        self.resid_drop = nn.Dropout(dropout)
        if bcdt_weights and not bcdt_norm:
            raise ValueError("attention 'mamba': bcdt_weights scale the norms bcdt_norm turns on; set both")
        sizes = (self.dt_rank, d_state, d_state) if bcdt_weights else ()
        self.bcdt_scales = nn.ParameterList(nn.Parameter(torch.ones(n)) for n in sizes)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Mamba's draws: A = -(1 .. d_state) per channel, D = 1, time steps log-uniform in [0.001, 0.1]."""
        if self.A_log.is_meta:  # nothing to draw (and torch._dynamo unimported); init redraws once materialised
            return
        with torch.no_grad():
            self.A_log.copy_(torch.log(torch.arange(1, self.d_state + 1, dtype=torch.float32)).expand_as(self.A_log))
            self.D.fill_(1.0)
            dt = torch.exp(torch.rand(self.inner) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(bias) = dt
            for scale in self.bcdt_scales:
                scale.fill_(1.0)

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        seq = x.shape[1]
        xs, z = self.in_proj(x).chunk(2, dim=-1)
        real = None if ctx.padding is None else ctx.padding[:, -seq:, None].to(x.dtype)  # (B, S, 1)
        xs = self.conv_act(causal_conv(xs if real is None else xs * real, self.conv, ctx))
        xs = xs if real is None else xs * real
        low, b, c = torch.split(self.x_proj(xs), [self.dt_rank, self.d_state, self.d_state], dim=-1)
        if self.bcdt_eps is not None:
            low, b, c = (weightless_rms(t, self.bcdt_eps) for t in (low, b, c))
            if len(self.bcdt_scales):
                low, b, c = (t * scale for t, scale in zip((low, b, c), self.bcdt_scales, strict=True))
        steps = F.softplus(F.linear(low, self.dt_proj.weight).float() + self.dt_proj.bias.float())  # (B, S, inner)
        steps = steps if real is None else steps * real.float()  # a padded position leaves the state as it was
        state = ctx.cache.state if ctx.cache is not None else None
        y, state = selective_scan(xs, steps, -torch.exp(self.A_log.float()), b, c, state)
        if ctx.cache is not None:
            ctx.cache.state = state
        y = self.scan_out(y + xs.float() * self.D.float())
        out: Tensor = self.resid_drop(self.out_proj((y * F.silu(z.float())).to(x.dtype)))
        return out

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, inner={self.inner}, d_state={self.d_state}, dt_rank={self.dt_rank}, "
            f"conv_kernel={self.cache_window}, bcdt_norm={self.bcdt_eps is not None}"
        )


def check_mamba(config: Any, options: Any) -> None:
    """A decoder-only model: the scan is causal and reads no encoder memory."""
    if config.architecture == "encoder_decoder":
        raise ValueError(
            "attention 'mamba' scans a causal past, for decoder-only models; an 'encoder_decoder' model "
            "would use it for its bidirectional encoder and cross-attention too: use 'sdpa' there"
        )


def register_components(register: RegisterComponent) -> None:
    """Register the mixer (called from ``zoo_modern.plugin``)."""
    register("attention", "mamba", Mamba, check=check_mamba)
