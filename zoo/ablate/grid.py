"""Studies over a grid: one ablation per cell of scale rungs x learning rates x warm-ups.

``run_study(base, target, scales=[(64, 2), (128, 4)], lr_sweep=[1e-3, 3e-3])`` runs the
ablation of ``base`` -> ``target`` (every swap, the target and the control, over the
same seeds) once per cell, each in a folder of its own under ``out_dir``. A cell whose
runs have records is read back and never trained again, so a ladder grows rung by rung,
and rungs may be trained on different machines (``--scales 192x6`` alone on a GPU box)
and gathered into one folder. Then it says, per swap, how its Δ moves with training
FLOPs along the rungs (grows, shrinks, flips, flat within noise), and shows the final
loss against the rate (or the warm-up) per variant: the whole curve, each point a full
budget, not a short proxy.

A rung ``64x2`` is d_model 64 and 2 layers, with heads at the base scale's head size
(``d_model / heads``). Its budget: ``tokens_per_param`` (training tokens = R x the
base's non-embedding parameters at that rung), ``flops_per_run`` (every run the same
training FLOPs), or else the same ``steps`` for every rung.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.ablate.advice import trend
from zoo.ablate.plan import DEFAULT_SCALE, ablation_data, at_scale
from zoo.ablate.records import write_text
from zoo.ablate.report import figure_class
from zoo.ablate.results import ALPHA, LEVEL, TRAIN_FLOPS_FACTOR, AblationResult, AblationRun
from zoo.ablate.runner import ProgressCallback
from zoo.ablate.study import run_ablation
from zoo.config import resolve_config
from zoo.errors import ConfigError, InputError
from zoo.registry import Registry, default_registry
from zoo.stats import Interval, paired_difference
from zoo.summary import summarize


@dataclass(frozen=True)
class Rung:
    """One size of a scale ladder: d_model x layers, with ``heads`` at the ladder's head size."""

    d_model: int
    layers: int
    heads: int

    @property
    def name(self) -> str:
        return f"{self.d_model}x{self.layers}"


_SCALE = re.compile(r"\s*(\d+)\s*x\s*(\d+)\s*")


def parse_scales(text: str) -> list[tuple[int, int]]:
    """``"64x2,128x4"`` -> ``[(64, 2), (128, 4)]`` (d_model x layers)."""
    pairs = []
    for part in text.split(","):
        match = _SCALE.fullmatch(part)
        if not match:
            raise InputError(f"a scale is D_MODELxLAYERS such as 64x2, got {part.strip()!r} (--scales 64x2,128x4)")
        pairs.append((int(match[1]), int(match[2])))
    return pairs


def ladder(scales: Sequence[tuple[int, int]], head_size: int) -> list[Rung]:
    """The rungs, smallest first, each with d_model / ``head_size`` heads."""
    rungs, problems = [], []
    for d_model, layers in scales:
        if d_model < 1 or layers < 1 or d_model % head_size:
            problems.append(f"{d_model}x{layers}")
            continue
        rungs.append(Rung(d_model, layers, d_model // head_size))
    if problems or not rungs:
        raise ConfigError(
            f"scales {', '.join(problems) or '(none)'}: each needs a d_model that is a multiple of the head size "
            f"{head_size} (--d-model / --heads) and at least one layer (--scales 64x2,128x4)"
        )
    if len({r.name for r in rungs}) != len(rungs):
        raise ConfigError(f"a scale is named twice in {', '.join(r.name for r in rungs)} (--scales)")
    return sorted(rungs, key=lambda r: (r.d_model * r.d_model * r.layers, r.d_model))


@dataclass(frozen=True)
class Cell:
    """One ablation of a study: a rung, a peak rate, a warm-up, and the rung's budget in steps."""

    rung: Rung
    lr: float
    warmup: int | None  # None: the loop's default, a tenth of the steps
    steps: int
    eval_every: int

    @property
    def name(self) -> str:
        warm = "auto" if self.warmup is None else str(self.warmup)
        return f"{self.rung.name}-lr{self.lr:g}-warmup{warm}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "d_model": self.rung.d_model,
            "layers": self.rung.layers,
            "heads": self.rung.heads,
            "lr": self.lr,
            "warmup": self.warmup,
            "steps": self.steps,
            "eval_every": self.eval_every,
        }


@dataclass(frozen=True)
class Trend:
    """One row of a ladder at one rate and warm-up: its Δ vs base at each rung, and the word."""

    name: str
    axis: str
    lr: float
    warmup: int | None
    rungs: list[str]
    train_flops: list[float]
    deltas: list[Interval]

    @property
    def word(self) -> str:
        return trend(self.deltas)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axis": self.axis,
            "lr": self.lr,
            "warmup": self.warmup,
            "trend": self.word,
            "points": [
                {"rung": r, "train_flops": f, **d.to_dict()}
                for r, f, d in zip(self.rungs, self.train_flops, self.deltas)
            ],
        }


