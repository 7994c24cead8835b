"""Mixture of experts (Shazeer et al. 2017; Switch, Mixtral, Qwen-MoE, OLMoE): a router
sends each token to ``top_k`` of ``n_experts`` SwiGLU MLPs and sums their outputs,
weighted by the router's probabilities.

Routing as the families do it: a softmax over all experts, the ``top_k`` largest kept,
optionally renormalised to sum to 1 (``normalize_top_k``: Mixtral always, Qwen-MoE's and
OLMoE's ``norm_topk_prob``). Qwen2-MoE adds a *shared expert* every token goes through,
scaled by a sigmoid gate of its own (``shared_hidden``, ``shared_gate``; ``shared_fused``:
its gate and up one projection, as Granite-MoE stores them; ``shared_average``: the routed and
shared outputs averaged, Cohere 2-MoE's). DeepSeek's
routing is options too: sigmoid scores (``scoring``), a frozen per-expert ``score_bias``
that chooses but does not weight (V3's ``e_score_correction_bias``; with ``logit_bias`` it is added
to the router's logits rather than the scores, as Kolibri 1 chooses), experts in
``n_groups`` groups of which a token uses the ``top_groups`` best (a group worth the sum
of its best ``group_by``), ``routed_scale``, and ``top_k_eps`` added to the top-k sum
renormalised by (DeepSeek's 1e-20 with sigmoid scores by default; LFM2-MoE's 1e-6).
Phi-3.5-MoE's SparseMixer (``scoring = "sparsemixer"``) takes the best expert left each round,
weighted by a softmax over the experts left within ``2 * mixer_eps`` of it. GPT-OSS's are
options as well: a bias on the router's logits (``router_bias``), experts with biases (the
config's ``bias``) whose gated product is clamped and sharpened (``limit``, ``alpha``,
``up_shift``: the ``GatedUnit`` of ``zoo_modern.activations``; plain SwiGLU at their
defaults). Llama 4's: ``weight_input``, each expert's weight applied to its input rather
than its output.

The experts are stacked, one parameter per projection with the experts on dim 0, as
transformers 5 holds them: ``experts.gate_up`` (E, 2 x hidden, d), rows [gate | up], and
``experts.down`` (E, d, hidden). A layer's experts are two tensors however many there
are, so Qwen3-30B-A3B on the meta device is 96 of them, not 6,144 modules of three.

Each token is computed alone, so padding and the KV cache (one token at a time) give
exactly the outputs of the full forward. Dispatch sorts the (token, expert) pairs by
expert and multiplies each expert's rows of tokens by its slice of the stack (grouped
matmuls: a loop over experts, none over tokens), adding the weighted outputs back with
``index_add_``; the experts' token counts are one host read per layer. That read has a
data-dependent result, which ``torch.compile`` cannot hold in one graph, so under
compilation every expert runs on every token (two batched matmuls over the stack) and
unchosen ones are weighted 0: the same sums, ``n_experts / top_k`` times the expert
FLOPs. On the meta device (``zoo info``'s FLOPs) all pairs go through one expert's
matrices in one matmul: the FLOPs of any split, without a loop over 128 experts.

Hook points: ``mlp.hook_router``, the router's logits (B, S, n_experts); replacing them
re-routes. Training forwards keep the Switch load-balancing loss (``aux_loss()``), which
the training loss adds, weighted by ``aux_loss_weight``.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import torch
import torch.nn.functional as F
from pydantic import BaseModel, ConfigDict, Field
from torch import Tensor, nn

from zoo.plugin import MAX_EXPERTS, SCALES_WITH, SHOWN, RegisterComponent, hook_point, residual_output, stacked
from zoo_modern.activations import GatedUnit
from zoo_modern.mlp import GLU, swiglu_hidden


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
    shared_fused: bool = Field(
        False, description="the shared expert's gate and up as one projection, rows [gate | up] (Granite-MoE's)"
    )
    shared_average: bool = Field(
        False, description="the routed and shared outputs averaged, not summed (Cohere 2-MoE's 'average')"
    )
    aux_loss_weight: float = Field(
        0.01, ge=0.0, description="weight of the load-balancing loss in training (summed over layers: their mean)"
    )
    scoring: Literal["softmax", "sigmoid", "sparsemixer"] = Field(
        "softmax",
        description="router scores: a softmax over the experts, each expert's sigmoid (DeepSeek-V3), or SparseMixer's"
        " choice (Phi-3.5-MoE: each round the best remaining expert, a softmax over those within mixer_eps of it)",
    )
    mixer_eps: float = Field(0.01, ge=0.0, lt=1.0, description="SparseMixer's relative distance (router_jitter_noise)")
    score_bias: bool = Field(False, description="a per-expert bias added to the scores to choose, not to weight (V3)")
    logit_bias: bool = Field(False, description="score_bias added to the router's logits, not its scores (Kolibri 1)")
    n_groups: int = Field(1, gt=0, description="experts in this many groups; a token chooses within top_groups of them")
    top_groups: int = Field(1, gt=0, description="the groups a token may use, by each group's worth")
    group_by: int = Field(2, gt=0, description="a group's worth: the sum of its best this many scores (V3: 2; V2: 1)")
    routed_scale: float = Field(
        1.0, gt=0.0, description="the routed experts' weights times this (routed_scaling_factor)"
    )
    top_k_eps: float | None = Field(
        None, ge=0.0, lt=1.0, description="added to the top-k sum renormalised by (None: 1e-20 with sigmoid, else 0)"
    )
    router_bias: bool = Field(False, description="a learned bias on the router's logits (GPT-OSS)")
    alpha: float = Field(1.0, gt=0.0, description="experts' gate * sigmoid(alpha * gate): 1 is SiLU (GPT-OSS 1.702)")
    limit: float | None = Field(
        None, gt=0.0, description="experts' gate clamped at most, up within +-this (GPT-OSS 7; None: no clamp)"
    )
    up_shift: float = Field(0.0, description="added to the experts' up projection before the product (GPT-OSS 1)")
    weight_input: bool = Field(False, description="an expert's weight scales its input, not its output (Llama 4)")


def check_moe(config: Any, options: MoeOptions) -> None:
    if options.top_k > options.n_experts:
        raise ValueError(
            f"mlp.top_k={options.top_k} must be at most mlp.n_experts={options.n_experts} "
            f"(each token goes to top_k different experts)"
        )
    groups, experts = options.n_groups, options.n_experts
    if groups > 1 and (experts % groups or experts // groups < options.group_by or options.top_groups > groups):
        raise ValueError(
            f"mlp.n_groups={groups}, top_groups={options.top_groups}: the {experts} experts must split evenly into "
            f"groups of group_by={options.group_by} or more (a group's worth), and top_groups be at most n_groups"
        )
    if options.scoring == "sparsemixer" and (options.score_bias or groups > 1 or options.normalize_top_k):
        raise ValueError("mlp.scoring='sparsemixer' weighs each expert by its own softmax: no score_bias, n_groups 1, normalize_top_k false")  # fmt: skip
    if options.top_k > options.top_groups * experts // groups:
        raise ValueError(f"mlp.top_k={options.top_k} is more experts than top_groups={options.top_groups} groups hold")


class ScoreBias(nn.Module):
    """A per-expert bias on the scores the router chooses by (DeepSeek-V3's
    ``e_score_correction_bias``): set by a balancing rule outside the gradient, so a saved
    buffer, not a parameter (nor counted as one, as in transformers)."""

    bias: Tensor

    def __init__(self, n_experts: int) -> None:
        super().__init__()
        self.register_buffer("bias", torch.zeros(n_experts))

    def reset_parameters(self) -> None:
        nn.init.zeros_(self.bias)


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


class StackedLinear(nn.Module):
    """``n`` linear layers of one shape, stacked on dim 0: ``weight`` (n, out, in), ``bias``
    (n, out) or None. Marked ``stacked``, so init schemes draw each layer as a linear one."""

    def __init__(self, n: int, d_in: int, d_out: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(n, d_out, d_in))
        self.bias = nn.Parameter(torch.empty(n, d_out)) if bias else None
        stacked(self)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Each layer as ``nn.Linear`` draws it: U(+-1/sqrt(in)) (kaiming, a=sqrt(5))."""
        bound = 1 / math.sqrt(self.weight.shape[-1])
        nn.init.uniform_(self.weight, -bound, bound)
        if self.bias is not None:
            nn.init.uniform_(self.bias, -bound, bound)

    def layers(self) -> list[tuple[Tensor, Tensor | None]]:
        """Each layer's (weight, bias), unbound once: one gradient for the stack, where
        indexing it per layer would make a zero-padded copy of the whole stack per layer."""
        biases = [None] * len(self.weight) if self.bias is None else self.bias.unbind(0)
        return list(zip(self.weight.unbind(0), biases, strict=True))

    def every(self, x: Tensor) -> Tensor:
        """Every layer on every row: (N, in) or (n, N, in) -> (n, N, out)."""
        out = torch.matmul(x, self.weight.transpose(1, 2))
        return out if self.bias is None else out + self.bias[:, None]


