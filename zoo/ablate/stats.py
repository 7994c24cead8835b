"""Small-sample statistics for ablations: Student t intervals, paired differences,
family-wise corrections and the smallest effect a study can detect.

SciPy does the distributions (the ``ablate`` extra: ``pip install 'zoo-lm[ablate]'``);
it is imported on first use, so importing the zoo stays fast without it. An ablation
has a handful of seeds, and a mean of 3 losses needs Student's t, not the normal 1.96.

- ``t_cdf(t, df)``, ``t_quantile(p, df)``: Student's t and its inverse;
- ``mean_interval(values)``: the mean with its two-sided confidence interval;
- ``paired_difference(base, other)``: the mean of ``other[i] - base[i]`` with its
  interval and the two-sided p-value of "no difference" (a paired t test);
- ``paired_p_values(differences)``: the same p-values for arrays of studies at once;
- ``adjust_p(p_values, method)``: Holm (default), Bonferroni, Benjamini-Hochberg or
  none over the tests of one study, so that many swaps tested at once do not mark
  one by luck;
- ``detectable_difference(sd, n)``: the smallest paired difference a study with ``n``
  seeds detects with 80% power; ``seeds_needed(sd, delta)``: the seeds a difference needs.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from zoo.errors import ConfigError, InputError

if TYPE_CHECKING:
    import numpy as np
    import numpy.typing as npt

#: The family-wise corrections ``adjust_p`` knows: Holm's step-down (the default: it
#: controls the chance of any false mark, like Bonferroni, and is never less powerful),
#: Bonferroni, Benjamini-Hochberg (controls the false discovery rate instead), none.
CORRECTIONS: tuple[str, ...] = ("holm", "bonferroni", "bh", "none")
DEFAULT_CORRECTION = "holm"
#: The power at which ``detectable_difference`` states the noise floor.
POWER = 0.8

_INSTALL_HINT = "pip install 'zoo-lm[ablate]' (or scipy alone)"


def _module(name: str) -> Any:
    """``numpy``, ``scipy.stats``, ...: imported on first use, with an install hint if absent."""
    try:
        return importlib.import_module(name)
    except ImportError as err:
        raise ConfigError(
            f"the ablation's statistics need {name.split('.')[0]!r}, which is not installed; {_INSTALL_HINT}"
        ) from err


def require() -> None:
    """The error ``_module`` would give at the end of a study, given before its first run:
    the statistics need NumPy and SciPy."""
    for name in ("numpy", "scipy.stats"):
        _module(name)


def _check_df(df: float) -> None:
    if isinstance(df, bool) or not isinstance(df, (int, float)) or not df > 0:
        raise InputError(f"degrees of freedom must be a number > 0, got {df!r}")


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with ``df`` degrees of freedom."""
    _check_df(df)
    return float(_module("scipy.stats").t.cdf(t, df))


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (``t_quantile(0.975, 4) == 2.776...``)."""
    _check_df(df)
    if not 0.0 < p < 1.0:
        raise InputError(f"a quantile needs 0 < p < 1, got p={p}")
    return float(_module("scipy.stats").t.ppf(p, df))


@dataclass(frozen=True)
class Interval:
    """A mean and its two-sided confidence interval from ``n`` values.

    With fewer than two values there is no interval: ``half_width``, ``low``,
    ``high``, ``sd`` and ``p_value`` are None and ``significant`` is False.
    ``p_value`` is the two-sided p-value of "the true mean is 0" (meaningful for
    differences); ``significant`` says the interval excludes 0. ``sd`` is the values'
    standard deviation (n - 1), the spread power is computed from. ``p_adjusted`` is
    ``p_value`` after a family-wise correction over a study's tests (None until a study
    sets it, see ``adjust_p``).
    """

    mean: float
    half_width: float | None
    n: int
    level: float
    p_value: float | None
    sd: float | None = None
    p_adjusted: float | None = None

    @property
    def low(self) -> float | None:
        return None if self.half_width is None else self.mean - self.half_width

    @property
    def high(self) -> float | None:
        return None if self.half_width is None else self.mean + self.half_width

    @property
    def significant(self) -> bool:
        low, high = self.low, self.high
        return low is not None and high is not None and (low > 0.0 or high < 0.0)

    def to_dict(self) -> dict[str, Any]:
        return {
            "mean": self.mean,
            "half_width": self.half_width,
            "low": self.low,
            "high": self.high,
            "n": self.n,
            "level": self.level,
            "sd": self.sd,
            "p_value": self.p_value,
            "p_adjusted": self.p_adjusted,
            "significant": self.significant,
        }

    def format(self, digits: int = 3, *, sign: bool = False) -> str:
        """``"4.123 ± 0.020"`` (``"+0.051 ± 0.012"`` with ``sign``); just the mean without an interval."""
        mean = f"{self.mean:+.{digits}f}" if sign else f"{self.mean:.{digits}f}"
        return mean if self.half_width is None else f"{mean} ± {self.half_width:.{digits}f}"


def mean_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """The mean of ``values`` with its Student t confidence interval at ``level``."""
    if not 0.0 < level < 1.0:
        raise InputError(f"a confidence level must be between 0 and 1, got {level}")
    n = len(values)
    if n == 0:
        raise InputError("no values: an interval needs at least one value (two for its width)")
    if not all(math.isfinite(v) for v in values):
        raise InputError(f"the values must be finite numbers, got {list(values)}")
    mean = math.fsum(values) / n
    if n < 2:
        return Interval(mean, None, n, level, None)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t_quantile(0.5 + level / 2.0, n - 1) * sd / math.sqrt(n)
    p = float(paired_p_values(_module("numpy").asarray(values, dtype=float)))
    return Interval(mean, half, n, level, p, sd)


def paired_difference(base: Sequence[float], other: Sequence[float], level: float = 0.95) -> Interval:
    """``other - base`` over matching pairs (the same seed): its mean, interval and p-value.

    Pairing removes what the two share (a seed's lucky init or data order), so the
    interval is usually far narrower than the two separate intervals suggest.
    """
    if len(base) != len(other):
        raise InputError(f"paired values need the same count: {len(base)} base values, {len(other)} others")
    return mean_interval([o - b for b, o in zip(base, other)], level)


def welch_difference(first: Interval, second: Interval, level: float = 0.95) -> Interval:
    """``second - first`` for two independent samples, each given by its interval (mean, sd,
    n): Welch's unequal-variance t test and interval, as ``scipy.stats.ttest_ind(...,
    equal_var=False)``. Without a spread on either side (one value): no interval, no p."""
    diff = second.mean - first.mean
    n = first.n + second.n
    if first.sd is None or second.sd is None or first.n < 2 or second.n < 2:
        return Interval(diff, None, n, level, None)
    v1, v2 = first.sd**2 / first.n, second.sd**2 / second.n
    se = math.sqrt(v1 + v2)
    if se == 0.0:  # both without spread: a difference is certain, none is none
        return Interval(diff, 0.0, n, level, 1.0 if diff == 0.0 else 0.0)
    df = (v1 + v2) ** 2 / (v1**2 / (first.n - 1) + v2**2 / (second.n - 1))
    p = min(1.0, 2.0 * t_cdf(-abs(diff) / se, df))
    return Interval(diff, t_quantile(0.5 + level / 2.0, df) * se, n, level, p)


def paired_p_values(differences: npt.ArrayLike, axis: int = -1) -> np.ndarray:
    """Two-sided p-values of "the mean is 0" over ``axis`` (a paired t test of the
    differences), for any number of studies at once.

    Differences that are all equal have no spread: p is 1 when they are 0, else 0
    (SciPy would return NaN). Fewer than two values along ``axis`` is an error.
    """
    np = _module("numpy")
    d = np.asarray(differences, dtype=float)
    n = d.shape[axis] if d.ndim else 0
    if n < 2:
        raise InputError(f"a paired t test needs at least two differences along axis {axis}, got {n}")
    mean = d.mean(axis=axis)
    se = d.std(axis=axis, ddof=1) / math.sqrt(n)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.abs(mean) / se
    p = 2.0 * _module("scipy.stats").t.sf(t, n - 1)
    p = np.where(se == 0.0, np.where(mean == 0.0, 1.0, 0.0), p)
    return cast("npt.NDArray[Any]", np.clip(p, 0.0, 1.0))


def check_correction(method: str) -> str:
    """``method`` if it is one of ``CORRECTIONS``, else a ConfigError that lists them."""
    if method not in CORRECTIONS:
        raise ConfigError(f"unknown correction {method!r}; use one of {', '.join(CORRECTIONS)} (--correction)")
    return method


def adjust_p(p_values: npt.ArrayLike, method: str = DEFAULT_CORRECTION, axis: int = -1) -> np.ndarray:
    """The p-values along ``axis`` (the tests of one study) adjusted for testing them
    together: a test is significant at level α when its adjusted p is below α.

    ``"holm"``: Holm's step-down, p_(i) × (m - i + 1) made monotone; ``"bonferroni"``:
    p × m; ``"bh"``: Benjamini-Hochberg's false discovery rate; ``"none"``: p itself.
    All are capped at 1; the same values as ``statsmodels.stats.multitest.multipletests``
    (``holm``, ``bonferroni``, ``fdr_bh``). Vectorised over the other axes (studies).
    """
    np = _module("numpy")
    check_correction(method)
    p = np.moveaxis(np.array(p_values, dtype=float, ndmin=1), axis, -1)
    if np.isnan(p).any() or (p < 0).any() or (p > 1).any():
        raise InputError("p-values must lie within [0, 1]; drop tests without a p-value before adjusting")
    m = p.shape[-1]
    if method == "none" or m == 0:
        adjusted = p
    elif method == "bonferroni":
        adjusted = np.minimum(1.0, p * m)
    elif method == "holm":
        order = np.argsort(p, axis=-1, kind="stable")
        ranked = np.take_along_axis(p, order, axis=-1) * (m - np.arange(m))
        stepped = np.minimum(1.0, np.maximum.accumulate(ranked, axis=-1))
        adjusted = np.empty_like(stepped)
        np.put_along_axis(adjusted, order, stepped, axis=-1)
    else:
        adjusted = _module("scipy.stats").false_discovery_control(p, axis=-1, method="bh")
    return cast("npt.NDArray[Any]", np.moveaxis(adjusted, -1, axis))


def adjust_optional(p_values: Sequence[float | None], method: str = DEFAULT_CORRECTION) -> list[float | None]:
    """``adjust_p`` over the tests that have a p-value; a None (one seed) stays None
    and does not count as a test."""
    given = [p for p in p_values if p is not None]
    out = iter(adjust_p(given, method).tolist() if given else [])
    return [None if p is None else next(out) for p in p_values]


def paired_power(effect: float, n: int, alpha: float = 0.05) -> float:
    """Power of a two-sided one-sample (paired) t test with ``n`` values at standardised
    effect ``effect`` (mean / sd): both tails of the noncentral t."""
    st = _module("scipy.stats")
    df = n - 1
    crit = st.t.isf(alpha / 2.0, df)
    nc = effect * math.sqrt(n)
    lower = float(st.nct.sf(crit, df, -nc))  # P(T' < -crit), by symmetry; SciPy's cdf there can be NaN
    return float(st.nct.sf(crit, df, nc)) + (0.0 if math.isnan(lower) else lower)


def _check_power_args(n: int, alpha: float, power: float) -> None:
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise InputError(f"a paired t test needs n >= 2 pairs (--seeds 2 or more), got {n!r}")
    if not 0.0 < alpha < 1.0 or not alpha < power < 1.0:
        raise InputError(f"need 0 < alpha < power < 1, got alpha={alpha}, power={power}")


def detectable_effect(n: int, *, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest standardised effect (mean difference / sd of the differences) that a
    two-sided paired t test with ``n`` pairs detects with probability ``power`` at level
    ``alpha`` (statsmodels' ``TTestPower().solve_power``)."""
    _check_power_args(n, alpha, power)
    optimize = _module("scipy.optimize")
    high = 1.0
    while paired_power(high, n, alpha) < power:  # n = 2 at alpha / 9 needs effects near 100
        high *= 2.0
    return float(optimize.brentq(lambda e: paired_power(e, n, alpha) - power, 0.0, high, xtol=1e-10, rtol=1e-12))


