"""zoo.ablate.stats against known values: Student t quantiles from the printed table, the
t distribution where it has a closed form, and intervals worked out by hand."""

from __future__ import annotations

import math

import pytest

import zoo
from zoo.ablate.stats import mean_interval, paired_difference, t_cdf, t_quantile


@pytest.mark.parametrize(
    ("df", "expected"),
    [(1, 12.706), (2, 4.303), (3, 3.182), (4, 2.776), (5, 2.571), (9, 2.262), (10, 2.228), (29, 2.045), (120, 1.980)],
)
def test_t_quantile_matches_the_table(df: int, expected: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4)
    assert t_quantile(0.025, df) == pytest.approx(-expected, abs=5e-4)


@pytest.mark.parametrize(
    ("p", "df", "expected"), [(0.95, 1, 6.314), (0.995, 4, 4.604), (0.9995, 1, 636.619), (0.9, 29, 1.311)]
)
def test_other_quantiles(p: float, df: int, expected: float) -> None:
    assert t_quantile(p, df) == pytest.approx(expected, abs=1e-3)


def test_t_cdf_closed_forms() -> None:
    # df=1 is the Cauchy distribution: F(t) = 1/2 + atan(t)/pi; df=2: 1/2 + t / (2 sqrt(2 + t^2)).
    for t in (-30.0, -2.5, -0.3, 0.0, 0.7, 4.0, 100.0):
        assert t_cdf(t, 1) == pytest.approx(0.5 + math.atan(t) / math.pi, abs=1e-12)
        assert t_cdf(t, 2) == pytest.approx(0.5 + t / (2 * math.sqrt(2 + t * t)), abs=1e-12)
    assert t_cdf(math.inf, 3) == 1.0 and t_cdf(-math.inf, 3) == 0.0
    assert t_cdf(1.96, 100_000) == pytest.approx(0.975, abs=1e-4)  # tends to the normal


def test_mean_interval_by_hand() -> None:
    # 1, 2, 3: mean 2, sd 1, se 1/sqrt(3), t_0.975,2 = 4.302653
    ci = mean_interval([1.0, 2.0, 3.0])
    assert ci.mean == 2.0 and ci.n == 3
    assert ci.half_width == pytest.approx(4.302653 / math.sqrt(3), rel=1e-6)
    assert (ci.low, ci.high) == pytest.approx((2.0 - 2.484138, 2.0 + 2.484138), abs=1e-6)
    assert ci.p_value == pytest.approx(0.074180, abs=1e-5)  # t = 2 sqrt(3) = 3.4641 on 2 df


def test_mean_interval_significance_follows_the_interval() -> None:
    assert not mean_interval([1.0, 2.0, 3.0]).significant  # 2 +- 2.484 includes 0
    assert mean_interval([1.0, 1.1, 1.2]).significant
    assert mean_interval([-1.0, -1.1, -1.2]).significant
    one = mean_interval([0.5])
    assert (one.half_width, one.low, one.high, one.p_value, one.significant) == (None, None, None, None, False)
    assert one.format() == "0.500"
    assert mean_interval([1.0, 1.0]).format(sign=True) == "+1.000 ± 0.000"


def test_paired_difference_by_hand() -> None:
    base = [4.20, 4.25, 4.18]
    other = [4.10, 4.20, 4.15]
    # differences -0.10, -0.05, -0.03: mean -0.06, sd sqrt(0.0013), se sqrt(0.0013 / 3)
    d = paired_difference(base, other)
    se = math.sqrt(0.0013 / 3)
    assert d.mean == pytest.approx(-0.06, abs=1e-12)
    assert d.half_width == pytest.approx(4.302653 * se, rel=1e-6)  # 0.089567
    assert d.half_width == pytest.approx(0.089567, abs=1e-6)
    assert d.p_value == pytest.approx(0.10224, abs=1e-4)  # t = 2.8823 on 2 df, two-sided
    assert not d.significant
    # The same losses unpaired would give a much wider interval: pairing is the point.
    assert d.half_width < mean_interval(other).half_width + mean_interval(base).half_width
    wide_but_consistent = paired_difference([4.0, 5.0, 6.0], [3.9, 4.91, 5.89])
    assert wide_but_consistent.significant and wide_but_consistent.high is not None and wide_but_consistent.high < 0


def test_bad_input_is_refused() -> None:
    with pytest.raises(zoo.InputError, match="0 < p < 1"):
        t_quantile(1.0, 3)
    with pytest.raises(zoo.InputError, match="degrees of freedom"):
        t_cdf(1.0, 0)
    with pytest.raises(zoo.InputError, match="at least one value"):
        mean_interval([])
    with pytest.raises(zoo.InputError, match="finite"):
        mean_interval([1.0, math.nan])
    with pytest.raises(zoo.InputError, match="same count"):
        paired_difference([1.0, 2.0], [1.0])
