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


def _product_and_exact(seed, bulk):
    """compose_product of forty 400-point PMFs with a bulk at index ``bulk`` (loss 0) and 1e-13
    noise elsewhere, and their exact composition (direct convolution)."""
    from silodp.accounting.pld_tree import compose_product

    rng = np.random.default_rng(seed)
    pmfs = []
    for _ in range(40):
        m = np.exp(-0.5 * ((np.arange(400) - float(bulk)) / 4.0) ** 2) + 1e-13 * rng.random(400)
        pmfs.append(pld_lib.LossPmf(1e-2, -bulk, m / m.sum(), 0.0))
    exact = pmfs[0].masses
    for p in pmfs[1:]:
        exact = np.convolve(exact, p.masses)
    return compose_product(pmfs, -80.0), pld_lib.LossPmf(1e-2, -40 * bulk, np.maximum(exact, 0.0), 0.0)


def test_product_with_a_cut_window_stays_above_the_exact_curve():
    """Forty wide PMFs whose composed support (about 40 x 400 points) is far longer than the
    Chernoff window: the tails wrapped around are charged, so at every epsilon the product's delta
    is at least the exact convolution's (computed in full by direct convolution)."""
    out, full = _product_and_exact(11, 20)  # a bulk near 0 and a thin upper tail far out, as a Poisson Gaussian's
    assert len(out.masses) < len(full.masses) / 4  # the window did cut
    for eps in np.linspace(0.0, 2.0, 21):
        assert out.delta(eps) >= full.delta(eps) - 1e-13


def test_streamed_runs_certify_what_one_product_does(monkeypatch):
    """A ledger composed in two levels (compose_blocks from GROUPED_MIN distinct releases, forced
    at 16 by lowering it: four runs of four built and composed by one product each, then the
    product of the runs, PRODUCT_MIN lowered to 4 for it): its epsilon equals the single product's within 1e-6 relative (the two
    differ only by charged round-off and wrapped tails), is never below dp-accounting's optimistic
    PLD (a lower bound on the exact value), and is within 0.1% of dp-accounting's pessimistic one."""
    import silodp.accounting.pld_tree as tree_mod

    zs = [0.8 + 0.7 * i / 16 for i in range(16)]
    calls = []
    real = tree_mod.compose_product
    monkeypatch.setattr(tree_mod, "compose_product", lambda *a: calls.append(len(a[0])) or real(*a))
    single = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(_ledger(zs)).get_epsilon(DELTA)
    assert calls == [16, 16]
    calls.clear()
    monkeypatch.setattr(tree_mod, "GROUPED_MIN", 16)
    monkeypatch.setattr(tree_mod, "PRODUCT_MIN", 4)  # the four runs' PLDs by a product too
    pld_lib._STEPS.clear()
    two_level = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(_ledger(zs)).get_epsilon(DELTA)
    assert calls == [4] * 10  # four runs of four, then their product, both directions each
    assert two_level == pytest.approx(single, rel=1e-6)
    assert two_level >= _dpa_optimistic_epsilon(zs)
    reference = _dpa_epsilon(zs)
    assert reference * (1 - 1e-3) <= two_level <= reference * 1.001


def test_streamed_runs_are_cut_from_blocks_sorted_by_support(monkeypatch):
    """A mixed ledger in ledger order of unlike releases (GROUPED_MIN lowered to 16): runs are cut
    from the blocks sorted by count, sampling rate and noise (longest first), so the four nearly
    lossless releases (q = 0.001, z = 3: a few dozen grid points) share the last run and its circle; the epsilon
    equals the all-pairwise tree's within 1e-5 relative and stays within 0.1% of dp-accounting's
    pessimistic PLD of the same releases."""
    import silodp.accounting.pld_tree as tree_mod

    events = ([PoissonSampledDpEvent(0.02, GaussianDpEvent(0.8 + 0.05 * i)) for i in range(6)]
              + [PoissonSampledDpEvent(0.001, GaussianDpEvent(3.0 + 0.01 * i)) for i in range(4)]
              + [PoissonSampledDpEvent(0.05, GaussianDpEvent(1.2 + 0.05 * i)) for i in range(6)])
    supports = []
    real = tree_mod.compose_product
    monkeypatch.setattr(tree_mod, "compose_product",
                        lambda *a: supports.append(sorted(len(p.masses) for p in a[0])) or real(*a))
    monkeypatch.setattr(tree_mod, "GROUPED_MIN", 16)
    streamed = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(ComposedDpEvent(events)).get_epsilon(DELTA)
    assert len(supports) == 8 and supports[6][-1] < min(supports[0][0], supports[2][0], supports[4][0])
    monkeypatch.setattr(tree_mod, "PRODUCT_MIN", 10 ** 9)
    pld_lib._STEPS.clear()
    pairwise = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(ComposedDpEvent(events)).get_epsilon(DELTA)
    assert streamed == pytest.approx(pairwise, rel=1e-5)
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    for e in events:
        acc.compose(dpa.PoissonSampledDpEvent(e.sampling_probability, dpa.GaussianDpEvent(e.event.noise_multiplier)))
    reference = acc.get_epsilon(DELTA)
    assert reference * (1 - 1e-3) <= streamed <= reference * 1.001


