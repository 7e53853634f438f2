"""Accountants against dp-accounting (independent implementation) and exact references."""

import math

import dp_accounting as dpa
import numpy as np
import pytest
from scipy.stats import binom, norm

from silodp.accounting import (
    ADD_OR_REMOVE_ONE,
    ACCOUNTANTS,
    ComposedDpEvent,
    EpsilonDeltaDpEvent,
    GaussianDpEvent,
    NonPrivateDpEvent,
    ParallelComposedDpEvent,
    PoissonSampledDpEvent,
    SampledWithoutReplacementDpEvent,
    SampledWithReplacementDpEvent,
    SelfComposedDpEvent,
    epsilon,
    get_accountant,
    subsampling,
    to_dp_accounting,
    zcdp,
)

NR = dpa.NeighboringRelation


def test_rdp_gaussian_matches_dp_accounting():
    ev = SelfComposedDpEvent(GaussianDpEvent(3.0), 50)
    ref = dpa.rdp.RdpAccountant().compose(to_dp_accounting(ev)).get_epsilon(1e-5)
    ours = epsilon(ev, 1e-5, "rdp", ADD_OR_REMOVE_ONE)
    assert ours == pytest.approx(ref, rel=2e-3)
    assert ours <= ref * (1 + 1e-9)  # our order grid is a superset
    # replace-one doubles the sensitivity: z = 3 there is z = 1.5 under add/remove
    half = SelfComposedDpEvent(GaussianDpEvent(1.5), 50)
    assert epsilon(ev, 1e-5, "rdp") == pytest.approx(epsilon(half, 1e-5, "rdp", ADD_OR_REMOVE_ONE), rel=1e-12)


def test_pld_poisson_add_remove_matches_dp_accounting():
    ev = SelfComposedDpEvent(PoissonSampledDpEvent(0.02, GaussianDpEvent(1.2)), 300)
    ref = dpa.pld.PLDAccountant().compose(to_dp_accounting(ev)).get_epsilon(1e-6)
    # same discretization; silodp also charges its round-off bound (~1e-9) to delta
    assert ref * (1 - 1e-6) <= epsilon(ev, 1e-6, "pld", ADD_OR_REMOVE_ONE) <= ref * (1 + 1e-4)


def test_pld_poisson_replace_one_uses_exact_replace_pld():
    """One unit (sigma / C): the same event gives dp-accounting's REPLACE_ONE epsilon."""
    ev = SelfComposedDpEvent(PoissonSampledDpEvent(0.02, GaussianDpEvent(1.2)), 300)
    ref = dpa.pld.PLDAccountant(NR.REPLACE_ONE).compose(to_dp_accounting(ev)).get_epsilon(1e-6)
    # same discretization; silodp also charges its round-off bound (~1e-9) to delta
    assert ref * (1 - 1e-6) <= epsilon(ev, 1e-6, "pld") <= ref * (1 + 1e-4)


def test_issue_example_is_no_longer_under_reported():
    """The issue's example: dp-accounting's PLD (REPLACE_ONE) says 2.84; silodp said 1.21."""
    ev = SelfComposedDpEvent(PoissonSampledDpEvent(0.01, GaussianDpEvent(1.0)), 1000)
    ref = dpa.pld.PLDAccountant(NR.REPLACE_ONE).compose(to_dp_accounting(ev)).get_epsilon(1e-5)
    assert ref == pytest.approx(2.8434, abs=1e-3)
    assert epsilon(ev, 1e-5, "pld") == pytest.approx(ref, rel=1e-4)


def test_without_replacement_is_within_dp_accounting_wang_bound():
    """Our dominating-pair accounting is sound and never looser than dp-accounting's RDP (Wang et al. 2019)."""
    ev = SelfComposedDpEvent(SampledWithoutReplacementDpEvent(1000, 20, GaussianDpEvent(2.0)), 200)
    # dp-accounting's RDP reads a replace-one multiplier against the sensitivity 2C itself: z / 2
    theirs = SelfComposedDpEvent(SampledWithoutReplacementDpEvent(1000, 20, GaussianDpEvent(1.0)), 200)
    ref = dpa.rdp.RdpAccountant(neighboring_relation=NR.REPLACE_ONE).compose(to_dp_accounting(theirs)).get_epsilon(1e-5)
    ours_rdp, ours_pld = epsilon(ev, 1e-5, "rdp"), epsilon(ev, 1e-5, "pld")
    assert ours_pld <= ours_rdp <= ref * (1 + 1e-6)
    # and never below the tight Poisson replace-one value (WOR is at least as leaky)
    poisson = SelfComposedDpEvent(PoissonSampledDpEvent(0.02, GaussianDpEvent(2.0)), 200)
    assert ours_pld >= epsilon(poisson, 1e-5, "pld")


