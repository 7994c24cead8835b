"""The report of an ablation: its table as text cells, ``report.md``, the curves and the
paired differences as plots, and ``ablation.json``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from zoo.ablate.advice import CORRECTION_NAMES, caveats_section, edge_sentence, next_step_section, noise_section
from zoo.ablate.compare import SIZE_AXES
from zoo.ablate.extrapolation import extrapolation_section
from zoo.ablate.options import EDGE_EXTENSIONS, FINALISTS, TUNE_HELD_OUT
from zoo.ablate.records import write_figure, write_text
from zoo.ablate.results import (
    ALPHA,
    LEVEL,
    MIN_EFFECT,
    TRAIN_FLOPS_FACTOR,
    AblationResult,
    AblationRun,
    md,
    md_block,
    md_code,
    md_row,
)
from zoo.figures import block_axis, fit_text, log_scale, plain_text, step_axis


def table(
    result: AblationResult, order: str | None = None, *, compact: bool = False
) -> tuple[list[str], list[list[str]]]:
    """The ablation's table as text cells, ``(header, rows)``, in ``rows(order)``'s order;
    ``report.md`` shows it whole, the CLI ``compact`` (without parameters, FLOPs per
    token and, on a path, the columns against the base; the rate only when tuned, the
    training FLOPs only when they differ).

    A swap's significance mark ``*`` is ``AblationRun.significant``: the adjusted p of
    its paired difference to the base (on a path, to the row before) is below 0.05.
    """
    path = result.mode == "path"
    columns = [
        "run",
        "lr",
        "val loss",
        "Δ vs base",
        "p",
        "p adj",
        "Δ this step",
        "p (step)",
        "p adj (step)",
        "sig",
        "parameters",
        "FLOPs/token",
        "train FLOPs",
    ]
    dropped = set() if path else {"Δ this step", "p (step)", "p adj (step)"}
    if compact:  # 80 columns: the step's Δ stands for the path, FLOPs for the budget
        dropped |= {"parameters", "FLOPs/token", "p (step)"} | (set() if result.tuning else {"lr"})
        dropped |= {"Δ vs base", "p", "p adj"} if path else set()
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
            "p": "" if is_base else p_text(run.delta_vs_base.p_value),
            "p adj": "" if is_base else p_text(run.delta_vs_base.p_adjusted),
            "Δ this step": "" if step is None else step.format(sign=True),
            "p (step)": "" if step is None else p_text(step.p_value),
            "p adj (step)": "" if step is None else p_text(step.p_adjusted),
            "sig": "*" if run.significant else "" if run.learned else "did not learn",
            "parameters": f"{run.parameters:,}",
            "FLOPs/token": _si(run.flops_per_token),
            "train FLOPs": _si(run.train_flops),
        }
        rows.append([cells[c] for c in columns if c not in dropped])
    kept = [c for c in columns if c not in dropped]
    for name, loss in reference_rows(result):
        rows.append([f"{name} (reference)" if c == "run" else f"{loss:.4f}" if c == "val loss" else "" for c in kept])
    return kept, rows


def reference_rows(result: AblationResult) -> list[tuple[str, float]]:
    """The n-gram reference losses (``baselines``) as (name, nats/token), where measured."""
    b = result.baselines
    if b is None:
        return []
    return [
        (name, loss)
        for name, loss in (
            ("unigram", b.unigram),
            ("bigram", b.bigram),
            ("trigram", b.trigram),
            ("fivegram", b.fivegram),
        )
        if loss is not None
    ]


def reference_text(result: AblationResult) -> str:
    """What the reference rows are, and the verdict when the base or target does not beat the bigram."""
    b = result.baselines
    if b is None:
        return ""
    bits = b.bits_per_byte(b.bigram)
    text = (
        f"The **reference** rows are counted n-gram models (add-one unigram; interpolated bigram and trigram; "
        f"an interpolated Kneser-Ney 5-gram; weights chosen on held-out training tokens) fit on {b.tokens_counted:,} training tokens and scored on "
        f"the same {b.eval_tokens:,} eval tokens as every run"
        + (f" (bigram {bits:.3f} bits/byte)" if bits is not None else "")
        + "."
    )
    if stuck := "; ".join(f"{md_code(run.name)} {run.not_learned}" for run in result.rows() if not run.learned):
        text += f" **Did not learn**: {stuck}. Such a row is never marked, and in no interaction or trend."
    if result.marks_unreliable:
        text += " **Marks unreliable**: the control (the base under other seeds) is marked after correction."
    if result.under_trained:
        names = ", ".join(md_code(n) for n in result.under_trained)
        text += (
            f" **Under-trained**: {names} {'does' if len(result.under_trained) == 1 else 'do'} not beat the bigram "
            f"({b.bigram:.4f}), so this table measures how fast each design starts to learn, not what it is worth: "
            "train longer (`--steps`, or `--tokens-per-param` on a ladder), at each variant's own rate (`--tune-lr`), "
            "or on more text (`--data`)."
        )
    return text


def interaction_sentences(result: AblationResult, code: Callable[[object], str] = str) -> list[str]:
    """Per paired row, its interaction in words (``SwapInteraction``), ``code`` spelling a row's
    name (``md_code`` for Markdown); a paired row without its single swaps says what to train."""
    lines = []
    for i in result.interactions:
        d = i.delta
        singles = " − ".join(f"Δ({code(row)})" for row in i.rows)
        if d.p_value is None:
            verdict = "one seed: no test"
        elif i.significant:
            verdict = f"significant after {result.correction}: the swaps do not add up"
        else:
            verdict = f"not shown after {result.correction}: within noise"
        lines.append(
            f"interaction of {code(i.name)}: Δ(pair) − {singles} = {d.format(4, sign=True)}"
            f"{' *' if i.significant else ''} (paired over {d.n} seeds, p {p_text(d.p_value)}, p adj {p_text(d.p_adjusted)}); "
            f"{verdict}"
        )
    tested = {i.name for i in result.interactions}
    for run in result.swaps:
        if "+" in run.axis and run.name not in tested:
            parts = run.name.split("+")
            lines.append(
                f"{code(run.name)} has no interaction test: its single swaps are not all in this table "
                f"(--swaps {','.join([*parts, run.name])})"
            )
    return lines


def p_text(p: float | None) -> str:
    """A p-value as the tables show it: three decimals, ``<0.001``, or ``n/a`` without one."""
    if p is None:
        return "n/a"
    return "<0.001" if p < 0.001 else f"{p:.3f}"


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
    result.diagnostics_plot_path = plot_diagnostics(result, folder / "diagnostics.png")
    result.report_path = folder / "report.md"
    write_text(result.results_path, json.dumps(result.to_dict(), indent=2) + "\n")
    write_text(result.report_path, report_markdown(result))


def report_markdown(result: AblationResult) -> str:
    """``report.md``: everything needed to read and repeat the ablation, on its own."""
    lines = [
        *_summary(result),
        *_interactions(result),
        *extrapolation_section(result),
        *noise_section(result),
        *_plots(result),
    ]
    lines += [*_rates(result), *_setup(result)]
    lines += [*caveats_section(result), *next_step_section(result)]
    if result.notes:
        lines += ["## Notes", "", *(f"- {md(note)}" for note in result.notes), ""]
    return "\n".join(lines)


def _summary(result: AblationResult) -> list[str]:
    """The title, the command that repeats the ablation, the table and what is significant."""
    s = result.settings
    n = len(result.seeds)
    header, rows = table(result)
    significant = significant_swaps(result)
    return [
        f"# Ablation: {md(result.base)} → {md(result.target)}",
        "",
        (
            f"{'A cumulative path' if result.mode == 'path' else 'Each single swap'} from {md_code(result.base)} "
            f"toward {md_code(result.target)}, {len(result.runs)} variants × {n} seed{'s' if n > 1 else ''} "
            f"({', '.join(map(str, result.seeds))}), zoo {md(result.version)}."
        ),
        "",
        *md_block(result.command, "bash"),
        "",
        "## Results",
        "",
        f"Final validation loss (nats/token) after {s.steps} steps: mean over the seeds ± the half-width "
        f"of its {LEVEL:.0%} Student t interval. **Δ vs base**: the difference to the base paired over "
        f"matching seeds (negative: better), ± its {LEVEL:.0%} interval; **p**: two-sided paired t test; "
        f"**p adj**: p after {CORRECTION_NAMES[result.correction]} over the {result.tests} tests of this table "
        f"(every row but the base{', and the interactions below' if result.interactions else ''}). "
        f"**sig** `*`: p adj < {ALPHA:.2g} and |Δ| ≥ {MIN_EFFECT:g} (smaller is "
        f"float rounding)"
        + ("; on this path, of the step's own difference (Δ this step)." if result.mode == "path" else ".")
        + (
            " Rows: base, the control, the swaps by effect size (largest first), target."
            if result.order == "effect" and result.mode != "path"
            else ""
        )
        + (
            f" **control** is {md_code(result.base)} again under seeds of its own ({', '.join(str(s.seed) for s in control.seeds)}), "
            "set beside the base's in order: its Δ shows how far two sets of seeds of one design land apart (the "
            "spread of the base over seeds). Its seeds share nothing with the base's, so it is not a check that "
            "the swaps' paired intervals are calibrated."
            if (control := result.control) is not None
            else ""
        ),
        "",
        "| " + " | ".join(header) + " |",
        "|" + "|".join("---" if i == 0 else "---:" for i in range(len(header))) + "|",
        *(md_row(row) for row in rows),
        "",
        *([reference_text(result), ""] if result.baselines is not None else []),
        f"Significant at {LEVEL:.0%} after {result.correction}: "
        f"{', '.join(md_code(name) for name in significant) if significant else 'none'}."
        + (
            f" Before correction also: {', '.join(md_code(n) for n in before)}."
            if (before := _before_only(result))
            else ""
        ),
        "",
    ]


def _interactions(result: AblationResult) -> list[str]:
    """``## Interactions``: what each paired row shows beyond its single swaps."""
    sentences = interaction_sentences(result, md_code)
    if not sentences:
        return []
    return [
        "## Interactions",
        "",
        "A paired row swaps two (or more) axes at once. Its **interaction** is Δ(a+b) − Δ(a) − Δ(b): per seed "
        "loss(a+b) − loss(a) − loss(b) + loss(base), with its mean, "
        f"{LEVEL:.0%} Student t interval and paired t test over the seeds; 0 when the swaps add up. Its p is "
        f"adjusted in the table's family ({CORRECTION_NAMES[result.correction]} over the {result.tests} tests: the "
        "rows and the interactions together), so the chance of any false mark covers both; `*`: p adj < "
        f"{ALPHA:.2g} and |interaction| ≥ {MIN_EFFECT:g}.",
        "",
        *(f"- {sentence[0].upper()}{sentence[1:]}." for sentence in sentences),
        "",
    ]


