"""``zoo ablate``: train a base, each swap toward a target (or a cumulative path), and the
target over seeds, and show which swaps move the validation loss."""

from __future__ import annotations

import argparse
import re
from collections.abc import Callable
from dataclasses import Field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from zoo.ablate.options import (
    AnyOptions,
    Flag,
    Options,
    StudyOptions,
    flag_name,
    option_fields,
    parse_scales,
    shown_default,
)
from zoo.checkpoint.store import write_atomically
from zoo.cli.options import (
    Commands,
    RenamedFlag,
    add_batch_size,
    add_config,
    add_out,
    add_overwrite,
    add_seed,
    add_sets,
    positive,
    refuse_overwriting_inputs,
    seed,
)
from zoo.cli.render import Ui, clipped, fmt_flops, new_table
from zoo.errors import ConfigError, InputError
from zoo.files import read_text
from zoo.nn.registry import default_registry
from zoo.nn.sets import parse_sets

if TYPE_CHECKING:  # the ablation itself loads when the command runs, not to build the parser
    from zoo.ablate import AblationResult, ProgressCallback
    from zoo.ablate.ladder import StudyResult

#: The model fields `zoo ablate --set` takes (both sides are trained at this scale), to
#: the option each sets.
SCALE_FIELDS = {
    flag_name(f).partition(" ")[2]: f.name for f, _ in option_fields(Options) if flag_name(f).startswith("--set ")
}
STUDY_GROUP = "a study: one ablation per rung x rate x warm-up, each in a folder of --out"


def add_parsers(commands: Commands) -> None:
    p = commands.add(
        "ablate",
        cmd_ablate,
        [commands.json_flag],
    )
    add_config(p, "ablate")
    add_option_flags(p, Options)
    add_option_flags(p, StudyOptions, STUDY_GROUP)
    p.add_argument(
        "--docs",
        default=None,
        metavar="FILE",
        help="write the results as a generated region of FILE (a Markdown page), named after --out, and the results "
        "file beside it as studies/NAME.json (default: none)",
    )
    add_overwrite(
        p,
        "replace an --out folder this ablation did not make (or another's) whole, everything in it removed "
        "(default: refuse it)",
    )


def add_option_flags(p: argparse.ArgumentParser, kind: type[AnyOptions], group: str | None = None) -> None:
    """A flag per option of ``kind`` (``zoo.ablate.options``), its help stating the
    default: the shared vocabulary's own where it has one, one ``--set`` for the model
    fields of the scale, an old spelling hidden."""
    where = p.add_argument_group(group) if group else p
    for f, flag in option_fields(kind):
        name, help = flag_name(f), f"{flag.help} {shown_default(f)}"
        if name.startswith("--set "):
            if f.name == next(iter(SCALE_FIELDS.values())):  # one --set for them all, where the first is
                add_sets(p, help=_sets_help())
        elif name in VOCABULARY:
            VOCABULARY[name][1](p, flag, help)
        else:
            shown = {"choices": flag.choices} if flag.choices else {"metavar": flag.metavar} if flag.metavar else {}
            where.add_argument(name, dest=f.name, default=None, help=help, **shown, **KIND_ARGUMENTS[flag.kind])
        if flag.old:
            new = f"{name}=N" if name.startswith("--set ") else name
            parse = KIND_ARGUMENTS[flag.kind]["type"]
            p.add_argument(flag.old, dest=option_dest(f), type=parse, action=RenamedFlag, new=new, metavar="N")


def _sets_help() -> str:
    shown = {f.name: flag.shown if f.default is None else f.default for f, flag in option_fields(Options)}
    scale = ", ".join(f"{field}={shown[option]}" for field, option in SCALE_FIELDS.items())
    return f"the scale both sides are trained at: {', '.join(SCALE_FIELDS)}; repeatable (default: {scale})"


