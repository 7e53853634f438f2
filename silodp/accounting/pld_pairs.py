"""Mechanism pairs and their pessimistic PLDs: the layer below :mod:`silodp.accounting.pld`.

Each function here turns a mechanism (a pair (P, Q) of output distributions, or an upper bound on
its hockey-stick curve) into a :class:`~silodp.accounting.pld.LossPmf` /
:class:`~silodp.accounting.pld.PrivacyLossDistribution` whose curve lies above the pair's at every
eps; :mod:`silodp.accounting.pld` composes them, and the ``pld`` accountant
(:mod:`silodp.accounting.accountants.pld`) maps events to them (as dp-accounting's layers:
mechanism -> PMF -> accountant).

Discretization ("connect the dots", Doroshenko et al. 2022, Sec 3). On the grid eps_i = i h the
masses are chosen so that the discrete curve equals the true delta at every grid point; between
grid points it is linear in e^eps, while the true curve is convex in e^eps (a supremum of the
linear functions P(S) - e^eps Q(S)), so the discrete curve lies above it: *pessimistic* at every
eps. With D_i = delta(eps_{i-1}) - delta(eps_i) the mass at eps_i is
p_i = (e^h D_i - D_{i+1}) / (e^h - 1), the mass at +inf is delta(eps_max) and the lowest point takes
the rest (:func:`connect_the_dots`); :mod:`silodp.accounting.pld` composes the PMFs. Dots at any
subset of the grid are as pessimistic (:func:`connect_the_dots_at`): the add/remove Poisson
Gaussian's directions skip grid points in P's far tails
(:meth:`OneSidedGaussianPair.strided_loss_pmf`), at a cost bounded by the tail truncation's.

Mechanisms. Every Gaussian pair silodp accounts is, after scaling to unit shift, the pair
P = (1 - a) N(0, s^2) + a N(1, s^2), Q = (1 - b) N(0, s^2) + b N(-1, s^2), whose loss is increasing
in x, so {L > eps} = {x > x*(eps)} with x* the root of a quadratic in e^{x/s^2} (closed form):

* Gaussian mechanism, noise multiplier z = sigma / C: a = 1, b = 0, s = z / sensitivity
  (sensitivity 1 under add/remove, 2 under replace-one; symmetric);
* Poisson-subsampled Gaussian, add/remove (sampling probability q): "remove" a = q, b = 0 and
  "add" a = 0, b = q (mirrored), s = z; the curve is the larger of the two, each composed apart;
* Poisson-subsampled Gaussian, replace-one, contributions in the ball of radius C: the changed
  record's contribution moves from -C to +C, a = b = q, s = z (symmetric).

Pairs known only through an upper bound on their curve in both directions (sampling without
replacement, whose orientation can change from step to step; BBG18 Thm 10's amplified mixtures;
:mod:`silodp.accounting.with_replacement`) are charged as the symmetric pair of
:func:`symmetric_loss_pmf`: the bound's greatest convex minorant, connected the same way.

Only numpy and scipy.special are imported (scipy.stats inside
:func:`from_truncated_subsampled_gaussian`); tested against dp-accounting's PLD library and the
analytic Gaussian curve (Balle & Wang 2018).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

from silodp.accounting import events as ev
from silodp.accounting.pld import (LOG_TAIL_MASS, MAX_LOSS, MAX_POINTS, _CHUNK, LossPmf, PrivacyLossDistribution,
                                   identity, mixture)
from silodp._validation import check_positive


def _log(p: float) -> float:
    return math.log(p) if p > 0 else -math.inf


@dataclasses.dataclass(frozen=True)
class GaussianPair:
    """P = (1-a) N(0, s^2) + a N(1, s^2) against Q = (1-b) N(0, s^2) + b N(-1, s^2)."""

    a: float
    b: float
    s: float

    def loss(self, x: np.ndarray) -> np.ndarray:
        """Privacy loss log(dP/dQ)(x), increasing in x."""
        v = (2.0 * np.asarray(x, dtype=float) - 1.0) / (2.0 * self.s ** 2)  # log N(1)/N(0) at x
        num = np.logaddexp(_log(1.0 - self.a), _log(self.a) + v)
        den = np.logaddexp(_log(1.0 - self.b), _log(self.b) - v - 1.0 / self.s ** 2)
        return num - den

    def threshold(self, epsilon: np.ndarray) -> np.ndarray:
        """x*(eps) with {L > eps} = {x > x*}: w = e^v solves
        a w^2 + ((1 - a) - e^eps (1 - b)) w - e^eps b e^{-1/s^2} = 0 (the positive root)."""
        a, b, s = self.a, self.b, self.s
        if a == 1.0 and b == 0.0:  # the plain Gaussian: w = e^eps exactly
            return s * s * np.asarray(epsilon, dtype=float) + 0.5
        big_e = np.exp(epsilon)
        qb = (1.0 - a) - big_e * (1.0 - b)
        qc = -big_e * b * math.exp(-1.0 / s ** 2)
        root = np.hypot(qb, 2.0 * np.sqrt(-a * qc))  # sqrt(qb^2 - 4 a qc) without overflow
        with np.errstate(divide="ignore", invalid="ignore"):
            w = np.where(qb >= 0, -2.0 * qc / (qb + root), (root - qb) / (2.0 * a) if a > 0 else np.inf)
            w = np.where(np.isnan(w), 0.0, w)  # qb = qc = 0: {L > eps} is everything
            return s * s * np.log(w) + 0.5

    def delta(self, epsilon: np.ndarray) -> np.ndarray:
        """Hockey-stick curve delta(eps) = P(x > x*) - e^eps Q(x > x*), in log space."""
        eps = np.asarray(epsilon, dtype=float)
        x, s = self.threshold(eps), self.s
        with np.errstate(divide="ignore", invalid="ignore"):
            if self.a == 1.0 and self.b == 0.0:  # the plain Gaussian (P = N(1, s^2), Q = N(0, s^2)): 2 tails, not 3
                log_p, log_q = log_ndtr((1.0 - x) / s), log_ndtr(-x / s)
            else:
                tail0 = log_ndtr(-x / s)  # a component of weight 0 adds log(0) = -inf: skipped (same values)
                log_p = tail0 if self.a == 0.0 else np.logaddexp(_log(1.0 - self.a) + tail0,
                                                                 _log(self.a) + log_ndtr((1.0 - x) / s))
                log_q = tail0 if self.b == 0.0 else np.logaddexp(_log(1.0 - self.b) + tail0,
                                                                 _log(self.b) + log_ndtr((-1.0 - x) / s))
            d = np.exp(log_p) * -np.expm1(np.minimum(eps + log_q - log_p, 0.0))
        return np.where(np.isposinf(x), 0.0, np.where(np.isneginf(x), -np.expm1(eps), d))

    #: Bound on the relative error of :meth:`survival`, in units of u (a few ulps per tail).
    SURVIVAL_UNITS = 8.0

    def loss_range(self, log_mass_truncation_bound: float) -> tuple[float, float]:
        """The losses of x in [min mean - k s, max mean + k s], outside which P has mass below
        e^bound (k = sqrt(-2 bound))."""
        k = math.sqrt(-2.0 * log_mass_truncation_bound)
        lo_x = (1.0 if self.a == 1.0 else 0.0) - k * self.s
        hi_x = (0.0 if self.a == 0.0 else 1.0) + k * self.s
        l_lo, l_hi = (float(v) for v in self.loss(np.array([lo_x, hi_x])))
        return l_lo, l_hi

    def survival(self, epsilon: np.ndarray) -> np.ndarray:
        """P[L > eps] = P(x > x*(eps)) (closed form in Phi)."""
        x = self.threshold(np.asarray(epsilon, dtype=float))
        with np.errstate(divide="ignore", invalid="ignore"):
            log_p = np.logaddexp(_log(1.0 - self.a) + log_ndtr(-x / self.s), _log(self.a) + log_ndtr((1.0 - x) / self.s))
        return np.where(np.isneginf(x), 1.0, np.where(np.isposinf(x), 0.0, np.exp(log_p)))

    def pass_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        """P(x > tau) and Q(x > tau) over a grid of tau from -3 s to 12 s past the midpoint."""
        taus = np.linspace(-3.0, 12.0, 301) * self.s + 0.5
        tail0 = np.exp(log_ndtr(-taus / self.s))
        return ((1.0 - self.a) * tail0 + self.a * np.exp(log_ndtr((1.0 - taus) / self.s)),
                (1.0 - self.b) * tail0 + self.b * np.exp(log_ndtr((-1.0 - taus) / self.s)))

    def loss_pmf(self, interval: float, log_mass_truncation_bound: float) -> LossPmf:
        """Connect-the-dots discretization on the grid i * interval over the losses of x in
        [min mean - k s, max mean + k s], where P has mass below e^bound outside."""
        first, last = _grid(interval, *self.loss_range(log_mass_truncation_bound))
        return connect_the_dots(self.delta, first, last, interval)


def _grid(interval: float, l_lo: float, l_hi: float) -> tuple[int, int]:
    """The first and last grid index of the losses [l_lo, l_hi] (rounded outwards); ValueError when
    they pass ``MAX_LOSS`` or span more than ``MAX_POINTS`` points."""
    if max(abs(l_lo), abs(l_hi)) > MAX_LOSS:
        raise ValueError(f"noise_multiplier: privacy losses reach {max(abs(l_lo), abs(l_hi)):.3g}; "
                         "the noise is too small for the pld accountant (epsilon is huge); use 'rdp'")
    first, last = math.floor(l_lo / interval), math.ceil(l_hi / interval)
    if last - first > MAX_POINTS:
        raise ValueError(f"noise_multiplier: the losses span {last - first:.3g} grid points at "
                         f"value_discretization_interval={interval:g}; use a coarser grid or 'rdp'")
    return first, last


@dataclasses.dataclass(frozen=True)
class OneSidedGaussianPair(GaussianPair):
    """A :class:`GaussianPair` with ``a = 0`` or ``b = 0`` (the two directions of the Poisson-subsampled
    Gaussian under add/remove), whose threshold's quadratic degenerates: ``b = 0`` gives
    w = (e^eps - (1 - a)) / a (0 where that is <= 0: {L > eps} is everything), ``a = 0`` gives
    w = e^eps b e^{-1/s^2} / (1 - e^eps (1 - b)) (+inf where the denominator is <= 0: nothing).
    These are :meth:`GaussianPair.threshold`'s own operations with its zero terms dropped
    (hypot(qb, 0) = |qb|, and the factor 2 in numerator and denominator is exact), so every
    threshold, curve value and PMF is bit-for-bit the general class's, in a tenth of the
    threshold's time (no hypot, sqrt or selects). :func:`from_gaussian_mechanism` builds the two
    directions by :meth:`strided_loss_pmf` instead (its own dots and :meth:`curve`: the build of a
    ledger of distinct releases)."""

    def __post_init__(self) -> None:
        if not (self.a == 0.0) != (self.b == 0.0) or self.a == 1.0:
            raise ValueError(f"a, b: exactly one must be 0 (and a < 1), got a={self.a}, b={self.b}")

    def threshold(self, epsilon: np.ndarray) -> np.ndarray:
        a, b, s = self.a, self.b, self.s
        big_e = np.exp(epsilon)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if b == 0.0:
                gap = big_e - (1.0 - a)  # -qb of the general form, exactly
                w = np.where(gap > 0, gap / a, 0.0)
            else:
                qb = 1.0 - big_e * (1.0 - b)
                w = np.where(qb > 0, (big_e * b * math.exp(-1.0 / s ** 2)) / qb, np.inf)
            return s * s * np.log(w) + 0.5

    def curve(self, epsilon: np.ndarray) -> np.ndarray:
        """delta(eps) = P(x > x*) - e^eps Q(x > x*) as a difference of normal tails in linear space
        (scipy's ``ndtr``, relatively accurate in the lower tail; no logs, about half
        :meth:`delta`'s time): for b = 0, e^eps - (1 - a) = a w* and
        delta = a Phi((1 - x*)/s) - (e^eps - (1 - a)) Phi(-x*/s) (1 - e^eps where e^eps <= 1 - a);
        for a = 0, delta = (1 - e^eps (1 - b)) Phi(-x*/s) - e^eps b Phi((-1 - x*)/s) (0 where
        e^eps (1 - b) >= 1). Against a 40-digit evaluation (tests/accounting/test_pld_tree.py) it is
        as accurate as :meth:`delta` (within 1e-12 relative plus 4 ulps of 1 on the loss range of
        :meth:`loss_pmf`). A tail below the smallest normal number (arguments past
        -:data:`NDTR_FLOOR`) reads 0: :meth:`strided_loss_pmf` uses :meth:`delta` where its grid
        would reach there."""
        a, b, s = self.a, self.b, self.s
        eps = np.asarray(epsilon, dtype=float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            if b == 0.0:
                gap = np.exp(eps)
                gap -= 1.0 - a  # a w*; <= 0 where e^eps <= 1 - a (x* = -inf: those points are set last)
                arg = np.log(gap)
                arg *= -s
                arg += s * math.log(a) - 0.5 / s  # -x*/s = -(s^2 log(gap / a) + 0.5) / s
                out = ndtr(arg + 1.0 / s)
                out *= a
                arg = ndtr(arg)
                arg *= gap
                out -= arg
                low = gap <= 0.0
                if low.any():
                    out[low] = -np.expm1(eps[low])
                return out
            big_e = np.exp(eps)
            qb = big_e * (b - 1.0)
            qb += 1.0  # <= 0 past e^eps (1 - b) = 1 (x* = +inf: 0 there)
            arg = np.log(qb)
            arg -= eps
            arg *= s
            arg += 0.5 / s - s * math.log(b)  # -x*/s, x* = s^2 log(e^eps b e^{-1/s^2} / qb) + 0.5
            out = ndtr(arg)
            out *= qb
            arg = ndtr(arg - 1.0 / s)
            arg *= big_e
            arg *= b
            out -= arg
            out[qb <= 0.0] = 0.0
            return out

    def _scalar_loss(self, x: float) -> float:
        """The loss at one x (floats, not arrays: only to place :meth:`strided_loss_pmf`'s dots)."""
        v = (2.0 * x - 1.0) / (2.0 * self.s ** 2)
        if self.b == 0.0:
            return math.log1p(self.a * math.expm1(v)) if v < 700.0 else math.log(self.a) + v
        w = -v - 1.0 / self.s ** 2
        return -(math.log1p(self.b * math.expm1(w)) if w < 700.0 else math.log(self.b) + w)

    def _x_beyond(self, tau: float) -> tuple[float, float]:
        """(lo, hi) with P(x < lo) <= tau and P(x > hi) <= tau: lo = -k(tau) s (both components of P
        lie at or above N(0, s^2)); hi splits tau between them, (1 - a) Phi(-hi/s) <= tau / 2 and
        a Phi((1 - hi)/s) <= tau / 2 (k(p) = Phi^-1(1 - p); for a = 0, hi = k(tau) s)."""
        s = self.s
        if self.a == 0.0:
            return -_quantile(tau) * s, _quantile(tau) * s
        return -_quantile(tau) * s, max(_quantile(tau / 2.0) * s, 1.0 + _quantile(min(0.5, tau / (2.0 * self.a))) * s)

    def dots(self, first: int, last: int, interval: float, log_mass_truncation_bound: float) -> np.ndarray:
        """The grid indices in [first, last] at which :meth:`strided_loss_pmf` evaluates the curve:
        every one, except in P's tails: for each stride r_i of :data:`TAIL_STRIDES` (B of them),
        every r_i-th point where P's mass beyond (:meth:`_x_beyond`, one grid point of margin) is
        below tau_i = e^bound / (B (1 - e^{-r_i h})); both ends always."""
        lows, highs, lo, hi = [], [], first, last
        budget = math.exp(log_mass_truncation_bound) / len(TAIL_STRIDES)
        for stride in reversed(TAIL_STRIDES):  # the outermost band first
            x_lo, x_hi = self._x_beyond(budget / -math.expm1(-stride * interval))
            inner_lo = min(max(lo, math.floor(self._scalar_loss(x_lo) / interval) - 1), hi)
            inner_hi = max(min(hi, math.ceil(self._scalar_loss(x_hi) / interval) + 1), inner_lo)
            lows.append(np.arange(lo, inner_lo, stride))
            highs.append(np.arange(hi, inner_hi, -stride)[::-1])
            lo, hi = inner_lo, inner_hi
        return np.concatenate(lows + [np.arange(lo, hi + 1)] + highs[::-1])

    def strided_loss_pmf(self, interval: float, log_mass_truncation_bound: float) -> LossPmf:
        """:meth:`loss_pmf`'s grid (its x range, the losses in scalar arithmetic) with dots only at
        :meth:`dots` (:func:`connect_the_dots_at`; the curve by :meth:`curve`).

        Pessimistic, as every connect-the-dots PMF. Tightness: let R be the pair's loss rounded up
        to the full grid (each grid step's mass at its top point, the mass past the last point at
        +inf) and R' = R with its mass between consecutive dots moved up to the upper dot. R'
        dominates the pair and is supported on the dots, so this PMF (the tightest such: equal to
        the pair's curve at the dots, linear in e^eps between) lies below R' at every eps; and
        moving mass m up by at most H raises the delta of any composition by at most
        m (1 - e^{-H}) (each path's (1 - e^{eps - L})_+ rises by at most that). The mass moved in
        band i is P's mass beyond its edge, at most tau_i (:meth:`dots`), so against R this PMF
        costs at most e^bound per tail in any composition's delta, the tail truncation's own
        budget (against the full grid's connect-the-dots PMF, measured: epsilons within 1e-6
        relative, tests/accounting/test_pld_tree.py): about 60% of the points for sampling rate
        0.01 and z in [1, 2]."""
        k = math.sqrt(-2.0 * log_mass_truncation_bound)
        top = 0.0 if self.a == 0.0 else 1.0
        first, last = _grid(interval, self._scalar_loss(-k * self.s), self._scalar_loss(top + k * self.s))
        curve = self.curve if k + 1.0 / self.s < NDTR_FLOOR else self.delta
        return connect_the_dots_at(curve, self.dots(first, last, interval, log_mass_truncation_bound), interval)


@functools.lru_cache(maxsize=256)
def _quantile(p: float) -> float:
    """Phi^-1(1 - p) (the point past which N(0, 1) has mass p)."""
    return -float(ndtri(p))


#: Strides of a one-sided pair's PLD in P's tails (:meth:`OneSidedGaussianPair.dots`), inside out.
TAIL_STRIDES = (4, 32, 256)
#: Largest |argument| of ``ndtr`` in :meth:`OneSidedGaussianPair.curve` (Phi(-36) ~ 1e-284, a normal
#: number): past it the log-space :meth:`GaussianPair.delta`.
NDTR_FLOOR = 36.0


def connect_the_dots(curve: Callable[[Any], Any], first: int, last: int, interval: float) -> LossPmf:
    """The pessimistic PLD whose hockey-stick curve equals ``curve`` (the true delta, a vectorized
    function of eps) at the grid points i * interval, ``first`` <= i <= ``last``, the last one's
    value charged to +inf, and is linear in e^eps in between (Doroshenko et al. 2022, Sec 3; module
    docstring): mass p_i = (e^h D_i - D_{i+1}) / (e^h - 1), D_i = delta(eps_{i-1}) - delta(eps_i),
    D past the last point 0, the first point the rest. The curve is evaluated in cache-sized pieces
    (with one point of overlap), so only the masses span the grid (10^7 points for sharp Gaussians)."""
    n = last - first + 1
    masses = np.empty(n)
    e_h, em1 = math.exp(interval), math.expm1(interval)
    d = curve(np.array([last * interval], dtype=float))  # the last point's delta (n = 1; else the last piece's)
    for start in range(1, n, _CHUNK):  # masses[start:stop] need delta at points start - 1 .. stop
        stop = min(n, start + _CHUNK)
        d = curve(np.arange(first + start - 1, first + min(stop, n - 1) + 1) * interval)
        diffs = d[:-1] - d[1:]  # D_start .. D_min(stop, n - 1)
        if stop == n:
            diffs = np.append(diffs, 0.0)
        masses[start:stop] = np.maximum((e_h * diffs[:-1] - diffs[1:]) / em1, 0.0)
    tail = float(d[-1])
    masses[0] = max(0.0, 1.0 - tail - float(np.sum(masses[1:])))
    return LossPmf(interval, first, masses, tail)


def connect_the_dots_at(curve: Callable[[Any], Any], dots: np.ndarray, interval: float) -> LossPmf:
    """:func:`connect_the_dots` with dots only at the increasing grid indices ``dots`` (the first
    and last the grid's ends; the points between them get no mass). Pessimistic for any choice of
    dots: the discrete curve equals ``curve`` at each dot and is linear in e^eps in between, above
    the convex true curve. With g_j = (dots_j - dots_{j-1}) h and D_j the curve's drop from dot
    j - 1 to dot j, the mass at dot j is p_j = D_j / (1 - e^{-g_j}) - D_{j+1} / (e^{g_{j+1}} - 1)
    (:func:`connect_the_dots`'s p_i for g = h); past the last dot D = 0, +inf gets the last value
    and the first dot the rest. Evaluated in cache-sized pieces, as :func:`connect_the_dots`
    (:func:`_dot_pmf`: the same from the curve's values at the dots, computed beforehand)."""

    def at_dots(lo: int, hi: int) -> np.ndarray:
        return curve(dots[lo:hi] * interval)

    first, last, n = int(dots[0]), int(dots[-1]), len(dots)
    masses = np.zeros(last - first + 1)
    d = at_dots(0, 1) if n == 1 else None
    for start in range(1, n, _CHUNK):  # the masses of dots start .. stop - 1
        stop = min(n, start + _CHUNK)
        at = dots[start - 1:min(stop, n - 1) + 1]
        d = at_dots(start - 1, min(stop, n - 1) + 1)
        drops = d[:-1] - d[1:]  # D_start .. D_min(stop, n - 1)
        consecutive = at[-1] - at[0] == len(at) - 1  # a piece of the fine grid: one g, one slice
        # D_j / (e^g_j - 1); D_j / (1 - e^-g_j) is D_j plus it
        downs = drops / (math.expm1(interval) if consecutive else np.expm1(np.diff(at) * interval))
        ups = drops + downs
        if stop == n:
            downs = np.append(downs, 0.0)
        piece = np.maximum(ups[:stop - start] - downs[1:stop - start + 1], 0.0)
        if consecutive:
            masses[dots[start] - first:dots[stop - 1] - first + 1] = piece
        else:
            masses[dots[start:stop] - first] = piece
    assert d is not None
    tail = float(d[-1])
    masses[0] = max(0.0, 1.0 - tail - float(np.sum(masses[1:])))
    return LossPmf(interval, first, masses, tail)


def from_gaussian_mechanism(
    noise_multiplier: float,
    sampling_prob: float = 1.0,
    neighbouring: ev.NeighboringRelation = ev.ADD_OR_REMOVE_ONE,
    value_discretization_interval: float = 1e-4,
    log_mass_truncation_bound: float = LOG_TAIL_MASS,
    strided: bool = False,
) -> PrivacyLossDistribution:
    """PLD of one (Poisson-subsampled) Gaussian step. ``noise_multiplier`` is sigma / C, C the
    per-record contribution bound, under every relation (as dp-accounting's
    ``from_gaussian_mechanism`` with sensitivity 1): the shift is C under add/remove, 2C under
    replace-one. ``strided``: the add/remove Poisson step on tail-strided dots
    (:func:`poisson_loss_pmfs`, for a step composed once: its cost, at most e^bound per tail, is
    paid once per composed copy, so a step self-composed k times is built on the full grid)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    if not 0.0 < sampling_prob <= 1.0:
        raise ValueError(f"sampling_prob: must lie in (0, 1], got {sampling_prob}")
    if not log_mass_truncation_bound < 0:
        raise ValueError(f"log_mass_truncation_bound: must be < 0, got {log_mass_truncation_bound}")
    bound = float(log_mass_truncation_bound)
    if sampling_prob == 1.0:
        pair = GaussianPair(1.0, 0.0, z / ev.sensitivity(neighbouring))
        return PrivacyLossDistribution(pair.loss_pmf(h, bound), None, bound)
    if ev.relation(neighbouring) == ev.REPLACE_ONE:
        pair = GaussianPair(sampling_prob, sampling_prob, z)
        return PrivacyLossDistribution(pair.loss_pmf(h, bound), None, bound)
    if strided:
        return PrivacyLossDistribution(*poisson_loss_pmfs(sampling_prob, z, h, bound), bound)
    remove = OneSidedGaussianPair(sampling_prob, 0.0, z).loss_pmf(h, bound)
    add = OneSidedGaussianPair(0.0, sampling_prob, z).loss_pmf(h, bound)
    return PrivacyLossDistribution(remove, add, bound)


def poisson_loss_pmfs(q: float, z: float, interval: float, log_mass_truncation_bound: float) -> tuple[LossPmf, LossPmf]:
    """The "remove" and "add" PMFs of the add/remove Poisson Gaussian (sampling probability ``q``,
    noise multiplier ``z``), :meth:`OneSidedGaussianPair.strided_loss_pmf` both, from one pass of
    normal tails. The add pair is the remove pair mirrored: L_add(x) = -L_remove(-x), so
    x*_add(eps) = -x*_remove(-eps) and, with T0 = -x*_remove(-eps)/s and T1 = T0 + 1/s,
    delta_add(eps) = (1 - e^eps (1 - q)) Phi(-T0) - e^eps q Phi(-T1), while
    delta_remove(eps') = q Phi(T1) - (e^eps' - (1 - q)) Phi(T0) at T's own eps' = -eps. The add side's
    dots are the remove side's mirrored (they cover its own bands: P_add = N(0, s^2) lies below
    both components of P_remove) plus its two ends; ``ndtr`` of -|T| gives the small tail and
    1 minus it the large one, each as accurate as ``ndtr`` itself. Two-thirds of the ``ndtr`` calls
    of two separate builds."""
    remove, add = OneSidedGaussianPair(q, 0.0, z), OneSidedGaussianPair(0.0, q, z)
    h, s = interval, z
    k = math.sqrt(-2.0 * log_mass_truncation_bound)
    first, last = _grid(h, remove._scalar_loss(-k * s), remove._scalar_loss(1.0 + k * s))
    first_a, last_a = _grid(h, add._scalar_loss(-k * s), add._scalar_loss(k * s))
    if k + 1.0 / s >= NDTR_FLOOR or not first <= -last_a <= -first_a <= last:
        return remove.strided_loss_pmf(h, log_mass_truncation_bound), add.strided_loss_pmf(h, log_mass_truncation_bound)
    dots = remove.dots(first, last, h, log_mass_truncation_bound)
    top = int(np.searchsorted(dots, -first_a))
    inserted = dots[top] != -first_a
    points = np.concatenate((dots[:top], [-first_a], dots[top:])) if inserted else dots
    eps = points * h
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gap = np.exp(eps)
        gap -= 1.0 - q
        t0 = np.log(gap)
        t0 *= -s
        t0 += s * math.log(q) - 0.5 / s  # T0 = -x*_remove(eps) / s (+inf where gap <= 0)
        t1 = t0 + 1.0 / s
        below0, below1 = t0 <= 0.0, t1 <= 0.0
        small0 = ndtr(np.negative(np.abs(t0, out=t0), out=t0), out=t0)  # Phi(-|T0|) (t0 not needed past here)
        small1 = ndtr(np.negative(np.abs(t1, out=t1), out=t1), out=t1)
        phi0, tail0 = _normal_pair(small0, below0)  # Phi(T0), Phi(-T0)
        phi1, tail1 = _normal_pair(small1, below1)
        d_remove = q * phi1
        d_remove -= gap * phi0
        low = gap <= 0.0
        d_remove[low] = -np.expm1(eps[low])
        mirror = slice(int(np.searchsorted(points, -last_a)), top + 1)  # the add side's dots, mirrored
        # the add side in the remove side's (increasing) order, reversed once at the end
        eps_a = np.negative(eps[mirror])
        big_e = np.exp(eps_a)
        qb = 1.0 - big_e * (1.0 - q)
        outside = np.flatnonzero(qb <= 0.0)
        big_eq = big_e * q
        # the add curve less its linear part 1 - e^eps: e^eps q Phi(T1) - qb Phi(T0), small where the
        # curve is near 1 - e^eps (P_add(L <= eps) small) and then computed to its own precision
        rest = big_eq * phi1[mirror]
        rest -= qb * phi0[mirror]
        rest[outside] = np.expm1(eps_a[outside])
        d_add = qb * tail0[mirror]
        d_add -= big_eq * tail1[mirror]
        d_add[outside] = 0.0
    if inserted:
        d_remove = np.concatenate((d_remove[:top], d_remove[top + 1:]))
    return _dot_pmf(dots, h, d_remove), _add_side(-points[mirror][::-1], h, rest[::-1], d_add[::-1])


def _normal_pair(small: np.ndarray, below: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(Phi(T), Phi(-T)) from ``small`` = Phi(-|T|) and ``below`` = (T <= 0): the small tail where it
    is, 1 minus it for the large one (``np.where`` of the two; two slices where ``below`` is a
    suffix, as for the non-increasing T of :func:`poisson_loss_pmfs`: the same values)."""
    big = 1.0 - small
    cut = len(below) - int(np.count_nonzero(below))
    if below[cut:].all():
        return np.concatenate((big[:cut], small[cut:])), np.concatenate((small[:cut], big[cut:]))
    return np.where(below, small, big), np.where(below, big, small)


def _dot_drops(dots: np.ndarray, h: float, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(D_j / (1 - e^{-g_j}), D_j / (e^{g_j} - 1)) for j = 1 .. n - 1 of :func:`connect_the_dots_at`
    (its operations, on the whole arrays at once: the same values; e^{g h} - 1 looked up in a table
    of the few gaps g, each entry ``np.expm1(g * h)`` as there)."""
    gaps = np.diff(dots)
    factor = np.expm1(np.arange(int(gaps.max()) + 1) * h)[gaps]
    drops = values[:-1] - values[1:]
    downs = drops / factor
    drops += downs
    return drops, downs


def _dot_pmf(dots: np.ndarray, h: float, values: np.ndarray) -> LossPmf:
    """:func:`connect_the_dots_at` of the curve ``values`` at ``dots`` (at least two), in one piece
    (its operations element by element: the same masses; for a build's ~10^4 dots, which fit the
    cache)."""
    ups, downs = _dot_drops(dots, h, values)
    ups[:-1] -= downs[1:]
    first = int(dots[0])
    masses = np.zeros(int(dots[-1]) - first + 1)
    masses[dots[1:] - first] = np.maximum(ups, 0.0, out=ups)
    tail = float(values[-1])
    masses[0] = max(0.0, 1.0 - tail - float(np.sum(masses[1:])))
    return LossPmf(h, first, masses, tail)


def _add_side(dots: np.ndarray, h: float, rest: np.ndarray, curve: np.ndarray) -> LossPmf:
    """:func:`connect_the_dots_at` of ``curve`` = rest + 1 - e^eps (both given) at ``dots``. The linear part
    1 - e^eps adds nothing to an inner dot's mass (its drops D_j = e^eps_j (1 - e^{-g_j}) give
    D_j / (1 - e^{-g_j}) - D_{j+1} / (e^{g_{j+1}} - 1) = e^eps_j - e^eps_j = 0), so where ``rest`` is
    the smaller of the two (the add side's lower tail, where the curve is near 1 - e^eps) the inner
    masses come from ``rest``'s drops alone, without the cancellation of differencing values near
    1 - e^eps (clipped noise of ~1e-12 a point otherwise); from the first dot where the whole
    curve is the smaller, from the curve's drops; the last dot and +inf from the curve, the first
    dot the rest (:func:`_dot_drops` of each, the pieces its two calls of :func:`connect_the_dots_at`
    kept: the same masses)."""
    split = int(np.argmax(np.abs(rest) > np.abs(curve)))  # the first dot where the curve is smaller
    if split < 2 or not np.abs(rest[split]) > np.abs(curve[split]):
        return _dot_pmf(dots, h, curve)
    ups, downs = _dot_drops(dots[:split + 1], h, rest[:split + 1])  # right at dots 1 .. split - 1
    ups_c, downs_c = _dot_drops(dots[split - 1:], h, curve[split - 1:])  # right at dots split .. end
    ups[:split - 1] -= downs[1:]
    ups_c[:-1] -= downs_c[1:]
    first = int(dots[0])
    masses = np.zeros(int(dots[-1]) - first + 1)
    masses[dots[1:split] - first] = np.maximum(ups[:split - 1], 0.0)
    masses[dots[split:] - first] = np.maximum(ups_c, 0.0, out=ups_c)
    tail = float(curve[-1])
    masses[0] = max(0.0, 1.0 - tail - float(np.sum(masses[1:])))
    return LossPmf(h, first, masses, tail)


def _convex_minorant(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """The greatest convex minorant of the points (x_i, y_i), x increasing, at every x_i (the lower
    hull, Andrew's monotone chain): every convex function below all the points is below it."""
    hull: list[int] = []
    for i in range(len(x)):
        while len(hull) >= 2 and ((y[hull[-1]] - y[hull[-2]]) * (x[i] - x[hull[-2]])
                                  >= (y[i] - y[hull[-2]]) * (x[hull[-1]] - x[hull[-2]])):
            hull.pop()
        hull.append(i)
    return np.interp(x, x[hull], y[hull])


def symmetric_loss_pmf(curve: Callable[[Any], Any], top: float, interval: float, stride: int = 1) -> LossPmf:
    """The pessimistic PLD of a *symmetric* pair dominating every pair (P, Q) with
    H_e(P || Q) <= ``curve``(ln e) and H_e(Q || P) <= ``curve``(ln e) for all e >= 1.

    Any such pair's curve delta(eps) = H_{e^eps}(P || Q) is convex in e^eps, at most ``curve`` for
    eps >= 0 and, for eps < 0, at most 1 - e^eps + e^eps curve(-eps) (as
    H_e(P || Q) = 1 - e + e H_{1/e}(Q || P)). Those values at the nodes j * stride * interval,
    |j stride| <= top / interval, are replaced by their greatest convex minorant in e^eps (still
    above every such curve at the nodes, and convex), interpolated linearly in e^eps to every grid
    point (a convex curve below the nodes' values stays below the chords) and connected as in
    :func:`connect_the_dots` (every mass >= 0; the value at the last point charged to +inf). The
    pair it describes is symmetric, so it dominates in both directions whatever the orientation of
    each step in a composition: the domination Zhu, Dong & Wang 2022 (Thm 10) compose. ``curve``
    need not be convex (an upper bound is enough); it must be vectorized. ``stride`` > 1 evaluates
    it on every stride-th grid point only (chords over stride * interval cost second order)."""
    stride = max(1, int(stride))
    last = stride * math.ceil(check_positive("top", top) / (interval * stride))
    if 2 * last > MAX_POINTS:
        raise ValueError(f"top: the losses span {2 * last:.3g} grid points at value_discretization_interval="
                         f"{interval:g}; use a coarser grid or 'rdp'")
    eps = np.arange(0, last + 1, stride) * interval
    up = np.minimum(np.asarray(curve(eps), dtype=float), 1.0)
    down = -np.expm1(-eps[:0:-1]) + np.exp(-eps[:0:-1]) * up[:0:-1]  # the nodes below 0, increasing
    nodes = np.exp(np.concatenate([-eps[:0:-1], eps]))
    values = np.concatenate([down, up])
    if np.any(np.diff(np.diff(values) / np.diff(nodes)) < 0):
        values = _convex_minorant(nodes, values)
    grid = np.exp(np.arange(-last, last + 1) * interval)
    delta = np.interp(grid, nodes, values) if stride > 1 else values
    return connect_the_dots(lambda e: delta[np.rint(e / interval).astype(int) + last], -last, last, interval)


def amplified_mixture(weights: Any, components: Sequence[Any], interval: float, tail: float = 0.0,
                      stride: int = 16) -> PrivacyLossDistribution:
    """One step of a mechanism run on a batch that holds the changed record k ~ ``weights`` times
    (``weights[0]`` for none, then k = 1, 2, ...; multiplicities of total mass ``tail`` beyond them
    released as infinite loss), where ``components[k - 1]`` dominates a batch with k copies against
    one without them *and* against one with k copies of the replacement, both directions (e.g. the
    k-message change of a group). Balle, Barthe & Gaboardi 2018 Thm 10 as a PLD: with
    gamma = 1 - w_0 (the weights conditioned on k <= kmax), advanced joint convexity and joint
    convexity give, both directions, H_e <= sum_{k >= 1} w_k H_alpha(component k),
    alpha = 1 + (e - 1) / gamma: amplified in epsilon, unlike the labelled mixture over k; charged as
    a symmetric pair (:func:`symmetric_loss_pmf`, either orientation per step)."""
    w = np.asarray(weights, dtype=float) / (1.0 - tail)
    gamma = float(1.0 - w[0])
    pmfs: list[Any] = [p.remove if p.add is None else None for p in components]
    if any(p is None for p in pmfs):
        raise ValueError("components: each must be symmetric (add is None)")
    if gamma <= 0.0:
        return identity(interval)
    top = max(float(p.losses[-1]) for p in pmfs) + interval

    def curve(eps: Any) -> Any:
        inner = np.log1p(np.expm1(eps) / gamma)
        out = sum(wk * p.deltas(inner) for wk, p in zip(w[1:], pmfs))
        return (1.0 - tail) * out + tail

    return PrivacyLossDistribution(symmetric_loss_pmf(curve, top, interval, stride), None)


def from_without_replacement_gaussian(
    noise_multiplier: float,
    sampling_prob: float,
    value_discretization_interval: float = 1e-4,
    log_mass_truncation_bound: float = LOG_TAIL_MASS,
) -> PrivacyLossDistribution:
    """PLD of a Gaussian sum over a uniformly random subset of m = q n of n records, replace-one
    (``noise_multiplier`` = sigma / C, ``sampling_prob`` = q).

    The batch holds the changed record w.p. q; then it displaces nothing else, so with R the law
    without it and A, B the laws with it in D, D', the pair is ((1 - q) R + q A, (1 - q) R + q B),
    each of A, B, R within one 2C swap of the others. Advanced joint convexity (Balle, Barthe &
    Gaboardi 2018, Thm 2) then bounds *both* H_e(P || Q) and H_e(Q || P), e >= 1, by
    q H_{1 + (e - 1) / q}(N(2C) || N(0)), the "remove" curve of the Poisson pair at shift 2C (the
    larger of its two directions, taken anyway). Which direction a step attains depends on the other
    records (all equal to the changed record's value in D', or in D), and that can change from step
    to step, so the two directions cannot be composed apart as under add/remove (where the
    orientation is fixed by which dataset holds the record): the step is charged as the symmetric
    pair with that curve in both directions (:func:`symmetric_loss_pmf`)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    q = float(sampling_prob)
    if not 0.0 < q <= 1.0:
        raise ValueError(f"sampling_prob: must lie in (0, 1], got {sampling_prob}")
    h = check_positive("value_discretization_interval", value_discretization_interval)
    if q == 1.0:
        return from_gaussian_mechanism(z, 1.0, ev.REPLACE_ONE, h, log_mass_truncation_bound)
    remove, add = GaussianPair(q, 0.0, z / 2.0), GaussianPair(0.0, q, z / 2.0)
    top = max(abs(v) for pair in (remove, add) for v in pair.loss_range(log_mass_truncation_bound))
    if top > MAX_LOSS:
        raise ValueError(f"noise_multiplier: privacy losses reach {top:.3g}; the noise is too small for the "
                         "pld accountant (epsilon is huge); use 'rdp'")
    pmf = symmetric_loss_pmf(lambda e: np.maximum(remove.delta(e), add.delta(e)), top, h)
    return PrivacyLossDistribution(pmf, None, log_mass_truncation_bound)


def from_truncated_subsampled_gaussian(
    noise_multiplier: float,
    sampling_prob: float,
    dataset_size: int,
    truncated_batch_size: int,
    neighbouring: ev.NeighboringRelation = ev.ADD_OR_REMOVE_ONE,
    value_discretization_interval: float = 1e-4,
    log_mass_truncation_bound: float = LOG_TAIL_MASS,
) -> PrivacyLossDistribution:
    """PLD of a Gaussian sum over a Poisson sample (rate q of n records) cut to a uniform subset of
    B when larger (dp-accounting's ``TruncatedSubsampledGaussianDpEvent``; arXiv 2508.15089).

    Whether the *other* n - 1 records already fill the cap, T = [Bin(n - 1, q) >= B], does not
    depend on the changed record, so releasing it makes the step the labelled mixture of
    (not T) the Poisson-subsampled Gaussian (the record, kept w.p. q, displaces nobody) and (T)
    a replace-one-type step: the record enters w.p. q_T = P[Bin(n, q) > B] B / (n P[T]) and then
    displaces one other record, a shift of at most 2C, certified by the replace-one Poisson pair
    at z / 2 (as dp-accounting, whose construction this is)."""
    from scipy import stats

    z = check_positive("noise_multiplier", noise_multiplier)
    n, cap = int(dataset_size), int(truncated_batch_size)
    if n < 1 or cap < 1:
        raise ValueError(f"dataset_size and truncated_batch_size must be >= 1, got {n}, {cap}")
    h, bound = value_discretization_interval, log_mass_truncation_bound
    plain = from_gaussian_mechanism(z, sampling_prob, neighbouring, h, bound)
    p_cut = float(stats.binom.sf(cap - 1, n - 1, sampling_prob))
    if p_cut == 0.0:
        return plain
    q_cut = min(1.0, float(stats.binom.sf(cap, n, sampling_prob)) * cap / p_cut / n)
    if q_cut == 0.0:
        return plain
    displaced = from_gaussian_mechanism(z / 2.0, q_cut, ev.REPLACE_ONE, h, bound)
    out = mixture([(p_cut, displaced), (1.0 - p_cut, plain)])
    slack = 1e-12 * p_cut  # the weights' relative error (binomial tails): l1 <= 2 |dw|, charged
    return dataclasses.replace(out, remove=dataclasses.replace(out.remove, roundoff=out.remove.roundoff + slack),
                               add=None if out.add is None else
                               dataclasses.replace(out.add, roundoff=out.add.roundoff + slack))