def test_streamed_ledger_in_extended_precision_is_merged_by_the_tree_as_before(monkeypatch):
    """compose_blocks past GROUPED_MIN (lowered to 16) with extended-precision PLDs (the
    accountant's second pass): no product is tried; every PLD is merged by the pairwise tree, as
    compose_tree merges them (the same epsilon within 1e-12 relative)."""
    import silodp.accounting.pld_tree as tree_mod

    if not pld_lib.HAS_EXTENDED:
        pytest.skip("no extended precision on this platform")
    blocks = [Block(Mechanism.GAUSSIAN, 1, 0.9 + 0.05 * i, Sampling.POISSON, 0.02) for i in range(16)]

    def block_pld(b):
        return pld_pairs.from_gaussian_mechanism(b.noise_multiplier, b.q).astype(pld_lib.EXTENDED)

    calls = []
    monkeypatch.setattr(tree_mod, "compose_product", lambda *a: calls.append(1))
    monkeypatch.setattr(tree_mod, "GROUPED_MIN", 16)
    streamed = tree_mod.compose_blocks(blocks, block_pld)
    assert not calls and streamed.remove.masses.dtype == pld_lib.EXTENDED
    reference = compose_tree([block_pld(b) for b in blocks])
    assert streamed.get_epsilon_for_delta(DELTA) == pytest.approx(reference.get_epsilon_for_delta(DELTA), rel=1e-12)


def test_grouped_product_with_cut_windows_stays_above_the_exact_curve(monkeypatch):
    """compose_grouped of forty wide PMFs (six groups whose windows cut their tails, then a product
    whose window cuts again): at every epsilon its delta is at least the exact convolution's
    (direct convolution), and above it by no more than its charges (~9e-12 here)."""
    import silodp.accounting.pld_tree as tree_mod

    monkeypatch.setattr(tree_mod, "GROUPED_MIN", 16)
    rng = np.random.default_rng(11)
    pmfs = []
    for _ in range(40):
        m = np.exp(-0.5 * ((np.arange(400) - 20.0) / 4.0) ** 2) + 1e-13 * rng.random(400)
        pmfs.append(pld_lib.LossPmf(1e-2, -20, m / m.sum(), 0.0))
    exact = pmfs[0].masses
    for p in pmfs[1:]:
        exact = np.convolve(exact, p.masses)
    full = pld_lib.LossPmf(1e-2, -800, np.maximum(exact, 0.0), 0.0)
    out = tree_mod.compose_grouped(pmfs, -80.0)
    assert len(out.masses) < len(full.masses) / 4  # the windows did cut
    for eps in np.linspace(0.0, 2.0, 21):
        assert full.delta(eps) <= out.delta(eps) <= full.delta(eps) + 2e-11  # above, by its ~9e-12 charge


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


def _reference_curve(a, b, s, eps):
    """delta(eps) of P = (1-a) N(0, s^2) + a N(1, s^2) against Q = (1-b) N(0, s^2) + b N(-1, s^2)
    (one of a, b zero), at 40 digits: the threshold x* and the two tails in mpmath."""
    import mpmath as mp

    with mp.workdps(40):
        a, b, s, e = mp.mpf(a), mp.mpf(b), mp.mpf(s), mp.exp(mp.mpf(eps))
        if b == 0:
            if e <= 1 - a:
                return float(1 - e)
            w = (e - (1 - a)) / a
        else:
            if e * (1 - b) >= 1:
                return 0.0
            w = e * b * mp.exp(-1 / s ** 2) / (1 - e * (1 - b))
        x = s * s * mp.log(w) + mp.mpf(1) / 2
        p = (1 - a) * mp.ncdf(-x / s) + a * mp.ncdf((1 - x) / s)
        q = (1 - b) * mp.ncdf(-x / s) + b * mp.ncdf((-1 - x) / s)
        return float(p - e * q)


