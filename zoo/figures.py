"""Figures: their text plain text, their format the one their file's suffix names.

matplotlib reads ``$...$`` in any label or title as mathtext, so a run folder, a preset
name or a ``--title`` holding a dollar sign would change a plot or fail to draw it (a
``ValueError`` from the mathtext parser). Every plot the zoo draws is made under
``plain_text``, which turns that parsing off, and written in ``figure_format(path)``, so
that ``-o fig.svg`` holds SVG, never PNG bytes under another name."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from zoo.errors import InputError, printable

__all__ = ["FIGURE_FORMATS", "figure_format", "log_scale", "plain_text"]


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
