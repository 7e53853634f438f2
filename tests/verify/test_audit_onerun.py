"""One-run epsilon lower bounds (silodp.verify.audit.onerun): the theorems' formulas by hand, and
coverage on mechanisms whose epsilon is known exactly (randomized response: pure eps; the Gaussian
mechanism: mu-GDP, its (eps, delta) curve from silodp.accounting.gaussian, Balle & Wang 2018).

Coverage is a repeated-trial test: thousands of independent one-run audits in one vectorised call;
the fraction whose lower bound exceeds the truth must stay below alpha (plus 3 binomial standard
errors)."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from silodp.accounting import gaussian
from silodp.verify.audit.onerun import (
    CanaryScores,
    correct_guesses,
    default_plans,
    estimate_all,
    fdp_epsilon,
    steinke_epsilon,
    steinke_p_value,
    two_world_scores,
)

ALPHA = 0.05


def randomized_response(eps: float, runs: int, m: int, seed: int) -> CanaryScores:
    """Each canary's score is its inclusion bit, flipped with probability 1 / (1 + e^eps): pure eps-DP."""
    rng = np.random.default_rng(seed)
    inc = rng.random((runs, m)) < 0.5
    flip = rng.random((runs, m)) < 1.0 / (1.0 + math.exp(eps))
    return CanaryScores((inc ^ flip).astype(float), inc)


def gaussian_canaries(mu: float, runs: int, m: int, seed: int) -> CanaryScores:
    """Each canary moves its own coordinate by mu noise units: the Gaussian mechanism, exactly mu-GDP."""
    rng = np.random.default_rng(seed)
    inc = rng.random((runs, m)) < 0.5
    return CanaryScores(rng.normal(0.0, 1.0, (runs, m)) + mu * inc, inc)


def exceed_limit(runs: int) -> float:
    return ALPHA + 3 * math.sqrt(ALPHA * (1 - ALPHA) / runs)


def test_correct_guesses_by_hand():
    c = CanaryScores(np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0]), np.array([1, 0, 1, 0, 0, 1], bool))
    # top 2 "in": [1, 0] -> 1 correct; bottom 2 "out": [0, 1] -> 1 correct; bottom 3: [0, 0, 1] -> 2
    assert correct_guesses(c, [(2, 2), (1, 0), (0, 3), (6, 0)]).tolist() == [[2, 1, 2, 3]]


def test_p_value_is_the_binomial_tail_and_theorem_3():
    r, v, eps, m, delta = 40, 30, 0.7, 100, 1e-3
    q = math.exp(eps) / (1 + math.exp(eps))
    f = lambda u: binom.sf(u - 1, r, q)  # P[Binomial(r, q) >= u]
    assert steinke_p_value(eps, r, v, m, 0.0) == pytest.approx(f(v), rel=1e-12)
    by_hand = f(v) + 2 * m * delta * max((f(v - i) - f(v)) / i for i in range(1, m + 1))
    assert steinke_p_value(eps, r, v, m, delta) == pytest.approx(by_hand, rel=1e-12)


def test_bound_inverts_the_p_value():
    c = gaussian_canaries(2.0, 1, 1000, seed=0)
    c = CanaryScores(c.scores[0], c.included[0])
    b = steinke_epsilon(c, 1e-6, ALPHA, guesses=(50, 50))
    assert b.plans == 1 and b.guesses == 100 and b.epsilon > 0
    assert steinke_p_value(b.epsilon, b.guesses, b.correct, 1000, 1e-6) <= ALPHA
    assert steinke_p_value(b.epsilon + 1e-6, b.guesses, b.correct, 1000, 1e-6) > ALPHA * 0.999


def test_randomized_response_coverage_is_sharp():
    """Pure eps: the delta = 0 bound (a binomial tail) is tight for randomized response, so the bound exceeds eps in close
    to (but at most about) alpha of the runs."""
    eps, runs = 1.0, 4000
    b = steinke_epsilon(randomized_response(eps, runs, 200, seed=1), 0.0, ALPHA, guesses=(100, 100))
    rate = float(np.mean(b.epsilon > eps))
    assert rate <= exceed_limit(runs)
    assert rate >= 0.005  # not vacuous: the bound reaches the truth in some runs
    # with the default plans (Bonferroni over them) it still holds
    b = steinke_epsilon(randomized_response(eps, 1000, 200, seed=2), 0.0, ALPHA)
    assert np.mean(b.epsilon > eps) <= exceed_limit(1000)