def _before_only(result: AblationResult) -> list[str]:
    return [run.name for run in result.rows() if run.significant_before_correction and not run.significant]


def _plots(result: AblationResult) -> list[str]:
    lines = []
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
            f"Paired Δ vs base with {LEVEL:.0%} error bars (before correction); coloured: significant after "
            f"{result.correction}.",
            "",
        ]
    if result.diagnostics_plot_path:
        lines += [
            f"![diagnostics]({result.diagnostics_plot_path.name})",
            "",
            "Inside the runs (mean over the seeds, on one fixed validation batch): the gradient norm of each "
            "block's weights and the residual stream's RMS after each block, at the first and the last "
            "evaluation; `ablation.json` has every evaluation.",
            "",
        ]
    return lines


def _rates(result: AblationResult) -> list[str]:
    """The learning rates: the sweep's table, or the one rate of every run."""
    lines = ["## Learning rates", ""]
    if not result.tuning:
        return lines + [f"One rate for every run: {result.settings.lr:g} (`--tune-lr` sweeps one per variant).", ""]
    t = result.tuning
    rates = sorted({x.lr for run in result.runs for x in run.tune if not x.full})
    lines += [
        (
            f"Each variant trained at the best rate of a sweep over {', '.join(f'{r:g}' for r in t['grid'])}, "
            f"every sweep run trained without the last {TUNE_HELD_OUT:.0%} of the training tokens and scored on "
            f"them, never on the validation windows the tables report: "
            f"{t['steps']} steps ({t['fraction']:g} of the budget), seed {t['seed']} (not one of the compared seeds), "
            f"the held-out loss per rate (— diverged; **bold**: the best short run, which a diverged rate never is). "
            f"Successive halving: the {t.get('finalists', FINALISTS)} best short runs trained again for the whole "
            f"budget (**full length**), and the best of those is the rate chosen; every other variant also trains "
            f"at the base's chosen rate, and the base there under the next seed (**seed +1**): a variant whose loss "
            f"at the base's rate is within that seed-to-seed difference of its best has a flat sweep, whose winner "
            f"noise picked, and keeps the base's rate (**flat**). "
            f"Where the best was the lowest or highest rate trained, the sweep trained one more rate past that edge "
            f"at the grid's spacing, up to {EDGE_EXTENSIONS} per side; **on edge**: the best is still the lowest or "
            f"highest rate trained (a rate that diverged counts as trained), so it may lie beyond: widen `--lr-grid`."
        ),
        "",
        "| run | " + " | ".join(f"{r:g}" for r in rates) + " | full length | chosen |",
        "|---|" + "---:|" * (len(rates) + 2),
    ]
    for run in result.runs:
        losses = {x.lr: x.final_val_loss for x in run.tune if not x.full}
        cells = [_tune_cell(run, r, losses) for r in rates]
        full = ", ".join(f"{x.lr:g}{' seed +1' * x.reseeded}: {_loss(x.final_val_loss)}" for x in run.tune if x.full)
        edge = " **on edge**" if run.on_edge else ""
        flat = " (flat: the base's)" if run.flat_sweep else ""
        lines.append(f"| {md(run.name)} | " + " | ".join(cells) + f" | {full} | {run.lr:g}{flat}{edge} |")
    edges = [run for run in result.runs if run.on_edge]
    lines += ["", *(f"{edge_sentence(run, md_code(run.name))}." for run in edges), *([""] if edges else [])]
    return lines + sensitivity_table(result)


