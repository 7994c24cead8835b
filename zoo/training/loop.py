"""The training loop: the one place the zoo trains a model, in the nanoGPT manner.

- AdamW, decay on matrices only; linear warmup, then cosine decay to ``min_lr_ratio * lr``;
  gradients clipped on the global norm (``clip_grad_norm_`` is right under FSDP2, where
  the gradients are DTensors).
- ``batch_size`` sequences per optimizer step over all ranks, ``micro_batch_size`` per
  forward on one rank, accumulated ``batch_size / (micro_batch_size * world_size)`` times.
  Every step trains on the same windows whatever the world size (``WindowSampler``).
- autocast in bf16, or in fp16 with a grad scaler (CPU or CUDA; its state is saved and
  resumed with the run's); under FSDP2 a ``MixedPrecisionPolicy`` instead (bf16 only). Optional ``torch.compile`` and activation
  checkpointing per block.
- validation loss every ``eval_every`` steps (and before the first); every
  ``save_every`` steps and at the end a ``zoo.save`` version in ``out`` plus its training
  state (``zoo.training.state``); ``resume`` continues from the newest version, exactly.
- deterministic on CPU: deterministic kernels while training, the random state forked
  from, and restored to, the caller's, and the thread count pinnable (``threads``).

``fit`` trains a built model in one process, on the model's device, on in-memory token
ids or ``TokenData`` (what ``ablate`` uses); ``train`` takes a preset name, a checkpoint or a model and any data
``resolve_data`` accepts; both go through ``run``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Self, cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from zoo.checkpoint import inspect, load, save, unwrap, versions, write_atomically
from zoo.config import ModelConfig, resolve_config
from zoo.errors import CheckpointError, ConfigError, InputError
from zoo.factory import build
from zoo.summary import summarize
from zoo.training.data import (
    TOKENIZERS,
    TokenData,
    WindowSampler,
    resolve_data,
    tokens_data,
    validation_batches,
)
from zoo.training.distributed import (
    STRATEGIES,
    World,
    all_gather,
    all_sum,
    barrier,
    choose_strategy,
    close_world,
    gradient_sync,
    init_world,
    prepare_model,
)
from zoo.training.state import (
    TrainingState,
    load_optimizer,
    optimizer_tensors,
    read_state,
    state_path,
    write_state,
)

DTYPES = ("fp32", "bf16", "fp16")
METRICS = "metrics.jsonl"
_LOGS = (METRICS, "tensorboard")  # what a run writes before its first version
#: Dense bf16 peak TFLOP/s of known GPUs, for MFU when --peak-tflops is not given.
PEAK_TFLOPS = {"H200": 989.0, "H100": 989.0, "A100": 312.0, "L40S": 362.0, "L4": 121.0, "A10G": 125.0, "4090": 165.0}
# Settings a resume may change: they do not change what the run computes, except ``steps``
# (training longer), which stretches the cosine schedule from the resume point on.
_RESUMABLE_CHANGES = (
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
        if not 0.0 <= self.min_lr_ratio <= 1.0:
            problems.append(f"min_lr_ratio={self.min_lr_ratio} must be within [0, 1]")
        if self.warmup_steps is not None and not 0 <= self.warmup_steps <= self.steps:
            problems.append(f"warmup_steps={self.warmup_steps} must be within [0, steps={self.steps}]")
        if self.weight_decay < 0 or self.grad_clip < 0:
            problems.append("weight_decay and grad_clip must be >= 0")
        if self.dtype not in DTYPES:
            problems.append(f"dtype={self.dtype!r} must be one of {', '.join(DTYPES)}")
        if self.strategy not in STRATEGIES:
            problems.append(f"strategy={self.strategy!r} must be one of {', '.join(STRATEGIES)}")
        if self.peak_tflops is not None and not (isinstance(self.peak_tflops, (int, float)) and self.peak_tflops > 0):
            problems.append(f"peak_tflops={self.peak_tflops!r} must be > 0 (or None)")
        if problems:
            raise ConfigError(f"invalid training settings: {'; '.join(problems)}")

    @property
    def warmup(self) -> int:
        return self.warmup_steps if self.warmup_steps is not None else max(1, self.steps // 10)

    @property
    def tokens_per_step(self) -> int:
        return self.batch_size * self.seq_len

    def to_dict(self) -> dict[str, Any]:
        return {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(self).items()}


@dataclass(frozen=True)
class CurvePoint:
    """Losses after ``step`` updates: the mean training loss since the previous point
    (None before the first step) and the validation loss."""

    step: int
    train_loss: float | None
    val_loss: float


@dataclass
class TrainResult:
    """The curve of one training run and its throughput."""

    curve: list[CurvePoint]
    tokens_per_second: float  # training steps only, evaluation excluded
    train_seconds: float
    tokens_seen: int
    checkpoint: Path | None = None  # the last version saved, when there was an out folder
    losses: list[float] = dataclasses.field(default_factory=list)  # every step's training loss, this run

    @property
    def final_val_loss(self) -> float:
        return self.curve[-1].val_loss


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


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# -- optimisation ----------------------------------------------------------------------


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay on matrices (dim >= 2), none on biases and norm gains."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights once
    return [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]


def learning_rate(step: int, settings: TrainSettings) -> float:
    """The learning rate of update ``step`` (0-based): linear warmup, then cosine decay."""
    peak, floor, warmup = settings.lr, settings.lr * settings.min_lr_ratio, settings.warmup
    if step < warmup:
        return peak * (step + 1) / warmup
    progress = (step - warmup) / max(1, settings.steps - warmup)
    return floor + 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0))) * (peak - floor)


def lm_loss(model: nn.Module, inputs: Tensor, targets: Tensor) -> Tensor:
    """Mean next-token cross-entropy; right for logits and for log-probabilities alike
    (log_softmax of log-probabilities is the identity)."""
    out = model(inputs)  # (B, S, V)
    return F.cross_entropy(out.flatten(0, 1).float(), targets.flatten())


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


@contextlib.contextmanager
def deterministic(seed: int, threads: int | None = None) -> Iterator[None]:
    """Deterministic kernels, a seeded random state and ``threads`` CPU threads, all
    restored on exit."""
    previous, previous_threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        torch.use_deterministic_algorithms(True, warn_only=torch.cuda.is_available())
        if threads is not None:
            torch.set_num_threads(threads)
        try:
            yield
        finally:
            torch.use_deterministic_algorithms(previous)
            torch.set_num_threads(previous_threads)


# -- the loop --------------------------------------------------------------------------


@dataclass
class _Run:
    """What one call of ``run`` works with, resolved and checked."""

    model: nn.Module  # the model as built (its parameters sharded in place under FSDP2)
    wrapped: nn.Module  # what forward runs through (DDP wrapper, or the model)
    world: World
    strategy: str
    settings: TrainSettings
    data: TokenData
    micro: int  # sequences per forward on one rank
    accum: int  # micro-batches per optimizer step on one rank
    out: Path | None
    autocast: Callable[[], contextlib.AbstractContextManager[Any]]


def run(
    model: nn.Module,
    data: TokenData,
    settings: TrainSettings,
    *,
    out: str | os.PathLike[str] | None = None,
    resume: bool = False,
    world: World | None = None,
    model_tokenizer: str | None = None,
    metadata: dict[str, Any] | None = None,
    on_step: Callable[[StepReport], None] | None = None,
) -> TrainResult:
    """Train ``model`` on ``data`` with ``settings``; the loop every entry point uses.

    ``out``: the folder of versions, metrics and training states (rank 0 writes); with
    ``resume`` the run continues from its newest version. ``world``: None joins the
    process group torchrun describes (a world of one without torchrun). The model is
    left in eval mode.
    """
    created = False
    if world is None:
        world, created = init_world()
    try:
        return _train(model, data, settings, out, resume, world, model_tokenizer, metadata or {}, on_step)
    finally:
        close_world(created)


def _train(
    model: nn.Module,
    data: TokenData,
    settings: TrainSettings,
    out_arg: str | os.PathLike[str] | None,
    resume: bool,
    world: World,
    model_tokenizer: str | None,
    metadata: dict[str, Any],
    on_step: Callable[[StepReport], None] | None,
) -> TrainResult:
    config = getattr(model, "config", None)
    _check_inputs(model, config, data, settings, model_tokenizer)
    micro, accum = _micro_batches(settings, world)
    out = _output_folder(out_arg, resume, world)
    state = _resume_state(model, config, data, settings, out) if resume and out is not None else None
    strategy = choose_strategy(settings.strategy, world, sum(p.numel() for p in model.parameters()))
    if settings.dtype == "fp16" and strategy == "fsdp":
        raise ConfigError(
            "dtype fp16 needs the single or ddp strategy (a grad scaler); use --dtype bf16 with --strategy fsdp"
        )
    low = torch.bfloat16 if settings.dtype == "bf16" else torch.float16 if settings.dtype == "fp16" else None
    wrapped = prepare_model(
        model,
        strategy,
        world,
        param_dtype=low if strategy == "fsdp" else None,
        compile=settings.compile,
        activation_checkpointing=settings.activation_checkpointing,
    )

    def autocast() -> contextlib.AbstractContextManager[Any]:
        if low is None or strategy == "fsdp":
            return contextlib.nullcontext()
        return torch.autocast(world.device.type, dtype=low)

    r = _Run(model, wrapped, world, strategy, settings, data, micro, accum, out, autocast)
    optimizer = torch.optim.AdamW(parameter_groups(model, settings.weight_decay), lr=settings.lr, betas=settings.betas)
    scaler = torch.amp.GradScaler(world.device.type) if settings.dtype == "fp16" else None
    sampler = WindowSampler(data.train, settings.seq_len, settings.seed)
    val_batches = validation_batches(data.val, settings)
    flops, peak = _flops_per_token(config, settings, world), _peak(settings, world)
    with deterministic(settings.seed + world.rank, settings.threads), _Metrics(r, state) as metrics:
        start, tokens = 0, 0
        curve: list[CurvePoint] = []
        if state is not None:
            start, tokens = state.step, state.tokens
            load_optimizer(model, optimizer, state.tensors, state.groups)
            _restore_random_state(state, sampler, scaler, world)
        else:
            curve.append(CurvePoint(0, None, _evaluate(r, val_batches)))
        wrapped.train()
        seconds, since_eval, losses, checkpoint = 0.0, [], [], None
        for step in range(start, settings.steps):
            began = time.perf_counter()
            lr = learning_rate(step, settings)
            for group in optimizer.param_groups:
                group["lr"] = lr
            value = _step(r, optimizer, scaler, sampler)
            spent = time.perf_counter() - began
            seconds += spent
            if not math.isfinite(value):
                raise ConfigError(
                    f"the training loss became {value} at step {step + 1}: training diverged; "
                    f"lower the learning rate (lr={settings.lr}) or raise warmup_steps"
                )
            done, tokens = step + 1, tokens + settings.tokens_per_step
            since_eval.append(value)
            losses.append(value)
            val_loss = None
            if done % settings.eval_every == 0 or done == settings.steps:
                val_loss = _evaluate(r, val_batches)
                curve.append(CurvePoint(done, sum(since_eval) / len(since_eval), val_loss))
                since_eval = []
            speed = settings.tokens_per_step / spent if spent else 0.0
            mfu = speed * 3 * flops / (world.size * peak * 1e12) if flops and peak else None
            report = StepReport(done, settings.steps, value, lr, tokens, speed, mfu, val_loss)
            metrics.write(report)
            if out is not None and (
                done == settings.steps or (settings.save_every and done % settings.save_every == 0)
            ):
                checkpoint = _save(r, optimizer, scaler, sampler, done, tokens, metadata)
                metrics.flush()
            if on_step is not None:
                on_step(report)
        if not curve:  # resumed a finished run: report where it stands
            curve.append(CurvePoint(start, None, _evaluate(r, val_batches)))
    model.eval()
    steps_run = settings.steps - start
    trained = steps_run * settings.tokens_per_step
    return TrainResult(curve, trained / seconds if seconds else 0.0, seconds, trained, checkpoint, losses)


def _check_inputs(
    model: nn.Module, config: Any, data: TokenData, settings: TrainSettings, model_tokenizer: str | None
) -> None:
    if isinstance(config, ModelConfig) and settings.seq_len > config.max_seq_len:
        raise ConfigError(
            f"seq_len={settings.seq_len} is over the model's max_seq_len={config.max_seq_len}; "
            f"use --seq-len {config.max_seq_len} or less (or --set max_seq_len=N for a new model)"
        )
    if model_tokenizer in TOKENIZERS and data.tokenizer in TOKENIZERS and model_tokenizer != data.tokenizer:
        raise InputError(
            f"the data was tokenized with {data.tokenizer!r} but the model was trained with {model_tokenizer!r}; "
            f"prepare the data with `zoo data prepare --tokenizer {model_tokenizer}`"
        )
    data.train.check(settings.seq_len, "training")
    data.val.check(settings.seq_len, "validation")
    vocab = getattr(config, "vocab_size", None)
    if vocab is not None and (top := data.max_token()) >= vocab:
        raise InputError(
            f"the data has token ids up to {top}, outside the model's vocabulary of {vocab}; build the model "
            f"with the data's vocab_size (--set vocab_size={top + 1}) or prepare the data with its tokenizer"
        )


def _micro_batches(settings: TrainSettings, world: World) -> tuple[int, int]:
    """Sequences per forward on one rank, and micro-batches per step on one rank."""
    micro = settings.micro_batch_size or settings.batch_size // world.size
    if micro == 0 or settings.batch_size % (micro * world.size):
        raise ConfigError(
            f"--batch-size {settings.batch_size} does not split into micro-batches of "
            f"--micro-batch-size {micro or settings.micro_batch_size} on {world.size} rank(s); make the batch "
            f"size a multiple of micro-batch size x ranks = {(micro or 1) * world.size}"
        )
    return micro, settings.batch_size // (micro * world.size)


def _output_folder(out: str | os.PathLike[str] | None, resume: bool, world: World) -> Path | None:
    """The out folder, checked: new or empty without ``resume``, holding versions with it."""
    if out is None:
        if resume:
            raise ConfigError("resume needs the run's folder: pass out=DIR (--out DIR)")
        return None
    folder = Path(out)
    if resume:
        if not folder.is_dir() or not versions(folder):
            raise CheckpointError(f"nothing to resume in {folder}: it holds no saved versions; drop --resume to start")
        return folder
    # A run stopped before its first save left only its own logs: start it again.
    if folder.exists() and (not folder.is_dir() or any(p.name not in _LOGS for p in folder.iterdir())):
        raise InputError(
            f"--out {folder} is not empty; pass --resume to continue the run in it, or choose a new folder"
        )
    barrier(world)  # every rank has looked before rank 0 creates it
    if world.is_main:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(f"cannot create --out {folder}: {err.strerror}; choose a writable folder") from err
    barrier(world)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise InputError(f"--out {folder} is not writable; choose a writable folder")
    return folder


def _resume_state(model: nn.Module, config: Any, data: TokenData, settings: TrainSettings, out: Path) -> TrainingState:
    """The newest version's weights loaded into ``model``, and its training state, checked."""
    newest = versions(out)[-1]
    state = read_state(state_path(newest.path))
    if config is not None and json.loads(state.config) != json.loads(config.model_dump_json()):
        raise ConfigError(
            f"cannot resume {out} with another model config; train the saved one (zoo train {out} --resume), "
            f"or start a new run in another --out folder"
        )
    saved, now = state.settings, settings.to_dict()
    changed = sorted(k for k in now if k not in _RESUMABLE_CHANGES and saved.get(k) != now[k])
    if changed:
        listing = ", ".join(f"{k}: {saved.get(k)!r} -> {now[k]!r}" for k in changed)
        raise ConfigError(
            f"cannot resume {out} with other training settings ({listing}); resume with the run's settings, "
            f"or start a new run in another --out folder"
        )
    if state.manifest_digest and data.digest and state.manifest_digest != data.digest:
        raise InputError(f"{out} was trained on other data (manifest digest differs); resume with the run's --data")
    saved_model = load(newest.path)
    model.load_state_dict(saved_model.state_dict())
    return state