@pytest.mark.parametrize("mu", [0.5, 2.0])
def test_gaussian_coverage(mu):
    runs, m, delta = 500, 200, 1e-5
    truth = gaussian.epsilon_for_delta(1.0 / mu, delta)
    c = gaussian_canaries(mu, runs, m, seed=3)
    s = steinke_epsilon(c, delta, ALPHA, guesses=(20, 20))
    f = fdp_epsilon(c, delta, ALPHA, guesses=(20, 20))
    assert np.mean(s.epsilon > truth) <= exceed_limit(runs)
    assert np.mean(f.mu > mu) <= exceed_limit(runs)
    assert np.mean(f.epsilon > truth) <= exceed_limit(runs)


def test_null_mechanism_gives_zero_mostly():
    """No canary signal at all (mu = 0): the bounds are 0 except in at most ~alpha of the runs."""
    c = gaussian_canaries(0.0, 500, 200, seed=4)
    assert np.mean(steinke_epsilon(c, 1e-5).epsilon > 0) <= exceed_limit(500)
    assert np.mean(fdp_epsilon(c, 1e-5).mu > 0) <= exceed_limit(500)


def test_gaussian_many_canaries_within_stated_factor():
    """m = 10^4 canaries of a mu = 2 Gaussian (eps = 10.0 at delta = 1e-5): in each of 10 runs the
    f-DP bound on mu is within a factor 2 of the truth, and its epsilon within 2.5x; Steinke et al.'s
    (at delta = 1e-6, since m delta must stay small) within 3.5x of that delta's truth."""
    mu, m = 2.0, 10_000
    c = gaussian_canaries(mu, 10, m, seed=5)
    f = fdp_epsilon(c, 1e-5)
    s = steinke_epsilon(c, 1e-6)
    assert np.all(f.mu <= mu) and np.all(f.mu >= mu / 2)
    assert np.all(f.epsilon >= gaussian.epsilon_for_delta(1 / mu, 1e-5) / 2.5)
    truth6 = gaussian.epsilon_for_delta(1 / mu, 1e-6)
    assert np.all(s.epsilon <= truth6) and np.all(s.epsilon >= truth6 / 3.5)
    assert np.all(f.epsilon > s.epsilon * 0.9)  # f-DP is the tighter of the two here


def test_estimate_all_collects_once():
    c = gaussian_canaries(2.0, 1, 2000, seed=6)
    one = CanaryScores(c.scores[0], c.included[0])
    out = estimate_all(one, 1e-5)
    assert set(out) == {"steinke", "fdp", "clopper-pearson", "gdp"}
    assert all(0 <= v <= gaussian.epsilon_for_delta(0.5, 1e-5) for v in out.values())
    split = two_world_scores(one)
    assert split.null.size + split.alt.size == 2000


def test_default_plans_and_validation():
    plans = default_plans(1000)
    assert (500, 500) in plans and (1000, 0) in plans and all(8 <= a + b <= 1000 for a, b in plans)
    c = CanaryScores(np.arange(10.0), np.arange(10) % 2 == 0)
    with pytest.raises(ValueError, match="guesses"):
        steinke_epsilon(c, 1e-5, guesses=(8, 8))
    with pytest.raises(ValueError, match="alpha"):
        fdp_epsilon(c, 1e-5, alpha=1.5)
    with pytest.raises(ValueError, match="delta"):
        steinke_epsilon(c, 2.0)
    with pytest.raises(ValueError, match="included"):
        CanaryScores(np.arange(10.0), np.ones(9, bool))
    with pytest.raises(ValueError, match="finite"):
        CanaryScores(np.array([0.0, np.nan]), np.array([True, False]))