@dataclass(frozen=True)
class SweepEffect:
    """A variant's loss at the two ends of a sweep, paired over seeds: ``delta`` = loss at the
    first value minus loss at the last (e.g. warm-up 0 minus warm-up 50)."""

    name: str
    axis: str
    rung: str
    low: Any
    high: Any
    delta: Interval

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axis": self.axis,
            "rung": self.rung,
            "from": self.low,
            "to": self.high,
            "delta": self.delta.to_dict(),
        }


@dataclass
class StudyResult:
    """Every cell's ablation, the trends along the ladder and the sweeps, and the report's paths."""

    base: str
    target: str
    cells: list[tuple[Cell, AblationResult]]
    rungs: list[Rung]
    rates: list[float]
    warmups: list[int | None]
    budget: dict[str, Any]  # rule ("steps", "tokens_per_param" or "flops_per_run") and its value
    command: str
    results_path: Path
    report_path: Path | None = None
    scale_plot_path: Path | None = None
    sweep_plot_path: Path | None = None
    trained: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    main_process: bool = True

    def cell(self, rung: str, lr: float | None = None, warmup: int | None | str = "first") -> AblationResult:
        """The ablation of rung ``rung`` (``"64x2"``) at rate ``lr`` and warm-up ``warmup`` (default: the first)."""
        lr = self.rates[0] if lr is None else lr
        warm = self.warmups[0] if warmup == "first" else warmup
        for cell, result in self.cells:
            if cell.rung.name == rung and cell.lr == lr and cell.warmup == warm:
                return result
        raise InputError(
            f"this study has no cell {rung} lr={lr:g} warmup={warm}; it has {', '.join(c.name for c, _ in self.cells)}"
        )

    @property
    def swept(self) -> str | None:
        """The axis the sweep plot draws: ``"lr"``, ``"warmup"`` or None (no sweep)."""
        return "lr" if len(self.rates) > 1 else "warmup" if len(self.warmups) > 1 else None

    def trends(self) -> list[Trend]:
        """Per rate and warm-up, per row but the base: its Δ at every rung (one rung: none)."""
        if len(self.rungs) < 2:
            return []
        out = []
        for lr, warmup in itertools.product(self.rates, self.warmups):
            results = [self.cell(r.name, lr, warmup) for r in self.rungs]
            for run in results[0].rows("plan")[1:]:
                rows = [_row(result, run.name) for result in results]
                if any(row is None for row in rows):
                    continue
                found = [row for row in rows if row is not None]
                out.append(
                    Trend(
                        run.name,
                        run.axis,
                        lr,
                        warmup,
                        [r.name for r in self.rungs],
                        [row.train_flops for row in found],
                        [row.delta_vs_base for row in found],
                    )
                )
        return out

    def sweep_effects(self) -> list[SweepEffect]:
        """Per rung (and the other axis's first value), per variant: the paired change of its
        final loss from the sweep's first value to its last (same seeds, same data order)."""
        swept = self.swept
        if swept is None:
            return []
        effects = []
        values: list[Any] = self.rates if swept == "lr" else self.warmups
        low, high = values[0], values[-1]
        for rung in self.rungs:
            ends = [_swept_cell(self, rung, low), _swept_cell(self, rung, high)]
            for run in ends[0].runs:
                other = _row(ends[1], run.name)
                if other is None or run.axis == "control":
                    continue
                delta = paired_difference(other.losses(), run.losses(), LEVEL)
                effects.append(SweepEffect(run.name, run.axis, rung.name, low, high, delta))
        return effects

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "target": self.target,
            "command": self.command,
            "rungs": [r.name for r in self.rungs],
            "rates": self.rates,
            "warmups": self.warmups,
            "budget": self.budget,
            "cells": [
                {
                    **cell.to_dict(),
                    "results": str(result.results_path),
                    "report": str(result.report_path),
                    "table": _table_dict(result),
                    "noise_floor": result.noise_floor(),
                    "train_flops_base": result.runs[0].train_flops,
                }
                for cell, result in self.cells
            ],
            "trends": [t.to_dict() for t in self.trends()],
            "sweep": {"axis": self.swept, "effects": [e.to_dict() for e in self.sweep_effects()]},
            "plots": {
                "scale": str(self.scale_plot_path) if self.scale_plot_path else None,
                "sweep": str(self.sweep_plot_path) if self.sweep_plot_path else None,
            },
            "report": str(self.report_path) if self.report_path else None,
        }


