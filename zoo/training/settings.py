"""How to train: ``TrainSettings``, checked when made, and which of them a resume may change."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from zoo.errors import ConfigError
from zoo.training.choices import PRECISION_NAMES, STRATEGIES

# Settings a resume may change: they do not change what the run computes, except ``steps``
# (training longer), which stretches the cosine schedule from the resume point on.
RESUMABLE_CHANGES = (
    "steps",
    "eval_every",
    "eval_batches",
    "save_every",
    "keep_last",
    "compile",
    "activation_checkpointing",
    "strategy",
    "micro_batch_size",
    "peak_tflops",
    "threads",
)


@dataclass(frozen=True)
class TrainSettings:
    """How to train: steps, batch shape, optimiser, schedule, precision, evaluation and saving."""

    steps: int = 200
    batch_size: int = 16  # sequences per optimizer step, over all ranks
    seq_len: int = 64
    lr: float = 3e-3
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    warmup_steps: int | None = None  # None: a tenth of the steps
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.95)
    grad_clip: float = 1.0  # max global gradient norm; 0 turns clipping off
    eval_every: int = 50
    eval_batches: int = 4  # validation windows: eval_batches * batch_size
    seed: int = 0
    threads: int | None = None  # torch CPU threads while training; None: leave as set
    micro_batch_size: int | None = None  # sequences per forward on one rank; None: batch_size / world size
    dtype: str = "fp32"  # fp32, bf16 (autocast / FSDP2 mixed precision) or fp16 (autocast, grad scaler)
    compile: bool = False  # torch.compile each block
    activation_checkpointing: bool = False  # recompute each block's activations in backward
    strategy: str = "auto"  # auto, single, ddp, fsdp
    save_every: int | None = None  # None: save at the end only (when there is an out folder)
    keep_last: int | None = None  # None: keep every version
    peak_tflops: float | None = None  # per device, for MFU; None: a known GPU's, else no MFU

    def __post_init__(self) -> None:
        optional = ("warmup_steps", "threads", "micro_batch_size", "save_every", "keep_last")
        wrong = [
            f"{name}={value!r} must be an integer"
            for name in ("steps", "batch_size", "seq_len", "eval_every", "eval_batches", "seed", *optional)
            if not _is_int(value := getattr(self, name)) and not (name in optional and value is None)
        ] + [
            f"{name}={value!r} must be a finite number"
            for name in ("lr", "min_lr_ratio", "weight_decay", "grad_clip")
            if not isinstance(value := getattr(self, name), (int, float))
            or isinstance(value, bool)
            or not math.isfinite(value)
        ]
        if wrong:
            raise ConfigError(f"invalid training settings: {'; '.join(wrong)}")
        problems = [
            f"{name}={getattr(self, name)} must be > 0"
            for name in ("steps", "batch_size", "seq_len", "lr", "eval_every", "eval_batches")
            if getattr(self, name) <= 0
        ] + [
            f"{name}={getattr(self, name)} must be > 0 (or None)"
            for name in ("threads", "micro_batch_size", "save_every", "keep_last")
            if getattr(self, name) is not None and getattr(self, name) <= 0
        ]
        if not 0 <= self.seed < 1 << 63:
            problems.append(f"seed={self.seed} must lie in 0 .. 2**63-1 (--seed; each rank seeds with seed + rank)")
        betas = self.betas
        if not (
            isinstance(betas, (tuple, list))
            and len(betas) == 2
            and all(isinstance(b, (int, float)) and not isinstance(b, bool) and 0.0 <= b < 1.0 for b in betas)
        ):
            problems.append(f"betas={betas!r} must be two numbers in [0, 1), such as (0.9, 0.95)")
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            problems.append(f"min_lr_ratio={self.min_lr_ratio} must be within [0, 1]")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.steps:
            problems.append(f"warmup_steps={self.warmup_steps} must be within [0, steps={self.steps}]")
        if self.weight_decay < 0 or self.grad_clip < 0:
            problems.append("weight_decay and grad_clip must be >= 0")
        if self.dtype not in PRECISION_NAMES:
            problems.append(f"dtype={self.dtype!r} must be one of {', '.join(PRECISION_NAMES)}")
        if self.strategy not in STRATEGIES:
            problems.append(f"strategy={self.strategy!r} must be one of {', '.join(STRATEGIES)}")
        peak = self.peak_tflops
        if peak is not None and not (
            isinstance(peak, (int, float)) and not isinstance(peak, bool) and math.isfinite(peak) and peak > 0
        ):
            problems.append(f"peak_tflops={peak!r} must be a finite number > 0 (or None) (--peak-tflops)")
        if problems:
            raise ConfigError(f"invalid training settings: {'; '.join(problems)}")
        from zoo.bounds import check_steps, check_threads  # they read the machine through torch: not to list defaults

        check_threads(self.threads)
        check_steps(self.steps, "the run", "--steps")

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 10)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)
