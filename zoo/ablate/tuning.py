"""The learning-rate sweep's runs and its choices: the winner by successive halving, the
finalists, the edges a winner sits on, and the flat sweep that keeps the base's rate."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TuneRun:
    """One run of the learning-rate sweep, scored on the held-out tail of the training split;
    ``final_val_loss`` is None when it diverged. ``extended``: a rate past the grid's edge,
    trained because the best rate sat there. ``full``: a finalist's run for the whole budget."""

    lr: float
    final_val_loss: float | None
    extended: bool = False
    full: bool = False
    reseeded: bool = False  # the base's chosen rate again under another seed: the sweep's noise

    def to_dict(self) -> dict[str, Any]:
        return {
            "lr": self.lr,
            "final_val_loss": self.final_val_loss,
            "diverged": self.final_val_loss is None,
            "extended": self.extended,
            "full_length": self.full,
            "reseeded": self.reseeded,
        }


def best_tune(tune: list[TuneRun]) -> TuneRun | None:
    """The sweep's winner, by successive halving: the full-length run with the lowest loss
    when finalists trained, else the short run with the lowest (a diverged rate never wins);
    None when every rate diverged."""
    finished = [t for t in tune if t.final_val_loss is not None and not t.reseeded]
    full = [t for t in finished if t.full]
    return min(full or finished, key=lambda t: t.final_val_loss or 0.0, default=None)


def sweep_noise(tune: list[TuneRun]) -> float | None:
    """How far the base's full-length loss at its chosen rate moves with the seed alone:
    ``|loss(seed a) - loss(seed b)|``, from its ``reseeded`` run; None without one."""
    again = next((t for t in tune if t.reseeded and t.final_val_loss is not None), None)
    same = next((t for t in tune if again and t.full and not t.reseeded and t.lr == again.lr), None)
    if again is None or same is None or same.final_val_loss is None or again.final_val_loss is None:
        return None
    return abs(same.final_val_loss - again.final_val_loss)


def chosen_rate(tune: list[TuneRun], base_rate: float | None, noise: float | None) -> tuple[float | None, bool]:
    """``(rate, flat)``: the sweep's winner (``best_tune``), unless the sweep is flat, its
    full-length loss at the base's rate within the seed ``noise`` of its best. Then the
    rates differ by less than the seed does, the winner is picked by noise, and the base's
    rate is kept, so the row's Δ measures the design, not a rate chosen by chance."""
    best = best_tune(tune)
    if best is None:
        return None, False
    at_base = next((t for t in tune if t.full and not t.reseeded and t.lr == base_rate), None)
    if noise is None or at_base is None or at_base.final_val_loss is None or at_base is best:
        return best.lr, False
    flat = at_base.final_val_loss - (best.final_val_loss or 0.0) < noise
    return (at_base.lr, True) if flat else (best.lr, False)


def finalists(tune: list[TuneRun], count: int) -> list[float]:
    """The rates of the ``count`` best finished short runs: they train again for the full budget."""
    short = sorted(
        (t for t in tune if not t.full and not t.reseeded and t.final_val_loss is not None),
        key=lambda t: t.final_val_loss or 0.0,
    )
    return [t.lr for t in short[:count]]


def sweep_edges(tune: list[TuneRun]) -> list[str]:
    """The edges (``"low"``, ``"high"``) of the rates trained that the winner sits on. A
    diverged rate counts as trained: a winner just below a rate that diverged is not on the
    high edge, since the next rate up was tried and failed."""
    short = [t for t in tune if not t.full and not t.reseeded]
    best = best_tune(short)
    if best is None:
        return []
    rates = [t.lr for t in short]
    return [side for side, edge in (("low", min(rates)), ("high", max(rates))) if best.lr == edge]
