"""What an ablation measured: a run per variant and seed, the variants with their
statistics, and the whole study (``AblationResult``), each with its ``to_dict`` for
``ablation.json``."""

from __future__ import annotations

import html
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from zoo.ablate.baselines import Baselines
from zoo.ablate.compare import SIZE_AXES
from zoo.ablate.diagnostics import Diagnostics
from zoo.ablate.lengths import Extrapolation
from zoo.ablate.options import EDGE_EXTENSIONS, ORDERS
from zoo.ablate.stats import DEFAULT_CORRECTION, POWER, Interval, detectable_difference, mean_interval
from zoo.ablate.tuning import TuneRun, sweep_edges
from zoo.errors import InputError, printable
from zoo.nn.config import ModelConfig
from zoo.training import CurvePoint, TrainSettings

#: Confidence level of every interval; a test is significant when its (adjusted) p is below 1 - LEVEL.
LEVEL = 0.95
ALPHA = 1.0 - LEVEL
#: Paired differences smaller than this (nats/token) are float rounding, not effects:
#: a swap that computes the same loss another way (head_output=logits) differs by ~1e-7,
#: consistently enough over seeds for its interval to exclude 0. Never marked significant.
MIN_EFFECT = 1e-4
#: Training FLOPs per token as a multiple of the forward FLOPs (backward ~ 2x forward).
TRAIN_FLOPS_FACTOR = 3
#: A seed whose final loss is within this of the unigram reference (nats/token) learned
#: nothing a token's frequency does not give: its row "plateaus at the unigram".
PLATEAU = 0.05


@dataclass(frozen=True)
class SeedRun:
    """One trained model: a variant at one seed, with its checkpoint."""

    seed: int
    final_val_loss: float
    curve: list[CurvePoint]
    tokens_per_second: float  # its training steps' tokens per second, evaluation excluded
    checkpoint: Path
    train_seconds: float | None = None  # the wall time of its training steps (None in older records)
    reused: bool = False  # read back from an earlier, interrupted ablation
    diagnostics: list[Diagnostics] = field(default_factory=list)  # at each evaluation (none in older records)
    eval_lengths: dict[int, float | None] = field(default_factory=dict)  # --eval-lengths: loss by length, None: N/A

    def to_dict(self) -> dict[str, Any]:
        return {
            "seed": self.seed,
            "final_val_loss": self.final_val_loss,
            "curve": curve_dict(self.curve),
            "tokens_per_second": self.tokens_per_second,
            "train_seconds": self.train_seconds,
            "checkpoint": str(self.checkpoint),
            "diagnostics": [d.to_dict() for d in self.diagnostics],
            "eval_lengths": {str(length): loss for length, loss in self.eval_lengths.items()},
        }


