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
p-value (``zoo.ablate.stats``); a swap is significant when that interval excludes 0 (and
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

The package, by role: ``options`` (each option once, its flag, repeat command and record
derived), ``plan`` (variants, jobs), ``runner`` (training the jobs),
``records`` (a run's record file, reuse), ``results`` (what was measured), ``report``
(table, ``report.md``, plots), ``compare`` (``diff_configs``, also ``zoo compare``'s) and
``ablation`` (``run_ablation``, which goes through them in that order); ``advice`` (noise
floor, caveats, next step) and ``diagnostics`` (inside each run) feed the report. A study over
a grid of scale rungs, rates and warm-ups: ``ladder`` (its pieces), ``studies`` (``run_study``),
``study_report``; ``docs`` writes results into a page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from zoo._lazy import lazy_names

if TYPE_CHECKING:  # the names below load on first use: ``zoo ablate --help`` needs none of the training
    from zoo.ablate.ablation import run_ablation
    from zoo.ablate.compare import AXES, SIZE_AXES, diff_configs
    from zoo.ablate.ladder import StudyResult, corpus_agreement
    from zoo.ablate.options import (
        DEFAULT_SCALE,
        DEFAULT_SEEDS,
        DEMO_SCALE,
        FLAG_OPTIONS,
        LR_GRID_FACTORS,
        ORDERS,
        TUNE_FRACTION,
        TUNE_SEED_OFFSET,
    )
    from zoo.ablate.report import plot_curves, plot_deltas, report_markdown, significant_swaps, table, write_report
    from zoo.ablate.results import (
        LEVEL,
        MIN_EFFECT,
        TRAIN_FLOPS_FACTOR,
        AblationResult,
        AblationRun,
        SeedRun,
        SwapInteraction,
    )
    from zoo.ablate.runner import ProgressCallback
    from zoo.ablate.studies import run_study
    from zoo.ablate.tuning import TuneRun

_LAZY = {
    "AXES": "zoo.ablate.compare",
    "SIZE_AXES": "zoo.ablate.compare",
    "diff_configs": "zoo.ablate.compare",
    "run_study": "zoo.ablate.studies",
    "StudyResult": "zoo.ablate.ladder",
    "corpus_agreement": "zoo.ablate.ladder",
    "DEFAULT_SCALE": "zoo.ablate.options",
    "DEFAULT_SEEDS": "zoo.ablate.options",
    "DEMO_SCALE": "zoo.ablate.options",
    "FLAG_OPTIONS": "zoo.ablate.options",
    "LR_GRID_FACTORS": "zoo.ablate.options",
    "TUNE_FRACTION": "zoo.ablate.options",
    "TUNE_SEED_OFFSET": "zoo.ablate.options",
    "plot_curves": "zoo.ablate.report",
    "plot_deltas": "zoo.ablate.report",
    "report_markdown": "zoo.ablate.report",
    "significant_swaps": "zoo.ablate.report",
    "table": "zoo.ablate.report",
    "write_report": "zoo.ablate.report",
    "LEVEL": "zoo.ablate.results",
    "MIN_EFFECT": "zoo.ablate.results",
    "ORDERS": "zoo.ablate.options",
    "TRAIN_FLOPS_FACTOR": "zoo.ablate.results",
    "AblationResult": "zoo.ablate.results",
    "AblationRun": "zoo.ablate.results",
    "SeedRun": "zoo.ablate.results",
    "SwapInteraction": "zoo.ablate.results",
    "TuneRun": "zoo.ablate.tuning",
    "ProgressCallback": "zoo.ablate.runner",
    "run_ablation": "zoo.ablate.ablation",
}


__getattr__, __dir__ = lazy_names(__name__, _LAZY)


__all__ = [
    "AXES",
    "DEFAULT_SCALE",
    "DEFAULT_SEEDS",
    "DEMO_SCALE",
    "FLAG_OPTIONS",
    "LEVEL",
    "LR_GRID_FACTORS",
    "MIN_EFFECT",
    "ORDERS",
    "SIZE_AXES",
    "TRAIN_FLOPS_FACTOR",
    "TUNE_FRACTION",
    "TUNE_SEED_OFFSET",
    "AblationResult",
    "AblationRun",
    "ProgressCallback",
    "SeedRun",
    "StudyResult",
    "SwapInteraction",
    "TuneRun",
    "corpus_agreement",
    "diff_configs",
    "plot_curves",
    "plot_deltas",
    "report_markdown",
    "run_ablation",
    "run_study",
    "significant_swaps",
    "table",
    "write_report",
]
