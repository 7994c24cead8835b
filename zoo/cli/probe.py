"""``zoo probe``: residual stream RMS, gradient norms, attention entropy and update ratios,
per layer, for presets (with overrides and variants) or saved models (checkpoints, run
folders, Hugging Face folders, hub ids: ``zoo.pipelines.load_model``'s), side by side."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path

from zoo.cli.options import (
    Commands,
    add_out,
    add_overwrite,
    refuse_existing_file,
    refuse_overwriting_inputs,
    revision,
    seed,
)
from zoo.cli.render import Ui, new_table
from zoo.errors import InputError, printable
from zoo.figures import FIGURE_FORMATS, figure_format
from zoo.probe import METRICS, ProbeResult, designs, plot, probe_designs, write_json


def metric_list(text: str) -> list[str]:
    """``--metrics residual,grad``: names from ``METRICS``."""
    names = [m.strip() for m in text.split(",") if m.strip()]
    unknown = [m for m in names if m not in METRICS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"unknown metric(s) {', '.join(unknown) or '(none)'}; choose from {','.join(METRICS)}"
        )
    return names


def add_parsers(commands: Commands) -> None:
    p = commands.add(
        "probe",
        cmd_probe,
        [commands.json_flag, commands.sets],
    )
    p.add_argument(
        "targets",
        nargs="+",
        metavar="MODEL",
        help="preset names, zoo checkpoints (files or run folders), Hugging Face folders, or hub ids such as "
        "openai-community/gpt2",
    )
    p.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="KEY=VALUE ...",
        help="one design per flag: space-separated overrides on each preset (default: the preset as it is); repeatable",
    )
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="KEY=V1,V2,...",
        help="one design per value (every combination of several --vary, times each --variant); repeatable "
        "(default: none)",
    )
    p.add_argument(
        "--version", type=int, default=None, metavar="N", help="checkpoint folders: version N (default: newest)"
    )
    p.add_argument(
        "--revision",
        type=revision,
        default=None,
        metavar="REV",
        help="a hub id's branch, tag or commit (default: main)",
    )
    p.add_argument("--batch-size", type=int, default=4, metavar="N", help="rows of text (default: 4)")
    p.add_argument("--seq-len", type=int, default=128, metavar="N", help="tokens per row (default: 128)")
    p.add_argument(
        "--tokenizer",
        choices=["auto", "bytes", "gpt2"],
        default="auto",
        help="how the bundled corpus becomes ids (default: auto, GPT-2 when the vocabulary holds it, else bytes)",
    )
    p.add_argument("--seed", type=seed, default=0, metavar="N", help="seed of each preset's fresh weights (default: 0)")
    p.add_argument(
        "--metrics",
        type=metric_list,
        default=list(METRICS),
        metavar="NAME,NAME,...",
        help=f"what to show and plot, comma-separated from {','.join(METRICS)} (default: all)",
    )
    add_out(p, "write every measurement as JSON to FILE (default: none)", metavar="FILE", required=False)
    p.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help=f"draw the designs side by side, in the format FILE's suffix names ({', '.join(FIGURE_FORMATS)}; "
        f"needs matplotlib; default: none)",
    )
    add_overwrite(p, "replace existing files -o and --plot name (default: refuse them)")


def cmd_probe(args: argparse.Namespace, ui: Ui) -> int:
    if args.out and args.plot and same_file(args.out, args.plot):
        raise InputError(
            f"-o {printable(args.out)} and --plot {printable(args.plot)} are the same file, so one output would "
            f"overwrite the other; give each its own path"
        )
    for flag, out in (("-o", args.out), ("--plot", args.plot)):
        if out is not None:
            refuse_existing_file(out, args.overwrite, flag=flag)
            refuse_overwriting_inputs(out, args.overwrite, {"the checkpoint": args.targets})
    if args.plot:
        figure_format(Path(args.plot), "--plot")  # before the work, as the other refusals
    found = designs(
        args.targets,
        sets=args.set,
        variants=args.variant,
        vary=args.vary,
        version=args.version,
        seed=args.seed,
        revision=args.revision,
    )
    results = probe_designs(found, batch_size=args.batch_size, seq_len=args.seq_len, tokenizer=args.tokenizer)
    if args.out:
        write_json(results, args.out, overwrite=args.overwrite)
    if args.plot:
        plot(results, args.plot, metrics=args.metrics, overwrite=args.overwrite)
    if ui.json_mode:
        ui.json({"probes": [r.to_dict() for r in results]})
        return 0
    show(results, ui, args.metrics)
    for result in results:
        for note in result.notes:
            ui.warn(f"{result.label}: {note}")
    if args.out:
        ui.line(f"wrote {args.out}", "dim")
    if args.plot:
        ui.line(f"wrote {args.plot}", "dim")
    return 0


def same_file(first: str, second: str) -> bool:
    """Whether two output paths name one file: the same after resolving links, or hard links of one."""
    if os.path.realpath(first) == os.path.realpath(second):
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # either is absent (or unreadable): not one existing file
        return False


def show(results: Sequence[ProbeResult], ui: Ui, metrics: Sequence[str]) -> None:
    """A table of the designs, then one table per metric: a row per layer, a column per design."""
    sources = sorted({r.tokens for r in results})
    ui.line(f"designs, measured on {'; '.join(sources)}", "bold")
    legend = new_table(None, "#", "design", "loss (nats/token)", right=["loss (nats/token)"])
    for i, result in enumerate(results, 1):
        legend.add_row(str(i), result.label, f"{result.loss:.3f}")
    ui.print(legend)
    depth = max(r.layers for r in results)
    if "residual" in metrics:
        rows = ["embed", *map(str, range(depth))]
        per_layer(ui, "residual stream RMS", rows, [r.residual_rms for r in results])
    if "grad" in metrics:
        for group in ("attention", "mlp"):
            values = [r.grad_norm[group] for r in results]
            per_layer(ui, f"gradient norm, {group} weights", list(map(str, range(depth))), values)
    if "entropy" in metrics:
        values = [[sum(h) / len(h) if h else math.nan for h in r.attention_entropy] for r in results]  # nan: no scores
        per_layer(ui, "attention entropy (nats), head mean", list(map(str, range(depth))), values, "{:.3f}")
    if "update" in metrics and any(r.update_ratio for r in results):
        for group in ("attention", "mlp"):
            values = [r.update_ratio[group] if r.update_ratio else [] for r in results]
            per_layer(ui, f"update / weight, {group}", list(map(str, range(depth))), values)


def _cell(values: Sequence[float], i: int, fmt: str) -> str:
    """Layer ``i`` of one design: its value, ``-`` where it was not measured (nan: a block
    without attention scores), blank past the design's depth."""
    if i >= len(values):
        return ""
    return "-" if math.isnan(values[i]) else fmt.format(values[i])


def per_layer(ui: Ui, title: str, rows: Sequence[str], values: Sequence[Sequence[float]], fmt: str = "{:.3g}") -> None:
    """``title``, then a row per layer (``rows`` names them), a column per design (numbered as in the legend)."""
    columns = [str(i) for i in range(1, len(values) + 1)]
    table = new_table(None, "block", *columns, right=["block", *columns])
    for i, row in enumerate(rows):
        table.add_row(row, *(_cell(v, i, fmt) for v in values))
    ui.line(title, "bold")
    ui.print(table)
