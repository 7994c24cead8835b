"""Figures: their text plain text, their format the one their file's suffix names.

matplotlib reads ``$...$`` in any label or title as mathtext, so a run folder, a preset
name or a ``--title`` holding a dollar sign would change a plot or fail to draw it (a
``ValueError`` from the mathtext parser). Every plot the zoo draws is made under
``plain_text``, which turns that parsing off, and written in ``figure_format(path)``, so
that ``-o fig.svg`` holds SVG, never PNG bytes under another name."""

from __future__ import annotations

import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.errors import InputError, printable

__all__ = ["FIGURE_FORMATS", "block_axis", "figure_format", "fit_text", "log_scale", "plain_text"]


@contextmanager
def plain_text() -> Iterator[None]:
    """Inside: text made by matplotlib is drawn as written (``text.parse_math`` off).
    Usable as a decorator (``@plain_text()``); matplotlib is imported only when it runs,
    and where it cannot be (not installed, or no NumPy) the plot functions inside find
    that out themselves and draw nothing."""
    try:
        import matplotlib
    except ImportError:
        yield
        return
    with matplotlib.rc_context({"text.parse_math": False}):
        yield


def log_scale(ax: Any, axis: str = "y") -> None:
    """``ax``'s ``axis`` ("x" or "y") on a log scale whose tick labels are plain text
    (``1``, ``0.01``, ``1e-05``): matplotlib's default log labels are mathtext
    (``$\\mathdefault{10^{0}}$``), which ``plain_text`` would print as written."""
    from matplotlib.ticker import LogFormatter

    getattr(ax, f"set_{axis}scale")("log")
    which = getattr(ax, f"{axis}axis")
    which.set_major_formatter(LogFormatter())
    which.set_minor_formatter(LogFormatter(labelOnlyBase=False, minor_thresholds=(1, 0.4)))


def step_axis(ax: Any, label: str = "step") -> None:
    """``ax``'s x axis counts steps: whole numbers only (a few steps of a short run would
    otherwise read 0.5, 1.5, ...)."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel(label)
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def block_axis(ax: Any, *, residual: bool = False) -> None:
    """``ax``'s x axis numbers blocks as ``zoo probe``, the hook names and every table do:
    0 to L - 1; the residual stream's L + 1 points are 0 (the embeddings, entering block
    0) and n (leaving block n - 1). Whole numbers only."""
    from matplotlib.ticker import MaxNLocator

    ax.set_xlabel("block (0: the embeddings, n: leaving block n - 1)" if residual else "block")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))


def fit_text(fig: Any) -> None:
    """Wrap each title, axis label and legend entry of ``fig`` that is longer than the room
    it has (the figure's width for its suptitle, its axes' width or height for the rest, a
    legend's entries together no wider than its axes), at spaces where it has them, else
    anywhere (a run folder's path), so that none runs past the figure's edge and is cut;
    call before ``tight_layout``."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    renderer = FigureCanvasAgg(fig).get_renderer()  # type: ignore[no-untyped-call]
    texts: list[tuple[Any, float, bool]] = []
    if getattr(fig, "_suptitle", None) is not None:
        texts.append((fig._suptitle, fig.bbox.width, False))
    for ax in fig.axes:
        width, height = ax.bbox.width, ax.bbox.height
        texts += [(ax.title, width, False), (ax.xaxis.label, width, False), (ax.yaxis.label, height, True)]
    for text, room, vertical in texts:
        _wrap(text, renderer, room, vertical=vertical)
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is None or not legend.get_texts():
            continue
        widest = max(text.get_window_extent(renderer).width for text in legend.get_texts())
        frame = legend.get_window_extent(renderer).width - widest  # its frame and handles
        for text in legend.get_texts():
            _wrap(text, renderer, ax.bbox.width - frame)


def _wrap(text: Any, renderer: Any, room: float, *, vertical: bool = False) -> None:
    """Narrow ``text``'s lines until it fits ``room``; each pass narrows by what the last
    one measured."""
    for _ in range(6):
        extent = text.get_window_extent(renderer)
        length = float(extent.height if vertical else extent.width)
        words = text.get_text().replace("\n", " ")
        if length <= room or not words.strip():
            return
        longest = max(len(line) for line in text.get_text().splitlines())
        text.set_text(textwrap.fill(words, max(10, int(longest * max(room, 1.0) / length) - 1)))


#: The formats a figure is written in, by the suffix of its file (matplotlib's names).
FIGURE_FORMATS = {".png": "png", ".svg": "svg", ".pdf": "pdf", ".jpg": "jpg", ".jpeg": "jpg"}


def figure_format(path: Path, flag: str = "-o") -> str:
    """The format ``path``'s suffix names (``FIGURE_FORMATS``); an error listing them for
    any other suffix, so that a file's name never lies about its bytes."""
    kind = FIGURE_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise InputError(
            f"{flag} {printable(str(path))}: the suffix {printable(path.suffix) or '(none)'} names no figure format "
            f"the zoo writes; end the file name in one of {', '.join(FIGURE_FORMATS)}"
        )
    return kind
