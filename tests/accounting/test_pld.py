"""silodp's own PLD engine against exact curves, numerical integration and dp-accounting.

Tolerances: a pessimistic PLD may only over-state delta (resp. epsilon); ``1e-12`` relative slack
covers floating point. Agreement with dp-accounting (same connect-the-dots discretization, a
different implementation) is required to 1e-6 relative in epsilon.
"""

import math

import dp_accounting as dpa
import numpy as np
import pytest
from hypothesis import assume, example, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from silodp.accounting import (
    GaussianDpEvent,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
    composition,
    epsilon,
    gaussian,
    pld,
    pld_pairs,
)
from silodp.accounting.events import ADD_OR_REMOVE_ONE, REPLACE_ONE, sensitivity


def exact_mixture_delta(a: float, b: float, s: float, eps: float) -> float:
    """Hockey-stick divergence of the mixture pair by quadrature of (p - e^eps q)_+."""
    p = lambda x: (1 - a) * stats.norm.pdf(x, 0, s) + a * stats.norm.pdf(x, 1, s)
    q = lambda x: (1 - b) * stats.norm.pdf(x, 0, s) + b * stats.norm.pdf(x, -1, s)
    f = lambda x: max(0.0, p(x) - math.exp(eps) * q(x))
    return integrate.quad(f, -12 * s - 1, 12 * s + 1, points=[-1, 0, 1], limit=400, epsabs=1e-15)[0]


@pytest.mark.parametrize("a,b,s", [(1.0, 0.0, 0.7), (0.05, 0.0, 1.0), (0.0, 0.05, 1.0), (0.2, 0.2, 1.5)])
@pytest.mark.parametrize("eps", [0.0, 0.05, 0.4, 1.3])
def test_pair_curve_matches_quadrature(a, b, s, eps):
    ours = float(pld_pairs.GaussianPair(a, b, s).delta(np.array([eps]))[0])
    assert ours == pytest.approx(exact_mixture_delta(a, b, s, eps), rel=1e-6, abs=1e-13)


@pytest.mark.parametrize("z", [0.6, 1.0, 4.0])
def test_single_gaussian_is_exact_on_the_grid_and_above_it_between(z):
    h = 1e-3
    p = pld_pairs.from_gaussian_mechanism(z, value_discretization_interval=h)
    rng = np.random.default_rng(0)
    for eps in np.concatenate([np.arange(0, 3, 0.25), rng.uniform(0, 3, 20)]):
        exact = math.exp(float(gaussian.analytic_log_delta(eps, z)))
        ours = p.get_delta_for_epsilon(float(eps))
        assert ours >= exact * (1 - 1e-12)
        if abs(eps / h - round(eps / h)) < 1e-9:
            assert ours == pytest.approx(exact, rel=1e-9, abs=1e-15)


def test_sharp_gaussian_evaluated_in_pieces_is_exact_at_the_pieces_seams():
    """z = 0.05: 3.3e5 grid points at h = 1e-3, evaluated in pieces of ``pld._CHUNK``; the discrete
    curve equals the analytic one (Balle & Wang 2018) at the points on both sides of each seam."""
    h = 1e-3
    one = pld_pairs.from_gaussian_mechanism(0.05, value_discretization_interval=h).remove
    assert len(one.masses) > 20 * pld._CHUNK
    for seam in range(pld._CHUNK, len(one.masses), 7 * pld._CHUNK):
        for i in (seam - 1, seam, seam + 1):
            eps = (one.offset + i) * h
            exact = math.exp(float(gaussian.analytic_log_delta(eps, 0.05)))
            assert one.delta(eps) == pytest.approx(exact, rel=1e-9, abs=1e-15)


@pytest.mark.parametrize("z,steps", [(8.0, 100), (30.0, 2000), (3.0, 10)])
def test_gaussian_composition_is_pessimistic_and_tight(z, steps):
    """T Gaussian steps are one Gaussian at z / sqrt(T) (exact reference, Balle-Wang)."""
    ours = pld_pairs.from_gaussian_mechanism(z, value_discretization_interval=1e-4).self_compose(steps)
    exact = gaussian.epsilon_for_delta(z / math.sqrt(steps), 1e-6)
    got = ours.get_epsilon_for_delta(1e-6)
    assert exact * (1 - 1e-9) <= got <= exact * 1.002


