"""Activations from after 2020, beside the built-in ``relu``, ``gelu``, ``gelu_tanh`` and ``silu``.

- ``relu2`` (So et al. 2021, Primer): ReLU squared, max(0, x)^2, the ungated MLP's
  activation of Nemotron, Arcee and Jais 2.
- ``xielu`` (Huang and Schlag 2024; Apertus): alpha_p x^2 + beta x for x > 0, else
  alpha_n (expm1(min(x, eps)) - x) + beta x, with alpha_p = softplus(a_p) and
  alpha_n = beta + softplus(a_n) learned in each layer (beta = 0.5, eps = -1e-6 kept as buffers).
- ``GatedUnit``: the product of a gated MLP, gate * sigmoid(alpha * gate) * (up + shift),
  with the gate clamped above at ``limit`` and up to +-``limit`` first. At its defaults
  (alpha 1, no limit, shift 0) it is SwiGLU's silu(gate) * up; GPT-OSS's experts use
  alpha 1.702, limit 7 and shift 1 (a clamped, sharper SiLU that keeps values bounded).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.plugin import RegisterComponent


class ReLUSquared(nn.Module):
    """max(0, x)^2."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.square(torch.relu(x))


def relu2() -> nn.Module:
    """ReLU squared, max(0, x)^2 (Primer; Nemotron, Arcee)."""
    return ReLUSquared()


class XIELU(nn.Module):
    """xIELU: a learned quadratic for x > 0 and a learned ELU-like curve below (see the module's docstring)."""

    beta: Tensor
    eps: Tensor

    def __init__(self, alpha_p: float = 0.8, alpha_n: float = 0.8, beta: float = 0.5, eps: float = -1e-6) -> None:
        super().__init__()
        self.starts = (alpha_p, alpha_n - beta)
        self.alpha_p = nn.Parameter(torch.zeros(1))  # softplus(a_p) is the slope of x^2
        self.alpha_n = nn.Parameter(torch.zeros(1))
        self.constants = (beta, eps)
        self.register_buffer("beta", torch.tensor(beta))  # buffers, as transformers saves them
        self.register_buffer("eps", torch.tensor(eps))
        self.reset_parameters()

    def reset_buffers(self) -> None:
        """beta and eps again, which a model built on the meta device materialises empty."""
        with torch.no_grad():
            self.beta.fill_(self.constants[0])
            self.eps.fill_(self.constants[1])

    def reset_parameters(self) -> None:
        with torch.no_grad():  # the inverse softplus of the starting slopes
            self.alpha_p.fill_(math.log(math.expm1(self.starts[0])))
            self.alpha_n.fill_(math.log(math.expm1(self.starts[1])))

    def forward(self, x: Tensor) -> Tensor:
        alpha_p, alpha_n = F.softplus(self.alpha_p), self.beta + F.softplus(self.alpha_n)
        negative = (torch.expm1(torch.minimum(x, self.eps)) - x) * alpha_n
        return torch.where(x > 0, alpha_p * x * x + self.beta * x, negative + self.beta * x)


def xielu() -> nn.Module:
    """xIELU: learned slopes for x > 0 and x <= 0 in each layer (Apertus)."""
    return XIELU()


@dataclass(frozen=True)
class GatedUnit:
    """gate * sigmoid(alpha * gate) * (up + shift), gate clamped at most and up within
    +-``limit`` first (see the module's docstring): silu(gate) * up at the defaults."""

    alpha: float = 1.0
    limit: float | None = None
    shift: float = 0.0

    def __call__(self, gate: Tensor, up: Tensor) -> Tensor:
        if self.limit is not None:
            gate, up = gate.clamp(max=self.limit), up.clamp(-self.limit, self.limit)
        act = F.silu(gate) if self.alpha == 1.0 else gate * torch.sigmoid(self.alpha * gate)
        return act * (up + self.shift) if self.shift else act * up


def register_components(register: RegisterComponent) -> None:
    """Register this module's activations (called from ``zoo_modern.plugin``)."""
    register("activation", "relu2", relu2)
    register("activation", "xielu", xielu)