def sensitivity_table(result: AblationResult) -> list[str]:
    """Markdown, when the rates were tuned: the one-rate check. Each row's Δ vs the base at
    every rate both trained in the sweep (same seed and steps, so paired), beside its Δ at
    the tuned rates; a row whose Δ changes sign across the rates has a verdict that rests on
    the rate. Empty when nothing was tuned."""
    if not result.tuning or not result.runs[0].tune:
        return []
    base = {x.lr: x.final_val_loss for x in result.runs[0].tune if not x.full}
    rates = sorted(r for r, loss in base.items() if loss is not None)
    floor = result.noise_floor()
    beyond = floor if floor is not None else MIN_EFFECT  # one run's Δ: only a sign past the noise counts
    at = result.runs[0].lr  # every variant also trained the whole budget at the base's rate
    full = {x.lr: x.final_val_loss for x in result.runs[0].tune if x.full and not x.reseeded}
    rows = []
    for run in result.runs[1:]:
        losses = {x.lr: x.final_val_loss for x in run.tune if not x.full}
        deltas = [None if losses.get(r) is None else losses[r] - base[r] for r in rates]  # type: ignore[operator]
        cells = ["" if d is None else f"{d:+.3f}" for d in deltas]
        signs = {d > 0 for d in deltas if d is not None and abs(d) >= beyond}
        tuned = run.delta_vs_base.mean if run.axis != "base" else None
        mine = next((x.final_val_loss for x in run.tune if x.full and not x.reseeded and x.lr == at), None)
        whole = None if mine is None or full.get(at) is None else mine - full[at]  # type: ignore[operator]
        rows.append(
            f"| {md(run.name)} | "
            + " | ".join(cells)
            + f" | {'' if whole is None else f'{whole:+.3f}'} | {'' if tuned is None else f'{tuned:+.3f}'} | "
            + ("yes" if len(signs) > 1 else "")
            + " |"
        )
    return [
        (
            f"The one-rate check: each row's Δ vs the base when both train at the same rate, from the sweep's "
            f"runs ({result.tuning['steps']} steps, seed {result.tuning['seed']}: one run each, no interval), "
            f"then at the base's rate for the whole budget (one run each: the successive halving's), and "
            f"its Δ with each at its own rate (the seeds' mean). **flips**: the Δ changes sign across "
            f"the rates, beyond the noise floor ({beyond:.4f} either way), so a one-rate verdict on it depends on "
            f"the rate chosen."
        ),
        "",
        "| run | " + " | ".join(f"Δ at {r:g}" for r in rates) + f" | Δ at {at:g}, full | Δ, own rates | flips |",
        "|---|" + "---:|" * (len(rates) + 2) + "---|",
        *rows,
        "",
    ]


