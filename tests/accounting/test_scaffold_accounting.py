"""DP-SCAFFOLD accounting (silodp.accounting.scaffold) against independent references:
dp-accounting's own PLD and RDP accountants, the analytic Gaussian, and a brute-force average over
the number of rounds a user takes part in."""

import json
import math

import numpy as np
import pytest
from dp_accounting import dp_event, rdp
from dp_accounting.pld import privacy_loss_distribution as pld_lib
from scipy import stats

from silodp.accounting import (
    ACCOUNTANTS,
    REPLACE_ONE,
    GaussianDpEvent,
    LabelledMixtureDpEvent,
    NoOpDpEvent,
    NonPrivateDpEvent,
    delta,
    epsilon,
    gaussian,
    get_accountant,
)
from silodp.accounting.scaffold import (
    ScaffoldConfig,
    aggregation_groups,
    certified_epsilon,
    mixture_event,
    noise_report,
    paper_sigma_g,
    scaffold_sigma_g,
    server_event,
)

DELTA = 1e-5
CFG = ScaffoldConfig(num_users=20, records_per_user=200, rounds=20, local_steps=10, user_sampling=0.3,
                     data_sampling=0.1, clip=1.0)


@pytest.mark.parametrize("field,value", [("num_users", 0), ("records_per_user", 1.5), ("rounds", -1),
                                         ("local_steps", 0), ("user_sampling", 0.0), ("user_sampling", 1.2),
                                         ("data_sampling", 0.0), ("clip", -1.0), ("warm_steps", -1)])
def test_bad_config_raises_naming_the_argument(field, value):
    kw = dict(num_users=5, records_per_user=50, rounds=3, local_steps=2)
    kw[field] = value
    with pytest.raises(ValueError, match=field):
        ScaffoldConfig(**kw)


def test_batch_size_and_noise_std():
    assert CFG.batch_size == 20 and CFG.steps == 200
    assert CFG.noise_std(3.0) == pytest.approx(3.0 * 2 * 1.0 / 20)
    assert ScaffoldConfig(1, 7, 1, 1, data_sampling=0.01).batch_size == 1  # at least one record


def test_server_worst_case_matches_dp_accounting_pld_and_rdp():
    """K T Gaussian steps on batches drawn without replacement: silodp's epsilon equals the
    symmetric pair whose curve is dp-accounting's Poisson PLD at shift 2C, q = m/n (the larger of its
    two directions, to 1e-9 at every grid point), composed, within 0.5%; it is at least
    dp-accounting's direction-by-direction composition (what was charged before, within 20% of it
    here), and dp-accounting's RDP of the Poisson pair stays within 1.3x of it."""
    import numpy as np

    sigma = 2.0
    ours = certified_epsilon(CFG, sigma, DELTA)
    q = CFG.batch_size / CFG.records_per_user
    direct = pld_lib.from_gaussian_mechanism(sigma, sampling_prob=q, value_discretization_interval=1e-4)
    curve = lambda eps: np.array([direct.get_delta_for_epsilon(float(e)) for e in eps]) * (1 + 1e-9)  # noqa: E731
    from silodp.accounting import pld as ours_pld, pld_pairs

    sym = ours_pld.PrivacyLossDistribution(pld_pairs.symmetric_loss_pmf(curve, 12.0, 1e-3, stride=8), None)
    assert ours == pytest.approx(sym.self_compose(CFG.steps).get_epsilon_for_delta(DELTA), rel=5e-3)
    apart = direct.self_compose(CFG.steps).get_epsilon_for_delta(DELTA)
    assert apart * (1 - 5e-3) <= ours <= 1.2 * apart
    acc = rdp.RdpAccountant()
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), CFG.steps))
    assert ours / 1.3 <= acc.get_epsilon(DELTA) <= 1.3 * ours


def test_calibration_is_certified_and_tight():
    cal = scaffold_sigma_g(CFG, 2.0, DELTA)
    assert cal.epsilon <= 2.0 and certified_epsilon(CFG, cal.sigma_g, DELTA) <= 2.0 + 1e-9
    assert certified_epsilon(CFG, 0.97 * cal.sigma_g, DELTA) > 2.0  # within 3% of the smallest noise
    third = scaffold_sigma_g(CFG, 2.0, DELTA, against="third-party")
    assert third.epsilon <= 2.0 and certified_epsilon(CFG, 0.97 * third.sigma_g, DELTA, "third-party") > 2.0
    small = ScaffoldConfig(num_users=4, records_per_user=50, rounds=3, local_steps=2, user_sampling=0.5)
    both = scaffold_sigma_g(small, 2.0, DELTA, against="both")
    assert both.against == "both"
    assert both.sigma_g == max(scaffold_sigma_g(small, 2.0, DELTA, a).sigma_g for a in ("server", "third-party"))


def test_orderings_server_worst_case_expected_third_party():
    sigma = 1.5
    worst = certified_epsilon(CFG, sigma, DELTA)
    expected = certified_epsilon(CFG, sigma, DELTA, participation="expected")
    third = certified_epsilon(CFG, sigma, DELTA, "third-party")
    assert third < expected < worst


