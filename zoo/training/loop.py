"""The training loop: the one place the zoo trains a model, in the nanoGPT manner.

- AdamW, decay on matrices only; linear warmup, then cosine decay to ``min_lr_ratio * lr``;
  gradients clipped on the global norm (``clip_grad_norm_`` is right under FSDP2, where
  the gradients are DTensors).
- ``batch_size`` sequences per optimizer step over all ranks, ``micro_batch_size`` per
  forward on one rank, accumulated ``batch_size / (micro_batch_size * world_size)`` times.
  Every step trains on the same windows whatever the world size (``WindowSampler``).
- autocast in bf16, or in fp16 with a grad scaler (CPU or CUDA); under FSDP2 a
  ``MixedPrecisionPolicy`` instead (bf16 only). Optional ``torch.compile`` and
  activation checkpointing per block.
- validation loss every ``eval_every`` steps (and before the first); every
  ``save_every`` steps and at the end a ``zoo.save`` version in ``out`` plus its training
  state (``zoo.training.state``): the optimizer's and that of each stateful part
  (``zoo.training.stateful``: schedule, data cursor, grad scaler, random state);
  ``resume`` continues from the newest version, exactly. A loss that becomes NaN or
  infinite stops the run with a ``DivergenceError``.
- deterministic on CPU: deterministic kernels while training, the random state forked
  from, and restored to, the caller's, and the thread count pinnable (``threads``).

The entry points: ``train`` takes a preset name, a checkpoint or a model and any data
``resolve_data`` accepts, and saves into ``out``; ``fit`` trains a built model in one
process on in-memory token ids or ``TokenData`` (what ``ablate`` uses), saving nothing;
both go through ``run_loop``, the loop itself, given ``TokenData`` and a world.

Beside the loop: ``settings`` (``TrainSettings``), ``optimization`` (AdamW's groups, the
loss), ``stateful`` (the parts a resume restores), ``checkpointing`` (save, resume),
``metrics`` (``metrics.jsonl``, MFU) and ``models`` (what ``train`` is given, resolved).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import secrets
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from zoo.bounds import check_elements
from zoo.checkpoint.owned import refuse_inputs_inside
from zoo.errors import ConfigError, DivergenceError, InputError, check_flag, checked_types, printable
from zoo.nn.config import ModelConfig
from zoo.training.checkpointing import output_folder, resume_caveats, resume_state, save_version
from zoo.training.choices import check_loggers
from zoo.training.data import resolve_data, tokenizer_mismatch, tokenizer_name
from zoo.training.distributed import (
    World,
    agree,
    all_sum,
    broadcast_text,
    choose_strategy,
    close_world,
    collective_errors,
    gradient_sync,
    init_world,
    prepare_model,
)
from zoo.training.manifest import TOKENIZERS
from zoo.training.metrics import (
    MetricsWriter,
    StepReport,
    device_peak_tflops,
    flops_per_token,
)
from zoo.training.models import gpt2_vocab, model_of
from zoo.training.optimization import PRECISIONS, deterministic, lm_loss, make_optimizer
from zoo.training.sampling import TokenData, WindowSampler, tokens_data, validation_batches
from zoo.training.settings import TrainSettings
from zoo.training.state import TrainingState, load_optimizer
from zoo.training.stateful import RandomState, ScalerState, Schedule, Stateful, restore

__all__ = ["CurvePoint", "TrainResult", "fit", "run_loop", "train"]


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


# -- the loop --------------------------------------------------------------------------


@dataclass
class _Run:
    """What one call of ``run_loop`` works with, resolved and checked."""

    model: nn.Module  # the model as built (its parameters sharded in place under FSDP2)
    wrapped: nn.Module  # what forward runs through (DDP wrapper, or the model)
    world: World
    strategy: str
    settings: TrainSettings
    data: TokenData
    micro: int  # sequences per forward on one rank
    accum: int  # micro-batches per optimizer step on one rank
    out: Path | None
    low: torch.dtype | None  # autocast's dtype (bf16, fp16), None for fp32 or under FSDP2
    optimizer: torch.optim.Optimizer
    scaler: torch.amp.GradScaler  # enabled for fp16 only
    sampler: WindowSampler
    schedule: Schedule
    val_batches: list[tuple[Tensor, Tensor]]
    flops: float | None  # forward FLOPs per token, when a peak is known for MFU
    peak: float | None  # the device's peak TFLOP/s, for MFU

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        if self.low is None:
            return contextlib.nullcontext()
        return torch.autocast(self.world.device.type, dtype=self.low)

    @property
    def states(self) -> dict[str, Stateful]:
        """The stateful parts a save collects and a resume restores, in restore order
        (the schedule first: a new rank's random state derives from its step)."""
        return {
            "schedule": self.schedule,
            "data": self.sampler,
            "scaler": ScalerState(self.scaler),
            "rng": RandomState(self.world, self.settings.seed, self.schedule),
        }


def run_loop(
    model: nn.Module,
    data: TokenData,
    settings: TrainSettings,
    *,
    out: str | os.PathLike[str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    world: World | None = None,
    model_tokenizer: str | None = None,
    metadata: dict[str, Any] | None = None,
    on_step: Callable[[StepReport], None] | None = None,
    log: Sequence[str] = (),
) -> TrainResult:
    """Train ``model`` on ``data`` with ``settings``; the loop every entry point uses.

    ``out``: the folder of versions, metrics and training states (rank 0 writes); with
    ``resume`` the run continues from its newest version, with ``overwrite`` a new run
    replaces what the folder held (swapped in whole); ``log`` names loggers beside
    ``metrics.jsonl`` (``csv``, ``tensorboard``, ``wandb``). ``world``: None joins the
    process group torchrun describes (a world of one without torchrun). The model is
    left in eval mode.
    """
    created = False
    if world is None:
        world, created = init_world()
    try:
        check_loggers(log)
        with collective_errors(world), contextlib.ExitStack() as stack:  # the stack holds --out's lock
            r, state = _prepare(model, data, settings, (out, resume, overwrite), world, model_tokenizer, stack)
            run_id = state.run_id if state is not None and state.run_id else broadcast_text(secrets.token_hex(8), world)
            return _loop(r, state, {**(metadata or {}), "run_id": run_id}, on_step, log)
    finally:
        close_world(created)


def _prepare(
    model: nn.Module,
    data: TokenData,
    settings: TrainSettings,
    folder: tuple[str | os.PathLike[str] | None, bool, bool],
    world: World,
    model_tokenizer: str | None,
    stack: contextlib.ExitStack,
) -> tuple[_Run, TrainingState | None]:
    """The run checked and set up: the folder (claimed until ``stack`` closes), the
    strategy, the optimizer and the stateful parts; with ``resume`` the newest version's
    weights loaded and its state. ``folder`` is ``(out, resume, overwrite)``. Every rank
    is checked to run the same run first."""
    out_arg, resume, overwrite = folder
    config = getattr(model, "config", None)
    _check_inputs(model, config, data, settings, model_tokenizer)
    micro, accum = _micro_batches(settings, world)
    _check_sizes(config, settings, micro, world.device)
    out = output_folder(out_arg, resume, world, stack, overwrite=overwrite)
    state = resume_state(model, config, data, settings, out) if resume and out is not None else None
    if state is not None and world.is_main:
        for caveat in resume_caveats(state, settings, world.size, config):
            warnings.warn(f"resuming {out}: {caveat}", UserWarning, stacklevel=2)
    strategy = choose_strategy(settings.strategy, world, sum(p.numel() for p in model.parameters()))
    if settings.dtype == "fp16" and strategy == "fsdp":
        raise ConfigError(
            "dtype fp16 needs the single or ddp strategy (a grad scaler); use --dtype bf16 with --strategy fsdp"
        )
    agree(world, settings, data, config, out_arg, resume)  # every rank the same run, before the first collective step
    low = PRECISIONS[settings.dtype]
    wrapped = prepare_model(
        model,
        strategy,
        world,
        param_dtype=low if strategy == "fsdp" else None,
        compile=settings.compile,
        activation_checkpointing=settings.activation_checkpointing,
    )
    optimizer = make_optimizer(model, settings, strategy)
    r = _Run(
        model,
        wrapped,
        world,
        strategy,
        settings,
        data,
        micro,
        accum,
        out,
        None if strategy == "fsdp" else low,  # FSDP2's MixedPrecisionPolicy casts instead
        optimizer,
        torch.amp.GradScaler(world.device.type, enabled=settings.dtype == "fp16"),
        WindowSampler(data.train, settings.seq_len, settings.seed),
        Schedule(settings),
        validation_batches(data.val, settings),
        flops_per_token(config, settings, world),
        device_peak_tflops(settings, world),
    )
    return r, state


def _loop(
    r: _Run,
    state: TrainingState | None,
    metadata: dict[str, Any],
    on_step: Callable[[StepReport], None] | None,
    log: Sequence[str] = (),
) -> TrainResult:
    """Train from the start (after a first evaluation) or from ``state``, to ``settings.steps``."""
    settings, world = r.settings, r.world
    resumed_at = state.step if state is not None else None
    with (
        deterministic(settings.seed + world.rank, settings.threads),
        MetricsWriter(r.out, world.is_main, resumed_at, log, settings) as metrics,
    ):
        curve: list[CurvePoint] = []
        if state is not None:
            load_optimizer(r.model, r.optimizer, state.tensors, state.groups)
            restore(r.states, state.parts())
        else:
            curve.append(CurvePoint(0, None, _evaluate(r, r.val_batches)))
        start = r.schedule.step
        r.wrapped.train()
        seconds, losses, checkpoint = _updates(r, curve, metrics, metadata, on_step)
        if not curve:  # resumed a finished run: report where it stands
            curve.append(CurvePoint(start, None, _evaluate(r, r.val_batches)))
    r.model.eval()
    trained = (settings.steps - start) * settings.tokens_per_step
    return TrainResult(curve, trained / seconds if seconds else 0.0, seconds, trained, checkpoint, losses)


def _updates(
    r: _Run,
    curve: list[CurvePoint],
    metrics: MetricsWriter,
    metadata: dict[str, Any],
    on_step: Callable[[StepReport], None] | None,
) -> tuple[float, list[float], Path | None]:
    """The optimizer steps left, each reported, evaluated and saved when due; returns the
    seconds spent in them, their losses and the last version saved."""
    settings, world, schedule = r.settings, r.world, r.schedule
    flops, peak = r.flops, r.peak
    seconds, since_eval, losses, checkpoint = 0.0, [], [], None
    while schedule.step < settings.steps:
        began = time.perf_counter()
        lr = schedule.lr
        for group in r.optimizer.param_groups:
            group["lr"] = lr
        value = _step(r)
        spent = time.perf_counter() - began
        seconds += spent
        if not math.isfinite(value):
            raise DivergenceError(
                f"the training loss became {value} at step {schedule.step + 1}: training diverged; "
                f"lower the learning rate (lr={settings.lr}) or raise warmup_steps"
            )
        schedule.advance()
        done = schedule.step
        since_eval.append(value)
        losses.append(value)
        val_loss = None
        if done % settings.eval_every == 0 or done == settings.steps:
            val_loss = _evaluate(r, r.val_batches)
            curve.append(CurvePoint(done, sum(since_eval) / len(since_eval), val_loss))
            since_eval = []
        speed = settings.tokens_per_step / spent if spent else 0.0
        mfu = speed * 3 * flops / (world.size * peak * 1e12) if flops and peak else None
        report = StepReport(done, settings.steps, value, lr, schedule.tokens, speed, mfu, val_loss)
        metrics.write(report)
        if r.out is not None and (done == settings.steps or (settings.save_every and done % settings.save_every == 0)):
            checkpoint = save_version(
                r.out, r.model, world, r.strategy, settings, r.data, r.optimizer, r.states, metadata
            )
            metrics.flush()
        if on_step is not None:
            on_step(report)
    return seconds, losses, checkpoint


def _check_inputs(
    model: nn.Module, config: Any, data: TokenData, settings: TrainSettings, model_tokenizer: str | None
) -> None:
    if isinstance(config, ModelConfig) and settings.seq_len > config.max_seq_len:
        raise ConfigError(
            f"seq_len={settings.seq_len} is over the model's max_seq_len={config.max_seq_len}; "
            f"use --seq-len {config.max_seq_len} or less (or --set max_seq_len=N for a new model)"
        )
    if model_tokenizer is not None and (used := tokenizer_mismatch(model_tokenizer, data)) is not None:
        raise InputError(
            f"the data was tokenized with {used} but the model was trained with {tokenizer_name(model_tokenizer)}; "
            f"prepare the data with `zoo data prepare --tokenizer {printable(model_tokenizer)}`, or give its raw "
            f"text as --data (prepared with the model's tokenizer)"
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


def _check_sizes(config: Any, settings: TrainSettings, micro: int, device: torch.device) -> None:
    """Refuse batch sizes this machine cannot hold, before the folder, the batches or the
    optimizer are made: a step's windows and the validation windows (int64, each made
    twice: rows, then stacked) in RAM, and on ``device`` one forward's logits and the
    residual stream each block keeps for backward (a lower bound of the activations)."""
    window = 2 * 8 * (settings.seq_len + 1)
    check_elements(settings.batch_size, window, "one step's training windows", "--batch-size")
    check_elements(
        settings.eval_batches * settings.batch_size, window, "the validation windows (--eval-batches x --batch-size)",
        "--eval-batches",
    )  # fmt: skip
    vocab, d_model, layers = (getattr(config, name, 0) or 0 for name in ("vocab_size", "d_model", "n_layers"))
    itemsize = 4 if settings.dtype == "fp32" else 2
    check_elements(
        micro * settings.seq_len * (vocab + layers * d_model), itemsize,
        "one forward's logits and residual stream (--micro-batch-size, else --batch-size, x --seq-len)",
        "--batch-size" if settings.micro_batch_size is None else "--micro-batch-size", device=device,
    )  # fmt: skip


def _step(r: _Run) -> float:
    """One optimizer step on the next global batch; returns its mean loss over all ranks.
    The grad scaler is a no-op unless enabled (fp16)."""
    index = r.sampler.draw(r.settings.batch_size)  # the global batch, the same on every rank
    share = r.settings.batch_size // r.world.size
    mine = index[r.world.rank * share : (r.world.rank + 1) * share]
    r.optimizer.zero_grad(set_to_none=True)
    total = torch.zeros((), device=r.world.device)
    for j, part in enumerate(torch.split(mine, r.micro)):
        x, y = r.sampler.windows(part)
        with gradient_sync(r.wrapped, j == r.accum - 1), r.autocast():
            loss = lm_loss(r.wrapped, x.to(r.world.device), y.to(r.world.device))
        torch.autograd.backward(r.scaler.scale(loss / r.accum))
        total += loss.detach()
    r.scaler.unscale_(r.optimizer)
    if r.settings.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(list(r.wrapped.parameters()), r.settings.grad_clip)
    r.scaler.step(r.optimizer)
    r.scaler.update()
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
            for xs, ys in zip(torch.split(x[lo : lo + share], r.micro), torch.split(y[lo : lo + share], r.micro)):
                with r.autocast():
                    loss = lm_loss(r.wrapped, xs.to(r.world.device), ys.to(r.world.device))
                losses[i] += loss.double() * xs.shape[0] / r.settings.batch_size
    finally:
        r.wrapped.train(was_training)
        reshard = getattr(r.wrapped, "reshard", None)  # FSDP2 keeps the root unsharded after
        if callable(reshard):  # a forward without backward: shard it again
            reshard()
    return float(all_sum(losses, r.world).mean())


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
    return run_loop(model, data, dataclasses.replace(settings, strategy="single"), world=world, on_step=report)


@checked_types()
def train(
    model: nn.Module | str | os.PathLike[str],
    data: Any = None,
    settings: TrainSettings | None = None,
    *,
    out: str | os.PathLike[str] | None = None,
    resume: bool | str | os.PathLike[str] | None = None,
    overwrite: bool = False,
    overrides: dict[str, Any] | None = None,
    tokenizer: str | None = None,
    on_step: Callable[[StepReport], None] | None = None,
    log: Sequence[str] = (),
) -> TrainResult:
    """Train a model: a preset name (built with ``overrides`` and ``settings.seed``), a
    checkpoint file or folder (fine-tuning), or a model; on ``data``: a prepared folder,
    text files or folders (prepared into a cache), a ``Corpus``/``TokenData``, or None
    for the bundled Shakespeare.

    ``out``: where versions, training states and ``metrics.jsonl`` go (and the loggers
    ``log`` names: ``csv``, ``tensorboard``, ``wandb``). ``resume=True``
    (or ``resume=DIR``, which is then also ``out``) continues from the newest version
    exactly; ``overwrite=True`` starts a new run in ``out`` whatever it held, replacing the
    folder whole. Under torchrun every rank calls this; rank 0 writes.
    """
    check_flag(overwrite, "overwrite")
    if resume is not None and not isinstance(resume, (bool, str, os.PathLike)):
        raise InputError(f"resume must be True, False, None or the run folder to resume, got {resume!r}")
    settings = settings or TrainSettings()
    if overwrite is True and out is not None:  # what overwrite would remove must not be what the run reads
        refuse_inputs_inside(out, [("model", model), ("data", data), ("tokenizer", tokenizer)], InputError)
    if resume not in (None, False, True):
        out = out if out is not None else resume  # type: ignore[assignment]
        if out is not None and Path(out) != Path(resume):  # type: ignore[arg-type]
            raise ConfigError(f"resume={resume!r} and out={out!r} name different folders; give one")
    resuming = bool(resume)
    module, model_tokenizer = model_of(
        model, overrides or {}, settings, out if resuming else None, tokenizer is not None
    )
    data_tokenizer = tokenizer or model_tokenizer or ("gpt2" if gpt2_vocab(module) else "bytes")
    token_data = resolve_data(data, tokenizer=data_tokenizer)
    if tokenizer in TOKENIZERS and token_data.tokenizer in TOKENIZERS and token_data.tokenizer != tokenizer:
        raise InputError(  # a prepared folder keeps its own tokenizer: the one asked for would be ignored
            f"the data {token_data.source} was prepared with the tokenizer {token_data.tokenizer!r}, but "
            f"{tokenizer!r} was asked for (--tokenizer); drop --tokenizer to train on the data as prepared, or "
            f"prepare it again with `zoo data prepare --tokenizer {tokenizer}`"
        )
    return run_loop(
        module,
        token_data,
        settings,
        out=out,
        resume=resuming,
        overwrite=overwrite,
        model_tokenizer=model_tokenizer,
        metadata={"source": str(model) if not isinstance(model, nn.Module) else type(model).__name__},
        on_step=on_step,
        log=log,
    )