def _tune_cell(run: AblationRun, rate: float, losses: dict[float, float | None]) -> str:
    """A rate's cell of the sweep's table: its final loss, bold for the winner; blank when not trained."""
    shown = _loss(losses[rate], 3) if rate in losses else ""
    return f"**{shown}**" if rate == run.lr and losses.get(rate) is not None else shown


def _loss(loss: float | None, digits: int = 4) -> str:
    return "—" if loss is None else f"{loss:.{digits}f}"


def _setup(result: AblationResult) -> list[str]:
    """The budget, the data, the scale, the training recipe, the differences and the files."""
    s, d = result.settings, result.data
    tokens = s.steps * s.tokens_per_step
    return [
        "## Budget",
        "",
        (
            f"Every run: {s.steps} steps × {s.batch_size} sequences × {s.seq_len} tokens = {tokens:,} tokens. "
            f"FLOPs/token: one forward pass at {s.seq_len} tokens, measured by `zoo.summary`; train FLOPs per run "
            f"≈ {TRAIN_FLOPS_FACTOR} × forward × tokens (the table). The whole ablation: {_si(result.total_train_flops)} "
            f"FLOPs{' including the sweep' if result.tuning else ''}."
        ),
        "",
        f"T{result.throughput()[1:]}: the training steps' wall time, evaluation excluded.",
        "",
        "## Setup",
        "",
        (
            f"- Data: {md(d['source'])}, {d['train_tokens']:,} training and {d['val_tokens']:,} validation tokens "
            + (
                f"(a folder prepared by `zoo data prepare`, manifest {md(d['manifest_digest'])}: its validation split "
                f"held out)."
                if d.get("manifest_digest")
                else "(the last 10% held out)."
            )
        ),
        f"- Tokenizer: {md(d['tokenizer'])}, vocabulary {d['vocab_size']:,}"
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
            f"{md(axis)} {md(a)} → {md(b)}" + ("" if axis not in SIZE_AXES else " (size: not swapped)")
            for axis, a, b in result.differences
        )
        + ".",
        "",
        "## Files",
        "",
        f"{md_code(result.results_path.name)} (every seed's curve, means, intervals and paired differences), one "
        "checkpoint per run and seed with a `.json` record of its curve (`zoo inspect` shows a checkpoint's "
        "ablation metadata)" + (", `tune/` (the sweep's records)" if result.tuning else "") + ".",
        "",
    ]


