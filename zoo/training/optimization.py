"""What a training step optimises, and how: AdamW's parameter groups (decay on matrices
only) and the optimizer, the next-token loss and its mean over batches, and the
deterministic context a CPU run trains in. The loop (``zoo.training.loop``) uses them;
``ablate`` and ``evaluate`` reach the losses through ``zoo.training``."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F
import torch.utils.deterministic
from torch import Tensor, nn

from zoo.nn.marks import auxiliary_loss
from zoo.training.choices import PRECISION_NAMES
from zoo.training.settings import TrainSettings

#: The training precisions (``--dtype``) and the dtype each autocasts to (fp32: none).
PRECISIONS: dict[str, torch.dtype | None] = dict(
    zip(PRECISION_NAMES, (None, torch.bfloat16, torch.float16), strict=True)
)


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices (dim >= 2), none on biases and norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights once
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def make_optimizer(model: nn.Module, settings: TrainSettings, strategy: str) -> torch.optim.AdamW:
    """AdamW over ``parameter_groups``, as one fused kernel where torch has one for the
    parameters' device (CPU, CUDA) and they are plain tensors (not FSDP2's shards): at the
    studies' sizes the default per-tensor loop is a large share of a step (``zoo bench study``)."""
    groups = parameter_groups(model, settings.weight_decay)
    devices = {p.device.type for group in groups for p in group["params"]}
    fused = strategy != "fsdp" and devices <= {"cpu", "cuda"}
    return torch.optim.AdamW(groups, lr=settings.lr, betas=settings.betas, fused=True if fused else None)


def lm_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy; right for logits and for log-probabilities alike
    (log_softmax of log-probabilities is the identity). In training, plus the terms the
    model's modules add (``zoo.nn.marks.auxiliary_loss``; none in eval mode)."""
    out = model(inputs)  # (B, S, V)
    loss = F.cross_entropy(out.flatten(0, 1).float(), targets.flatten())
    aux = auxiliary_loss(model)  # terms components add in training (an MoE's load balancing)
    return loss if aux is None else loss + aux


@torch.no_grad()
def mean_loss(model: nn.Module, batches: list[tuple[Tensor, Tensor]]) -> float:
    """Mean loss over ``batches`` in one process, in eval mode; restores the mode after."""
    was_training = model.training
    model.eval()
    try:
        total = sum(lm_loss(model, x, y).item() for x, y in batches)
    finally:
        model.train(was_training)
    return total / len(batches)


_FILL = "fill_uninitialized_memory"  # torch.utils.deterministic's switch (a module property mypy does not see)


@contextlib.contextmanager
def deterministic(seed: int, threads: int | None = None) -> Iterator[None]:
    """Deterministic kernels, a seeded random state and ``threads`` CPU threads, all
    restored on exit. New tensors are not filled with NaN, as deterministic mode does by
    default: the loop reads no memory it has not written, and the fill of every
    ``torch.empty`` is work a plain PyTorch loop does not do (4-10% of a 64x2 step's CPU
    time under torch.profiler; within noise in ``zoo bench study``)."""
    previous, previous_threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    previous_fill = getattr(torch.utils.deterministic, _FILL)
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=torch.cuda.is_available())
        setattr(torch.utils.deterministic, _FILL, False)
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(previous)
            setattr(torch.utils.deterministic, _FILL, previous_fill)
            torch.set_num_threads(previous_threads)
