"""Small-sample statistics for ablations: Student t intervals and paired differences.

Written out here (the regularised incomplete beta function, a bisection for the t
quantile) so the zoo needs no SciPy: an ablation has a handful of seeds, and a mean
of 3 losses needs Student's t, not the normal 1.96.

- ``t_cdf(t, df)``: P(T <= t) for Student's t with ``df`` degrees of freedom;
- ``t_quantile(p, df)``: its inverse (``t_quantile(0.975, 4) == 2.776...``);
- ``mean_interval(values)``: the mean with its two-sided confidence interval;
- ``paired_difference(base, other)``: the mean of ``other[i] - base[i]`` with its
  interval and the two-sided p-value of "no difference" (a paired t test).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from zoo.errors import InputError

_EPS = 1e-15


def _beta_fraction(x: float, a: float, b: float) -> float:
    """The continued fraction of the incomplete beta function (modified Lentz)."""
    tiny = 1e-300
    qab, qap, qam = a + b, a + 1.0, a - 1.0
    c, d = 1.0, 1.0 - qab * x / qap
    d = 1.0 / (d if abs(d) > tiny else tiny)
    h = d
    for m in range(1, 400):
        m2 = 2 * m
        for aa in (m * (b - m) * x / ((qam + m2) * (a + m2)), -(a + m) * (qab + m) * x / ((a + m2) * (qap + m2))):
            d = 1.0 + aa * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + aa / c
            c = c if abs(c) > tiny else tiny
            h *= d * c
        if abs(d * c - 1.0) < _EPS:
            break
    return h


def incomplete_beta(x: float, a: float, b: float) -> float:
    """The regularised incomplete beta function I_x(a, b), for 0 <= x <= 1 and a, b > 0."""
    if not 0.0 <= x <= 1.0:
        raise InputError(f"incomplete_beta needs 0 <= x <= 1, got x={x}")
    if x in (0.0, 1.0):
        return x
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):  # the fraction converges fast on this side
        return math.exp(log_front) * _beta_fraction(x, a, b) / a
    return 1.0 - math.exp(log_front) * _beta_fraction(1.0 - x, b, a) / b


def _check_df(df: float) -> None:
    if isinstance(df, bool) or not isinstance(df, (int, float)) or not df > 0:
        raise InputError(f"degrees of freedom must be a number > 0, got {df!r}")


def t_cdf(t: float, df: float) -> float:
    """P(T <= t) for Student's t distribution with ``df`` degrees of freedom."""
    _check_df(df)
    if math.isinf(t):
        return 1.0 if t > 0 else 0.0
    tail = 0.5 * incomplete_beta(df / (df + t * t), df / 2.0, 0.5)  # P(T > |t|)
    return 1.0 - tail if t > 0 else tail


def t_quantile(p: float, df: float) -> float:
    """The ``p`` quantile of Student's t with ``df`` degrees of freedom (bisection on ``t_cdf``)."""
    _check_df(df)
    if not 0.0 < p < 1.0:
        raise InputError(f"a quantile needs 0 < p < 1, got p={p}")
    if p < 0.5:
        return -t_quantile(1.0 - p, df)
    low, high = 0.0, 1.0
    while t_cdf(high, df) < p:  # bracket: the tails of df=1 are heavy (t_0.9995,1 = 636.6)
        low, high = high, high * 2.0
    for _ in range(200):
        mid = 0.5 * (low + high)
        if t_cdf(mid, df) < p:
            low = mid
        else:
            high = mid
        if high - low <= 1e-12 * max(1.0, high):
            break
    return 0.5 * (low + high)


@dataclass(frozen=True)
class Interval:
    """A mean and its two-sided confidence interval from ``n`` values.

    With fewer than two values there is no interval: ``half_width``, ``low``,
    ``high`` and ``p_value`` are None and ``significant`` is False.
    ``p_value`` is the two-sided p-value of "the true mean is 0" (meaningful for
    differences); ``significant`` says the interval excludes 0.
    """

    mean: float
    half_width: float | None
    n: int
    level: float
    p_value: float | None

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
            "p_value": self.p_value,
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
    se = sd / math.sqrt(n)
    half = t_quantile(0.5 + level / 2.0, n - 1) * se
    if se == 0.0:
        p = 1.0 if mean == 0.0 else 0.0
    else:
        p = 2.0 * (1.0 - t_cdf(abs(mean) / se, n - 1))
    return Interval(mean, half, n, level, min(1.0, max(0.0, p)))


def paired_difference(base: Sequence[float], other: Sequence[float], level: float = 0.95) -> Interval:
    """``other - base`` over matching pairs (the same seed): its mean, interval and p-value.

    Pairing removes what the two share (a seed's lucky init or data order), so the
    interval is usually far narrower than the two separate intervals suggest.
    """
    if len(base) != len(other):
        raise InputError(f"paired values need the same count: {len(base)} base values, {len(other)} others")
    return mean_interval([o - b for b, o in zip(base, other)], level)


__all__ = ["Interval", "incomplete_beta", "mean_interval", "paired_difference", "t_cdf", "t_quantile"]
