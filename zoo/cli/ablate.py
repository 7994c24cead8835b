"""``zoo ablate``: train a base, each swap toward a target (or a cumulative path), and the
target over seeds, and show which swaps move the validation loss."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from zoo.ablate.options import (
    DEFAULT_SCALE,
    DEFAULT_SEEDS,
    FLAG_OPTIONS,
    LAUNCHERS,
    ORDERS,
    TUNE_FRACTION,
    parse_scales,
)
from zoo.ablate.stats import CORRECTIONS, DEFAULT_CORRECTION
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
)
from zoo.cli.render import Ui, clipped, fmt_flops, new_table
from zoo.errors import InputError
from zoo.nn.config import parse_sets
from zoo.nn.registry import default_registry

if TYPE_CHECKING:  # the ablation itself loads when the command runs, not to build the parser
    from zoo.ablate import AblationResult, ProgressCallback
    from zoo.ablate.ladder import StudyResult

#: The model fields `zoo ablate --set` takes (both sides are trained at this scale), to
#: the run_ablation option each sets.
SCALE_FIELDS = {"d_model": "d_model", "n_layers": "layers", "n_heads": "heads"}


def add_parsers(commands: Commands) -> None:
    p = commands.add(
        "ablate",
        cmd_ablate,
        "train a base, each single swap (or a cumulative path) toward a target, and the target, over seeds",
        [commands.json_flag],
    )
    p.add_argument(
        "--from", dest="base", default="transformer-2017", metavar="PRESET", help="the base (default transformer-2017)"
    )
    p.add_argument(
        "--to", dest="target", default="gpt2-small", metavar="PRESET", help="the target (default gpt2-small)"
    )
    _add_scale(p)
    p.add_argument(
        "--tune-lr",
        action="store_true",
        help="sweep a learning rate per variant, train each at its best (default: one --lr for all)",
    )
    p.add_argument(
        "--lr-grid",
        type=rate_list,
        default=None,
        metavar="R,R,...",
        help="the rates --tune-lr sweeps (implies it; default: --lr times 0.25, 0.5, 1, 2)",
    )
    p.add_argument(
        "--tune-fraction",
        type=float,
        default=None,
        metavar="FRACTION",
        help=f"the sweep's share of the steps (default {TUNE_FRACTION})",
    )
    p.add_argument(
        "--path",
        nargs="?",
        const=True,
        default=None,
        metavar="AXIS,AXIS,...",
        help="a cumulative path (base, +swap 1, +swaps 1-2, ..., target) instead of single swaps; optionally its "
        "order (default: single swaps)",
    )
    p.add_argument("--order", choices=ORDERS, default=None, help="table rows by effect size (default) or in plan order")
    p.add_argument(
        "--workers", type=positive, default=None, metavar="N", help="runs trained at once, one process each (default 1)"
    )
    p.add_argument(
        "--launcher",
        choices=LAUNCHERS,
        default=None,
        help="local: the runs train here, --workers at once; ray: each run is a Ray task on the cluster ray.init "
        "finds (RAY_ADDRESS, else a local one), the out folder on a shared file system (default local)",
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="cuda: one GPU per worker (default cpu)")
    _add_text(p)
    p.add_argument("--threads", type=positive, default=None, metavar="N", help="torch CPU threads per run (default 1)")
    add_out(
        p,
        "output folder; run again on it, it trains only unfinished runs",
        metavar="DIR",
        required=False,
        default="runs/ablation",
    )


def _add_text(p: argparse.ArgumentParser) -> None:
    """The text the study trains on, and its tokens."""
    p.add_argument(
        "--data",
        default=None,
        metavar="FILE|DIR",
        help="a text file, or a folder prepared by `zoo data prepare` (default: the bundled Shakespeare)",
    )
    p.add_argument(
        "--tokenizer",
        choices=("auto", "gpt2", "bytes"),
        default=None,
        help="auto (default): gpt2 if its files are installed (the text extra), else bytes",
    )
    p.add_argument(
        "--vocab-limit",
        type=vocab_limit,
        default=None,
        metavar="N|all",
        help="GPT-2 tokens: keep the N most frequent, spell the rest as bytes (default 1024)",
    )
    p.add_argument(
        "--max-chars",
        type=positive,
        default=None,
        metavar="N",
        help="train on the first N characters only (default: all of the text)",
    )
    p.add_argument(
        "--correction",
        choices=CORRECTIONS,
        default=None,
        help=f"family-wise correction over the table's tests; `*` follows the adjusted p (default {DEFAULT_CORRECTION})",
    )
    p.add_argument(
        "--warmup",
        type=int,
        default=None,
        metavar="N",
        help="learning-rate warm-up steps (default: a tenth of --steps)",
    )
    p.add_argument(
        "--swaps", type=axis_list, default=None, metavar="AXIS,AXIS,...", help="train only these swaps (default: all)"
    )
    _add_study(p)
    p.add_argument(
        "--docs",
        default=None,
        metavar="FILE",
        help="write the results as a generated region of FILE (a Markdown page), named after --out (default: none)",
    )
    add_overwrite(
        p,
        "replace an --out folder this ablation did not make (or another's) whole, everything in it removed "
        "(default: refuse it)",
    )


def _add_study(p: argparse.ArgumentParser) -> None:
    """The flags of a study: a scale ladder, rate and warm-up sweeps."""
    study = p.add_argument_group("a study: one ablation per rung x rate x warm-up, each in a folder of --out")
    study.add_argument(
        "--scales",
        type=scale_list,
        default=None,
        metavar="DxL,DxL,...",
        help="a scale ladder of d_model x layers, heads at the head size of --set d_model / n_heads (e.g. 64x2,128x4,192x6; default: one scale, no ladder)",
    )
    study.add_argument(
        "--tokens-per-param",
        type=float,
        default=None,
        metavar="RATIO",
        help="each rung trains RATIO tokens per non-embedding parameter of the base (default: --steps for every rung)",
    )
    study.add_argument(
        "--flops-per-run",
        type=float,
        default=None,
        metavar="FLOPS",
        help="each run trains FLOPS FLOPs (default: --steps)",
    )
    study.add_argument(
        "--lr-sweep",
        type=rate_list,
        default=None,
        metavar="LR,LR,...",
        help="train every variant at each rate for the full budget (default: --lr alone)",
    )
    study.add_argument(
        "--warmup-sweep",
        type=warmup_list,
        default=None,
        metavar="N,N,...",
        help="train every variant at each warm-up (default: --warmup alone)",
    )


def _add_scale(p: argparse.ArgumentParser) -> None:
    """The scale and training flags: what every run of the study shares."""
    add_config(p, "ablate")
    scale = ", ".join(f"{field}={DEFAULT_SCALE[option]}" for field, option in SCALE_FIELDS.items())
    add_sets(
        p,
        help=f"the scale both sides are trained at: {', '.join(SCALE_FIELDS)}; repeatable (default: {scale})",
    )
    for field, option in SCALE_FIELDS.items():  # the old spellings: --d-model, --layers, --heads
        old = "--" + option.replace("_", "-")
        p.add_argument(old, dest=option, type=positive, action=RenamedFlag, new=f"--set {field}=N", metavar="N")
    p.add_argument(
        "--seq-len",
        type=positive,
        default=None,
        metavar="N",
        help=f"tokens per sequence (default {DEFAULT_SCALE['seq_len']})",
    )
    p.add_argument(
        "--steps", type=positive, default=None, metavar="N", help=f"steps per run (default {DEFAULT_SCALE['steps']})"
    )
    add_batch_size(p, f"sequences per step (default {DEFAULT_SCALE['batch']})")
    p.add_argument("--batch", dest="batch_size", type=positive, action=RenamedFlag, new="--batch-size", metavar="N")
    p.add_argument(
        "--eval-every",
        type=positive,
        default=None,
        metavar="N",
        help=f"validation loss every N steps (default {DEFAULT_SCALE['eval_every']})",
    )
    p.add_argument(
        "--lr", type=float, default=None, metavar="LR", help=f"peak learning rate (default {DEFAULT_SCALE['lr']})"
    )
    p.add_argument(
        "--seeds", type=positive, default=None, metavar="N", help=f"runs per variant (default {DEFAULT_SEEDS})"
    )
    add_seed(p, "the first seed; seeds run N, N+1, ... (default 0)")


def vocab_limit(text: str) -> int | str:
    """``--vocab-limit``: a count, or ``all`` for every GPT-2 token in the text."""
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or 'all', got {text!r}") from None


def axis_list(text: str) -> list[str]:
    """``--swaps``: comma-separated config fields, ``placement,position``."""
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
        return [None if part.strip() == "auto" else int(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated steps such as 0,50, got {text!r}") from None


def rate_list(text: str) -> list[float]:
    """``--lr-grid``: comma-separated learning rates, ``1e-3,3e-3,1e-2``."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rates such as 1e-3,3e-3, got {text!r}") from None


