"""Gaussian mechanism: closed forms (Balle-Wang, Dwork-Roth A.1, Bun-Steinke) as references."""

import math

import numpy as np
import pytest
from scipy.stats import norm

from silodp.accounting import gaussian, zcdp


def balle_wang_delta(eps, sigma, sens=1.0):
    """Independent reference: Balle & Wang (2018) Thm 8 with scipy's normal CDF."""
    a = sens / (2 * sigma)
    b = eps * sigma / sens
    return norm.cdf(a - b) - math.exp(eps) * norm.cdf(-a - b)


@pytest.mark.parametrize("eps,sigma,sens", [(0.5, 2.0, 1.0), (1.0, 3.0, 2.0), (3.0, 0.8, 1.0), (0.1, 10.0, 1.0)])
def test_analytic_delta_matches_balle_wang(eps, sigma, sens):
    assert gaussian.delta_for_epsilon(eps, sigma, sens) == pytest.approx(balle_wang_delta(eps, sigma, sens), rel=1e-9)


@pytest.mark.parametrize("eps,delta", [(0.5, 1e-5), (1.0, 1e-6), (4.0, 1e-9), (0.9, 1e-12)])
def test_analytic_sigma_is_tight_and_safe(eps, delta):
    s = gaussian.sigma_for_budget(eps, delta)
    assert balle_wang_delta(eps, s) <= delta  # safe
    assert balle_wang_delta(eps, s * (1 - 1e-6)) > delta * (1 - 1e-3)  # tight


def test_classical_formula_and_range():
    eps, delta = 0.5, 1e-5
    assert gaussian.sigma_for_budget(eps, delta, 2.0, "classical") == pytest.approx(2.0 * math.sqrt(2 * math.log(1.25 / delta)) / eps)
    with pytest.raises(ValueError, match="epsilon"):
        gaussian.sigma_for_budget(1.5, delta, method="classical")


def test_three_methods_are_ordered():
    """Analytic is exact, hence needs the least noise; zCDP next; classical the most (eps < 1)."""
    sig = {m: gaussian.sigma_for_budget(0.8, 1e-6, method=m) for m in gaussian.METHODS}
    assert sig["analytic"] < sig["zcdp"] < sig["classical"]


def test_zcdp_method_uses_prop_d2():
    s = gaussian.sigma_for_budget(1.0, 1e-5, method="zcdp")
    assert zcdp.gaussian_rho(s) == pytest.approx(zcdp.rho_for_budget(1.0, 1e-5), rel=1e-9)


@pytest.mark.parametrize("method", gaussian.METHODS)
def test_epsilon_delta_roundtrip(method):
    sigma = 6.0
    eps = gaussian.epsilon_for_delta(sigma, 1e-5, method=method)
    assert gaussian.delta_for_epsilon(eps, sigma, method=method) <= 1e-5 * (1 + 1e-6)


def test_tiny_delta_stays_finite():
    d = gaussian.delta_for_epsilon(30.0, 1.0)
    assert 0 <= d < 1e-100 and np.isfinite(d)