SWIGLU = GatedUnit()


def swiglu_of(
    x: Tensor, gate_up: tuple[Tensor, Tensor | None], down: tuple[Tensor, Tensor | None], unit: GatedUnit = SWIGLU
) -> Tensor:
    """down(unit(gate(x), up(x))) of one expert's (weight, bias) pairs; gate_up's rows
    [gate | up]; ``unit`` silu(gate) * up unless clamped (GPT-OSS)."""
    gate, up = F.linear(x, *gate_up).chunk(2, dim=-1)
    return F.linear(unit(gate, up), *down)


class Experts(nn.Module):
    """``n`` SwiGLU experts, stacked: ``gate_up`` (n, 2 x hidden, d), rows [gate | up], and
    ``down`` (n, d, hidden) (a residual output, as a dense MLP's); ``unit`` their gated product."""

    def __init__(self, n: int, d_model: int, hidden: int, bias: bool, unit: GatedUnit = SWIGLU) -> None:
        super().__init__()
        self.unit = unit
        self.gate_up = StackedLinear(n, d_model, 2 * hidden, bias)
        self.down = residual_output(StackedLinear(n, hidden, d_model, bias))

    def grouped(self, x: Tensor, counts: list[int]) -> Tensor:
        """Expert e on the ``counts[e]`` rows of ``x`` (M, d) after the earlier experts' rows."""
        outs, start = [], 0
        for gate_up, down, count in zip(self.gate_up.layers(), self.down.layers(), counts, strict=True):
            if count:
                outs.append(swiglu_of(x[start : start + count], gate_up, down, self.unit))
            start += count
        return torch.cat(outs) if outs else x.new_zeros(0, x.shape[-1])

    def first(self, x: Tensor) -> Tensor:
        """Expert 0 on every row of ``x`` (M, d): the FLOPs of any split of the rows."""
        layers = (self.gate_up, self.down)
        first = [(s.weight[0], None if s.bias is None else s.bias[0]) for s in layers]
        return swiglu_of(x, first[0], first[1], self.unit)

    def every(self, x: Tensor, gates: Tensor) -> Tensor:
        """sum_e gates[:, e] * expert_e(x) over every expert: (N, d) from (N, d) or one input
        per expert (n, N, d), and (N, n)."""
        gate, up = self.gate_up.every(x).chunk(2, dim=-1)  # (n, N, hidden) each
        out = self.down.every(self.unit(gate, up))  # (n, N, d)
        return (out * gates.t()[:, :, None]).sum(0)