def test_expected_participation_is_the_binomial_average():
    """delta(eps) of the labelled mixture equals sum_J Bin(J; T, l) delta_{K J steps}(eps), computed
    here composition by composition (no mixture code)."""
    cfg = ScaffoldConfig(num_users=1, records_per_user=10, rounds=6, local_steps=2, user_sampling=0.3, data_sampling=0.5)
    sigma, eps = 1.2, 1.0
    ours = delta(mixture_event(cfg, sigma, "server"), eps, "pld", REPLACE_ONE, value_discretization_interval=1e-4)
    from silodp.accounting import pld_pairs  # the step: the symmetric without-replacement pair

    step = pld_pairs.from_without_replacement_gaussian(2 * sigma, 0.5, value_discretization_interval=1e-4)
    brute = sum(stats.binom.pmf(j, cfg.rounds, cfg.user_sampling) * step.self_compose(cfg.local_steps * j).get_delta_for_epsilon(eps)
                for j in range(1, cfg.rounds + 1))
    assert ours == pytest.approx(brute, rel=2e-2)
    assert ours >= brute * (1 - 1e-3)  # pessimistic


def test_single_user_third_party_is_exact_and_refutes_sampling_amplification():
    """One user, one step, no data sampling: the third party sees x unchanged (w.p. 1 - l) or a
    Gaussian, so delta(eps) = l delta_G(eps) exactly (analytic Gaussian, Balle-Wang). The usual
    amplified claim log(1 + l (e^eps0 - 1)) with eps0 = eps_G(delta / l) is smaller than the truth."""
    cfg = ScaffoldConfig(num_users=1, records_per_user=5, rounds=1, local_steps=1, user_sampling=0.2)
    sigma = 1.0
    truth = gaussian.epsilon_for_delta(sigma, DELTA / cfg.user_sampling)
    ours = certified_epsilon(cfg, sigma, DELTA, "third-party", value_discretization_interval=1e-4)
    assert truth * (1 - 1e-6) <= ours <= truth * 1.01
    amplified = math.log1p(cfg.user_sampling * math.expm1(truth))
    assert amplified < 0.7 * truth  # the amplified claim would understate epsilon by ~40% here


def test_full_participation_third_party_is_the_aggregated_gaussian():
    """l = 1: every round aggregates all M users, so the third party's account is exactly the
    server's at multiplier sigma_g sqrt(M)."""
    cfg = ScaffoldConfig(num_users=8, records_per_user=100, rounds=5, local_steps=4, user_sampling=1.0, data_sampling=0.2)
    assert aggregation_groups(cfg) == {8: 1.0}
    third = certified_epsilon(cfg, 0.6, DELTA, "third-party", value_discretization_interval=1e-4)
    server = certified_epsilon(cfg, 0.6 * math.sqrt(8), DELTA, value_discretization_interval=1e-4)
    assert third == pytest.approx(server, rel=1e-3)


def test_aggregation_bins_are_conservative():
    cfg = ScaffoldConfig(num_users=60, records_per_user=100, rounds=5, local_steps=4, user_sampling=0.25)
    groups = aggregation_groups(cfg, groups=8)
    assert len(groups) <= 9 and sum(groups.values()) == pytest.approx(1.0)
    # each bin's weight sits at its smallest size: the binned CDF dominates the true one
    sizes = np.arange(1, 61)
    cdf = stats.binom.cdf(sizes - 1, 59, 0.25)
    binned = np.array([sum(w for s, w in groups.items() if s <= k) for k in sizes])
    assert np.all(binned >= cdf - 1e-12)
    eps = {g: epsilon(mixture_event(cfg, 0.8, "third-party", groups=g), DELTA, "pld", REPLACE_ONE,
                      value_discretization_interval=1e-3) for g in (8, 16, 60)}
    assert eps[60] <= eps[16] <= eps[8]  # 60 groups: one bin per size, exact
    assert eps[16] <= 1.06 * eps[60]  # the default binning costs a few percent


def test_warm_start_adds_its_steps():
    warm = ScaffoldConfig(**{**vars(CFG), "warm_steps": 10})
    event = server_event(warm, 2.0)
    assert event.count == CFG.steps + 10
    assert certified_epsilon(warm, 2.0, DELTA) > certified_epsilon(CFG, 2.0, DELTA)
    assert certified_epsilon(warm, 2.0, DELTA, "third-party") > certified_epsilon(CFG, 2.0, DELTA, "third-party")


def test_paper_formula_as_in_the_authors_code():
    """sigma_g = 4 l s sqrt(K T ln(2 T l / delta) ln(2 / delta)) / eps, at the parameters of the
    authors' get_epsilon_bound.py (T=100, K=5, M=100, R=4000, l=0.05, s=0.2, delta=1/(M R))."""
    cfg = ScaffoldConfig(num_users=100, records_per_user=4000, rounds=100, local_steps=5, user_sampling=0.05,
                         data_sampling=0.2)
    delta = 1 / (100 * 4000)
    by_hand = 4 * 0.05 * 0.2 * math.sqrt(5 * 100 * math.log(2 * 100 * 0.05 * 4e5) * math.log(2 * 4e5)) / 3.0
    assert paper_sigma_g(cfg, 3.0, delta) == pytest.approx(by_hand, rel=1e-12)
    with pytest.raises(ValueError, match="delta"):
        paper_sigma_g(ScaffoldConfig(1, 10, 1, 1, user_sampling=0.01), 1.0, 0.5)