def _restore_random_state(
    state: TrainingState, sampler: WindowSampler, scaler: torch.amp.GradScaler | None, world: World
) -> None:
    """The data cursor, and this rank's random state (a new rank's is derived from the
    seed and step, so a resume at another world size stays deterministic)."""
    sampler.set_state(state.tensors["data/cursor"])
    cpu = state.rng("cpu", world.rank)
    if cpu is not None:
        torch.set_rng_state(cpu)
    else:
        torch.manual_seed(state.settings["seed"] + world.rank + 1_000_003 * state.step)
    cuda = state.rng("cuda", world.rank)
    if cuda is not None and world.device.type == "cuda":
        torch.cuda.set_rng_state(cuda, world.device)
    if scaler is not None and "scaler/scale" in state.tensors:
        scaler.load_state_dict(
            {
                **scaler.state_dict(),
                "scale": float(state.tensors["scaler/scale"]),
                "_growth_tracker": int(state.tensors["scaler/growth_tracker"]),
            }
        )


def _step(
    r: _Run, optimizer: torch.optim.Optimizer, scaler: torch.amp.GradScaler | None, sampler: WindowSampler
) -> float:
    """One optimizer step on the next global batch; returns its mean loss over all ranks."""
    index = sampler.draw(r.settings.batch_size)  # the global batch, the same on every rank
    share = r.settings.batch_size // r.world.size
    mine = index[r.world.rank * share : (r.world.rank + 1) * share]
    optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=r.world.device)
    for j, part in enumerate(mine.split(r.micro)):
        x, y = sampler.windows(part)
        with gradient_sync(r.wrapped, j == r.accum - 1), r.autocast():
            loss = lm_loss(r.wrapped, x.to(r.world.device), y.to(r.world.device))
        scaled = loss / r.accum
        (scaler.scale(scaled) if scaler is not None else scaled).backward()
        total += loss.detach()
    if scaler is not None:
        scaler.unscale_(optimizer)
    if r.settings.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(list(r.wrapped.parameters()), r.settings.grad_clip)
    if scaler is not None:
        scaler.step(optimizer)
        scaler.update()
    else:
        optimizer.step()
    return float(all_sum(total, r.world) / (r.accum * r.world.size))