def test_zcdp_accountant_is_prop_d2_plus_cks():
    ev = SelfComposedDpEvent(GaussianDpEvent(10.0), 20)  # replace-one: shift 2C, rho = 2 / z^2 per step
    assert epsilon(ev, 1e-5, "zcdp") == pytest.approx(zcdp.epsilon_for_rho(20 * 2 / 100.0, 1e-5))
    paper = get_accountant("zcdp", conversion="paper").compose(ev).get_epsilon(1e-5)
    assert paper == pytest.approx(zcdp.epsilon_for_rho_paper(0.4, 1e-5))
    assert epsilon(ev, 1e-5, "zcdp", ADD_OR_REMOVE_ONE) == pytest.approx(zcdp.epsilon_for_rho(20 / 200.0, 1e-5))


def test_parallel_composition_costs_one():
    one = GaussianDpEvent(2.0)
    able = [name for name in ACCOUNTANTS if get_accountant(name).supports(one)]  # the registry, iterated
    assert len(able) >= 5
    for name in able:
        assert epsilon(ParallelComposedDpEvent(one, 25), 1e-5, name) == pytest.approx(epsilon(one, 1e-5, name))


def test_advanced_is_valid_but_looser_than_pld():
    ev = SelfComposedDpEvent(GaussianDpEvent(20.0), 100)
    assert epsilon(ev, 1e-5, "pld") < epsilon(ev, 1e-5, "advanced") < epsilon(ev, 1e-5, "dwork-roth")


def test_unsupported_events_are_named():
    wr = SampledWithReplacementDpEvent(100, 10, GaussianDpEvent(1.0))
    reason = get_accountant("zcdp").unsupported_reason(wr)
    assert reason and "with-replacement" in reason
    for name in ("rdp", "pld", "advanced"):
        assert get_accountant(name).supports(wr)
    for name in ("rdp", "pld"):  # with replacement is a replace-one notion
        assert "REPLACE_ONE" in get_accountant(name, ADD_OR_REMOVE_ONE).unsupported_reason(wr)
    with pytest.raises(ValueError, match="amplification"):
        get_accountant("zcdp").compose(wr)


def test_epsilon_delta_events_compose_in_pld_and_advanced():
    ev = SelfComposedDpEvent(EpsilonDeltaDpEvent(0.1, 1e-7), 10)
    assert epsilon(ev, 1e-5, "advanced") <= 1.0 + 1e-9  # basic composition bound
    assert epsilon(ev, 1e-5, "pld") <= 1.0 + 1e-3


def test_get_delta_inverts_get_epsilon():
    ev = SelfComposedDpEvent(GaussianDpEvent(4.0), 30)
    able = [name for name in ACCOUNTANTS if get_accountant(name).supports(ev)]  # the registry, iterated
    assert len(able) >= 5
    for name in able:
        acc = get_accountant(name).compose(ev)
        e = acc.get_epsilon(1e-6)
        assert acc.get_delta(e) <= 1e-6 * 1.01


def exact_wr_delta(eps, sigma, C, m, n):
    """Monte-Carlo-free exact delta of one concrete with-replacement instance: the record contributes
    +C (dataset X) or -C (X'), all others 0. P and Q are finite Gaussian mixtures; integrate on a grid."""
    k = np.arange(0, m + 1)
    pk = binom.pmf(k, m, 1.0 / n)
    x = np.linspace(-40 * sigma - m * C, 40 * sigma + m * C, 400001)
    P = (pk[:, None] * norm.pdf(x[None, :], loc=k[:, None] * C, scale=sigma)).sum(0)
    Q = (pk[:, None] * norm.pdf(x[None, :], loc=-k[:, None] * C, scale=sigma)).sum(0)
    return np.trapezoid(np.maximum(P - math.exp(eps) * Q, 0.0), x)


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0])
def test_with_replacement_bound_dominates_a_concrete_instance(eps):
    """BBG18 Thm 10 for the Gaussian must upper-bound every pair of neighbouring datasets."""
    m, n, C, sigma = 5, 20, 1.0, 1.0
    z = sigma / (2 * C)
    bound = subsampling.with_replacement_gaussian_delta(eps, z, m, n)
    instance = exact_wr_delta(eps, sigma, C, m, n)
    assert instance <= bound
    assert instance > 0.05 * bound  # and it is not vacuous


def test_every_registered_accountant_has_its_name():
    """Registered where defined, under its own name (the built-in ones at least)."""
    assert {"gdp", "rdp", "pld", "zcdp", "advanced", "dwork-roth", "pvec", "pvec-pld"} <= set(ACCOUNTANTS)
    assert all(cls.name == name for name, cls in ACCOUNTANTS.items())