def test_noise_report_keys_and_consistency():
    r = noise_report(3.0, DELTA, 10, 100, 10, 5, 0.5, 0.2, clip=0.5)
    for key in ("sigma_g_server", "sigma_g_third_party", "sigma_g_paper", "epsilon_server", "epsilon_third_party"):
        assert key in r and r[key] > 0
    assert r["epsilon_server"] <= 3.0 and r["epsilon_third_party"] <= 3.0
    assert r["sigma_g_third_party"] < r["sigma_g_server"] == r["sigma_g"]
    assert r["noise_std"] == pytest.approx(r["sigma_g"] * 2 * 0.5 / 20)
    # the server-calibrated noise is more than enough toward the third party
    assert r["epsilon_third_party_at_sigma_g_server"] < 3.0
    json.dumps(r)  # JSON-friendly (silodp noise --json)


@pytest.mark.parametrize("kwargs,arg", [({"against": "everyone"}, "against"),
                                        ({"participation": "sometimes"}, "participation"),
                                        ({"against": "third-party", "accountant": "rdp"}, "accountant")])
def test_bad_choices_raise_naming_the_argument(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        scaffold_sigma_g(CFG, 1.0, DELTA, **kwargs)


@pytest.mark.parametrize("weights,events,field", [
    ((0.5, 0.6), (NoOpDpEvent(), GaussianDpEvent(1.0)), "weights"),  # do not sum to 1
    ((-0.5, 1.5), (NoOpDpEvent(), GaussianDpEvent(1.0)), "weights"),
    ((1.0,), (NoOpDpEvent(), GaussianDpEvent(1.0)), "weights"),  # one weight for two events
    ((), (), "weights"),
    ((1.0,), ("gaussian",), "events"),
    ("1", (GaussianDpEvent(1.0),), "weights"),
])
def test_labelled_mixture_event_is_validated(weights, events, field):
    with pytest.raises(ValueError, match=f"LabelledMixtureDpEvent.{field}"):
        LabelledMixtureDpEvent(weights, events)


def test_only_accountants_allow_listing_the_mixture_certify_it():
    """The mixture is a privacy event: pld certifies it (one component of weight 1 is that
    component, up to the mixing's round-off charge); every other registered accountant refuses it (fail closed), and so does
    pld when a component is non-private; certified_epsilon asks supports(), not the name."""
    mix = mixture_event(CFG, 1.0, "third-party")
    assert get_accountant("pld", REPLACE_ONE).supports(mix)
    for name in sorted(ACCOUNTANTS):
        if name != "pld":
            assert not get_accountant(name, REPLACE_ONE).supports(mix), name
    step = server_event(CFG, 1.0)
    alone = LabelledMixtureDpEvent((1.0,), (step,))
    mixed, plain = epsilon(alone, DELTA, "pld", REPLACE_ONE), epsilon(step, DELTA, "pld", REPLACE_ONE)
    assert plain <= mixed <= plain * (1 + 1e-9)  # the mixing's round-off charge only
    assert not get_accountant("pld", REPLACE_ONE).supports(LabelledMixtureDpEvent((0.5, 0.5), (step, NonPrivateDpEvent())))
    with pytest.raises(ValueError, match="accountant: 'rdp' does not certify"):
        certified_epsilon(CFG, 1.0, DELTA, "server", "expected", accountant="rdp")


def test_mixture_event_certifies_what_the_direct_pld_mixture_did():
    """The pld accountant's certificate of :func:`mixture_event` is the one the PLD mixture code
    computed directly before the mixture became an event (rebuilt here), to 1e-12 relative: the
    accountant composes its blocks in a balanced tree (silodp.accounting.pld_tree), another order
    of the same exact compositions."""
    from silodp.accounting import pld as ours, pld_pairs

    cfg = ScaffoldConfig(num_users=6, records_per_user=40, rounds=3, local_steps=2, user_sampling=0.4,
                         data_sampling=0.25, warm_steps=2)
    sigma, disc, q = 0.9, 1e-3, cfg.batch_size / cfg.records_per_user

    def steps(z, count):
        return pld_pairs.from_without_replacement_gaussian(2 * z, q, disc).self_compose(count)

    parts = [(cfg.user_sampling * w, steps(sigma * math.sqrt(size), cfg.local_steps))
             for size, w in sorted(aggregation_groups(cfg).items())]
    parts.append((1.0 - sum(w for w, _ in parts), ours.identity(disc)))
    direct = ours.mixture(parts).self_compose(cfg.rounds).compose(steps(sigma, cfg.warm_steps))
    assert certified_epsilon(cfg, sigma, DELTA, "third-party", value_discretization_interval=disc) \
        == pytest.approx(direct.get_epsilon_for_delta(DELTA), rel=1e-12)
