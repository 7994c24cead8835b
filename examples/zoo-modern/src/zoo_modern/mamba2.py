"""Mamba-2's state-space mixer in place of attention (transformers' ``Mamba2Mixer``),
``mlp = "none"`` for the layers that have no MLP, and ``attention = "none"`` for those that
mix no tokens (Nemotron-H's MLP layers, whose ``relu2`` is in ``zoo_modern.activations``).

``in_proj`` makes five streams from x: a gate z and the scan's input x (``expand * d``
each, in heads of ``head_dim``), B and C (``d_state`` per group of heads) and a time step
dt per head. x, B and C pass a causal depthwise convolution of ``conv_kernel`` positions
and a SiLU. Each head h then runs the selective scan (state-space duality, SSD) over a
(head_dim, d_state) state S:

    S_t = exp(dt_t * A_h) * S_{t-1} + dt_t * x_t B_t^T,    y_t = S_t C_t + D_h * x_t

with ``A_h = -exp(A_log_h)`` (so the state decays) and ``dt_t = softplus(dt_t + dt_bias_h)``.
The output is ``out_proj(rmsnorm(y * silu(z)))``, the RMSNorm taken over each group's
channels. The scan here runs chunk by chunk (``chunk_size`` positions): inside a chunk in
its quadratic form (scores C_t . B_s times the decay between s and t), across chunks by
the recurrence, so a sequence of T costs O(T * chunk_size) and a decoding step O(1).

Decoding keeps two things per layer in its cache: the last ``conv_kernel - 1`` inputs of
the convolution (as ``short_conv`` does, ``cache_window``) and the scan's state
(``LayerCache.state``, (B, heads, head_dim, d_state)). A padded position adds nothing to
either: its convolution input, its x, B and C and its time step are zeroed (transformers
leaves dt there, which only matters for padding after real tokens).
"""

from __future__ import annotations

import math
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import SCALES_WITH, AttentionContext, RegisterComponent, hook_point, residual_output


class Mamba2Options(BaseModel):
    """The mixer's sizes and switches, by transformers' ``Mamba2Config`` where it has one."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    head_dim: int | None = Field(
        None, gt=0, description="width of each head (default d_model / n_heads)", json_schema_extra={SCALES_WITH: "head_dim"}
    )  # fmt: skip
    d_state: int = Field(128, gt=0, description="the state's size per channel (state_size)")
    expand: int = Field(2, gt=0, description="the scan's width over d_model")
    d_inner: int | None = Field(
        None, gt=0, description="the scan's width itself (default expand * d_model; Nemotron-H's)", json_schema_extra={SCALES_WITH: "d_model"}
    )  # fmt: skip
    n_groups: int = Field(
        1, gt=0, description="groups of heads that share B and C", json_schema_extra={SCALES_WITH: "n_heads"}
    )  # fmt: skip
    conv_kernel: int = Field(4, ge=2, description="positions the causal convolution reads, its own included")
    chunk_size: int = Field(256, gt=0, description="positions the scan takes at once (the same sums)")
    conv_bias: bool = Field(True, description="bias on the convolution (use_conv_bias)")
    proj_bias: bool | None = Field(None, description="bias on in_proj and out_proj (default: the config's bias)")
    kernel: Literal["sdpa", "eager"] | None = Field(
        None, description="unused: a scan has no attention kernel (taken as every attention's, for from_hf)"
    )


class GatedRMSNorm(nn.Module):
    """``weight * rmsnorm(y * silu(z))``, the RMS over each group of ``group`` channels."""

    def __init__(self, width: int, group: int, eps: float) -> None:
        super().__init__()
        self.group, self.eps = group, eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        gated = y.float() * F.silu(z.float())
        groups = gated.view(*gated.shape[:-1], -1, self.group)  # (..., n_groups, group)
        normed = groups * torch.rsqrt(groups.pow(2).mean(-1, keepdim=True) + self.eps)
        out: Tensor = self.weight * normed.flatten(-2).to(y.dtype)
        return out

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def chunk_terms(x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Each chunk's own part, for K chunks of L positions at once: x (B, K, L, H, P), dt
    (B, K, L, H), B and C (B, K, L, H, N). Returns what a chunk's inputs add to its outputs
    (B, K, L, H, P) and to the state at its end (B, K, H, P, N), the log decay from its start
    to each position (B, K, L, H) and its whole decay (B, K, H, 1, 1)."""
    length = x.shape[2]
    decay = torch.cumsum(dt * a, dim=2)  # log of the decay from the chunk's start to t
    gaps = decay[:, :, :, None] - decay[:, :, None]  # (B, K, L_t, L_s, H): log decay from s to t
    later = torch.ones(length, length, dtype=torch.bool, device=x.device).triu(1)
    weights = torch.exp(gaps.masked_fill(later[:, :, None], -math.inf))  # 0 where s > t
    scores = torch.einsum("bkthn,bkshn->bktsh", c, b) * weights * dt[:, :, None]
    within = torch.einsum("bktsh,bkshp->bkthp", scores, x)
    rest = torch.exp(decay[:, :, -1:] - decay) * dt  # (B, K, L, H): each input's weight at the chunk's end
    added = torch.einsum("bksh,bkshn,bkshp->bkhpn", rest, b, x)
    return within, added, decay, torch.exp(decay[:, :, -1])[..., None, None]


