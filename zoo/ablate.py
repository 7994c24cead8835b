"""Ablations: which of the differences between two designs matter, measured by training
with several seeds, so that every difference comes with a confidence interval.

``run_ablation("transformer-2017", "gpt2-small")`` lists the differences between the
two configs (``diff_configs``), then trains at one small scale shared by every run:

- the base design, the base with each single difference swapped to the target's
  choice, and the target design; or, with ``path``, the base, base + swap 1, base +
  swaps 1-2, ... and the target (a cumulative path, which shows interactions);
- each variant with seeds ``seed .. seed + seeds - 1``: a seed fixes the init and the
  data order, and the same seed gives every variant the same data in the same order;
- every run with the same token budget, at one learning rate or, with ``tune_lr``, at
  the best rate of a short sweep of its own (a fraction of the budget, one seed).

Per variant it reports the mean final validation loss with a 95% Student t interval,
and the difference to the base paired over matching seeds, with its interval and
p-value (``zoo.stats``); a swap is significant when that interval excludes 0 (and
the difference is not float rounding, ``MIN_EFFECT``). Sizes
(d_model, layers, heads, d_ff, context) are set by the shared scale and the vocabulary
by the data, so they are reported as differences but never swapped.

The data: the bundled Shakespeare or a text file, tokenised in memory with a small
vocabulary, or a folder prepared by ``zoo data prepare`` (``zoo.training.open_data``),
whose tokenizer and vocabulary every run then uses.

Runs are independent, so they run in ``workers`` processes (or over the ranks of a
``torchrun`` launch) with the same numbers as one after another. Each run leaves its
checkpoint and a record of its curve in the output folder; a restarted ablation reads
the finished ones back and trains only the rest. The report: ``ablation.json``,
``ablation.png`` (curves with bands), ``deltas.png`` (paired differences with error
bars) and ``report.md``.
"""

from __future__ import annotations

import datetime
import json
import math
import multiprocessing
import os
import re
import shlex
from collections.abc import Callable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from queue import Empty
from typing import Any

import torch
import torch.distributed

from zoo._version import __version__
from zoo.checkpoint import save
from zoo.config import ModelConfig, resolve_config
from zoo.errors import ConfigError, InputError, ZooError, printable
from zoo.factory import build
from zoo.registry import KINDS, Registry, default_registry
from zoo.stats import Interval, mean_interval, paired_difference
from zoo.summary import summarize
from zoo.training import (
    CurvePoint,
    TokenData,
    TrainSettings,
    bundled_corpus,
    fit,  # the zoo's one training loop: every run goes through here
    load_corpus,
    open_data,
    read_text,
    tokens_data,
)

# The order of rows in a comparison: architecture, components, switches, then sizes.
AXES: tuple[str, ...] = (
    "architecture",
    "attention",
    "position",
    "activation",
    "placement",
    "norm",
    "mlp",
    "init",
    "embedding_scale",
    "head_output",
    "tie_embeddings",
    "final_norm",
    "bias",
    "norm_eps",
    "dropout",
    "vocab_size",
    "max_seq_len",
    "d_model",
    "n_layers",
    "n_encoder_layers",
    "n_heads",
    "d_ff",
)

#: Differences the shared training scale overrides, so an ablation never swaps them.
SIZE_AXES = frozenset({"vocab_size", "max_seq_len", "d_model", "n_layers", "n_encoder_layers", "n_heads", "d_ff"})

#: The default scale: each of the nine runs of transformer-2017 -> gpt2-small takes a
#: few seconds of one CPU core (GPT-2 tokens with a 1024 + 256 vocabulary, or bytes).
DEFAULT_SCALE: dict[str, Any] = {
    "d_model": 64,
    "layers": 2,
    "heads": 4,
    "seq_len": 64,
    "steps": 150,
    "batch": 16,
    "lr": 3e-3,
    "eval_every": 25,
}
#: The scale of ``make demo``: the same runs, a fraction of the steps.
DEMO_SCALE: dict[str, Any] = {
    "d_model": 48,
    "layers": 2,
    "heads": 4,
    "seq_len": 48,
    "steps": 60,
    "batch": 12,
    "lr": 4e-3,
    "eval_every": 15,
}
#: Seeds per variant by default: the fewest that give an interval worth reading.
DEFAULT_SEEDS = 3
#: ``tune_lr``'s default grid: the learning rate times these (log-spaced, factor 2).
LR_GRID_FACTORS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0)
#: ``tune_lr``'s default budget: this fraction of the steps, one seed.
TUNE_FRACTION = 0.25
#: The sweep's seed is the first seed plus this: not a compared seed, and the same
#: whatever the number of seeds (so adding seeds reuses the sweep).
TUNE_SEED_OFFSET = 1000
#: Confidence level of every interval.
LEVEL = 0.95
#: Paired differences smaller than this (nats/token) are float rounding, not effects:
#: a swap that computes the same loss another way (head_output=logits) differs by ~1e-7,
#: consistently enough over seeds for its interval to exclude 0. Never marked significant.
MIN_EFFECT = 1e-4
#: Training FLOPs per token as a multiple of the forward FLOPs (backward ~ 2x forward).
TRAIN_FLOPS_FACTOR = 3

ProgressCallback = Callable[[str, int, int, float | None], None]

# -- results -------------------------------------------------------------------------


@dataclass(frozen=True)
class SeedRun:
    """One trained model: a variant at one seed, with its checkpoint."""

    seed: int
    final_val_loss: float
    curve: list[CurvePoint]
    tokens_per_second: float
    checkpoint: Path
    reused: bool = False  # read back from an earlier, interrupted ablation

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "final_val_loss": self.final_val_loss,
            "curve": _curve_dict(self.curve),
            "tokens_per_second": self.tokens_per_second,
            "checkpoint": str(self.checkpoint),
        }


@dataclass(frozen=True)
class TuneRun:
    """One short run of the learning-rate sweep; ``final_val_loss`` is None when it diverged."""

    lr: float
    final_val_loss: float | None

    def to_dict(self) -> dict[str, Any]:
        return {"lr": self.lr, "final_val_loss": self.final_val_loss, "diverged": self.final_val_loss is None}


