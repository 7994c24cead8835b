"""The pieces of a study over a grid (``grid.run_study``): the rungs of a scale ladder, the
cells (rung x rate x warm-up), and what the study measured: each cell's ablation, every
row's Δ along the ladder with the word for its trend, and the change across a sweep."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from zoo.ablate.advice import trend
from zoo.ablate.results import LEVEL, AblationResult, AblationRun
from zoo.ablate.scaling import Agreement, agreement, slope
from zoo.ablate.stats import Interval, adjust_optional, paired_difference, welch_difference
from zoo.errors import ConfigError, InputError


@dataclass(frozen=True)
class Rung:
    """One size of a scale ladder: d_model x layers, with ``heads`` at the ladder's head size."""

    d_model: int
    layers: int
    heads: int

    @property
    def name(self) -> str:
        return f"{self.d_model}x{self.layers}"


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
    parameters: int | None = None  # the base's non-embedding parameters at this rung (the budget's N)

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
            "non_embedding_parameters": self.parameters,
        }

    def tokens_per_param(self, tokens_per_step: int) -> float | None:
        """Training tokens of one run per non-embedding parameter of the base (None: not counted)."""
        return self.steps * tokens_per_step / self.parameters if self.parameters else None

    def epochs(self, tokens_per_step: int, train_tokens: int) -> float | None:
        """Training tokens of one run over the tokens of the training split: passes over the data."""
        return self.steps * tokens_per_step / train_tokens if train_tokens > 0 else None


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
    change: Interval | None = None  # last rung's Δ minus the first's (Welch), corrected over the rows' trends
    slope: Interval | None = None  # Δ per unit of ln(non-embedding parameters), over seeds, corrected over rows
    sizes: list[int] = field(default_factory=list)  # the base's non-embedding parameters at each rung

    @property
    def word(self) -> str:
        return trend(self.deltas, self.change)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axis": self.axis,
            "lr": self.lr,
            "warmup": self.warmup,
            "trend": self.word,
            "change": self.change.to_dict() if self.change is not None else None,
            "slope": self.slope.to_dict() if self.slope is not None else None,
            "non_embedding_parameters": self.sizes,
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
    swept: str = "lr"  # the axis swept: "lr" or "warmup"
    at: Any = None  # the other axis's value in a rate x warm-up grid (None: it has one value)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axis": self.axis,
            "rung": self.rung,
            "swept": self.swept,
            "at": self.at,
            "from": self.low,
            "to": self.high,
            "delta": self.delta.to_dict(),
        }


