"""The rigorous lower bound of the PLD engine (pld.lower_bound_epsilon): below the exact Gaussian
composition and every sound certificate, and close to them where the grid is fine enough."""

import pytest

from silodp.accounting import accountants, events as ev, gaussian, pld


def test_gaussian_composition_lower_bound_is_just_below_the_exact_curve():
    exact = gaussian.epsilon_for_delta(2.0 / 50 ** 0.5, 1e-5)  # 50 steps of z = 2 = one at z / sqrt(50)
    lower = pld.lower_bound_epsilon([(pld.GaussianPair(1.0, 0.0, 2.0), 50)], 1e-5)
    assert exact * (1 - 1e-3) <= lower <= exact


def test_poisson_lower_bound_is_below_the_certificate_and_within_3_percent():
    q, z, steps = 0.01, 1.0, 1000
    upper = accountants.epsilon(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps),
                                1e-5, neighbouring=ev.ADD_OR_REMOVE_ONE)
    lower = max(pld.lower_bound_epsilon([(pld.GaussianPair(q, 0.0, z), steps)], 1e-5),
                pld.lower_bound_epsilon([(pld.GaussianPair(0.0, q, z), steps)], 1e-5))
    assert 0.97 * upper <= lower <= upper


def test_nothing_to_lose_gives_zero():
    assert pld.lower_bound_epsilon([(pld.GaussianPair(1.0, 0.0, 50.0), 1)], 0.5) == 0.0