def _row(result: AblationResult, name: str) -> AblationRun | None:
    return next((run for run in result.rows("plan") if run.name == name), None)


def _table_dict(result: AblationResult) -> list[dict[str, Any]]:
    """A cell's rows, without curves and seeds: what the study's tables need."""
    return [
        {
            "name": run.name,
            "axis": run.axis,
            "loss": run.loss.to_dict(),
            "delta_vs_base": run.delta_vs_base.to_dict(),
            "significant": run.significant,
            "train_flops": run.train_flops,
            "parameters": run.parameters,
        }
        for run in result.rows()
    ]


# -- running a study ------------------------------------------------------------------------


def run_study(
    base: str = "transformer-2017",
    target: str = "gpt2-small",
    *,
    out_dir: Path,
    scales: Sequence[tuple[int, int]] | None = None,
    tokens_per_param: float | None = None,
    flops_per_run: float | None = None,
    lr_sweep: Sequence[float] | None = None,
    warmup_sweep: Sequence[int | None] | None = None,
    d_model: int = DEFAULT_SCALE["d_model"],
    layers: int = DEFAULT_SCALE["layers"],
    heads: int = DEFAULT_SCALE["heads"],
    steps: int = DEFAULT_SCALE["steps"],
    lr: float = DEFAULT_SCALE["lr"],
    eval_every: int = DEFAULT_SCALE["eval_every"],
    warmup: int | None = None,
    seq_len: int = DEFAULT_SCALE["seq_len"],
    batch: int = DEFAULT_SCALE["batch"],
    on_progress: ProgressCallback | None = None,
    registry: Registry | None = None,
    **options: Any,
) -> StudyResult:
    """Run ``run_ablation`` in every cell of ``scales`` x ``lr_sweep`` x ``warmup_sweep``
    (each default: the one given by ``d_model``/``layers``, ``lr``, ``warmup``), each cell
    in ``out_dir / cell.name``; then write ``study.json``, ``scale.png`` (Δ against training
    FLOPs per swap, with a ladder), ``sweep.png`` (final loss against rate or warm-up per
    variant, with a sweep) and ``report.md`` into ``out_dir``.

    ``tokens_per_param`` or ``flops_per_run`` set each rung's steps (see the module);
    ``eval_every`` keeps the base scale's number of evaluations. Other ``options`` go to
    ``run_ablation`` unchanged (seeds, data, workers, device, correction, swaps, ...). A
    cell whose runs are finished trains nothing.
    """
    registry = registry or default_registry()
    if options.get("tune_lr") or options.get("lr_grid") is not None:
        raise ConfigError("a study trains every rate for the full budget; drop --tune-lr/--lr-grid, or --lr-sweep")
    if tokens_per_param is not None and flops_per_run is not None:
        raise ConfigError("pick one budget rule: --tokens-per-param or --flops-per-run, not both")
    for name, value in (("tokens_per_param", tokens_per_param), ("flops_per_run", flops_per_run)):
        if value is not None and not (isinstance(value, (int, float)) and 0 < value < math.inf):
            raise ConfigError(f"{name}={value!r} must be a number > 0 (--{name.replace('_', '-')})")
    if heads < 1 or d_model % heads:
        raise ConfigError(f"d_model {d_model} must be a multiple of heads {heads} (--d-model, --heads)")
    rungs = ladder(scales or [(d_model, layers)], d_model // heads)
    rates = sorted({float(r) for r in lr_sweep}) if lr_sweep else [lr]
    if any(not 0 < r < math.inf for r in rates):
        raise ConfigError(f"learning rates must be > 0, got {rates} (--lr-sweep 1e-3,3e-3,1e-2)")
    warmups = list(dict.fromkeys(warmup_sweep)) if warmup_sweep else [warmup]
    tokens_per_step = batch * seq_len
    budget = _budget(tokens_per_param, flops_per_run, steps)
    evaluations = max(1, steps // max(1, eval_every))
    out_dir = Path(out_dir)
    vocab = _vocab(options) if flops_per_run is not None else 256  # the head's FLOPs need the data's vocabulary
    cells = []
    for rung in rungs:
        rung_steps = _rung_steps(base, rung, seq_len, vocab, tokens_per_step, budget, registry)
        for w in warmups:
            if w is not None and not 0 <= w <= rung_steps:
                raise ConfigError(
                    f"warm-up {w} is longer than rung {rung.name}'s {rung_steps} steps; lower --warmup-sweep"
                )
        rung_every = max(1, rung_steps // evaluations)
        cells += [Cell(rung, r, w, rung_steps, rung_every) for r in rates for w in warmups]
    done: list[tuple[Cell, AblationResult]] = []
    trained: list[str] = []
    reused: list[str] = []
    for cell in cells:
        shown = None if on_progress is None else _prefixed(on_progress, cell.name)
        result = run_ablation(
            base,
            target,
            d_model=cell.rung.d_model,
            layers=cell.rung.layers,
            heads=cell.rung.heads,
            steps=cell.steps,
            eval_every=cell.eval_every,
            lr=cell.lr,
            warmup=cell.warmup,
            seq_len=seq_len,
            batch=batch,
            out_dir=out_dir / cell.name,
            on_progress=shown,
            registry=registry,
            **options,
        )
        done.append((cell, result))
        trained += [f"{cell.name}/{key}" for key in result.trained]
        reused += [f"{cell.name}/{key}" for key in result.reused]
    study = StudyResult(
        base=base,
        target=target,
        cells=done,
        rungs=rungs,
        rates=rates,
        warmups=warmups,
        budget={**budget, "tokens_per_step": tokens_per_step},
        command=_study_command(
            done[0][1].command,
            d_model,
            layers,
            heads,
            steps,
            eval_every,
            lr,
            warmup,
            scales,
            tokens_per_param,
            flops_per_run,
            lr_sweep,
            warmup_sweep,
            out_dir,
        ),
        results_path=out_dir / "study.json",
        trained=trained,
        reused=reused,
        main_process=done[0][1].main_process,
    )
    if study.main_process:
        write_study_report(study)
    return study


def _budget(tokens_per_param: float | None, flops_per_run: float | None, steps: int) -> dict[str, Any]:
    if tokens_per_param is not None:
        return {"rule": "tokens_per_param", "value": float(tokens_per_param)}
    if flops_per_run is not None:
        return {"rule": "flops_per_run", "value": float(flops_per_run)}
    return {"rule": "steps", "value": steps}


def _vocab(options: dict[str, Any]) -> int:
    """The data's vocabulary size, as every cell will see it."""
    _, described = ablation_data(
        options.get("data"),
        options.get("tokenizer", "auto"),
        options.get("vocab_limit", 1024),
        options.get("max_chars"),
        [],
    )
    return int(described["vocab_size"])


def non_embedding_parameters(base: str, rung: Rung, seq_len: int, vocab: int, registry: Registry) -> int:
    """The base's parameters at ``rung`` without the token and position tables and the head
    (Kaplan et al.'s N, which budgets are counted in)."""
    summary = summarize(_rung_config(base, rung, seq_len, vocab, registry), context=seq_len, registry=registry)
    return summary.total_parameters - summary.parameters["embeddings"] - summary.parameters["head"]


def _rung_config(base: str, rung: Rung, seq_len: int, vocab: int, registry: Registry) -> Any:
    scale = {
        "d_model": rung.d_model,
        "n_layers": rung.layers,
        "n_heads": rung.heads,
        "vocab_size": vocab,
        "max_seq_len": seq_len,
    }
    return at_scale(resolve_config(base, registry=registry), scale, registry)


def _rung_steps(
    base: str, rung: Rung, seq_len: int, vocab: int, tokens_per_step: int, budget: dict[str, Any], registry: Registry
) -> int:
    """The steps of every run at ``rung`` under the budget rule."""
    if budget["rule"] == "tokens_per_param":
        tokens = budget["value"] * non_embedding_parameters(base, rung, seq_len, vocab, registry)
    elif budget["rule"] == "flops_per_run":
        config = _rung_config(base, rung, seq_len, vocab, registry)
        per_token = summarize(config, context=seq_len, registry=registry).total_flops_per_token
        tokens = budget["value"] / (TRAIN_FLOPS_FACTOR * per_token)
    else:
        return int(budget["value"])
    return max(1, round(tokens / tokens_per_step))


def _prefixed(on_progress: ProgressCallback, name: str) -> ProgressCallback:
    return lambda run, step, total, loss: on_progress(f"{name} {run}", step, total, loss)


def _study_command(
    cell_command: str,
    d_model: int,
    layers: int,
    heads: int,
    steps: int,
    eval_every: int,
    lr: float,
    warmup: int | None,
    scales: Sequence[tuple[int, int]] | None,
    tokens_per_param: float | None,
    flops_per_run: float | None,
    lr_sweep: Sequence[float] | None,
    warmup_sweep: Sequence[int | None] | None,
    out_dir: Path,
) -> str:
    """The ``zoo ablate`` command that repeats the study: a cell's, with the study's own
    sizes, rate, warm-up and output folder, and the ladder and sweep flags."""
    words = shlex.split(cell_command)
    values = {
        "--d-model": d_model,
        "--layers": layers,
        "--heads": heads,
        "--steps": steps,
        "--eval-every": eval_every,
        "--lr": f"{lr:g}",
        "--warmup": warmup,
        "--out": out_dir,
    }
    kept: list[str] = []
    skip = False
    for word in words:
        if skip:
            skip = False
        elif word in values:
            skip = True  # its value follows
            if values[word] is not None:
                kept += [word, str(values[word])]
        else:
            kept.append(word)
    if warmup is not None and "--warmup" not in kept:
        kept += ["--warmup", str(warmup)]
    if scales:
        kept += ["--scales", ",".join(f"{d}x{n}" for d, n in scales)]
    if tokens_per_param is not None:
        kept += ["--tokens-per-param", f"{tokens_per_param:g}"]
    if flops_per_run is not None:
        kept += ["--flops-per-run", f"{flops_per_run:g}"]
    if lr_sweep:
        kept += ["--lr-sweep", ",".join(f"{r:g}" for r in lr_sweep)]
    if warmup_sweep:
        kept += ["--warmup-sweep", ",".join("auto" if w is None else str(w) for w in warmup_sweep)]
    out = kept.index("--out") if "--out" in kept else len(kept)
    kept = [*kept[:out], *kept[out + 2 :], "--out", str(out_dir)] if out < len(kept) else [*kept, "--out", str(out_dir)]
    return shlex.join(kept)


# -- the study's report ------------------------------------------------------------------------


def write_study_report(study: StudyResult) -> None:
    """``study.json``, ``scale.png``, ``sweep.png`` and ``report.md`` in the study's folder."""
    folder = study.results_path.parent
    study.scale_plot_path = plot_scale(study, folder / "scale.png")
    study.sweep_plot_path = plot_sweep(study, folder / "sweep.png")
    study.report_path = folder / "report.md"
    write_text(study.results_path, json.dumps(study.to_dict(), indent=2) + "\n")
    write_text(study.report_path, study_markdown(study))


def _cell_label(study: StudyResult, cell: Cell) -> str:
    parts = [cell.rung.name] if len(study.rungs) > 1 else []
    parts += [f"lr {cell.lr:g}"] if len(study.rates) > 1 else []
    parts += [f"warm-up {'auto' if cell.warmup is None else cell.warmup}"] if len(study.warmups) > 1 else []
    return ", ".join(parts) or cell.name


def _flops(value: float) -> str:
    for factor, unit in ((1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.3g}{unit}"
    return f"{value:.3g}"


def _p(p: float | None) -> str:
    return "n/a" if p is None else "<0.001" if p < 0.001 else f"{p:.3f}"


def cells_table(study: StudyResult) -> list[str]:
    """Markdown: per cell, its budget, its noise floor, the control and what was marked."""
    lines = [
        "| cell | steps | tokens/run | base train FLOPs | noise floor | control Δ | marked after correction |",
        "|---|---:|---:|---:|---:|---:|---|",
    ]
    for cell, result in study.cells:
        control = result.control
        floor = result.noise_floor()
        marked = ", ".join(f"`{run.name}`" for run in result.rows() if run.significant) or "none"
        lines.append(
            f"| [{_cell_label(study, cell)}]({cell.name}/report.md) | {cell.steps} | "
            f"{cell.steps * study.budget['tokens_per_step']:,} | {_flops(result.runs[0].train_flops)} | "
            f"{'n/a' if floor is None else f'{floor:.4f}'} | "
            f"{'n/a' if control is None else control.delta_vs_base.format(4, sign=True)} | {marked} |"
        )
    return lines


def trends_table(study: StudyResult) -> list[str]:
    """Markdown: per row, its Δ vs base (p adj) at each rung and the trend word."""
    trends = study.trends()
    if not trends:
        return []
    several = len(study.rates) * len(study.warmups) > 1
    header = ["row", *([] if not several else ["lr", "warm-up"]), *(r.name for r in study.rungs), "trend"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 2) + "---|"]
    for t in trends:
        cells = [f"{d.format(4, sign=True)} ({_p(d.p_adjusted)})" for d in t.deltas]
        extra = [] if not several else [f"{t.lr:g}", "auto" if t.warmup is None else str(t.warmup)]
        lines.append("| " + " | ".join([t.name, *extra, *cells, t.word]) + " |")
    return lines


def sweep_table(study: StudyResult) -> list[str]:
    """Markdown: per rung and variant, the final loss at each value of the sweep, and the best."""
    swept = study.swept
    if swept is None:
        return []
    values: list[Any] = study.rates if swept == "lr" else study.warmups
    shown = [f"{v:g}" if swept == "lr" else "auto" if v is None else str(v) for v in values]
    several = len(study.rungs) > 1
    header = [*(["rung"] if several else []), "variant", *shown, "best"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * (2 if several else 1) + "---:|" * (len(values) + 1)]
    for rung in study.rungs:
        results = [_swept_cell(study, rung, v) for v in values]
        for run in results[0].runs:
            if run.axis == "control":
                continue
            rows = [_row(r, run.name) for r in results]
            losses = [row.loss for row in rows if row is not None]
            if len(losses) != len(values):
                continue
            best = min(range(len(values)), key=lambda i: losses[i].mean)
            lines.append(
                "| "
                + " | ".join([*([rung.name] if several else []), run.name, *(x.format() for x in losses), shown[best]])
                + " |"
            )
    return lines


def _swept_cell(study: StudyResult, rung: Rung, value: Any) -> AblationResult:
    """The cell at ``value`` of the swept axis, the other axis at its first value."""
    return study.cell(rung.name, value) if study.swept == "lr" else study.cell(rung.name, None, value)


def sweep_sentences(study: StudyResult) -> list[str]:
    """Per variant, the paired change of its final loss across the sweep, in words."""
    swept = study.swept
    if swept is None:
        return []
    what = "learning rate" if swept == "lr" else "warm-up"
    lines = []
    for e in study.sweep_effects():
        sig = e.delta.p_value is not None and e.delta.p_value < ALPHA
        lines.append(
            f"- `{e.name}` at {e.rung}: {what} {e.low if e.low is not None else 'auto'} instead of "
            f"{e.high if e.high is not None else 'auto'} changes the final loss by {e.delta.format(4, sign=True)} "
            f"(paired over seeds, p {_p(e.delta.p_value)}{', significant' if sig else ', within noise'})."
        )
    return lines


def warmup_verdict(study: StudyResult) -> str | None:
    """With a warm-up sweep, a post-norm base and a ``placement`` swap: whether this study shows
    Xiong et al.'s result (removing warm-up hurts post-norm, not pre-norm), said plainly."""
    if study.swept != "warmup" or study.cells[0][1].runs[0].config.placement.name != "post":
        return None
    rung = study.rungs[-1].name
    effects = {e.axis: e for e in study.sweep_effects() if e.rung == rung}
    post, pre = effects.get("base"), effects.get("placement")
    if post is None or pre is None or post.delta.half_width is None or pre.delta.half_width is None:
        return None
    low, high = post.low if post.low is not None else "auto", post.high if post.high is not None else "auto"
    hurts = post.delta.mean > 0 and post.delta.p_value is not None and post.delta.p_value < ALPHA
    apart = post.delta.mean - pre.delta.mean > math.hypot(post.delta.half_width, pre.delta.half_width)
    said = (
        f"Warm-up {low} instead of {high} at {rung}: post-norm (the base) {post.delta.format(4, sign=True)} "
        f"(p {_p(post.delta.p_value)}), pre-norm {pre.delta.format(4, sign=True)} (p {_p(pre.delta.p_value)})."
    )
    if hurts and apart:
        return said + " This run shows Xiong et al.'s result: without warm-up post-norm ends worse, pre-norm does not."
    if hurts:
        return said + (
            " Removing the warm-up hurts post-norm, but pre-norm's change is not told apart from it: this run "
            "shows only half of Xiong et al.'s result."
        )
    return said + (
        " This run does not show Xiong et al.'s result: post-norm is not significantly worse without warm-up "
        "at this depth, rate and budget (gradient clipping and a short run may hide it; try more layers or a "
        "higher --lr)."
    )


def study_markdown(study: StudyResult) -> str:
    """``report.md`` of a study: the cells, the trends along the ladder, the sweep, caveats, next step."""
    first = study.cells[0][1]
    n = len(first.seeds)
    rule = study.budget["rule"]
    budget = {
        "steps": f"the same {study.budget['value']} steps for every rung",
        "tokens_per_param": f"{study.budget['value']:g} training tokens per non-embedding parameter of the base",
        "flops_per_run": f"{_flops(study.budget['value'])} training FLOPs per run",
    }[rule]
    lines = [
        f"# Study: {study.base} → {study.target}",
        "",
        f"{len(study.cells)} ablations (rungs {', '.join(r.name for r in study.rungs)}; rates "
        f"{', '.join(f'{r:g}' for r in study.rates)}; warm-up "
        f"{', '.join('auto' if w is None else str(w) for w in study.warmups)}), each over {n} seeds with a control "
        f"row and {first.correction} correction; budget: {budget}.",
        "",
        "```bash",
        study.command,
        "```",
        "",
        "## Cells",
        "",
        *cells_table(study),
        "",
    ]
    if len(study.rungs) > 1:
        lines += [
            "## Along the ladder",
            "",
            f"Δ vs base (p adj) at each rung; trend from the first rung to the last: *flat within noise* when the "
            f"change is within the two {LEVEL:.0%} half-widths combined, *flips* when both ends exclude 0 on "
            "opposite sides, else *grows* or *shrinks*.",
            "",
            *trends_table(study),
            "",
        ]
        if study.scale_plot_path:
            lines += [f"![Δ against training FLOPs]({study.scale_plot_path.name})", ""]
    if study.swept:
        lines += [
            "## Learning rate" if study.swept == "lr" else "## Warm-up",
            "",
            "Final validation loss (mean ± 95% CI over seeds) per variant, every point a full budget:",
            "",
            *sweep_table(study),
            "",
            *sweep_sentences(study),
            "",
            *([verdict, ""] if (verdict := warmup_verdict(study)) else []),
        ]
        if study.sweep_plot_path:
            lines += [f"![final loss against the sweep]({study.sweep_plot_path.name})", ""]
    lines += [
        "## Caveats",
        "",
        f"- **Few seeds, low power.** {n} seeds per cell; each cell's report states its noise floor and what "
        "would resolve its unclear rows.",
        f"- **Many comparisons.** Each cell is corrected over its own rows ({first.correction}); comparing "
        "across cells adds comparisons the correction does not cover.",
        "- **Small scale.** Even the largest rung is far from GPT-2 Small (768 x 12); a trend over a few "
        "rungs is a hint of the direction, not an extrapolation.",
        "",
        "## Next step",
        "",
        _study_next_step(study),
        "",
    ]
    return "\n".join(lines)


def _study_next_step(study: StudyResult) -> str:
    if len(study.rungs) < 2:
        return "Add rungs (`--scales`, e.g. 64x2,128x4,192x6) to see whether the effects hold with size."
    if any(t.word == "unknown" for t in study.trends()):
        return "Train `--seeds 3` or more: trends need intervals."
    flat = [t.name for t in study.trends() if t.word == "flat within noise" and t.axis != "control"]
    if flat and len(study.rates) < 2:
        return (
            "Check the rows that stay flat at their own best rates (`--lr-sweep`), and add a larger rung on a GPU "
            "(`--device cuda`) — finished rungs are reused."
        )
    return "Add a larger rung on a GPU (`--device cuda`, `--scales` with one more size): finished rungs are reused."


def plot_scale(study: StudyResult, path: Path) -> Path | None:
    """Per row, Δ vs base with its interval against the training FLOPs of one run, log x, one
    panel per rate and warm-up; None with one rung or without matplotlib."""
    figure = figure_class()
    trends = study.trends()
    if figure is None or not trends:
        return None
    combos = list(itertools.product(study.rates, study.warmups))
    fig = figure(figsize=(8 * len(combos), 5.5), dpi=110)
    axes = fig.subplots(1, len(combos), squeeze=False)[0]
    for ax, (lr, warmup) in zip(axes, combos):
        for t in (t for t in trends if t.lr == lr and t.warmup == warmup):
            style: dict[str, Any] = {"linewidth": 2.5 if t.axis in ("target", "control") else 1.2}
            if t.axis == "control":
                style["linestyle"] = ":"
            ax.errorbar(
                t.train_flops,
                [d.mean for d in t.deltas],
                yerr=[d.half_width or 0.0 for d in t.deltas],
                marker="o",
                capsize=3,
                label=f"{t.name} ({t.word})",
                **style,
            )
        ax.axhline(0.0, color="black", linewidth=1)
        ax.set_xscale("log")
        ax.set_xlabel("training FLOPs of one run (rungs " + ", ".join(r.name for r in study.rungs) + ")")
        ax.set_ylabel(f"Δ final loss vs {study.base} (paired, {LEVEL:.0%} CI; < 0 better)")
        ax.set_title(f"lr {lr:g}, warm-up {'auto' if warmup is None else warmup}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{study.base} -> {study.target}: effects against scale")
    fig.tight_layout()
    fig.savefig(path)
    return path


def plot_sweep(study: StudyResult, path: Path) -> Path | None:
    """Final loss (mean ± CI) against the swept rate (log x) or warm-up, one line per variant,
    one panel per rung (and other axis value); None without a sweep or matplotlib."""
    figure = figure_class()
    swept = study.swept
    if figure is None or swept is None:
        return None
    values: list[Any] = study.rates if swept == "lr" else study.warmups
    others: list[Any] = study.warmups if swept == "lr" else study.rates
    panels = list(itertools.product(study.rungs, others))
    fig = figure(figsize=(6.5 * len(panels), 5), dpi=110)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    xs = [float(v) if v is not None else math.nan for v in values]
    for ax, (rung, other) in zip(axes, panels):
        results = [
            study.cell(rung.name, v, other) if swept == "lr" else study.cell(rung.name, other, v) for v in values
        ]
        for run in results[0].runs:
            if run.axis == "control":
                continue
            rows = [_row(r, run.name) for r in results]
            if any(row is None for row in rows):
                continue
            losses = [row.loss for row in rows if row is not None]
            style = {"linewidth": 2.5} if run.axis in ("base", "target") else {"linewidth": 1.0, "alpha": 0.85}
            ax.errorbar(
                xs,
                [x.mean for x in losses],
                yerr=[x.half_width or 0.0 for x in losses],
                marker="o",
                capsize=3,
                label=run.name,
                **style,
            )
        if swept == "lr":
            ax.set_xscale("log")
        ax.set_xlabel("peak learning rate" if swept == "lr" else "warm-up steps")
        ax.set_ylabel(f"final validation loss (mean ± {LEVEL:.0%} CI)")
        what = f"warm-up {'auto' if other is None else other}" if swept == "lr" else f"lr {other:g}"
        ax.set_title(f"{rung.name}, {what}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{study.base} -> {study.target}: final loss against the {'rate' if swept == 'lr' else 'warm-up'}")
    fig.tight_layout()
    fig.savefig(path)
    return path
