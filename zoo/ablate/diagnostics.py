"""Diagnostics inside a run: per layer, the residual stream's RMS, the gradient norm of
the layer's weights and the attention entropy, measured on one fixed validation batch at
each evaluation, so that a surprising row of an ablation can be explained (post-norm's
large gradients near the output at the start, Xiong et al. 2020; a residual stream that
grows with depth; heads that stay uniform).

The measurement is ``zoo.probe.probe`` over the model's hook points
(``hook_resid_pre``/``hook_resid_post``, ``attn.hook_pattern``) with the run's own
targets; it leaves the parameters' ``.grad``, the random state and the training mode as
they were, so a run's numbers do not change when it is measured. At most
``DIAGNOSTIC_ROWS`` sequences of the batch are measured: the attention patterns are kept
for the backward pass, (B, H, S, S) per layer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from torch import Tensor, nn

from zoo.probe import probe
from zoo.training import TokenData, TrainSettings, validation_batches

#: Sequences of the validation batch a measurement reads.
DIAGNOSTIC_ROWS = 4


@dataclass(frozen=True)
class Diagnostics:
    """One measurement: ``residual_rms[0]`` is the stream entering the first block (the
    embeddings), ``residual_rms[i]`` the stream after block ``i``; ``grad_norm[i]`` the
    L2 norm of the loss's gradient over block ``i``'s parameters (``i`` from 0);
    ``attention_entropy[i]`` block ``i``'s attention entropy in nats, the mean over its
    heads (empty in records from before it was measured)."""

    step: int
    residual_rms: list[float]
    grad_norm: list[float]
    attention_entropy: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "residual_rms": self.residual_rms,
            "grad_norm": self.grad_norm,
            "attention_entropy": self.attention_entropy,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnostics:
        return cls(
            int(data["step"]),
            [float(v) for v in data["residual_rms"]],
            [float(v) for v in data["grad_norm"]],
            [float(v) for v in data.get("attention_entropy", [])],
        )


def measure(model: nn.Module, inputs: Tensor, targets: Tensor, step: int) -> Diagnostics:
    """Residual RMS, gradient norm and attention entropy per block on ``inputs`` → ``targets``, in eval mode."""
    found = probe(model, inputs, targets=targets)
    blocks = [
        math.sqrt(sum(norms[i] ** 2 for norms in found.grad_norm.values())) for i in range(found.layers)
    ]  # the groups of a block (attention, MLP, norms) together
    # a block without attention scores (a short convolution) leaves the whole run's entropy out, as older records
    entropy = [sum(h) / len(h) for h in found.attention_entropy] if all(found.attention_entropy) else []
    return Diagnostics(step, found.residual_rms, blocks, entropy)


class Probe:
    """Measures ``model`` at step 0 and at every evaluation of a run (``eval_every`` and the
    last step), on the first of the run's fixed validation batches; ``taken`` holds them."""

    def __init__(self, model: nn.Module, data: TokenData, settings: TrainSettings) -> None:
        device = next(model.parameters()).device
        inputs, targets = (t[:DIAGNOSTIC_ROWS] for t in validation_batches(data.val, settings)[0])
        self.model, self.inputs, self.targets = model, inputs.to(device), targets.to(device)
        self.every, self.steps = settings.eval_every, settings.steps
        self.taken: list[Diagnostics] = []

    def at(self, step: int) -> None:
        if step == 0 or step % self.every == 0 or step == self.steps:
            self.taken.append(measure(self.model, self.inputs, self.targets, step))
