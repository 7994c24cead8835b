"""The report of a study over a grid: ``study.json``, ``report.md`` (the cells, the trends
along the ladder, the sweep, the warm-up verdict, caveats, next step), ``scale.png`` and
``sweep.png``."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

from zoo.ablate.ladder import Cell, StudyResult, row_named
from zoo.ablate.records import write_figure, write_text
from zoo.ablate.report import figure_class, p_text
from zoo.ablate.results import ALPHA, LEVEL, MIN_EFFECT, md, md_block, md_code
from zoo.ablate.stats import Interval, detectable_difference
from zoo.figures import fit_text, log_scale, plain_text, step_axis


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


def cells_table(study: StudyResult) -> list[str]:
    """Markdown: per cell, its budget (tokens per non-embedding parameter of the base, and
    epochs: passes over the training split) and tokens/s per run, its base's and target's
    losses beside the n-gram reference rows (``*``: under-trained, not below the bigram), its
    noise floor before and after correction, the control and what was marked."""
    lines = [
        "| cell | steps | tokens/run | tokens/param | epochs | tokens/s | base train FLOPs | base loss | target loss "
        "| bigram | trigram | 5-gram | noise floor | after correction | control Δ | marked after correction |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    per_step = study.tokens_per_step
    for cell, result in study.cells:
        control = result.control
        floor, corrected = result.noise_floor(), result.noise_floor(corrected=True)
        marked = ", ".join(md_code(run.name) for run in result.rows() if run.significant) or "none"
        b, stuck = result.baselines, set(result.under_trained)
        ends = [f"{run.loss.mean:.4f}{' *' if run.name in stuck else ''}" for run in (result.runs[0], result.runs[-1])]
        refs = [
            "n/a" if b is None or v is None else f"{v:.4f}"
            for v in ((b.bigram, b.trigram, b.fivegram) if b else (None,) * 3)
        ]
        ratios = [cell.tokens_per_param(per_step), cell.epochs(per_step, result.data["train_tokens"])]
        lines.append(
            f"| [{md(_cell_label(study, cell))}]({md(cell.name)}/report.md) | {cell.steps} | "
            f"{cell.steps * per_step:,} | {' | '.join('n/a' if r is None else f'{r:.3g}' for r in ratios)} | "
            f"{result.tokens_per_second:,.0f} | {_flops(result.runs[0].train_flops)} | {' | '.join(ends)} | "
            f"{' | '.join(refs)} | "
            f"{'n/a' if floor is None else f'{floor:.4f}'} | {'n/a' if corrected is None else f'{corrected:.4f}'} | "
            f"{'n/a' if control is None else control.delta_vs_base.format(4, sign=True)} | {marked} |"
        )
    if any(result.under_trained for _, result in study.cells):
        lines += [
            "",
            "`*`: under-trained, not below the bigram reference of its cell: that cell measures how fast a design "
            "starts to learn, not what it is worth.",
        ]
    return lines


def tuned_table(study: StudyResult) -> list[str]:
    """Markdown, when the cells tune a rate per variant: the rate each variant trained at in
    each cell (one column per rung), **on edge** where it is the lowest or highest its sweep
    trained (``AblationRun.on_edge``)."""
    if not study.tuned:
        return []
    several = len(study.warmups) > 1
    header = ["variant", *(["warm-up"] if several else []), *(r.name for r in study.rungs)]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for warmup in study.warmups:
        results = [study.cell(r.name, None, warmup) for r in study.rungs]
        for run in results[0].runs:
            rows = [row_named(result, run.name) for result in results]
            cells = ["" if row is None else f"{row.lr:g}{' **on edge**' if row.on_edge else ''}" for row in rows]
            extra = ["auto" if warmup is None else str(warmup)] if several else []
            lines.append("| " + " | ".join([md_code(run.name), *extra, *cells]) + " |")
    return lines


def _tuned_sentence(study: StudyResult) -> list[str]:
    """What the tuned-rate table shows, and which rates sit on the edge of their sweep."""
    tuning = next(result.tuning for _, result in study.cells if result.tuning)
    edges = [f"{md_code(name)} at {cell.rung.name}" for cell, result in study.cells for name in result.on_edge]
    return [
        f"Each variant in each cell trained at the best rate of its own short sweep over "
        f"{', '.join(f'{r:g}' for r in tuning['grid'])} ({tuning['fraction']:g} of the cell's steps, one seed not "
        f"compared), extended past an edge its best sat on; the rate each trained at:",
        "",
        *tuned_table(study),
        "",
        (
            f"**On edge** (the best is still the lowest or highest rate its sweep trained, so it may lie beyond; "
            f"widen `--lr-grid`): {', '.join(edges)}."
            if edges
            else "No tuned rate sits on the edge of its sweep."
        ),
    ]


#: What the trend words mean, as ``advice.trend`` decides them.
TREND_LEGEND = (
    "Δ vs base (p adj: within its cell) at each rung; the trend from the first rung to the last, from "
    "corrected results only: *flips* when both ends are significant after their cell's correction, on opposite "
    "sides of 0; *grows* or *shrinks* (in size) when the change of Δ from the first rung to the last is "
    "significant by Welch's test on the two rungs' per-seed Δs (the rungs train independent models), after "
    "{correction} over the {tests} rows' cross-rung tests (**change**, p adj); *not shown after correction* when "
    "either holds before correction only; else *flat within noise*."
)


def trends_table(study: StudyResult) -> list[str]:
    """Markdown: per row, its Δ vs base (p adj) at each rung and the trend word."""
    trends = study.trends()
    if not trends:
        return []
    several = len(study.rates) * len(study.warmups) > 1
    header = ["row", *([] if not several else ["lr", "warm-up"]), *(r.name for r in study.rungs), "change", "trend"]
    lines = ["| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 2) + "---|"]
    for t in trends:
        cells = [f"{d.format(4, sign=True)} ({p_text(d.p_adjusted)})" for d in t.deltas]
        change = "n/a" if t.change is None else f"{t.change.format(4, sign=True)} ({p_text(t.change.p_adjusted)})"
        extra = [] if not several else [f"{t.lr:g}", "auto" if t.warmup is None else str(t.warmup)]
        lines.append("| " + " | ".join([t.name, *extra, *cells, change, t.word]) + " |")
    return lines


def interactions_table(study: StudyResult) -> list[str]:
    """Per paired row, its interaction at every rung (the first rate and warm-up), marked
    where significant in its cell's family; nothing without paired rows."""
    cells = [study.cell(r.name) for r in study.rungs]
    names = list(dict.fromkeys(i.name for result in cells for i in result.interactions))
    if not names:
        return []
    lines = [
        "| interaction | " + " | ".join(r.name for r in study.rungs) + " |",
        "|---|" + "---:|" * len(study.rungs),
    ]
    for name in names:
        found = [next((i for i in result.interactions if i.name == name), None) for result in cells]
        shown = ["n/a" if i is None else i.delta.format(4, sign=True) + (" *" if i.significant else "") for i in found]
        lines.append(f"| {name} | " + " | ".join(shown) + " |")
    return [
        *lines,
        "",
        "Interaction of a paired row: Δ(a+b) − Δ(a) − Δ(b), per seed loss(a+b) − loss(a) − loss(b) + loss(base), "
        "± 95% CI over the seeds; corrected with its cell's rows (one family); `*`: significant after it.",
        "",
    ]


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
        results = [study.swept_cell(rung, v) for v in values]
        for run in results[0].runs:
            if run.axis == "control":
                continue
            rows = [row_named(r, run.name) for r in results]
            losses = [row.loss for row in rows if row is not None]
            if len(losses) != len(values):
                continue
            best = min(range(len(values)), key=lambda i: losses[i].mean)
            lines.append(
                "| "
                + " | ".join(
                    [*([md(rung.name)] if several else []), md(run.name), *(x.format() for x in losses), shown[best]]
                )
                + " |"
            )
    return lines


