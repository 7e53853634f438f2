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
    gives up on this order; silodp stops after _MAX_TERMS terms) and the order takes the chord
    bound to the orders 1 and 2: above the exact value, at most RDP(2) (not tight below order 2)."""
    ours = float(rdp.poisson_subsampled_gaussian_rdp(0.5, 1000.0, np.array([1.1]))[0])
    exact = exact_rdp(0.5, 1000.0, 1.1)
    at_two = float(rdp.poisson_subsampled_gaussian_rdp(0.5, 1000.0, np.array([2.0]))[0])
    assert exact <= ours <= at_two + 1e-10


@pytest.mark.parametrize("q,z,alpha", [(0.01, 1.0, 1.5), (0.1, 1.0, 5.5), (0.03, 2.0, 2.3), (0.2, 0.8, 7.9)])
def test_chord_bound_is_above_the_exact_value_and_close(q, z, alpha):
    """The integer-order chord (log-convexity of log A_alpha) is an upper bound; it is only the
    fallback where the series stall (huge z, where log A_alpha is nearly quadratic in alpha and the
    chord tight, next test), so here it need only be within 40%."""
    chord = rdp._log_a_chord(q, z, alpha) / (alpha - 1.0)
    exact = exact_rdp(q, z, alpha)
    assert exact <= chord <= exact * 1.4


def test_huge_noise_fractional_orders_are_finite_and_tight():
    """z = 1e7 (the calibration's reachability probe): the series stall (their terms fall only
    polynomially, below float resolution at log-magnitude 1e14) and the chord answers: finite, the
    rounding slack (1e-12 in log A) plus at most 1e-15. Where log A_alpha is nearly quadratic in alpha
    (log A = c alpha (alpha - 1), c = q^2 (e^{1/z^2} - 1) / 2 to relative O(q / z^2) at z = 1e3)
    the chord exceeds it by the closed form c t (1 - t), t = alpha - floor(alpha)."""
    orders = np.array([1.1, 1.5, 2.5, 5.5, 10.9])
    q = 0.03
    ours = rdp.poisson_subsampled_gaussian_rdp(q, 1e7, orders)
    assert np.all(np.isfinite(ours)) and np.all(ours <= (1e-12 + 1e-15) / (orders - 1))
    for alpha in (2.5, 5.5, 10.9):
        chord = rdp._log_a_chord(q, 1e3, alpha) / (alpha - 1)
        c = q * q * math.expm1(1e-6) / 2
        t = alpha - math.floor(alpha)
        assert chord == pytest.approx(c * (alpha + t * (1 - t) / (alpha - 1)), rel=1e-5)


def test_rdp_calibration_matches_dp_accounting():
    """The issue's slow case (100+ s before the chord fallback): silodp's RDP calibration at
    epsilon 2, delta 1e-5, 700 steps, q 0.03 (add/remove) certifies by dp-accounting's RDP too,
    and 2% less noise would not (rtol 1%)."""
    from dp_accounting import dp_event as dpe

    from silodp.accounting import events as ev
    from silodp.accounting.calibration import calibrate

    def event(z):
        return ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.03, ev.GaussianDpEvent(z)), 700)

    cal = calibrate(event, 2.0, 1e-5, "rdp", ev.ADD_OR_REMOVE_ONE)

    def dpa_epsilon(z):
        acc = dpa_rdp.RdpAccountant()
        acc.compose(dpe.SelfComposedDpEvent(dpe.PoissonSampledDpEvent(0.03, dpe.GaussianDpEvent(z)), 700))
        return acc.get_epsilon(1e-5)

    assert dpa_epsilon(cal.noise_multiplier) <= 2.0
    assert dpa_epsilon(cal.noise_multiplier * 0.98) > 2.0


@pytest.mark.parametrize("q,z,alpha", [(0.01, 1.0, 2.0), (0.2, 0.8, 3.0), (0.05, 1.2, 16.0), (0.5, 3.0, 1.5)])
def test_quantized_lower_bound_is_below_the_exact_rdp_and_close(q, z, alpha):
    """gaussian_pair_rdp_lower of the add/remove pair against the quadrature of exact_rdp (independent
    of the engine): never above it, within 1% of it."""
    low = float(rdp.gaussian_pair_rdp_lower(q, 0.0, z, np.array([alpha]))[0])
    exact = exact_rdp(q, z, alpha)
    assert exact * 0.99 <= low <= exact


def test_quantized_lower_bound_of_the_gaussian_is_below_its_closed_form():
    """The plain Gaussian pair (a = 1, b = 0): below alpha / (2 s^2) (Mironov 2017, Prop 7), within 1%."""
    orders = np.array([1.5, 2.0, 10.0, 64.0])
    low = rdp.gaussian_pair_rdp_lower(1.0, 0.0, 2.0, orders)
    exact = orders / 8.0
    assert np.all(low <= exact) and np.all(low >= 0.99 * exact)


def test_replace_one_lower_bound_is_below_the_replace_one_bound():
    """The replace-one pair (a = b = q): below rdp_replace's upper bound at every order, within 2%."""
    from silodp.accounting.rdp_replace import poisson_replace_one_gaussian_rdp

    orders = np.array([1.5, 2.0, 4.0, 8.0, 32.0])
    for q, z in ((0.01, 1.0), (0.25, 2.0), (0.1, 0.8)):
        low = rdp.gaussian_pair_rdp_lower(q, q, z, orders)
        upper = poisson_replace_one_gaussian_rdp(q, z, orders)
        assert np.all(low <= upper) and np.all(low >= 0.98 * upper)


@pytest.mark.parametrize("relation", ["ADD_OR_REMOVE_ONE", "REPLACE_ONE"])
@pytest.mark.parametrize("q,z,steps,delta", [(0.01, 1.0, 1000, 1e-5), (0.25, 2.0, 80, 1e-10), (0.001, 0.6, 5000, 1e-6),
                                             (1e-5, 0.8, 10 ** 6, 1e-9), (0.5, 5.0, 200, 1e-6), (1.0, 2.0, 50, 1e-5)])
def test_epsilon_floor_is_below_the_certificate_and_close(relation, q, z, steps, delta):
    """RdpAccountant.epsilon_floor (what tightest_epsilon compares before computing rdp): never above
    rdp's certificate, within 1% of it (plain, add/remove and replace-one Poisson steps, composed)."""
    from silodp.accounting import events as ev, get_accountant

    rel = ev.NeighboringRelation[relation]
    step = ev.GaussianDpEvent(z) if q == 1.0 else ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z))
    event = ev.ComposedDpEvent((ev.SelfComposedDpEvent(step, steps), ev.GaussianDpEvent(4 * z)))
    acc = get_accountant("rdp", rel).compose(event)
    floor, cert = acc.epsilon_floor(delta), acc.get_epsilon(delta)
    assert 0.99 * cert <= floor <= cert


def test_epsilon_floor_is_zero_where_no_pair_is_known():
    from silodp.accounting import events as ev, get_accountant

    event = ev.SelfComposedDpEvent(ev.SampledWithoutReplacementDpEvent(1000, 10, ev.GaussianDpEvent(1.0)), 100)
    assert get_accountant("rdp", ev.REPLACE_ONE).compose(event).epsilon_floor(1e-5) == 0.0
