"""The exact P_vec certificate (silodp.accounting.pvec) against independent references: exact
hockey-stick sums over the binomial support, brute force over tiny product spaces, exact
multiplicity mixtures, and Monte Carlo for the rotation bound."""

import dataclasses
import itertools
import math

import numpy as np
import pytest
import torch
from scipy.stats import binom

from silodp.accounting import pvec, pvec_l2
from silodp.accounting.releases import BatchSampling, ShuffleRelease, pvec_groups

H = 1e-4


def exact_delta(eps, P, Q):
    """sum_x (P(x) - e^eps Q(x))_+ over a common support (P may have mass where Q has none)."""
    return float(np.maximum(P - math.exp(eps) * Q, 0.0).sum())


def shifted(m, s):
    """(Bin(m, 1/2) + s, Bin(m, 1/2)) on the support 0..m+|s|."""
    x = np.arange(0, m + abs(s) + 1)
    return binom.pmf(x - s, m, 0.5), binom.pmf(x, m, 0.5)


def worst_coordinate_delta(eps, m, g):
    """max over every shift 0 < |s| <= g and both directions of the exact hockey-stick."""
    out = 0.0
    for s in range(1, g + 1):
        P, Q = shifted(m, s)
        out = max(out, exact_delta(eps, P, Q), exact_delta(eps, Q, P))
    return out


@pytest.mark.parametrize("m, g", [(20, 3), (200, 5), (1000, 1), (5, 7)])
def test_coordinate_pld_is_the_exact_hockey_stick_on_the_grid(m, g):
    """At grid points the discrete PLD's curve is the exact worst-case curve (tolerance 1e-12
    relative, float round-off); between them it lies above it."""
    dist = pvec.coordinate_pld(m, g, H)
    for eps in (0.0, 0.05, 0.3, 1.0, 2.5):
        grid = round(eps / H) * H
        ref = worst_coordinate_delta(grid, m, g)
        assert dist.get_delta_for_epsilon(grid) == pytest.approx(ref, rel=1e-12, abs=1e-15)
        off = grid + 0.37 * H
        assert dist.get_delta_for_epsilon(off) >= worst_coordinate_delta(off, m, g) * (1 - 1e-12) - 1e-16


def test_the_largest_shift_dominates_every_smaller_one():
    """The monotone-likelihood-ratio argument of the module docstring, checked exactly."""
    m = 60
    for eps in np.linspace(0, 3, 13):
        curves = [exact_delta(eps, *shifted(m, s)) for s in range(1, 8)]
        assert all(a <= b + 1e-15 for a, b in zip(curves, curves[1:]))


def brute_product_delta(eps, m, shifts):
    """Exact hockey-stick of the product over coordinates of (Bin + s_j, Bin), both directions."""
    pairs = [shifted(m, abs(s)) if s > 0 else shifted(m, abs(s))[::-1] for s in shifts]
    P = Q = np.ones(1)
    for p, q in pairs:
        P, Q = np.outer(P, p).ravel(), np.outer(Q, q).ravel()
    return max(exact_delta(eps, P, Q), exact_delta(eps, Q, P))


def test_composition_over_coordinates_against_brute_force():
    """d = 2: every shift vector with |s_j| <= g is below the certificate, and the worst one is
    within the discretization (2e-3 relative at h = 1e-4) of it."""
    m, g, d = 12, 2, 2
    inv = pvec.invocation_pld(g, 1, m, d, 1, H)  # messages * b = m trials
    for eps in (0.1, 0.5, 1.0):
        worst = max(brute_product_delta(eps, m, s) for s in itertools.product(range(-g, g + 1), repeat=d)
                    if any(s))
        got = inv.get_delta_for_epsilon(eps)
        assert worst <= got <= worst * (1 + 2e-3) + 1e-12


def test_composition_over_invocations_against_brute_force():
    """Three invocations of a one-coordinate protocol: the 3-fold product, exactly."""
    m, g = 10, 1
    grp = pvec.PvecGroup(uses=3, g=g, b=1, messages=m, dimension=1)
    dist = pvec.group_pld(grp, H)
    for eps in (0.2, 0.8, 1.5):
        ref = brute_product_delta(eps, m, (g, g, g))
        assert ref <= dist.get_delta_for_epsilon(eps) <= ref * (1 + 2e-3) + 1e-12