@pytest.mark.parametrize("z,q,steps", [(1.0, 0.01, 1000), (0.8, 0.1, 100), (2.0, 0.001, 5000), (1.5, 0.5, 50)])
@pytest.mark.parametrize("relation", ["add_remove", "replace_one"])
def test_subsampled_gaussian_agrees_with_dp_accounting(z, q, steps, relation):
    nr = ADD_OR_REMOVE_ONE if relation == "add_remove" else REPLACE_ONE
    ours = pld_pairs.from_gaussian_mechanism(z, q, nr, 1e-4).self_compose(steps)
    # one unit: sigma / C under both relations, as dp-accounting
    ref = dpa.pld.privacy_loss_distribution.from_gaussian_mechanism(
        z, sampling_prob=q, value_discretization_interval=1e-4,
        neighboring_relation=dpa.NeighboringRelation[nr.name]).self_compose(steps)
    # ours charges its round-off bound to delta: it answers as dp-accounting does at delta - charge
    charge = ours.roundoff
    assert 0 < charge < 1e-8
    for delta in (1e-3, 1e-5, 1e-7):
        got = ours.get_epsilon_for_delta(delta)
        assert ref.get_epsilon_for_delta(delta) * (1 - 1e-6) <= got
        assert got <= ref.get_epsilon_for_delta(delta - charge) * (1 + 1e-6)
    assert ours.get_delta_for_epsilon(1.0) == pytest.approx(ref.get_delta_for_epsilon(1.0) + charge, rel=1e-5, abs=1e-14)


def test_single_subsampled_step_is_pessimistic_against_quadrature():
    p = pld_pairs.from_gaussian_mechanism(1.0, 0.05, ADD_OR_REMOVE_ONE, 1e-3)
    for eps in (0.0, 0.0371, 0.1, 0.25):
        exact = max(exact_mixture_delta(0.05, 0.0, 1.0, eps), exact_mixture_delta(0.0, 0.05, 1.0, eps))
        assert exact * (1 - 1e-9) <= p.get_delta_for_epsilon(eps) <= exact + 1e-6


@pytest.mark.parametrize("eps0,delta0,k", [(0.3, 1e-6, 20), (1.0, 0.0, 5), (0.05, 1e-8, 200)])
def test_epsilon_delta_events_compose_to_the_optimal_theorem(eps0, delta0, k):
    """Composing the canonical (eps, delta) pair is the optimal composition (Kairouz-Oh-Viswanath)."""
    ours = pld.from_privacy_parameters(eps0, delta0, 1e-4).self_compose(k).get_epsilon_for_delta(1e-5 + k * delta0)
    kov = composition.kov(eps0, delta0, k, 1e-5 + k * delta0)
    assert kov * (1 - 1e-6) <= ours <= kov + k * 1e-4 + 1e-3


def test_mixture_with_identity_scales_delta():
    """A release that happens w.p. w (label public) has delta(eps) = w delta_G(eps)."""
    g = pld_pairs.from_gaussian_mechanism(1.0, value_discretization_interval=1e-3)
    mix = g.compute_mixture(pld.identity(1e-3), 0.3)
    for eps in (0.0, 0.5, 2.0):
        assert mix.get_delta_for_epsilon(eps) == pytest.approx(0.3 * g.get_delta_for_epsilon(eps), rel=1e-12)


def test_truncation_only_moves_mass_up():
    g = pld_pairs.from_gaussian_mechanism(2.0, 0.1, ADD_OR_REMOVE_ONE, 1e-3).remove
    cut = g.truncate(math.log(1e-6))
    assert len(cut.masses) < len(g.masses)
    for eps in (0.0, 0.1, 0.3):
        assert cut.delta(eps) >= g.delta(eps) * (1 - 1e-12)


@pytest.mark.parametrize("kwargs,word", [
    ({"noise_multiplier": 0.01}, "noise_multiplier"),
    ({"noise_multiplier": -1.0}, "noise_multiplier"),
    ({"noise_multiplier": 1.0, "value_discretization_interval": 0.0}, "value_discretization_interval"),
    ({"noise_multiplier": 1.0, "sampling_prob": 1.5}, "sampling_prob"),
])
def test_bad_input_names_the_argument(kwargs, word):
    with pytest.raises(ValueError, match=word):
        pld_pairs.from_gaussian_mechanism(**kwargs)