@dataclass
class AblationRun:
    """One variant of an ablation, trained once per seed.

    ``axis`` is ``"base"``, ``"target"``, ``"control"`` (the base again under an
    independent seed stream: its difference shows the base's spread over seeds) or the
    config field swapped to the target's value (on a cumulative path: the field this row
    adds). ``loss`` is the final validation loss over the seeds; ``delta_vs_base`` the
    paired difference to the base (negative: better than the base); ``delta_vs_previous``
    on a path, the paired difference to the row before (what adding this swap did). Their
    ``p_adjusted`` is the p-value after the study's family-wise correction. ``flops_per_token`` is
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
    extrapolation: Extrapolation | None = None  # its losses at --eval-lengths (None without)
    not_learned: str | None = None  # why it is not evidence (a seed not below the bigram), or None
    flat_sweep: bool = False  # its sweep was within the seed noise: it trained at the base's rate

    @property
    def learned(self) -> bool:
        """Whether every seed beat the bigram reference (``AblationResult.judge_learning``):
        a row that did not is shown as *did not learn*, never marked, and left out of
        interactions and trends."""
        return self.not_learned is None

    @property
    def on_edge(self) -> bool | None:
        """With a sweep: whether its best rate is still the lowest or highest rate it trained,
        after ``EDGE_EXTENSIONS`` extra rates past that edge (so the best may lie beyond);
        None without a sweep."""
        return bool(sweep_edges(self.tune)) if self.tune else None

    def tune_dict(self) -> dict[str, Any] | None:
        """``ablation.json``'s record of the sweep that chose ``lr``: the rates trained (the
        grid and any past its edges), each one's final loss, the winner and ``on_edge``."""
        if not self.tune:
            return None
        return {
            "grid": [t.lr for t in self.tune if not t.full and not t.reseeded],
            "runs": [t.to_dict() for t in self.tune],
            "finalists": [t.lr for t in self.tune if t.full and not t.reseeded],
            "winner": self.lr,
            "flat": self.flat_sweep,
            "on_edge": self.on_edge,
        }

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
    def tested(self) -> Interval:
        """The difference this row's mark is about: to the row before on a path, else to the base."""
        return self.delta_vs_previous or self.delta_vs_base

    @property
    def significant(self) -> bool:
        """Whether this row's difference (to the base; on a path, to the row before) is
        significant after the study's correction (adjusted p < 1 - ``LEVEL``; without a
        correction set, its interval excludes 0) and at least ``MIN_EFFECT``."""
        delta = self.tested
        if self.axis == "base" or not self.learned or abs(delta.mean) < MIN_EFFECT:
            return False
        return delta.significant if delta.p_adjusted is None else delta.p_adjusted < ALPHA

    @property
    def significant_before_correction(self) -> bool:
        """The mark this row would carry without the correction."""
        delta = self.tested
        return self.axis != "base" and self.learned and delta.significant and abs(delta.mean) >= MIN_EFFECT

    @property
    def detectable(self) -> float | None:
        """The smallest difference this row's seeds would detect with 80% power (two-sided
        ``1 - LEVEL``, before correction), from the spread of its paired differences."""
        sd, n = self.tested.sd, self.tested.n
        return None if self.axis == "base" or sd is None or n < 2 else detectable_difference(sd, n, alpha=ALPHA)

    def losses(self) -> list[float]:
        return [s.final_val_loss for s in self.seeds]

    @property
    def tokens_per_second(self) -> float:
        """The mean over the seeds of each run's training tokens per second."""
        return sum(s.tokens_per_second for s in self.seeds) / len(self.seeds)

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
            "tokens_per_second": self.tokens_per_second,
            "significant": self.significant,
            "significant_before_correction": self.significant_before_correction,
            "learned": self.learned,
            "did_not_learn": self.not_learned,
            "detectable_delta": self.detectable,
            "extrapolation": (
                None if self.extrapolation is None else self.extrapolation.to_dict(self.extrapolation.cells[0].length)
            ),
            "tune": self.tune_dict(),
            "seeds": [s.to_dict() for s in self.seeds],
            "mean_curve": [{"step": step, **ci.to_dict()} for step, ci in self.mean_curve()],
        }


@dataclass(frozen=True)
class SwapInteraction:
    """What a paired row (``--swaps a+b``) shows beyond its single swaps: per seed,
    loss(a+b) - loss(a) - loss(b) + loss(base), i.e. Δ(a+b) - Δ(a) - Δ(b) paired over seeds
    (with k axes, + (k - 1) × loss(base)); 0 when the swaps add up. ``delta.p_adjusted`` is
    corrected in the table's family, with its rows (``AblationResult.tests``)."""

    name: str  # the paired row
    axes: tuple[str, ...]
    rows: tuple[str, ...]  # the single swaps' rows, in the pair's order
    values: tuple[float, ...]  # per seed
    delta: Interval

    @property
    def significant(self) -> bool:
        """Adjusted p below 1 - ``LEVEL`` (without a correction set, the interval excludes 0)
        and at least ``MIN_EFFECT``: a row's rule."""
        if abs(self.delta.mean) < MIN_EFFECT:
            return False
        return self.delta.significant if self.delta.p_adjusted is None else self.delta.p_adjusted < ALPHA

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "axes": list(self.axes),
            "rows": list(self.rows),
            "per_seed": list(self.values),
            "interaction": self.delta.to_dict(),
            "significant": self.significant,
        }


def swap_interactions(runs: list[AblationRun]) -> list[SwapInteraction]:
    """Per paired row whose single swaps are all in ``runs`` (plan order: base first, target
    last) and which, with them and the base, learned: its interaction, uncorrected
    (``ablation.corrected`` adjusts it with the table)."""
    base, middle = runs[0], runs[1:-1]
    found = []
    for run in middle:
        singles = singles_of(run, middle)
        if singles is None or not all(r.learned for r in (base, run, *singles)):
            continue  # a model that did not train measures no interaction (``unlearned_interactions``)
        parts = [one.losses() for one in singles]
        values = tuple(
            pair - math.fsum(one[i] for one in parts) + (len(parts) - 1) * b
            for i, (pair, b) in enumerate(zip(run.losses(), base.losses()))
        )
        axes, rows = tuple(run.axis.split("+")), tuple(one.name for one in singles)
        found.append(SwapInteraction(run.name, axes, rows, values, mean_interval(values, LEVEL)))
    return found


