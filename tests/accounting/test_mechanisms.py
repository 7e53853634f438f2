"""Laplace, discrete Laplace and randomized response through the pld accountant, against
dp-accounting's PLD (same grid, pessimistic): within 0.1%; dp-accounting events are accepted;
huge inputs are refused before anything is allocated."""

import pytest
from dp_accounting import NeighboringRelation, dp_event as dpe
from dp_accounting.pld import pld_privacy_accountant

from silodp.accounting import events as ev
from silodp.accounting.accountants import epsilon, get_accountant

CASES = [
    (ev.LaplaceDpEvent(2.0), dpe.LaplaceDpEvent(2.0), ev.ADD_OR_REMOVE_ONE, 50),
    (ev.LaplaceDpEvent(10.0), dpe.LaplaceDpEvent(10.0), ev.ADD_OR_REMOVE_ONE, 400),
    (ev.DiscreteLaplaceDpEvent(0.3, 2), dpe.DiscreteLaplaceDpEvent(0.3, 2), ev.ADD_OR_REMOVE_ONE, 30),
    (ev.DiscreteLaplaceDpEvent(0.05, 1), dpe.DiscreteLaplaceDpEvent(0.05, 1), ev.ADD_OR_REMOVE_ONE, 200),
    (ev.RandomizedResponseDpEvent(0.5, 4), dpe.RandomizedResponseDpEvent(0.5, 4), ev.REPLACE_ONE, 20),
    (ev.RandomizedResponseDpEvent(0.9, 2), dpe.RandomizedResponseDpEvent(0.9, 2), ev.REPLACE_ONE, 30),
]
_DPA_RELATION = {ev.ADD_OR_REMOVE_ONE: NeighboringRelation.ADD_OR_REMOVE_ONE, ev.REPLACE_ONE: NeighboringRelation.REPLACE_ONE}


def _dpa(event, relation, steps, delta):
    acc = pld_privacy_accountant.PLDAccountant(_DPA_RELATION[relation], value_discretization_interval=1e-4)
    if isinstance(event, dpe.RandomizedResponseDpEvent):
        # dp-accounting's PLD ignores the count of a self-composed randomized response (it composes
        # one step), so the composition is spelled out
        acc.compose(dpe.ComposedDpEvent([event] * steps))
    else:
        acc.compose(dpe.SelfComposedDpEvent(event, steps))
    return acc.get_epsilon(delta)


@pytest.mark.parametrize("ours,theirs,relation,steps", CASES)
def test_pld_matches_dp_accounting(ours, theirs, relation, steps):
    ref = _dpa(theirs, relation, steps, 1e-6)
    mine = epsilon(ev.SelfComposedDpEvent(ours, steps), 1e-6, "pld", relation)
    assert ref * (1 - 1e-3) <= mine <= ref * (1 + 1e-3)
    # dp-accounting's own event tree is accepted and reads the same
    assert epsilon(dpe.SelfComposedDpEvent(theirs, steps), 1e-6, "pld", relation) == mine


def test_replace_one_doubles_the_shift():
    """Under replace-one a Laplace sum moves by 2C in l1: one step is exactly (2 / b)-DP."""
    assert epsilon(ev.LaplaceDpEvent(4.0), 1e-12, "pld") == pytest.approx(0.5, abs=2e-4)
    assert epsilon(ev.LaplaceDpEvent(4.0), 1e-12, "pld", ev.ADD_OR_REMOVE_ONE) == pytest.approx(0.25, abs=2e-4)


def test_refusals():
    pld = get_accountant("pld", ev.ADD_OR_REMOVE_ONE)
    assert not pld.supports(ev.RandomizedResponseDpEvent(0.5, 4))  # replace-one only
    assert not get_accountant("rdp").supports(ev.LaplaceDpEvent(1.0))  # allow-list: pld only
    assert not get_accountant("pld").supports(ev.EpsilonDeltaDpEvent(1e6, 0.0))
    with pytest.raises(ValueError, match="epsilon"):
        epsilon(ev.EpsilonDeltaDpEvent(1e6, 0.0), 1e-5, "pld")  # refused, not a 149 GiB grid
    with pytest.raises(ValueError, match="noise_parameter"):
        ev.RandomizedResponseDpEvent(1.5, 4)
    assert not get_accountant("pld").supports(ev.LaplaceDpEvent(1e-9))  # losses beyond the grid


