"""Epsilon lower bounds from scores (silodp.verify.audit.estimators), checked against closed forms and
the exact Gaussian privacy curve (silodp.accounting.gaussian, Balle & Wang 2018)."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from silodp.accounting import gaussian
from silodp.verify.audit.estimators import (
    ESTIMATORS,
    Scores,
    clopper_pearson_epsilon,
    clopper_pearson_upper,
    estimate,
    gdp_epsilon,
    gdp_to_epsilon,
)


def gaussian_scores(mu: float, trials: int, seed: int) -> Scores:
    rng = np.random.default_rng(seed)
    return Scores(rng.normal(0.0, 1.0, trials), rng.normal(mu, 1.0, trials))


def test_clopper_pearson_upper_closed_forms():
    # zero events: the one-sided bound solves (1 - p)^n = alpha exactly
    assert clopper_pearson_upper(0, 1000, 0.05) == pytest.approx(1 - 0.05 ** (1 / 1000), rel=1e-9)
    # all events: the bound is 1; n - 1 events: p^n = alpha ... solved by beta.ppf, check it brackets
    assert clopper_pearson_upper(50, 50, 0.05) == 1.0
    up = float(clopper_pearson_upper(30, 100, 0.05))
    from scipy.stats import binom
    assert binom.cdf(30, 100, up) == pytest.approx(0.05, rel=1e-6)


def test_clopper_pearson_epsilon_by_hand():
    """Perfectly separated scores: no errors, so eps = log((1 - delta - FNR+) / FPR+) with both
    upper bounds the zero-event Clopper-Pearson bound at alpha / 2."""
    n = 10_000
    scores = Scores(np.zeros(n), np.ones(n))
    b = clopper_pearson_epsilon(scores, delta=1e-5, alpha=0.05, select_fraction=0.5)
    m = b.trials
    u = 1 - 0.025 ** (1 / m)
    assert b.fpr == 0 and b.fnr == 0
    assert b.epsilon == pytest.approx(math.log((1 - 1e-5 - u) / u), rel=1e-9)


@pytest.mark.parametrize("z", [0.7, 1.5, 3.0])
def test_lower_bounds_stay_below_the_exact_gaussian_epsilon(z):
    eps = gaussian.epsilon_for_delta(z, 1e-5)
    for seed in range(3):
        scores = gaussian_scores(1 / z, 20_000, seed)
        assert 0 < clopper_pearson_epsilon(scores, 1e-5, seed=seed).epsilon <= eps
        assert 0 < gdp_epsilon(scores, 1e-5, seed=seed).epsilon <= eps


def test_gdp_estimates_mu_of_a_gaussian():
    """mu = Phi^-1(1 - FPR) - Phi^-1(FNR) is constant over thresholds for N(0,1) vs N(mu,1); the
    (1 - alpha) lower bound lands just below the true mu."""
    b = gdp_epsilon(gaussian_scores(1.0, 100_000, 0), 1e-5)
    assert 0.93 <= b.mu <= 1.0
    # the reported rates are consistent with mu (the Gaussian trade-off curve)
    assert b.mu <= -norm.ppf(b.fpr) - norm.ppf(b.fnr) + 1e-9


def test_gdp_to_epsilon_is_the_analytic_gaussian():
    assert gdp_to_epsilon(0.5, 1e-6) == pytest.approx(gaussian.epsilon_for_delta(2.0, 1e-6))
    assert gdp_to_epsilon(0.0, 1e-6) == 0.0


def test_identical_worlds_give_no_evidence():
    rng = np.random.default_rng(5)
    for seed in range(3):
        scores = Scores(rng.normal(size=20_000), rng.normal(size=20_000))
        assert clopper_pearson_epsilon(scores, 1e-5, seed=seed).epsilon < 0.15
        assert gdp_epsilon(scores, 1e-5, seed=seed).epsilon < 0.3


def test_threshold_is_chosen_on_a_disjoint_split():
    scores = gaussian_scores(1.0, 1000, 1)
    select, evaluate = scores.split(0.2, seed=3)
    assert select.null.size == 200 and evaluate.null.size == 800
    assert sorted(np.concatenate([select.null, evaluate.null])) == sorted(scores.null)
    assert clopper_pearson_epsilon(scores, 1e-5, select_fraction=0.2).trials == 800


def test_mirrored_scores_give_the_same_bound():
    """Which world scores high is learned on the selection split (direction -1)."""
    s = gaussian_scores(1.0, 20_000, 2)
    up = clopper_pearson_epsilon(s, 1e-5, seed=4)
    down = clopper_pearson_epsilon(Scores(-s.null, -s.alt), 1e-5, seed=4)
    assert down.direction == -up.direction and down.epsilon == pytest.approx(up.epsilon)


@pytest.mark.parametrize("bad, match", [
    (dict(delta=0.0), "delta"), (dict(delta=1.0), "delta"), (dict(alpha=1.5), "alpha"),
    (dict(select_fraction=1.0), "select_fraction"),
])
def test_bad_arguments_raise_value_error_naming_them(bad, match):
    kwargs = dict(delta=1e-5) | bad
    with pytest.raises(ValueError, match=match):
        clopper_pearson_epsilon(gaussian_scores(1.0, 100, 0), **kwargs)


def test_bad_scores_and_method_names():
    with pytest.raises(ValueError, match="null"):
        Scores(np.array([0.0, np.nan]), np.zeros(3))
    with pytest.raises(ValueError, match="alt"):
        Scores(np.zeros(3), np.zeros(1))
    with pytest.raises(ValueError, match="method"):
        estimate(gaussian_scores(1.0, 100, 0), 1e-5, method="nope")
    assert set(ESTIMATORS) == {"clopper-pearson", "gdp"}
