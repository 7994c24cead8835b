"""``zoo probe``: residual stream RMS, gradient norms, attention entropy and update ratios,
per layer, for presets (with overrides and variants) or saved models (checkpoints, run
folders, Hugging Face folders, hub ids: ``zoo.pipelines.load_model``'s), side by side."""

from __future__ import annotations

import argparse
import math
import os
from collections.abc import Sequence
from pathlib import Path

from zoo.cli.arguments import refuse_existing_file, refuse_overwriting_inputs
from zoo.cli.render import Ui, new_table
from zoo.errors import InputError, printable
from zoo.figures import figure_format
from zoo.probe import ProbeResult, designs, plot, probe_designs, write_json


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