@torch.no_grad()
def _evaluate(r: _Run, batches: list[tuple[Tensor, Tensor]]) -> float:
    """Mean validation loss over ``batches``, each rank computing its share."""
    was_training = r.wrapped.training
    r.wrapped.eval()
    share = r.settings.batch_size // r.world.size
    losses = torch.zeros(len(batches), dtype=torch.float64, device=r.world.device)
    try:
        for i, (x, y) in enumerate(batches):
            lo = r.world.rank * share
            for xs, ys in zip(x[lo : lo + share].split(r.micro), y[lo : lo + share].split(r.micro)):
                with r.autocast():
                    loss = lm_loss(r.wrapped, xs.to(r.world.device), ys.to(r.world.device))
                losses[i] += loss.double() * xs.shape[0] / r.settings.batch_size
    finally:
        r.wrapped.train(was_training)
        reshard = getattr(r.wrapped, "reshard", None)  # FSDP2 keeps the root unsharded after
        if callable(reshard):  # a forward without backward: shard it again
            reshard()
    return float(all_sum(losses, r.world).mean())


def _flops_per_token(config: Any, settings: TrainSettings, world: World) -> float | None:
    """Forward FLOPs per token (from ``zoo.summary``) when a peak is known for MFU."""
    if not isinstance(config, ModelConfig) or _peak(settings, world) is None:
        return None
    return summarize(config, context=settings.seq_len).total_flops_per_token


