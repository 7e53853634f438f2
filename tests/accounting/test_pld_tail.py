"""The upper-window composition of a lone Laplace block (:func:`silodp.accounting.pld.tail_self_compose`,
the pld accountant's first path for it): its epsilon against dp-accounting's pessimistic PLD (above
by at most 1e-5 relative) and its optimistic PLD (a lower reference: never below it), the pure bound
T eps0 (never above it); its hockey-stick curve equal to the whole composition's above the floor
within both charges; the fallback where the floor guess is too high; and the binary powering the
FFT path now uses, within the round-off bound it is charged."""

import logging
import math

import numpy as np
import pytest
import dp_accounting as dpa
from dp_accounting.pld import privacy_loss_distribution as dpa_pld

from silodp.accounting import events as ev, pld
from silodp.accounting.accountants import epsilon
from silodp.accounting.accountants.pld import PldAccountant

AR = ev.ADD_OR_REMOVE_ONE
#: (scale b, steps, delta): the benchmark's two rows and three held out (the last one answered by
#: the least-charge tilt: the shorter circle's charge is above 1e-3 delta there)
CASES = [(2.0, 50, 1e-6), (10.0, 400, 1e-6), (20.0, 1000, 1e-9), (3.0, 200, 1e-5), (2.0, 50, 1e-9)]


def _accountant(b: float, steps: int) -> PldAccountant:
    acc = PldAccountant(AR)
    acc.compose(ev.SelfComposedDpEvent(ev.LaplaceDpEvent(b), steps))
    return acc


@pytest.mark.parametrize("b,steps,delta", CASES)
def test_tail_epsilon_between_dp_accountings_optimistic_and_pessimistic(b, steps, delta):
    logging.disable(logging.WARNING)  # dp-accounting's notice on optimistic PLDs
    acc = _accountant(b, steps)
    tail = acc._tail_epsilon(delta)
    assert tail is not None  # the path under test answers these
    assert epsilon(ev.SelfComposedDpEvent(ev.LaplaceDpEvent(b), steps), delta, "pld", AR) == tail
    one = dict(value_discretization_interval=1e-4)
    upper = dpa_pld.from_laplace_mechanism(b, **one).self_compose(steps).get_epsilon_for_delta(delta)
    lower = dpa_pld.from_laplace_mechanism(b, pessimistic_estimate=False, **one).self_compose(
        steps).get_epsilon_for_delta(delta)
    assert lower * (1 - 1e-9) <= tail <= upper * (1 + 1e-5)
    assert tail <= steps / b  # the pure bound (Dwork & Roth 2014, Thm 3.16)


@pytest.mark.parametrize("b,steps,delta", CASES[:3])
def test_tail_curve_is_the_whole_compositions_above_the_floor(b, steps, delta):
    acc = _accountant(b, steps)
    one = acc._step(acc._blocks[0]).remove
    floor = pld.tail_floor(one, steps, delta)
    tail = pld.tail_self_compose(one, steps, pld.LOG_TAIL_MASS, floor)
    whole = one.self_compose(steps, pld.LOG_TAIL_MASS)
    assert tail is not None and tail.offset * tail.interval >= floor
    # each curve is off the exact one by its round-off and adds it as a charge, and each cuts tails of
    # at most e^bound a side: the curves agree within twice the round-offs and those tails
    slack = 2.0 * (tail.roundoff + whole.roundoff) + 4.0 * math.exp(pld.LOG_TAIL_MASS)
    eps_at = whole.epsilon(delta)
    for e in np.linspace(tail.offset * tail.interval, eps_at + 1.0, 7):
        assert abs(tail.delta(e) - whole.delta(e)) <= slack + 1e-9 * whole.delta(e)
    for e in (0.0, 0.5 * floor):  # below the floor the tail PMF is pessimistic (mass moved up)
        assert tail.delta(e) >= whole.delta(e) - slack