def detectable_difference(sd: float, n: int, *, alpha: float = 0.05, power: float = POWER) -> float:
    """The smallest paired difference (in the units of ``sd``, the spread of the paired
    differences) that ``n`` seeds detect with probability ``power``: a study's noise floor."""
    if not math.isfinite(sd) or sd < 0:
        raise InputError(f"a spread must be a finite number >= 0, got {sd!r}")
    return sd * detectable_effect(n, alpha=alpha, power=power)


def seeds_needed(
    sd: float, delta: float, *, alpha: float = 0.05, power: float = POWER, limit: int = 1000
) -> int | None:
    """The fewest seeds whose paired t test detects ``delta`` with probability ``power``
    given the spread ``sd``; None if more than ``limit`` (or ``delta`` is 0)."""
    if delta == 0 or not math.isfinite(delta) or not math.isfinite(sd) or sd < 0:
        return None
    if sd == 0:
        return 2
    effect = abs(delta) / sd
    low, high = 2, 2
    while paired_power(effect, high, alpha) < power:  # power grows with n: double, then bisect
        if high >= limit:
            return None
        low, high = high, min(limit, high * 2)
    while low < high:
        mid = (low + high) // 2
        if paired_power(effect, mid, alpha) >= power:
            high = mid
        else:
            low = mid + 1
    return high


__all__ = [
    "CORRECTIONS",
    "DEFAULT_CORRECTION",
    "POWER",
    "Interval",
    "adjust_optional",
    "adjust_p",
    "check_correction",
    "detectable_difference",
    "detectable_effect",
    "mean_interval",
    "paired_difference",
    "paired_p_values",
    "paired_power",
    "seeds_needed",
    "t_cdf",
    "t_quantile",
]