def test_with_replacement_multiplicity_is_amplified_and_hidden():
    """Batch K = 3 drawn with replacement from n = 3: the record's multiplicity k ~ Bin(3, 1/3)
    moves k g levels. The certificate equals BBG18 Thm 10's amplified mixture
    sum_{k >= 1} P[k] delta_k(log(1 + (e^eps - 1) / gamma)), gamma = P[k >= 1] (exact), is below
    the labelled mixture sum_k P[k] delta_k(eps) it replaced, and above what the analyzer really
    sees in both orientations (the others at level 0, the replacement's level; or all at g, the
    record's), both directions."""
    m, g, K, n = 16, 2, 3, 3
    grp = pvec.PvecGroup(uses=1, g=g, b=1, messages=m, dimension=1, with_replacement=True, batch_size=K,
                         dataset_size=n)
    dist = pvec.group_pld(grp, H)
    w = binom.pmf(np.arange(K + 1), K, 1 / n)
    gamma = 1 - w[0]
    x = np.arange(0, m + K * g + 1)
    Q = binom.pmf(x, m, 0.5)
    P = sum(w[k] * binom.pmf(x - k * g, m, 0.5) for k in range(K + 1))
    P2 = binom.pmf(x - K * g, m, 0.5)  # every other record at g: D's batch always sums to K g
    Q2 = sum(w[k] * binom.pmf(x - (K - k) * g, m, 0.5) for k in range(K + 1))
    for eps in (0.0, 0.3, 1.0, 2.0):
        inner = math.log1p(math.expm1(eps) / gamma)
        amplified = sum(w[k] * worst_coordinate_delta(inner, m, k * g) for k in range(1, K + 1))
        labelled = sum(w[k] * worst_coordinate_delta(eps, m, k * g) for k in range(1, K + 1))
        got = dist.get_delta_for_epsilon(eps)
        assert got == pytest.approx(amplified, rel=2e-3, abs=1e-12)
        assert got <= labelled * (1 + 2e-3) + 1e-12
        exact = max(exact_delta(eps, P, Q), exact_delta(eps, Q, P), exact_delta(eps, P2, Q2), exact_delta(eps, Q2, P2))
        assert got >= exact - 1e-12


def test_with_replacement_beats_the_group_privacy_bound():
    """At K = n the labelled mixture certifies less than group privacy at the 1 - 1e-12 quantile
    k* of the multiplicity, (k* eps1, k* e^{(k*-1) eps1} delta1 + 1e-12), at every split of delta."""
    from silodp.accounting.releases import GROUP_TAIL

    n, g, b, d, delta = 50, 8, 400, 4, 1e-6
    k = int(binom.isf(GROUP_TAIL, n, 1 / n)) + 1
    inv = pvec.invocation_pld(g, b, n, d, 1, H)
    group = math.inf
    for delta1 in np.geomspace(1e-16, delta, 60):
        eps1 = inv.get_epsilon_for_delta(delta1)
        if k * math.exp((k - 1) * eps1) * delta1 + GROUP_TAIL <= delta:
            group = min(group, k * eps1)
    tight = pvec.transcript_epsilon((pvec.PvecGroup(1, g, b, n, d, True, n, n),), delta, H)
    assert tight < group / 2


def test_reuse_across_epochs_is_composed():
    """Disjoint batches through a permutation per epoch: R K = 3 n rounds use every record 3 times."""
    r = ShuffleRelease("grad", 6, 1.0, 1e-6, BatchSampling.SHUFFLED, 20, 40, 20, params=(5, 100, 0.5, False),
                       dimension=3)
    (grp,) = pvec_groups([r])
    assert grp.uses == 3
    one = dataclasses.replace(grp, uses=1)
    once = pvec.transcript_pld((one,), H, 1e-6).get_epsilon_for_delta(1e-6)
    thrice = pvec.transcript_pld((grp,), H, 1e-6).get_epsilon_for_delta(1e-6)
    ref = pvec.power(pvec.invocation_pld(5, 100, 20, 3, 1, H), 3).get_epsilon_for_delta(1e-6)
    assert thrice == pytest.approx(ref) and thrice > 1.5 * once
    # the l2-aware certificate charges the same reuse: three times the moments
    assert pvec_l2.group_moments(grp, 0.0)[0] == pytest.approx(3 * pvec_l2.group_moments(one, 0.0)[0])
    assert pvec_l2.transcript_epsilon((grp,), 1e-6) > 1.5 * pvec_l2.transcript_epsilon((one,), 1e-6)


