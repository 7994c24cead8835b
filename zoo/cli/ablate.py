"""``zoo ablate``: train a base, each swap toward a target (or a cumulative path), and the
target over seeds, and show which swaps move the validation loss; its flags are
``zoo.cli.parsers.ablate``'s, whose table in docs/ablation.md is written here."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from zoo.ablate.options import AnyOptions, Options, StudyOptions, flag_name, option_fields
from zoo.checkpoint.store import write_atomically
from zoo.cli.arguments import refuse_overwriting_inputs
from zoo.cli.parsers.ablate import SCALE_FIELDS, option_dest
from zoo.cli.render import Ui, clipped, fmt_flops, new_table
from zoo.errors import ConfigError, InputError
from zoo.files import read_text
from zoo.nn.registry import default_registry
from zoo.nn.sets import parse_sets
from zoo.training.shards import input_paths

if TYPE_CHECKING:  # the ablation itself loads when the command runs, not to build the parser
    from zoo.ablate import AblationResult, ProgressCallback
    from zoo.ablate.ladder import StudyResult


def given_options(args: argparse.Namespace, kind: type[AnyOptions]) -> dict[str, Any]:
    """The options of ``kind`` the flags give, by name; unset flags leave the defaults
    (``--set`` fields: ``scale_options``)."""
    found: dict[str, Any] = {}
    for f, flag in option_fields(kind):
        value = getattr(args, option_dest(f), None)
        if value is not None and value is not False and not flag_name(f).startswith("--set "):
            found[f.name] = KIND_VALUES[flag.kind](value) if flag.kind in KIND_VALUES else value
    return found


KIND_VALUES: dict[str, Callable[[Any], Any]] = {
    "path": lambda value: input_paths([value])[0],  # '' is refused, not read as the current folder
    "out": Path,
    "vocab": lambda value: None if value == "all" else value,
}


def scale_options(args: argparse.Namespace) -> dict[str, int | float]:
    """``--set d_model=48 --set n_layers=2`` (and the old ``--d-model``, ``--layers``,
    ``--heads``) as run_ablation's ``d_model``, ``layers``, ``heads``; ``--set dropout=P``
    as its ``dropout``."""
    found = {option: getattr(args, option) for option in SCALE_FIELDS.values() if hasattr(args, option)}
    for field, value in parse_sets(args.set).items():
        if field not in SCALE_FIELDS:
            raise InputError(
                f"--set {field}=...: zoo ablate sets the scale both sides train at ({', '.join(SCALE_FIELDS)}); "
                f"every other field is what the presets' differences and swaps decide"
            )
        if field == "dropout":
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value < 1.0:
                raise InputError(f"--set dropout={value!r}: expected a probability, at least 0 and below 1")
            value = float(value)
        elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"--set {field}={value!r}: expected a whole number of 1 or more")
        found[SCALE_FIELDS[field]] = value
    return found


#: The markers around docs/ablation.md's table of the flags, which ``make docs-flags`` rewrites.
FLAGS_BEGIN = "<!-- the flags of `zoo ablate`, from its -h: do not edit; `make docs-flags` rewrites it -->"
FLAGS_END = "<!-- end of the flags of `zoo ablate` -->"
_DEFAULT = re.compile(r"(.*?)\s*\(default:? (.*)\)", re.DOTALL)


def flags_table(parser: argparse.ArgumentParser) -> list[str]:
    """``parser``'s flags (``zoo ablate``'s) as a Markdown table of flag, default and what,
    one row each, read from their ``-h``: the docs say what ``-h`` says."""
    rows = ["| flag | default | what |", "|---|---|---|"]
    for action in parser._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS) or action.dest in ("help", "debug"):
            continue
        found = _DEFAULT.fullmatch(str(action.help))
        what, default = (found[1], found[2]) if found else (str(action.help), "off")
        takes = "|".join(map(str, action.choices)) if action.choices else str(action.metavar or "")
        takes = f"[{takes}]" if action.nargs == "?" else takes
        flag = "/".join(action.option_strings) + (f" {takes}" if action.nargs != 0 else "")
        rows.append("| " + " | ".join(cell.replace("|", "\\|") for cell in (f"`{flag}`", default, what)) + " |")
    return rows


def with_flags_table(text: str, parser: argparse.ArgumentParser) -> str:
    """``text`` (docs/ablation.md) with its table of the flags generated anew."""
    if text.count(FLAGS_BEGIN) != 1 or text.count(FLAGS_END) != 1 or text.index(FLAGS_BEGIN) > text.index(FLAGS_END):
        raise ConfigError(f"the page must hold the line {FLAGS_BEGIN} once, then {FLAGS_END}: put them back")
    before, rest = text.split(FLAGS_BEGIN)
    after = rest.split(FLAGS_END)[1]
    return "\n".join([before + FLAGS_BEGIN, "", *flags_table(parser), "", FLAGS_END + after])


def write_flags_table(page: Path) -> Path:
    """Rewrite ``page``'s table of the flags (``make docs-flags``)."""
    from zoo.cli import build_parser

    (commands,) = [a for a in build_parser(["ablate"])._actions if isinstance(a, argparse._SubParsersAction)]
    text = with_flags_table(read_text(page, ConfigError, "docs page"), commands.choices["ablate"])
    return write_atomically(page, lambda path: path.write_text(text, encoding="utf-8"), ConfigError)