@dataclass
class AblationRun:
    """One variant of an ablation, trained once per seed.

    ``axis`` is ``"base"``, ``"target"`` or the config field swapped to the target's
    value (on a cumulative path: the field this row adds). ``loss`` is the final
    validation loss over the seeds; ``delta_vs_base`` the paired difference to the
    base (negative: better than the base); ``delta_vs_previous`` on a path, the paired
    difference to the row before (what adding this swap did). ``flops_per_token`` is
    the forward pass at the training context; ``train_flops`` one seed's training
    (``TRAIN_FLOPS_FACTOR`` x forward x tokens). ``tune`` holds the sweep that chose
    ``lr`` (empty without ``tune_lr``).
    """

    name: str
    axis: str
    config: ModelConfig
    lr: float
    seeds: list[SeedRun]
    loss: Interval
    delta_vs_base: Interval
    delta_vs_previous: Interval | None
    parameters: int
    flops_per_token: float
    train_flops: float
    tune: list[TuneRun] = field(default_factory=list)

    @property
    def final_val_loss(self) -> float:
        """The mean final validation loss over the seeds."""
        return self.loss.mean

    @property
    def perplexity(self) -> float:
        return math.exp(self.loss.mean) if self.loss.mean < 700 else math.inf

    @property
    def checkpoint(self) -> Path:
        """The first seed's checkpoint."""
        return self.seeds[0].checkpoint

    @property
    def significant(self) -> bool:
        """Whether this row's difference (to the base; on a path, to the row before) has
        an interval that excludes 0 and is at least ``MIN_EFFECT``."""
        delta = self.delta_vs_previous or self.delta_vs_base
        return self.axis != "base" and delta.significant and abs(delta.mean) >= MIN_EFFECT

    def losses(self) -> list[float]:
        return [s.final_val_loss for s in self.seeds]

    def mean_curve(self, level: float = LEVEL) -> list[tuple[int, Interval]]:
        """Validation loss at each evaluated step, as a mean and interval over the seeds."""
        steps = [p.step for p in self.seeds[0].curve]
        return [(step, mean_interval([s.curve[i].val_loss for s in self.seeds], level)) for i, step in enumerate(steps)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axis": self.axis,
            "config": self.config.model_dump(mode="json"),
            "lr": self.lr,
            "final_val_loss": self.loss.to_dict(),
            "perplexity": self.perplexity,
            "delta_vs_base": self.delta_vs_base.to_dict(),
            "delta_vs_previous": self.delta_vs_previous.to_dict() if self.delta_vs_previous else None,
            "parameters": self.parameters,
            "flops_per_token": self.flops_per_token,
            "train_flops": self.train_flops,
            "significant": self.significant,
            "tune": [t.to_dict() for t in self.tune],
            "seeds": [s.to_dict() for s in self.seeds],
            "mean_curve": [{"step": step, **ci.to_dict()} for step, ci in self.mean_curve()],
        }


@dataclass
class AblationResult:
    """Every run of an ablation, its statistics, and where the outputs are.

    ``runs`` are in plan order (base, swaps in ``AXES`` order or path order, target);
    ``rows()`` gives the table's order. ``trained``/``reused`` name the runs trained
    now and those read back from an earlier, interrupted ablation in the same folder.
    A plot path is None when it could not be drawn; ``notes`` then says why (and
    records anything else worth knowing, such as a swap that could not be built).
    """

    base: str
    target: str
    mode: str  # "swaps" (each single swap) or "path" (cumulative)
    differences: list[tuple[str, Any, Any]]
    runs: list[AblationRun]
    settings: TrainSettings  # shared by every run; its seed is the first, its lr the base rate
    seeds: list[int]
    scale: dict[str, int]  # d_model, layers, heads shared by every run
    data: dict[str, Any]
    tuning: dict[str, Any] | None  # grid, steps, seed of the sweep; None without tune_lr
    command: str
    version: str
    order: str  # "effect" or "plan": the order of rows()
    results_path: Path
    plot_path: Path | None
    delta_plot_path: Path | None
    report_path: Path | None
    notes: list[str] = field(default_factory=list)
    trained: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    main_process: bool = True  # False on ranks > 0 of a torchrun launch (rank 0 writes the report)

    def run(self, name_or_axis: str) -> AblationRun:
        """The run called ``name_or_axis``, or the one that swapped that axis."""
        for run in self.runs:
            if name_or_axis in (run.name, run.axis):
                return run
        names = ", ".join(repr(n) for run in self.runs for n in dict.fromkeys((run.name, run.axis)))
        raise InputError(f"this ablation has no run or axis {name_or_axis!r}; it has {names}")

    def rows(self, order: str | None = None) -> list[AblationRun]:
        """The runs in table order: ``"effect"`` puts the swaps between base and target by
        the size of their effect, largest first; ``"plan"`` keeps the plan's (§08) order.
        A cumulative path always keeps its order."""
        order = order or self.order
        if order not in ORDERS:
            raise InputError(f"unknown row order {order!r}; use one of {', '.join(ORDERS)}")
        if order == "plan" or self.mode == "path":
            return list(self.runs)
        middle = sorted(self.runs[1:-1], key=lambda r: -abs(r.delta_vs_base.mean))
        return [self.runs[0], *middle, self.runs[-1]]

    @property
    def total_train_flops(self) -> float:
        main = sum(run.train_flops * len(run.seeds) for run in self.runs)
        tune_steps = self.tuning["steps"] if self.tuning else 0
        per_step = self.settings.tokens_per_step * TRAIN_FLOPS_FACTOR
        return main + sum(run.flops_per_token * per_step * tune_steps * len(run.tune) for run in self.runs)

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "target": self.target,
            "mode": self.mode,
            "differences": [
                {"axis": axis, "base": a, "target": b, "swapped": axis not in SIZE_AXES}
                for axis, a, b in self.differences
            ],
            "scale": self.scale,
            "settings": {**self.settings.__dict__, "betas": list(self.settings.betas)},
            "seeds": self.seeds,
            "level": LEVEL,
            "tuning": self.tuning,
            "budget": {
                "tokens_per_run": self.settings.steps * self.settings.tokens_per_step,
                "train_flops_factor": TRAIN_FLOPS_FACTOR,
                "total_train_flops": self.total_train_flops,
            },
            "data": self.data,
            "command": self.command,
            "zoo_version": self.version,
            "order": self.order,
            "table": [run.name for run in self.rows()],
            "runs": [run.to_dict() for run in self.runs],
            "plots": {
                "curves": str(self.plot_path) if self.plot_path else None,
                "deltas": str(self.delta_plot_path) if self.delta_plot_path else None,
            },
            "report": str(self.report_path) if self.report_path else None,
            "notes": self.notes,
        }


ORDERS = ("effect", "plan")


def _curve_dict(curve: list[CurvePoint]) -> list[dict[str, Any]]:
    return [{"step": p.step, "train_loss": p.train_loss, "val_loss": p.val_loss} for p in curve]


# -- differences ---------------------------------------------------------------------


def diff_configs(a: ModelConfig, b: ModelConfig, *, registry: Registry | None = None) -> list[tuple[str, Any, Any]]:
    """The fields where ``a`` and ``b`` differ, as ``(axis, value_a, value_b)``, in the
    order of ``AXES``.

    Components appear by name, with any option that differs from its default in
    brackets (``"sinusoidal"``, ``"gqa(n_kv_heads=2)"``); dropout as a number when its
    three rates agree; every other field as its value.
    """
    registry = registry or default_registry()
    rows = []
    for axis in (*AXES, *(name for name in ModelConfig.model_fields if name not in AXES)):
        value_a, value_b = _shown(a, axis, registry), _shown(b, axis, registry)
        if value_a != value_b:
            rows.append((axis, value_a, value_b))
    return rows


