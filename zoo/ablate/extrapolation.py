"""The length-extrapolation table of an ablation with ``--eval-lengths`` (``zoo.ablate.lengths``
measures it): each variant's loss at T and at each longer length, N/A past a learned
table, with the change from T and its corrected mark, and the sentence that reads it, for
``report.md``, the terminal and the ``--docs`` region."""

from __future__ import annotations

from collections.abc import Callable

from zoo.ablate.advice import CORRECTION_NAMES
from zoo.ablate.lengths import LengthCell
from zoo.ablate.results import ALPHA, LEVEL, MIN_EFFECT, AblationResult, AblationRun, md_code
from zoo.ablate.stats import Interval
from zoo.errors import printable

NA = "N/A"


def extrapolated(result: AblationResult) -> list[AblationRun]:
    """The variants measured at the eval lengths, in plan order (none without ``--eval-lengths``)."""
    return [run for run in result.runs if run.extrapolation is not None]


def marked(change: Interval | None) -> bool:
    """Whether a paired change is significant after the correction (its adjusted p below
    1 - ``LEVEL``; without one, its interval excludes 0) and at least ``MIN_EFFECT``."""
    if change is None or abs(change.mean) < MIN_EFFECT:
        return False
    return change.significant if change.p_adjusted is None else change.p_adjusted < ALPHA


def _factor(result: AblationResult, length: int) -> str:
    factor = length // result.eval_lengths[0]
    return "T" if factor == 1 else f"{factor}T"


def extrapolation_table(result: AblationResult) -> tuple[list[str], list[list[str]]]:
    """The table as text cells, ``(header, rows)``: per variant its position encoding, its
    loss at each length (mean ± 95% interval over the seeds; N/A past a learned table), and
    past T the change from its own loss at T, paired over seeds, ``*`` after the correction."""
    lengths = result.eval_lengths
    header = ["run", "position"]
    for length in lengths:
        header.append(f"{_factor(result, length)}={length}")
        if length != lengths[0]:
            header.append(f"{_factor(result, length)} − T")
    rows = []
    for run in extrapolated(result):
        assert run.extrapolation is not None
        cells = [run.name, run.config.position.name]
        for length in lengths:
            cell = run.extrapolation.cell(length)
            cells.append(NA if cell.loss is None else cell.loss.format())
            if length != lengths[0]:
                cells.append(_change(cell))
        rows.append(cells)
    return header, rows


def _change(cell: LengthCell) -> str:
    if cell.growth is None:
        return NA if cell.loss is None else ""
    return cell.growth.format(sign=True) + (" *" if marked(cell.growth) else "")


def _label(run: AblationRun, markdown: bool = True) -> str:
    name = run.name if run.axis == "position" else f"{run.name} ({run.config.position.name})"
    return md_code(name) if markdown else printable(name)


def extrapolation_sentence(result: AblationResult, *, markdown: bool = True) -> str:
    """What the longest length shows, from the numbers alone: which variants cannot run
    there (and why), and for the others whether their loss there differs from their loss at
    T after the correction, with each change, or the interval that bounds it. Names as
    Markdown code, or (``markdown=False``, for a terminal) as plain escaped text."""

    def label(run: AblationRun) -> str:
        return _label(run, markdown)

    longest, trained = result.eval_lengths[-1], result.eval_lengths[0]
    changes: list[tuple[AblationRun, Interval]] = []
    changes_vs_base: list[tuple[AblationRun, Interval]] = []
    refused: dict[str, list[AblationRun]] = {}
    tests = 0
    for run in extrapolated(result):
        assert run.extrapolation is not None
        tests += sum(1 for cell in run.extrapolation.cells if cell.growth is not None)
        if run.extrapolation.refused:
            refused.setdefault(run.extrapolation.refused, []).append(run)
        if (growth := run.extrapolation.cell(longest).growth) is not None:
            changes.append((run, growth))
        if (delta := run.extrapolation.cell(longest).delta_vs_base) is not None:
            changes_vs_base.append((run, delta))
    if len(result.seeds) < 2:
        shown = ", ".join(f"{label(run)} {change.mean:+.3f}" for run, change in changes)
        parts = [f"one seed, so no test: the loss minus its loss at T is {shown or 'not measured'}"]
    else:
        rises = [(r, c) for r, c in changes if marked(c) and c.mean > 0]
        falls = [(r, c) for r, c in changes if marked(c) and c.mean < 0]
        level = [(r, c) for r, c in changes if not marked(c)]
        found = [
            f"the loss {what} its loss at T for {shown(rows, label)}"
            for what, rows, shown in (
                ("rises above", rises, _listed),
                ("falls below", falls, _listed),
                ("is not significantly different from", level, _bounded),
            )
            if rows
        ]
        name = CORRECTION_NAMES.get(result.correction, result.correction)
        parts = [
            f"after {name} over the {tests} tests of the change from T" + (": " + "; ".join(found) if found else "")
        ]
        if changes_vs_base:  # none when the base cannot run there
            parts.append(_against_base(changes_vs_base, label, longest))
    for reason, runs in refused.items():
        parts.append(f"{', '.join(label(run) for run in runs)} cannot run past T ({reason}): N/A")
    return f"At {_factor(result, longest)} ({longest} tokens, trained at T = {trained}), " + "; ".join(parts) + "."