def test_with_replacement_full_size_batch_keeps_multiplicities():
    """Found by the audit: a with-replacement batch of n draws from n records (q = 1) is not the
    un-sampled Gaussian -- a record can be drawn several times. The certified epsilon at delta must
    dominate the exact divergence of the homogeneous-silo pair P = N(0, z^2), Q = sum_k P[k] N(k, z^2)."""
    z, m, n, delta = 2.0, 20, 20, 1e-5
    ev_wr = SampledWithReplacementDpEvent(n, m, GaussianDpEvent(z))
    eps = epsilon(ev_wr, delta, "advanced")
    k = np.arange(0, m + 1)
    pk = binom.pmf(k, m, 1.0 / n)
    x = np.linspace(-40 * z, m + 40 * z, 400001)
    P = norm.pdf(x, 0, z)
    Q = (pk[:, None] * norm.pdf(x[None, :], k[:, None], z)).sum(0)
    exact = max(np.trapezoid(np.maximum(P - math.exp(eps) * Q, 0), x),
                np.trapezoid(np.maximum(Q - math.exp(eps) * P, 0), x))
    assert exact <= delta
    assert eps > epsilon(GaussianDpEvent(z), delta, "advanced")


def test_pvec_accountants_are_the_p_vec_certificates():
    """pvec: the transcript certificate of the groups (both bounds); pvec-pld: the PLD alone;
    both refuse Gaussian steps and add/remove, and their supports() never raises."""
    import dataclasses

    from silodp.accounting import PvecDpEvent, pvec
    from silodp.accounting.events import ADD_OR_REMOVE_ONE, REPLACE_ONE
    from silodp.accounting.releases import BatchSampling, ShuffleRelease, pvec_event, pvec_groups

    releases = [ShuffleRelease("grad", 6, 1.0, 1e-7, BatchSampling.WITH_REPLACEMENT, 10, 200, 30, 1.0, (6, 40, 0.5, True), 8),
                ShuffleRelease("diff", 4, 1.0, 1e-7, BatchSampling.SHUFFLED, 50, 200, 30, 1.0, (6, 90, 0.5, False), 8)]
    event, groups, h = pvec_event(releases), pvec_groups(releases), 1e-4
    assert [g.uses for g in groups] == [6, 1] and groups[0].with_replacement and groups[0].l2 is not None
    both = get_accountant("pvec", REPLACE_ONE, value_discretization_interval=h).compose(event).get_epsilon(1e-6)
    alone = get_accountant("pvec-pld", REPLACE_ONE, value_discretization_interval=h).compose(event).get_epsilon(1e-6)
    assert both == pvec.transcript_epsilon(groups, 1e-6, h)
    assert alone == pvec.transcript_epsilon(tuple(dataclasses.replace(g, l2=None) for g in groups), 1e-6, h)
    assert both <= alone
    for name in ("pvec", "pvec-pld"):
        acc = get_accountant(name, REPLACE_ONE)
        assert not acc.supports(GaussianDpEvent(1.0)) and not acc.supports(object())
        assert not get_accountant(name, ADD_OR_REMOVE_ONE).supports(event)
        assert acc.supports(ComposedDpEvent([event, NonPrivateDpEvent()]))
        assert acc.compose(NonPrivateDpEvent()).get_epsilon(1e-6) == math.inf
    for name in ("gdp", "rdp", "pld", "advanced"):  # the Gaussian accountants refuse P_vec invocations
        assert not get_accountant(name, REPLACE_ONE).supports(PvecDpEvent(4, 1, 1, 1))
    with pytest.raises(ValueError, match="PvecDpEvent.trials"):
        PvecDpEvent(4, 0, 1, 1)
    with pytest.raises(ValueError, match="PvecDpEvent.l2_shift"):
        PvecDpEvent(4, 1, 1, 1, math.inf)


def test_the_default_certificate_reads_each_class_candidacy():
    """candidate_accountants: gdp alone when exact, else pld and rdp, advanced added for sampling
    with replacement (class attributes, no names in the calibration)."""
    from silodp.accounting import candidate_accountants
    from silodp.accounting.events import REPLACE_ONE

    step = GaussianDpEvent(1.0)
    assert candidate_accountants(SelfComposedDpEvent(step, 3)) == ["gdp"]
    assert candidate_accountants(PoissonSampledDpEvent(0.1, step)) == ["pld", "rdp"]
    assert candidate_accountants(SampledWithReplacementDpEvent(100, 10, step), REPLACE_ONE) == ["pld", "rdp", "advanced"]
    assert candidate_accountants(EpsilonDeltaDpEvent(1.0, 1e-6)) == ["pld"]  # rdp has no (eps, delta) events
