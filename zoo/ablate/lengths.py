"""Length extrapolation (Press et al. 2022, "Train Short, Test Long"): every compared run,
trained at ``--seq-len`` T, is evaluated again at multiples of T (``--eval-lengths``) on
the same tokens: at every length L it scores the last T targets of the same windows, with
L - T more tokens of context before them (``scored_tokens`` is the same at every length).
A length that scored other text would measure the text as well as the encoding.

A position encoding without a table (sinusoidal, rotary, ALiBi, none) is built with
``max_seq_len`` at the longest length, so it can run there; training at T is unchanged.
One with a table (learned) keeps its table at T, as GPT-2 trains it: the model refuses
positions past its table (``zoo.nn.inputs.context_limit``), so its longer lengths are
N/A, never an extended table and never a crash. Per variant the losses at each length
become intervals over the seeds, with two paired tests per longer length: the change
from the variant's own loss at T, and the difference to the base at that length.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch import nn
from torch.nn import functional as F

from zoo.ablate.stats import Interval, adjust_optional, mean_interval, paired_difference
from zoo.errors import ConfigError
from zoo.nn.config import ModelConfig, resolve_config
from zoo.nn.factory import build
from zoo.nn.inputs import context_limit
from zoo.nn.registry import Registry
from zoo.training import TokenSplit, TrainSettings, validation_batches


def lengths_of(seq_len: int, factors: list[int] | None) -> tuple[int, ...]:
    """The lengths every compared run is evaluated at: T, then each factor times T; none
    without ``factors``."""
    return (seq_len, *(f * seq_len for f in factors)) if factors else ()


def check_factors(factors: list[int] | None) -> str | None:
    """What is wrong with ``--eval-lengths``, or None."""
    if factors is None:
        return None
    bad = [f for f in factors if isinstance(f, bool) or not isinstance(f, int) or f < 2]
    if not factors or bad or len(set(factors)) != len(factors):
        return (
            f"eval_lengths={factors!r} must be distinct whole multiples of --seq-len of 2 or more "
            f"(--eval-lengths 2,4; the loss at --seq-len itself is always measured)"
        )
    return None


def table_limit(config: ModelConfig, registry: Registry) -> int | None:
    """The positions ``config``'s position encoding holds (a learned table's rows), or None
    for one without a table; read from the model's structure, built on the meta device."""
    model = build(config, device="meta", registry=registry)
    limit: int | None = model.position.max_positions
    return limit


def at_lengths(config: ModelConfig, longest: int, registry: Registry) -> tuple[ModelConfig, str | None]:
    """``config`` able to run ``longest`` tokens, and why its lengths past ``max_seq_len``
    are N/A: a table-free encoding gets ``max_seq_len=longest``; a table stays at its
    length (an extended table would hold rows no step trained)."""
    limit = table_limit(config, registry)
    if limit is None:
        return resolve_config(config, {"max_seq_len": longest}, registry=registry), None
    return config, f"{config.position.name} positions: no table past {min(limit, config.max_seq_len)} tokens"


def check_split(val: TokenSplit, longest: int) -> None:
    """Refuse, before anything trains, a validation split too short for the longest length."""
    if val.count(longest) == 0:
        raise ConfigError(
            f"--eval-lengths: the validation split holds {val.tokens:,} tokens, fewer than the {longest + 1:,} a "
            f"window of {longest:,} tokens needs; use smaller factors, a shorter --seq-len or more text "
            f"(--max-chars, --data)"
        )


def scored_tokens(settings: TrainSettings) -> int:
    """The targets every length scores: the last T of each of the validation windows."""
    return settings.eval_batches * settings.batch_size * settings.seq_len