@pytest.mark.parametrize("sigma,sensitivity,steps", [(2.0, 1, 20), (0.8, 1, 5), (5.0, 2, 40)])
def test_discrete_gaussian_matches_dp_accounting(sigma, sensitivity, steps):
    """dp-accounting has no DiscreteGaussianDpEvent; its PLD constructor is the reference."""
    from dp_accounting.pld import privacy_loss_distribution

    ref = privacy_loss_distribution.from_discrete_gaussian_mechanism(
        sigma, sensitivity, value_discretization_interval=1e-4).self_compose(steps).get_epsilon_for_delta(1e-6)
    event = ev.SelfComposedDpEvent(ev.DiscreteGaussianDpEvent(sigma, sensitivity), steps)
    assert ref * (1 - 1e-3) <= epsilon(event, 1e-6, "pld", ev.ADD_OR_REMOVE_ONE) <= ref * (1 + 1e-3)
    assert not get_accountant("pld").supports(ev.DiscreteGaussianDpEvent(1e7, 1))  # support too large


def _exact_rr_epsilon(p: float, k: int, steps: int, delta: float) -> float:
    """Randomized response composed ``steps`` times, exactly: the loss is (i - j) L with (i, j) the
    counts of steps at +L and -L (a trinomial), delta(eps) = E[(1 - e^{eps - L})_+] summed in
    fractions-free float64 over every (i, j) and inverted by bisection to 1e-12."""
    from math import comb, exp, log

    a, b = 1 - p + p / k, p / k
    top = log(a / b)
    terms = [(comb(steps, i) * comb(steps - i, j) * a ** i * b ** j * ((k - 2) * b) ** (steps - i - j), (i - j) * top)
             for i in range(steps + 1) for j in range(steps - i + 1)]

    def curve(eps):
        return sum(m * (1 - exp(eps - l)) for m, l in terms if l > eps)

    lo, hi = 0.0, steps * top
    while hi - lo > 1e-12:
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if curve(mid) > delta else (lo, mid)
    return hi


@pytest.mark.parametrize("p,k,steps", [(0.5, 4, 20), (0.9, 2, 30), (0.3, 3, 7)])
def test_randomized_response_alone_is_exact_on_its_lattice(p, k, steps):
    """A composition of one randomized response alone is accounted on its own lattice: the exact
    epsilon (trinomial enumeration) to 1e-6 relative (the FFT round-off charged), never below it,
    and not above the grid's."""
    exact = _exact_rr_epsilon(p, k, steps, 1e-6)
    mine = epsilon(ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(p, k), steps), 1e-6, "pld", ev.REPLACE_ONE)
    assert exact - 1e-12 <= mine <= exact * (1 + 1e-6)  # above: the FFT round-off charged to delta
    # beside another mechanism the grid is used: never tighter than the lattice
    mixed = ev.ComposedDpEvent([ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(p, k), steps),
                                ev.GaussianDpEvent(1e6)])
    assert epsilon(mixed, 1e-6, "pld", ev.REPLACE_ONE) >= mine - 1e-12


def test_discrete_laplace_alone_on_its_lattice_is_not_looser_than_the_grid():
    """Discrete Laplace alone (its lattice) against the same steps composed with a negligible
    Gaussian (the grid): the lattice's epsilon is never larger, and within 0.1% of dp-accounting's."""
    steps = 30
    alone = epsilon(ev.SelfComposedDpEvent(ev.DiscreteLaplaceDpEvent(0.3, 2), steps), 1e-6, "pld", ev.ADD_OR_REMOVE_ONE)
    grid = epsilon(ev.ComposedDpEvent([ev.SelfComposedDpEvent(ev.DiscreteLaplaceDpEvent(0.3, 2), steps),
                                       ev.GaussianDpEvent(1e6)]), 1e-6, "pld", ev.ADD_OR_REMOVE_ONE)
    assert alone <= grid
    ref = _dpa(dpe.DiscreteLaplaceDpEvent(0.3, 2), ev.ADD_OR_REMOVE_ONE, steps, 1e-6)
    assert ref * (1 - 1e-3) <= alone <= ref * (1 + 1e-3)


