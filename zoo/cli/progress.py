"""Training progress a person can read, on stderr (stdout stays for results and JSON).

In a terminal: a live bar (step, loss, tokens/s, MFU, time left) with every evaluation
printed above it as it happens, so earlier validation losses stay on screen. Not in a
terminal (``zoo train ... > log 2>&1``, CI): one plain line per ``log_every`` steps and
one per evaluation, each flushed as it is written, as nanoGPT prints. Nothing with
``quiet``, and nothing on ranks other than 0.
"""

from __future__ import annotations

import math
from types import TracebackType

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.text import Text

from zoo.training import StepReport


def step_line(report: StepReport) -> str:
    """``step 10/200  loss 4.1234  lr 3.00e-03  12,345 tokens/s  MFU 31.2%``."""
    width = len(str(report.steps))
    line = (
        f"step {report.step:>{width}}/{report.steps}  loss {report.loss:.4f}  lr {report.lr:.2e}  "
        f"{report.tokens_per_s:,.0f} tokens/s"
    )
    if report.mfu is not None:
        line += f"  MFU {report.mfu:.1%}"
    return line


def eval_line(report: StepReport) -> str:
    """``step 10/200  val loss 4.2000  perplexity 66.69``."""
    assert report.val_loss is not None
    width = len(str(report.steps))
    perplexity = math.exp(min(report.val_loss, 700.0))
    return f"step {report.step:>{width}}/{report.steps}  val loss {report.val_loss:.4f}  perplexity {perplexity:.2f}"


class TrainProgress:
    """``on_step`` for ``zoo.training.train``: the live display or the plain lines."""

    def __init__(self, console: Console, steps: int, *, log_every: int, quiet: bool, main_rank: bool) -> None:
        self.console = console
        self.log_every = log_every
        self.shown = main_rank and not quiet
        self.live = self.shown and console.is_terminal
        self.last: StepReport | None = None
        self.bar = Progress(
            TextColumn("step"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("{task.fields[info]}"),
            TimeRemainingColumn(),
            console=console,
            disable=not self.live,
        )
        self.task = self.bar.add_task("train", total=steps, info="")

    def __call__(self, report: StepReport) -> None:
        first = self.last is None
        self.last = report
        if not self.shown:
            return
        if self.live:
            if first:
                self.bar.start()  # after the checks, so an error is the only line
            info = f"loss {report.loss:.4f}  {report.tokens_per_s:,.0f} tokens/s"
            if report.mfu is not None:
                info += f"  MFU {report.mfu:.1%}"
            if report.val_loss is not None:
                self.bar.console.print(Text(eval_line(report)), soft_wrap=True)  # above the bar, kept
            self.bar.update(self.task, completed=report.step, info=info)
            return
        if report.step % self.log_every == 0 or report.step == report.steps or first:
            self._plain(step_line(report))
        if report.val_loss is not None:
            self._plain(eval_line(report))

    def _plain(self, line: str) -> None:
        self.console.print(Text(line), soft_wrap=True, highlight=False)
        self.console.file.flush()

    def __enter__(self) -> TrainProgress:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self.live and self.last is not None:  # started (stop prints a line even when it was not)
            self.bar.stop()
