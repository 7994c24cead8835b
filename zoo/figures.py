"""Figures whose text is plain text: matplotlib reads ``$...$`` in any label or title as
mathtext, so a run folder, a preset name or a ``--title`` holding a dollar sign would
change a plot or fail to draw it (a ``ValueError`` from the mathtext parser). Every plot
the zoo draws is made under ``plain_text``, which turns that parsing off."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["plain_text"]


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
