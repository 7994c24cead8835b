"""What a run reports per step (``StepReport``), its MFU, and where it goes:
``out/metrics.jsonl`` on rank 0 and TensorBoard events when installed."""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self

import torch

from zoo.checkpoint import write_atomically
from zoo.config import ModelConfig
from zoo.errors import InputError
from zoo.files import open_append, open_read
from zoo.summary import summarize
from zoo.training.distributed import World
from zoo.training.settings import TrainSettings

METRICS = "metrics.jsonl"
#: Dense bf16 peak TFLOP/s of known GPUs, for MFU when --peak-tflops is not given.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10G": 125.0, "4090": 165.0}


@dataclass(frozen=True)
class StepReport:
    """One optimizer step, as progress displays and metrics see it."""

    step: int  # 1-based
    steps: int
    loss: float  # mean training loss over the step's global batch
    lr: float
    tokens: int  # training tokens seen so far
    tokens_per_s: float
    mfu: float | None
    val_loss: float | None  # when evaluated after this step

    def to_dict(self) -> dict[str, Any]:
        row: dict[str, Any] = {
            "step": self.step,
            "loss": self.loss,
            "lr": self.lr,
            "tokens": self.tokens,
            "tokens_per_s": self.tokens_per_s,
        }
        if self.mfu is not None:
            row["mfu"] = self.mfu
        if self.val_loss is not None:
            row.update(val_loss=self.val_loss, val_perplexity=math.exp(min(self.val_loss, 700.0)))
        return row


def flops_per_token(config: Any, settings: TrainSettings, world: World) -> float | None:
    """Forward FLOPs per token (from ``zoo.summary``) when a peak is known for MFU."""
    if not isinstance(config, ModelConfig) or device_peak_tflops(settings, world) is None:
        return None
    return summarize(config, context=settings.seq_len).total_flops_per_token


def device_peak_tflops(settings: TrainSettings, world: World) -> float | None:
    if settings.peak_tflops is not None:
        return float(settings.peak_tflops)
    if world.device.type == "cuda":
        name = torch.cuda.get_device_name(world.device)
        return next((peak for key, peak in PEAK_TFLOPS.items() if key in name), None)
    return None


class MetricsWriter:
    """``out/metrics.jsonl`` (rank 0) and TensorBoard events when installed. A resumed
    run first drops the lines after its version's step, then appends."""

    def __init__(self, out: Path | None, is_main: bool, resumed_at: int | None) -> None:
        self.file: Any = None
        self.board: Any = None
        if out is None or not is_main:
            return
        path = out / METRICS
        kept = _kept_lines(path, resumed_at) if resumed_at is not None and os.path.lexists(path) else []
        # Replaced, never truncated in place: a planted link is replaced, not written through.
        write_atomically(path, lambda file: file.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8"))
        self.file = open_append(path, InputError)
        try:
            from torch.utils.tensorboard import (
                SummaryWriter,  # the optional `tensorboard` extra
            )
        except ImportError:
            return
        if (out / "tensorboard").is_symlink():
            raise InputError(
                f"{out / 'tensorboard'} is a symbolic link; the zoo does not write through links: remove it"
            )
        self.board = SummaryWriter(str(out / "tensorboard"))

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.file is not None:
            self.file.close()
        if self.board is not None:
            self.board.close()

    def write(self, report: StepReport) -> None:
        if self.file is None:
            return
        self.file.write(json.dumps(report.to_dict()) + "\n")
        if self.board is not None:
            for key, value in report.to_dict().items():
                if key != "step":
                    self.board.add_scalar(f"train/{key}", value, report.step)

    def flush(self) -> None:
        if self.file is not None:
            self.file.flush()
            os.fsync(self.file.fileno())


def _kept_lines(path: Path, resumed_at: int) -> list[str]:
    """The lines of a resumed run's metrics up to its step; damaged lines (a torn last
    line, bad UTF-8, garbage) are dropped, a folder or device in its place is an error."""
    kept = []
    with open_read(path, InputError, "the metrics file", follow=False) as handle:
        for raw in handle:
            try:
                line = raw.decode("utf-8").rstrip("\n")
            except UnicodeDecodeError:
                continue
            if _line_step(line) <= resumed_at:
                kept.append(line)
    return kept


def _line_step(line: str) -> int:
    """The step of one metrics line; ``1 << 62`` (dropped) for anything but a JSON object
    with a whole-number step."""
    if len(line) > 1 << 16:
        return 1 << 62
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):
        return 1 << 62
    step = row.get("step") if isinstance(row, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) and step >= 0 else 1 << 62