# Flags of `zoo ablate` passed as the run_ablation argument of the same name when given
# (its defaults rule otherwise); --data, --lr-grid, --tune-lr and --path are converted below.
ABLATE_OPTIONS = (*FLAG_OPTIONS, "vocab_limit", "tune_fraction", "swaps")
# Flags of a study (a ladder or a sweep), passed to run_study when given.
STUDY_OPTIONS = ("scales", "tokens_per_param", "flops_per_run", "lr_sweep", "warmup_sweep")


def scale_options(args: argparse.Namespace) -> dict[str, int]:
    """``--set d_model=48 --set n_layers=2`` (and the old ``--d-model``, ``--layers``,
    ``--heads``) as run_ablation's ``d_model``, ``layers``, ``heads``."""
    found = {option: getattr(args, option) for option in SCALE_FIELDS.values() if hasattr(args, option)}
    for field, value in parse_sets(args.set).items():
        if field not in SCALE_FIELDS:
            raise InputError(
                f"--set {field}=...: zoo ablate sets the scale both sides train at ({', '.join(SCALE_FIELDS)}); "
                f"every other field is what the presets' differences and swaps decide"
            )
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"--set {field}={value!r}: expected a whole number of 1 or more")
        found[SCALE_FIELDS[field]] = value
    return found


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
    nothing = swapless(args.base, args.target, default_registry())
    if nothing is not None:  # said before it trains, not only in the notes after
        ui.warn(nothing)
    progress, on_progress = _progress(ui)
    studied = {key: getattr(args, key) for key in STUDY_OPTIONS if getattr(args, key) is not None}
    try:
        if studied:
            study = run_study(
                args.base,
                args.target,
                out_dir=Path(args.out),
                on_progress=on_progress,
                overwrite=args.overwrite,
                **options,
                **studied,
            )
        else:
            result = run_ablation(
                base=args.base,
                target=args.target,
                out_dir=Path(args.out),
                on_progress=on_progress,
                overwrite=args.overwrite,
                **options,
            )
    finally:
        if progress.live.is_started:  # stop() prints a line even when it never started
            progress.stop()
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
    given = {**vars(args), "batch": args.batch_size}
    options: dict[str, Any] = {key: given[key] for key in ABLATE_OPTIONS if given.get(key) is not None}
    options.update(scale_options(args))
    if args.data is not None:
        options["data"] = Path(args.data)
    if options.get("vocab_limit") == "all":
        options["vocab_limit"] = None
    if args.tune_lr or args.lr_grid is not None:
        options["tune_lr"] = True
    if args.lr_grid is not None:
        options["lr_grid"] = args.lr_grid
    if args.path is not None:
        options["path"] = True if args.path is True else [axis.strip() for axis in args.path.split(",") if axis.strip()]
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


