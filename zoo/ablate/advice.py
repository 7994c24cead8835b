"""What an ablation's numbers allow one to say, in words: the noise floor of its seeds,
what would resolve a row that is neither marked nor shown small, the caveats the table
cannot carry (docs/ablation.md's), and the next step. ``report.md`` and the CLI show them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from zoo.ablate.options import EDGE_EXTENSIONS
from zoo.ablate.results import ALPHA, MIN_EFFECT, AblationResult, AblationRun, md_code
from zoo.ablate.stats import POWER, Interval, seeds_needed
from zoo.ablate.tuning import sweep_edges

#: The corrections by name, as a sentence says them.
CORRECTION_NAMES = {
    "holm": "Holm's step-down correction",
    "bonferroni": "Bonferroni's correction",
    "bh": "the Benjamini-Hochberg false discovery rate",
    "none": "no correction",
}
#: Past this many seeds, a suggestion to add seeds is no suggestion: the Δ is below the floor.
SEED_LIMIT = 1000


@dataclass(frozen=True)
class Unclear:
    """A row without a mark whose Δ the seeds could not tell from 0: ``seeds`` would detect a
    difference of its size with 80% power at the corrected level (None: more than ``SEED_LIMIT``)."""

    run: AblationRun
    seeds: int | None


def corrected_alpha(result: AblationResult) -> float:
    """The level a test needs to pass at worst: Holm's first step and Bonferroni divide by the tests."""
    return ALPHA / max(1, result.tests) if result.correction in ("holm", "bonferroni") else ALPHA


def unclear_rows(result: AblationResult) -> list[Unclear]:
    """The unmarked swaps and target (in table order) with a spread to compute power from and a
    difference that is not float rounding (``MIN_EFFECT``)."""
    rows = []
    for run in result.rows():
        delta = run.tested
        if run.axis in ("base", "control") or run.significant or delta.sd is None or delta.n < 2:
            continue
        if abs(delta.mean) < MIN_EFFECT:
            continue
        rows.append(Unclear(run, seeds_needed(delta.sd, delta.mean, alpha=corrected_alpha(result), limit=SEED_LIMIT)))
    return rows


def floor_sentence(result: AblationResult) -> str | None:
    """``"effects smaller than 0.012 nats/token cannot be seen with 3 seeds ..."``; None with one seed."""
    floor, n = result.noise_floor(), len(result.seeds)
    if floor is None:
        return None
    corrected = result.noise_floor(corrected=True)
    after = (
        f"; at the level {CORRECTION_NAMES[result.correction]} needs over {result.tests} tests, {corrected:.4f}"
        if corrected is not None and corrected > floor
        else ""
    )
    return (
        f"effects smaller than {floor:.4f} nats/token cannot be seen with {n} seeds "
        f"({POWER:.0%} power, two-sided α = {ALPHA:.2g}, from the spread of the paired differences{after})"
        + _dominant(result)
    )


def _dominant(result: AblationResult) -> str:
    """``"; one row sets it: ..."`` when one swap's spread outweighs the others' together."""
    widest = result.dominant_spread()
    if widest is None:
        return ""
    others = max(run.tested.sd or 0.0 for run in result.swaps if run is not widest and run.tested.sd is not None)
    floor, corrected = (result.noise_floor(corrected=c, without=widest.name) for c in (False, True))
    if floor is None or corrected is None:
        return ""
    return (
        f"; one row sets it: {md_code(widest.name)}'s paired differences spread by {widest.tested.sd:.4f} over the seeds, "
        f"the other rows' by at most {others:.4f}; without that row the floor is {floor:.4f}"
        + (f", {corrected:.4f} after correction" if corrected > floor else "")
    )


def control_sentence(control: AblationRun) -> str:
    """What the control row shows, and only that: how far the base lands from itself under
    other seeds. Its seeds share nothing with the base's, so its test is unpaired in effect
    and says nothing about whether the swaps' paired intervals are calibrated."""
    d = control.delta_vs_base
    what = (
        "marked after correction: two sets of seeds of one design landed this far apart, which chance alone "
        f"does at most {ALPHA:.0%} of the time"
        if control.significant
        else "not marked after correction: this table does not show the two sets of seeds of one design apart"
    )
    return (
        f"The control (the base again, other seeds): Δ {d.format(4, sign=True)}, the spread of the base over "
        f"seeds; {what}. It is not a check of the swaps' paired intervals, whose seeds the base shares."
    )