def test_grids_must_match():
    with pytest.raises(ValueError, match="value_discretization_interval"):
        pld.identity(1e-3).compose(pld.identity(1e-4))


@pytest.mark.parametrize("z,q,steps", [(1.0, 0.05, 64), (0.5, 0.002, 512)])
def test_one_fft_power_on_the_chernoff_window_matches_repeated_convolution(z, q, steps):
    """The windowed FFT power (out-of-window tails charged to +inf) against the plain convolution
    of the full supports, squared log2(steps) times, and against dp-accounting. Tolerance: the two
    computations' round-off charges (each bounds its own l1 error, so they differ by at most the sum)
    plus 1e-11 for the windows' tails; the charge is part of every delta."""
    one = pld_pairs.from_gaussian_mechanism(z, q, ADD_OR_REMOVE_ONE, 1e-3)
    plain = one.remove
    for _ in range(int(math.log2(steps))):
        plain = plain.compose(plain, -300.0)
    fast = one.self_compose(steps)
    ref = dpa.pld.privacy_loss_distribution.from_gaussian_mechanism(
        z, sampling_prob=q, value_discretization_interval=1e-3).self_compose(steps)
    assert len(fast.remove.masses) < len(plain.masses)
    assert 0 < fast.remove.roundoff < 1e-8 and 0 < plain.roundoff < 1e-8
    for eps in (0.0, 0.5, 1.0, 2.0, 4.0):
        assert abs(fast.remove.delta(eps) - plain.delta(eps)) <= fast.remove.roundoff + plain.roundoff + 1e-11
        assert fast.get_delta_for_epsilon(eps) >= ref.get_delta_for_epsilon(eps) - 1e-12


@settings(max_examples=12, deadline=None)
@given(z=st.floats(0.5, 10.0), log_q=st.floats(-4.0, 0.0), steps=st.integers(1, 400),
       replace_one=st.booleans(), log_delta=st.floats(-10.0, -3.0))
@example(z=0.5, log_q=0.0, steps=311, replace_one=False, log_delta=-3.0)  # epsilon ~ 730: dp-accounting drifts
@example(z=0.5, log_q=-0.0457575, steps=400, replace_one=False, log_delta=-3.0)
@example(z=4.0, log_q=-3.0, steps=302, replace_one=False, log_delta=-3.0)  # epsilon ~ 0.005
@example(z=1.0, log_q=0.0, steps=1, replace_one=True, log_delta=-3.0)
def test_random_mechanisms_agree_with_the_references_and_beat_rdp(z, log_q, steps, replace_one, log_delta):
    """Property, on random (z, q, T, relation, delta): without subsampling silodp's PLD epsilon lies
    within 0.1% above the exact Gaussian at z / sqrt(T) (dp-accounting drifts above it when epsilon
    is in the hundreds, or overflows to inf); with subsampling it equals dp-accounting's (same
    discretization, independent code) to 1e-4 up to epsilon = 100, and lies within 1% below it
    beyond. It exceeds silodp's RDP epsilon by at most ten grid
    steps (h = 1e-3; at epsilon ~ 0.005 both PLDs are pessimistic by a few steps)."""
    q, delta = 10 ** log_q, 10 ** log_delta
    nr = REPLACE_ONE if replace_one else ADD_OR_REMOVE_ONE
    composed = pld_pairs.from_gaussian_mechanism(z, q, nr, 1e-3).self_compose(steps)
    ours = composed.get_epsilon_for_delta(delta)
    charged = delta - composed.roundoff  # ours answers at most as the reference at delta - charge
    assume(composed.roundoff < 0.1 * delta)
    if q == 1.0:
        exact = gaussian.epsilon_for_delta(z / (sensitivity(nr) * math.sqrt(steps)), delta)
        assert exact * (1 - 1e-9) <= ours <= gaussian.epsilon_for_delta(
            z / (sensitivity(nr) * math.sqrt(steps)), charged) * 1.001 + 1e-3
    else:
        dpa_pld = dpa.pld.privacy_loss_distribution.from_gaussian_mechanism(
            z, sampling_prob=q, value_discretization_interval=1e-3,
            neighboring_relation=dpa.NeighboringRelation[nr.name]).self_compose(steps)
        ref, ref_charged = dpa_pld.get_epsilon_for_delta(delta), dpa_pld.get_epsilon_for_delta(charged)
        if ref <= 100:
            assert ref * (1 - 1e-4) - 1e-6 <= ours <= ref_charged * (1 + 1e-4) + 1e-6
        else:  # as for the Gaussian, dp-accounting drifts up (or overflows) at huge epsilon
            assert ref * 0.99 <= ours <= ref_charged * (1 + 1e-6)  # 1e-6: an extended-precision recomposition
    event = SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)) if q < 1 else GaussianDpEvent(z), steps)
    # up to ten grid steps; pld may spend up to half of delta on its round-off charge
    assert ours <= epsilon(event, delta / 2, "rdp", nr) * (1 + 1e-3) + 1e-2


