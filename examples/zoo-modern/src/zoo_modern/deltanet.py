"""The gated delta rule (Yang et al. 2024, "Gated Delta Networks") in place of attention, as
Qwen3-Next's linear-attention layers use it (transformers' ``Qwen3NextGatedDeltaNet``; Qwen3.5's
and OLMo Hybrid's are the same mixer with its projections stored apart).

``in_proj`` makes six streams from x: queries and keys (``n_k_heads`` heads of ``k_head_dim``),
values and an output gate z (``n_v_heads`` heads of ``v_head_dim``), and per value head a
write strength b and a decay a. q, k and v pass a causal depthwise convolution of
``conv_kernel`` positions and a SiLU; q and k are L2-normalised per head, q scaled by
1 / sqrt(k_head_dim), and each key head serves ``n_v_heads / n_k_heads`` value heads. Each
value head then updates a (k_head_dim, v_head_dim) state S, a map from keys to values:

    S_t = g_t S_{t-1} + k_t beta_t (v_t - g_t S_{t-1}^T k_t)^T,    o_t = S_t^T q_t

with the write strength ``beta_t = sigmoid(b_t)`` (twice that with ``negative_eigenvalues``, OLMo
Hybrid's: a write may overshoot, flipping the state along k) and the decay ``g_t = exp(-exp(A_log) *
softplus(a_t + dt_bias))``: the state forgets by g_t, then replaces what it recalls for k_t by
v_t, beta_t of the way (the delta rule). The output is ``out_proj(rmsnorm(o) * silu(z))``, the
RMSNorm over each value head (scale ``v_head_dim`` wide, shared by the heads).

``delta_chunks`` runs a sequence chunk by chunk (``chunk_size`` positions): inside a chunk the
writes solve one unit-triangular system (each write sees the earlier ones' corrections), across
chunks the state carries; ``delta_step`` is the recurrence for one position, what decoding runs.
Both compute in float32, as transformers does.

Decoding keeps two things per layer in its cache, as ``mamba2`` does: the last ``conv_kernel - 1``
inputs of the convolution (``cache_window``) and the state (``LayerCache.state``, (B, n_v_heads,
k_head_dim, v_head_dim)). A padded position changes neither: its convolution input is zeroed and
its beta and decay are 0 and 1 (transformers zeroes its input, the same for left padding).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import AttentionContext, RegisterComponent, hook_point, residual_output
from zoo_modern.mamba2 import causal_conv


class GatedDeltaNetOptions(BaseModel):
    """The mixer's sizes, by transformers' ``Qwen3NextConfig`` names (``linear_*``)."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    n_k_heads: int | None = Field(None, gt=0, description="query/key heads (default n_heads; linear_num_key_heads)")
    n_v_heads: int | None = Field(None, gt=0, description="value heads, a multiple of n_k_heads (default n_k_heads)")
    k_head_dim: int | None = Field(None, gt=0, description="width of a query/key head (default d_model / n_heads)")
    v_head_dim: int | None = Field(None, gt=0, description="width of a value head (default k_head_dim)")
    conv_kernel: int = Field(4, ge=2, description="positions the causal convolution reads, its own included")
    chunk_size: int = Field(64, gt=0, description="positions the chunked form takes at once (the same sums)")
    negative_eigenvalues: bool = Field(
        False, description="beta = 2 sigmoid(b), in [0, 2]: a write may flip the state (OLMo Hybrid's allow_neg_eigval)"
    )
    gate_norm_eps: float | None = Field(
        None, gt=0.0, description="epsilon of the gated output norm (default: the config's norm_eps; OLMo Hybrid 1e-5)"
    )
    kernel: Literal["sdpa", "eager"] | None = Field(
        None, description="unused: a recurrence has no attention kernel (taken as every attention's, for from_hf)"
    )


def head_sizes(d_model: int, n_heads: int, options: Mapping[str, Any]) -> dict[str, int]:
    """The four head sizes ``options`` (the mixer's) give a model of ``d_model`` and ``n_heads``,
    defaults filled in: n_heads query/key heads of d_model / n_heads, as many value heads as wide."""
    n_k, dk = options.get("n_k_heads") or n_heads, options.get("k_head_dim") or d_model // n_heads
    return {"n_k_heads": n_k, "n_v_heads": options.get("n_v_heads") or n_k, "k_head_dim": dk, "v_head_dim": options.get("v_head_dim") or dk}  # fmt: skip


class HeadGatedRMSNorm(nn.Module):
    """``weight * rmsnorm(y) * silu(z)`` over the last dim (one value head), in float32:
    Qwen3-Next's order, the norm before the gate (Mamba-2's gates first)."""

    def __init__(self, width: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(width))

    def forward(self, y: Tensor, z: Tensor) -> Tensor:
        h = y.float()
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        out: Tensor = (self.weight.float() * h * F.silu(z.float())).to(y.dtype)
        return out

    def reset_parameters(self) -> None:
        nn.init.ones_(self.weight)