def noise_section(result: AblationResult) -> list[str]:
    """``## Noise floor``: the smallest visible effect, the control, and the unclear rows."""
    lines = ["## Noise floor", ""]
    sentence = floor_sentence(result)
    if sentence is None:
        return lines + ["One seed: no spread, so no floor and no marks; use `--seeds 3` or more.", ""]
    lines += [sentence[0].upper() + sentence[1:] + ".", ""]
    control = result.control
    if control is not None and control.delta_vs_base.p_value is not None:
        lines += [control_sentence(control), ""]
    unclear = unclear_rows(result)
    if unclear:
        steps = result.settings.steps
        lines += ["Rows without a mark, and what would resolve them:", ""]
        for row in unclear:
            d = row.run.tested
            what = (
                f"about {row.seeds} seeds would detect a difference of this size ({POWER:.0%} power, after "
                f"correction): `--seeds {row.seeds}`; or train longer (`--steps {2 * steps}`), where effects "
                "often grow"
                if row.seeds is not None
                else f"more than {SEED_LIMIT} seeds would be needed: no effect worth the name at this scale"
            )
            lines.append(f"- {md_code(row.run.name)} (Δ {d.format(4, sign=True)}): {what}.")
        lines.append("")
    rounding = [
        run.name for run in result.rows() if run.axis not in ("base", "control") and abs(run.tested.mean) < MIN_EFFECT
    ]
    if rounding:
        names = ", ".join(md_code(name) for name in rounding)
        lines += [f"{names}: |Δ| < {MIN_EFFECT:g}, float rounding: the same loss computed another way.", ""]
    return lines


def edge_sentence(run: AblationRun, name: str) -> str:
    """``"NAME's best rate sits on the edge of its sweep ...: widen --lr-grid"``, for a run whose
    tuned rate is the lowest or highest its sweep trained (``AblationRun.on_edge``); ``name``
    as the caller shows it (``md_code`` in markdown)."""
    sides = " and ".join("lowest" if side == "low" else "highest" for side in sweep_edges(run.tune))
    rates = ", ".join(f"{t.lr:g}" for t in run.tune if not t.full)
    return (
        f"{name}'s best rate sits on the edge of its sweep: {run.lr:g} is the {sides} of the rates it trained "
        f"({rates}, {EDGE_EXTENSIONS} past each edge at most), so its best may lie beyond: widen --lr-grid"
    )


def caveats_section(result: AblationResult) -> list[str]:
    """``## Caveats``: what the numbers do not fix (docs/ablation.md), for this study."""
    s, n, m = result.settings, len(result.seeds), result.tests
    chance = 1 - (1 - ALPHA) ** m
    lines = [
        "## Caveats",
        "",
        f'- **Few seeds, low power.** {n} seed{"s" if n != 1 else ""}: a row without `*` is "not shown to '
        'matter at this scale", not "shown not to matter" (see the noise floor).',
        (
            f"- **Many comparisons.** {m} tests at once; {CORRECTION_NAMES[result.correction]} keeps the chance of "
            f"any false mark near {ALPHA:.0%}"
            + (" (of false marks among the marked, for Benjamini-Hochberg)." if result.correction == "bh" else ".")
            if result.correction != "none"
            else f"- **Many comparisons, uncorrected.** {m} tests at {ALPHA:.0%} each: about a {chance:.0%} chance "
            "that one is marked by luck when none matters (`--correction holm`)."
        ),
        (
            f"- **One scale.** d_model {result.scale['d_model']}, {result.scale['layers']} layers, {s.steps} steps: "
            "an effect can shrink, grow or flip at scale (`--scales`)."
        ),
    ]
    if result.tuning:
        lines.append(
            "- **Learning rates from a short sweep**, which favours large rates: a rate best for "
            f"{result.tuning['fraction']:g} of the budget can be worse over all of it (`--lr-sweep`)."
        )
    else:
        lines.append(
            f"- **One learning rate** ({s.lr:g}) for every design favours the one it suits; post-norm and "
            "pre-norm differ most (`--lr-sweep`)."
        )
    for run in result.runs:
        if run.on_edge:
            lines.append(f"- **A rate on the edge.** {edge_sentence(run, md_code(run.name))}.")
    if len({run.train_flops for run in result.runs}) > 1:
        lines.append("- **Compute differs** between variants (train FLOPs): a gain may be bought with compute.")
    return [*lines, ""]