def _shown(config: ModelConfig, axis: str, registry: Registry) -> Any:
    value = getattr(config, axis)
    if axis in KINDS:
        options = value.options
        try:
            defaults = registry.get(axis, value.name).options_model().model_dump()
        except (ZooError, ValueError):  # a component whose options have no defaults
            defaults = {}
        changed = {k: v for k, v in options.items() if defaults.get(k, object()) != v}
        return f"{value.name}({', '.join(f'{k}={v!r}' for k, v in changed.items())})" if changed else value.name
    if axis == "dropout":
        rates = value.model_dump()
        return rates["embedding"] if len(set(rates.values())) == 1 else rates
    return value


def _swap_value(config: ModelConfig, axis: str) -> Any:
    """The exact value of ``axis`` in ``config``, as an override (components with options)."""
    value = getattr(config, axis)
    return value.model_dump() if hasattr(value, "model_dump") else value


# -- the runner ----------------------------------------------------------------------


def run_ablation(
    base: str = "transformer-2017",
    target: str = "gpt2-small",
    *,
    d_model: int = DEFAULT_SCALE["d_model"],
    layers: int = DEFAULT_SCALE["layers"],
    heads: int = DEFAULT_SCALE["heads"],
    seq_len: int = DEFAULT_SCALE["seq_len"],
    steps: int = DEFAULT_SCALE["steps"],
    batch: int = DEFAULT_SCALE["batch"],
    lr: float = DEFAULT_SCALE["lr"],
    eval_every: int = DEFAULT_SCALE["eval_every"],
    data: str | os.PathLike[str] | None = None,
    out_dir: Path,
    seeds: int = DEFAULT_SEEDS,
    seed: int = 0,
    tune_lr: bool = False,
    lr_grid: Sequence[float] | None = None,
    tune_fraction: float = TUNE_FRACTION,
    path: bool | Sequence[str] | None = None,
    order: str = "effect",
    workers: int = 1,
    device: str = "cpu",
    on_progress: ProgressCallback | None = None,
    tokenizer: str = "auto",
    vocab_limit: int | None = 1024,
    max_chars: int | None = None,
    threads: int | None = 1,
    command: str | None = None,
    registry: Registry | None = None,
) -> AblationResult:
    """Train base, each single swap toward target (or a cumulative path), and target,
    each with ``seeds`` seeds; save every run and report means, intervals and paired
    differences.

    ``base``/``target``: preset names (decoder-only). ``data``: a folder prepared by
    ``zoo data prepare`` (``zoo.training.prepare``), trained on as it is: its manifest's
    tokenizer and vocabulary size every model, its validation split is the held-out
    part; or a UTF-8 text file (default: the bundled Shakespeare) tokenised in memory
    (``zoo.training.load_corpus``), its last 10% held out. For a text file only:
    ``tokenizer`` is ``"auto"`` (GPT-2 when the ``text`` extra is installed, else
    bytes), ``"gpt2"`` or ``"bytes"``; with GPT-2, ``vocab_limit`` keeps the most
    frequent tokens and spells the rest as bytes (None keeps every token);
    ``max_chars`` keeps only the start of the text. With a prepared folder,
    ``tokenizer`` other than ``"auto"`` must be the manifest's, ``max_chars`` must be
    None and ``vocab_limit`` is not used.

    ``seeds``: runs per variant, with seeds ``seed .. seed + seeds - 1`` (init and data
    order). ``tune_lr``: first train every variant briefly (``tune_fraction`` of the
    steps, seed ``seed + TUNE_SEED_OFFSET``, not a compared seed) at each rate of
    ``lr_grid`` (default: ``lr`` times ``LR_GRID_FACTORS``; a grid implies
    ``tune_lr``), then train it at its best rate; otherwise every run uses ``lr``. ``path``: True for the cumulative path in
    the default order, or a sequence of axes giving its order (axes left out follow in
    the default order). ``order``: the table's rows by ``"effect"`` size or in
    ``"plan"`` order.

    ``workers``: runs trained at once, each in a process of its own (results identical
    to ``workers=1``). Under ``torchrun`` the runs are spread over the ranks instead;
    rank 0 writes the report. ``device``: ``"cpu"``, or ``"cuda"`` to train on GPUs
    (one per worker or rank, round robin). ``threads``: torch CPU threads per run
    (default 1: models this small run fastest on one thread, and the curves then do not
    depend on the core count; None leaves torch's setting).

    ``on_progress(run, step, steps, loss)`` is called with ``step=0, loss=None`` when a
    run starts, after every update with its training loss, and once more with
    ``step=steps`` and the final validation loss when the run is done (``run`` names
    the variant, its seed or the swept rate). Under ``torchrun`` it is called on rank 0
    only: for rank 0's own runs as they train, and for the other ranks' runs once each
    phase is over (their final call only).

    Writes to ``out_dir``: ``NN-<run>.safetensors`` (the first seed) and
    ``NN-<run>-seedK.safetensors`` per run, each with a ``.json`` record of its curve,
    ``tune/`` records of the sweep, ``ablation.json``, ``ablation.png``, ``deltas.png``
    and ``report.md``. Restarted with the same ``out_dir``, it trains only the runs
    that have no record yet.
    """
    registry = registry or default_registry()
    _check_choices(seeds=seeds, workers=workers, order=order, device=device, tune_fraction=tune_fraction)
    if workers > 1 and registry is not default_registry():
        raise ConfigError(
            "workers > 1 trains in fresh processes, which see the installed plugins only, not a "
            "registry built in this one; use workers=1 with a custom registry"
        )
    base_config = resolve_config(base, registry=registry)
    target_config = resolve_config(target, registry=registry)
    for name, config in ((base, base_config), (target, target_config)):
        if config.architecture != "decoder":
            raise ConfigError(
                f"{name!r} is an {config.architecture} model; an ablation trains language models "
                f"on one text, so both sides must be decoder-only presets (see `zoo list`)"
            )
    settings = TrainSettings(
        steps=steps, batch_size=batch, seq_len=seq_len, lr=lr, eval_every=eval_every, seed=seed, threads=threads
    )
    tune_lr = tune_lr or lr_grid is not None  # a grid asks for the sweep
    grid = _lr_grid(lr, lr_grid) if tune_lr else []
    tune_steps = max(1, round(steps * tune_fraction))
    notes: list[str] = []
    tokens, described = _ablation_data(data, tokenizer, vocab_limit, max_chars, notes)
    scale = {
        "d_model": d_model,
        "n_layers": layers,
        "n_heads": heads,
        "vocab_size": described["vocab_size"],
        "max_seq_len": seq_len,
    }
    small_base = _at_scale(base_config, scale, registry)
    small_target = _at_scale(target_config, scale, registry)
    differences = diff_configs(base_config, target_config, registry=registry)

    swappable = [(axis, value) for axis, _, value in differences if axis not in SIZE_AXES and axis != "architecture"]
    on_path = path is not None and path is not False
    if not on_path:
        plan = _single_swaps(base, target, small_base, small_target, swappable, notes, registry)
    else:
        plan = _cumulative_path(base, target, small_base, small_target, swappable, path or [], notes, registry)
    if workers > 1 and _distributed()[1] > 1:
        notes.append("under torchrun each rank trains its share of the runs one at a time; workers is ignored")
    if seeds == 1:
        notes.append("one seed: no confidence intervals and no significance; use seeds >= 2 (3 or more to trust them)")

    out_dir = Path(out_dir)
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise InputError(f"cannot create the output folder {out_dir}: {err.strerror}; pick another out_dir") from err
    context = _Context(tokens, described, out_dir, device, threads)
    trained: list[str] = []
    reused: list[str] = []

    lrs = [lr] * len(plan)
    tune_records: list[list[TuneRun]] = [[] for _ in plan]
    tuning = None
    if grid:
        tune_seed = seed + TUNE_SEED_OFFSET
        tuning = {"grid": grid, "steps": tune_steps, "fraction": tune_fraction, "seed": tune_seed}
        tune_settings = replace(settings, steps=tune_steps, eval_every=tune_steps, seed=tune_seed, warmup_steps=None)
        jobs = [
            _Job(
                f"tune/{index:02d}-{_slug(name)}-lr{rate:g}",
                f"tune {name} lr={rate:g}",
                axis,
                config,
                replace(tune_settings, lr=rate),
                tune=True,
            )
            for index, (name, axis, config) in enumerate(plan)
            for rate in grid
        ]
        _run_jobs(jobs, context, workers, on_progress, trained, reused, registry)
        for index, (name, _, _) in enumerate(plan):
            records = [_read_record(job, context) for job in jobs[index * len(grid) : (index + 1) * len(grid)]]
            tune_records[index] = [
                TuneRun(job.settings.lr, r["final_val_loss"]) for job, r in zip(jobs[index * len(grid) :], records)
            ]
            finished = [t for t in tune_records[index] if t.final_val_loss is not None]
            if not finished:
                raise ConfigError(
                    f"every learning rate of the sweep diverged for {name!r} ({', '.join(f'{r:g}' for r in grid)}); "
                    f"pass lower rates with --lr-grid"
                )
            lrs[index] = min(finished, key=lambda t: t.final_val_loss or 0.0).lr

    seed_list = list(range(seed, seed + seeds))
    jobs = []
    for index, (name, axis, config) in enumerate(plan):
        prefix = axis if axis in ("base", "target") else ("path" if on_path else "swap")
        stem = f"{index:02d}-{prefix}-{_slug(name)}"
        for s in seed_list:
            suffix = "" if s == 0 else f"-seed{s}"
            label = name if seeds == 1 and s == 0 else f"{name} seed {s}"
            jobs.append(_Job(stem + suffix, label, axis, config, replace(settings, seed=s, lr=lrs[index]), tune=False))
    _run_jobs(jobs, context, workers, on_progress, trained, reused, registry)

    runs: list[AblationRun] = []
    for index, (name, axis, config) in enumerate(plan):
        mine = jobs[index * seeds : (index + 1) * seeds]
        seed_runs = [_seed_run(job, _read_record(job, context), context, job.key in reused) for job in mine]
        summary = summarize(config, context=seq_len, registry=registry)
        losses = [s.final_val_loss for s in seed_runs]
        previous = runs[-1].losses() if runs and on_path else None
        runs.append(
            AblationRun(
                name=name,
                axis=axis,
                config=config,
                lr=lrs[index],
                seeds=seed_runs,
                loss=mean_interval(losses, LEVEL),
                delta_vs_base=paired_difference(runs[0].losses() if runs else losses, losses, LEVEL),
                delta_vs_previous=paired_difference(previous, losses, LEVEL) if previous else None,
                parameters=summary.total_parameters,
                flops_per_token=summary.total_flops_per_token,
                train_flops=TRAIN_FLOPS_FACTOR * summary.total_flops_per_token * steps * settings.tokens_per_step,
                tune=tune_records[index],
            )
        )
    if not grid:
        notes.append(f"one learning rate for every run: {lr:g} (tune_lr / --tune-lr sweeps one per variant)")
    if len({run.train_flops for run in runs}) > 1:
        notes.append(
            "every run sees the same tokens, but the variants differ in compute per token "
            "(see parameters and FLOPs): a gain may be bought with compute"
        )

    result = AblationResult(
        base=base,
        target=target,
        mode="path" if on_path else "swaps",
        differences=differences,
        runs=runs,
        settings=settings,
        seeds=seed_list,
        scale={"d_model": d_model, "layers": layers, "heads": heads},
        data=described,
        tuning=tuning,
        command=command or _equivalent_command(base, target, locals()),
        version=str(__version__),
        order=order,
        results_path=out_dir / "ablation.json",
        plot_path=None,
        delta_plot_path=None,
        report_path=None,
        notes=notes,
        trained=trained,
        reused=reused,
        main_process=_distributed()[0] == 0,
    )
    if result.main_process:
        write_report(result)
    _barrier()  # the other ranks return once the report exists
    return result


