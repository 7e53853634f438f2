"""Sampling with replacement (paper Alg 1, 3, 11): the labelled-multiplicity bound of ``pld`` and
``rdp`` against exact single-step computations on concrete neighbouring datasets.

The changed record is drawn K ~ Bin(m, 1/n) times. The bound charges the release as if K were
public: delta(eps) = sum_k P[K=k] delta_Gauss(eps; z/k). References (grids, no Monte Carlo):
(a) the other records contribute 0 and the record +C vs -C (K hidden); (b) the other records all
contribute a vector v of norm C orthogonal to the record's, so the output's second coordinate
hints at K. Both must lie below every accountant's certificate; (b) leaks more than (a).
"""

import math

import numpy as np
import pytest
from scipy.stats import binom, norm

from silodp.accounting import (
    GaussianDpEvent,
    SampledWithReplacementDpEvent,
    SelfComposedDpEvent,
    epsilon,
    gaussian,
    get_accountant,
    pld,
)
from silodp.accounting import tightest_epsilon

M, N, C, SIGMA = 6, 20, 1.0, 1.5
Z = SIGMA / (2 * C)  # relative to one draw's replace-one shift 2C (the references below)
Z_EVENT = SIGMA / C  # the events' unit: sigma / C


def labelled_delta(eps: float) -> float:
    k = np.arange(1, M + 1)
    return float(sum(binom.pmf(k, M, 1 / N) * np.exp(gaussian.analytic_log_delta(eps, Z / k))))


def instance_delta(eps: float, v: float) -> float:
    """Record +C (D) vs -C (D') on axis 1; every other draw adds v on axis 2."""
    k = np.arange(M + 1)
    pk = binom.pmf(k, M, 1 / N)
    x = np.linspace(-M * C - 12 * SIGMA, M * C + 12 * SIGMA, 1201)
    y = np.linspace(-12 * SIGMA, M * v + 12 * SIGMA, 1201) if v > 0 else np.array([0.0])
    fy = norm.pdf(y[None, :], (M - k)[:, None] * v, SIGMA) if v > 0 else np.ones((M + 1, 1))
    p = np.einsum("k,kx,ky->xy", pk, norm.pdf(x[None, :], k[:, None] * C, SIGMA), fy)
    q = np.einsum("k,kx,ky->xy", pk, norm.pdf(x[None, :], -k[:, None] * C, SIGMA), fy)
    integrand = np.maximum(p - math.exp(eps) * q, 0.0)
    area = np.trapezoid(integrand, x, axis=0)
    return float(np.trapezoid(area, y)) if v > 0 else float(area[0])


@pytest.mark.parametrize("eps", [0.0, 0.3, 1.0, 2.0])
def test_single_step_pld_is_the_labelled_mixture(eps):
    one = pld.from_with_replacement_gaussian(Z_EVENT, M, N, value_discretization_interval=1e-3)
    exact = labelled_delta(eps)
    assert exact * (1 - 1e-9) <= one.get_delta_for_epsilon(eps) <= exact * (1 + 1e-3) + 1e-12


@pytest.mark.parametrize("eps", [0.3, 1.0, 2.0])
def test_bound_dominates_concrete_instances(eps):
    bound = labelled_delta(eps)
    hidden = instance_delta(eps, 0.0)  # K hidden
    revealing = instance_delta(eps, C)  # the others' sum hints at K
    assert hidden < revealing <= bound


@pytest.mark.parametrize("name", ["pld", "rdp", "advanced"])
def test_every_accountant_dominates_both_instances(name):
    event = SampledWithReplacementDpEvent(N, M, GaussianDpEvent(Z_EVENT))
    for delta in (1e-2, 1e-3):
        eps = epsilon(event, delta, name)
        assert max(instance_delta(eps, 0.0), instance_delta(eps, C)) <= delta


def test_rdp_and_pld_agree_in_order_and_beat_advanced_composition_for_many_steps():
    event = SelfComposedDpEvent(SampledWithReplacementDpEvent(1000, 100, GaussianDpEvent(2.0)), 50)
    e_pld, e_rdp, e_adv = (epsilon(event, 1e-5, a) for a in ("pld", "rdp", "advanced"))
    assert e_pld <= e_rdp <= e_adv and e_pld < 0.1 * e_adv


def test_rarely_drawn_records_keep_the_amplified_advanced_bound():
    rare = SelfComposedDpEvent(SampledWithReplacementDpEvent(100_000, 10, GaussianDpEvent(1.0)), 10)
    common = SelfComposedDpEvent(SampledWithReplacementDpEvent(1000, 100, GaussianDpEvent(2.0)), 50)
    assert tightest_epsilon(rare, 1e-5)[1] == "advanced"
    assert tightest_epsilon(common, 1e-5)[1] == "pld"


def test_add_remove_is_refused():
    from silodp.accounting import ADD_OR_REMOVE_ONE
    event = SampledWithReplacementDpEvent(N, M, GaussianDpEvent(Z_EVENT))
    for name in ("pld", "rdp"):
        assert "REPLACE_ONE" in get_accountant(name, ADD_OR_REMOVE_ONE).unsupported_reason(event)