def _sweep_words(e: Any) -> tuple[str, str]:
    """What a sweep test sweeps, and where (``at lr 0.003``) in a rate x warm-up grid."""
    what = "learning rate" if e.swept == "lr" else "warm-up"
    if e.at is None:
        return what, ""
    return what, f", {'warm-up' if e.swept == 'lr' else 'lr'} {e.at:g}"


def sweep_sentences(study: StudyResult) -> list[str]:
    """Per variant, the paired change of its final loss across each swept axis, in words."""
    if not study.swept_axes:
        return []
    lines = []
    effects = study.sweep_effects()
    for e in effects:
        sig = e.delta.p_adjusted is not None and e.delta.p_adjusted < ALPHA
        what, where = _sweep_words(e)
        lines.append(
            f"- {md_code(e.name)} at {e.rung}{where}: {what} {e.low if e.low is not None else 'auto'} instead of "
            f"{e.high if e.high is not None else 'auto'} changes the final loss by {e.delta.format(4, sign=True)} "
            f"(paired over seeds, p {p_text(e.delta.p_value)}, p adj {p_text(e.delta.p_adjusted)} after {study.correction} "
            f"over the {len(effects)} sweep tests{', significant' if sig else ', within noise'})."
        )
    for i in study.interactions():
        sig = i.delta.p_adjusted is not None and i.delta.p_adjusted < ALPHA
        what, where = _sweep_words(i)
        lines.append(
            f"- interaction {md_code(i.name)} × {what} at {i.rung}{where}: its change minus the base's "
            f"{i.delta.format(4, sign=True)} (difference of differences paired over seeds, p {p_text(i.delta.p_value)}, "
            f"p adj {p_text(i.delta.p_adjusted)}{', significant' if sig else ', not shown'})."
        )
    return lines