def _check_choices(*, seeds: int, workers: int, order: str, device: str, tune_fraction: float) -> None:
    problems = []
    if isinstance(seeds, bool) or not isinstance(seeds, int) or seeds < 1:
        problems.append(f"seeds={seeds!r} must be an integer >= 1 (--seeds)")
    if isinstance(workers, bool) or not isinstance(workers, int) or workers < 1:
        problems.append(f"workers={workers!r} must be an integer >= 1 (--workers)")
    if order not in ORDERS:
        problems.append(f"order={order!r} must be one of {', '.join(ORDERS)} (--order)")
    if device not in ("cpu", "cuda"):
        problems.append(f"device={device!r} must be 'cpu' or 'cuda' (--device)")
    elif device == "cuda" and not torch.cuda.is_available():
        problems.append("device='cuda' but torch sees no GPU; use --device cpu")
    if not isinstance(tune_fraction, (int, float)) or not 0.0 < tune_fraction <= 1.0:
        problems.append(f"tune_fraction={tune_fraction!r} must be within (0, 1] (--tune-fraction)")
    if problems:
        raise ConfigError(f"invalid ablation settings: {'; '.join(problems)}")


def _ablation_data(
    data: str | os.PathLike[str] | None,
    tokenizer: str,
    vocab_limit: int | None,
    max_chars: int | None,
    notes: list[str],
) -> tuple[tuple[torch.Tensor, torch.Tensor] | Path, dict[str, Any]]:
    """What every run trains on, and its description (the report's data and tokenizer):
    a prepared folder as it is (each process maps its shards), or a text file tokenised
    here into in-memory training and validation ids."""
    if data is not None and Path(data).is_dir():
        folder = Path(data)
        prepared = open_data(folder)  # a folder without a manifest: an error that says how to prepare it
        if max_chars is not None:
            raise ConfigError(
                f"max_chars={max_chars} cuts a text file, but {printable(str(folder))} is a prepared folder; "
                f"drop --max-chars, or prepare a shorter text with `zoo data prepare`"
            )
        if tokenizer not in ("auto", prepared.tokenizer):
            raise InputError(
                f"{printable(str(folder))} was prepared with the {prepared.tokenizer!r} tokenizer, not "
                f"{tokenizer!r}; drop --tokenizer (a prepared folder brings its own), or prepare the text "
                f"again with `zoo data prepare --tokenizer {tokenizer}`"
            )
        notes.append(
            f"prepared data: its {prepared.tokenizer} tokenizer and vocabulary ({prepared.vocab_size:,}) for every "
            f"run; --vocab-limit applies to text files only"
        )
        return folder, prepared.describe()
    text = read_text(Path(data)) if data is not None else bundled_corpus()
    corpus = load_corpus(
        text,
        tokenizer=tokenizer,
        vocab_limit=vocab_limit,
        max_chars=max_chars,
        source=str(data) if data is not None else "bundled Shakespeare",
    )
    if corpus.tokenizer == "gpt2":
        kept = corpus.vocab_size - (256 if corpus.byte_fallback else 0)
        spelled = (
            f", the rarer {corpus.byte_fallback:.0%} of tokens spelled out as bytes" if corpus.byte_fallback else ""
        )
        notes.append(f"GPT-2 tokens: the {kept} most frequent in the text, renumbered{spelled}")
    elif tokenizer == "auto":
        notes.append(
            "byte tokens (vocabulary 256): the GPT-2 tokenizer is not installed; `pip install 'zoo-lm[text]'` adds it"
        )
    return (corpus.train, corpus.val), corpus.describe()