@dataclass(frozen=True)
class Interaction(SweepEffect):
    """Whether a swap changes what the sweep does: ``delta`` is the row's sweep change minus
    the base's, paired over seeds (a difference of differences). For a warm-up sweep and the
    ``placement`` row: how much less pre-norm loses without warm-up than post-norm does
    (negative: removing warm-up costs the base more). ``delta.p_adjusted`` is corrected
    over the study's interaction tests."""

    def to_dict(self) -> dict[str, Any]:
        row = super().to_dict()
        row["difference_of_differences"] = row.pop("delta")
        return row


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
    options: dict[str, Any] = field(default_factory=dict)  # every option of run_study (options.record)

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

    def swept_cell(self, rung: Rung, value: Any, swept: str | None = None, at: Any = "first") -> AblationResult:
        """The cell at ``value`` of the swept axis (``swept``, default the plotted one), the
        other axis at ``at`` (default its first value)."""
        swept = swept or self.swept
        if swept == "lr":
            return self.cell(rung.name, value, at)
        return self.cell(rung.name, None if at == "first" else at, value)

    @property
    def swept_axes(self) -> list[str]:
        """Every axis with more than one value: ``["lr"]``, ``["warmup"]``, both, or none."""
        return [axis for axis, values in (("lr", self.rates), ("warmup", self.warmups)) if len(values) > 1]

    def _sweep_ends(self) -> Iterator[tuple[str, Any, Rung, Any, Any, AblationResult, AblationResult]]:
        """Per swept axis, per value of the other axis (a rate x warm-up grid sweeps each at
        every value of the other), per rung: the axis, that value (None when the other axis
        has one value), the rung, the sweep's first and last values and their cells."""
        for swept in self.swept_axes:
            values: list[Any] = self.rates if swept == "lr" else self.warmups
            others: list[Any] = self.warmups if swept == "lr" else self.rates
            for other in others:
                at = other if len(others) > 1 else None
                for rung in self.rungs:
                    low, high = values[0], values[-1]
                    yield (
                        swept,
                        at,
                        rung,
                        low,
                        high,
                        self.swept_cell(rung, low, swept, other),
                        self.swept_cell(rung, high, swept, other),
                    )

    def trends(self) -> list[Trend]:
        """Per rate and warm-up, per row but the base: its Δ at every rung (one rung: none), and
        the change of its Δ from the first rung to the last: Welch's test on the two rungs'
        per-seed Δs (independent runs, as no model is shared across rungs; seeds of the same
        number share only a data order), its p adjusted by the study's correction over these
        tests of every row together. ``Trend.word`` reads only corrected results. A row that did
        not learn at some rung (or whose base did not) has no trend."""
        if len(self.rungs) < 2:
            return []
        out = []
        for lr, warmup in itertools.product(self.rates, self.warmups):
            results = [self.cell(r.name, lr, warmup) for r in self.rungs]
            for run in results[0].rows("plan")[1:]:
                rows = [row_named(result, run.name) for result in results]
                if any(
                    row is None or not row.learned or not result.runs[0].learned for row, result in zip(rows, results)
                ):
                    continue  # a rung where it (or its base) did not learn measures no trend
                found = [row for row in rows if row is not None]
                sizes = self._sizes(lr, warmup, found)
                deltas = [_per_seed_delta(row, result) for row, result in zip(found, results)]
                out.append(
                    Trend(
                        run.name,
                        run.axis,
                        lr,
                        warmup,
                        [r.name for r in self.rungs],
                        [row.train_flops for row in found],
                        [row.delta_vs_base for row in found],
                        welch_difference(found[0].delta_vs_base, found[-1].delta_vs_base, LEVEL),
                        slope(sizes, deltas, LEVEL) if len(self.rungs) > 1 else None,
                        sizes,
                    )
                )
        adjusted = adjust_optional([t.change.p_value if t.change else None for t in out], self.correction)
        out = [replace(t, change=replace(t.change, p_adjusted=p)) if t.change else t for t, p in zip(out, adjusted)]
        adjusted = adjust_optional([t.slope.p_value if t.slope else None for t in out], self.correction)
        return [replace(t, slope=replace(t.slope, p_adjusted=p)) if t.slope else t for t, p in zip(out, adjusted)]

    def _sizes(self, lr: float, warmup: int | None, rows: list[AblationRun]) -> list[int]:
        """The base's non-embedding parameters at each rung (a row's own count where a cell has none)."""
        cells = {(c.rung.name, c.lr, c.warmup): c for c, _ in self.cells}
        return [cells[(rung.name, lr, warmup)].parameters or row.parameters for rung, row in zip(self.rungs, rows)]

    def agreement(self) -> list[Agreement]:
        """Per rate and warm-up, per rung below the top: how often it orders the rows that
        learned at every rung (the target and the swaps; not the control) as the top rung
        does, with a bootstrap interval over seeds."""
        if len(self.rungs) < 2:
            return []
        found = []
        for lr, warmup in itertools.product(self.rates, self.warmups):
            results = [self.cell(r.name, lr, warmup) for r in self.rungs]
            names = [run.name for run in results[-1].runs[1:]]
            table = [[row_named(r, n) for r in results] for n in names]
            keep = [[row for row in rows if row is not None and row.learned] for rows in table]
            keep = [rows for rows in keep if len(rows) == len(results)]
            if len(keep) < 2 or not all(r.runs[0].learned for r in results):
                continue  # no two rows to order
            per_rung = [
                torch.tensor([_per_seed_delta(rows[i], r) for rows in keep], dtype=torch.float64)
                for i, r in enumerate(results)
            ]
            for rung, deltas in zip(self.rungs[:-1], per_rung[:-1]):
                shown = agreement(rung.name, self.rungs[-1].name, deltas, per_rung[-1], LEVEL)
                if shown is not None:
                    found.append(shown)
        return found

    def sweep_effects(self) -> list[SweepEffect]:
        """Per swept axis (and value of the other axis), per rung, per variant: the paired
        change of its final loss from the sweep's first value to its last (same seeds, same
        data order), corrected over all of these tests together."""
        effects = []
        for swept, at, rung, low, high, first, last in self._sweep_ends():
            for run in first.runs:
                other = row_named(last, run.name)
                if other is None or run.axis == "control" or not (run.learned and other.learned):
                    continue
                delta = paired_difference(other.losses(), run.losses(), LEVEL)
                effects.append(SweepEffect(run.name, run.axis, rung.name, low, high, delta, swept, at))
        adjusted = adjust_optional([e.delta.p_value for e in effects], self.correction)
        return [replace(e, delta=replace(e.delta, p_adjusted=p)) for e, p in zip(effects, adjusted)]

    @property
    def tokens_per_step(self) -> int:
        return int(self.budget["tokens_per_step"])

    @property
    def tuned(self) -> bool:
        """Whether each cell trains every variant at its own rate from a sweep (``tune_lr``)."""
        return any(result.tuning for _, result in self.cells)

    @property
    def correction(self) -> str:
        return self.cells[0][1].correction

    def interactions(self) -> list[Interaction]:
        """Per swept axis (and value of the other axis), per rung, per swapped row: its change
        across the sweep minus the base's, paired over seeds, corrected over these tests
        together."""
        found = []
        for swept, at, rung, low, high, first, last in self._sweep_ends():
            base = [a - b for a, b in zip(first.runs[0].losses(), last.runs[0].losses())]
            for run in first.runs[1:]:
                other = row_named(last, run.name)
                if other is None or run.axis in ("control", "target"):
                    continue
                change = [a - b for a, b in zip(run.losses(), other.losses())]
                found.append(
                    Interaction(
                        run.name, run.axis, rung.name, low, high, paired_difference(base, change, LEVEL), swept, at
                    )
                )
        adjusted = adjust_optional([i.delta.p_value for i in found], self.correction)
        return [replace(i, delta=replace(i.delta, p_adjusted=p)) for i, p in zip(found, adjusted)]

    def to_dict(self) -> dict[str, Any]:
        return {
            "base": self.base,
            "target": self.target,
            "command": self.command,
            "options": self.options,
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
                    "noise_floor_corrected": result.noise_floor(corrected=True),
                    "baselines": result.baselines.to_dict() if result.baselines is not None else None,
                    "under_trained": result.under_trained,
                    "marks_unreliable": result.marks_unreliable,
                    "train_flops_base": result.runs[0].train_flops,
                    "tokens_per_run": cell.steps * self.tokens_per_step,
                    "tokens_per_param": cell.tokens_per_param(self.tokens_per_step),
                    "train_tokens": result.data["train_tokens"],
                    "epochs": cell.epochs(self.tokens_per_step, result.data["train_tokens"]),
                    "tuning": result.tuning,
                    "on_edge": result.on_edge,
                    "interactions": [i.to_dict() for i in result.interactions],
                }
                for cell, result in self.cells
            ],
            "trends": [t.to_dict() for t in self.trends()],
            "agreement": [a.to_dict() for a in self.agreement()],
            "sweep": {
                "axis": self.swept,
                "axes": self.swept_axes,
                "correction": self.correction,
                "effects": [e.to_dict() for e in self.sweep_effects()],
                "interactions": [i.to_dict() for i in self.interactions()],
            },
            "plots": {
                "scale": str(self.scale_plot_path) if self.scale_plot_path else None,
                "sweep": str(self.sweep_plot_path) if self.sweep_plot_path else None,
            },
            "report": str(self.report_path) if self.report_path else None,
        }


