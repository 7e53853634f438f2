"""The l2-aware P_vec certificate (silodp.accounting.pvec_l2) against independent references:
exact Renyi sums over the binomial pmf (scipy), the concave envelope by brute force over sampled
points, the exact hockey-stick divergence of small product spaces with randomized rounding,
exact two-copy rounding mixtures, and the central-DP Gaussian it should nearly match."""

import itertools
import math

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import binom

from silodp.accounting import pvec, pvec_l2, pvec_protocol
from silodp.accounting.releases import BatchSampling, ShuffleRelease, pvec_groups

M = 2000  # noise trials: a +-12 sd window strictly inside 0..M


def window(m):
    lo, _, outside = pvec_protocol.log_pmf_window(m, pvec_l2.WINDOW_SDS)
    return np.arange(lo, m - lo + 1), outside


@pytest.mark.parametrize("shift", [0, 1, 3, 10, 25])
def test_shift_moments_are_the_exact_renyi_sums_on_the_window(shift):
    """log sum_{y in W} B(y)^a B(y + s)^(1 - a) against scipy's pmf, 1e-9 relative."""
    logT, outside = pvec_l2.shift_moments(M, 25)
    y, ref_outside = window(M)
    assert outside == pytest.approx(ref_outside) and outside < 1e-20
    for i, a in enumerate(pvec_l2.ORDERS[:18]):
        ref = logsumexp(a * binom.logpmf(y, M, 0.5) + (1 - a) * binom.logpmf(y + shift, M, 0.5))
        assert logT[i, shift] == pytest.approx(ref, rel=1e-9, abs=1e-12)


def dense_shift_moments(trials, shifts, orders=pvec_l2.ORDERS):
    """The moments as summed before the blocked products (the reference): one log-sum-exp per
    order and shift over the whole window."""
    lo, c, outside = pvec_protocol.log_pmf_window(trials, pvec_l2.WINDOW_SDS, shifts)
    n = trials - 2 * lo + 1
    inside = min(shifts, len(c) - n) + 1
    out = np.full((len(orders), shifts + 1), np.inf)
    partners = np.lib.stride_tricks.sliding_window_view(c, n)[:inside]
    for i, a in enumerate(orders):
        out[i, :inside] = logsumexp(a * c[:n] + (1 - a) * partners, axis=1)
    return out, outside


@pytest.mark.parametrize("trials,shifts", [(30, 40), (400, 20), (5000, 30), (2000, 64), (100000, 40), (20000, 120),
                                           (1_000_000, 64)])
def test_blocked_products_bound_the_dense_sums_from_above_and_closely(trials, shifts):
    """Every order (1.1 to 4096: the matrix products, their chunk splitting and the log-space
    path) gives at least the dense log-sum-exp and at most 1e-9 more, +inf at the same places
    (10^6 trials: a one-shift chunk over 10,001 window points, summed as two dot products)."""
    new, outside = pvec_l2.shift_moments.__wrapped__(trials, shifts)
    ref, ref_outside = dense_shift_moments(trials, shifts)
    assert outside == ref_outside
    assert np.array_equal(np.isfinite(new), np.isfinite(ref))
    f = np.isfinite(ref)
    assert np.all(new[f] >= ref[f]) and np.all(new[f] - ref[f] <= 1e-9)


def battery():
    """Groups of the SDP transcripts' shapes: with and without replacement, one and two groups."""
    one = pvec.PvecGroup(25, 10, 200, 84, 256, True, 42, 170, pvec_l2.shift_l2(10, 161, True))
    diff = pvec.PvecGroup(20, 10, 1800, 84, 256, True, 42, 170, 2 * pvec_l2.shift_l2(10, 161, True))
    full = pvec.PvecGroup(5, 19, 1600, 340, 256, False, 1, 1, pvec_l2.shift_l2(19, 161, True))
    plain = pvec.PvecGroup(3, 8, 50, 64, 16, False, 1, 1, pvec_l2.shift_l2(8, 16, False))
    return [(one,), (full, diff), (plain,)]


@pytest.mark.parametrize("groups", battery())
@pytest.mark.parametrize("delta", [1e-5, 1e-9])
def test_certificates_are_at_least_the_dense_ones(groups, delta, monkeypatch):
    """New >= old: the certificate on the blocked moments is at least the one on the dense sums and
    within 1e-6 relative of it (the round-off allowance only)."""
    new = pvec_l2.certificate.__wrapped__(groups, delta)
    monkeypatch.setattr(pvec_l2, "shift_moments", dense_shift_moments)
    old = pvec_l2.certificate.__wrapped__(groups, delta)
    assert math.isfinite(old.epsilon) and new.capped == old.capped
    assert old.epsilon <= new.epsilon <= old.epsilon * (1 + 1e-6)


