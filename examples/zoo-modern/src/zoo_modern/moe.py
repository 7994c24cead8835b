"""Mixture of experts (Shazeer et al. 2017; Switch, Mixtral, Qwen-MoE, OLMoE): a router
sends each token to ``top_k`` of ``n_experts`` SwiGLU MLPs and sums their outputs,
weighted by the router's probabilities.

Routing as the families do it: a softmax over all experts, the ``top_k`` largest kept,
optionally renormalised to sum to 1 (``normalize_top_k``: Mixtral always, Qwen-MoE's and
OLMoE's ``norm_topk_prob``). Qwen2-MoE adds a *shared expert* every token goes through,
scaled by a sigmoid gate of its own (``shared_hidden``, ``shared_gate``).

Each token is computed alone, so padding and the KV cache (one token at a time) give
exactly the outputs of the full forward. Dispatch sorts the (token, expert) pairs by
expert, runs each expert once on its tokens (a loop over experts, none over tokens) and
adds the weighted outputs back with ``index_add_``; the experts' token counts are one
host read per layer. That read has a data-dependent result, which ``torch.compile``
cannot hold in one graph, so under compilation every expert runs on every token and
unchosen ones are weighted 0: the same sums, ``n_experts / top_k`` times the expert
FLOPs. On the meta device (``zoo info``'s FLOPs) the tokens are split evenly.

Hook points: ``mlp.hook_router``, the router's logits (B, S, n_experts); replacing them
re-routes. Training forwards keep the Switch load-balancing loss (``aux_loss()``), which
the training loss adds, weighted by ``aux_loss_weight``.
"""

from __future__ import annotations

from typing import Any

import torch
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import MAX_EXPERTS, SCALES_WITH, SHOWN, RegisterComponent, hook_point
from zoo_modern.mlp import SwiGLU, swiglu_hidden


class MoeOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)
    n_experts: int = Field(8, gt=0, le=MAX_EXPERTS, description="experts per layer", json_schema_extra={SHOWN: True})
    top_k: int = Field(2, gt=0, description="experts each token goes to", json_schema_extra={SHOWN: True})
    hidden: int | None = Field(
        None,
        gt=0,
        description="each expert's hidden size (default: SwiGLU's for d_ff)",
        json_schema_extra={SCALES_WITH: "d_model"},
    )
    multiple_of: int = Field(256, gt=0, description="the default hidden size is rounded up to a multiple of this")
    normalize_top_k: bool = Field(True, description="renormalise the top-k probabilities to sum to 1 (Mixtral)")
    shared_hidden: int = Field(
        0,
        ge=0,
        description="hidden size of a shared expert every token uses (0: none)",
        json_schema_extra={SCALES_WITH: "d_model"},
    )
    shared_gate: bool = Field(True, description="scale the shared expert by sigmoid(a learned gate) (Qwen2-MoE)")
    aux_loss_weight: float = Field(
        0.01, ge=0.0, description="weight of the load-balancing loss in training (summed over layers: their mean)"
    )


def check_moe(config: Any, options: MoeOptions) -> None:
    if options.top_k > options.n_experts:
        raise ValueError(
            f"mlp.top_k={options.top_k} must be at most mlp.n_experts={options.n_experts} "
            f"(each token goes to top_k different experts)"
        )


def balance_loss(probs: Tensor, chosen: Tensor) -> Tensor:
    """Switch Transformer's load-balancing loss (eqs. 4-6), as transformers'
    ``load_balancing_loss_func`` computes it for one layer: n_experts times the sum over
    experts of (share of top-k assignments) x (mean router probability). 1 x top_k when
    balanced; its gradient reaches the router through the probabilities.

    ``probs``: (N, E) softmax over all experts; ``chosen``: (N, k) expert indices.
    """
    n, experts = probs.shape
    assigned = torch.zeros(experts, dtype=probs.dtype, device=probs.device)
    assigned = assigned.index_add(0, chosen.reshape(-1), torch.ones_like(chosen, dtype=probs.dtype).reshape(-1))
    return experts * torch.sum(assigned / n * probs.mean(0))