PAIRS = [(0.01, 0.0, 1.0), (0.0, 0.01, 1.0), (0.01, 0.0, 0.5), (0.0, 0.01, 0.5), (0.3, 0.0, 2.0), (0.0, 0.3, 2.0),
         (1e-4, 0.0, 1.0), (0.0, 1e-4, 1.0)]


@pytest.mark.parametrize("a,b,s", PAIRS)
def test_one_sided_curve_is_as_accurate_as_the_log_space_curve(a, b, s):
    """OneSidedGaussianPair.curve (normal tails in linear space, the ledger's build) against a
    40-digit evaluation over the loss range of its PMF, ends and kinks included: within 1e-12
    relative plus 4 ulps of 1, as GaussianPair.delta (log space) is."""
    pair = pld_pairs.OneSidedGaussianPair(a, b, s)
    lo, hi = pair.loss_range(pld_lib.LOG_TAIL_MASS)
    eps = np.concatenate([np.random.default_rng(3).uniform(lo, hi, 120), np.linspace(lo, hi, 40),
                          [0.0, 1e-4, -1e-4, np.log1p(-a), -np.log1p(-b)]])
    ref = np.array([_reference_curve(a, b, s, e) for e in eps])
    allowed = 1e-12 * ref + 4 * 2.0 ** -53
    assert np.all(np.abs(pair.curve(eps) - ref) <= allowed)
    assert np.all(np.abs(pair.delta(eps) - ref) <= allowed)


def test_connect_the_dots_at_every_point_is_connect_the_dots():
    """Dots at every grid point: the same masses as connect_the_dots up to rounding (the two
    formulas for p_i differ in their last operations)."""
    pair = pld_pairs.OneSidedGaussianPair(0.05, 0.0, 0.8)
    full = pair.loss_pmf(1e-3, pld_lib.LOG_TAIL_MASS)
    dots = np.arange(full.offset, full.offset + len(full.masses))
    at = pld_pairs.connect_the_dots_at(pair.delta, dots, 1e-3)
    assert at.offset == full.offset and at.infinity_mass == full.infinity_mass
    assert np.abs(at.masses - full.masses).sum() < 1e-12


@pytest.mark.parametrize("a,b,s,share", [(0.01, 0.0, 1.0, 0.7), (0.0, 0.01, 1.0, 0.7), (0.2, 0.0, 0.4, 0.9),
                                         (0.0, 0.2, 0.4, 0.9)])
def test_strided_pmf_lies_above_the_true_curve_and_on_it_at_the_dots(a, b, s, share):
    """The one-sided pair's PMF on its tail-strided dots (the Poisson Gaussian's build): its curve
    equals the true one at the dots (to rounding) and lies above it everywhere between, so it is
    pessimistic; at eps >= 0 it exceeds the full grid's curve by at most twice the truncation
    budget e^bound (one per tail: the strides' cost), below 0 it stays within 1e-7 of the true
    curve, as the full grid does (the cancellation in the differences of a curve near 1 - e^eps,
    of 1e-12 per point, clipped upwards), and only a ``share`` of the points is evaluated."""
    pair = pld_pairs.OneSidedGaussianPair(a, b, s)
    h, bound = 1e-4, pld_lib.LOG_TAIL_MASS
    strided = pair.strided_loss_pmf(h, bound)
    full = pair.loss_pmf(h, bound)
    assert (strided.offset, len(strided.masses)) == (full.offset, len(full.masses))
    dots = pair.dots(strided.offset, strided.offset + len(strided.masses) - 1, h, bound)
    assert len(dots) <= share * len(full.masses)
    rng = np.random.default_rng(1)
    on = np.sort(rng.choice(dots[1:-1], 150, replace=False))
    gap = np.flatnonzero(np.diff(dots) > 1)
    between = (dots[rng.choice(gap, min(150, len(gap)), replace=False)] + 0.5) * h
    for eps in (on * h, between, np.linspace(-3.0, 3.0, 61)):
        true = pair.delta(eps)
        got, grid = (np.array([p.delta(e) for e in eps]) for p in (strided, full))
        assert np.all(got >= true * (1 - 1e-9) - 1e-16)
        assert np.all(np.where(eps >= 0, got - grid - 2 * np.exp(bound), np.maximum(got, grid) - true - 1e-7) <= 0)
    at, true = np.array([strided.delta(e) for e in on * h]), pair.delta(on * h)
    assert np.all(np.abs(at - true) <= np.where(on >= 0, 1e-9 * true + 1e-16, 1e-7))