def singles_of(run: AblationRun, rows: list[AblationRun]) -> list[AblationRun] | None:
    """The single-swap rows among ``rows`` a paired row is made of, matched by name (a pair
    ``a=x+b=y`` of the rows ``a=x`` and ``b=y``); None for a single row or a part missing."""
    if "+" not in run.axis:
        return None
    singles = {row.name: row for row in rows if "+" not in row.axis}
    found = [singles.get(part) for part in run.name.split("+")]
    return None if any(row is None for row in found) else [row for row in found if row is not None]


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
    correction: str = DEFAULT_CORRECTION  # the family-wise correction over the rows' tests
    diagnostics_plot_path: Path | None = None
    control: AblationRun | None = None  # the A/A row (None in results from before it existed)
    baselines: Baselines | None = None  # the n-gram reference rows on the same eval windows
    options: dict[str, Any] = field(default_factory=dict)  # every option of run_ablation (options.record)
    eval_lengths: list[int] = field(default_factory=list)  # --eval-lengths as token counts: T, 2T, ... (or none)
    interactions: list[SwapInteraction] = field(default_factory=list)  # of the paired rows (--swaps a+b)
    runs_at_once: int | None = None  # how many trained side by side (workers, ranks); None: Ray's or none trained

    @property
    def tokens_per_second(self) -> float:
        """The mean training tokens per second of one run, over every run of the table."""
        seeds = [s for run in [*self.runs, *([self.control] if self.control else [])] for s in run.seeds]
        return sum(s.tokens_per_second for s in seeds) / len(seeds)

    def throughput(self) -> str:
        """``throughput: N tokens/s per run (M runs at once)``: the line the summary and report show."""
        at_once = (
            "as Ray tasks"
            if self.options.get("launcher") == "ray" and self.runs_at_once is None
            else "runs reused"
            if self.runs_at_once is None
            else f"{self.runs_at_once} run{'s' if self.runs_at_once != 1 else ''} at once"
        )
        return f"throughput: {self.tokens_per_second:,.0f} tokens/s per run ({at_once})"

    @property
    def under_trained(self) -> list[str]:
        """The base and target rows whose mean final loss does not beat the bigram reference:
        a table with any is about how fast designs start to learn, not what they are worth."""
        if self.baselines is None:
            return []
        return [run.name for run in (self.runs[0], self.runs[-1]) if not run.loss.mean < self.baselines.bigram]

    def judge_learning(self, read_unlearned: bool = False) -> None:
        """Set every row's ``not_learned`` (the control's too) from the reference rows; without
        them (ranks > 0, older records) every row counts as learned. ``read_unlearned``
        (``--read-unlearned``): every row is read, and the rows that did not learn are named
        in ``notes``."""
        for run in [*self.runs, *([self.control] if self.control is not None else [])]:
            cause = None if self.baselines is None else learning_cause(run, self.baselines)
            run.not_learned = None if read_unlearned else cause
            if cause and read_unlearned:
                self.notes.append(f"read as asked (--read-unlearned), though it did not learn: {run.name} {cause}")

    @property
    def did_not_learn(self) -> list[str]:
        """Every row (control included) that is not evidence, in table order, with its cause."""
        return [f"{run.name}: {run.not_learned}" for run in self.rows() if run.not_learned]

    @property
    def marks_unreliable(self) -> bool:
        """Whether the control (the base against itself under other seeds) is marked after
        correction: then this table's intervals are not calibrated and its marks cannot be read."""
        return self.control is not None and self.control.significant

    @property
    def on_edge(self) -> list[str]:
        """The variants whose tuned rate sits on the edge of their sweep (``AblationRun.on_edge``)."""
        return [run.name for run in self.runs if run.on_edge]

    def run(self, name_or_axis: str) -> AblationRun:
        """The run called ``name_or_axis``, or the one that swapped that axis."""
        for run in self.rows("plan"):
            if name_or_axis in (run.name, run.axis):
                return run
        names = ", ".join(repr(n) for run in self.rows("plan") for n in dict.fromkeys((run.name, run.axis)))
        raise InputError(f"this ablation has no run or axis {name_or_axis!r}; it has {names}")

    def rows(self, order: str | None = None) -> list[AblationRun]:
        """The runs in table order: ``"effect"`` puts the swaps between base and target by
        the size of their effect, largest first; ``"plan"`` keeps the plan's (§08) order.
        A cumulative path always keeps its order."""
        order = order or self.order
        if order not in ORDERS:
            raise InputError(f"unknown row order {order!r}; use one of {', '.join(ORDERS)}")
        control = [self.control] if self.control is not None else []
        if order == "plan" or self.mode == "path":
            return [self.runs[0], *control, *self.runs[1:]]
        middle = sorted(self.runs[1:-1], key=lambda r: -abs(r.delta_vs_base.mean))
        return [self.runs[0], *control, *middle, self.runs[-1]]

    @property
    def swaps(self) -> list[AblationRun]:
        """The rows between base and target (single swaps or path steps)."""
        return self.runs[1:-1]

    @property
    def tests(self) -> int:
        """How many tests the correction is over: every row but the base, the control and the
        interactions of paired rows included."""
        return len(self.runs) - 1 + (self.control is not None) + len(self.interactions)

    def noise_floor(self, *, corrected: bool = False, without: str | None = None) -> float | None:
        """The smallest paired Δ these seeds detect with 80% power, from the spread of the
        swaps' paired differences (root mean square; the target's or the control's when
        there are no swaps). ``corrected``: at the level Bonferroni and Holm's first step
        need, (1 - LEVEL) / tests, rather than 1 - LEVEL. ``without``: leave that row's spread
        out (the tests the correction counts stay the same)."""
        rows = self.swaps or [run for run in self.runs if run.axis == "target"] or self.runs[1:]
        rows = [run for run in rows if run.name != without]
        spreads = [run.tested.sd for run in rows if run.tested.sd is not None]
        n = len(self.seeds)
        if not spreads or n < 2:
            return None
        sd = math.sqrt(sum(v * v for v in spreads) / len(spreads))
        alpha = ALPHA / max(1, self.tests) if corrected and self.correction in ("holm", "bonferroni") else ALPHA
        return detectable_difference(sd, n, alpha=alpha)

    def dominant_spread(self) -> AblationRun | None:
        """The swap whose paired spread sets the noise floor: its variance is more than all
        the other swaps' together (and there are at least three swaps); else None."""
        rows = [run for run in self.swaps if run.tested.sd is not None]
        if len(rows) < 3:
            return None
        widest = max(rows, key=lambda run: run.tested.sd or 0.0)
        rest = sum((run.tested.sd or 0.0) ** 2 for run in rows if run is not widest)
        return widest if (widest.tested.sd or 0.0) ** 2 > rest else None

    @property
    def total_train_flops(self) -> float:
        main = sum(run.train_flops * len(run.seeds) for run in [*self.runs, *([self.control] if self.control else [])])
        tune_steps = self.tuning["steps"] if self.tuning else 0
        per_step = self.settings.tokens_per_step * TRAIN_FLOPS_FACTOR
        steps = [(self.settings.steps if t.full else tune_steps) for run in self.runs for t in run.tune]
        runs = [run for run in self.runs for _ in run.tune]
        return main + sum(run.flops_per_token * per_step * n for run, n in zip(runs, steps))

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
            "correction": self.correction,
            "noise_floor": {
                "delta": self.noise_floor(),
                "delta_corrected": self.noise_floor(corrected=True),
                "seeds": len(self.seeds),
                "power": POWER,
                "alpha": ALPHA,
                "tests": self.tests,
            },
            "tuning": (
                {**self.tuning, "edge_extensions": EDGE_EXTENSIONS, "on_edge": self.on_edge} if self.tuning else None
            ),
            "budget": {
                "tokens_per_run": self.settings.steps * self.settings.tokens_per_step,
                "train_flops_factor": TRAIN_FLOPS_FACTOR,
                "total_train_flops": self.total_train_flops,
            },
            "throughput": {"tokens_per_second": self.tokens_per_second, "runs_at_once": self.runs_at_once},
            "data": self.data,
            "baselines": (
                {**self.baselines.to_dict(), "under_trained": self.under_trained, "did_not_learn": self.did_not_learn}
                if self.baselines is not None
                else None
            ),
            "marks_unreliable": self.marks_unreliable,
            "command": self.command,
            "options": self.options,
            "zoo_version": self.version,
            "order": self.order,
            "table": [run.name for run in self.rows()],
            "runs": [run.to_dict() for run in self.runs],
            "eval_lengths": self.eval_lengths,
            "control": self.control.to_dict() if self.control is not None else None,
            "interactions": [i.to_dict() for i in self.interactions],
            "plots": {
                "curves": str(self.plot_path) if self.plot_path else None,
                "deltas": str(self.delta_plot_path) if self.delta_plot_path else None,
                "diagnostics": str(self.diagnostics_plot_path) if self.diagnostics_plot_path else None,
            },
            "report": str(self.report_path) if self.report_path else None,
            "notes": self.notes,
        }