@torch.no_grad()
def length_losses(
    model: nn.Module, val: TokenSplit, settings: TrainSettings, lengths: tuple[int, ...]
) -> dict[str, float | None]:
    """The model's mean loss at each length (by its decimal string, as JSON keys are) on the
    same targets: as many windows as training evaluates, evenly spaced for the longest
    length; at length L, each window's last L tokens as context and its last T targets
    scored (``scored_tokens``); run a T-sized batch's tokens at a time; None past the
    model's context (a table's end)."""
    limit = context_limit(model)  # type: ignore[arg-type]
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    found: dict[str, float | None] = {}
    t = settings.seq_len
    windows = torch.cat(
        [torch.cat([x, y[:, -1:]], 1) for x, y in validation_batches(val, replace(settings, seq_len=max(lengths)))]
    )
    try:
        for length in lengths:
            if length > limit:
                found[str(length)] = None
                continue
            chunk = max(1, settings.batch_size * t // length)
            total = 0.0
            for w in torch.split(windows[:, -(length + 1) :], chunk):
                logits = model(w[:, :-1].to(device))[:, -t:]
                total += float(
                    F.cross_entropy(logits.flatten(0, 1).float(), w[:, -t:].flatten().to(device), reduction="sum")
                )
            found[str(length)] = total / (windows.shape[0] * t)
    finally:
        model.train(was_training)
    return found


@dataclass(frozen=True)
class LengthCell:
    """One variant at one length: its loss over the seeds (None: N/A), and past T the
    change from its own loss at T and the difference to the base's, both paired over seeds."""

    length: int
    loss: Interval | None
    growth: Interval | None = None
    delta_vs_base: Interval | None = None

    def to_dict(self, seq_len: int) -> dict[str, Any]:
        return {
            "length": self.length,
            "factor": self.length // seq_len,
            "loss": None if self.loss is None else self.loss.to_dict(),
            "vs_train_length": None if self.growth is None else self.growth.to_dict(),
            "delta_vs_base": None if self.delta_vs_base is None else self.delta_vs_base.to_dict(),
        }


@dataclass(frozen=True)
class Extrapolation:
    """A variant's losses at every evaluated length; ``refused`` says why its lengths past
    T are N/A (a learned table), None when it ran at all of them."""

    cells: list[LengthCell]
    refused: str | None
    scored_tokens: int | None = None  # the targets each length scored, the same at every one

    def cell(self, length: int) -> LengthCell:
        return next(c for c in self.cells if c.length == length)

    def to_dict(self, seq_len: int) -> dict[str, Any]:
        return {
            "refused": self.refused,
            "lengths": [{**c.to_dict(seq_len), "scored_tokens": self.scored_tokens} for c in self.cells],
        }


def _losses(per_seed: list[dict[int, float | None]], length: int) -> list[float] | None:
    values = [seed.get(length) for seed in per_seed]
    return None if any(v is None for v in values) else [float(v) for v in values if v is not None]


def extrapolation(
    per_seed: list[dict[int, float | None]],
    base: list[dict[int, float | None]] | None,
    lengths: tuple[int, ...],
    refused: str | None,
    level: float,
) -> Extrapolation:
    """A variant's ``Extrapolation`` from its seeds' losses by length (``base``: the base's,
    paired seed by seed; None for the base itself). Uncorrected: see ``correct_lengths``."""
    trained = _losses(per_seed, lengths[0])
    cells = []
    for length in lengths:
        losses = _losses(per_seed, length)
        if losses is None:
            cells.append(LengthCell(length, None))
            continue
        growth = paired_difference(trained, losses, level) if trained is not None and length != lengths[0] else None
        theirs = _losses(base, length) if base is not None else None
        delta = paired_difference(theirs, losses, level) if theirs is not None and length != lengths[0] else None
        cells.append(LengthCell(length, mean_interval(losses, level), growth, delta))
    return Extrapolation(cells, refused)


def correct_lengths(variants: list[Extrapolation], method: str) -> list[Extrapolation]:
    """``variants`` with every test's ``p_adjusted`` set by ``method``: one family for the
    changes from T (every variant, every longer length), one for the differences to the base."""
    cells = [cell for v in variants for cell in v.cells]
    growth = iter(adjust_optional([c.growth.p_value if c.growth else None for c in cells], method))
    delta = iter(adjust_optional([c.delta_vs_base.p_value if c.delta_vs_base else None for c in cells], method))
    adjusted = []
    for v in variants:
        new = []
        for c in v.cells:
            g, d = next(growth), next(delta)
            new.append(
                replace(
                    c,
                    growth=None if c.growth is None else replace(c.growth, p_adjusted=g),
                    delta_vs_base=None if c.delta_vs_base is None else replace(c.delta_vs_base, p_adjusted=d),
                )
            )
        adjusted.append(replace(v, cells=new))
    return adjusted