def _peak(settings: TrainSettings, world: World) -> float | None:
    if settings.peak_tflops is not None:
        return float(settings.peak_tflops)
    if world.device.type == "cuda":
        name = torch.cuda.get_device_name(world.device)
        return next((peak for key, peak in PEAK_TFLOPS.items() if key in name), None)
    return None


def _save(
    r: _Run,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    sampler: WindowSampler,
    step: int,
    tokens: int,
    metadata: dict[str, Any],
) -> Path | None:
    """A new version in ``out`` and its training state; collective, rank 0 writes.

    The state is written first, then the version, so a version always has its state."""
    assert r.out is not None
    optim, groups = optimizer_tensors(r.model, optimizer)
    tensors = dict(optim)
    for rank, rng in enumerate(all_gather(torch.get_rng_state(), r.world)):
        tensors[f"rng/cpu/{rank}"] = rng
    if r.world.device.type == "cuda":
        for rank, rng in enumerate(all_gather(torch.cuda.get_rng_state(r.world.device), r.world)):
            tensors[f"rng/cuda/{rank}"] = rng
    tensors["data/cursor"] = sampler.state()
    if scaler is not None:
        tensors["scaler/scale"] = torch.tensor(scaler.get_scale())
        tensors["scaler/growth_tracker"] = torch.tensor(int(scaler.state_dict().get("_growth_tracker", 0)))
    full = None
    if r.strategy == "fsdp":
        from torch.distributed.checkpoint.state_dict import (  # on use: slow import
            StateDictOptions,
            get_model_state_dict,
        )

        full = cast(
            dict[str, Tensor],
            get_model_state_dict(r.model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)),
        )
    path = None
    if r.world.is_main:
        config = getattr(r.model, "config", None)
        state = TrainingState(
            step,
            tokens,
            r.settings.to_dict(),
            config.model_dump_json() if config is not None else "null",
            r.data.digest,
            r.world.size,
            tensors,
            groups,
        )
        existing = versions(r.out)
        number = (existing[-1].version if existing else 0) + 1
        write_state(state_path(r.out / f"v{number:04d}.safetensors"), state)
        training = {
            "step": step,
            "tokens": tokens,
            "tokenizer": r.data.tokenizer,
            "manifest_digest": r.data.digest,
            "data": r.data.source,
            "world_size": r.world.size,
            "strategy": r.strategy,
            "settings": r.settings.to_dict(),
        }
        path = save(_plain_model(r.model, full), r.out, metadata={**metadata, "training": training})
        if path.name != f"v{number:04d}.safetensors":
            raise CheckpointError(f"another process is saving into {r.out}; give each run its own --out folder")
        _prune(r.out, r.settings.keep_last)
    barrier(r.world)
    return path