def _show_study(study: StudyResult, args: argparse.Namespace, ui: Ui) -> int:
    from zoo.ablate.docs import write_docs_region

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
            "along the ladder: Δ vs base per rung", "row", *(r.name for r in study.rungs), "trend", right=["trend"]
        )
        for t in trends:
            rich_table.add_row(t.name, *(d.format(3, sign=True) for d in t.deltas), t.word)
        ui.print(rich_table)
    if study.reused:
        ui.line(f"reused {len(study.reused)} finished runs from {Path(args.out)}; trained {len(study.trained)}", "dim")
    ui.line(f"report: {study.report_path}")
    ui.line(f"results: {study.results_path}")
    for plot in (study.scale_plot_path, study.sweep_plot_path):
        if plot:
            ui.line(f"plot: {plot}")
    return 0


def _show(result: AblationResult, args: argparse.Namespace, ui: Ui, *, brief: bool = False) -> None:
    """The table, the budget, what is significant, the notes and where the files are."""
    from zoo.ablate import significant_swaps, table
    from zoo.ablate.advice import floor_sentence, next_step

    seeds = len(result.seeds)
    header, rows = table(result, compact=True)
    title = (
        f"ablation {args.base} -> {args.target}: {result.settings.steps} steps, {seeds} seed{'s' if seeds > 1 else ''}"
    )
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
    if result.under_trained:
        ui.line(f"under-trained: {', '.join(result.under_trained)} do not beat the bigram reference", "yellow")
    ui.line(
        f"val loss: mean ± 95% CI over seeds; Δ: paired over matching seeds, ± 95% CI; p adj: after "
        f"{result.correction} over {result.tests} tests; *: p adj < 0.05",
        "dim",
    )
    s = result.settings
    ui.line(
        f"budget: every run {s.steps * s.tokens_per_step:,} tokens, {fmt_flops(result.runs[0].train_flops)} training FLOPs "
        f"for the base (parameters and FLOPs per variant: report.md)",
        "dim",
    )
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
