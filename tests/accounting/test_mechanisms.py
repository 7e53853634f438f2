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