def _plain_model(model: nn.Module, full: dict[str, Tensor] | None) -> nn.Module:
    """The model to ``zoo.save``: itself, or under FSDP2 a copy holding the gathered weights."""
    if full is None:
        return unwrap(model)
    config: ModelConfig = getattr(model, "config")  # noqa: B009  nn.Module's __getattr__ types it as Tensor
    copy = build(config, device="meta")
    copy.load_state_dict(full, assign=True)
    if hasattr(copy, "tie_weights"):
        copy.tie_weights()
    return copy


def _prune(out: Path, keep_last: int | None) -> None:
    """Remove all but the newest ``keep_last`` versions (each model file, then its state)."""
    if keep_last is None:
        return
    for old in versions(out)[:-keep_last]:
        old.path.unlink(missing_ok=True)
        state_path(old.path).unlink(missing_ok=True)


class _Metrics:
    """``out/metrics.jsonl`` (rank 0) and TensorBoard events when installed. A resumed
    run first drops the lines after its version's step, then appends."""

    def __init__(self, r: _Run, state: TrainingState | None) -> None:
        self.file: Any = None
        self.board: Any = None
        if r.out is None or not r.world.is_main:
            return
        path = r.out / METRICS
        if state is not None and path.is_file():
            kept = [line for line in path.read_text(encoding="utf-8").splitlines() if _line_step(line) <= state.step]
            write_atomically(
                path, lambda file: file.write_text("".join(f"{line}\n" for line in kept), encoding="utf-8")
            )
        self.file = open(path, "a" if state is not None else "w", encoding="utf-8")  # noqa: SIM115  closed in __exit__
        try:
            from torch.utils.tensorboard import (
                SummaryWriter,  # the optional `tensorboard` extra
            )
        except ImportError:
            return
        self.board = SummaryWriter(str(r.out / "tensorboard"))

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


