"""silodp's own RDP engine against numerical integration (mpmath) and dp-accounting.

The subsampled-Gaussian RDP must never be below the exact value (up to 1e-12 absolute in log A,
the slack the engine adds) and must match dp-accounting exactly at integer orders.
"""

import math

import mpmath
import numpy as np
import pytest
from dp_accounting.rdp import rdp_privacy_accountant as dpa_rdp

from silodp.accounting import rdp


def exact_rdp(q: float, z: float, alpha: float) -> float:
    """log E_{x ~ N(0, z^2)}[((1-q) + q e^{(2x-1)/(2z^2)})^alpha] / (alpha - 1) by quadrature."""
    mpmath.mp.dps = 30
    f = lambda x: mpmath.npdf(x, 0, z) * ((1 - q) + q * mpmath.e ** ((2 * x - 1) / (2 * z * z))) ** alpha
    cut = z * z * math.log(1 / q - 1) + 0.5
    points = sorted({-mpmath.inf, -10 * z, 0, 0.5, 1, cut, 10 * z + 1, mpmath.inf})
    return float(mpmath.log(mpmath.quad(f, points)) / (alpha - 1))


@pytest.mark.parametrize("q,z,alpha", [
    (0.01, 1.0, 1.5), (0.01, 1.0, 5.5), (0.1, 1.0, 1.1), (0.1, 2.0, 1.5), (0.5, 1.0, 2.5),
    (0.01, 0.5, 1.3), (0.001, 3.0, 7.7), (0.2, 0.8, 3.0), (0.05, 1.2, 16.0),
])
def test_subsampled_gaussian_matches_quadrature(q, z, alpha):
    ours = float(rdp.poisson_subsampled_gaussian_rdp(q, z, np.array([alpha]))[0])
    exact = exact_rdp(q, z, alpha)
    assert ours >= exact - 1e-15
    assert ours == pytest.approx(exact, rel=1e-8, abs=1e-11)


@pytest.mark.parametrize("q,z", [(1e-4, 0.8), (0.01, 1.0), (0.3, 2.0), (0.9, 5.0)])
def test_integer_orders_match_dp_accounting(q, z):
    orders = np.array([2.0, 3.0, 8.0, 32.0, 256.0])
    ours = rdp.poisson_subsampled_gaussian_rdp(q, z, orders)
    ref = dpa_rdp._compute_rdp_poisson_subsampled_gaussian(q, z, orders)
    np.testing.assert_allclose(ours, ref, rtol=1e-9, atol=1e-11)


def test_full_batch_is_the_gaussian():
    orders = np.array([1.5, 2.0, 10.0])
    np.testing.assert_allclose(rdp.poisson_subsampled_gaussian_rdp(1.0, 2.0, orders), orders / 8.0)


def test_conversion_matches_dp_accounting_and_inverts():
    orders = np.array([1.5, 2.0, 4.0, 16.0, 64.0])
    curve = 3.0 * rdp.poisson_subsampled_gaussian_rdp(0.02, 1.1, orders) * 100
    eps = rdp.epsilon_from_rdp(orders, curve, 1e-5)
    assert eps == pytest.approx(dpa_rdp.compute_epsilon(orders, curve, 1e-5)[0], rel=1e-12)
    assert rdp.delta_from_rdp(orders, curve, eps) == pytest.approx(1e-5, rel=1e-9)
    assert rdp.delta_from_rdp(orders, curve, eps * 1.1) < 1e-5


def test_slowly_converging_series_is_rounded_up():
    """q = 1/2 with huge noise: the fractional series converges only polynomially (dp-accounting
    gives up on this order); the remainder bound keeps the answer above the exact value."""
    ours = float(rdp.poisson_subsampled_gaussian_rdp(0.5, 1000.0, np.array([1.1]))[0])
    exact = exact_rdp(0.5, 1000.0, 1.1)
    assert exact <= ours <= exact + 1e-10