def chunk_states(state: Tensor, whole: Tensor, added: Tensor) -> Tensor:
    """The states at the ends of K chunks (B, K, H, P, N), S_k = whole_k * S_{k-1} + added_k
    from ``state`` (B, H, P, N), as a scan in log2(K) steps (Hillis and Steele's): after the
    step of ``span``, entry k holds chunks k - 2 * span + 1 .. k combined (their decay and
    what they add), so a million positions take a dozen steps rather than a loop per chunk."""
    added = torch.cat([added[:, :1] + whole[:, :1] * state[:, None], added[:, 1:]], dim=1)
    span = 1
    while span < added.shape[1]:
        added = torch.cat([added[:, :span], added[:, span:] + whole[:, span:] * added[:, :-span]], dim=1)
        whole = torch.cat([whole[:, :span], whole[:, span:] * whole[:, :-span]], dim=1)
        span *= 2
    return added


def ssd_scan(
    x: Tensor, dt: Tensor, a: Tensor, b: Tensor, c: Tensor, chunk: int, state: Tensor | None
) -> tuple[Tensor, Tensor]:
    """The selective scan without its D skip: outputs (B, S, H, P) and the state after the
    last position (B, H, P, N), for x (B, S, H, P), time steps dt (B, S, H), A (H,), and
    B, C (B, S, H, N) per head; ``state`` the state before the first position (None: zero).
    All in float32, as transformers computes it. The chunks' own parts are computed for all
    full chunks at once (and the last, shorter one apart), then the states at their ends by
    ``chunk_states``."""
    batch, seq, heads, width = x.shape
    x, dt, b, c = x.float(), dt.float(), b.float(), c.float()
    state = x.new_zeros(batch, heads, width, b.shape[-1]) if state is None else state.float()
    full = seq - seq % chunk
    spans = [(0, full, chunk)] if full else []
    spans += [(full, seq, seq - full)] if seq > full else []
    outputs = []
    for begin, stop, length in spans:
        xk, dtk, bk, ck = (t[:, begin:stop].reshape(batch, -1, length, *t.shape[2:]) for t in (x, dt, b, c))
        within, added, decay, whole = chunk_terms(xk, dtk, a, bk, ck)
        ends = chunk_states(state, whole, added)
        before = torch.cat([state[:, None], ends[:, :-1]], dim=1)  # the state at each chunk's start
        state = ends[:, -1]
        carried = torch.einsum("bkthn,bkhpn->bkthp", ck, before)
        outputs.append((within + carried * torch.exp(decay)[..., None]).flatten(1, 2))
    return torch.cat(outputs, dim=1), state