def test_strided_ledger_certifies_within_the_full_grids_charge():
    """A ledger of 40 distinct Poisson Gaussians composed from the strided PMFs and from the full
    grid's (every point, log-space curve): the strided epsilon is never below what the full grid's
    uncharged curve gives at delta (sound up to round-off, which each charges), and exceeds the
    full grid's certificate by < 1e-6 relative, at three deltas."""
    zs = [0.7 + 0.03 * i for i in range(40)]
    bound = pld_lib.LOG_TAIL_MASS

    def full(z, q=0.02):
        return pld_lib.PrivacyLossDistribution(pld_pairs.OneSidedGaussianPair(q, 0.0, z).loss_pmf(1e-4, bound),
                                               pld_pairs.OneSidedGaussianPair(0.0, q, z).loss_pmf(1e-4, bound), bound)

    strided = compose_tree([pld_pairs.from_gaussian_mechanism(z, 0.02, strided=True) for z in zs])
    reference = compose_tree([full(z) for z in zs])
    for delta in (1e-3, 1e-5, 1e-7):
        eps = strided.get_epsilon_for_delta(delta)
        assert reference.get_delta_for_epsilon(eps) - reference.roundoff <= delta
        assert eps <= reference.get_epsilon_for_delta(delta) * (1 + 1e-6)


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_log_mgf_bounds_the_exact_moment_generating_function(sign):
    """_log_mgf (terms below e^-40 bounded by their mass) is an upper bound on the exact
    log sum_j m_j e^{t l_j}, within its 1e-8 slack, for t of either sign."""
    import mpmath as mp

    from silodp.accounting.pld_tree import _log_mgf

    rng = np.random.default_rng(7)
    m = rng.random(3000) ** 6
    pmf = pld_lib.LossPmf(1e-3, -1200, m / m.sum(), 0.0)
    for t in (0.5, 8.0, 40.0, 300.0):
        st = sign * t
        exact = float(mp.log(mp.fsum(mp.mpf(float(x)) * mp.exp(st * mp.mpf(float(l))) for x, l in zip(pmf.masses, pmf.losses))))
        centre = float(np.sum(pmf.masses * pmf.losses))
        got = _log_mgf(pmf, st, centre)
        assert exact <= got <= exact + 2e-8


@pytest.mark.parametrize("t", [-40.0, -3.0, 0.7, 25.0])
def test_log_mgfs_of_many_pmfs_bound_each_exact_moment_generating_function(t):
    """_log_mgfs over PMFs of several lengths (partial last rows padded with zeros) and offsets is
    at least the sum of their exact log-MGFs (mpmath) and within each PMF's 1e-8 slack of it."""
    import mpmath as mp

    from silodp.accounting.pld_tree import _log_mgfs, _rows

    rng = np.random.default_rng(11)
    pmfs = []
    for n, offset in ((1, 5), (63, -40), (64, 0), (65, 300), (700, -900), (1000, -20)):
        m = rng.random(n) ** 4
        pmfs.append(pld_lib.LossPmf(1e-3, offset, m / m.sum() * 0.999, 0.001))
    centres = np.array([float(np.sum(p.masses * p.losses)) for p in pmfs])
    exact = sum(float(mp.log(mp.fsum(mp.mpf(float(x)) * mp.exp(t * mp.mpf(float(l)))
                                     for x, l in zip(p.masses, p.losses)))) for p in pmfs)
    got = _log_mgfs(_rows(pmfs), t, centres)
    assert exact <= got <= exact + len(pmfs) * 2e-8


@pytest.mark.parametrize("has_out", [True, False])
def test_rfft_into_writes_numpy_rfft(monkeypatch, has_out):
    """The product's transform into a work array equals a fresh np.fft.rfft bit for bit, with
    numpy's ``out=`` and without it (numpy < 2)."""
    from silodp.accounting import pld_tree

    monkeypatch.setattr(pld_tree, "_RFFT_OUT", has_out and pld_tree._RFFT_OUT)
    x = np.random.default_rng(3).random(1000)
    work = np.full(1201, np.nan, dtype=complex)
    got = pld_tree._rfft_into(x, 2400, work)
    assert got is work and np.array_equal(work, np.fft.rfft(x, 2400))


