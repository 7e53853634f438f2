"""Composing a ledger of many releases: identical releases grouped, distinct ones merged in a
balanced tree (silodp.accounting.pld_tree). The tree certifies what the sequential order does
(the same epsilon to the grid's resolution) and stays above dp-accounting's PLD of the same
releases (an independent reference), for distinct, repeated and mixed ledgers."""

import dp_accounting as dpa
import numpy as np
import pytest

from silodp.accounting import ADD_OR_REMOVE_ONE, ComposedDpEvent, GaussianDpEvent, PoissonSampledDpEvent
from silodp.accounting import pld as pld_lib, pld_pairs
from silodp.accounting.accountants import get_accountant
from silodp.accounting.blocks import Block, Mechanism, Sampling
from silodp.accounting.pld_tree import compose_tree, grouped

DELTA = 1e-5


def _ledger(zs, q=0.02):
    return ComposedDpEvent([PoissonSampledDpEvent(q, GaussianDpEvent(z)) for z in zs])


def _dpa_epsilon(zs, q=0.02):
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    for z in zs:
        acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)))
    return acc.get_epsilon(DELTA)


@pytest.mark.parametrize("zs", [[0.9 + 0.05 * i for i in range(12)],  # distinct
                                [1.1] * 5 + [0.8] * 3 + [1.1] * 4,     # repeated, interleaved
                                [1.3, 0.7]])
def test_tree_certifies_what_the_sequential_order_does(zs):
    acc = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(_ledger(zs))
    tree = acc.get_epsilon(DELTA)
    blocks = acc._blocks
    sequential = None
    for b in blocks:
        p = acc._block_pld(b)
        sequential = p if sequential is None else sequential.compose(p)
    seq = sequential.get_epsilon_for_delta(DELTA)
    assert tree == pytest.approx(seq, rel=2e-3, abs=2e-4)
    reference = _dpa_epsilon(zs)
    assert tree >= reference * (1 - 1e-3)  # pessimistic, as dp-accounting's
    assert tree <= reference * 1.01 + 1e-3


def test_identical_releases_are_grouped_in_order_of_first_appearance():
    a = Block(Mechanism.GAUSSIAN, 3, 1.0, Sampling.POISSON, 0.1)
    b = Block(Mechanism.GAUSSIAN, 2, 2.0, Sampling.POISSON, 0.1)
    out = grouped([a, b, a, Block(Mechanism.GAUSSIAN, 4, 1.0, Sampling.POISSON, 0.1)])
    assert out == [Block(Mechanism.GAUSSIAN, 10, 1.0, Sampling.POISSON, 0.1), b]


def test_compose_tree_merges_every_pld_once():
    """Degenerate one-point PLDs: the tree's losses add up (offsets sum) whatever the order."""
    plds = [pld_lib.PrivacyLossDistribution(pld_lib.LossPmf(1e-2, i, np.array([1.0]), 0.0)) for i in range(7)]
    out = compose_tree(plds)
    assert out.remove.offset == sum(range(7)) and np.allclose(out.remove.masses, [1.0])
    assert compose_tree([]) is None


def _dpa_optimistic_epsilon(zs, q=0.02):
    """dp-accounting's *optimistic* PLD of the same releases: a lower bound on the true epsilon."""
    from dp_accounting.pld import privacy_loss_distribution as dpa_pld

    total = None
    for z in zs:
        step = dpa_pld.from_gaussian_mechanism(z, sampling_prob=q, pessimistic_estimate=False,
                                               value_discretization_interval=1e-4)
        total = step if total is None else total.compose(step)
    return total.get_epsilon_for_delta(DELTA)


@pytest.mark.parametrize("k", [16, 24])
def test_product_of_transforms_certifies_what_the_tree_does(k, monkeypatch):
    """k >= PRODUCT_MIN distinct releases go through compose_product (one circular grid, one
    product of k transforms): its epsilon equals the pairwise tree's within the tree's extra tail
    truncations (rel 1e-5), is never below dp-accounting's optimistic PLD (a lower bound on the
    exact value), and is within 0.1% of dp-accounting's pessimistic one."""
    import silodp.accounting.pld_tree as tree_mod

    zs = [0.8 + 0.7 * i / k for i in range(k)]
    calls = []
    real = tree_mod.compose_product
    monkeypatch.setattr(tree_mod, "compose_product", lambda *a: calls.append(1) or real(*a))
    product = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(_ledger(zs)).get_epsilon(DELTA)
    assert calls, "the product path was not taken"
    monkeypatch.setattr(tree_mod, "PRODUCT_MIN", 10 ** 9)
    pld_lib._STEPS.clear()
    tree = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(_ledger(zs)).get_epsilon(DELTA)
    assert product == pytest.approx(tree, rel=1e-5)
    assert product >= _dpa_optimistic_epsilon(zs)
    reference = _dpa_epsilon(zs)
    assert reference * (1 - 1e-3) <= product <= reference * 1.001


