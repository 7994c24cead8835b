"""Training curves from runs' ``metrics.jsonl``: train and validation loss and the
learning rate against steps (tokens on a second axis), several runs overlaid, as a PNG.

``zoo plot RUN [RUN...]`` draws them; ``zoo train`` draws its own run's when it ends.
matplotlib (the ``plot`` extra) draws on a standalone ``Figure``, leaving pyplot's
global state alone.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from zoo.checkpoint import write_atomically
from zoo.checkpoint.owned import refuse_inputs_inside
from zoo.checkpoint.store import check_output_file
from zoo.errors import ConfigError, InputError, printable
from zoo.figures import figure_format, fit_text, plain_text, step_axis
from zoo.files import open_read
from zoo.training.metrics import LINE_LIMIT, METRICS, metrics_line

CURVES = "curves.png"  # what `zoo train` writes into its out folder
NO_MATPLOTLIB = "matplotlib is not installed; `pip install 'zoo-lm[plot]'` adds it"


def read_metrics(run: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """The rows of a run folder's ``metrics.jsonl``: a regular file, read a bounded line at a
    time, each line checked (``MetricsLine``); a torn, damaged or foreign line is skipped."""
    path = Path(run)
    path = path / METRICS if path.is_dir() and path.name != METRICS else path  # RUN/metrics.jsonl, a folder: said so
    try:
        with open_read(path, InputError, "the metrics file") as handle:
            rows = [row for raw in iter(lambda: handle.readline(LINE_LIMIT + 1), b"") if (row := metrics_line(raw))]
    except InputError as err:
        raise InputError(f"{err}; give a run folder of `zoo train` (it holds {METRICS})") from err
    except OSError as err:
        raise InputError(f"cannot read {printable(str(path))}: {err.strerror or err}") from err
    if not rows:
        raise InputError(f"{printable(str(path))} holds no training steps yet; plot it once the run has trained")
    return rows


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


@plain_text()
def plot_runs(
    runs: Sequence[str | os.PathLike[str]],
    path: str | os.PathLike[str],
    *,
    title: str | None = None,
    overwrite: bool = False,
) -> Path:
    """Train loss (thin), validation loss (dots) and learning rate of each run against
    its steps, overlaid, with the tokens seen on the top axis; written to ``path`` in the
    format its suffix names (``figure_format``), which must be absent or, with ``overwrite``,
    a regular file (``check_output_file``, the rule of ``zoo plot -o``), and must not be one
    of the runs' metrics files."""
    target = check_output_file(path, InputError, overwrite=overwrite, what="the plot's file")
    refuse_inputs_inside(target, [("the run", list(runs))], InputError)
    kind = figure_format(target)
    fig = curves_figure(distinct_runs(runs), title=title)
    write_atomically(target, lambda file: fig.savefig(file, format=kind), InputError)
    return target


def distinct_runs(runs: Sequence[str | os.PathLike[str]]) -> list[str | os.PathLike[str]]:
    """``runs`` with each folder once (the first of the names that resolve to it): the same
    run given twice, or as ``run`` and ``./run``, is drawn once."""
    seen: dict[str, str | os.PathLike[str]] = {}
    for run in runs:
        seen.setdefault(os.path.realpath(run), run)
    return list(seen.values())


@plain_text()
def curves_figure(runs: Sequence[str | os.PathLike[str]], *, title: str | None = None) -> Any:
    """The matplotlib ``Figure`` ``plot_runs`` draws. A number a run logged as not finite
    (``nonfinite`` in its line) is a gap in its line, and the run's legend entry says so."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ConfigError(f"cannot plot: {NO_MATPLOTLIB}") from err
    if not runs:
        raise InputError("give at least one run folder to plot")
    curves = {str(run): read_metrics(run) for run in runs}
    fig = Figure(figsize=(9, 6.5), dpi=110)
    loss_ax, lr_ax = fig.subplots(2, 1, sharex=True, height_ratios=(3, 1))
    tokens_per_step = None
    for (name, rows), color in zip(curves.items(), _colors(len(curves))):
        steps = [row["step"] for row in rows]
        loss_ax.plot(steps, _values(rows, "loss"), color=color, linewidth=0.8, alpha=0.6)
        evaluated = [row for row in rows if "val_loss" in row or "val_loss" in row.get("nonfinite", ())]
        finite = [row["val_loss"] for row in evaluated if "val_loss" in row]
        loss_ax.plot(
            [row["step"] for row in evaluated],
            _values(evaluated, "val_loss"),
            "o-",
            color=color,
            markersize=4,
            label=f"{name}: val" + (f" {finite[-1]:.4f}" if finite else "") + _gaps(rows),
        )
        lr_ax.plot(steps, _values(rows, "lr"), color=color)
        last = rows[-1]
        if tokens_per_step is None and last.get("tokens") and last["step"]:
            tokens_per_step = last["tokens"] / last["step"]
    loss_ax.set_ylabel("loss (nats/token): train line, val dots")
    loss_ax.grid(alpha=0.3)
    loss_ax.legend(fontsize=8)
    lr_ax.set_ylabel("learning rate")
    step_axis(lr_ax)
    lr_ax.grid(alpha=0.3)
    if tokens_per_step:
        per = tokens_per_step
        top = loss_ax.secondary_xaxis("top", functions=(lambda s: s * per, lambda t: t / per))
        top.set_xlabel(f"tokens ({per:,.0f} per step)")
    loss_ax.set_title(title or ", ".join(Path(name).name for name in curves), fontsize=10)
    fit_text(fig)
    fig.tight_layout()
    return fig


def _values(rows: list[dict[str, Any]], key: str) -> list[float]:
    """``key`` of each row, NaN (a gap in the line) where the row logged it as not finite."""
    return [float(row[key]) if row.get(key) is not None else math.nan for row in rows]


def _gaps(rows: list[dict[str, Any]]) -> str:
    """`` (gaps: loss not finite at 2 steps)``, for a legend entry; empty when none."""
    counts: dict[str, int] = {}
    for row in rows:
        for key in row.get("nonfinite", ()):
            if key in PLOTTED:
                counts[key] = counts.get(key, 0) + 1
    if not counts:
        return ""
    said = ", ".join(f"{key} at {n} step{'s' if n > 1 else ''}" for key, n in counts.items())
    return f" (gaps: not finite: {said})"


#: The numbers of a metrics line that ``plot_runs`` draws.
PLOTTED = ("loss", "val_loss", "lr")


def _colors(count: int) -> list[str]:
    palette = ["C0", "C1", "C2", "C3", "C4", "C5", "C6", "C7", "C8", "C9"]
    return [palette[i % len(palette)] for i in range(count)]