def _lr_grid(lr: float, grid: Sequence[float] | None) -> list[float]:
    rates = [lr * f for f in LR_GRID_FACTORS] if grid is None else list(grid)
    bad = [r for r in rates if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 < r < math.inf]
    if not rates or bad:
        raise ConfigError(f"the learning-rate grid needs rates > 0, got {list(rates)!r}; e.g. --lr-grid 1e-3,3e-3,1e-2")
    return sorted({float(r) for r in rates})


Plan = list[tuple[str, str, ModelConfig]]


def _single_swaps(
    base: str,
    target: str,
    small_base: ModelConfig,
    small_target: ModelConfig,
    swappable: list[tuple[str, Any]],
    notes: list[str],
    registry: Registry,
) -> Plan:
    """Base, the base with each single swap, target."""
    plan: Plan = [(base, "base", small_base)]
    for axis, value in swappable:
        try:
            swapped = resolve_config(small_base, {axis: _swap_value(small_target, axis)}, registry=registry)
        except ZooError as err:
            notes.append(f"swap {axis}={value} skipped: it cannot be applied alone ({err})")
            continue
        plan.append((f"{axis}={value}", axis, swapped))
    plan.append((target, "target", small_target))
    return plan


def _cumulative_path(
    base: str,
    target: str,
    small_base: ModelConfig,
    small_target: ModelConfig,
    swappable: list[tuple[str, Any]],
    path: bool | Sequence[str],
    notes: list[str],
    registry: Registry,
) -> Plan:
    """Base, base + swap 1, base + swaps 1-2, ..., target, in ``path``'s order."""
    values = dict(swappable)
    given = [] if path is True else [str(axis) for axis in path]  # type: ignore[union-attr]
    unknown = [axis for axis in given if axis not in values]
    if unknown or len(set(given)) != len(given):
        raise InputError(
            f"the path names {', '.join(repr(a) for a in unknown) or 'an axis twice'}; it takes each of "
            f"the swappable differences at most once: {', '.join(values) or 'none'} (--path AXIS,AXIS,...)"
        )
    plan: Plan = [(base, "base", small_base)]
    overrides: dict[str, Any] = {}
    for axis in [*given, *(a for a in values if a not in given)]:
        trial = {**overrides, axis: _swap_value(small_target, axis)}
        try:
            config = resolve_config(small_base, trial, registry=registry)
        except ZooError as err:
            notes.append(f"path step {axis}={values[axis]} skipped: it cannot be applied here ({err})")
            continue
        overrides = trial
        if config == small_target:
            continue  # the last step is the target itself, trained below
        plan.append((f"+{axis}={values[axis]}", axis, config))
    plan.append((target, "target", small_target))
    return plan


def _at_scale(config: ModelConfig, scale: dict[str, Any], registry: Registry) -> ModelConfig:
    """``config`` at the shared scale; d_ff keeps the config's own d_ff / d_model ratio."""
    d_ff = max(1, round(config.d_ff * scale["d_model"] / config.d_model))
    return resolve_config(config, {**scale, "d_ff": d_ff}, registry=registry)


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "-", text).strip("-")[:60]


# run_ablation arguments that are also `zoo ablate` flags of the same name (--d-model for d_model),
# shared by the CLI (flags -> arguments) and the report (arguments -> the command that repeats them).
FLAG_OPTIONS = (
    "d_model",
    "layers",
    "heads",
    "seq_len",
    "steps",
    "batch",
    "lr",
    "eval_every",
    "seeds",
    "seed",
    "workers",
    "tokenizer",
    "max_chars",
    "threads",
    "order",
    "device",
)


def _equivalent_command(base: str, target: str, args: dict[str, Any]) -> str:
    """The ``zoo ablate`` command line that repeats a Python call."""
    words = ["zoo", "ablate", "--from", base, "--to", target]
    prepared = args.get("data") is not None and Path(args["data"]).is_dir()  # brings its tokenizer
    for name in FLAG_OPTIONS:
        if args.get(name) is not None and not (prepared and name == "tokenizer"):
            words += [
                f"--{name.replace('_', '-')}",
                f"{args[name]:g}" if isinstance(args[name], float) else str(args[name]),
            ]
    if not prepared:
        words += ["--vocab-limit", "all" if args.get("vocab_limit") is None else str(args["vocab_limit"])]
    if args.get("data") is not None:
        words += ["--data", str(args["data"])]
    if args.get("tune_lr"):
        words += ["--tune-lr", "--tune-fraction", f"{args['tune_fraction']:g}"]
        if args.get("lr_grid") is not None:
            words += ["--lr-grid", ",".join(f"{r:g}" for r in args["lr_grid"])]
    path = args.get("path")
    if path is True:
        words.append("--path")
    elif path:
        words += ["--path", ",".join(path)]
    words += ["--out", str(args["out_dir"])]
    return shlex.join(words)


# -- jobs: one run each, in this process, in worker processes or over ranks ----------


@dataclass(frozen=True)
class _Job:
    """One training run: a variant's config at one seed and rate."""

    key: str  # file stem inside the output folder
    label: str  # the name progress reports show
    axis: str  # the variant's axis: "base", "target" or the swapped field
    config: ModelConfig
    settings: TrainSettings
    tune: bool  # a run of the learning-rate sweep: no checkpoint, divergence allowed