def cmd_ablate(args: argparse.Namespace, ui: Ui) -> int:
    from zoo.ablate import run_ablation
    from zoo.ablate.docs import check_docs_page, write_docs_region
    from zoo.ablate.plan import swapless
    from zoo.ablate.studies import run_study

    refuse_overwriting_inputs(
        args.out, args.overwrite, {"--data": args.data, "--config": args.config, "--docs": args.docs}
    )
    options = _options(args)
    if args.docs is not None:  # a page the results cannot go into is refused before the work
        check_docs_page(Path(args.docs), Path(args.out).name)
    nothing = swapless(options.get("base", Options.base), options.get("target", Options.target), default_registry())
    if nothing is not None:  # said before it trains, not only in the notes after
        ui.warn(nothing)
    lines = None if ui.err.is_terminal else _ProgressLines(ui)
    progress, on_progress = _progress(ui) if lines is None else (None, lines)
    studied = given_options(args, StudyOptions)
    try:
        if studied:
            study = run_study(on_progress=on_progress, overwrite=args.overwrite, **options, **studied)
        else:
            result = run_ablation(on_progress=on_progress, overwrite=args.overwrite, **options)
    finally:
        if progress is not None and progress.live.is_started:  # stop() prints a line even when it never started
            progress.stop()
        if lines is not None:
            lines.flush()
    if studied:
        return _show_study(study, args, ui)
    if not result.main_process:
        return 0  # under torchrun, rank 0 reports
    if args.docs is not None:
        write_docs_region(Path(args.docs), Path(args.out).name, result)
    if ui.json_mode:
        ui.json({**result.to_dict(), "results_path": str(result.results_path)})
        return 0
    _show(result, args, ui)
    return 0


def _options(args: argparse.Namespace) -> dict[str, Any]:
    """The run_ablation arguments the flags give (unset flags leave its defaults)."""
    options = given_options(args, Options)
    options.update(scale_options(args))
    if "lr_grid" in options:
        options["tune_lr"] = True  # a grid asks for the sweep
    return options