@pytest.mark.parametrize("groups", battery())
@pytest.mark.parametrize("delta", [1e-5, 1e-12])
def test_coarse_search_skips_only_orders_that_do_not_win(groups, delta):
    """The coarse pass starts from the middle orders and walks toward the smaller epsilon until it
    rises: the certificate is never above the minimum over every coarse order (the skipped ones
    would not have won) and is the epsilon of one of the orders (each order bounds; here
    recomputed over all of ORDERS)."""
    cert = pvec_l2.certificate.__wrapped__(groups, delta)
    every_coarse, _ = pvec_l2._epsilons(groups, delta, pvec_l2.COARSE)
    every, _ = pvec_l2._epsilons(groups, delta, pvec_l2.ORDERS, len(pvec_l2.COARSE))
    assert math.isfinite(cert.epsilon)
    # (1e-12: the ulps by which the same order differs when batched with other orders)
    assert float(np.min(every)) * (1 - 1e-12) <= cert.epsilon <= float(np.min(every_coarse)) * (1 + 1e-12)
    assert np.min(np.abs(every - cert.epsilon)) <= 1e-12 * cert.epsilon


def test_reflection_gives_the_same_moments_both_ways():
    """T(-s) = T(s) for p = 1/2 on the symmetric window (the reverse direction of the module docstring)."""
    y, _ = window(M)
    for s, a in itertools.product((1, 7), (1.5, 4.0, 16.0)):
        fwd = logsumexp(a * binom.logpmf(y, M, 0.5) + (1 - a) * binom.logpmf(y + s, M, 0.5))
        back = logsumexp(a * binom.logpmf(y, M, 0.5) + (1 - a) * binom.logpmf(y - s, M, 0.5))
        assert fwd == pytest.approx(back, rel=1e-9, abs=1e-12)


def arcs(log_v, samples=600):
    """(u, h(u)) sampled densely on every arc."""
    us, hs = [], []
    for j in range(len(log_v) - 1):
        phi = np.linspace(0, 1, samples)
        us.append((j + phi) ** 2)
        hs.append(np.log((1 - phi) * np.exp(log_v[j]) + phi * np.exp(log_v[j + 1])))
    return np.concatenate(us), np.concatenate(hs)


def hull_at(u, h, u0):
    """The concave envelope of the sample points at u0: the best chord over pairs straddling u0."""
    left, right = u <= u0, u >= u0
    ul, hl, ur, hr = u[left][:, None], h[left][:, None], u[right][None, :], h[right][None, :]
    with np.errstate(invalid="ignore", divide="ignore"):
        w = np.where(ur > ul, (u0 - ul) / (ur - ul), 0.0)
    return float(np.max(hl + w * (hr - hl)))


@pytest.mark.parametrize("order", [2, 8, 16])
@pytest.mark.parametrize("u0", [0.3, 2.0, 7.5, 40.0])
def test_envelope_bounds_the_concave_hull_and_is_tight(order, u0):
    """The dual bound is >= the hull of every sampled point (it is an upper bound) and within 1e-3
    of it (the sampling misses little)."""
    logT, _ = pvec_l2.shift_moments(M, 10)
    log_v = np.maximum.accumulate(logT[pvec_l2.ORDERS.index(order)])
    bound = float(pvec_l2._envelopes(log_v[None, :], u0)[0])
    u, h = arcs(log_v)
    ref = hull_at(u, h, min(u0, 100.0))
    assert bound >= ref - 1e-12
    assert bound <= ref + 1e-3 * max(1.0, abs(ref))


def test_jensen_bound_covers_random_feasible_shift_vectors():
    """sum_j h(t_j) <= d' F(Lambda^2 / d') for random shift vectors on the l2 sphere (Monte Carlo)."""
    rng = np.random.default_rng(0)
    d, g, lam = 8, 10, 14.0
    logT, _ = pvec_l2.shift_moments(M, g)
    bar = np.maximum.accumulate(logT, axis=1)
    bound = pvec_l2.invocation_moments(g, M, d, lam, 1)
    for _ in range(300):
        t = np.abs(rng.standard_normal(d)) ** rng.uniform(0.5, 4)
        t = np.minimum(t / np.linalg.norm(t) * lam, g)
        j = np.minimum(np.floor(t).astype(int), g - 1)
        phi = t - j
        with np.errstate(divide="ignore"):
            per = np.logaddexp(np.log1p(-phi) + bar[:, j], np.log(phi) + bar[:, j + 1])
        assert np.all(per.sum(axis=1) <= bound + 1e-9)