def test_product_folds_a_cut_lower_tail_upwards():
    """Forty PMFs with a thin lower tail far below their bulk: the window cuts the composition's
    lower tail, which the circle folds to larger losses (uncharged: pessimistic), so at every
    epsilon the product's delta is at least the exact convolution's."""
    out, full = _product_and_exact(13, 380)  # a thin lower tail far out, as a Poisson Gaussian's "add" side
    assert out.offset > full.offset + len(full.masses) // 2  # the window cut the lower tail
    for eps in np.linspace(0.0, 2.0, 21):
        assert out.delta(eps) >= full.delta(eps) - 1e-15


@pytest.mark.parametrize("q,z", [(0.01, 1.0), (0.2, 0.4), (1e-4, 1.0), (0.5, 3.0)])
def test_poisson_pmfs_from_shared_tails_are_the_separate_builds(q, z):
    """poisson_loss_pmfs (the two directions from one pass of normal tails, the add side's dots the
    remove side's mirrored) gives the grids of the two separate strided builds and their curves:
    within 1e-15 + 1e-12 relative (rounding) at eps >= 0, within 1e-7 below (the clipped
    cancellation noise of a curve near 1 - e^eps, which other dots place differently); the add
    side's curve equals the pair's at its dots at eps >= 0."""
    h, bound = 1e-4, pld_lib.LOG_TAIL_MASS
    shared = pld_pairs.poisson_loss_pmfs(q, z, h, bound)
    pairs = (pld_pairs.OneSidedGaussianPair(q, 0.0, z), pld_pairs.OneSidedGaussianPair(0.0, q, z))
    eps = np.concatenate([np.linspace(-1.0, 4.0, 101), [0.0, h, -np.log1p(-q)]])
    for got, pair in zip(shared, pairs):
        alone = pair.strided_loss_pmf(h, bound)
        assert (got.offset, len(got.masses)) == (alone.offset, len(alone.masses))
        a, b = (np.array([p.delta(e) for e in eps]) for p in (got, alone))
        assert np.all(np.abs(a - b) <= np.where(eps >= 0, 1e-15 + 1e-12 * b, 1e-7))
    add = shared[1]
    dots = add.offset + np.flatnonzero(add.masses)[1:]
    dots = dots[dots >= 0][::max(1, len(dots) // 60)]
    at = np.array([add.delta(e) for e in dots * h])
    assert np.allclose(at, pairs[1].delta(dots * h), rtol=1e-9, atol=1e-16)


def test_add_side_lower_tail_masses_are_the_pairs_not_rounding_noise():
    """The add side's masses in its far lower tail (losses <= -2 at q 0.01, z 1) come from the curve
    less its linear part 1 - e^eps (poisson_loss_pmfs): their sum is P_add's mass there, about 1e-12,
    within a factor 2 (the full grid's differences of values near 1 - e^eps leave ~5e-9 of noise)."""
    from scipy.special import ndtr

    h = 1e-4
    _, add = pld_pairs.poisson_loss_pmfs(0.01, 1.0, h, pld_lib.LOG_TAIL_MASS)
    pair = pld_pairs.OneSidedGaussianPair(0.0, 0.01, 1.0)
    cut = int(np.floor(-2.0 / h))
    got = float(np.sum(add.masses[:cut - add.offset + 1]))
    true = float(ndtr(pair.threshold(np.array([(cut + 1) * h]))[0] / pair.s))  # P_add(L <= eps_{cut + 1})
    assert 0 < got <= 2 * true and true < 1e-11


def test_a_self_composed_step_is_built_on_the_full_grid():
    """The strided build costs up to e^bound per tail once per composed copy: the pld accountant
    builds a step composed once (a distinct release) on strided dots and a self-composed one on
    the full grid, so 1e6 steps at delta 1e-12 certify what the full grid does (the strided step
    gave 0.06371 there, the full grid 0.06297)."""
    q, z, steps, delta = 1e-6, 0.7, 1_000_000, 1e-12
    acc = get_accountant("pld", ADD_OR_REMOVE_ONE)
    acc.compose(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)
    grid = (acc.value_discretization_interval, acc.log_mass_truncation_bound)
    full = pld_pairs.from_gaussian_mechanism(z, q, ADD_OR_REMOVE_ONE, *grid)
    strided = pld_pairs.from_gaussian_mechanism(z, q, ADD_OR_REMOVE_ONE, *grid, strided=True)
    assert not np.array_equal(full.remove.masses, strided.remove.masses)
    eps = acc.get_epsilon(delta)
    assert eps < strided.self_compose(steps).get_epsilon_for_delta(delta)
    assert eps == pytest.approx(0.06297375, rel=1e-6)