def _progress(ui: Ui) -> tuple[Progress, ProgressCallback]:
    """A progress display on stderr, a bar per run, and the callback that drives it."""
    progress = Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("{task.fields[loss]}"),
        TimeElapsedColumn(),
        console=ui.err,  # progress never mixes with the results on stdout
    )
    tasks: dict[str, Any] = {}
    done: set[str] = set()

    def on_progress(run: str, step: int, total: int, loss: float | None) -> None:
        if not progress.live.is_started:
            progress.start()  # at the first run, so a refused plan prints its error alone
        if run not in tasks:
            for name in [n for n in done if n.startswith("tune ") and n in tasks]:
                progress.remove_task(tasks.pop(name))  # a finished sweep run makes room
            tasks[run] = progress.add_task(run, total=total, loss="")
        # The last call of a run (step == total once more) carries its final validation loss.
        progress.update(tasks[run], completed=step, total=total, loss="" if loss is None else f"loss {loss:.3f}")
        if step == total:
            done.add(run)

    return progress, on_progress


class _ProgressLines:
    """Off a terminal (a log file, CI): a line as each run starts and one as it ends with
    its final validation loss, each flushed as it is written; no bar redrawn at the end.
    A run's last call (``step == total``) carries that loss; a call before it at the same
    step, its last training loss, is held until the next event shows which it was."""

    def __init__(self, ui: Ui) -> None:
        self.ui, self.finished = ui, 0
        self.ended: dict[str, tuple[int, float]] = {}  # at its last step, the final loss not seen yet

    def __call__(self, run: str, step: int, total: int, loss: float | None) -> None:
        if step == total and loss is not None:
            if run in self.ended:  # the second call at the last step: the validation loss
                del self.ended[run]
                self._end(run, total, loss)
            else:
                self.ended[run] = (total, loss)
            return
        self.flush(but=run)
        if step == 0:
            self._say(f"started {run} ({total} steps)")

    def flush(self, but: str | None = None) -> None:
        """End the held runs (a run of another rank has one final call only), but ``but``."""
        for run in [r for r in self.ended if r != but]:
            self._end(run, *self.ended.pop(run))

    def _end(self, run: str, total: int, loss: float) -> None:
        self.finished += 1
        self._say(f"finished {run} after {total} steps: val loss {loss:.4f} ({self.finished} done)")

    def _say(self, line: str) -> None:
        self.ui.err.print(line, markup=False, highlight=False, soft_wrap=True)
        self.ui.err.file.flush()


def _show_study(study: StudyResult, args: argparse.Namespace, ui: Ui) -> int:
    from zoo.ablate.docs import write_docs_region
    from zoo.ablate.report import p_text

    if not study.main_process:
        return 0
    if args.docs is not None:
        write_docs_region(Path(args.docs), Path(args.out).name, study)
    if ui.json_mode:
        ui.json({**study.to_dict(), "results_path": str(study.results_path)})
        return 0
    for cell, result in study.cells:
        ui.line(f"{cell.name}: {cell.steps} steps", "bold")
        _show(result, args, ui, brief=True)
    trends = study.trends()
    if trends:
        rich_table = new_table(
            "along the ladder: Δ vs base per rung",
            "row",
            *(r.name for r in study.rungs),
            "change (p adj)",
            "trend",
            right=["trend"],
        )
        for t in trends:
            change = "n/a" if t.change is None else f"{t.change.format(3, sign=True)} ({p_text(t.change.p_adjusted)})"
            rich_table.add_row(t.name, *(d.format(3, sign=True) for d in t.deltas), change, t.word)
        ui.print(rich_table)
    if study.reused:
        ui.line(f"reused {len(study.reused)} finished runs from {Path(args.out)}; trained {len(study.trained)}", "dim")
    ui.line(f"report: {study.report_path}")
    ui.line(f"results: {study.results_path}")
    for plot in (study.scale_plot_path, study.sweep_plot_path):
        if plot:
            ui.line(f"plot: {plot}")
    return 0


