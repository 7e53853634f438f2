"""Shuffle amplification (FMT21's published example) and the binomial protocol (Monte Carlo)."""

import math

import numpy as np
import pytest
from scipy.stats import binom

from silodp.accounting import binomial, shuffle


def test_fmt21_published_example():
    """FMT21's own example: n = 1e5, eps0 = 4, delta = 1e-6 gives a numerical eps of about 0.17."""
    assert shuffle.fmt21_numerical(4.0, 100_000, 1e-6) == pytest.approx(0.17, abs=0.01)


def test_fmt21_closed_form_by_hand():
    e0, n, d = 1.0, 10_000, 1e-6
    ee = math.e
    ref = math.log(1 + (ee - 1) / (ee + 1) * (8 * math.sqrt(ee * math.log(4 / d) / n) + 8 * ee / n))
    assert shuffle.fmt21_closed_form(e0, n, d) == pytest.approx(ref)


def test_numerical_is_tighter_and_conditions_reported():
    res = shuffle.shuffle_bounds(0.4, 10_000, 1e-6)
    assert res["numerical"] <= res["closed_form"] <= res["erlingsson2019"]
    assert res["erlingsson2019"] == pytest.approx(12 * 0.4 * math.sqrt(math.log(1e6) / 10_000))
    assert shuffle.shuffle_bounds(4.0, 100_000, 1e-6)["erlingsson2019"] is None  # needs eps0 < 1/2


def test_shuffling_never_exceeds_eps0():
    assert shuffle.fmt21_numerical(0.5, 10, 1e-3) <= 0.5


def brute_shifted_binomial_delta(eps, m, p, k):
    x = np.arange(0, m + k + 1)
    P = binom.pmf(x - k, m, p)
    Q = binom.pmf(x, m, p)
    return max(np.maximum(P - math.exp(eps) * Q, 0).sum(), np.maximum(Q - math.exp(eps) * P, 0).sum())


def test_shifted_binomial_epsilon_matches_brute_force():
    m, p, k, d = 400, 0.25, 3, 1e-4
    eps = binomial.shifted_binomial_epsilon(d, m, p, k)
    assert brute_shifted_binomial_delta(eps, m, p, k) <= d * (1 + 1e-9)
    assert brute_shifted_binomial_delta(eps * 0.98, m, p, k) > d


def simulate_pvec(X, L, params, rng, trials):
    """Algorithm 4-5 literally (numpy): shift, scale to g, random rounding, binomial noise, debias."""
    n, d = X.shape
    g, b, p = params.g, params.b, params.p
    w = (X + L) * g / (2 * L)
    base = np.floor(w)
    rounded = base + (rng.random((trials, n, d)) < (w - base))
    counts = rounded.sum(1) + rng.binomial(n * b, p, size=(trials, d))
    return (2 * L / g) * (counts - p * b * n) - n * L


def test_binomial_protocol_unbiased_and_variance_matches_formula():
    rng = np.random.default_rng(0)
    n, d, L = 30, 4, 1.0
    params = binomial.BinomialProtocolParams(g=8, b=50, p=0.25)
    X = rng.normal(size=(n, d))
    X = X / np.linalg.norm(X, axis=1, keepdims=True) * L
    out = simulate_pvec(X, L, params, rng, 20000)
    err = out - X.sum(0)
    assert np.all(np.abs(err.mean(0)) < 4 * err.std(0) / math.sqrt(20000))  # unbiased
    w = (X + L) * params.g / (2 * L)
    f = w - np.floor(w)
    exact = (2 * L / params.g) ** 2 * (n * params.b * params.p * (1 - params.p) + (f * (1 - f)).sum(0))
    assert (err ** 2).mean(0) == pytest.approx(exact, rel=0.05)
    worst = binomial.binomial_protocol_variance(params, L, d, n)
    assert (err ** 2).sum(1).mean() <= worst


def test_binomial_params_are_certified():
    params = binomial.binomial_protocol_params(2.0, 1e-5, 1.0, 3, 50)
    assert params.epsilon <= 2.0
    smaller = binomial.BinomialProtocolParams(params.g, int(params.b * 0.9), params.p)
    assert binomial.binomial_protocol_epsilon(smaller, 1e-5, 3, 50) > 2.0 * 0.999