def learning_cause(run: AblationRun, baselines: Baselines) -> str | None:
    """Why ``run`` is not evidence about its design, or None when every seed beat the bigram:
    a diverged seed, seeds that plateau at the unigram, or seeds above the bigram."""
    seeds = [(s.seed, s.final_val_loss) for s in run.seeds]
    if diverged := [seed for seed, loss in seeds if not math.isfinite(loss)]:
        return f"diverged (seed {', '.join(map(str, diverged))}: loss not finite)"
    if flat := [seed for seed, loss in seeds if loss >= baselines.unigram - PLATEAU]:
        return f"plateaus at the unigram ({baselines.unigram:.4f}) in seed {', '.join(map(str, flat))}"
    if above := [seed for seed, loss in seeds if not loss < baselines.bigram]:
        return f"does not beat the bigram ({baselines.bigram:.4f}) in seed {', '.join(map(str, above))}"
    return None


def unlearned_interactions(runs: list[AblationRun]) -> list[str]:
    """The paired rows whose interaction ``swap_interactions`` leaves out because a row it
    needs did not learn, each with that row."""
    base, middle = runs[0], runs[1:-1]
    left = []
    for run in middle:
        singles = singles_of(run, middle)
        if singles is None:
            continue
        stuck = [r.name for r in (base, run, *singles) if not r.learned]
        if stuck:
            left.append(f"{run.name} (not tested: {', '.join(stuck)} did not learn)")
    return left


