"""The rigorous lower bound of the PLD engine (pld_lower.lower_bound_epsilon): below the exact Gaussian
composition and every sound certificate, and close to them where the grid is fine enough."""

import pytest

from silodp.accounting import accountants, events as ev, gaussian, pld_lower, pld_pairs


def test_gaussian_composition_lower_bound_is_just_below_the_exact_curve():
    exact = gaussian.epsilon_for_delta(2.0 / 50 ** 0.5, 1e-5)  # 50 steps of z = 2 = one at z / sqrt(50)
    lower = pld_lower.lower_bound_epsilon([(pld_pairs.GaussianPair(1.0, 0.0, 2.0), 50)], 1e-5)
    assert exact * (1 - 1e-3) <= lower <= exact


def test_poisson_lower_bound_is_below_the_certificate_and_within_3_percent():
    q, z, steps = 0.01, 1.0, 1000
    upper = accountants.epsilon(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps),
                                1e-5, neighbouring=ev.ADD_OR_REMOVE_ONE)
    lower = max(pld_lower.lower_bound_epsilon([(pld_pairs.GaussianPair(q, 0.0, z), steps)], 1e-5),
                pld_lower.lower_bound_epsilon([(pld_pairs.GaussianPair(0.0, q, z), steps)], 1e-5))
    assert 0.97 * upper <= lower <= upper


def test_nothing_to_lose_gives_zero():
    assert pld_lower.lower_bound_epsilon([(pld_pairs.GaussianPair(1.0, 0.0, 50.0), 1)], 0.5) == 0.0


def test_epsilon_lookup_equals_a_plain_scan_of_the_grid():
    """LossPmf.epsilon's suffix-sum guess of the bracket is checked exactly: the answer is the one
    a scan of delta over every grid point gives."""
    import math

    import numpy as np

    pmf = pld_pairs.from_gaussian_mechanism(1.0, 0.05, ev.ADD_OR_REMOVE_ONE, 1e-3).self_compose(200).remove
    l = pmf.losses
    for delta in (0.3, 1e-3, 1e-6, 1e-9):
        eps = pmf.epsilon(delta)
        if math.isinf(eps):
            continue
        above = [x for x in l if x >= 0 and pmf.delta(float(x)) > delta]
        left = max(above) if above else 0.0
        nxt = float(l[np.searchsorted(l, left, side="right")])
        assert left <= eps <= nxt and pmf.delta(eps) <= delta * (1 + 1e-9)


def test_count_test_reproduces_the_pinned_million_step_bound_and_stays_below_the_certificate():
    """q 1e-6, z 0.5, 10^6 steps, delta 1e-12: the max test (m = 1) is the bound pinned in
    test_pld_roundoff (1.972, mpmath); and at 1000 steps the count test is below the certificate."""
    assert pld_lower.count_test_lower_bound(pld_pairs.GaussianPair(1e-6, 1e-6, 0.5), 1_000_000, 1e-12) == pytest.approx(1.972, abs=2e-3)
    q, z, steps = 0.01, 1.0, 1000
    upper = accountants.epsilon(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps),
                                1e-5, neighbouring=ev.REPLACE_ONE)
    assert 0 < pld_lower.count_test_lower_bound(pld_pairs.GaussianPair(q, q, z), steps, 1e-5) <= upper