def rounded(m, c):
    """One coordinate of one message at level c plus Bin(m, 1/2) noise: the randomized-rounding
    mixture, on the support 0..m + 30."""
    x = np.arange(0, m + 31)
    f, lo = c - math.floor(c), math.floor(c)
    return (1 - f) * binom.pmf(x - lo, m, 0.5) + f * binom.pmf(x - lo - 1, m, 0.5)


@pytest.mark.parametrize("diff", [(20.0, 0.0), (14.14, 14.14), (12.5, 15.3), (19.6, 4.0), (10.0, 10.0)])
def test_certificate_covers_exact_two_coordinate_pairs(diff):
    """Two coordinates, shift vectors of l2 norm <= 20 and at most g = 20 per coordinate, with
    fractional levels (randomized rounding): the exact hockey-stick divergence of the product at
    the certified epsilon is <= delta, both directions."""
    g, lam, delta = 20, 20.0, 1e-3
    grp = pvec.PvecGroup(uses=1, g=g, b=M, messages=1, dimension=2, l2=lam)
    eps = pvec_l2.transcript_epsilon((grp,), delta)
    assert 0.5 < eps < 5
    base = (0.37, 0.81)
    P = np.outer(rounded(M, base[0] + diff[0]), rounded(M, base[1] + diff[1]))
    Q = np.outer(rounded(M, base[0]), rounded(M, base[1]))
    for A, B in ((P, Q), (Q, P)):
        exact = float(np.maximum(A - math.exp(eps) * B, 0.0).sum())
        assert exact <= delta


def test_certificate_is_within_a_stated_factor_of_the_exact_worst_case():
    """Tightness: at the certified epsilon, the worst exact pair above spends at least 1/20 of
    delta (the Renyi conversion's slack; a per-coordinate charge would be far below that)."""
    g, lam, delta = 20, 20.0, 1e-3
    eps = pvec_l2.transcript_epsilon((pvec.PvecGroup(1, g, M, 1, 2, l2=lam),), delta)
    P = np.outer(rounded(M, 20.37), rounded(M, 0.81))
    Q = np.outer(rounded(M, 0.37), rounded(M, 0.81))
    assert float(np.maximum(P - math.exp(eps) * Q, 0.0).sum()) >= delta / 20


@pytest.mark.parametrize("t", [0.4, 1.5, 3.7, 5.0])
def test_two_copies_are_covered_by_the_multiplicity_moments(t):
    """A record drawn twice: two identical messages rounded independently. The exact moment of the
    true pair of mixtures is <= the certificate's, every order."""
    g = 6
    x = np.arange(0, M + 2 * g + 3)
    y, _ = window(M)

    def two(c):  # two independent roundings of level c, plus the noise
        f, lo = c - math.floor(c), math.floor(c)
        return sum(w * binom.pmf(x - 2 * lo - k, M, 0.5) for k, w in enumerate(binom.pmf([0, 1, 2], 2, f)))

    def two_window(c):  # P with its noise restricted to the window
        f, lo = c - math.floor(c), math.floor(c)
        inside = lambda z: np.where((z >= y[0]) & (z <= y[-1]), binom.pmf(z, M, 0.5), 0.0)
        return sum(w * inside(x - 2 * lo - k) for k, w in enumerate(binom.pmf([0, 1, 2], 2, f)))

    P, Q = two_window(0.3 + t), two(0.3)
    bound = pvec_l2.invocation_moments(g, M, 1, t, 2)
    for a, b in zip(pvec_l2.ORDERS[:16], bound):
        keep = P > 0
        exact = logsumexp(a * np.log(P[keep]) + (1 - a) * np.log(Q[keep]))
        assert exact <= b + 1e-9


def test_more_trials_never_certify_less():
    """The calibration's monotonicity (more binomial noise is post-processing)."""
    grp = lambda b: pvec.PvecGroup(50, 14, b, 182, 256, with_replacement=True, batch_size=45, dataset_size=180,
                                   l2=pvec_l2.shift_l2(14, 161, True))
    eps = [pvec_l2.transcript_epsilon((grp(b),), 1e-5) for b in (300, 600, 1200, 2400, 4800)]
    assert all(a > b for a, b in zip(eps, eps[1:]))