def _significant(delta: Interval) -> bool:
    return delta.p_adjusted is not None and delta.p_adjusted < ALPHA and abs(delta.mean) >= MIN_EFFECT


def _interaction_floor(study: StudyResult, delta: Interval) -> str:
    """The smallest difference of differences these seeds detect at the corrected level."""
    tests = max(1, len(study.interactions()))
    if delta.sd is None or delta.n < 2:
        return ""
    alpha = ALPHA / tests if study.correction in ("holm", "bonferroni") else ALPHA
    return (
        f"; the smallest interaction {delta.n} seeds detect with 80% power at the corrected level is "
        f"{detectable_difference(delta.sd, delta.n, alpha=alpha):.4f} nats"
    )


def warmup_verdict(study: StudyResult) -> str | None:
    """``_warmup_verdict`` at every rate of the study (one sentence per rate of a rate x
    warm-up grid), or None without a warm-up sweep of a post-norm base against pre-norm."""
    if "warmup" not in study.swept_axes or study.cells[0][1].runs[0].config.placement.name != "post":
        return None
    said = [_warmup_verdict(study, lr if len(study.rates) > 1 else None) for lr in study.rates]
    found = [text for text in said if text is not None]
    return " ".join(found) if found else None


def _warmup_verdict(study: StudyResult, at: float | None) -> str | None:
    """With a warm-up sweep, a post-norm base and a ``placement`` swap: whether this study shows
    Xiong et al.'s result, said plainly. Their claim is an interaction (removing warm-up hurts
    post-norm, not pre-norm), so it is decided by the difference-of-differences test
    (``StudyResult.interactions``) after correction, not by comparing two intervals."""
    rung = study.rungs[-1].name
    effects = {e.axis: e for e in study.sweep_effects() if e.rung == rung and e.swept == "warmup" and e.at == at}
    post, pre = effects.get("base"), effects.get("placement")
    test = next(
        (
            i
            for i in study.interactions()
            if i.rung == rung and i.axis == "placement" and i.swept == "warmup" and i.at == at
        ),
        None,
    )
    if post is None or pre is None or test is None or test.delta.half_width is None:
        return None
    low, high = post.low if post.low is not None else "auto", post.high if post.high is not None else "auto"
    said = (
        f"Warm-up {low} instead of {high} at {rung}{'' if at is None else f', lr {at:g}'}: post-norm (the base) {post.delta.format(4, sign=True)} "
        f"(p adj {p_text(post.delta.p_adjusted)}), pre-norm {pre.delta.format(4, sign=True)} "
        f"(p adj {p_text(pre.delta.p_adjusted)}); pre-norm's change minus post-norm's {test.delta.format(4, sign=True)} "
        f"(the interaction, p adj {p_text(test.delta.p_adjusted)})."
    )
    hurts = post.delta.mean > 0 and _significant(post.delta)
    if _significant(test.delta) and test.delta.mean < 0 and hurts:
        return said + (
            " This run shows Xiong et al.'s result as a test: removing warm-up costs post-norm significantly "
            "more than pre-norm, after correction."
        )
    if hurts:
        return said + (
            " Removing the warm-up hurts post-norm, but the interaction is not shown: pre-norm's change is not "
            "told apart from post-norm's, so this run shows only half of Xiong et al.'s result"
            + _interaction_floor(study, test.delta)
            + "."
        )
    if post.delta.mean > max(pre.delta.mean, 0.0):  # Xiong's direction, nothing significant
        return said + (
            " This run points the way of Xiong et al.'s result (without warm-up post-norm loses more than "
            f"pre-norm) but does not show it: neither post-norm's change nor the interaction is significant "
            f"after correction with {post.delta.n} seeds" + _interaction_floor(study, test.delta) + "."
        )
    stuck = _untrained_post_norm(study, study.rungs[-1], post.name, pre.name, at)
    if stuck is not None:
        return said + (
            f" This run does not show Xiong et al.'s result: post-norm stays far behind pre-norm with and "
            f"without warm-up (final loss {stuck[0]:.3f} at best, pre-norm {stuck[1]:.3f} at worst) and warm-up "
            f"changes nothing for it, so at this rate warm-up does not rescue post-norm; the effect needs a rate "
            f"post-norm trains at with warm-up: try a lower --lr, or sweep it with --lr-sweep."
        )
    return said + (
        " This run does not show Xiong et al.'s result: post-norm is not significantly worse without warm-up "
        "at this depth, rate and budget (gradient clipping and a short run may hide it; try more layers or a "
        "higher --lr)."
    )