def _line_step(line: str) -> int:
    try:
        return int(json.loads(line)["step"])
    except (ValueError, KeyError, TypeError):
        return 1 << 62  # a torn last line: dropped


# -- entry points ----------------------------------------------------------------------


def fit(
    model: nn.Module,
    train_tokens: Tensor | TokenData,
    val_tokens: Tensor | None,
    settings: TrainSettings,
    *,
    on_step: Callable[[int, float], None] | None = None,
) -> TrainResult:
    """Train ``model`` (token ids (B, S) -> (B, S, V)) in this process, on the model's
    device, without saving: on in-memory training and validation token ids, or on
    ``TokenData`` (a prepared folder's ``open_data``) given as ``train_tokens`` with
    ``val_tokens=None``.

    ``on_step(step, train_loss)`` is called after every update. The same seed gives the
    same data order for every model; on CPU the run is deterministic. The model is left
    in eval mode.
    """
    if isinstance(train_tokens, TokenData):
        if val_tokens is not None:
            raise InputError("fit takes TokenData with val_tokens=None: its validation split is the data's own")
        data = train_tokens
    else:
        if val_tokens is None:
            raise InputError("fit needs val_tokens with in-memory training tokens (or TokenData alone)")
        data = tokens_data(train_tokens, val_tokens)
    device = next(model.parameters()).device
    world = World(0, 1, 0, device)
    report = None if on_step is None else (lambda r: on_step(r.step, r.loss))
    return run(model, data, dataclasses.replace(settings, strategy="single"), world=world, on_step=report)