def causal_conv(xs: Tensor, conv: nn.Conv1d, ctx: AttentionContext) -> Tensor:
    """``conv`` (depthwise) over (B, S, C) causally, after the inputs the layer's cache keeps
    (its last kernel - 1; the mixer sets ``cache_window`` to the kernel), zeros before the first."""
    seq, kernel = xs.shape[1], conv.kernel_size[0]
    past = xs
    if ctx.cache is not None:  # the last kernel - 1 inputs before these, then these
        stored, _ = ctx.cache.update(xs[:, None], xs[:, None, :, :0])  # (B, 1, kept + S, C), no values
        past = stored[:, 0]
    window = seq + kernel - 1
    past = past[:, -window:].transpose(1, 2)
    past = F.pad(past, (window - past.shape[-1], 0))  # zeros before the first position
    out: Tensor = F.conv1d(past, conv.weight, conv.bias, groups=conv.in_channels).transpose(1, 2)
    return out


class Mamba2(nn.Module):
    """Mamba-2's selective state-space mixer: out_proj(norm(ssd(conv(x, B, C), dt) * silu(z)))."""

    attends: ClassVar[bool] = False  # a token mixer without scores: no attention hook points
    Options = Mamba2Options

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        head_dim: int | None = None,
        norm_eps: float = 1e-5,
        d_state: int = 128,
        expand: int = 2,
        d_inner: int | None = None,
        n_groups: int = 1,
        conv_kernel: int = 4,
        chunk_size: int = 256,
        conv_bias: bool = True,
        proj_bias: bool | None = None,
        bias: bool = False,
        dropout: float = 0.0,
        kernel: str | None = None,
    ) -> None:
        """``head_dim``: each head's width (the config's); ``expand``: the scan's width over
        d_model (``d_inner``: the width itself); ``d_state``: the state's size per channel; ``n_groups``: groups of heads
        sharing B and C; ``proj_bias``: biases on in_proj and out_proj (default: the config's)."""
        super().__init__()
        inner, head_dim = d_inner or expand * d_model, head_dim or d_model // n_heads
        for ok, what in (
            (min(d_state, expand, n_groups, chunk_size) >= 1, "d_state, expand, n_groups and chunk_size are >= 1"),
            (conv_kernel >= 2, f"conv_kernel={conv_kernel}: the convolution reads 2 positions or more"),
            (inner % head_dim == 0, f"the scan's width {inner} is a whole number of heads of {head_dim}"),
            (inner % head_dim == 0 and (inner // head_dim) % n_groups == 0, f"n_groups={n_groups} divides the heads"),
        ):
            if not ok:
                raise ValueError(f"attention 'mamba2': {what}")
        self.d_model, self.inner, self.head_dim, self.heads = d_model, inner, head_dim, inner // head_dim
        self.d_state, self.n_groups, self.chunk_size = d_state, n_groups, chunk_size
        self.conv_dim = inner + 2 * n_groups * d_state  # x, B and C are convolved
        self.cache_window = conv_kernel  # the model's cache keeps the last conv_kernel - 1 inputs
        bias = bias if proj_bias is None else proj_bias
        self.in_proj = nn.Linear(d_model, inner + self.conv_dim + self.heads, bias=bias)  # rows [z | x | B | C | dt]
        self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, conv_kernel, groups=self.conv_dim, bias=conv_bias)
        self.conv_act = hook_point(nn.SiLU(), "hook_conv")  # (B, S, conv_dim): x, B and C after the convolution
        self.A_log = nn.Parameter(torch.empty(self.heads))
        self.D = nn.Parameter(torch.empty(self.heads))
        self.dt_bias = nn.Parameter(torch.empty(self.heads))
        self.scan_out = hook_point(nn.Identity(), "hook_scan")  # (B, S, heads, head_dim): y with D's skip
        self.norm = GatedRMSNorm(inner, inner // n_groups, norm_eps)
        self.out_proj = residual_output(nn.Linear(inner, d_model, bias=bias))
        self.resid_drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Mamba's draws: A = -(1 .. heads), D = 1, time steps log-uniform in [0.001, 0.1]."""
        if self.A_log.is_meta:  # nothing to draw (and torch._dynamo unimported); init redraws once materialised
            return
        with torch.no_grad():
            self.A_log.copy_(torch.log(torch.arange(1, self.heads + 1, dtype=torch.float32)))
            self.D.fill_(1.0)
            dt = torch.exp(torch.rand(self.heads) * (math.log(0.1) - math.log(0.001)) + math.log(0.001))
            self.dt_bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # softplus(dt_bias) = dt

    def convolve(self, xbc: Tensor, ctx: AttentionContext) -> Tensor:
        """The causal depthwise convolution of (B, S, conv_dim) after the cached inputs, then SiLU."""
        out: Tensor = self.conv_act(causal_conv(xbc, self.conv, ctx))
        return out

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        batch, seq, _ = x.shape
        z, xbc, dt = torch.split(self.in_proj(x), [self.inner, self.conv_dim, self.heads], dim=-1)
        real = None if ctx.padding is None else ctx.padding[:, -seq:, None].to(x.dtype)  # (B, S, 1)
        xbc = self.convolve(xbc if real is None else xbc * real, ctx)
        xbc = xbc if real is None else xbc * real
        xs, b, c = torch.split(xbc, [self.inner, self.n_groups * self.d_state, self.n_groups * self.d_state], dim=-1)
        steps = F.softplus(dt.float() + self.dt_bias.float())  # (B, S, heads)
        steps = steps if real is None else steps * real.float()  # a padded position leaves the state as it was
        per_group = self.heads // self.n_groups
        b, c = (t.view(batch, seq, self.n_groups, self.d_state).repeat_interleave(per_group, dim=2) for t in (b, c))
        xs = xs.reshape(batch, seq, self.heads, self.head_dim)  # (B, S, heads, head_dim)
        state = ctx.cache.state if ctx.cache is not None else None
        y, state = ssd_scan(xs, steps, -torch.exp(self.A_log.float()), b, c, self.chunk_size, state)
        if ctx.cache is not None:
            ctx.cache.state = state
        y = self.scan_out(y + xs.float() * self.D.float()[:, None])
        out: Tensor = self.resid_drop(self.out_proj(self.norm(y.flatten(-2), z).to(x.dtype)))  # normed in float32
        return out

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, heads={self.heads}x{self.head_dim}, d_state={self.d_state}, "
            f"n_groups={self.n_groups}, conv_kernel={self.cache_window}, chunk_size={self.chunk_size}"
        )


class NoMLP(nn.Module):
    """No MLP: the layer adds nothing after its mixer (Mamba-2's layers), 0 * x."""

    def forward(self, x: Tensor) -> Tensor:
        return x * 0  # the zero map of x: a norm before it has a zero gradient, not none


class NoMixer(nn.Module):
    """No token mixer: the layer adds nothing before its MLP (Nemotron-H's MLP-only layers), 0 * x."""

    attends: ClassVar[bool] = False  # no scores, and no output projection: no attention hook points
    cache_window: ClassVar[int] = 1  # the cache counts positions and keeps none

    def __init__(self, d_model: int, kernel: str | None = None) -> None:
        super().__init__()
        del d_model, kernel  # ``kernel``: taken as every attention's, for from_hf

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        if ctx.cache is not None:  # the model's offset: positions seen, none kept
            ctx.cache.update(x[:, None, :, :0], x[:, None, :, :0])
        return x * 0  # the zero map of x: a norm before it has a zero gradient, not none


def check_mamba2(config: Any, options: Any) -> None:
    """A decoder-only model: the scan is causal and reads no encoder memory."""
    if config.architecture == "encoder_decoder":
        raise ValueError(
            "attention 'mamba2' scans a causal past, for decoder-only models; an 'encoder_decoder' model "
            "would use it for its bidirectional encoder and cross-attention too: use 'sdpa' there"
        )


def check_no_mixer(config: Any, options: Any) -> None:
    """A decoder-only model: an encoder-decoder's cross-attention is its attention too."""
    if config.architecture == "encoder_decoder":
        raise ValueError(
            "attention 'none' mixes no tokens, for the MLP-only layers of decoder-only models; an "
            "'encoder_decoder' model would lose its cross-attention too: use 'sdpa' there"
        )


def register_components(register: RegisterComponent) -> None:
    """Register the mixer, the empty MLP and the empty mixer (called from ``zoo_modern.plugin``)."""
    register("attention", "mamba2", Mamba2, check=check_mamba2)
    register("mlp", "none", NoMLP)
    register("attention", "none", NoMixer, check=check_no_mixer)