def figure_class() -> Any:
    """matplotlib's ``Figure`` (drawn on standalone, leaving pyplot's state alone); None without matplotlib."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    return Figure


_NO_PLOT = "no plot: matplotlib is not installed; `pip install 'zoo-lm[plot]'` adds it"


@plain_text()
def plot_curves(runs: list[AblationRun], path: Path, *, title: str, notes: list[str]) -> Path | None:
    """Validation loss against step for every run: the mean over the seeds with its
    interval as a band, as a PNG; None (and a note) without matplotlib. Draws on a
    standalone ``Figure``, leaving pyplot's global state alone."""
    figure = figure_class()
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
    step_axis(ax)
    ax.set_ylabel(f"validation loss (nats/token), mean ± {LEVEL:.0%} CI")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fit_text(fig)
    fig.tight_layout()
    write_figure(path, fig)
    return path


@plain_text()
def plot_deltas(result: AblationResult, path: Path) -> Path | None:
    """The paired difference of every run to the base with its interval as error bars
    (significant ones in colour), as a PNG; None without matplotlib."""
    figure = figure_class()
    if figure is None:
        if _NO_PLOT not in result.notes:
            result.notes.append(_NO_PLOT)
        return None
    rows = [run for run in result.rows() if run.axis != "base"]
    fig = figure(figsize=(8, 1.2 + 0.45 * len(rows)), dpi=120)
    ax = fig.add_subplot()
    for y, run in enumerate(reversed(rows)):
        delta = run.delta_vs_base
        marked = run.significant if result.mode != "path" else delta.p_adjusted is not None and delta.p_adjusted < ALPHA
        colour = (
            ("tab:green" if delta.mean < 0 else "tab:red") if marked and abs(delta.mean) >= MIN_EFFECT else "tab:gray"
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
    fit_text(fig)
    fig.tight_layout()
    write_figure(path, fig)
    return path


@plain_text()
def plot_diagnostics(result: AblationResult, path: Path) -> Path | None:
    """Per block, the gradient norm of its weights, the residual stream's RMS after it and
    its attention entropy, at the first and the last evaluation, one line per variant (mean over the seeds); None
    without matplotlib or without diagnostics (records from before they were taken)."""
    figure = figure_class()
    runs = [run for run in result.runs if all(s.diagnostics for s in run.seeds)]
    if figure is None or not runs:
        return None
    fig = figure(figsize=(11, 10), dpi=110)
    axes = fig.subplots(3, 2, squeeze=False)
    for col, (index, when) in enumerate(((0, "first"), (-1, "last"))):
        for run in runs:
            taken = [s.diagnostics[index] for s in run.seeds]
            grads = [sum(d.grad_norm[i] for d in taken) / len(taken) for i in range(len(taken[0].grad_norm))]
            rms = [sum(d.residual_rms[i] for d in taken) / len(taken) for i in range(len(taken[0].residual_rms))]
            style = {"linewidth": 2.5} if run.axis in ("base", "target") else {"linewidth": 1.0, "alpha": 0.8}
            axes[0][col].plot(range(len(grads)), grads, marker="o", label=run.name, **style)  # blocks 0..L-1
            axes[1][col].plot(range(len(rms)), rms, marker="o", label=run.name, **style)  # 0: the embeddings
            if all(d.attention_entropy for d in taken):  # older records have none
                entropy = [sum(d.attention_entropy[i] for d in taken) / len(taken) for i in range(len(grads))]
                axes[2][col].plot(range(len(entropy)), entropy, marker="o", label=run.name, **style)
        step = runs[0].seeds[0].diagnostics[index].step
        axes[0][col].set_title(f"gradient norm per block, {when} evaluation (step {step})", fontsize=9)
        axes[1][col].set_title(f"residual RMS, {when} evaluation (step {step})", fontsize=9)
        axes[2][col].set_title(f"attention entropy per block (nats, mean of heads), step {step}", fontsize=9)
        log_scale(axes[0][col], "y")
        for number, row in enumerate(axes):
            block_axis(row[col], residual=number == 1)
            row[col].grid(alpha=0.3)
    axes[0][0].legend(fontsize=7)
    fig.suptitle(f"{result.base} -> {result.target}: inside the runs")
    fit_text(fig)
    fig.tight_layout()
    write_figure(path, fig)
    return path
