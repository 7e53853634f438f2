"""Calibration: certified <= target, within 1%, and close to dp-accounting's own calibration."""

import dp_accounting as dpa
import pytest
from dp_accounting import mechanism_calibration
from hypothesis import given, settings, strategies as st

from silodp.accounting import (
    to_dp_accounting,
    ACCOUNTANTS,
    ADD_OR_REMOVE_ONE,
    GaussianDpEvent,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
    calibrate,
    epsilon,
    get_accountant,
)


def poisson_fn(q, steps):
    return lambda z: SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)


@pytest.mark.parametrize("accountant", sorted(ACCOUNTANTS))
def test_certified_within_one_percent_below_target(accountant):
    """Every registered accountant (the registry iterated, no name list): on the subsampled
    Gaussian where it certifies one, else on plain Gaussian steps; those of other primitives
    (P_vec) certify neither and have no noise multiplier to calibrate."""
    acc = get_accountant(accountant)
    fn = next((f for f in (poisson_fn(0.05, 100), lambda z: SelfComposedDpEvent(GaussianDpEvent(z), 20))
               if acc.supports(f(1.0))), None)
    if fn is None:
        assert not acc.supports(GaussianDpEvent(1.0))
        return
    cal = calibrate(fn, 2.0, 1e-5, accountant)
    recheck = epsilon(fn(cal.noise_multiplier), 1e-5, accountant)
    assert 0.99 * 2.0 <= cal.epsilon <= 2.0
    assert recheck <= 2.0 * (1 + 1e-9)


def test_pld_calibration_close_to_dp_accounting():
    fn = poisson_fn(0.01, 500)
    ours = calibrate(fn, 1.0, 1e-5, "pld", ADD_OR_REMOVE_ONE).noise_multiplier
    theirs = lambda z: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(0.01, dpa.GaussianDpEvent(z)), 500)  # noqa: E731
    ref = mechanism_calibration.calibrate_dp_mechanism(dpa.pld.PLDAccountant, theirs, 1.0, 1e-5)
    assert ours == pytest.approx(ref, rel=5e-3)
    assert ours >= ref * (1 - 1e-4)  # rounded toward more privacy


def test_unreachable_budget_is_a_clear_error():
    with pytest.raises(ValueError, match="unreachable|cannot"):
        calibrate(poisson_fn(1.0, 10 ** 6), 1e-9, 1e-5, "rdp")


def test_unsupported_accountant_is_reported():
    with pytest.raises(ValueError, match="zcdp"):
        calibrate(poisson_fn(0.1, 10), 1.0, 1e-5, "zcdp")


@settings(max_examples=15, deadline=None)
@given(st.floats(0.2, 10), st.sampled_from([1e-3, 1e-6, 1e-10]), st.integers(1, 2000))
def test_calibrate_then_account_is_within_target(eps, delta, steps):
    fn = lambda z: SelfComposedDpEvent(GaussianDpEvent(z), steps)
    cal = calibrate(fn, eps, delta, "rdp")
    assert epsilon(fn(cal.noise_multiplier), delta, "rdp") <= eps * (1 + 1e-9)


@pytest.mark.parametrize("relation", ["ADD_OR_REMOVE_ONE", "REPLACE_ONE"])
@pytest.mark.parametrize("q,z,steps,delta", [(0.25, 2.0, 80, 1e-10), (0.05, 3.0, 2000, 1e-8), (0.01, 0.3, 50, 1e-5)])
def test_tightest_epsilon_skips_rdp_only_where_it_cannot_win(monkeypatch, relation, q, z, steps, delta):
    """tightest_epsilon skips rdp when its floor is above pld's certificate: the answer is the same
    pair (epsilon, accountant) as with every candidate computed (floors turned off), and rdp is
    skipped only where its certificate is above the answer."""
    from silodp.accounting import events as ev, tightest_epsilon
    from silodp.accounting.accountants.rdp import RdpAccountant

    rel = ev.NeighboringRelation[relation]
    event = SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)
    computed = []
    real = RdpAccountant._epsilon
    monkeypatch.setattr(RdpAccountant, "_epsilon", lambda self, d: computed.append(1) or real(self, d))
    fast = tightest_epsilon(event, delta, rel)
    monkeypatch.setattr(RdpAccountant, "epsilon_floor", lambda self, d: 0.0)
    assert tightest_epsilon(event, delta, rel) == fast
    rdp_eps = get_accountant("rdp", rel).compose(event).get_epsilon(delta)
    assert computed or fast[0] < rdp_eps


def test_tightest_epsilon_composes_each_candidate_once_as_candidate_accountants_chooses():
    """The candidates tightest_epsilon composes (asked once each: composing is supports' walk) are
    candidate_accountants' choice on every kind of event, and the refusal names every reason."""
    from silodp.accounting import events as ev
    from silodp.accounting.calibration import _composed_candidates, candidate_accountants, tightest_epsilon

    g = ev.GaussianDpEvent(2.0)
    events = [(ev.SelfComposedDpEvent(g, 3), ev.ADD_OR_REMOVE_ONE),
              (ev.PoissonSampledDpEvent(0.1, g), ev.ADD_OR_REMOVE_ONE),
              (ev.SampledWithReplacementDpEvent(100, 10, g), ev.REPLACE_ONE),
              (ev.EpsilonDeltaDpEvent(1.0, 1e-7), ev.ADD_OR_REMOVE_ONE),
              (ev.SelfComposedDpEvent(ev.RandomizedResponseDpEvent(0.5, 4), 20), ev.REPLACE_ONE),
              (ev.DiscreteLaplaceDpEvent(0.3, 2), ev.ADD_OR_REMOVE_ONE),
              (ev.ZCDpEvent(0.1), ev.ADD_OR_REMOVE_ONE),
              (ev.LabelledMixtureDpEvent([0.5, 0.5], [g, ev.NoOpDpEvent()]), ev.ADD_OR_REMOVE_ONE),
              (ev.ComposedDpEvent([g, ev.LaplaceDpEvent(3.0)]), ev.ADD_OR_REMOVE_ONE)]
    for event, relation in events:
        names = [a.name for a in _composed_candidates(event, relation)]
        assert names == candidate_accountants(event, relation), event
        assert all(len(a) == len(get_accountant(a.name, relation).compose(event)) for a in _composed_candidates(event, relation))
    refused = ev.RandomizedResponseDpEvent(0.5, 4)  # replace-one only
    with pytest.raises(ValueError, match="no accountant certifies it.*pld: randomized response"):
        tightest_epsilon(refused, 1e-6, ev.ADD_OR_REMOVE_ONE)