class MixtureOfExperts(nn.Module):
    """Mixture of experts: top-k routed SwiGLU experts, optional shared expert (Mixtral, Qwen-MoE, OLMoE, DeepSeek)."""

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
        shared_fused: bool = False,
        shared_average: bool = False,
        aux_loss_weight: float = 0.01,
        scoring: str = "softmax",
        score_bias: bool = False,
        logit_bias: bool = False,
        n_groups: int = 1,
        top_groups: int = 1,
        group_by: int = 2,
        routed_scale: float = 1.0,
        top_k_eps: float | None = None,
        mixer_eps: float = 0.01,
        router_bias: bool = False,
        alpha: float = 1.0,
        limit: float | None = None,
        up_shift: float = 0.0,
        weight_input: bool = False,
        bias: bool = True,
        dropout: float = 0.0,
    ) -> None:
        super().__init__()
        hidden = hidden or swiglu_hidden(d_ff, multiple_of)
        self.n_experts, self.top_k, self.normalize_top_k = n_experts, top_k, normalize_top_k
        self.scoring, self.routed_scale, self.weight_input = scoring, routed_scale, weight_input
        self.top_k_eps = (1e-20 if scoring == "sigmoid" else 0.0) if top_k_eps is None else top_k_eps
        self.mixer_eps, self.shared_average, self.logit_bias = mixer_eps, shared_average, logit_bias
        self.n_groups, self.top_groups, self.group_by = n_groups, top_groups, group_by
        self.score_bias = ScoreBias(n_experts) if score_bias else None
        self.aux_weight = aux_loss_weight / n_layers  # summed over the layers: the weight times their mean
        self.router = hook_point(nn.Linear(d_model, n_experts, bias=router_bias), "hook_router")
        self.experts = Experts(n_experts, d_model, hidden, bias, GatedUnit(alpha, limit, up_shift))
        self.shared = GLU(d_model, shared_hidden, nn.SiLU(), bias, 0.0, shared_fused) if shared_hidden else None
        self.shared_gate = nn.Linear(d_model, 1, bias=False) if shared_hidden and shared_gate else None
        self.drop = nn.Dropout(dropout)
        self.last_balance_loss: Tensor | None = None  # of the latest training forward

    def forward(self, x: Tensor) -> Tensor:
        shape = x.shape  # (B, S, d)
        logits = self.router(x).flatten(0, -2).float()  # (N, E); (B, S, E) is the hook point
        probs = logits.softmax(-1)  # (N, E)
        if self.scoring == "sparsemixer":
            weights, chosen = self.sparse_mix(logits)
        else:
            scores = probs if self.scoring == "softmax" else logits.sigmoid()
            weights, chosen = self.route(scores, logits if self.logit_bias else None)  # (N, k)
        flat = x.reshape(-1, shape[-1])  # (N, d)
        out = self.dispatch(flat, weights.to(x.dtype), chosen)
        if self.shared is not None:
            shared = self.shared(flat)
            out = out + (torch.sigmoid(self.shared_gate(flat)) * shared if self.shared_gate is not None else shared)
            out = out / 2 if self.shared_average else out
        self.last_balance_loss = balance_loss(probs, chosen) if self.training else None
        result: Tensor = self.drop(out.view(shape))
        return result

    def route(self, scores: Tensor, by: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """The top-k experts of each token and their weights, (N, k) each, from ``scores`` (N, E):
        chosen by ``by`` (default the scores; with ``logit_bias`` the logits) plus ``score_bias`` within the
        ``top_groups`` best groups (a group's worth: its best ``group_by``), weighted by the scores,
        renormalised, times ``routed_scale``."""
        by = scores if by is None else by
        choice = by if self.score_bias is None else by + self.score_bias.bias
        if self.n_groups > 1:
            grouped = choice.view(len(choice), self.n_groups, -1)  # (N, G, E / G)
            best = (
                grouped.topk(self.group_by, dim=-1).values.sum(-1).topk(self.top_groups, dim=-1).indices
            )  # (N, top_groups)
            kept = torch.zeros(grouped.shape[:2], dtype=torch.bool, device=scores.device).scatter(1, best, True)
            choice = grouped.masked_fill(~kept[..., None], float("-inf")).flatten(1)
        if choice is scores:
            weights, chosen = scores.topk(self.top_k, dim=-1)
        else:  # chosen by the biased or masked scores, weighted by the scores themselves
            chosen = choice.topk(self.top_k, dim=-1).indices
            weights = scores.gather(1, chosen)
        if self.normalize_top_k:  # sigmoid scores may all be tiny: DeepSeek's 1e-20 keeps the sum nonzero
            weights = weights / (weights.sum(-1, keepdim=True) + self.top_k_eps)
        return weights * self.routed_scale if self.routed_scale != 1.0 else weights, chosen

    def sparse_mix(self, logits: Tensor) -> tuple[Tensor, Tensor]:
        """SparseMixer's routing at inference (Liu et al. 2024, Phi-3.5-MoE): each of ``top_k``
        rounds takes the best expert left, weighted by a softmax over the experts left whose
        logit is within ``2 * mixer_eps`` of it (relative to max(|logit|, best)). (Its training
        samples the choice and estimates the gradient; here training routes as inference.)"""
        weights, chosen, left = [], [], logits
        for _ in range(self.top_k):
            best, index = left.max(-1, keepdim=True)  # (N, 1) each
            far = (best - logits) / logits.abs().clamp(min=best) > 2 * self.mixer_eps
            weights.append(left.masked_fill(far, float("-inf")).softmax(-1).gather(1, index))
            chosen.append(index)
            left = left.scatter(1, index, float("-inf"))
        return torch.cat(weights, -1) * self.routed_scale, torch.cat(chosen, -1)

    def dispatch(self, x: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """sum_j weights[:, j] * expert[chosen[:, j]](x): (N, d) from (N, d), (N, k), (N, k)."""
        if torch.compiler.is_compiling():
            return self.dense(x, weights, chosen)
        pairs = chosen.reshape(-1)
        if x.is_meta:  # shapes only: every pair through expert 0, the FLOPs of any split
            return self.experts.first(x.repeat_interleave(self.top_k, 0)).view(*chosen.shape, -1).sum(1)
        order = pairs.argsort(stable=True)  # the (token, slot) pairs, grouped by expert
        tokens = order // self.top_k  # each pair's token
        counts: list[int] = torch.bincount(pairs, minlength=self.n_experts).tolist()  # one host read
        pair_weights = weights.reshape(-1)[order, None]
        if self.weight_input:
            out = self.experts.grouped(x[tokens] * pair_weights, counts)
        else:
            out = self.experts.grouped(x[tokens], counts) * pair_weights
        return torch.zeros_like(x).index_add_(0, tokens, out)

    def dense(self, x: Tensor, weights: Tensor, chosen: Tensor) -> Tensor:
        """The same sum with every expert on every token (weight 0 where not chosen): one graph."""
        gates = torch.zeros(x.shape[0], self.n_experts, dtype=x.dtype, device=x.device).scatter(1, chosen, weights)
        if self.weight_input:  # each expert on its weighted input (n, N, d), its output kept where chosen
            kept = torch.zeros_like(gates).scatter(1, chosen, 1.0)
            return self.experts.every(x * gates.t()[:, :, None], kept)
        return self.experts.every(x, gates)

    def aux_loss(self) -> Tensor | None:
        """The weighted load-balancing loss of the latest training forward (None in eval mode)."""
        if self.last_balance_loss is None or not self.aux_weight:
            return None
        return self.last_balance_loss * self.aux_weight


def register_components(register: RegisterComponent) -> None:
    register("mlp", "moe", MixtureOfExperts, MoeOptions, check=check_moe)