@dataclass(frozen=True)
class _Context:
    """What every run shares: the data, the output folder, the device."""

    tokens: tuple[torch.Tensor, torch.Tensor] | Path  # in-memory train and val ids, or a prepared folder
    data: dict[str, Any]  # the description: source, tokenizer, vocabulary, token counts
    out_dir: Path
    device: str
    threads: int | None

    def token_data(self) -> TokenData:
        """The tokens to train on; a prepared folder is mapped by the process that trains,
        so a worker process receives its path, never a copy of its shards."""
        if isinstance(self.tokens, Path):
            return open_data(self.tokens)
        return tokens_data(*self.tokens, source=self.data["source"], tokenizer=self.data["tokenizer"])


def _fingerprint(job: _Job, context: _Context) -> dict[str, Any]:
    """What makes a finished run reusable: the same model, training, data and device."""
    settings = {**job.settings.__dict__, "betas": list(job.settings.betas)}
    key = {
        "config": job.config.model_dump(mode="json"),
        "settings": settings,
        "data": context.data,
        "device": context.device,
    }
    return json.loads(json.dumps(key))  # as it reads back from a record


def _record_path(job: _Job, context: _Context) -> Path:
    return context.out_dir / f"{job.key}.json"


def _finished(job: _Job, context: _Context) -> bool:
    """Whether ``job`` has a record (and checkpoint) from an earlier ablation; refuses a
    record of a different run under the same name rather than overwrite it."""
    path = _record_path(job, context)
    if not path.is_file():
        return False
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False  # a torn record: train again
    if record.get("fingerprint") != _fingerprint(job, context):
        raise InputError(
            f"{path} records a run with other settings (model, training, data or device) than "
            f"this ablation's {job.label!r}; pass another --out, or delete the folder to start over"
        )
    return job.tune or (context.out_dir / f"{job.key}.safetensors").is_file()


def _read_record(job: _Job, context: _Context) -> dict[str, Any]:
    path = _record_path(job, context)
    try:
        record: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:
        raise InputError(f"the run record {path} is missing or unreadable ({err}); run the ablation again") from err
    return record


def _seed_run(job: _Job, record: dict[str, Any], context: _Context, reused: bool) -> SeedRun:
    curve = [CurvePoint(p["step"], p["train_loss"], p["val_loss"]) for p in record["curve"]]
    return SeedRun(
        seed=job.settings.seed,
        final_val_loss=record["final_val_loss"],
        curve=curve,
        tokens_per_second=record["tokens_per_second"],
        checkpoint=context.out_dir / record["checkpoint"],  # a name: the folder may have moved
        reused=reused,
    )


def _execute(
    job: _Job, context: _Context, device: str, report: Callable[[int, float | None], None] | None, registry: Registry
) -> None:
    """Train ``job`` and leave its record (and, for a compared run, its checkpoint)."""
    if device.startswith("cuda"):
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(job.settings.seed)
        model = build(job.config, registry=registry)
    model.to(device)
    steps = job.settings.steps
    if report is not None:
        report(0, None)
    loss: float | None
    try:
        trained = fit(model, context.token_data(), None, job.settings, on_step=report)
    except ConfigError as err:
        if not job.tune:
            raise ConfigError(f"run {job.label!r}: {err}") from err
        loss, curve, speed = None, [], 0.0  # a rate of the sweep that diverged
    else:
        loss, curve, speed = trained.final_val_loss, trained.curve, trained.tokens_per_second
        if job.tune and not math.isfinite(loss):
            loss = None
    checkpoint = context.out_dir / f"{job.key}.safetensors"
    record = {
        "run": job.label,
        "fingerprint": _fingerprint(job, context),
        "final_val_loss": loss,
        "curve": _curve_dict(curve),
        "tokens_per_second": speed,
        "checkpoint": None if job.tune else checkpoint.name,
    }
    if not job.tune:
        about = {
            "run": job.label,
            "axis": job.axis,
            "seed": job.settings.seed,
            "lr": job.settings.lr,
            "steps": steps,
            "final_val_loss": loss,
            "data": context.data,
        }
        save(model.to("cpu"), checkpoint, metadata={"ablation": about}, registry=registry)
    _write_text(_record_path(job, context), json.dumps(record, indent=1) + "\n")
    if report is not None:
        report(steps, loss)


def _run_jobs(
    jobs: list[_Job],
    context: _Context,
    workers: int,
    on_progress: ProgressCallback | None,
    trained: list[str],
    reused: list[str],
    registry: Registry,
) -> None:
    """Train the jobs without a record: here, in ``workers`` processes, or this rank's share."""
    todo = []
    for job in jobs:
        if _finished(job, context):
            reused.append(job.key)
        else:
            todo.append(job)
    trained.extend(job.key for job in todo)
    rank, world = _distributed()
    _barrier()  # every rank has the same list before any writes a record
    mine = todo[rank::world]
    shown = on_progress if rank == 0 else None  # progress from rank 0 only
    devices = _devices(context.device, workers if world == 1 else 1, rank)
    if workers <= 1 or world > 1 or len(mine) <= 1:
        for job in mine:
            _execute(job, context, devices[0], _reporter(shown, job), registry)
    else:
        _run_in_processes(mine, context, min(workers, len(mine)), devices, shown)
    _barrier()
    if shown is not None and world > 1:  # the other ranks' runs, done now: their final losses
        for job in todo:
            if job not in mine:
                shown(job.label, job.settings.steps, job.settings.steps, _read_record(job, context)["final_val_loss"])


def _reporter(on_progress: ProgressCallback | None, job: _Job) -> Callable[[int, float | None], None] | None:
    if on_progress is None:
        return None
    steps = job.settings.steps
    return lambda step, loss: on_progress(job.label, step, steps, loss)


def _devices(device: str, count: int, rank: int) -> list[str]:
    """One device per worker: the CPU, or the GPUs round robin (a rank: its local GPU)."""
    if device == "cpu":
        return ["cpu"] * max(1, count)
    gpus = torch.cuda.device_count()
    local = int(os.environ.get("LOCAL_RANK", rank))
    return [f"cuda:{(local + i) % gpus}" for i in range(max(1, count))]


_DIST_TIMEOUT = datetime.timedelta(hours=24)

# The state of a worker process, set once by _start_worker.
_WORKER: dict[str, Any] = {}


def _start_worker(context: _Context, progress: Any, devices: Any) -> None:
    _WORKER.update(context=context, progress=progress, device=devices.get())
    if context.threads is not None:
        torch.set_num_threads(context.threads)


def _work(job: _Job) -> None:
    progress = _WORKER["progress"]

    def report(step: int, loss: float | None) -> None:
        if step < job.settings.steps or loss is None:  # the parent reports the end itself
            progress.put((job.label, step, job.settings.steps, loss))

    _execute(job, _WORKER["context"], _WORKER["device"], report, default_registry())