def l2_normed(x: Tensor, eps: float = 1e-6) -> Tensor:
    """x / sqrt(sum(x^2) + eps) over the last dim (the FLA kernels' form)."""
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + eps)


def delta_step(q: Tensor, k: Tensor, v: Tensor, log_g: Tensor, beta: Tensor, state: Tensor) -> tuple[Tensor, Tensor]:
    """One position of the gated delta rule: q, k (B, H, dk), v (B, H, dv), log decay and
    beta (B, H), the state (B, H, dk, dv) -> the output (B, H, dv) and the next state."""
    state = state * log_g.exp()[..., None, None]
    recalled = torch.einsum("bhk,bhkv->bhv", k, state)
    written = (v - recalled) * beta[..., None]
    state = state + k[..., :, None] * written[..., None, :]
    return torch.einsum("bhk,bhkv->bhv", q, state), state


def delta_chunks(
    q: Tensor, k: Tensor, v: Tensor, log_g: Tensor, beta: Tensor, chunk: int, state: Tensor
) -> tuple[Tensor, Tensor]:
    """The gated delta rule over (B, S, H, d) q, k, v and (B, S, H) log decays and betas, a chunk
    at a time, from ``state`` (B, H, dk, dv): the outputs (B, S, H, dv) and the final state.

    Within a chunk, with G_t the summed log decay from its start to t, the writes u_t (S_t's
    correction, beta_t times the miss) satisfy ``u_t = beta_t (v_t - e^G_t S0^T k_t -
    sum_{s<t} e^(G_t - G_s) (k_t . k_s) u_s)``: a unit lower-triangular system, solved at once.
    Then ``o_t = e^G_t S0^T q_t + sum_{s<=t} e^(G_t - G_s) (q_t . k_s) u_s``."""
    outputs = []
    for start in range(0, q.shape[1], chunk):
        qs, ks, vs, gs, bs = (t[:, start : start + chunk].transpose(1, 2) for t in (q, k, v, log_g, beta))
        length = qs.shape[2]  # qs (B, H, L, dk), gs and bs (B, H, L)
        decay = gs.cumsum(-1)  # G_t
        later = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
        gaps = (decay[..., :, None] - decay[..., None, :]).masked_fill(later, -torch.inf).exp()  # e^(G_t - G_s), s <= t
        earlier = (ks @ ks.transpose(-1, -2)) * gaps * bs[..., None]  # beta_t e^(G_t - G_s) (k_t . k_s)
        system = earlier.tril(-1) + torch.eye(length, device=q.device)  # only s < t; unit diagonal
        rhs = bs[..., None] * (vs - decay.exp()[..., None] * (ks @ state))  # beta_t (v_t - e^G_t S0^T k_t)
        writes = torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)  # (B, H, L, dv)
        scores = (qs @ ks.transpose(-1, -2)) * gaps
        outputs.append(decay.exp()[..., None] * (qs @ state) + scores @ writes)
        to_end = (decay[..., -1:] - decay).exp()[..., None]  # e^(G_L - G_s)
        state = decay[..., -1].exp()[..., None, None] * state + (ks * to_end).transpose(-1, -2) @ writes
    return torch.cat(outputs, dim=2).transpose(1, 2), state