@pytest.mark.parametrize("b,steps,delta", [(4.0, 50, 1e-6), (1.0, 100, 1e-5), (50.0, 3000, 1e-8)])
def test_replace_one_tail_against_dp_accounting_at_sensitivity_two(b, steps, delta):
    """Under replace-one the l1 shift is 2C (dp-accounting's Laplace PLD at sensitivity 2)."""
    logging.disable(logging.WARNING)
    acc = PldAccountant(ev.REPLACE_ONE)
    acc.compose(ev.SelfComposedDpEvent(ev.LaplaceDpEvent(b), steps))
    tail = acc._tail_epsilon(delta)
    assert tail is not None
    one = dict(sensitivity=2.0, value_discretization_interval=1e-4)
    upper = dpa_pld.from_laplace_mechanism(b, **one).self_compose(steps).get_epsilon_for_delta(delta)
    lower = dpa_pld.from_laplace_mechanism(b, pessimistic_estimate=False, **one).self_compose(
        steps).get_epsilon_for_delta(delta)
    assert lower * (1 - 1e-9) <= tail <= upper * (1 + 1e-5)


def test_least_charge_tilt_where_the_shorter_circle_charges_too_much():
    acc = _accountant(2.0, 50)
    one = acc._step(acc._blocks[0]).remove
    floor = pld.tail_floor(one, 50, 1e-9)
    short = pld.tail_self_compose(one, 50, pld.LOG_TAIL_MASS, floor)
    least = pld.tail_self_compose(one, 50, pld.LOG_TAIL_MASS, floor, steeper=False)
    assert short is not None and least is not None
    assert least.roundoff <= PldAccountant.DIRECT_SHARE * 1e-9 < short.roundoff


def test_floor_above_the_answer_falls_back_to_the_whole_composition(monkeypatch):
    acc = _accountant(2.0, 50)
    whole = acc._certifiable_pld(1e-6).get_epsilon_for_delta(1e-6)
    monkeypatch.setattr(pld, "TAIL_FLOOR_FACTOR", 1e-6)  # a floor far above epsilon
    assert acc._tail_epsilon(1e-6) is None
    assert epsilon(ev.SelfComposedDpEvent(ev.LaplaceDpEvent(2.0), 50), 1e-6, "pld", AR) == whole


def test_no_tail_where_delta_is_large():
    """At delta >= 1 / TAIL_FLOOR_FACTOR no floor is guessed (the bound would sit below the bulk):
    the whole composition answers."""
    acc = _accountant(2.0, 50)
    one = acc._step(acc._blocks[0]).remove
    assert pld.tail_floor(one, 50, 0.1) == -math.inf
    assert pld.tail_self_compose(one, 50, pld.LOG_TAIL_MASS, -math.inf) is None
    assert acc._tail_epsilon(0.1) is None
    assert acc.get_epsilon(0.1) == acc._certifiable_pld(0.1).get_epsilon_for_delta(0.1)


@pytest.mark.parametrize("count", [1, 2, 7, 99, 100, 400, 1023, 300_000])
def test_binary_powering_within_the_charged_bound(count):
    rng = np.random.default_rng(count)
    z = rng.uniform(0.9, 1.0, 2000) ** (1.0 / count) * np.exp(1j * rng.uniform(-math.pi, math.pi, 2000))
    got = pld._int_power(z, count)
    exact = np.exp(count * np.log(z.astype(np.clongdouble)))  # extended precision reference
    bound = 4.0 * pld._U * (count * (np.abs(np.log(np.abs(z))) + 2.0 * math.pi) + 2.0) * np.abs(z) ** count
    assert np.all(np.abs(got - exact) <= bound)


#: (q, noise multiplier, steps, delta): the mechanism benchmark's two thin Poisson rows and three held
#: out, all at deltas no plain float64 pass certifies (below T 32u / DIRECT_SHARE)
POISSON = [(0.05, 3.0, 2000, 1e-8), (0.25, 2.0, 80, 1e-10), (0.1, 1.5, 500, 1e-9), (0.5, 5.0, 100, 1e-11),
           (0.02, 0.8, 3000, 1e-10)]


