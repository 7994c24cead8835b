"""Scale as a slope: how a row's Δ vs base moves with the log of the model's size along a
ladder, tested over seeds, and how often a lower rung orders the rows as the top rung does
(its agreement, as DataDecide reports for data: Magnusson et al. 2025).

Both read per-seed losses only: ``deltas[rung][seed]`` is one row's loss minus the base's at
that rung and seed (the seed's number pairs them across rungs: same data order, no shared
model)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from zoo.ablate.stats import Interval, mean_interval

#: Bootstrap resamples of the seeds for an agreement's interval, and their generator's seed.
RESAMPLES = 2000
BOOTSTRAP_SEED = 0


def slope(sizes: Sequence[float], deltas: Sequence[Sequence[float]], level: float) -> Interval | None:
    """Per seed, the least-squares slope of Δ on ln(size) over the rungs; their mean with its
    Student t interval and p-value (H0: no slope). None with fewer than two rungs or sizes."""
    x = [math.log(s) for s in sizes]
    if len(x) < 2 or len(set(x)) < 2 or any(len(d) != len(deltas[0]) for d in deltas):
        return None
    mx = sum(x) / len(x)
    sxx = sum((v - mx) ** 2 for v in x)
    per_seed = []
    for i in range(len(deltas[0])):
        ys = [d[i] for d in deltas]
        my = sum(ys) / len(ys)
        per_seed.append(sum((a - mx) * (b - my) for a, b in zip(x, ys)) / sxx)
    return mean_interval(per_seed, level)


@dataclass(frozen=True)
class Agreement:
    """How often rung ``rung`` orders two rows as the top rung does (``share`` of the row
    pairs), with a bootstrap interval over seeds (``low``, ``high``)."""

    rung: str
    top: str
    share: float
    low: float
    high: float
    pairs: int
    level: float

    def to_dict(self) -> dict[str, Any]:
        return {
            "rung": self.rung,
            "top": self.top,
            "share": self.share,
            "low": self.low,
            "high": self.high,
            "pairs": self.pairs,
            "level": self.level,
            "resamples": RESAMPLES,
        }


def _share(lower: torch.Tensor, top: torch.Tensor) -> torch.Tensor:
    """Per resample, the share of row pairs ordered alike; ``lower``/``top``: (resamples, rows) means."""
    i, j = torch.triu_indices(top.shape[1], top.shape[1], offset=1)
    same = torch.sign(lower[:, i] - lower[:, j]) == torch.sign(top[:, i] - top[:, j])
    return same.double().mean(dim=1)


def agreement(rung: str, top_rung: str, lower: torch.Tensor, top: torch.Tensor, level: float) -> Agreement | None:
    """``lower``/``top``: (rows, seeds) Δ vs base at a lower rung and at the top rung, the rows
    in the same order. None with fewer than two rows."""
    rows, seeds = top.shape
    if rows < 2:
        return None
    share = float(_share(lower.mean(1, keepdim=True).T, top.mean(1, keepdim=True).T)[0])
    g = torch.Generator().manual_seed(BOOTSTRAP_SEED)
    pick = torch.randint(0, seeds, (RESAMPLES, seeds), generator=g)
    resampled = _share(lower[:, pick].mean(2).T, top[:, pick].mean(2).T)
    tail = (1 - level) / 2
    low, high = (float(q) for q in torch.quantile(resampled, torch.tensor([tail, 1 - tail], dtype=torch.float64)))
    return Agreement(rung, top_rung, share, low, high, rows * (rows - 1) // 2, level)
