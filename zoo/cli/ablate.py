"""``zoo ablate``: train a base, each swap toward a target (or a cumulative path), and the
target over seeds, and show which swaps move the validation loss."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.text import Text

from zoo.ablate import (
    DEFAULT_SCALE,
    DEFAULT_SEEDS,
    ORDERS,
    TUNE_FRACTION,
    run_ablation,
    significant_swaps,
    table,
)
from zoo.cli.options import Commands
from zoo.cli.render import Ui, clipped, fmt_flops, new_table


def add_parsers(commands: Commands) -> None:
    p = commands.add(
        "ablate",
        cmd_ablate,
        "train a base, each single swap (or a cumulative path) toward a target, and the target, over seeds",
        [commands.json_flag],
    )
    p.add_argument("--from", dest="base", default="transformer-2017", metavar="PRESET", help="default transformer-2017")
    p.add_argument("--to", dest="target", default="gpt2-small", metavar="PRESET", help="default gpt2-small")
    for flag in ("--d-model", "--layers", "--heads", "--seq-len", "--steps", "--batch", "--eval-every"):
        default = DEFAULT_SCALE[flag.removeprefix("--").replace("-", "_")]
        p.add_argument(flag, type=int, default=None, metavar="N", help=f"default {default}")
    p.add_argument("--lr", type=float, default=None, help=f"peak learning rate (default {DEFAULT_SCALE['lr']})")
    p.add_argument("--seeds", type=int, default=None, metavar="N", help=f"runs per variant (default {DEFAULT_SEEDS})")
    p.add_argument(
        "--seed", type=int, default=None, metavar="N", help="the first seed; seeds run N, N+1, ... (default 0)"
    )
    p.add_argument("--tune-lr", action="store_true", help="sweep a learning rate per variant, train each at its best")
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
        metavar="F",
        help=f"the sweep's share of the steps (default {TUNE_FRACTION})",
    )
    p.add_argument(
        "--path",
        nargs="?",
        const=True,
        default=None,
        metavar="AXIS,AXIS,...",
        help="a cumulative path (base, +swap 1, +swaps 1-2, ..., target) instead of single swaps; optionally its order",
    )
    p.add_argument("--order", choices=ORDERS, default=None, help="table rows by effect size (default) or in plan order")
    p.add_argument(
        "--workers", type=int, default=None, metavar="N", help="runs trained at once, one process each (default 1)"
    )
    p.add_argument("--device", choices=("cpu", "cuda"), default=None, help="cuda: one GPU per worker (default cpu)")
    p.add_argument(
        "--data",
        default=None,
        metavar="FILE|DIR",
        help="a text file, or a folder prepared by `zoo data prepare` (default: Shakespeare)",
    )
    p.add_argument(
        "--tokenizer", choices=("auto", "gpt2", "bytes"), default=None, help="auto: GPT-2 if installed, else bytes"
    )
    p.add_argument(
        "--vocab-limit",
        type=vocab_limit,
        default=None,
        metavar="N|all",
        help="GPT-2 tokens: keep the N most frequent, spell the rest as bytes (default 1024)",
    )
    p.add_argument("--max-chars", type=int, default=None, metavar="N", help="train on the first N characters only")
    p.add_argument("--threads", type=int, default=None, metavar="N", help="torch CPU threads per run (default 1)")
    p.add_argument(
        "--out",
        default="runs/ablation",
        metavar="DIR",
        help="output folder; run again on it, it trains only unfinished runs (default runs/ablation)",
    )


def vocab_limit(text: str) -> int | str:
    """``--vocab-limit``: a count, or ``all`` for every GPT-2 token in the text."""
    if text == "all":
        return "all"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of tokens or 'all', got {text!r}") from None


def rate_list(text: str) -> list[float]:
    """``--lr-grid``: comma-separated learning rates, ``1e-3,3e-3,1e-2``."""
    try:
        return [float(part) for part in text.split(",") if part.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated rates such as 1e-3,3e-3, got {text!r}") from None


# Flags of `zoo ablate` passed as the run_ablation argument of the same name when given
# (its defaults rule otherwise); --data, --lr-grid, --tune-lr and --path are converted below.
ABLATE_OPTIONS = (
    "d_model",
    "layers",
    "heads",
    "seq_len",
    "steps",
    "batch",
    "lr",
    "eval_every",
    "seeds",
    "seed",
    "workers",
    "tokenizer",
    "max_chars",
    "threads",
    "order",
    "device",
    "vocab_limit",
    "tune_fraction",
)


def cmd_ablate(args: argparse.Namespace, ui: Ui) -> int:
    options: dict[str, Any] = {key: getattr(args, key) for key in ABLATE_OPTIONS if getattr(args, key) is not None}
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
        if run not in tasks:
            for name in [n for n in done if n.startswith("tune ") and n in tasks]:
                progress.remove_task(tasks.pop(name))  # a finished sweep run makes room
            tasks[run] = progress.add_task(run, total=total, loss="")
        # The last call of a run (step == total once more) carries its final validation loss.
        progress.update(tasks[run], completed=step, total=total, loss="" if loss is None else f"loss {loss:.3f}")
        if step == total:
            done.add(run)

    with progress:
        result = run_ablation(
            base=args.base, target=args.target, out_dir=Path(args.out), on_progress=on_progress, **options
        )
    if not result.main_process:
        return 0  # under torchrun, rank 0 reports
    if ui.json_mode:
        ui.json({**result.to_dict(), "results_path": str(result.results_path)})
        return 0
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
    ui.print(rich_table)
    ui.line("val loss: mean ± 95% CI over seeds; Δ: paired over matching seeds, ± 95% CI; *: the CI excludes 0", "dim")
    s = result.settings
    ui.line(
        f"budget: every run {s.steps * s.tokens_per_step:,} tokens, {fmt_flops(result.runs[0].train_flops)} training FLOPs "
        f"for the base (parameters and FLOPs per variant: report.md)",
        "dim",
    )
    significant = significant_swaps(result)
    ui.line(f"significant at 95%: {', '.join(significant) if significant else 'none'}", "bold")
    for note in result.notes:
        ui.line(note, "yellow")
    if result.reused:
        ui.line(
            f"reused {len(result.reused)} finished runs from {Path(args.out)}; trained {len(result.trained)}", "dim"
        )
    ui.line(f"report: {result.report_path}")
    ui.line(f"curves: {result.results_path}")
    for plot in (result.plot_path, result.delta_plot_path):
        if plot:
            ui.line(f"plot: {plot}")
    ui.line(
        f"checkpoints: {', '.join(run.checkpoint.name for run in result.runs)} (first seed) in {Path(args.out)}", "dim"
    )
    return 0