def test_calibration_is_certified_and_minimal_on_its_grid():
    groups = (pvec.PvecGroup(4, 6, 1, 30, 8), pvec.PvecGroup(2, 4, 1, 12, 8, True, 12, 30))
    bs, eps = pvec.calibrate_noise(groups, (50.0, 80.0), 2.0, 1e-6, H)
    assert eps <= 2.0
    assert pvec.transcript_epsilon(tuple(dataclasses.replace(g, b=b) for g, b in zip(groups, bs)), 1e-6, H) == eps
    fewer = tuple(dataclasses.replace(g, b=max(1, math.floor(b / 2 ** (1 / 64) - 1))) for g, b in zip(groups, bs))
    assert pvec.transcript_epsilon(fewer, 1e-6, H) > 2.0


def test_a_finer_grid_changes_the_certificate_little():
    """Discretization: halving the interval moves epsilon by < 0.5%, and up by no more than the
    finer grid's larger floating-point charge (a longer FFT; 1e-4 relative here)."""
    groups = (pvec.PvecGroup(20, 10, 5000, 80, 64, True, 40, 80),)
    coarse = pvec.transcript_epsilon(groups, 1e-6, 1e-4)
    fine = pvec.transcript_epsilon(groups, 1e-6, 5e-5)
    assert fine <= coarse * (1 + 1e-4) and coarse == pytest.approx(fine, rel=5e-3)


@pytest.mark.parametrize("d", [5, 161])
def test_rotation_bound_holds_by_monte_carlo(d):
    """P[max_j |(H D x)_j| / sqrt(d') > gamma] <= beta for the worst inputs we know (a basis
    vector, the flat vector, a random one), beta = 0.05 so the event is observable; tolerance:
    4 binomial standard deviations over 4000 sign draws."""
    from silodp.algorithms.shuffle import rotate, rotation_signs

    beta, draws, L = 0.05, 4000, 1.0
    gamma = pvec.rotated_bound(L, d, beta)
    gen = torch.Generator().manual_seed(0)
    xs = [torch.eye(d, dtype=torch.float64)[0], torch.full((d,), d ** -0.5, dtype=torch.float64),
          torch.randn(d, generator=gen, dtype=torch.float64)]
    for x in xs:
        x = x / x.norm() * L
        signs = torch.stack([rotation_signs(d, gen) for _ in range(draws)])
        y = rotate(x.expand(draws, d), signs)  # one sign draw per row
        frac = float((y.abs().max(dim=-1).values > gamma).double().mean())
        assert frac <= beta + 4 * math.sqrt(beta * (1 - beta) / draws)


def test_rotation_is_orthogonal_and_inverted():
    from silodp.algorithms.shuffle import rotate, rotation_signs, unrotate

    gen = torch.Generator().manual_seed(1)
    x = torch.randn(7, 161, generator=gen, dtype=torch.float64)
    s = rotation_signs(161, gen)
    y = rotate(x, s)
    assert y.shape == (7, 256)
    assert torch.allclose(y.norm(dim=-1), x.norm(dim=-1))
    assert torch.allclose(unrotate(y, s, 161), x)


def test_rotated_range_is_smaller_and_never_above_the_bound():
    assert pvec.rotated_bound(1.0, 161) < 0.35
    assert pvec.rotated_bound(1.0, 1) == 1.0
    assert pvec.rotated_dimension(161) == 256 and pvec.rotated_dimension(256) == 256


def test_bad_input_raises_naming_the_argument():
    with pytest.raises(ValueError, match="trials"):
        pvec.coordinate_pld(0, 1, H)
    with pytest.raises(ValueError, match="beta"):
        pvec.rotated_bound(1.0, 4, 1.5)
    with pytest.raises(ValueError, match="weights"):
        pvec.calibrate_noise((pvec.PvecGroup(1, 4, 1, 10, 2),), (), 1.0, 1e-6, H)
    r = ShuffleRelease("grad", 1, 1.0, 1e-6, BatchSampling.FULL, 10, 10, 10, params=(4, 10, 0.25))
    with pytest.raises(ValueError, match="1/2"):
        pvec_groups([r])
