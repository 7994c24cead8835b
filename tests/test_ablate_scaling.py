"""Scale as a slope (``zoo.ablate.scaling``): per seed, the least-squares slope of Δ on
ln(parameters) equals scipy's, tested over seeds; a lower rung's agreement with the top rung
is the share of row pairs it orders alike, with a bootstrap interval over seeds."""

from __future__ import annotations

import math

import pytest
import torch
from scipy import stats

from zoo.ablate.scaling import agreement, slope


def test_the_slope_is_each_seeds_least_squares_slope_on_log_parameters_tested_over_seeds() -> None:
    sizes = [25_000, 100_000, 330_000, 790_000]
    deltas = [[0.10, 0.12, 0.08], [0.05, 0.09, 0.04], [0.02, 0.01, 0.03], [-0.01, 0.0, -0.02]]
    found = slope(sizes, deltas, 0.95)
    assert found is not None
    by_scipy = [stats.linregress([math.log(s) for s in sizes], [d[i] for d in deltas]).slope for i in range(3)]
    assert found.mean == pytest.approx(sum(by_scipy) / 3)
    assert found.p_value == pytest.approx(stats.ttest_1samp(by_scipy, 0.0).pvalue)
    assert found.high is not None and found.high < 0  # the effect shrinks with size in every seed
    flat = slope(sizes, [[0.05, -0.05, 0.0]] * 4, 0.95)
    assert flat is not None and flat.mean == pytest.approx(0.0, abs=1e-15)
    assert slope([1000], [[0.1, 0.2]], 0.95) is None and slope([10, 10], [[0.1], [0.2]], 0.95) is None


def test_agreement_counts_pairs_ordered_as_the_top_rung_orders_them() -> None:
    top = torch.tensor([[0.30, 0.31, 0.29], [0.10, 0.12, 0.11], [-0.20, -0.19, -0.21]], dtype=torch.float64)
    same = agreement("32x2", "128x4", top * 0.5, top, 0.95)
    assert same is not None and (same.share, same.low, same.high, same.pairs) == (1.0, 1.0, 1.0, 3)
    reversed_ = agreement("32x2", "128x4", -top, top, 0.95)
    assert reversed_ is not None and reversed_.share == 0.0 and reversed_.high == 0.0
    # Rows 0 and 1 ordered the other way on average (0.183 < 0.2) by seeds that disagree: a
    # third of the pairs disagree, and resampling the seeds widens the interval around it.
    swapped = torch.tensor([[0.35, -0.1, 0.3], [0.2, 0.2, 0.2], [-0.2, -0.2, -0.2]], dtype=torch.float64)
    one = agreement("32x2", "128x4", swapped, top, 0.95)
    assert one is not None and one.share == pytest.approx(2 / 3)
    assert one.low <= one.share <= one.high and one.high - one.low > 0
    assert agreement("32x2", "128x4", top[:1], top[:1], 0.95) is None
    assert one.to_dict()["pairs"] == 3 and one.to_dict()["top"] == "128x4"