def next_step(result: AblationResult) -> str:
    """The one thing to do next, by what the study lacks most."""
    unclear = [row for row in unclear_rows(result) if row.seeds is not None]
    if result.under_trained:
        rate = (
            "each variant at its own rate (`--tune-lr`)"
            if not result.tuning
            else "a wider `--lr-grid` (a tuned rate sits on the edge of its sweep)"
            if result.on_edge
            else "a longer sweep (`--tune-fraction`)"
        )
        return (
            f"train until the base and target beat the bigram reference ({', '.join(map(md_code, result.under_trained))} do not): "
            f"more steps (`--steps`), {rate}, or more text (`--data`)"
        )
    if result.on_edge:
        return edge_sentence(result.run(result.on_edge[0]), md_code(result.on_edge[0])) + (
            f" (and {len(result.on_edge) - 1} more variants)" if len(result.on_edge) > 1 else ""
        )
    if len(result.seeds) < 2:
        return "train `--seeds 3` or more: one seed has no interval"
    closest = min(unclear, key=lambda row: row.seeds or 0, default=None)
    if closest is not None and (closest.seeds or 0) <= max(8, 2 * len(result.seeds)):
        return (
            f"`--seeds {closest.seeds}` should resolve the closest unclear row ({md_code(closest.run.name)}); "
            "finished seeds are reused"
        )
    return (
        "see whether the marked effects hold with size: `--scales` (e.g. 64x2,128x4,192x6) with "
        "`--tokens-per-param`, and whether they hold at their best rate: `--lr-sweep`"
    )


def next_step_section(result: AblationResult) -> list[str]:
    return ["## Next step", "", next_step(result)[0].upper() + next_step(result)[1:] + ".", ""]


#: How an effect moves along a scale ladder (``trend``).
TRENDS = ("grows", "shrinks", "flips", "not shown after correction", "flat within noise")


def _shown(delta: Interval) -> bool:
    """Significant after the correction in use (its adjusted p below ``ALPHA``) and not float rounding."""
    return delta.p_adjusted is not None and delta.p_adjusted < ALPHA and abs(delta.mean) >= MIN_EFFECT


def trend(deltas: Sequence[Interval], change: Interval | None = None) -> str:
    """How a row's Δ moves from the first rung to the last, from corrected results only.

    ``deltas``: its Δ vs base at each rung (``p_adjusted`` corrected within the rung's cell);
    ``change``: the last rung's Δ minus the first's (``StudyResult.trends``: Welch's test,
    ``p_adjusted`` corrected over every row's cross-rung test). ``"flips"``: both ends are
    significant after their cell's correction, on opposite sides of 0. ``"grows"`` /
    ``"shrinks"``: the change is significant after its correction, and the last |Δ| is larger
    / smaller than the first. ``"not shown after correction"``: either of these holds before
    correction (raw p) but not after (a change below ``MIN_EFFECT`` never counts). ``"flat within noise"``: neither holds even before.
    ``"unknown"`` without intervals (one seed)."""
    if len(deltas) < 2 or any(d.half_width is None for d in deltas):
        return "unknown"
    first, last = deltas[0], deltas[-1]
    opposite = first.mean * last.mean < 0
    if opposite and _shown(first) and _shown(last):
        return "flips"
    if change is not None and _shown(change):
        return "grows" if abs(last.mean) > abs(first.mean) else "shrinks"
    raw_flip = opposite and first.significant and last.significant
    raw_change = (
        change is not None and change.p_value is not None and change.p_value < ALPHA and abs(change.mean) >= MIN_EFFECT
    )
    return "not shown after correction" if raw_flip or raw_change else "flat within noise"