def train(
    model: nn.Module | str | os.PathLike[str],
    data: Any = None,
    settings: TrainSettings | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    resume: bool | str | os.PathLike[str] | None = None,
    overrides: dict[str, Any] | None = None,
    tokenizer: str | None = None,
    on_step: Callable[[StepReport], None] | None = None,
) -> TrainResult:
    """Train a model: a preset name (built with ``overrides`` and ``settings.seed``), a
    checkpoint file or folder (fine-tuning), or a model; on ``data``: a prepared folder,
    text files or folders (prepared into a cache), a ``Corpus``/``TokenData``, or None
    for the bundled Shakespeare.

    ``out``: where versions, training states and ``metrics.jsonl`` go. ``resume=True``
    (or ``resume=DIR``, which is then also ``out``) continues from the newest version
    exactly. Under torchrun every rank calls this; rank 0 writes.
    """
    settings = settings or TrainSettings()
    if resume not in (None, False, True):
        out = out if out is not None else resume  # type: ignore[assignment]
        if out is not None and Path(out) != Path(resume):  # type: ignore[arg-type]
            raise ConfigError(f"resume={resume!r} and out={out!r} name different folders; give one")
    resuming = bool(resume)
    module, model_tokenizer = _model_of(model, overrides or {}, settings, out if resuming else None)
    data_tokenizer = tokenizer or model_tokenizer or ("gpt2" if _gpt2_vocab(module) else "bytes")
    token_data = resolve_data(data, tokenizer=data_tokenizer)
    return run(
        module,
        token_data,
        settings,
        out=out,
        resume=resuming,
        model_tokenizer=model_tokenizer,
        metadata={"source": str(model) if not isinstance(model, nn.Module) else type(model).__name__},
        on_step=on_step,
    )


def _gpt2_vocab(model: nn.Module) -> bool:
    return getattr(getattr(model, "config", None), "vocab_size", 0) >= 50257


def _model_of(
    model: nn.Module | str | os.PathLike[str], overrides: dict[str, Any], settings: TrainSettings, resume_from: Any
) -> tuple[nn.Module, str | None]:
    """The model to train and the tokenizer it was trained with (when a checkpoint says)."""
    if isinstance(model, nn.Module):
        if overrides:
            raise ConfigError("overrides apply to a preset name or checkpoint, not to a built model")
        return model, None
    if not isinstance(model, (str, os.PathLike)):
        raise ConfigError(f"train() takes a preset name, a checkpoint path or a model, got {type(model).__name__}")
    path = Path(model)
    if path.exists():
        meta = versions(path)[-1].metadata if path.is_dir() else inspect(path, verify=False).metadata
        loaded = load(path)
        if overrides:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(settings.seed)
                rebuilt = build(resolve_config(loaded.config, overrides))
            try:
                rebuilt.load_state_dict(loaded.state_dict())
            except RuntimeError as err:
                raise ConfigError(f"the overrides change the shape of {path}'s weights: {err}") from err
            loaded = rebuilt
        return loaded.train(), _trained_tokenizer(meta)
    trained = None
    if resume_from is not None and Path(resume_from).is_dir() and (saved := versions(resume_from)):
        trained = _trained_tokenizer(saved[-1].metadata)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(settings.seed)
        return build(str(model), **overrides), trained


def _trained_tokenizer(metadata: dict[str, Any]) -> str | None:
    training = metadata.get("training")
    return training.get("tokenizer") if isinstance(training, dict) else None