def _random_pmf(rng, offset, n, inf=0.0):
    m = rng.random(n) ** 4
    return pld_lib.LossPmf(1e-2, offset, m / m.sum() * (1.0 - inf), inf)


def test_product_without_wrap_is_the_exact_convolution_within_its_charge():
    """Small random PMFs whose whole composed support fits the circle: the product's masses are the
    exact (integer-offset) convolution to within the round-off it charges, and its infinite mass is
    1 - prod(1 - inf_i)."""
    from silodp.accounting.pld_tree import compose_product

    rng = np.random.default_rng(5)
    pmfs = [_random_pmf(rng, -3 + i, 40 + 7 * i, inf=1e-9 * i) for i in range(5)]
    out = compose_product(pmfs, -80.0)
    exact = pmfs[0].masses
    for p in pmfs[1:]:
        exact = np.convolve(exact, p.masses)
    assert out.offset == sum(p.offset for p in pmfs) and len(out.masses) >= len(exact)
    err = np.abs(out.masses[:len(exact)] - exact).sum() + np.abs(out.masses[len(exact):]).sum()
    assert 0 < out.roundoff < 1e-12 and err <= out.roundoff
    assert out.infinity_mass == pytest.approx(1 - np.prod([1 - p.infinity_mass for p in pmfs]), rel=1e-12)


def test_product_with_a_cut_window_stays_above_the_exact_curve():
    """Forty wide PMFs whose composed support (about 40 x 400 points) is far longer than the
    Chernoff window: the tails wrapped around are charged, so at every epsilon the product's delta
    is at least the exact convolution's (computed in full by direct convolution)."""
    from silodp.accounting.pld_tree import compose_product

    rng = np.random.default_rng(11)
    pmfs = []
    for _ in range(40):  # a bulk near 0 and a thin upper tail far out, as a Poisson Gaussian's
        m = np.exp(-0.5 * ((np.arange(400) - 20.0) / 4.0) ** 2) + 1e-13 * rng.random(400)
        pmfs.append(pld_lib.LossPmf(1e-2, -20, m / m.sum(), 0.0))
    out = compose_product(pmfs, -80.0)
    exact = pmfs[0].masses
    for p in pmfs[1:]:
        exact = np.convolve(exact, p.masses)
    full = pld_lib.LossPmf(1e-2, -800, np.maximum(exact, 0.0), 0.0)
    assert len(out.masses) < len(exact) / 4  # the window did cut
    for eps in np.linspace(0.0, 2.0, 21):
        assert out.delta(eps) >= full.delta(eps) - 1e-13


@pytest.mark.parametrize("a,b,s", [(0.01, 0.0, 1.0), (0.0, 0.01, 1.0), (0.3, 0.0, 0.5), (0.0, 0.3, 0.5),
                                   (1e-6, 0.0, 3.0), (0.0, 1e-6, 3.0), (0.5, 0.0, 0.05), (0.0, 0.5, 0.05)])
def test_one_sided_pair_is_the_general_pair_bit_for_bit(a, b, s):
    """The closed-form threshold of OneSidedGaussianPair (a ledger's build) gives the general
    GaussianPair's thresholds, curve and PMF exactly, edges included (e^eps <= 1 - a, huge eps)."""
    eps = np.concatenate([np.arange(-2000, 45000) * 1e-4, [-50.0, -1e-3, 0.0, np.log1p(-a), np.log1p(-b)],
                          np.linspace(-5.0, 700.0, 1000)])
    general, fast = pld_pairs.GaussianPair(a, b, s), pld_pairs.OneSidedGaussianPair(a, b, s)
    with np.errstate(all="ignore"):
        assert np.array_equal(general.threshold(eps), fast.threshold(eps), equal_nan=True)
        assert np.array_equal(general.delta(eps), fast.delta(eps), equal_nan=True)
    assert np.array_equal(general.loss_pmf(1e-4, pld_lib.LOG_TAIL_MASS).masses, fast.loss_pmf(1e-4, pld_lib.LOG_TAIL_MASS).masses)
    with pytest.raises(ValueError, match="a, b"):
        pld_pairs.OneSidedGaussianPair(0.1, 0.1, s)


def test_a_non_private_release_among_many_falls_back_to_the_tree():
    """A release with no finite loss (all mass at +inf) in a ledger past PRODUCT_MIN: the product
    declines and the tree answers infinity, as before."""
    from silodp.accounting.pld_tree import PRODUCT_MIN

    plds = [pld_pairs.from_gaussian_mechanism(1.0 + 0.1 * i, 0.02) for i in range(PRODUCT_MIN)]
    out = compose_tree(plds + [pld_lib.non_private()])
    assert out.get_epsilon_for_delta(DELTA) == np.inf
    assert out.remove.infinity_mass == 1.0