class GatedDeltaNet(nn.Module):
    """Qwen3-Next's gated DeltaNet mixer: out_proj(norm(delta_rule(conv(q, k, v), a, b)) * silu(z))."""

    attends: ClassVar[bool] = False  # a token mixer without scores: no attention hook points
    Options = GatedDeltaNetOptions

    def __init__(
        self,
        d_model: int,
        n_heads: int,
        n_k_heads: int | None = None,
        n_v_heads: int | None = None,
        k_head_dim: int | None = None,
        v_head_dim: int | None = None,
        conv_kernel: int = 4,
        chunk_size: int = 64,
        negative_eigenvalues: bool = False,
        gate_norm_eps: float | None = None,
        norm_eps: float = 1e-6,
        dropout: float = 0.0,
        kernel: str | None = None,
    ) -> None:
        """Heads of queries/keys (``n_k_heads`` x ``k_head_dim``) and of values (``n_v_heads`` x
        ``v_head_dim``), by default n_heads of d_model / n_heads; ``conv_kernel``: the causal
        convolution's positions; ``chunk_size``: positions the chunked form takes at once;
        ``negative_eigenvalues``: beta in [0, 2]; ``gate_norm_eps``: the output norm's epsilon."""
        super().__init__()
        given = {"n_k_heads": n_k_heads, "n_v_heads": n_v_heads, "k_head_dim": k_head_dim, "v_head_dim": v_head_dim}
        n_k, n_v, dk, dv = head_sizes(d_model, n_heads, given).values()
        if n_v % n_k:
            raise ValueError(f"attention 'gated_deltanet': n_v_heads={n_v} is a multiple of n_k_heads={n_k}")
        self.d_model, self.n_k, self.n_v, self.dk, self.dv = d_model, n_k, n_v, dk, dv
        self.key_dim, self.value_dim, self.chunk_size = n_k * dk, n_v * dv, chunk_size
        self.beta_scale = 2.0 if negative_eigenvalues else 1.0
        self.conv_dim = 2 * self.key_dim + self.value_dim  # q, k and v are convolved
        self.cache_window = conv_kernel  # the model's cache keeps the last conv_kernel - 1 inputs
        self.in_proj = nn.Linear(d_model, self.conv_dim + self.value_dim + 2 * n_v, bias=False)  # [q|k|v|z|b|a]
        self.conv = nn.Conv1d(self.conv_dim, self.conv_dim, conv_kernel, groups=self.conv_dim, bias=False)
        self.conv_act = hook_point(nn.SiLU(), "hook_conv")  # (B, S, conv_dim): q, k and v after the convolution
        self.A_log = nn.Parameter(torch.empty(n_v))
        self.dt_bias = nn.Parameter(torch.empty(n_v))
        self.rule_out = hook_point(nn.Identity(), "hook_scan")  # (B, S, n_v_heads, v_head_dim): o before the norm
        self.norm = HeadGatedRMSNorm(dv, norm_eps if gate_norm_eps is None else gate_norm_eps)
        self.out_proj = residual_output(nn.Linear(self.value_dim, d_model, bias=False))
        self.resid_drop = nn.Dropout(dropout)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Qwen3-Next's draws: A uniform in [0.01, 16] (so log A is finite), dt_bias 1."""
        with torch.no_grad():
            self.A_log.copy_(torch.empty(self.n_v).uniform_(0.01, 16).log())
            self.dt_bias.fill_(1.0)

    def streams(self, x: Tensor, ctx: AttentionContext) -> tuple[Tensor, ...]:
        """q, k (B, S, n_v, dk) normed, scaled and shared out; v, z (B, S, n_v, dv); the log
        decay and beta (B, S, n_v), in float32, a padded position's 0 and 0."""
        batch, seq, _ = x.shape
        sizes = [self.conv_dim, self.value_dim, self.n_v, self.n_v]
        qkv, z, b, a = torch.split(self.in_proj(x), sizes, dim=-1)
        real = None if ctx.padding is None else ctx.padding[:, -seq:, None].to(x.dtype)  # (B, S, 1)
        qkv = self.conv_act(causal_conv(qkv if real is None else qkv * real, self.conv, ctx))
        q, k, v = torch.split(qkv.float(), [self.key_dim, self.key_dim, self.value_dim], dim=-1)
        share = self.n_v // self.n_k  # value heads per key head
        q, k = (l2_normed(t.view(batch, seq, self.n_k, self.dk)).repeat_interleave(share, dim=2) for t in (q, k))
        log_g = -self.A_log.float().exp() * F.softplus(a.float() + self.dt_bias.float())
        beta = torch.sigmoid(b.float()) * self.beta_scale
        if real is not None:  # a padded position leaves the state as it was
            log_g, beta = log_g * real.float(), beta * real.float()
        v = v.view(batch, seq, self.n_v, self.dv)
        return q * self.dk**-0.5, k, v, z.view(batch, seq, self.n_v, self.dv), log_g, beta

    def forward(self, x: Tensor, ctx: AttentionContext) -> Tensor:
        batch, seq, _ = x.shape
        q, k, v, z, log_g, beta = self.streams(x, ctx)
        state = ctx.cache.state if ctx.cache is not None else None
        state = q.new_zeros(batch, self.n_v, self.dk, self.dv) if state is None else state.float()
        if seq == 1:  # a decoding step: the recurrence itself
            o, state = delta_step(q[:, 0], k[:, 0], v[:, 0], log_g[:, 0], beta[:, 0], state)
            o = o[:, None]
        else:
            o, state = delta_chunks(q, k, v, log_g, beta, self.chunk_size, state)
        if ctx.cache is not None:
            ctx.cache.state = state
        y = self.norm(self.rule_out(o), z).flatten(-2).to(x.dtype)  # (B, S, n_v * dv)
        out: Tensor = self.resid_drop(self.out_proj(y))
        return out

    def extra_repr(self) -> str:
        return (
            f"d_model={self.d_model}, k_heads={self.n_k}x{self.dk}, v_heads={self.n_v}x{self.dv}, "
            f"conv_kernel={self.cache_window}, chunk_size={self.chunk_size}"
        )


def check_gated_deltanet(config: Any, options: Any) -> None:
    """A decoder-only model: the recurrence is causal and reads no encoder memory."""
    if config.architecture == "encoder_decoder":
        raise ValueError(
            "attention 'gated_deltanet' runs a causal recurrence, for decoder-only models; an 'encoder_decoder' "
            "model would use it for its bidirectional encoder and cross-attention too: use 'sdpa' there"
        )


def register_components(register: RegisterComponent) -> None:
    """Register the mixer (called from ``zoo_modern.plugin``)."""
    register("attention", "gated_deltanet", GatedDeltaNet, check=check_gated_deltanet)