def _show_lengths(result: AblationResult, ui: Ui) -> None:
    """The length-extrapolation table and its sentence, when the ablation has eval lengths."""
    from zoo.ablate.extrapolation import extrapolation_sentence, extrapolation_table

    if not result.eval_lengths:
        return
    header, rows = extrapolation_table(result)
    rich_table = new_table(
        f"length extrapolation: trained at T={result.eval_lengths[0]}", *header, right=header[2:], clip=header[:1]
    )
    for row in rows:
        rich_table.add_row(clipped(row[0]), *(Text(c, style="dim") if c == "N/A" else c for c in row[1:]))
    ui.print(rich_table)
    ui.line(extrapolation_sentence(result, markdown=False))


def _show(result: AblationResult, args: argparse.Namespace, ui: Ui, *, brief: bool = False) -> None:
    """The table, the budget, what is significant, the notes and where the files are."""
    from zoo.ablate import significant_swaps, table
    from zoo.ablate.advice import edge_sentence, floor_sentence, next_step
    from zoo.ablate.report import interaction_sentences

    seeds = len(result.seeds)
    header, rows = table(result, compact=True)
    title = f"ablation {result.base} -> {result.target}: {result.settings.steps} steps, {seeds} seed{'s' if seeds > 1 else ''}"
    rich_table = new_table(title, *header, right=header[1:], clip=header[:1])
    sig = header.index("sig")
    for run, row in zip(result.rows(), rows):
        delta = run.delta_vs_previous if result.mode == "path" and run.delta_vs_previous else run.delta_vs_base
        style = ("green" if delta.mean < 0 else "red") if row[sig] else "dim"
        cells: list[Any] = [clipped(row[0])]
        cells[0].stylize("bold" if run.axis in ("base", "target") else "")
        cells += [
            Text(cell, style=style) if header[i].startswith("Δ") or i == sig else cell
            for i, cell in enumerate(row)
            if i
        ]
        rich_table.add_row(*cells)
    for row in rows[len(result.rows()) :]:  # the n-gram reference rows
        rich_table.add_row(*(Text(cell, style="dim italic") for cell in row))
    ui.print(rich_table)
    _show_lengths(result, ui)
    if result.under_trained:
        ui.line(f"under-trained: {', '.join(result.under_trained)} do not beat the bigram reference", "yellow")
    for name in result.on_edge if brief else []:  # in full, the notes below say it
        ui.line(edge_sentence(result.run(name), name), "yellow")
    ui.line(
        f"val loss: mean ± 95% CI over seeds; Δ: paired over matching seeds, ± 95% CI; p adj: after "
        f"{result.correction} over {result.tests} tests; *: p adj < 0.05",
        "dim",
    )
    for sentence in interaction_sentences(result):
        ui.line(sentence, "bold" if "significant" in sentence.rpartition(";")[2] else "dim")
    s = result.settings
    ui.line(
        f"budget: every run {s.steps * s.tokens_per_step:,} tokens, {fmt_flops(result.runs[0].train_flops)} training FLOPs "
        f"for the base (parameters and FLOPs per variant: report.md)",
        "dim",
    )
    ui.line(result.throughput(), "dim")
    significant = significant_swaps(result)
    ui.line(
        f"significant at 95% after {result.correction}: {', '.join(significant) if significant else 'none'}", "bold"
    )
    floor = floor_sentence(result)
    if floor is not None:
        ui.line(floor)
    ui.line(f"next: {next_step(result)}")
    if brief:
        return
    for note in result.notes:
        ui.line(note, "yellow")
    if result.reused:
        ui.line(
            f"reused {len(result.reused)} finished runs from {Path(args.out)}; trained {len(result.trained)}", "dim"
        )
    ui.line(f"report: {result.report_path}")
    ui.line(f"curves: {result.results_path}")
    for plot in (result.plot_path, result.delta_plot_path, result.diagnostics_plot_path):
        if plot:
            ui.line(f"plot: {plot}")
    ui.line(
        f"checkpoints: {', '.join(run.checkpoint.name for run in result.runs)} (first seed) in {Path(args.out)}", "dim"
    )