@pytest.mark.parametrize("p,k,steps", [(0.5, 4, 20), (0.9, 2, 30), (0.3, 3, 7)])
def test_randomized_response_by_direct_convolutions_is_nearly_exact(p, k, steps):
    """A few atoms self-composed by direct convolutions (no FFT): the composed masses within their
    charged round-off of the exact trinomial masses (mpmath, 40 digits), and epsilon within 1e-8
    relative above the exact one, never below."""
    from math import comb

    import mpmath

    from silodp.accounting.accountants.pld import PldAccountant

    acc = get_accountant("pld", ev.REPLACE_ONE).compose(ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(p, k), steps))
    assert isinstance(acc, PldAccountant)
    one = acc._step(acc._blocks[0]).remove
    composed = one._convolve_power(steps, acc.log_mass_truncation_bound)
    mpmath.mp.dps = 40
    a, b, c = mpmath.mpf(1) - p + mpmath.mpf(p) / k, mpmath.mpf(p) / k, (k - 2) * mpmath.mpf(p) / k  # +1, -1, 0
    exact = {}
    for i in range(steps + 1):
        for j in range(steps + 1 - i):
            exact[i - j] = exact.get(i - j, 0) + comb(steps, i) * comb(steps - i, j) * a ** i * b ** j * c ** (steps - i - j)
    # the step's atoms sit at lattice indices -unit, 0, +unit; the truncated tails (mass < e^bound each,
    # the lower one moved onto the first kept point) are left out of the comparison
    unit = -one.offset
    inside = [s for s in range(-steps, steps + 1) if 0 < s * unit - composed.offset < len(composed.masses)]
    assert len(inside) > steps
    err = sum(abs(composed.masses[s * unit - composed.offset] - exact.get(s, 0)) for s in inside)
    assert err <= composed.roundoff and composed.roundoff < 1e-12
    truth = _exact_rr_epsilon(p, k, steps, 1e-6)
    mine = epsilon(ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(p, k), steps), 1e-6, "pld", ev.REPLACE_ONE)
    assert truth - 1e-12 <= mine <= truth * (1 + 1e-8)


def test_laplace_pure_bound_where_it_is_tight():
    """Few Laplace steps at a tiny delta: the pure bound T / b (basic composition), within 1e-6 of
    the closed-form lower bound T / b + ln(1 - 2^T delta) and never above the pld's own composition
    by more than that; not taken where 2^T delta is not small."""
    from math import log1p

    from silodp.accounting import mechanisms

    for b, steps, delta, relation in [(1.0, 5, 1e-9, ev.ADD_OR_REMOVE_ONE), (3.0, 8, 1e-12, ev.REPLACE_ONE)]:
        event = ev.SelfComposedDpEvent(ev.LaplaceDpEvent(b), steps)
        mine = epsilon(event, delta, "pld", relation)
        shift = 2.0 if relation == ev.REPLACE_ONE else 1.0
        assert mine == steps * shift / b
        assert steps * shift / b + log1p(-(2.0 ** steps) * delta) >= mine * (1 - 1e-6)
        acc = get_accountant("pld", relation).compose(event)
        grid = acc._certifiable_pld(delta).get_epsilon_for_delta(delta)  # the pld, no shortcut
        assert mine <= grid * (1 + 1e-6)
    acc = get_accountant("pld", ev.ADD_OR_REMOVE_ONE).compose(ev.SelfComposedDpEvent(ev.LaplaceDpEvent(2.0), 50))
    assert mechanisms.laplace_pure_epsilon(acc._blocks[0], ev.ADD_OR_REMOVE_ONE, 1e-6) is None