def test_nearly_matches_central_dp():
    """The paper's claim for SDP (Thm D.2): at the calibrated trials the server's noise variance is
    within 1.3x of a central Gaussian of sensitivity 2L composed as often (exact GDP), at WBCD's
    d = 161 with the rotation; the per-coordinate certificate alone needs 20x more."""
    eps, delta, uses, d, m, g = 6.0, 1e-5, 100, 161, 182, 14
    sigma2 = (math.sqrt(uses) * 2 / pvec._gaussian_mu(eps, delta)) ** 2
    gamma = pvec.rotated_bound(1.0, d)

    def variance(l2):
        groups = (pvec.PvecGroup(uses, g, 1, m, pvec.rotated_dimension(d), l2=l2),)
        (b,), e = pvec.calibrate_noise(groups, (1.0,), eps, delta, pvec.default_interval(eps))
        assert e <= eps
        return (2 * gamma / g) ** 2 * m * b / 4

    assert variance(pvec_l2.shift_l2(g, d, True)) <= 1.3 * sigma2
    assert variance(None) >= 20 * sigma2


def test_release_groups_carry_the_l2_bound():
    """pvec_groups attaches Lambda = g L / gamma with the rotation, g without."""
    r = ShuffleRelease("grad", 3, math.inf, 0.0, BatchSampling.SHUFFLED, 10, 100, 20, 1.0, (14, 100, 0.5, True), 161)
    (grp,) = pvec_groups([r])
    assert grp.l2 == pytest.approx(14 / pvec.rotated_bound(1.0, 161)) and grp.dimension == 256
    (flat,) = pvec_groups([ShuffleRelease("grad", 3, math.inf, 0.0, BatchSampling.SHUFFLED, 10, 100, 20, 1.0,
                                          (14, 100, 0.5, False), 161)])
    assert flat.l2 == 14.0 and flat.dimension == 161


@pytest.mark.parametrize("rotate", [True, False])
def test_level_shifts_of_real_messages_respect_the_certified_bounds(rotate):
    """Monte Carlo over message pairs of norm <= L (random, sparse, and beyond the rotated range):
    the protocol's level vectors (silodp.algorithms.shuffle) differ by at most g per coordinate and
    Lambda in l2, with the rotation and without it at the rotated range (the clamps are
    non-expansive: dropping the rotation is a bias, never a privacy loss)."""
    import torch

    from silodp.algorithms import shuffle as sh

    d, g, L = 100, 12, 2.0
    gamma = pvec.rotated_bound(L, d)
    lam = pvec_l2.shift_l2(g, d, True)
    gen = torch.Generator().manual_seed(0)
    signs = sh.rotation_signs(d, gen)
    x = torch.randn(400, 2, d, generator=gen, dtype=torch.float64)
    x[:100, :, 1:] = 0.0  # 1-sparse: all the norm on one coordinate
    x = x / x.norm(dim=-1, keepdim=True) * L * torch.rand(400, 2, 1, generator=gen, dtype=torch.float64)
    y = sh.rotate(x, signs) if rotate else x
    c = sh._scaled(y, gamma, g)
    diff = c[:, 0] - c[:, 1]
    assert float(diff.abs().max()) <= g + 1e-9
    assert float(diff.norm(dim=-1).max()) <= lam * (1 + 1e-12)
    assert float(diff.norm(dim=-1).max()) >= 0.5 * lam  # the bound is not vacuous here


@pytest.fixture
def low_cap(monkeypatch):
    """trials_cap 10^4x lower (MAX_WORK / 100), the caches cleared before and after."""
    monkeypatch.setattr(pvec_l2, "MAX_WORK", pvec_l2.MAX_WORK / 100)
    pvec_l2.shift_moments.cache_clear()
    pvec_l2.certificate.cache_clear()
    yield
    pvec_l2.shift_moments.cache_clear()
    pvec_l2.certificate.cache_clear()


def test_capped_noise_is_certified_at_the_cap_and_stays_monotone(low_cap):
    """Beyond trials_cap the moments are those of the capped noise (sound: the rest is added on
    top), so the certificate is constant in b there, never larger, and flagged as capped (at a
    far lower cap than the library's, to stay fast)."""
    grp = lambda b: pvec.PvecGroup(10, 8, b, 10, 64, l2=pvec_l2.shift_l2(8, 64, True))
    cap = pvec_l2.trials_cap(8, len(pvec_l2.COARSE))
    below, at, beyond = (pvec_l2.certificate((grp(b),), 1e-5) for b in (cap // 20, cap // 10, 10 * cap // 10))
    far = pvec_l2.certificate((grp(100 * cap // 10),), 1e-5)
    assert not below[1] and not at[1] and far[1]
    assert below[0] >= at[0] >= beyond[0] >= far[0] > 0