def _against_base(rows: list[tuple[AblationRun, Interval]], label: Callable[[AblationRun], str], length: int) -> str:
    """Which rows' loss at ``length`` differs from the base's there, after the correction."""
    lower = [(r, d) for r, d in rows if marked(d) and d.mean < 0]
    higher = [(r, d) for r, d in rows if marked(d) and d.mean > 0]
    if not lower and not higher:
        return f"against the base at {length} tokens (paired, corrected the same way), no row differs significantly"
    found = [f"{what} for {_listed(found, label)}" for what, found in (("lower", lower), ("higher", higher)) if found]
    return f"against the base at {length} tokens (paired, corrected the same way), the loss is " + " and ".join(found)


def _listed(rows: list[tuple[AblationRun, Interval]], label: Callable[[AblationRun], str]) -> str:
    return ", ".join(f"{label(run)} ({change.format(3, sign=True)})" for run, change in rows)


def _bounded(rows: list[tuple[AblationRun, Interval]], label: Callable[[AblationRun], str]) -> str:
    """Each row with the bound its 95% interval (uncorrected) puts on the change."""
    shown = []
    for run, change in rows:
        if change.low is None or change.high is None:
            shown.append(f"{label(run)} ({change.mean:+.3f})")
        else:
            bound = max(abs(change.low), abs(change.high))
            shown.append(f"{label(run)} (its {LEVEL:.0%} interval keeps it within ±{bound:.3f})")
    return ", ".join(shown)


def extrapolation_markdown(result: AblationResult) -> list[str]:
    """The table as Markdown lines, then its sentence; nothing without eval lengths."""
    if not result.eval_lengths or not extrapolated(result):
        return []
    header, rows = extrapolation_table(result)
    return [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * 2 + "---:|" * (len(header) - 2),
        *("| " + " | ".join([md_code(row[0]), *row[1:]]) + " |" for row in rows),
        "",
        extrapolation_sentence(result),
        "",
    ]


def extrapolation_section(result: AblationResult) -> list[str]:
    """``report.md``'s section on length extrapolation: what was measured, the table, the
    sentence; nothing without eval lengths."""
    table = extrapolation_markdown(result)
    if not table:
        return []
    s = result.settings
    return [
        "## Length extrapolation",
        "",
        f"Every run trained at T = {result.eval_lengths[0]} tokens, then evaluated on the same validation split in "
        f"{s.eval_batches * s.batch_size} evenly spaced windows of each length (Press et al. 2022, *Train Short, "
        f"Test Long*, measure perplexity on whole sequences longer than training's). Loss in nats/token: mean ± "
        f"the half-width of its {LEVEL:.0%} interval over the seeds. **kT − T**: the run's loss at kT minus its "
        f"own loss at T, paired over seeds; `*`: significant after {CORRECTION_NAMES[result.correction]} over "
        f"those tests. Positions without a table (sinusoidal, rotary, ALiBi, none) were built to run the longest "
        f"length; learned positions keep their table at T, as GPT-2 trains it, so their longer lengths are N/A. "
        f"ablation.json holds each length's difference to the base as well (`extrapolation`).",
        "",
        *table,
    ]