#: Flags of the shared vocabulary (``zoo.cli.options``), each added by its own function.
VOCABULARY: dict[str, tuple[str, Callable[[argparse.ArgumentParser, Flag, str], None]]] = {
    "--seed": ("seed", lambda p, flag, help: add_seed(p, help)),
    "--batch-size": ("batch_size", lambda p, flag, help: add_batch_size(p, help)),
    "-o": ("out", lambda p, flag, help: add_out(p, flag.help, metavar="DIR", required=False, default=flag.shown)),
}


def option_dest(f: Field[Any]) -> str:
    """Where an option's flag leaves its value on the parsed arguments."""
    name = flag_name(f)
    return VOCABULARY[name][0] if name in VOCABULARY else f.name


def given_options(args: argparse.Namespace, kind: type[AnyOptions]) -> dict[str, Any]:
    """The options of ``kind`` the flags give, by name; unset flags leave the defaults
    (``--set`` fields: ``scale_options``)."""
    found: dict[str, Any] = {}
    for f, flag in option_fields(kind):
        value = getattr(args, option_dest(f), None)
        if value is not None and value is not False and not flag_name(f).startswith("--set "):
            found[f.name] = KIND_VALUES[flag.kind](value) if flag.kind in KIND_VALUES else value
    return found


def vocab_limit(text: str) -> int | str:
    """``--vocab-limit``: a count, or ``all`` for every GPT-2 token in the text."""
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or 'all', got {text!r}") from None


def axis_list(text: str) -> list[str]:
    """``--swaps``: comma-separated config fields, ``placement,position`` (``a+b``: a paired row)."""
    return [axis.strip() for axis in text.split(",") if axis.strip()]


def scale_list(text: str) -> list[tuple[int, int]]:
    """``--scales``: ``64x2,128x4``."""
    try:
        return parse_scales(text)
    except InputError as err:
        raise argparse.ArgumentTypeError(str(err)) from None


def warmup_list(text: str) -> list[int | None]:
    """``--warmup-sweep``: comma-separated warm-up steps, ``0,50`` (``auto``: a tenth of the steps)."""
    try:
        steps = [None if part.strip() == "auto" else int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated steps such as 0,50, got {text!r}") from None
    return _some(steps, text, "warm-up steps such as 0,50")


def factor_list(text: str) -> list[int]:
    """``--eval-lengths``: comma-separated whole multiples of ``--seq-len``, ``2,4``."""
    try:
        factors = [int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole factors such as 2,4, got {text!r}") from None
    return _some(factors, text, "whole factors such as 2,4")


def rate_list(text: str) -> list[float]:
    """``--lr-grid``: comma-separated learning rates, ``1e-3,3e-3,1e-2``."""
    try:
        rates = [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rates such as 1e-3,3e-3, got {text!r}") from None
    return _some(rates, text, "rates such as 1e-3,3e-3")


def _some(values: list[Any], text: str, example: str) -> list[Any]:
    """``values`` unless the list is empty (``','``: commas and nothing between them)."""
    if not values:
        raise argparse.ArgumentTypeError(f"expected at least one value, comma-separated {example}; got {text!r}")
    return values


#: How the command line reads each kind of option (``zoo.ablate.options.KINDS``): the
#: arguments of its flag, and (``KIND_VALUES``) what turns a parsed value into the option's.
KIND_ARGUMENTS: dict[str, dict[str, Any]] = {
    "text": {},
    "choice": {},
    "path": {},
    "count": {"type": positive},
    "seed": {"type": seed},
    "int": {"type": int},
    "float": {"type": float},
    "switch": {"action": "store_true"},
    "vocab": {"type": vocab_limit},
    "rates": {"type": rate_list},
    "axes": {"type": axis_list},
    "optional-axes": {"type": axis_list, "nargs": "?", "const": True},
    "scales": {"type": scale_list},
    "warmups": {"type": warmup_list},
    "factors": {"type": factor_list},
}
KIND_VALUES: dict[str, Callable[[Any], Any]] = {
    "path": Path,
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