def corpus_agreement(first: AblationResult, second: AblationResult) -> Agreement | None:
    """How often ``second`` (the same ablation, the same seeds, on another corpus) orders the
    rows that learned in both (the target and the swaps; not the control) as ``first``
    does: the share of row pairs ordered alike, with a bootstrap interval over seeds; None
    with fewer than two such rows, or a base that did not learn."""
    names = [run.name for run in first.runs[1:] if run.axis != "control"]
    rows = [(row_named(first, n), row_named(second, n)) for n in names]
    kept = [(a, b) for a, b in rows if a is not None and b is not None and a.learned and b.learned]
    if len(kept) < 2 or not (first.runs[0].learned and second.runs[0].learned):
        return None
    deltas = [
        torch.tensor([_per_seed_delta(pair[i], result) for pair in kept], dtype=torch.float64)
        for i, result in enumerate((first, second))
    ]
    where = [str(result.data.get("source", "?")) for result in (first, second)]
    return agreement(where[1], where[0], deltas[1], deltas[0], LEVEL)


def _per_seed_delta(row: AblationRun, result: AblationResult) -> list[float]:
    """``row``'s final loss minus its cell's base's, seed by seed."""
    return [a - b for a, b in zip(row.losses(), result.runs[0].losses())]


def row_named(result: AblationResult, name: str) -> AblationRun | None:
    """The row called ``name`` (the control included), or None."""
    return next((run for run in result.rows("plan") if run.name == name), None)


def _table_dict(result: AblationResult) -> list[dict[str, Any]]:
    """A cell's rows, without curves: what the study's tables need, with every seed's final
    loss and every sweep run, so a reader recomputes each number from this file alone."""
    return [
        {
            "name": run.name,
            "axis": run.axis,
            "loss": run.loss.to_dict(),
            "delta_vs_base": run.delta_vs_base.to_dict(),
            "significant": run.significant,
            "learned": run.learned,
            "did_not_learn": run.not_learned,
            "per_seed": {str(s.seed): s.final_val_loss for s in run.seeds},
            "tune": run.tune_dict(),
            "lr": run.lr,
            "on_edge": run.on_edge,
            "train_flops": run.train_flops,
            "parameters": run.parameters,
        }
        for run in result.rows()
    ]