@pytest.mark.parametrize("z,q,count", [(1.0, 0.05, 64), (0.5, 1.0, 10), (2.0, 0.3, 100_000)])
def test_chernoff_window_searched_on_a_coarse_copy_matches_the_full_search(z, q, count):
    """t is searched on a 4096-block copy (each block's mass at its largest loss), the bound then
    evaluated exactly at it: any t is a valid Chernoff bound, so the point can only be at or beyond
    the full search's optimum; required within 1e-6 relative of it (the same FFT window)."""
    one = pld_pairs.from_gaussian_mechanism(z, q, ADD_OR_REMOVE_ONE, 1e-4).remove
    keep = one.masses > 0
    l, m = one.losses[keep], one.masses[keep]
    assert len(l) > 2 * pld.CHERNOFF_BINS
    spread = float(l[-1] - l[0])
    tau = pld.LOG_TAIL_MASS
    full = lambda t: (count * pld._lse(np.log(m) + t * l) - tau) / t  # noqa: E731
    best = full(pld._argmin_over_t(full, spread))
    coarse = pld._chernoff_bound(l, m, count, tau, spread)
    assert best * (1 - 1e-12) <= coarse <= best + 1e-6 * abs(best)


def test_a_small_support_is_composed_whole_without_tails():
    """Below pld.SMALL_SUPPORT points the T-fold support is kept whole: no Chernoff window, nothing
    wrapped or charged to +inf, the masses those of T direct convolutions (to the charged round-off)."""
    import numpy as np

    from silodp.accounting import pld as pld_mod

    one = pld_mod.LossPmf(0.5, -1, np.array([0.2, 0.3, 0.5]), 0.0)
    got = one.self_compose(12, pld_mod.LOG_TAIL_MASS)
    want = np.array([1.0])
    for _ in range(12):
        want = np.convolve(want, one.masses)
    assert got.infinity_mass == 0.0 and got.offset == -12 and len(got.masses) == len(want)
    assert np.sum(np.abs(got.masses - want)) <= got.roundoff + 1e-15


def test_single_steps_are_built_once_and_shared_read_only():
    """The accountant's passes and a second accountant on the same event reuse each step's PLD
    (pld.cached_step): the same certificate, masses read-only, another grid another entry."""
    from silodp.accounting import pld as pld_mod
    from silodp.accounting.accountants import get_accountant

    pld_mod._STEPS.clear()
    event = SelfComposedDpEvent(PoissonSampledDpEvent(0.02, GaussianDpEvent(1.1)), 300)
    first = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(event).get_epsilon(1e-6)
    assert len(pld_mod._STEPS) == 1
    (cached,) = pld_mod._STEPS.values()
    assert not cached.remove.masses.flags.writeable and not cached.add.masses.flags.writeable
    assert get_accountant("pld", ADD_OR_REMOVE_ONE).compose(event).get_epsilon(1e-6) == first
    assert len(pld_mod._STEPS) == 1
    coarse = get_accountant("pld", ADD_OR_REMOVE_ONE, value_discretization_interval=2e-4).compose(event).get_epsilon(1e-6)
    assert len(pld_mod._STEPS) == 2 and coarse >= first * (1 - 1e-3)
