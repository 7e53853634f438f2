"""Composition theorems: Dwork-Roth 3.20 by hand, KOV against brute-force randomized response."""

import itertools
import math

import numpy as np
import pytest

from silodp.accounting import composition


def test_dwork_roth_by_hand():
    eps, k, dp = 0.1, 100, 1e-6
    total, d = composition.dwork_roth(eps, 1e-7, k, dp)
    assert total == pytest.approx(math.sqrt(2 * k * math.log(1 / dp)) * eps + k * eps * (math.e ** eps - 1))
    assert d == pytest.approx(k * 1e-7 + dp)


def brute_force_rr_delta(eps, k, total_eps):
    """k-fold randomized response: exact hockey-stick divergence by enumerating outcomes."""
    p = math.exp(eps) / (1 + math.exp(eps))
    d = 0.0
    for outcome in itertools.product([0, 1], repeat=k):
        ones = sum(outcome)
        P = p ** ones * (1 - p) ** (k - ones)
        Q = (1 - p) ** ones * p ** (k - ones)
        d += max(0.0, P - math.exp(total_eps) * Q)
    return d


@pytest.mark.parametrize("eps,k,eg", [(0.5, 6, 1.0), (1.0, 8, 2.5), (0.2, 10, 0.3)])
def test_kov_matches_brute_force(eps, k, eg):
    assert composition.kov_delta(eps, 0.0, k, eg) == pytest.approx(brute_force_rr_delta(eps, k, eg), rel=1e-9, abs=1e-15)


def test_kov_beats_dwork_roth_and_basic():
    eps, k, delta = 0.05, 1000, 1e-5
    kov = composition.kov(eps, 0.0, k, delta)
    dr = composition.dwork_roth(eps, 0.0, k, delta)[0]
    assert kov < dr and kov < k * eps


def test_kov_single_step_is_identity():
    assert composition.kov(0.7, 1e-6, 1, 1e-6 * 1.0000001) == pytest.approx(0.7, rel=1e-6)


def test_per_step_inverses_roundtrip():
    e, d = composition.dwork_roth_per_step(1.0, 1e-5, 500)
    total, td = composition.dwork_roth(e, d, 500, 1e-5 / 2)
    assert total <= 1.0 + 1e-9 and td <= 1e-5 * (1 + 1e-12)
    e2 = composition.kov_per_step(1.0, 1e-5, 500, 0.0)
    assert composition.kov(e2, 0.0, 500, 1e-5) <= 1.0 + 1e-9
    assert e2 > e  # the optimal theorem allows a larger per-step budget


def test_heterogeneous_reduces_to_basic_for_few_steps():
    eps, d = composition.heterogeneous_kov([0.1, 0.2], [0.0, 0.0], [1, 1], 1e-5)
    assert eps == pytest.approx(0.3) and d == pytest.approx(1e-5)


def test_unreachable_delta_is_a_clear_error():
    with pytest.raises(ValueError, match="total_delta"):
        composition.kov(0.1, 1e-3, 100, 1e-5)


def test_large_k_is_finite():
    assert np.isfinite(composition.kov(1e-3, 0.0, 10 ** 6, 1e-5))