def _poisson(q: float, z: float, steps: int, relation: ev.NeighboringRelation) -> PldAccountant:
    acc = PldAccountant(relation)
    acc.compose(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps))
    return acc


@pytest.mark.parametrize("relation", [AR, ev.REPLACE_ONE], ids=["ar", "replace"])
@pytest.mark.parametrize("q,z,steps,delta", POISSON)
def test_poisson_gaussian_tail_between_dp_accounting_plds_and_the_whole_composition(q, z, steps, delta, relation):
    """A lone self-composed Poisson Gaussian block at small delta answers from its upper window: above
    dp-accounting's optimistic PLD, at most two grid steps (2e-4, the two libraries' discretizations
    differ) above its pessimistic one, and never below the whole composition's epsilon by more than
    that composition's charges (its delta at our epsilon within delta + its round-off and cut tails)."""
    logging.disable(logging.WARNING)
    acc = _poisson(q, z, steps, relation)
    tail = acc._tail_epsilon(delta)
    assert tail is not None  # the path under test answers these
    assert acc.get_epsilon(delta) == tail
    dpa_relation = {AR: dpa.NeighboringRelation.ADD_OR_REMOVE_ONE, ev.REPLACE_ONE: dpa.NeighboringRelation.REPLACE_ONE}[relation]

    def theirs(pessimistic: bool) -> float:
        one = dpa_pld.from_gaussian_mechanism(z, sampling_prob=q, value_discretization_interval=1e-4,
                                              pessimistic_estimate=pessimistic, use_connect_dots=pessimistic,
                                              neighboring_relation=dpa_relation)
        return one.self_compose(steps).get_epsilon_for_delta(delta)

    assert theirs(False) * (1 - 1e-9) <= tail <= theirs(True) + 2e-4
    whole = acc._certifiable_pld(delta)  # its charges: round-off and the tails it cut, both at +inf
    charges = max(p.charged_infinity for p in whole._directions())
    assert whole.get_delta_for_epsilon(tail) <= delta + 1.01 * charges


@pytest.mark.parametrize("q,z,steps,delta", [(0.01, 1.0, 1000, 1e-5), (1e-4, 1.0, 100, 1e-12), (0.01, 1.0, 100, 1e-12)])
def test_poisson_gaussian_tail_not_taken_at_large_delta_or_few_sampled_steps(q, z, steps, delta):
    """At delta 1e-5 (above T 32u / DIRECT_SHARE), or with q T below TAIL_MIN_SAMPLED (its floor guess
    lies above epsilon there), the whole composition answers, as before."""
    acc = _poisson(q, z, steps, AR)
    assert acc._tail_epsilon(delta) is None
    assert acc.get_epsilon(delta) == acc._certifiable_pld(delta).get_epsilon_for_delta(delta)


def test_tail_bins_keep_the_coarse_shift_of_a_long_sum_small():
    """The default 256 blocks move a 2000-step Gaussian sum's losses up by about 5 (its floor then lies
    far above epsilon); :func:`pld.tail_bins` keeps the shift within TAIL_SHIFT."""
    acc = _poisson(0.05, 3.0, 2000, AR)
    one = acc._step(acc._blocks[0]).remove
    bins = pld.tail_bins(one, 2000)
    width = len(one.masses) * one.interval / min(bins, len(one.masses))
    assert 2000 * width <= pld.TAIL_SHIFT * (1 + 1e-12)
    assert pld.tail_floor(one, 2000, 1e-8, bins) < acc._certifiable_pld(1e-8).remove.epsilon(1e-8)
    assert pld.tail_floor(one, 2000, 1e-8) > acc._certifiable_pld(1e-8).remove.epsilon(1e-8)