def curve_dict(curve: list[CurvePoint]) -> list[dict[str, Any]]:
    return [{"step": p.step, "train_loss": p.train_loss, "val_loss": p.val_loss} for p in curve]


def md_block(text: str, info: str) -> list[str]:
    """The lines of a fenced code block of ``text`` (a command holding a data path) that
    ``text`` cannot close: fenced by more backticks than it holds, controls escaped."""
    shown = "\n".join(printable(line, None) for line in text.split("\n"))
    fence = "`" * max(3, max((len(run) for run in re.findall("`+", shown)), default=0) + 1)
    return [f"{fence}{info}", shown, fence]


# What can start markup inside a line; "_" only at a word's edge (inside a word it is plain text).
_MARKDOWN = re.compile(r"([\\`*\[\]!|~]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md(text: object) -> str:
    """A string from a file or an argument as plain markdown text: control characters as
    escapes, HTML's ``& < >`` as entities, markdown's punctuation backslashed, so a data
    path or a name cannot add a link, an image, a table cell or markup to ``report.md``."""
    shown = html.escape(printable(text, None), quote=False)
    return _MARKDOWN.sub(r"\\\1", shown)


_UNESCAPED_BAR = re.compile(r"(?<!\\)((?:\\\\)*)\|")  # a "|" after an even run of backslashes


def md_row(cells: list[str]) -> str:
    """A markdown table row of ``table``'s text cells: the first (a run's name) as ``md``
    text, a ``|`` the others leave unescaped escaped (once), so no cell splits in two."""
    return "| " + " | ".join([md(cells[0]), *(_UNESCAPED_BAR.sub(r"\1\\|", cell) for cell in cells[1:])]) + " |"


def md_code(text: object) -> str:
    """``text`` as an inline code span: fenced by more backticks than it holds (and
    control characters escaped), so it cannot close the span. Text holding ``|`` or a
    backslash is ``md``'s plain text instead: a table splits its cells at a ``|`` even
    inside a code span, and a backslash there cannot escape it."""
    if isinstance(text, str) and ("|" in text or "\\" in text):
        return md(text)
    shown = printable(text, None)
    fence = "`" * (max((len(run) for run in re.findall("`+", shown)), default=0) + 1)
    pad = " " if shown.startswith("`") or shown.endswith("`") else ""
    return f"{fence}{pad}{shown}{pad}{fence}"
