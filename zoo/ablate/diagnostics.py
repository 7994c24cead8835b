"""Diagnostics inside a run: per layer, the residual stream's RMS and the gradient norm of
the layer's weights, measured on one fixed validation batch at each evaluation, so that a
surprising row of an ablation can be explained (post-norm's large gradients near the
output at the start, Xiong et al. 2020; a residual stream that grows with depth).

Plain torch forward hooks on the blocks and ``torch.autograd.grad``: the measurement
leaves the parameters' ``.grad``, the random state and the training mode as they were,
so a run's numbers do not change when it is measured. (When the model's own hook points
land, this reads them instead.)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from zoo.training import TokenData, TrainSettings, lm_loss, validation_batches


@dataclass(frozen=True)
class Diagnostics:
    """One measurement: ``residual_rms[0]`` is the stream entering the first block (the
    embeddings), ``residual_rms[i]`` the stream after block ``i``; ``grad_norm[i]`` the
    L2 norm of the loss's gradient over block ``i``'s parameters (``i`` from 0)."""

    step: int
    residual_rms: list[float]
    grad_norm: list[float]

    def to_dict(self) -> dict[str, Any]:
        return {"step": self.step, "residual_rms": self.residual_rms, "grad_norm": self.grad_norm}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Diagnostics:
        return cls(int(data["step"]), [float(v) for v in data["residual_rms"]], [float(v) for v in data["grad_norm"]])


def _rms(x: Tensor) -> float:
    return float(x.detach().float().pow(2).mean().sqrt())


def measure(model: nn.Module, inputs: Tensor, targets: Tensor, step: int) -> Diagnostics:
    """Residual RMS per layer and gradient norm per block on ``inputs`` → ``targets``, in eval mode."""
    blocks = list(model.blocks)  # type: ignore[arg-type]
    stream: list[float] = [math.nan] * (len(blocks) + 1)

    def enter(_module: nn.Module, args: tuple[Any, ...]) -> None:
        stream[0] = _rms(args[0])

    def leave(index: int) -> Any:
        def hook(_module: nn.Module, _args: tuple[Any, ...], output: Any) -> None:
            stream[index + 1] = _rms(output[0] if isinstance(output, tuple) else output)

        return hook

    handles = [blocks[0].register_forward_pre_hook(enter)]
    handles += [block.register_forward_hook(leave(i)) for i, block in enumerate(blocks)]
    groups = [[p for p in block.parameters() if p.requires_grad] for block in blocks]
    was_training = model.training
    model.eval()
    try:
        loss = lm_loss(model, inputs, targets)
        grads = torch.autograd.grad(loss, [p for group in groups for p in group], allow_unused=True)
    finally:
        for handle in handles:
            handle.remove()
        model.train(was_training)
    norms, start = [], 0
    for group in groups:
        mine = [g for g in grads[start : start + len(group)] if g is not None]
        start += len(group)
        norms.append(float(torch.sqrt(sum((g.float().pow(2).sum() for g in mine), torch.zeros(())))))
    return Diagnostics(step, stream, norms)


class Probe:
    """Measures ``model`` at step 0 and at every evaluation of a run (``eval_every`` and the
    last step), on the first of the run's fixed validation batches; ``taken`` holds them."""

    def __init__(self, model: nn.Module, data: TokenData, settings: TrainSettings) -> None:
        device = next(model.parameters()).device
        inputs, targets = validation_batches(data.val, settings)[0]
        self.model, self.inputs, self.targets = model, inputs.to(device), targets.to(device)
        self.every, self.steps = settings.eval_every, settings.steps
        self.taken: list[Diagnostics] = []

    def at(self, step: int) -> None:
        if step == 0 or step % self.every == 0 or step == self.steps:
            self.taken.append(measure(self.model, self.inputs, self.targets, step))