def _rr_curve(p: float, k: int, steps: int):
    """The exact hockey-stick curve delta(eps) of ``steps`` randomized-response steps (mpmath, 40
    digits, over every trinomial count of steps at +g, -g and 0)."""
    from math import comb

    import mpmath

    mpmath.mp.dps = 40
    a, b = 1 - mpmath.mpf(p) + mpmath.mpf(p) / k, mpmath.mpf(p) / k
    c, g = (k - 2) * b, mpmath.log(a / b)
    masses: dict[int, object] = {}
    for i in range(steps + 1):
        for j in range(steps + 1 - i):
            masses[i - j] = masses.get(i - j, 0) + comb(steps, i) * comb(steps - i, j) * a ** i * b ** j * c ** (steps - i - j)
    return lambda eps: sum(m * (1 - mpmath.exp(mpmath.mpf(eps) - j * g)) for j, m in masses.items() if j * g > eps)


@pytest.mark.parametrize("p,k,steps,delta", [(0.5, 4, 20, 1e-6), (0.9, 2, 30, 1e-6), (0.3, 3, 7, 1e-6),
                                             (0.05, 2, 40, 1e-5), (0.99, 5, 60, 1e-9), (0.2, 2, 1, 1e-3),
                                             (0.5, 2, 3, 0.5)])
def test_randomized_response_direct_epsilon_is_exact(p, k, steps, delta):
    """A composition of randomized response alone is answered from its exact composed distribution
    (:func:`mechanisms.randomized_response_epsilon`, what the pld accountant returns): the exact curve
    (40 digits) at that epsilon is <= delta (sound) and above delta 1e-9 relative lower (tight);
    between dp-accounting's optimistic and pessimistic PLDs of the same composition."""
    from dp_accounting.pld import privacy_loss_distribution as dpa_pld

    from silodp.accounting import mechanisms
    from silodp.accounting.blocks import flatten

    event = ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(p, k), steps)
    mine = mechanisms.randomized_response_epsilon(flatten(event)[0], ev.REPLACE_ONE, delta)
    assert mine is not None and mine == epsilon(event, delta, "pld", ev.REPLACE_ONE)
    curve = _rr_curve(p, k, steps)
    assert curve(mine) <= delta and mine > 0
    assert curve(mine * (1 - 1e-9)) > delta
    low, high = (dpa_pld.from_randomized_response(p, k, value_discretization_interval=1e-4, pessimistic_estimate=pess)
                 .self_compose(steps).get_epsilon_for_delta(delta) for pess in (False, True))
    assert low - 1e-12 <= mine <= high + 1e-12


def test_randomized_response_direct_epsilon_edges():
    """No privacy loss left at a large delta: 0 (the exact curve at 0 is below delta); beyond
    RR_DIRECT_STEPS steps, or masses near underflow, the PLD answers (None here), and at the limit
    the two agree to 1e-6 relative with the direct answer never the larger."""
    from silodp.accounting import mechanisms
    from silodp.accounting.blocks import flatten

    one = flatten(ev.RandomizedResponseDpEvent(0.99, 2))[0]
    assert mechanisms.randomized_response_epsilon(one, ev.REPLACE_ONE, 0.5) == 0.0 and _rr_curve(0.99, 2, 1)(0.0) <= 0.5
    assert mechanisms.randomized_response_epsilon(one, ev.ADD_OR_REMOVE_ONE, 0.5) is None
    steps = mechanisms.RR_DIRECT_STEPS
    for count, answers in ((steps, True), (steps + 1, False)):
        block = flatten(ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(0.9, 3), count))[0]
        assert (mechanisms.randomized_response_epsilon(block, ev.REPLACE_ONE, 1e-6) is not None) == answers
    acc = get_accountant("pld", ev.REPLACE_ONE).compose(ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(0.9, 3), steps))
    direct, by_pld = acc.get_epsilon(1e-6), acc._certifiable_pld(1e-6).get_epsilon_for_delta(1e-6)
    assert by_pld * (1 - 1e-6) <= direct <= by_pld
    tiny = flatten(ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(0.7, 10), steps))[0]  # B^T < 2^-900
    assert mechanisms.randomized_response_epsilon(tiny, ev.REPLACE_ONE, 1e-12) is None