def _run_in_processes(
    jobs: list[_Job], context: _Context, workers: int, devices: list[str], on_progress: ProgressCallback | None
) -> None:
    """Train ``jobs`` in ``workers`` fresh (spawned) processes; each writes its record."""
    mp = multiprocessing.get_context("spawn")
    progress, free = mp.Queue(), mp.Queue()
    for device in devices[:workers]:
        free.put(device)
    done_labels: set[str] = set()

    def drain() -> None:
        while True:
            try:
                label, step, total, loss = progress.get_nowait()
            except Empty:
                return
            if on_progress is not None and label not in done_labels:
                on_progress(label, step, total, loss)

    with ProcessPoolExecutor(
        workers, mp_context=mp, initializer=_start_worker, initargs=(context, progress, free)
    ) as pool:
        futures: dict[Future[None], _Job] = {pool.submit(_work, job): job for job in jobs}
        pending = set(futures)
        try:
            while pending:
                finished, pending = wait(pending, timeout=0.2, return_when=FIRST_COMPLETED)
                drain()
                for future in finished:
                    future.result()  # a run's error stops the ablation
                    job = futures[future]
                    done_labels.add(job.label)
                    if on_progress is not None:
                        on_progress(
                            job.label,
                            job.settings.steps,
                            job.settings.steps,
                            _read_record(job, context)["final_val_loss"],
                        )
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise
    drain()


def _distributed() -> tuple[int, int]:
    """This process's rank and the world size under ``torchrun`` (0, 1 otherwise)."""
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1 or not torch.distributed.is_available():
        return 0, 1
    if not torch.distributed.is_initialized():
        # Runs take minutes; the ranks that finish first wait at a barrier for the rest.
        torch.distributed.init_process_group("gloo", timeout=_DIST_TIMEOUT)
    return torch.distributed.get_rank(), torch.distributed.get_world_size()


def _barrier() -> None:
    if _distributed()[1] > 1:
        torch.distributed.barrier()


# -- the report ----------------------------------------------------------------------


def table(
    result: AblationResult, order: str | None = None, *, compact: bool = False
) -> tuple[list[str], list[list[str]]]:
    """The ablation's table as text cells, ``(header, rows)``, in ``rows(order)``'s order;
    ``report.md`` shows it whole, the CLI ``compact`` (without parameters, FLOPs per
    token and, on a path, the columns against the base; the rate only when tuned, the
    training FLOPs only when they differ).

    A swap's significance mark ``*`` is ``AblationRun.significant``: the 95% interval of
    its paired difference to the base (on a path, to the row before) excludes 0.
    """
    path = result.mode == "path"
    columns = [
        "run",
        "lr",
        "val loss",
        "Δ vs base",
        "p",
        "Δ this step",
        "p (step)",
        "sig",
        "parameters",
        "FLOPs/token",
        "train FLOPs",
    ]
    dropped = set() if path else {"Δ this step", "p (step)"}
    if compact:  # 80 columns: the step's Δ stands for the path, FLOPs for the budget
        dropped |= {"parameters", "FLOPs/token", "p (step)"} | (set() if result.tuning else {"lr"})
        dropped |= {"Δ vs base", "p"} if path else set()
        dropped |= {"train FLOPs"} if len({run.train_flops for run in result.runs}) == 1 else set()
    rows = []
    for run in result.rows(order):
        is_base = run.axis == "base"
        step = run.delta_vs_previous
        cells = {
            "run": run.name,
            "lr": f"{run.lr:.3g}",
            "val loss": run.loss.format(),
            "Δ vs base": "" if is_base else run.delta_vs_base.format(sign=True),
            "p": "" if is_base else _p(run.delta_vs_base),
            "Δ this step": "" if step is None else step.format(sign=True),
            "p (step)": "" if step is None else _p(step),
            "sig": "*" if run.significant else "",
            "parameters": f"{run.parameters:,}",
            "FLOPs/token": _si(run.flops_per_token),
            "train FLOPs": _si(run.train_flops),
        }
        rows.append([cells[c] for c in columns if c not in dropped])
    return [c for c in columns if c not in dropped], rows


def _p(interval: Interval) -> str:
    if interval.p_value is None:
        return "n/a"
    return "<0.001" if interval.p_value < 0.001 else f"{interval.p_value:.3f}"


def _si(value: float) -> str:
    """``1.23M``, ``4.5G``: a count in three significant digits."""
    for factor, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{unit}"
    return f"{value:.3g}"


def significant_swaps(result: AblationResult) -> list[str]:
    """The names of the rows whose (paired) difference is significant, in table order."""
    return [run.name for run in result.rows() if run.significant]


def write_report(result: AblationResult) -> None:
    """Write ``ablation.json``, the two plots and ``report.md`` into the results folder."""
    folder = result.results_path.parent
    result.plot_path = plot_curves(
        result.runs, folder / "ablation.png", title=f"{result.base} -> {result.target}", notes=result.notes
    )
    result.delta_plot_path = plot_deltas(result, folder / "deltas.png")
    result.report_path = folder / "report.md"
    _write_text(result.results_path, json.dumps(result.to_dict(), indent=2) + "\n")
    _write_text(result.report_path, report_markdown(result))