class MixtureOfExperts(nn.Module):
    """Mixture of experts: top-k routed SwiGLU experts, optional shared expert (Mixtral, Qwen-MoE, OLMoE)."""

    def __init__(
        self,
        d_model: int,
        d_ff: int,
        n_layers: int,
        n_experts: int = 8,
        top_k: int = 2,
        hidden: int | None = None,
        multiple_of: int = 256,
        normalize_top_k: bool = True,
        shared_hidden: int = 0,
        shared_gate: bool = True,
        aux_loss_weight: float = 0.01,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        hidden = hidden or swiglu_hidden(d_ff, multiple_of)
        self.n_experts, self.top_k, self.normalize_top_k = n_experts, top_k, normalize_top_k
        self.aux_weight = aux_loss_weight / n_layers  # summed over the layers: the weight times their mean
        self.router = hook_point(nn.Linear(d_model, n_experts, bias=False), "hook_router")
        self.experts = nn.ModuleList(SwiGLU(d_model, hidden, bias, 0.0) for _ in range(n_experts))
        self.shared = SwiGLU(d_model, shared_hidden, bias, 0.0) if shared_hidden else None
        self.shared_gate = nn.Linear(d_model, 1, bias=False) if shared_hidden and shared_gate else None
        self.drop = nn.Dropout(dropout)
        self.last_balance_loss: Tensor | None = None  # of the latest training forward

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape  # (B, S, d)
        logits = self.router(x)  # (B, S, E): the hook point
        probs = logits.flatten(0, -2).float().softmax(-1)  # (N, E)
        weights, chosen = probs.topk(self.top_k, dim=-1)  # (N, k)
        if self.normalize_top_k:
            weights = weights / weights.sum(-1, keepdim=True)
        flat = x.reshape(-1, shape[-1])  # (N, d)
        out = self.dispatch(flat, weights.to(x.dtype), chosen)
        if self.shared is not None:
            shared = self.shared(flat)
            out = out + (torch.sigmoid(self.shared_gate(flat)) * shared if self.shared_gate is not None else shared)
        self.last_balance_loss = balance_loss(probs, chosen) if self.training else None
        result: Tensor = self.drop(out.view(shape))
        return result

    def dispatch(self, x: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """sum_j weights[:, j] * expert[chosen[:, j]](x): (N, d) from (N, d), (N, k), (N, k)."""
        if torch.compiler.is_compiling():
            return self.dense(x, weights, chosen)
        pairs = chosen.reshape(-1)
        order = pairs.argsort(stable=True)  # the (token, slot) pairs, grouped by expert
        token_of = torch.arange(x.shape[0], device=x.device)[:, None].expand(chosen.shape)  # (N, k): each pair's token
        tokens, scale = token_of.reshape(-1)[order], weights.reshape(-1)[order, None]
        out = torch.zeros_like(x)
        start = 0
        for expert, count in zip(self.experts, self.counts(pairs), strict=True):
            if count:
                rows = tokens[start : start + count]
                out.index_add_(0, rows, expert(x[rows]) * scale[start : start + count])
            start += count
        return out

    def counts(self, pairs: Tensor) -> list[int]:
        """Tokens per expert: read from the device, or an even split on the meta device."""
        if pairs.is_meta:
            share, extra = divmod(pairs.numel(), self.n_experts)
            return [share + (e < extra) for e in range(self.n_experts)]
        counts: list[int] = torch.bincount(pairs, minlength=self.n_experts).tolist()
        return counts

    def dense(self, x: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """The same sum with every expert on every token (weight 0 where not chosen): one graph."""
        gates = torch.zeros(x.shape[0], self.n_experts, dtype=x.dtype, device=x.device).scatter(1, chosen, weights)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            out = out + expert(x) * gates[:, e : e + 1]
        return out

    def aux_loss(self) -> Tensor | None:
        """The weighted load-balancing loss of the latest training forward (None in eval mode)."""
        if self.last_balance_loss is None or not self.aux_weight:
            return None
        return self.last_balance_loss * self.aux_weight


def register_components(register: RegisterComponent) -> None:
    register("mlp", "moe", MixtureOfExperts, MoeOptions, check=check_moe)