def _untrained_post_norm(
    study: StudyResult, rung: Any, post: str, pre: str, at: float | None = None
) -> tuple[float, float] | None:
    """(post-norm's best final loss, pre-norm's worst) over the sweep's ends when even the
    best is worse than the worst, each beyond its 95% interval; else None."""
    lr = study.rates[0] if at is None else at
    ends = [study.swept_cell(rung, value, "warmup", lr) for value in (study.warmups[0], study.warmups[-1])]
    posts = [row_named(cell, post) for cell in ends]
    pres = [row_named(cell, pre) for cell in ends]
    if any(run is None or run.loss.half_width is None for run in (*posts, *pres)):
        return None
    best = min((run for run in posts if run is not None), key=lambda run: run.loss.mean)
    worst = max((run for run in pres if run is not None), key=lambda run: run.loss.mean)
    if best.loss.mean - (best.loss.half_width or 0.0) > worst.loss.mean + (worst.loss.half_width or 0.0):
        return best.loss.mean, worst.loss.mean
    return None


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
        f"{len(study.cells)} ablations (rungs {', '.join(r.name for r in study.rungs)}; "
        + ("each variant at its own tuned rate" if study.tuned else "rates ")
        + ("" if study.tuned else ", ".join(f"{r:g}" for r in study.rates))
        + "; warm-up "
        f"{', '.join('auto' if w is None else str(w) for w in study.warmups)}), each over {n} seeds with a control "
        f"row and {first.correction} correction; budget: {budget}.",
        "",
        *md_block(study.command, "bash"),
        "",
        "## Cells",
        "",
        *cells_table(study),
        "",
        *(["## Tuned learning rates", "", *_tuned_sentence(study), ""] if study.tuned else []),
    ]
    if len(study.rungs) > 1:
        lines += [
            "## Along the ladder",
            "",
            TREND_LEGEND.format(correction=study.correction, tests=len(study.trends())),
            "",
            *trends_table(study),
            "",
        ]
        if study.scale_plot_path:
            lines += [f"![Δ against training FLOPs]({study.scale_plot_path.name})", ""]
    if pairs := interactions_table(study):
        lines += ["## Interactions", "", *pairs]
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
        f"- **Many comparisons.** Each cell is corrected over its own rows and interactions "
        f"({first.correction}); comparing "
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
    quiet = ("flat within noise", "not shown after correction")
    flat = [t.name for t in study.trends() if t.word in quiet and t.axis != "control"]
    if flat and len(study.rates) < 2:
        return (
            "Check the rows that stay flat at their own best rates (`--lr-sweep`), and add a larger rung on a GPU "
            "(`--device cuda`) — finished rungs are reused."
        )
    return "Add a larger rung on a GPU (`--device cuda`, `--scales` with one more size): finished rungs are reused."


@plain_text()
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
        log_scale(ax, "x")
        ax.set_xlabel("training FLOPs of one run (rungs " + ", ".join(r.name for r in study.rungs) + ")")
        ax.set_ylabel(f"Δ final loss vs {study.base} (paired, {LEVEL:.0%} CI; < 0 better)")
        ax.set_title(f"lr {lr:g}, warm-up {'auto' if warmup is None else warmup}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{study.base} -> {study.target}: effects against scale")
    fit_text(fig)
    fig.tight_layout()
    write_figure(path, fig)
    return path


@plain_text()
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
            rows = [row_named(r, run.name) for r in results]
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
            log_scale(ax, "x")
            ax.set_xlabel("peak learning rate")
        else:
            step_axis(ax, "warm-up steps")
        ax.set_ylabel(f"final validation loss (mean ± {LEVEL:.0%} CI)")
        what = f"warm-up {'auto' if other is None else other}" if swept == "lr" else f"lr {other:g}"
        ax.set_title(f"{rung.name}, {what}", fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{study.base} -> {study.target}: final loss against the {'rate' if swept == 'lr' else 'warm-up'}")
    fit_text(fig)
    fig.tight_layout()
    write_figure(path, fig)
    return path