def _write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically (a temporary file, then a rename)."""
    tmp = path.with_name(path.name + ".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        raise InputError(f"cannot write {path}: {err.strerror}; pick another out_dir") from err


def report_markdown(result: AblationResult) -> str:
    """``report.md``: everything needed to read and repeat the ablation, on its own."""
    s, d = result.settings, result.data
    n = len(result.seeds)
    header, rows = table(result)
    lines = [
        f"# Ablation: {result.base} → {result.target}",
        "",
        (
            f"{'A cumulative path' if result.mode == 'path' else 'Each single swap'} from `{result.base}` toward "
            f"`{result.target}`, {len(result.runs)} variants × {n} seed{'s' if n > 1 else ''} "
            f"({', '.join(map(str, result.seeds))}), zoo {result.version}."
        ),
        "",
        "```bash",
        result.command,
        "```",
        "",
        "## Results",
        "",
        f"Final validation loss (nats/token) after {s.steps} steps: mean over the seeds ± the half-width "
        f"of its {LEVEL:.0%} Student t interval. **Δ vs base**: the difference to the base paired over "
        f"matching seeds (negative: better), ± its {LEVEL:.0%} interval; **p**: two-sided paired t test. "
        f"**sig** `*`: the interval excludes 0 and |Δ| ≥ {MIN_EFFECT:g} (smaller is float rounding)"
        + ("; on this path, of the step's own difference (Δ this step)." if result.mode == "path" else ".")
        + (
            " Rows: base, the swaps by effect size (largest first), target."
            if result.order == "effect" and result.mode != "path"
            else ""
        ),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
        *("| " + " | ".join(cell.replace("|", "\\|") for cell in row) + " |" for row in rows),
        "",
    ]
    significant = significant_swaps(result)
    lines += [
        f"Significant at {LEVEL:.0%}: {', '.join(f'`{name}`' for name in significant) if significant else 'none'}.",
        "",
    ]
    if result.plot_path:
        lines += [
            f"![validation curves]({result.plot_path.name})",
            "",
            f"Validation loss per step: the mean over the seeds, the band its {LEVEL:.0%} interval.",
            "",
        ]
    if result.delta_plot_path:
        lines += [
            f"![paired differences]({result.delta_plot_path.name})",
            "",
            f"Paired Δ vs base with {LEVEL:.0%} error bars; a bar that misses 0 is significant.",
            "",
        ]
    lines += ["## Learning rates", ""]
    if result.tuning:
        t = result.tuning
        lines += [
            (
                f"Each variant trained at the best rate of a sweep over {', '.join(f'{r:g}' for r in t['grid'])}: "
                f"{t['steps']} steps ({t['fraction']:g} of the budget), seed {t['seed']} (not one of the compared seeds), "
                f"final validation loss per rate (— diverged):"
            ),
            "",
            "| run | " + " | ".join(f"{r:g}" for r in t["grid"]) + " | chosen |",
            "|---|" + "---:|" * (len(t["grid"]) + 1),
        ]
        for run in result.runs:
            cells = ["—" if x.final_val_loss is None else f"{x.final_val_loss:.3f}" for x in run.tune]
            lines.append(f"| {run.name} | " + " | ".join(cells) + f" | {run.lr:g} |")
        lines.append("")
    else:
        lines += [f"One rate for every run: {s.lr:g} (`--tune-lr` sweeps one per variant).", ""]
    tokens = s.steps * s.tokens_per_step
    lines += [
        "## Budget",
        "",
        (
            f"Every run: {s.steps} steps × {s.batch_size} sequences × {s.seq_len} tokens = {tokens:,} tokens. "
            f"FLOPs/token: one forward pass at {s.seq_len} tokens, measured by `zoo.summary`; train FLOPs per run "
            f"≈ {TRAIN_FLOPS_FACTOR} × forward × tokens (the table). The whole ablation: {_si(result.total_train_flops)} "
            f"FLOPs{' including the sweep' if result.tuning else ''}."
        ),
        "",
        "## Setup",
        "",
        (
            f"- Data: {d['source']}, {d['train_tokens']:,} training and {d['val_tokens']:,} validation tokens "
            + (
                f"(a folder prepared by `zoo data prepare`, manifest {d['manifest_digest']}: its validation split "
                f"held out)."
                if d.get("manifest_digest")
                else "(the last 10% held out)."
            )
        ),
        f"- Tokenizer: {d['tokenizer']}, vocabulary {d['vocab_size']:,}"
        + (f" ({d['byte_fallback']:.0%} of GPT-2 tokens spelled out as bytes)" if d.get("byte_fallback") else "")
        + ".",
        (
            f"- Scale shared by every run: d_model {result.scale['d_model']}, {result.scale['layers']} layers, "
            f"{result.scale['heads']} heads, context {s.seq_len}; sizes are never swapped."
        ),
        (
            f"- Training: AdamW β {s.betas[0]}/{s.betas[1]}, weight decay {s.weight_decay:g} on matrices, warmup "
            f"{s.warmup} steps then cosine to {s.min_lr_ratio:g} × peak, gradient clip {s.grad_clip:g}, validation "
            f"every {s.eval_every} steps on {s.eval_batches * s.batch_size} fixed windows. A seed sets the init and "
            f"the data order; every variant sees the same data in the same order for the same seed."
        ),
        "- Differences (base → target): "
        + "; ".join(
            f"{axis} {a} → {b}" + ("" if axis not in SIZE_AXES else " (size: not swapped)")
            for axis, a, b in result.differences
        )
        + ".",
        "",
        "## Files",
        "",
        f"`{result.results_path.name}` (every seed's curve, means, intervals and paired differences), one "
        "checkpoint per run and seed with a `.json` record of its curve (`zoo inspect` shows a checkpoint's "
        "ablation metadata)" + (", `tune/` (the sweep's records)" if result.tuning else "") + ".",
        "",
    ]
    if result.notes:
        lines += ["## Notes", "", *(f"- {note}" for note in result.notes), ""]
    return "\n".join(lines)


def _figure() -> Any:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


_NO_PLOT = "no plot: matplotlib is not installed; `pip install 'zoo-lm[plot]'` adds it"


def plot_curves(runs: list[AblationRun], path: Path, *, title: str, notes: list[str]) -> Path | None:
    """Validation loss against step for every run: the mean over the seeds with its
    interval as a band, as a PNG; None (and a note) without matplotlib. Draws on a
    standalone ``Figure``, leaving pyplot's global state alone."""
    figure = _figure()
    if figure is None:
        if _NO_PLOT not in notes:
            notes.append(_NO_PLOT)
        return None
    fig = figure(figsize=(8, 5), dpi=120)
    ax = fig.add_subplot()
    for run in runs:
        points = run.mean_curve()
        steps = [step for step, _ in points]
        means = [ci.mean for _, ci in points]
        style = {"linewidth": 2.5} if run.axis in ("base", "target") else {"linewidth": 1.2, "alpha": 0.85}
        (line,) = ax.plot(steps, means, label=f"{run.name} ({run.loss.format()})", **style)
        if all(ci.half_width is not None for _, ci in points):
            low = [ci.low for _, ci in points]
            high = [ci.high for _, ci in points]
            ax.fill_between(steps, low, high, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.set_xlabel("step")
    ax.set_ylabel(f"validation loss (nats/token), mean ± {LEVEL:.0%} CI")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_deltas(result: AblationResult, path: Path) -> Path | None:
    """The paired difference of every run to the base with its interval as error bars
    (significant ones in colour), as a PNG; None without matplotlib."""
    figure = _figure()
    if figure is None:
        if _NO_PLOT not in result.notes:
            result.notes.append(_NO_PLOT)
        return None
    rows = [run for run in result.rows() if run.axis != "base"]
    fig = figure(figsize=(8, 1.2 + 0.45 * len(rows)), dpi=120)
    ax = fig.add_subplot()
    for y, run in enumerate(reversed(rows)):
        delta = run.delta_vs_base
        colour = (
            ("tab:green" if delta.mean < 0 else "tab:red")
            if delta.significant and abs(delta.mean) >= MIN_EFFECT
            else "tab:gray"
        )
        ax.errorbar(
            delta.mean,
            y,
            xerr=delta.half_width if delta.half_width is not None else None,
            fmt="o",
            color=colour,
            capsize=4,
        )
    ax.axvline(0.0, color="black", linewidth=1)
    ax.set_yticks(range(len(rows)), [run.name for run in reversed(rows)], fontsize=8)
    ax.set_xlabel(f"Δ final validation loss vs {result.base} (paired, {LEVEL:.0%} CI; < 0 is better)")
    ax.set_title(f"{result.base} -> {result.target}: {len(result.seeds)} seeds")
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path)
    return path
