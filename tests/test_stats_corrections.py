"""zoo.ablate.stats' family-wise corrections, power and paired tests against SciPy and statsmodels,
and a simulation of many studies in which nothing matters: Holm keeps the chance of any
false mark at 5%, testing each swap alone does not."""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.power import TTestPower

import zoo
from zoo.ablate.stats import (
    CORRECTIONS,
    adjust_optional,
    adjust_p,
    detectable_difference,
    detectable_effect,
    mean_interval,
    paired_difference,
    paired_p_values,
    paired_power,
    seeds_needed,
)

STATSMODELS_NAME = {"holm": "holm", "bonferroni": "bonferroni", "bh": "fdr_bh"}


def _p_vectors() -> list[np.ndarray]:
    rng = np.random.default_rng(19)
    vectors = [rng.uniform(size=k) for k in (1, 2, 5, 9, 30)]
    vectors += [rng.uniform(size=8) ** 4]  # several small ones: the step-down matters
    vectors += [np.array([0.01, 0.01, 0.04, 0.04, 1.0, 0.5, 0.0])]  # ties, a 0 and a 1
    vectors += [np.array([0.001, 0.2, 0.011, 0.012, 0.9])]
    return vectors


@pytest.mark.parametrize("method", sorted(STATSMODELS_NAME))
@pytest.mark.parametrize("index", range(len(_p_vectors())))
def test_corrections_match_statsmodels(method: str, index: int) -> None:
    p = _p_vectors()[index]
    reject, expected, _, _ = multipletests(p, alpha=0.05, method=STATSMODELS_NAME[method])
    got = adjust_p(p, method)
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)
    assert ((got <= 0.05) == reject).all()


def test_no_correction_is_the_p_value_and_every_method_is_known() -> None:
    p = _p_vectors()[2]
    np.testing.assert_array_equal(adjust_p(p, "none"), p)
    assert set(CORRECTIONS) == {*STATSMODELS_NAME, "none"}
    with pytest.raises(zoo.ConfigError, match=r"unknown correction 'sidak'.*holm, bonferroni, bh, none.*--correction"):
        adjust_p(p, "sidak")
    with pytest.raises(zoo.InputError, match=r"within \[0, 1\]"):
        adjust_p([0.2, 1.5], "holm")


@pytest.mark.parametrize("method", CORRECTIONS)
def test_corrections_are_vectorised_over_studies(method: str) -> None:
    p = np.random.default_rng(3).uniform(size=(50, 7)) ** 3
    rowwise = np.stack([adjust_p(row, method) for row in p])
    np.testing.assert_allclose(adjust_p(p, method), rowwise, rtol=1e-12)
    np.testing.assert_allclose(adjust_p(p.T, method, axis=0), rowwise.T, rtol=1e-12)
    assert (adjust_p(p, method) >= p - 1e-15).all()  # a correction never lowers p


