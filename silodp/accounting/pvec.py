"""The exact privacy loss distribution of the binomial vector-summation protocol P_vec (paper Alg 4-5,
Thm D.2; Cheu, Joseph, Mao & Peng 2021), composed over coordinates and invocations by FFT.

One coordinate. The analyzer sees, per coordinate, T = (sum of the messages' rounded levels) +
Bin(m, 1/2), m = messages * b. Every rounded level lies in {0, ..., g} (:mod:`silodp.algorithms.shuffle`
clamps the scaled value to [0, g]), so replacing one message moves the levels' sum by an integer
s in [-g, g]; a record drawn k times (sampling with replacement) moves k messages, |s| <= k g.
Given the other messages' levels the pair of views is (Bin + u, Bin + v); the randomized rounding
makes it a mixture of such pairs, whose hockey-stick divergence is at most the largest of theirs
(joint convexity). For a log-concave noise (the binomial is) the likelihood ratio of
(Bin + s, Bin) is monotone, the optimal tests are upper sets {T >= t}, and
P[Bin + s >= t] - e^eps P[Bin >= t] grows with s: the shift |s| = g (k g) dominates all smaller
ones at every eps. With p = 1/2 the binomial is symmetric, so (Bin - s, Bin) is a reflection of
(Bin + s, Bin): one symmetric pair dominates both directions (Alg 4 takes p in (0, 1/2); p = 1/2
is the variance-maximizing limit and makes the certificate symmetric).

Discretization: the pair's losses are exact (log-pmf ratios accumulated from the mode, no
Gaussian approximation, no cancellation between large log-gamma values); each atom of mass w at
loss l in (a, a + h] is split between the grid points a and a + h so that the mass and
E[e^-L] are kept ("connect the dots" applied atom by atom, Doroshenko et al. 2022 Sec 3): the
discrete hockey-stick curve equals the exact one at every grid point and lies above it between.
Mass outside +-12 standard deviations, and the points whose shifted partner leaves the window,
are charged as infinite loss.

Composition: the coordinates are independent given the messages (independent rounding and noise
per coordinate), so one invocation is the d-fold product (FFT convolutions by repeated squaring,
:func:`power`; Zhu, Dong & Wang 2022 Thm 10 keeps the domination); invocations compose adaptively; a with-replacement
multiplicity k ~ Bin(K, 1/n) is not released: the step is BBG18 Thm 10's amplified mixture of the
k-message PLDs (:func:`silodp.accounting.pld_pairs.amplified_mixture`, a symmetric pair), the tail beyond
the 1 - 1e-15 quantile charged as non-private.

The protocol's parameters (levels, the rotation's range, the noise window, the groups) are in
:mod:`silodp.accounting.pvec_protocol`; the l2-aware certificate in :mod:`silodp.accounting.pvec_l2`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Sequence

import numpy as np
from scipy.special import ndtr

from silodp.accounting import _binomial, pvec_l2
from silodp.accounting import pld as pld_lib, pld_pairs
from silodp.accounting.pvec_protocol import (PvecGroup, certified_dimension, levels, log_pmf_window,  # noqa: F401
                                             rotated_bound, rotated_dimension)  # (re-exported: the protocol's names)
from silodp._validation import check_count, check_delta, check_positive

#: Standard deviations of Bin(m, 1/2) kept on each side of the mean (the rest is charged to +inf).
WINDOW_SDS = 12.0
#: Largest noise trials m b per coordinate (the exact pmf window then has ~4e7 points).
MAX_TRIALS = 10 ** 13
#: The per-coordinate PLD is skipped when it charges this many times the l2 shift (transcript_epsilon).
L2_PREFERRED = 4.0


@functools.lru_cache(maxsize=256)
def coordinate_pld(trials: int, shift: int, interval: float) -> pld_lib.PrivacyLossDistribution:
    """Symmetric PLD dominating one coordinate of P_vec with Bin(``trials``, 1/2) noise when one
    record moves the levels by at most ``shift`` (module docstring), on the grid ``interval``."""
    m = check_count("trials", trials)
    if m > MAX_TRIALS:
        raise ValueError(f"trials: at most {MAX_TRIALS:.0e} noise trials per coordinate, got {m:.3g}")
    s = check_count("shift", shift)
    h = check_positive("interval", interval)
    _, c, outside = log_pmf_window(m, WINDOW_SDS)
    n = len(c)
    if s >= n:  # the shift leaves the noise window: no privacy
        return pld_lib.non_private(h)
    # pair (Bin + s, Bin): the point y = x + s has mass B(x) and loss log B(x) - log B(x + s)
    loss = c[:n - s] - c[s:]
    mass = np.exp(c[:n - s])
    infinite = min(1.0, outside + float(np.sum(np.exp(c[n - s:]))))
    if float(np.max(np.abs(loss))) > pld_lib.MAX_LOSS:
        return pld_lib.non_private(h)
    low = np.floor(loss / h)
    upper = -np.expm1(low * h - loss) / -np.expm1(-h)  # share at low + h keeping E[e^-L]
    upper = np.clip(upper, 0.0, 1.0)
    first = int(low.min())
    size = int(low.max()) - first + 2
    idx = (low - first).astype(np.int64)
    masses = np.bincount(idx, weights=mass * (1.0 - upper), minlength=size)
    masses += np.bincount(idx + 1, weights=mass * upper, minlength=size)
    return pld_lib.PrivacyLossDistribution(pld_lib.LossPmf(h, first, masses, infinite), None)


def power(dist: pld_lib.PrivacyLossDistribution, count: int) -> pld_lib.PrivacyLossDistribution:
    """``count``-fold composition by repeated squaring (O(log count) FFT convolutions, each
    truncating tails of mass <= 1e-15 pessimistically; :meth:`PrivacyLossDistribution.compose`)."""
    k = check_count("count", count)
    out, base = None, dist
    while True:
        if k & 1:
            out = base if out is None else out.compose(base)
        k >>= 1
        if not k:
            assert out is not None  # k >= 1: the first pass set it
            return out
        base = base.compose(base)


@functools.lru_cache(maxsize=256)
def invocation_pld(g: int, b: int, messages: int, dimension: int, multiplicity: int,
                   interval: float) -> pld_lib.PrivacyLossDistribution:
    """One P_vec invocation (``dimension`` coordinates, Bin(messages b, 1/2) each) when one record
    moves ``multiplicity`` of its messages: the coordinate PLD at shift multiplicity * g, d-fold."""
    return power(coordinate_pld(messages * b, multiplicity * g, interval), check_count("dimension", dimension))


def group_pld(group: PvecGroup, interval: float, tail: float = math.exp(pld_lib.LOG_TAIL_MASS)
              ) -> pld_lib.PrivacyLossDistribution:
    """The PLD of a group's ``uses`` invocations; with replacement each is the amplified mixture
    over the record's multiplicity k (:func:`silodp.accounting.pld_pairs.amplified_mixture`), the
    multiplicities beyond the (1 - ``tail``) quantile and the step's upper tail of mass <= ``tail``
    charged as infinite loss (pessimistic)."""
    def inv(k: int) -> pld_lib.PrivacyLossDistribution:
        return invocation_pld(group.g, group.b, group.messages, group.dimension, k, interval)

    if not group.with_replacement:
        step = inv(1)
    else:
        K, q = group.batch_size, 1.0 / group.dataset_size
        kmax = max(1, min(K, _binomial.isf(tail, K, q)))
        weights = [float(_binomial.pmf(k, K, q)) for k in range(kmax + 1)]
        charged = max(0.0, 1.0 - sum(weights))
        step = pld_pairs.amplified_mixture(weights, [inv(k) for k in range(1, kmax + 1)], interval, charged)
        # the rare large multiplicities stretch the loss range: their upper tail (mass <= tail) to +inf
        step = pld_lib.PrivacyLossDistribution(step.remove.truncate(math.log(tail)), None, step.log_mass_truncation_bound)
    return power(step, group.uses)


def default_interval(epsilon: float) -> float:
    """The grid for a target epsilon, 5e-5 epsilon in [1e-6, 5e-4]: at the WBCD SDP transcripts
    (hundreds of invocations of 256 coordinates) halving it moves epsilon by < 1e-4 relative."""
    return min(5e-4, max(1e-6, 5e-5 * check_positive("epsilon", epsilon)))


def transcript_pld(groups: Sequence[PvecGroup], interval: float, delta: float = 0.0) -> pld_lib.PrivacyLossDistribution:
    """The adaptive composition of every group's invocations. ``delta``: the multiplicity tails
    charged as infinite loss may spend up to 2e-3 delta in all (at least the 1e-15 quantile)."""
    uses = sum(g.uses for g in groups if g.with_replacement)
    tail = max(math.exp(pld_lib.LOG_TAIL_MASS), 1e-3 * delta / uses) if uses else 0.0
    out = pld_lib.identity(interval)
    for grp in groups:
        if grp.uses:
            out = out.compose(group_pld(grp, interval, tail))
    return out


@functools.lru_cache(maxsize=512)
def transcript_epsilon(groups: tuple[PvecGroup, ...], delta: float, interval: float) -> float:
    """Certified epsilon at ``delta`` of the whole transcript (cached per transcript). Both
    certificates are sound, so is any one of them and their minimum: the l2-aware one
    (:mod:`silodp.accounting.pvec_l2`) alone where it is finite, certified at every group's own
    noise (no :func:`~silodp.accounting.pvec_l2.trials_cap`), at least :data:`L2_PREFERRED` times
    its conversion floor, and every group has an l2 bound at least :data:`L2_PREFERRED` times below
    the per-coordinate charge d g^2 (the PLD, which costs far more, cannot win there: its squared
    shift is that much larger, the Renyi conversion loses less), else the smaller of the two."""
    dl = check_delta("delta", delta)
    for grp in groups:  # re-validated: a frozen group can still be changed through object.__setattr__
        if not isinstance(grp, PvecGroup):
            raise ValueError(f"groups: must hold PvecGroups, got {type(grp).__name__}")
        grp.__post_init__()
    l2 = pvec_l2.certificate(groups, dl)
    if (math.isfinite(l2.epsilon) and not l2.capped and l2.epsilon >= L2_PREFERRED * l2.floor
            and all(g.l2 is not None and L2_PREFERRED * g.l2 ** 2 <= g.dimension * g.g ** 2 for g in groups)):
        return l2.epsilon
    return min(transcript_pld(groups, interval, dl).get_epsilon_for_delta(dl), l2.epsilon)


def invocation_epsilon(g: int, b: int, messages: int, dimension: int, rotate: bool, delta: float) -> float:
    """Certified epsilon at ``delta`` of one invocation for one message (``dimension``: the
    messages' own; the better of the two certificates, :func:`transcript_epsilon`)."""
    g, b, messages = check_count("g", g), check_count("b", b), check_count("messages", messages)
    dimension = check_count("dimension", dimension)
    grp = PvecGroup(1, g, b, messages, certified_dimension(dimension, rotate), l2=pvec_l2.shift_l2(g, dimension, rotate))
    return transcript_epsilon((grp,), delta, default_interval(1.0))


def _gaussian_mu(epsilon: float, delta: float) -> float:
    """mu of the mu-GDP curve (Dong, Roth & Su 2022) with delta(epsilon) = ``delta`` (bisection;
    epsilon capped at 50, a starting point only)."""
    epsilon = min(epsilon, 50.0)

    def curve(mu: float) -> float:
        return float(ndtr(-epsilon / mu + mu / 2) - math.exp(epsilon) * ndtr(-epsilon / mu - mu / 2))

    lo, hi = 1e-3, 200.0
    for _ in range(60):
        mid = math.sqrt(lo * hi)
        lo, hi = (mid, hi) if curve(mid) < delta else (lo, mid)
    return lo


def _shift_squared(group: PvecGroup) -> float:
    """The squared l2 shift of one message in levels that the certificates charge, d g^2 per
    coordinate or Lambda^2 with an l2 bound (the search's model only)."""
    full = group.dimension * group.g ** 2
    return full if group.l2 is None else min(full, group.l2 ** 2)


def _gaussian_scale(groups: Sequence[PvecGroup], weights: Sequence[float], epsilon: float, delta: float) -> float:
    """The scale s at which b_r = s w_r meets the target under the Gaussian approximation of the
    binomial counts (a shift of :func:`_shift_squared` over sd sqrt(m b / 4); the search's
    starting point only, never a certificate)."""
    total = sum(g.uses * 4.0 * _shift_squared(g) / (g.messages * w) for g, w in zip(groups, weights))
    return max(total / _gaussian_mu(epsilon, delta) ** 2, 1e-12)


@functools.lru_cache(maxsize=512)
def calibrate_noise(groups: tuple[PvecGroup, ...], weights: tuple[float, ...], epsilon: float, delta: float,
                    interval: float) -> tuple[tuple[int, ...], float]:
    """The smallest scale s on the grid 2^(i/64) such that trials b_r = ceil(s w_r) (``weights``:
    the reference shape, one per group) certify the transcript at (``epsilon``, ``delta``);
    returns (the b's, the certified epsilon). Monotone in s: more trials add independent noise
    (Bin(m + m', 1/2) = Bin(m, 1/2) + Bin(m', 1/2), post-processing)."""
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    if len(weights) != len(groups) or not all(w > 0 for w in weights):
        raise ValueError(f"weights: need one positive weight per group, got {weights}")

    def bs(i: int) -> tuple[int, ...]:
        return tuple(max(1, math.ceil(2.0 ** (i / 64.0) * w)) for w in weights)

    def at(i: int) -> tuple[PvecGroup, ...]:
        return tuple(dataclasses.replace(g, b=b) for g, b in zip(groups, bs(i)))

    def certify(i: int) -> float:
        return transcript_epsilon(at(i), dl, interval)

    def probe(i: int) -> float:
        """certify(i), or the l2-aware certificate where that already meets the target (it bounds
        certify(i) from above: the same decision, without the per-coordinate PLD)."""
        l2 = pvec_l2.certificate(at(i), dl).epsilon
        return l2 if l2 <= eps else certify(i)

    lowest = -64 * 40
    most = max(w * g.messages for g, w in zip(groups, weights))  # trials per unit scale
    highest = math.floor(64.0 * math.log2(MAX_TRIALS / most)) - 1
    start = round(64.0 * math.log2(_gaussian_scale(groups, weights, eps, dl)))
    lo, hi, i = lowest, None, min(highest, max(lowest, start))
    seen: list[tuple[int, float]] = []  # (i, log eps) of the finite certificates
    for _ in range(12):  # secant jumps on log eps (first on the model eps ~ b^(-1/2)) until bracketed
        e = probe(i)
        if e <= eps:
            hi = i if hi is None else min(hi, i)
        else:
            lo = max(lo, i)
        if hi is not None and hi - lo <= 1:
            break
        if math.isfinite(e) and e > 0:
            seen.append((i, math.log(e)))
        (i0, l0), (i1, l1) = seen[-2:] if len(seen) > 1 else ((0, 0.0), (0, 0.0))
        slope = (l1 - l0) / (i1 - i0) if i1 != i0 else 0.0
        if slope < 0:  # the smallest grid point at or past the predicted crossing
            step = math.ceil((math.log(eps) - l1) / slope - 1e-9)
        else:
            step = 256 if not math.isfinite(e) else round(128.0 * math.log2(e / eps)) + (1 if e > eps else -1)
        i = min(highest, max(lowest, i + step))
        if hi is not None:
            i = min(max(i, lo + 1), hi - 1)
        elif i <= lo:
            i = lo + 1
    if hi is None:
        if probe(highest) > eps:
            raise ValueError(f"epsilon={eps:g} is unreachable for the binomial protocol at delta={dl:g}")
        hi = highest
    while hi - lo > 1:  # bisection on the grid (monotone: more trials, less loss)
        mid = (lo + hi) // 2
        if bs(mid) == bs(hi) or probe(mid) <= eps:
            hi = mid
        else:
            lo = mid
    return bs(hi), certify(hi)