def test_tests_without_a_p_value_are_left_out() -> None:
    p = [0.01, None, 0.04, 0.03]
    holm = multipletests([0.01, 0.04, 0.03], method="holm")[1]
    assert adjust_optional(p, "holm") == pytest.approx([holm[0], None, holm[1], holm[2]])
    assert adjust_optional([None, None]) == [None, None]


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 10, 20])
@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.05 / 8])
def test_power_matches_statsmodels(n: int, alpha: float) -> None:
    reference = TTestPower()
    for effect in (0.0, 0.3, 1.0, 2.5, 6.0):
        expected = reference.power(effect_size=effect, nobs=n, alpha=alpha, alternative="two-sided")
        if math.isnan(expected):  # statsmodels' lower tail is NaN far out; it is ~0 there: the upper tail alone
            expected = reference.power(effect_size=effect, nobs=n, alpha=alpha / 2, alternative="larger")
            assert effect * math.sqrt(n) > 5
        assert paired_power(effect, n, alpha) == pytest.approx(expected, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("n", [2, 3, 4, 5, 8, 10, 20])
@pytest.mark.parametrize("alpha", [0.05, 0.01, 0.05 / 8])
def test_detectable_effect_matches_statsmodels_power(n: int, alpha: float) -> None:
    reference = TTestPower()
    effect = detectable_effect(n, alpha=alpha)
    power = reference.power(effect_size=effect, nobs=n, alpha=alpha)
    if not math.isnan(power):  # statsmodels' noncentral t gives NaN far in the tail (n = 2)
        assert power == pytest.approx(0.8, abs=1e-9)
    assert paired_power(effect, n, alpha) == pytest.approx(0.8, abs=1e-9)
    assert paired_power(effect * 0.99, n, alpha) < 0.8  # the smallest such effect
    solved = reference.solve_power(effect_size=None, nobs=n, alpha=alpha, power=0.8, alternative="two-sided")
    if reference.power(effect_size=solved, nobs=n, alpha=alpha) == pytest.approx(0.8, abs=1e-6):
        assert effect == pytest.approx(solved, rel=1e-5)  # where statsmodels' own solver converged


def test_statsmodels_solver_converges_for_the_common_cases() -> None:
    # the check above compares with solve_power wherever it converges; make sure that is most cases
    for n in (3, 5, 10):
        solved = TTestPower().solve_power(effect_size=None, nobs=n, alpha=0.05, power=0.8)
        assert detectable_effect(n) == pytest.approx(solved, rel=1e-5)


def test_detectable_difference_scales_with_the_spread() -> None:
    d3 = detectable_difference(0.0019, 3)  # modded-nanogpt's seed-to-seed spread, 3 seeds
    assert d3 == pytest.approx(0.0019 * detectable_effect(3), rel=1e-12)
    assert detectable_difference(0.0019, 10) < d3 / 2  # more seeds see smaller effects
    assert detectable_difference(0.0, 3) == 0.0
    with pytest.raises(zoo.InputError, match="n >= 2 pairs"):
        detectable_effect(1)


@pytest.mark.parametrize(("sd", "delta"), [(0.01, 0.01), (0.01, 0.005), (0.02, 0.003), (0.01, -0.02)])
def test_seeds_needed_is_the_fewest_with_80_percent_power(sd: float, delta: float) -> None:
    n = seeds_needed(sd, delta)
    assert n is not None and n >= 2
    power = TTestPower()
    assert power.power(effect_size=abs(delta) / sd, nobs=n, alpha=0.05) >= 0.8
    if n > 2:
        assert power.power(effect_size=abs(delta) / sd, nobs=n - 1, alpha=0.05) < 0.8
    assert seeds_needed(1.0, 1e-4) is None  # past the limit
    assert seeds_needed(0.01, 0.0) is None


def test_paired_tests_match_scipy() -> None:
    rng = np.random.default_rng(7)
    base = rng.normal(4.0, 0.2, size=(20, 4))
    other = base + rng.normal(-0.01, 0.02, size=(20, 4))
    expected = scipy.stats.ttest_rel(other, base, axis=-1).pvalue
    np.testing.assert_allclose(paired_p_values(other - base), expected, rtol=1e-10)
    for b, o, p in zip(base, other, expected):
        d = paired_difference(list(b), list(o))
        assert d.p_value == pytest.approx(p, rel=1e-10)
        low, high = scipy.stats.t.interval(0.95, 3, loc=d.mean, scale=scipy.stats.sem(o - b))
        assert (d.low, d.high) == pytest.approx((low, high), rel=1e-10)
        assert d.sd == pytest.approx(np.std(o - b, ddof=1), rel=1e-10)
    assert float(paired_p_values([0.0, 0.0, 0.0])) == 1.0  # no spread: SciPy says NaN
    assert float(paired_p_values([0.1, 0.1])) == 0.0
    assert mean_interval([1.0]).sd is None and mean_interval([1.0, 1.0]).p_value == 0.0


def _null_studies(studies: int, swaps: int, seeds: int, seed: int) -> np.ndarray:
    """Final losses of ``studies`` ablations in which no swap matters: each seed moves
    every variant together (the shared init and data order), and each run adds noise of
    its own; shape (studies, swaps + 1, seeds), the base first."""
    rng = np.random.default_rng(seed)
    shared = rng.normal(4.0, 0.05, size=(studies, 1, seeds))
    own = rng.normal(0.0, 0.002, size=(studies, swaps + 1, seeds))
    return shared + own  # type: ignore[no-any-return]


@pytest.mark.parametrize(("swaps", "seeds"), [(8, 3), (8, 5), (12, 2)])
def test_holm_keeps_false_marks_at_five_percent_over_1000_null_studies(swaps: int, seeds: int) -> None:
    studies = 1000
    losses = _null_studies(studies, swaps, seeds, seed=swaps * 100 + seeds)
    p = paired_p_values(losses[:, 1:, :] - losses[:, :1, :])  # (studies, swaps)
    error = 2 * math.sqrt(0.05 * 0.95 / studies)  # two binomial standard errors at 5%: 0.0138
    any_marked = {method: float((adjust_p(p, method) < 0.05).any(axis=-1).mean()) for method in CORRECTIONS}
    assert any_marked["holm"] <= 0.05 + error
    assert any_marked["bonferroni"] <= any_marked["holm"]  # Holm marks at least what Bonferroni marks
    expected_uncorrected = 1 - 0.95**swaps  # about 1 in 3: the reason for the correction
    assert any_marked["none"] > 0.05 + error
    assert any_marked["none"] > 0.5 * expected_uncorrected
    # each single test is still at its level: uncorrected, 5% of all swaps are marked
    assert float((p < 0.05).mean()) == pytest.approx(0.05, abs=error)
