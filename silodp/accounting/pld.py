"""Privacy loss distributions (PLDs): the loss PMF, its round-off, composition by FFT.

The layers, as dp-accounting's: mechanism pairs and their discretization
(:mod:`silodp.accounting.pld_pairs`) -> this module's PMFs and their composition -> the
``pld`` accountant (:mod:`silodp.accounting.accountants.pld`); rigorous lower bounds from
dominated PMFs live in :mod:`silodp.accounting.pld_lower`.

A pair (P, Q) of output distributions (with / without the changed record) is described by the law
of its privacy loss L = log(dP/dQ)(X), X ~ P. Its hockey-stick curve
delta(eps) = E[(1 - e^{eps - L})_+] is the smallest delta at which the pair is (eps, delta)-DP, and
the loss of a composition is the sum of the losses, so T-fold composition is a T-fold convolution
(Koskela, Jalko & Honkela 2020; Doroshenko, Ghazi, Kamath, Kumar & Manurangsi 2022).

Discretization. Each mechanism's PLD is a pessimistic discretization of its curve
(:mod:`silodp.accounting.pld_pairs`: connect the dots, Doroshenko et al. 2022, Sec 3), above the
true curve at every eps. Domination of hockey-stick curves at every eps is preserved by
composition (Zhu, Dong & Wang 2022, Thm 10), and so is everything done afterwards, which only moves
mass to larger losses or adds mass: tails beyond ``exp(log_mass_truncation_bound)`` are cut after
each convolution (the lower tail moved up to the first kept point, the upper tail to +inf), and
round-off below zero in an FFT is clipped up to zero.

Floating point. Every convolution (FFT or direct) bounds the l1 distance between the masses it
computed and the exact convolution of its inputs, and the bound travels with the result as
``roundoff`` (:func:`_fft_roundoff`, :func:`LossPmf.self_compose`); it is added to delta like mass
at +inf. Since delta(eps) is 1-Lipschitz in the masses (weights in [0, 1]), the answer stays an
upper bound on the exact composition of the pessimistic discretizations. A T-fold power
multiplies the relative error of each Fourier coefficient by T; the FFT's worst-case bound on that
error (normwise, or componentwise ~ u log2(n) sum(masses) for nonnegative masses) is therefore kept
only for coefficients where |X_k|^T is negligible, and the few near frequency 0 that carry the
composition are recomputed directly with a bound proportional to the magnitudes actually present
(:meth:`LossPmf._direct_powers`: about T u sum_j m_j |theta_jk| instead of T u log2(n)), which
takes the charge from ~1e-6 to ~1e-13 at 3e5 steps. :class:`silodp.accounting.accountants.PldAccountant`
refuses a delta that the charge would still dominate. Not charged: the relative round-off (a few ulps) of the single-step curve
delta(eps_i) itself.

Only numpy is imported (the CLI answers in a fraction of a second); tested against
dp-accounting's PLD library and the analytic Gaussian curve (Balle & Wang 2018).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import operator
from collections.abc import Callable
from typing import Any

import numpy as np

from silodp._validation import check_delta, check_nonnegative, check_positive

#: Default ln of the tail mass cut at each side of each mechanism and each composition (and
#: charged to delta): 1e-15, as dp-accounting's default tail truncation.
LOG_TAIL_MASS = math.log(1e-15)
#: Largest number of grid points one mechanism's losses may span.
MAX_POINTS = 50_000_000
#: Blocks of the coarse copy on which the Chernoff window's t is searched (:func:`_chernoff_bound`).
CHERNOFF_BINS = 1 << 12
#: Losses beyond +-MAX_LOSS would overflow e^eps; such mechanisms are far from private anyway.
MAX_LOSS = 600.0
#: Most products (coefficients x masses) :meth:`LossPmf._direct_powers` may spend on one
#: composition when asked to (``direct_work``): about a second.
DIRECT_WORK = 4_000_000
#: Supports of a self-composition below this many points are kept whole (no Chernoff window: one
#: small FFT, no tail cut or charged).
SMALL_SUPPORT = 1 << 14
#: A self-composition of a PMF of at most ``DIRECT_ATOMS`` points whose composed support spans
#: fewer than ``DIRECT_SUPPORT`` points is computed by direct convolutions
#: (:meth:`LossPmf._convolve_power`): exact sums of nonnegative terms, no FFT round-off, and for a
#: few atoms far cheaper than the FFT pair and its error bounds.
DIRECT_ATOMS = 64
#: :meth:`LossPmf.epsilon` of a PMF of at most this many points evaluates delta at every point at
#: once (one small matrix product) instead of searching.
SMALL_EPSILON_POINTS = 256
DIRECT_SUPPORT = 1 << 12
#: Grid points per piece in which a single step's curve is evaluated (temporaries stay in cache:
#: 2-4x faster than one pass over 10^6 points).
_CHUNK = 1 << 13
#: Below this exponent a coefficient's power and its error bound underflow to exactly 0
#: (:meth:`LossPmf.self_compose` skips computing them).
_DEAD_EXPONENT = -760.0
#: Unit round-off of float64.
_U = 2.0 ** -53
#: Normwise error of one FFT stage, in units of the unit round-off u:
#: ||fl(FFT x) - FFT x||_2 <= log2(n) eta ||FFT x||_2 / (1 - log2(n) eta) (Higham 2002, *Accuracy
#: and Stability of Numerical Algorithms*, Thm 24.2, with eta = mu + gamma_4 (sqrt 2 + mu) ~ 6.7u
#: for radix-2 butterflies and twiddles accurate to mu ~ u); 16u leaves room for pocketfft's
#: radix-3 and radix-5 butterflies. Inverses obey the same bound.
_FFT_STAGE_UNITS = 16.0
#: The extended precision the accountant falls back to when float64's charge is too large a
#: share of delta (x86's 80-bit long double: u = 2^-64; numpy's FFT computes in it).
EXTENDED = np.longdouble
#: Whether :data:`EXTENDED` is a format whose every operation rounds once at u = eps / 2, as the
#: charges assume: x87's 80-bit (53 + 11 mantissa bits: nmant 63) or IEEE binary128 (nmant 112).
#: A long double that is float64, or IBM's double-double (ppc64le, nmant 105, no such u), is not:
#: there only the float64 passes run.
HAS_EXTENDED = np.finfo(EXTENDED).nmant in (63, 112)


def _unit(values: Any) -> float:
    """Unit round-off of the floating-point type of ``values`` (float64: 2^-53)."""
    dtype = np.asarray(values).dtype
    return float(np.finfo(dtype).eps) / 2.0 if np.issubdtype(dtype, np.floating) else _U


def _fft_error(size: int, l2_norm: float, u: float = _U) -> float:
    """Bound on ||fl(FFT x) - FFT x||_2 (or the inverse's) for a transform of ``size`` points whose
    exact output has l2 norm ``l2_norm``, at unit round-off ``u`` (Higham 2002, Thm 24.2)."""
    eta = _FFT_STAGE_UNITS * u * math.log2(max(size, 2))
    return eta / (1.0 - eta) * l2_norm


def _l2(x: np.ndarray) -> float:
    """l2 norm of a real vector by one einsum (no BLAS call: BLAS threads spinning on a busy
    machine made ``np.linalg.norm`` the largest cost of a long composition)."""
    return math.sqrt(float(np.einsum("i,i->", x, x)))


def _spectral_norm(half: np.ndarray, size: int) -> float:
    """l2 norm over the full spectrum of a real signal's ``rfft`` output ``half`` (Hermitian)."""
    sq = np.abs(half) ** 2
    twice = np.ones(len(half))
    twice[1:(size + 1) // 2] = 2.0  # k and size - k are the same coefficient, conjugated
    return math.sqrt(float(np.sum(twice * sq)))


def _inverse_roundoff(masses: np.ndarray, size: int, spectrum_error: float) -> float:
    """l1 bound on the error of ``irfft`` output ``masses`` (``size`` points) whose input spectrum
    is off by at most ``spectrum_error`` in l2 (full spectrum): by Parseval the spectrum error
    reaches the output as l2 error spectrum_error / sqrt(size), the transform adds
    ``_fft_error`` of the output's norm, and l1 <= sqrt(size) l2."""
    u = _unit(masses)
    own = _fft_error(size, _l2(masses), u)
    return spectrum_error + math.sqrt(size) * own * (1.0 + 4.0 * u)


class UncertifiableDeltaError(ValueError):
    """The requested delta is below what the PLD engine can certify for this composition (its
    floating-point charge, or the mass it moved to +inf, is too large a share of delta)."""


def _next_fast_length(n: int) -> int:
    """Smallest 2^a 3^b 5^c >= n (fast FFT sizes)."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


def _lse(x: np.ndarray) -> float:
    """log sum exp(x) (scipy's ``logsumexp`` without its per-call overhead; any t of a Chernoff
    bound is valid, so a few ulps here only move the window)."""
    top = float(x.max())  # the array methods: no wrapper overhead (the searches call this thousands of times)
    return top + math.log(float(np.exp(x - top).sum()))


def _argmin_over_t(fn: Callable[[float], float], spread: float, lo: float = 1e-6, hi: float = 1e4,
                   steps: int = 48) -> float:
    """Where a unimodal ``fn`` is smallest over t in [lo, hi] / spread (golden section on log t,
    ``steps`` steps)."""
    a, b = math.log(lo / spread), math.log(hi / spread)
    ratio = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - ratio * (b - a), a + ratio * (b - a)
    fc, fd = fn(math.exp(c)), fn(math.exp(d))
    for _ in range(steps):
        if fc <= fd:
            b, d, fd = d, c, fc
            c = b - ratio * (b - a)
            fc = fn(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + ratio * (b - a)
            fd = fn(math.exp(d))
    return math.exp(c if fc <= fd else d)


def _chernoff_bound(l: np.ndarray, m: np.ndarray, count: int, log_tau: float, spread: float,
                    bins: int = CHERNOFF_BINS) -> float:
    """min over t of u(t) = (count log sum_j m_j e^{t l_j} - log_tau) / t (``l`` increasing): the
    Chernoff point past which a sum of ``count`` such losses has mass <= e^log_tau.

    u is unimodal in t (the log-MGF is convex), minimised by golden section on a copy with the
    masses of ``bins`` consecutive blocks each moved to the block's largest loss (its u dominates
    the true one, so the search is cheap and lands near the true optimum); the value returned is the
    exact u at the t found (any t > 0 gives a valid Chernoff bound)."""
    log_m = np.log(m)
    coarse_l, coarse_m = _coarse(l, m, bins)
    coarse_log_m = log_m if coarse_m is m else np.log(coarse_m)
    best_t = _argmin_over_t(lambda t: (count * _lse(coarse_log_m + t * coarse_l) - log_tau) / t, spread)
    return (count * _lse(log_m + best_t * l) - log_tau) / best_t


def _chernoff_t(l: np.ndarray, m: np.ndarray, count: int, log_tau: float, spread: float) -> float:
    """The t of :func:`_chernoff_bound` (same search)."""
    log_m = np.log(m)
    return _argmin_over_t(lambda t: (count * _lse(log_m + t * l) - log_tau) / t, spread)


def _convolve(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, float]:
    """Linear convolution of two nonnegative mass vectors of total mass <= 1 (direct when small,
    else FFT; a square, ``y is x``, transforms once), clipped at zero, and a bound on the l1 error
    of the computed masses.

    Direct: each output is a sum of at most m = min(len) nonnegative products, relative error
    <= (m + 1) u (Higham 2002, Sec 3.1), so l1 error <= (m + 1) u sum(out). FFT: with
    ||e_x||_2 <= _fft_error(|X|) per transform and |X_k|, |Y_k| <= 1, the product's spectrum is
    off by at most e_x + (1 + e_x) e_y + sqrt(2) gamma_2 ||X Y||_2 (a complex product's relative error,
    gamma_2 = 2u / (1 - 2u): Higham 2002, Lemma 3.5), then :func:`_inverse_roundoff`."""
    u = max(_unit(x), _unit(y))
    if min(len(x), len(y)) <= 32 or len(x) * len(y) <= 200_000:
        out = np.convolve(x, y)
        return out, (min(len(x), len(y)) + 1) * u * 1.01 * float(np.sum(out))
    n = len(x) + len(y) - 1
    size = _next_fast_length(n)
    fx = np.fft.rfft(x, size)
    ex = _fft_error(size, math.sqrt(size) * _l2(x), u)
    fy, ey = (fx, ex) if y is x else (np.fft.rfft(y, size), _fft_error(size, math.sqrt(size) * _l2(y), u))
    product = fx * fy
    spectrum_error = ex + (1.0 + ex) * ey + math.sqrt(2.0) * gamma(2, u) * _spectral_norm(product, size)
    out = np.fft.irfft(product, size)[:n]
    return np.maximum(out, 0.0), _inverse_roundoff(out, size, spectrum_error)


def _exact_sum_minus_one(masses: np.ndarray) -> tuple[float, float]:
    """sum(masses) - 1 as hi + lo (float64), exact to relative 2^-106: ``math.fsum`` returns the
    correctly rounded sum of its floats (Shewchuk's exact partials), so hi is the exact value
    rounded and lo the exact remainder (sum - 1 - hi, itself exact among floats' sums) rounded."""
    values = np.asarray(masses, dtype=np.float64).tolist()
    hi = math.fsum(values + [-1.0])
    return hi, math.fsum(values + [-1.0, -hi])


def gamma(n: int, u: float) -> float:
    """gamma_n = n u / (1 - n u): the relative error bound of n roundings (Higham 2002, Lemma 3.1)."""
    return n * u / (1.0 - n * u)


def binary_power(x: Any, count: int, multiply: Callable[[Any, Any], Any]) -> Any:
    """``x`` to the power ``count`` >= 1 under ``multiply`` (associative) by binary powering: at most
    2 log2(count) products, each of two earlier results (the squarings of ``x``, then the running
    product times the next one needed), in that order."""
    out = None
    while True:
        if count & 1:
            out = x if out is None else multiply(out, x)
        count >>= 1
        if not count:
            return out
        x = multiply(x, x)


def convolution_power(masses: np.ndarray, count: int) -> tuple[np.ndarray, float]:
    """The ``count``-th convolution power of the nonnegative ``masses`` by direct convolutions
    (binary powering), and r: every output is within relative r of its exact value.

    Round-off: the masses are >= 0, so every output of ``np.convolve(a, b)`` is a sum of at most
    k = min(len(a), len(b)) nonnegative products, within a relative gamma_k = k u / (1 - k u) of
    its exact value in any summation order (Higham 2002, eq. 3.5 and Lemma 3.4 applied to
    nonnegative terms); inputs already within relative r_a, r_b componentwise give an output
    within (1 + r_a)(1 + r_b)(1 + gamma_k) - 1 (products that underflow aside: a caller whose
    masses may come near 2^-1022 checks them)."""
    u = _unit(masses)

    def convolve(a: tuple[np.ndarray, float], b: tuple[np.ndarray, float]) -> tuple[np.ndarray, float]:
        return np.convolve(a[0], b[0]), (1.0 + a[1]) * (1.0 + b[1]) * (1.0 + gamma(min(len(a[0]), len(b[0])), u)) - 1.0

    out, out_err = binary_power((masses, 0.0), count, convolve)
    return out, out_err


@dataclasses.dataclass(frozen=True)
class LossPmf:
    """Masses ``masses[i]`` at privacy loss ``(offset + i) * interval``, plus ``infinity_mass`` at
    +inf: one direction of a pessimistic discrete PLD. ``roundoff`` bounds the l1 distance of
    (masses, infinity_mass) from the exact computation (see the module docstring); it is charged
    to delta like mass at +inf."""

    interval: float
    offset: int
    masses: np.ndarray
    infinity_mass: float
    roundoff: float = 0.0

    @property
    def charged_infinity(self) -> float:
        """Mass at +inf plus the round-off charge: what delta(eps) never falls below."""
        return self.infinity_mass + self.roundoff

    def astype(self, dtype: Any) -> "LossPmf":
        """The same masses in floating-point type ``dtype`` (e.g. :data:`EXTENDED`); compositions
        then compute, and bound their round-off, in that precision (the Chernoff windows already
        found are kept: they depend on the values only, which the conversion keeps)."""
        if self.masses.dtype == dtype:
            return self
        out = dataclasses.replace(self, masses=self.masses.astype(dtype))
        if np.all(out.masses.astype(self.masses.dtype) == self.masses):  # the values kept exactly
            out.__dict__["_windows"] = self._window_cache()
        return out

    def _window_cache(self) -> dict[Any, Any]:
        """(count, log_tau) -> :meth:`_chernoff_window`'s answer for these masses (kept on the
        instance: a frozen PMF's masses do not change)."""
        return self.__dict__.setdefault("_windows", {})

    @functools.cached_property
    def losses(self) -> np.ndarray:
        """The finite losses (offset + i) * interval (computed once; read-only)."""
        out = (self.offset + np.arange(len(self.masses))) * self.interval
        out.flags.writeable = False
        return out

    def delta(self, epsilon: float) -> float:
        """delta(eps) = infinity_mass + sum_i masses_i (1 - e^{eps - l_i})_+."""
        if not epsilon < self.losses[-1]:  # beyond every finite loss (e.g. 1e308): the infinite mass
            return float(min(1.0, self.charged_infinity))
        lo = max(0, math.floor(epsilon / self.interval) - self.offset)
        # the losses increase: those above epsilon are a suffix (a slice, not a masked copy)
        lo += int(np.searchsorted(self.losses[lo:], epsilon, side="right"))
        l, m = self.losses[lo:], self.masses[lo:]
        return float(min(1.0, self.charged_infinity + np.sum(m * -np.expm1(epsilon - l))))

    def deltas(self, epsilons: np.ndarray) -> np.ndarray:
        """:meth:`delta` at every value of ``epsilons`` at once: at the grid points by the recursion
        delta_{j-1} = e^-h delta_j + (1 - e^-h) sum_{i >= j} masses_i (every term >= 0, no
        cancellation at small delta), exactly linear in e^eps in between."""
        from scipy.signal import lfilter

        m = np.asarray(self.masses, dtype=float)
        decay = math.exp(-self.interval)
        suffix = np.cumsum(m[::-1])[::-1] + self.charged_infinity  # sum_{i >= j} masses_i + inf
        # reversed: r_0 = delta at the last point (the infinite mass), r_t = decay r_{t-1} + (1 - decay) suffix
        rev, _ = lfilter([1.0 - decay], [1.0, -decay], suffix[:0:-1], zi=[decay * self.charged_infinity])
        at_grid = np.concatenate([rev[::-1], [self.charged_infinity]])
        eps = np.asarray(epsilons, dtype=float)
        below = -np.expm1(eps - self.losses[0]) + np.exp(eps - self.losses[0]) * at_grid[0]  # all mass above
        inside = np.interp(np.exp(eps - self.losses[0]), np.exp(self.losses - self.losses[0]), at_grid)
        out = np.where(eps < self.losses[0], below, np.where(eps >= self.losses[-1], self.charged_infinity, inside))
        return np.minimum(1.0, out)

    def epsilon(self, delta: float) -> float:
        """Smallest eps >= 0 with delta(eps) <= ``delta`` (exact for this discrete PLD)."""
        if self.charged_infinity > delta:
            return math.inf
        if self.delta(0.0) <= delta:
            return 0.0
        l = self.losses
        lo, hi = max(0, -self.offset), len(l) - 1  # delta(l_lo) > delta >= delta(l_hi)
        if len(l) <= SMALL_EPSILON_POINTS:  # delta at every point at once, each as :meth:`delta` sums it
            at = self.charged_infinity + np.maximum(-np.expm1(l[lo:, None] - l[None, lo:]), 0.0) @ self.masses[lo:]
            hi = lo + int(np.flatnonzero(np.minimum(at, 1.0) <= delta)[0])  # at[-1] = the infinite mass <= delta
            lo = hi - 1
        elif self.delta(l[lo]) <= delta:
            lo -= 1
        guess = None if hi - lo == 1 else self._bracket_guess(lo, delta)
        if guess is not None and self.delta(l[guess - 1]) > delta >= self.delta(l[guess]):
            lo, hi = guess - 1, guess  # the guess checked exactly: no search needed
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if self.delta(l[mid]) > delta:
                lo = mid
            else:
                hi = mid
        # on [left, l_hi): delta(eps) = inf + S - e^{eps - left} E with sums over points >= hi
        left = float(l[lo]) if lo >= 0 else 0.0  # lo = -1: every loss is positive
        m = self.masses[hi:]
        s = float(np.sum(m))
        e = float(np.sum(m * np.exp(left - l[hi:])))
        eps = left + math.log((self.charged_infinity + s - delta) / e)
        return float(min(l[hi], max(0.0, left, eps)))

    def _bracket_guess(self, lo: int, delta: float) -> int | None:
        """Where delta(l_i) first drops to ``delta`` (i > ``lo`` >= 0), from suffix sums: all grid
        points at once, but with cancellation at small delta, so only a guess that
        :meth:`epsilon` then checks with :meth:`delta` itself."""
        if lo < 0:
            return None
        l, m = self.losses[lo:], self.masses[lo:]
        with np.errstate(over="ignore", invalid="ignore"):
            s1 = np.cumsum(m[::-1])[::-1]
            s2 = np.cumsum((m * np.exp(-l))[::-1])[::-1]
            tail1, tail2 = np.append(s1[1:], 0.0), np.append(s2[1:], 0.0)
            approx = self.charged_infinity + tail1 - np.exp(l) * tail2
        below = np.flatnonzero(approx <= delta)
        return int(lo + below[0]) if len(below) and below[0] > 0 else None

    def truncate(self, log_mass_truncation_bound: float) -> "LossPmf":
        """Cut each tail of mass at most e^bound: the lower one moves up to the first kept point,
        the upper one to +inf (pessimistic)."""
        tau = math.exp(log_mass_truncation_bound)
        m = self.masses
        if len(m) and m[0] > tau and m[-1] > tau:  # neither tail holds a point to cut: the same PMF
            return self
        first = int(np.searchsorted(np.cumsum(m), tau, side="right"))
        cut_top = int(np.searchsorted(np.cumsum(m[::-1]), tau, side="right"))
        last = len(m) - cut_top
        if first >= last:
            return self
        kept = m[first:last].copy()
        kept[0] += float(np.sum(m[:first]))
        return LossPmf(self.interval, self.offset + first, kept, self.infinity_mass + float(np.sum(m[last:])),
                       self.roundoff)

    def compose(self, other: "LossPmf", log_mass_truncation_bound: float) -> "LossPmf":
        """The PLD of running both mechanisms: the sum of the losses (convolution)."""
        _same_grid([self, other])
        inf = 1.0 - (1.0 - self.infinity_mass) * (1.0 - other.infinity_mass)
        masses, fresh = _convolve(self.masses, other.masses)
        # ||x'*y' - x*y||_1 <= a ||y'||_1 + b ||x||_1 <= a (1 + b) + b for inputs off by a, b
        a, b = self.roundoff, other.roundoff
        out = LossPmf(self.interval, self.offset + other.offset, masses, inf, a + b + a * b + fresh)
        return out.truncate(log_mass_truncation_bound)

    def _chernoff_window(self, count: int, log_tau: float) -> tuple[int, int]:
        """Grid indices [lo, hi] (unclipped) outside which the sum of ``count`` losses has mass <= e^log_tau
        on each side (Chernoff: P(S >= u) <= exp(count K(t) - t u) for every t > 0, K the
        log-MGF, and likewise below). Any t gives a valid bound, so t is chosen on a coarse copy
        of the PMF (:func:`_chernoff_bound`) and the bound is evaluated once, exactly, at it."""
        keep = self.masses > 0
        l, m = self.losses[keep], self.masses[keep]
        spread = max(float(l[-1] - l[0]), self.interval)
        upper = _chernoff_bound(l, m, count, log_tau, spread)
        lower = -_chernoff_bound(-l[::-1], m[::-1], count, log_tau, spread)
        return math.floor(lower / self.interval), math.ceil(upper / self.interval)

    def _direct_powers(self, powered: np.ndarray, error: np.ndarray, size: int, count: int, work: int,
                       spectrum: np.ndarray) -> None:
        """Recompute, in place, the ``count``-th powers of the Fourier coefficients whose FFT error
        bound is largest (those near frequency 0, where |X_k|^count is not negligible) directly,
        with an error bound proportional to the magnitudes actually present instead of T u.

        X_k = M + S_k with M = sum_j m_j computed exactly (integer arithmetic) and
        S_k = sum_j m_j (e^{-i theta_jk} - 1), theta_jk = 2 pi r_jk / size, r_jk = p_j k reduced
        exactly to (-size/2, size/2]; Re terms are -2 m_j sin^2(theta / 2) and Im terms -m_j sin theta,
        with error at most 24u of the term (Im: plus 4u m_j |theta_j|, theta within 3u, sin within
        2 ulp, products), summed
        pairwise (error <= (log2 N + 2) u sum |terms|, Higham 2002, Sec 4.2). Then
        X_k^T = exp(T (log M + log(1 + w))), w = S_k / M, with log|1 + w| = log1p(2a + a^2 + b^2) / 2
        and arg(1 + w) = atan2(b, 1 + a) (w = a + ib): every rounding there is relative to a, b or the
        result, so the exponent's error is about T u (|a| + |b|) + u |exponent| (first order in the
        error of w, with a factor 1.01), and |X'^T - X^T| <= |X^T| (e^{err} - 1) + 6u |X'^T|. The
        masses below ``small_cap`` in total go through one more FFT instead (componentwise error,
        their sum is tiny). Computed in long double where numpy has it."""
        if self.masses.dtype != np.float64 and not np.all(self.masses.astype(np.float64) == self.masses):
            return  # masses not exactly float64 (composed in extended precision): keep the FFT's bound
        u = _unit(self.masses)
        floor = 0.1 * _fft_error(size, _spectral_norm(powered, size), u)
        if _spectral_norm(error, size) <= 10.0 * floor:
            return  # the inverse FFT's own error dominates already: nothing to gain
        # the few masses that carry nearly all the mass are summed directly; the rest (total at most
        # ``small_cap``) through one more FFT, whose componentwise error is then tiny
        by_size = np.argsort(self.masses)
        small_cap = floor / (count * max(_fft_error(size, 1.0, u), u) * 64.0)
        n_small = int(np.searchsorted(np.cumsum(self.masses[by_size]), small_cap, side="right"))
        big = np.sort(by_size[n_small:])
        small = by_size[:n_small]
        n_masses = max(1, len(big))
        budget = min(len(powered), max(1, work // n_masses))
        # the budget + 1 largest errors, largest first: a partial sort among those above the
        # smallest (spectra reach 10^6 points, nearly all with the same negligible error)
        top = min(len(error), budget + 1)
        lowest = np.min(error)
        above = np.flatnonzero(error > lowest)
        if len(above) >= top:
            order = above[np.argpartition(error[above], len(above) - top)[len(above) - top:]]
        else:
            order = np.concatenate([above, np.flatnonzero(error == lowest)[:top - len(above)]])
        order = order[np.argsort(error[order])[::-1]]
        outside = np.ones(len(error), dtype=bool)
        outside[order] = False
        # enough coefficients that the rest add at most a tenth of the inverse FFT's own error
        # (Parseval: the output's l2 norm is the powered spectrum's over sqrt(size))
        below = 2.0 * np.sum(error[outside] ** 2)
        rest = np.sqrt(below + np.cumsum(2.0 * error[order[::-1]] ** 2))[::-1]  # l2 of order[i:] and below
        needed = int(np.searchsorted(-rest, -floor, side="left"))  # top: none of these suffices
        if needed > budget and rest[budget] > 0.5 * rest[0]:
            return  # the spectrum's error is spread over more coefficients than the budget reaches
        order = order[:min(budget, needed)]
        ld = EXTENDED if HAS_EXTENDED else np.float64
        uu = float(np.finfo(ld).eps) / 2.0
        # skip coefficients the direct bound cannot improve: it is about T uu (40 + log2 N) sum m|theta|
        # |X|^T with sum m|theta| <= 2 pi k sum m|p| / size (a cheap estimate; the bound is recomputed)
        spread = float(np.sum(self.masses * np.abs(self.offset + np.arange(len(self.masses)))))
        mag = np.exp(np.minimum(count * np.log(np.maximum(np.abs(spectrum[order]), 1e-300)), 700.0))
        estimate = count * uu * (40.0 + math.log2(n_masses + 1)) * 2 * math.pi * order * spread / size * mag
        order = order[(error[order] > 0) & ~(estimate >= 0.5 * error[order])]
        if order.size == 0:
            return
        masses: Any = self.masses[big].astype(ld)
        m_minus_1 = _exact_sum_minus_one(self.masses.astype(np.float64))
        log_m = np.log1p(ld(m_minus_1[0]) + ld(m_minus_1[1]))  # relative error <= 3 uu
        positions = (self.offset + big).astype(np.int64)
        # S_k over the small masses: rfft(small) - sum(small), componentwise error (masses >= 0)
        small_vec = np.zeros(size, dtype=self.masses.dtype)
        np.add.at(small_vec, (self.offset + small) % size, self.masses[small])
        small_spec, small_err = _small_spectrum(small_vec, len(small))
        two_pi = 2 * np.longdouble("3.141592653589793238462643383279502884") if ld is np.longdouble else 2 * math.pi
        scale = ld(two_pi) / ld(size)
        log2n = math.log2(n_masses + 1) + 2.0
        chunk = max(1, 4_000_000 // n_masses)
        for start in range(0, order.size, chunk):
            ks = order[start:start + chunk].astype(np.int64)
            r = (positions[None, :] * ks[:, None]) % size
            r = np.where(r > size // 2, r - size, r)
            theta = r.astype(ld) * scale
            half = np.sin(theta / 2)
            re_terms = -2.0 * masses * half * half
            im_terms = -masses * np.sin(theta)
            a_sum = np.sum(re_terms, axis=1) + small_spec[ks].real.astype(ld)
            b_sum = np.sum(im_terms, axis=1) + small_spec[ks].imag.astype(ld)
            abs_re, abs_im = np.sum(np.abs(re_terms), axis=1), np.sum(np.abs(im_terms), axis=1)
            abs_theta = np.sum(masses * np.abs(theta), axis=1)  # sin(theta) near +-pi: absolute error
            m_ld = 1 + ld(m_minus_1[0]) + ld(m_minus_1[1])
            a, b = a_sum / m_ld, b_sum / m_ld
            ea = ((24.0 + log2n + 2.0) * uu * (abs_re + abs(small_spec[ks].real)) + small_err) / m_ld
            eb = ((24.0 + log2n + 2.0) * uu * (abs_im + abs(small_spec[ks].imag)) + 4.0 * uu * abs_theta
                  + small_err) / m_ld
            x = 2 * a + a * a + b * b
            mod2 = 1 + x  # |1 + w|^2
            log_mod = np.log1p(x) / 2
            arg = np.arctan2(b, 1 + a)
            # first-order sensitivities of log|1+w| and arg(1+w) to a, b: |1+a| / |1+w|^2, |b| / |1+w|^2
            inv = 1.0 / mod2
            err_w = (np.abs(1 + a) * ea + np.abs(b) * eb) * inv + (np.abs(b) * ea + np.abs(1 + a) * eb) * inv
            err_w = err_w + 4.0 * uu * ((2 * np.abs(a) + a * a + b * b) * inv + np.abs(log_mod)
                                        + np.abs(b) * np.abs(1 + a) * inv + np.abs(arg))
            expo_re = count * (log_m + log_mod)
            expo_im = count * arg
            err = count * (err_w * 1.01 + 4.0 * uu * abs(float(log_m))) + 2.0 * uu * (np.abs(expo_re) + np.abs(expo_im))
            value = np.exp(expo_re) * (np.cos(expo_im) + 1j * np.sin(expo_im))
            mag = np.abs(value).astype(float)
            bound = mag * np.expm1(np.minimum(err.astype(float), 700.0)) + 6.0 * float(uu) * mag + 2.0 * u * mag
            better = bound < error[ks]
            powered[ks[better]] = value[better].astype(powered.dtype)
            error[ks[better]] = bound[better]

    def _convolve_power(self, count: int, log_mass_truncation_bound: float) -> "LossPmf":
        """``count``-fold composition of a PMF of few atoms by direct convolutions
        (:func:`convolution_power`; no FFT, nothing truncated before the last step, nothing wraps).
        The bound r on the final relative error times the exact total (sum of masses)^count <= 1 is
        the fresh charge in l1; an input off by a in l1 contributes (1 + a)^T - 1 (as :meth:`self_compose`)."""
        out, out_err = convolution_power(self.masses, count)
        total = float(np.sum(self.masses)) * (1.0 + len(self.masses) * 2.0 * _U)  # rounded up
        fresh = out_err * 1.01 * total ** count
        inherited = math.expm1(count * math.log1p(self.roundoff))
        inf = min(1.0, -math.expm1(count * math.log1p(-self.infinity_mass)))
        return LossPmf(self.interval, count * self.offset, np.maximum(out, 0.0), inf,
                       inherited + fresh).truncate(log_mass_truncation_bound)

    def _circular_power(self, count: int, lo: int, hi: int, direct_work: int = 0) -> tuple[np.ndarray, float]:
        """The ``count``-fold power of the masses on a circle of at least hi - lo + 1 points (an
        FFT pair), read off at grid points ``lo`` .. ``hi``, and the l1 bound on its round-off
        (:meth:`self_compose`'s, the input's own included). Mass of the exact composition outside
        [lo, hi] wraps onto the circle (at positions shifted by multiples of its size): the
        caller bounds it."""
        n = hi - lo + 1
        if n > MAX_POINTS:
            raise ValueError(f"value_discretization_interval: {count} compositions span {n:.3g} grid points "
                             "(epsilon is huge); use a coarser grid or the 'rdp' accountant")
        size = _next_fast_length(n)
        u = _unit(self.masses)
        wrapped = np.zeros(size, dtype=self.masses.dtype)
        start = self.offset % size
        if len(self.masses) <= size:  # no two masses share a position: two slices (the same values)
            head = min(len(self.masses), size - start)
            wrapped[start:start + head] = self.masses[:head]
            wrapped[:len(self.masses) - head] = self.masses[head:]
        else:
            np.add.at(wrapped, (self.offset + np.arange(len(self.masses))) % size, self.masses)
        spectrum = np.fft.rfft(wrapped)
        # per-coefficient forward error: the normwise bound, or the componentwise one (masses >= 0)
        e = min(_fft_error(size, math.sqrt(size) * _l2(wrapped), u),
                _fft_error(size, float(np.sum(wrapped)) * (1.0 + size * u), u))
        # only the live coefficients: elsewhere (|X'| + e)^(T - 1) < e^-760, so the power and its
        # error bound are exactly 0 in floating point (exp underflows below -745.2); most of a
        # spectrum is dead after a few dozen compositions, and its power cost more than both FFTs
        with np.errstate(divide="ignore"):
            live = np.flatnonzero((count - 1) * np.log(np.abs(spectrum) + e) > _DEAD_EXPONENT)
        coefficient_error = np.zeros(len(spectrum), dtype=spectrum.real.dtype)
        powered = np.zeros_like(spectrum)
        for start in range(0, len(live), _CHUNK):  # in pieces: no spectrum-sized temporaries
            piece = live[start:start + _CHUNK]
            coefficient_error[piece] = _power_error(spectrum[piece], count, e, u)
            powered[piece] = _int_power(spectrum[piece], count)
        if direct_work > 0:
            self._direct_powers(powered, coefficient_error, size, count, direct_work, spectrum)
        power = np.fft.irfft(powered, size)
        fresh = _inverse_roundoff(power, size, _spectral_norm(coefficient_error, size))
        begin = lo % size  # the window lo .. hi read off the circle: at most two slices
        arc = power[begin:begin + n]
        masses = np.maximum(arc if len(arc) == n else np.concatenate([arc, power[:n - len(arc)]]), 0.0)
        return masses, math.expm1(count * math.log1p(self.roundoff)) + fresh

    def self_compose(self, count: int, log_mass_truncation_bound: float, direct_work: int = 0) -> "LossPmf":
        """``count``-fold composition in one FFT: the masses, wrapped onto a circle of the size of
        the Chernoff window of the sum, raised to the power ``count`` in the Fourier domain. Mass
        outside the window (at most e^bound per side) wraps into it and is also charged to +inf.

        Round-off: the forward FFT's coefficients are each off by at most e = _fft_error(|X|_2),
        or (masses >= 0) e = _fft_error(sum of masses): each stage's rounding at an entry is at most
        eta times the l1 norm of the inputs of that partial DFT, and the later stages (unit-modulus
        twiddles) add these over a partition of the input (the componentwise form of Higham 2002,
        Thm 24.2); coefficients where this matters are then recomputed by :meth:`_direct_powers`;
        with |X_k| <= 1, |X'^T - X^T| <= T e (|X'| + e)^(T-1), and the power itself (binary powering,
        :func:`_int_power`) adds at most a relative 4u (T (|log |X'|| + 2 pi) + 2) (exp(T log X')'s
        bound, above binary powering's); :func:`_inverse_roundoff` carries the l2 sum of these to the
        output. An input already off by a in l1 contributes (1 + a)^T - 1."""
        if count == 1:
            return self
        first, last = count * self.offset, count * (self.offset + len(self.masses) - 1)  # the support
        if len(self.masses) <= DIRECT_ATOMS and last - first < DIRECT_SUPPORT:
            return self._convolve_power(count, log_mass_truncation_bound)
        if last - first < SMALL_SUPPORT:  # the whole support: no window to search, nothing wraps
            lo, hi = first, last
        else:
            windows, key = self._window_cache(), (count, log_mass_truncation_bound)
            if key not in windows:
                windows[key] = self._chernoff_window(count, log_mass_truncation_bound)
            lower, upper = windows[key]
            lo, hi = max(first, lower), min(last, upper)
        masses, roundoff = self._circular_power(count, lo, hi, direct_work)
        tails = 2.0 * math.exp(log_mass_truncation_bound) if (lo, hi) != (first, last) else 0.0
        inf = min(1.0, -math.expm1(count * math.log1p(-self.infinity_mass)) + tails)
        return LossPmf(self.interval, lo, masses, inf, roundoff).truncate(log_mass_truncation_bound)


def tilted_self_compose(pmf: LossPmf, count: int, log_mass_truncation_bound: float,
                        log_target: float, max_epsilon: float = math.inf) -> LossPmf | None:
    """``count``-fold composition of ``pmf`` (float64 masses) accurate in its upper tail, by
    exponential tilting; None where it does not apply (other precision, a tilt that gains nothing).

    With M(t) = sum_j m_j e^{t l_j} over the finite masses, the tilted masses m'_j = m_j e^{t l_j} / M
    compose to (m^{*T})_s e^{t s} / M^T at every loss s (the exponential factor is multiplicative
    under convolution), so the T-fold power of m' is computed by :meth:`LossPmf.self_compose` and
    each loss s >= e_min multiplied back by M^T e^{-t s} <= C = M^T e^{-t e_min}: the FFT's absolute
    round-off (l1 ``R'`` in the tilted units, about T u at worst) reaches the untilted masses at most
    C times smaller. t and e_min are the Chernoff point of the sum at mass e^``log_target``
    (:func:`_chernoff_bound`; any t > 0 and e_min give a valid bound, these make C <= e^log_target),
    or, where that point is above ``max_epsilon`` (an estimate of the epsilon wanted: below e_min
    the result is pessimistic but loose), e_min = ``max_epsilon`` and the t minimizing C there
    (None when C is then above e^log_target); so C R' is far below delta where a float64
    composition's charge alone is not (the "exponential shift" of FFT-based tail computations,
    with a charge).

    The result is pessimistic at every epsilon: every mass of the composition below e_min is moved
    up to e_min (the lowest kept grid point; delta(eps) only grows), the rest of the finite mass
    goes there too (rounded up by the error below, so that it is never less than the true mass
    below e_min: a total above 1 only adds to delta), the mass the tilted window cuts above it is
    charged to +inf (at most C times its tilted e^bound), and ``roundoff`` bounds the l1 distance of
    the masses above e_min to the composition's:

    * the tilted composition's own charge, its wrapped and cut tails and its lower tail moved up
      (twice e^bound), times C;
    * the tilt's rounding: m'_j is computed within a relative rho <= 3u (|t l_j| + |log M|) + 6u
      of m_j e^{t l_j} / M (M is a constant: its value only has to be the one used both ways), so
      each composed mass within a relative (1 + rho)^T - 1 (all terms are >= 0), at most that
      times the mass above e_min (at most the computed mass above e_min plus the charge);
    * the untilting's rounding (a relative 3u (|T log M| + |t s| + 2));
    * the input's own ``roundoff`` a, as in :meth:`LossPmf.self_compose`: (1 + a)^T - 1.
    """
    if pmf.masses.dtype != np.float64 or count < 2:
        return None
    keep = pmf.masses > 0
    l, m = pmf.losses[keep], pmf.masses[keep]
    if len(l) < 2:
        return None
    spread = max(float(l[-1] - l[0]), pmf.interval)
    log_m = np.log(m)
    t = _chernoff_t(l, m, count, log_target, spread)
    e_min = (count * _lse(log_m + t * l) - log_target) / t
    if e_min > max_epsilon:
        e_min = max_epsilon
        t = _argmin_over_t(lambda x: count * _lse(log_m + x * l) - x * e_min, spread)
    # rounded up by the sum's and the exponentials' errors: sum m' <= 1
    log_m_total = _lse(log_m + t * l) + _U * (8.0 * (t * float(np.max(np.abs(l))) + 1.0) + 2.0 * math.log2(len(l) + 1))
    first = math.ceil(e_min / pmf.interval)
    log_c = count * log_m_total - t * first * pmf.interval
    if not log_c < min(log_target + 1e-9, math.log(1e-3)):
        return None  # the tilt gains too little here
    h = pmf.interval
    exponent = t * pmf.losses - log_m_total
    with np.errstate(over="ignore", invalid="ignore"):
        tilted_masses = pmf.masses * np.exp(exponent)
    if not np.all(np.isfinite(tilted_masses)):
        return None  # a tilt this steep overflows: not for this PMF
    tilted = LossPmf(h, pmf.offset, tilted_masses, 0.0, 0.0)
    rho = 3.0 * _U * (float(np.max(np.abs(t * pmf.losses))) + abs(log_m_total)) + 6.0 * _U
    composed = tilted.self_compose(count, log_mass_truncation_bound)
    points = composed.offset + np.arange(len(composed.masses))
    above = points >= first
    if not np.any(above) or points[0] > first:
        return None  # the tilted window does not reach e_min (it is centred there: not expected)
    s = points[above]
    untilt = np.exp(count * log_m_total - t * (s * h))
    v = composed.masses[above] * untilt
    if not (np.all(np.isfinite(v)) and math.isfinite(composed.roundoff)):
        return None
    c = math.exp(log_c) * (1.0 + 8.0 * _U)
    relative = math.expm1(count * math.log1p(rho))
    untilt_err = 3.0 * _U * (abs(count * log_m_total) + float(np.max(np.abs(t * s * h))) + 2.0)
    above_mass = float(np.sum(v)) * (1.0 + len(v) * _U)
    # the tilted charge, its wrapped and cut tails (its infinite mass) and its lower tail moved up
    fft = c * (composed.roundoff + composed.infinity_mass + 2.0 * math.exp(log_mass_truncation_bound))
    error = fft + relative * (above_mass + fft) + untilt_err * above_mass
    inherited = math.expm1(count * math.log1p(pmf.roundoff))
    finite = math.exp(count * math.log1p(-pmf.infinity_mass))  # no step infinite
    inf = min(1.0, -math.expm1(count * math.log1p(-pmf.infinity_mass)) + c * composed.infinity_mass)
    v = v.copy()
    # everything below e_min, and the rest, at e_min: rounded up by the error of the masses above
    # it and the subtraction's rounding, so that it holds at least the true mass below e_min
    v[0] += max(0.0, finite - float(np.sum(v))) + error + 4.0 * _U * (finite + above_mass)
    return LossPmf(h, first, v, inf, error + inherited).truncate(log_mass_truncation_bound)


#: :func:`tail_floor` places the floor where the Chernoff bound on delta is this many times delta
#: (at the epsilon of Laplace compositions, b 0.5-30, 10-2000 steps, delta 1e-5 and 1e-9, the bound
#: was 1.0-11 times delta).
TAIL_FLOOR_FACTOR = 30.0


#: Tilts :func:`tail_self_compose` tries, in units of the Chernoff point's at the floor.
TAIL_TILTS = (1.0, 2.0, 3.0)
#: Blocks of the coarse copies on which :func:`tail_floor` and :func:`tail_self_compose` search.
TAIL_BINS = 256
#: :func:`tail_bins`: the most a coarse copy may move the ``count``-fold sum's losses up (in loss
#: units: its Chernoff searches then lose at most a factor e^{t TAIL_SHIFT} of tightness).
TAIL_SHIFT = 0.25
#: Golden-section steps of those searches (any t gives a valid bound: 7e-5 of the log-range is plenty).
_TAIL_STEPS = 20


def _coarse(l: np.ndarray, m: np.ndarray, bins: int = CHERNOFF_BINS) -> tuple[np.ndarray, np.ndarray]:
    """At most 2 ``bins`` points: the masses of ``bins`` consecutive blocks each moved to the
    block's largest loss (a copy whose MGF is at least the true one at every t > 0)."""
    if len(l) <= 2 * bins:
        return l, m
    starts = np.linspace(0, len(l), bins + 1).astype(np.int64)[:-1]
    return l[np.append(starts[1:], len(l)) - 1], np.add.reduceat(m, starts)


def tail_bins(pmf: LossPmf, count: int) -> int:
    """Blocks of a coarse copy of ``pmf`` (:func:`_coarse`) fine enough for a ``count``-fold sum: each
    block moves its masses up by at most its width, so the sum's by at most ``count`` widths; at
    least :data:`TAIL_BINS`, and as many as keep that shift within :data:`TAIL_SHIFT` (each step of
    a long Gaussian composition shifted by 1/256 of its support would move the floor and the circle
    far above the epsilon)."""
    spread = max(float(len(pmf.masses)) * pmf.interval, pmf.interval)
    return max(TAIL_BINS, min(len(pmf.masses), math.ceil(count * spread / TAIL_SHIFT)))


def tail_floor(pmf: LossPmf, count: int, delta: float, bins: int = TAIL_BINS) -> float:
    """A loss below which the ``count``-fold composition of ``pmf`` is not needed at ``delta``
    (a guess: :func:`tail_self_compose`'s caller checks that the epsilon found lies above it).

    (1 - e^{eps - s})_+ <= c(t) e^{t (s - eps)} with c(t) = t^t / (1 + t)^{1 + t} (its maximum over
    s >= eps), so delta(eps) <= c(t) M(t)^count e^{-t eps} for every t > 0 (M the MGF of one step's
    finite loss; mass at +inf aside): the eps where that bound equals ``TAIL_FLOOR_FACTOR`` delta,
    minimized over t on a coarse copy of the PMF (as :func:`_chernoff_bound`), lies below the
    epsilon at ``delta`` wherever the bound is within that factor of the true curve (its slack is
    polynomial in count: about t sigma sqrt(2 pi count)); -inf where that factor times delta is >= 1."""
    keep = pmf.masses > 0
    if TAIL_FLOOR_FACTOR * delta >= 1.0:
        return -math.inf  # no tail to speak of: the whole composition
    l, m = _coarse(pmf.losses[keep], pmf.masses[keep], bins)
    log_m, log_target = np.log(m), math.log(TAIL_FLOOR_FACTOR * delta)

    def point(t: float) -> float:
        log_c = t * math.log(t) - (1.0 + t) * math.log1p(t)
        return (count * _lse(log_m + t * l) + log_c - log_target) / t

    spread = max(float(l[-1] - l[0]), pmf.interval)
    return point(_argmin_over_t(point, spread, steps=_TAIL_STEPS))


def tail_self_compose(pmf: LossPmf, count: int, log_mass_truncation_bound: float, floor: float,
                      steeper: bool = True, bins: int = TAIL_BINS) -> LossPmf | None:
    """``count``-fold composition of ``pmf`` (float64 masses) on a window of grid points from
    ``floor`` (rounded up to the grid) up, every mass below it moved up to it: delta(eps) is the
    composition's at every eps >= floor (up to the charges below) and larger below it; one FFT pair
    of the window's size instead of the whole distribution's. None where it does not apply (the
circle would span more than half the support, the tilt overflows, ...).

    Exponential tilting (as :func:`tilted_self_compose`): with m'_j = m_j e^{t l_j} / M (M = sum_j m_j
    e^{t l_j}, rounded up), the T-fold power of m' on a circle of N points holding start .. hi
    (start <= lo, the floor's grid index; grid step h) is w_p = sum_k (m^{*T})_{p + kN} e^{t (p + kN) h}
    / M^T, and at every kept point p >= lo, v_p = w_p M^T e^{-t p h} = sum_k (m^{*T})_{p + kN}
    e^{t k N h}: the exact mass (k = 0) plus

    * mass from below the circle (k < 0), at most e^{-t N h} <= e^{-t (hi + 1 - start) h} in all (the
      total mass is <= 1): the circle reaches below the floor (points computed, then moved up to it)
      until that is at most e^bound (``log_mass_truncation_bound``);
    * mass from above it (k > 0), sum_{s > hi} (m^{*T})_s e^{t (s - p) h} <= exp(T K(t + r) - t lo h -
      r hi h) for every r > 0 (K the log-MGF of one step; Chernoff), which hi makes at most e^bound
      (or hi is the top of the support); the mass above hi (at most as much) is charged to +inf.

    Both are additions (pessimistic in place; the mass moved to the floor is rounded up by them). t is
    the Chernoff point at the floor (it minimizes C = M^T e^{-t lo h}, the largest untilting factor)
    or a multiple of it (:data:`TAIL_TILTS`: a steeper tilt needs a shorter circle below the floor),
    the shortest circle with C <= 1 (else the smallest C); ``steeper`` False: the Chernoff point
    only (the smallest charge, the longest circle); these searches run on a coarse copy whose
    MGF is above the true one (:func:`_coarse`), so the bounds they give stay valid. ``roundoff``:
    C times the tilted composition's l1 round-off bound, the tilt's and the untilt's roundings and
    the input's ``roundoff`` (as :func:`tilted_self_compose`)."""
    if pmf.masses.dtype != np.float64 or count < 2:
        return None
    keep = pmf.masses > 0
    l, m = pmf.losses[keep], pmf.masses[keep]
    first, last = count * pmf.offset, count * (pmf.offset + len(pmf.masses) - 1)
    h, bound = pmf.interval, log_mass_truncation_bound
    if len(l) < 2 or not math.isfinite(floor):
        return None
    lo = max(first, math.ceil(floor / h))
    if lo >= last:
        return None
    spread = max(float(l[-1] - l[0]), h)
    cl, cm = _coarse(l, m, bins)
    log_cm, floor_loss = np.log(cm), lo * h

    def plan(t: float) -> tuple[int, float, int, int, float]:
        """(points, t, start, hi, ln C) of the circle at tilt t; ln C from the coarse copy (above
        the exact one: its masses sit at their blocks' largest losses)."""
        log_c = count * _lse(log_cm + t * cl) - t * floor_loss
        # hi: C times the tilted mass above it is at most e^bound: for every r > 0 it is at most
        # exp(count K(t + r) - t floor - r hi), K the log-MGF (of the coarse copy: above the exact one)
        top = _argmin_over_t(lambda r: (count * _lse(log_cm + (t + r) * cl) - t * floor_loss - bound) / r, spread,
                             steps=_TAIL_STEPS)
        hi = min(last, math.ceil((count * _lse(log_cm + (t + top) * cl) - t * floor_loss - bound) / top / h))
        # the circle reaches below the floor (those points are computed, then moved up to it) far
        # enough that what wraps from below is at most e^bound: t N h >= -bound for its N points
        start = max(first, min(lo, hi + 1 - math.ceil(-bound / (t * h))))
        return hi - start + 1, t, start, hi, log_c

    # t: the Chernoff point at the floor (the smallest C) or a steeper tilt (a shorter circle
    # below the floor), the shortest circle whose C is at most 1 (or the smallest C)
    best = _argmin_over_t(lambda x: count * _lse(log_cm + x * cl) - x * floor_loss, spread, steps=_TAIL_STEPS)
    plans = [plan(best * k) for k in (TAIL_TILTS if steeper else (1.0,))]
    lowest = min(p[4] for p in plans)
    n_all, t, start, hi, _ = min(p for p in plans if p[4] <= max(0.0, lowest))
    if hi <= lo or 2 * n_all > last - first + 1:
        return None  # no window above the floor, or a circle too long to gain over the whole composition
    log_m = np.log(m)
    # rounded up by the sum's and the exponentials' errors: sum m' <= 1
    log_m_total = _lse(log_m + t * l) + _U * (8.0 * (t * float(np.max(np.abs(l))) + 1.0) + 2.0 * math.log2(len(l) + 1))
    log_c = count * log_m_total - t * floor_loss
    with np.errstate(over="ignore", invalid="ignore"):
        tilted = pmf.masses * np.exp(t * pmf.losses - log_m_total)
    if not (np.all(np.isfinite(tilted)) and log_c < 700.0):
        return None
    n = hi - lo + 1
    on_circle, tilted_roundoff = LossPmf(h, pmf.offset, tilted, 0.0, 0.0)._circular_power(count, start, hi)
    masses = on_circle[lo - start:]
    s = lo + np.arange(n)
    v = masses * np.exp(count * log_m_total - t * (s * h))
    if not (np.all(np.isfinite(v)) and math.isfinite(tilted_roundoff)):
        return None
    c = math.exp(log_c) * (1.0 + 8.0 * _U)
    tau = math.exp(bound)
    rho = 3.0 * _U * (float(np.max(np.abs(t * pmf.losses))) + abs(log_m_total)) + 6.0 * _U
    relative = math.expm1(count * math.log1p(rho))
    untilt_err = 3.0 * _U * (abs(count * log_m_total) + float(np.max(np.abs(t * s * h))) + 2.0)
    above_mass = float(np.sum(v)) * (1.0 + n * _U)
    fft = c * tilted_roundoff
    wrapped = tau + math.exp(-t * (hi + 1 - start) * h)  # from above, from below: additions
    error = fft + relative * (above_mass + fft) + untilt_err * above_mass
    inherited = math.expm1(count * math.log1p(pmf.roundoff))
    finite = math.exp(count * math.log1p(-pmf.infinity_mass))
    inf = min(1.0, -math.expm1(count * math.log1p(-pmf.infinity_mass)) + (tau if hi < last else 0.0))
    v[0] += max(0.0, finite - float(np.sum(v))) + error + wrapped + 4.0 * _U * (finite + above_mass)
    return LossPmf(h, lo, v, inf, error + inherited).truncate(bound)


def _small_spectrum(small_vec: np.ndarray, terms: int) -> tuple[np.ndarray, float]:
    """S_k = sum_j m_j (e^{-i theta_jk} - 1) of the ``terms`` nonnegative masses on the circle
    ``small_vec``, as rfft(small_vec) - sum(small_vec), and a bound on each coefficient's error: the
    FFT's componentwise one plus the sum's and the subtraction's, (log2(terms) + 4) u sum, all in the
    precision of ``small_vec`` (the sum is kept in it: rounding it to float64 in an extended pass
    would add an uncharged 2^-53 of it)."""
    size, u = len(small_vec), _unit(small_vec)
    total = np.sum(small_vec)
    m_small = float(total) * (1.0 + 2.0 * _U)  # rounded up: it only scales the bound
    err = _fft_error(size, m_small * (1.0 + size * u), u) + (math.log2(max(terms, 2)) + 4.0) * u * m_small
    return np.fft.rfft(small_vec) - total, err


def _int_power(z: np.ndarray, count: int) -> np.ndarray:
    """z ** ``count`` by binary powering (squarings and products: at most 2 log2(count) complex
    multiplications of arrays, where numpy's ``**`` calls the C library's cpow, exp(count log z), for
    exponents of 100 and more, about 10x slower). The computed power is the exact one times a product
    of at most count - 1 factors (1 + d_i), |d_i| <= sqrt(2) gamma_2 ~ 2.83u (a complex product's
    relative error, Higham 2002, Lemma 3.5), a relative error below the 4u (count (|log |z|| + 2 pi) +
    2) that :func:`_power_error` charges."""
    return binary_power(z, count, operator.mul)


def _power_error(spectrum: np.ndarray, count: int, e: float, u: float) -> np.ndarray:
    """Bound on |X'^T - X^T| for computed coefficients X' = ``spectrum``, each within ``e`` of the
    exact X (|X| <= 1): T e (|X'| + e)^(T-1) propagated, plus the power's own rounding
    4u (T (|log |X'|| + 2 pi) + 2) |X'|^T (:meth:`LossPmf.self_compose`)."""
    radius = np.abs(spectrum)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        log_r = np.log(radius)
        propagated = count * e * np.exp((count - 1) * np.log(radius + e))
        powering = 4.0 * u * (count * (np.abs(log_r) + 2.0 * math.pi) + 2.0) * np.exp(count * log_r)
    return propagated + np.where(radius > 0, powering, 0.0)


def _same_grid(pmfs: list[LossPmf]) -> float:
    intervals = {p.interval for p in pmfs}
    if len(intervals) > 1:
        raise ValueError("value_discretization_interval: PLDs on different grids cannot be combined")
    return intervals.pop()


def _mix(pmfs: list[LossPmf], weights: list[float]) -> LossPmf:
    """sum_i weights_i pmfs_i on their common grid."""
    h = _same_grid(pmfs)
    lo = min(p.offset for p in pmfs)
    out = np.zeros(max(p.offset + len(p.masses) for p in pmfs) - lo, dtype=np.result_type(*[p.masses for p in pmfs]))
    for p, w in zip(pmfs, weights):
        out[p.offset - lo:p.offset - lo + len(p.masses)] += w * p.masses
    return LossPmf(h, lo, out, sum(w * p.infinity_mass for p, w in zip(pmfs, weights)),
                   sum(w * p.roundoff for p, w in zip(pmfs, weights)) + 2.0 * _unit(out) * float(np.sum(out)))


@dataclasses.dataclass(frozen=True)
class PrivacyLossDistribution:
    """A PLD in both directions (``add`` is ``None`` when the pair is symmetric).

    Method names follow dp-accounting's ``PrivacyLossDistribution``. Every answer is an upper
    bound on the mechanism's true delta(eps) (resp. eps(delta)).
    """

    remove: LossPmf
    add: LossPmf | None = None
    log_mass_truncation_bound: float = LOG_TAIL_MASS

    def _directions(self) -> tuple[LossPmf, ...]:
        return (self.remove,) if self.add is None else (self.remove, self.add)

    def astype(self, dtype: Any) -> "PrivacyLossDistribution":
        """Both directions in floating-point type ``dtype`` (:meth:`LossPmf.astype`)."""
        return dataclasses.replace(self, remove=self.remove.astype(dtype),
                                   add=None if self.add is None else self.add.astype(dtype))

    @property
    def roundoff(self) -> float:
        """The floating-point charge included in every delta (the larger direction's)."""
        return max(p.roundoff for p in self._directions())

    def compose(self, other: "PrivacyLossDistribution") -> "PrivacyLossDistribution":
        bound = min(self.log_mass_truncation_bound, other.log_mass_truncation_bound)
        remove = self.remove.compose(other.remove, bound)
        if self.add is None and other.add is None:
            return PrivacyLossDistribution(remove, None, bound)
        add = (self.add or self.remove).compose(other.add or other.remove, bound)
        return PrivacyLossDistribution(remove, add, bound)

    def self_compose(self, count: int, direct_work: int = 0) -> "PrivacyLossDistribution":
        """``count``-fold composition; ``direct_work`` > 0 recomputes the dominant Fourier coefficients
        directly (:meth:`LossPmf._direct_powers`: a far smaller round-off charge, at some cost)."""
        bound = self.log_mass_truncation_bound
        return PrivacyLossDistribution(
            self.remove.self_compose(count, bound, direct_work),
            None if self.add is None else self.add.self_compose(count, bound, direct_work), bound)

    def compute_mixture(self, other: "PrivacyLossDistribution", self_weight: float) -> "PrivacyLossDistribution":
        """``self_weight`` self + (1 - self_weight) other (a labelled mixture of mechanisms)."""
        if not 0.0 <= self_weight <= 1.0:
            raise ValueError(f"self_weight: must lie in [0, 1], got {self_weight}")
        return mixture([(self_weight, self), (1.0 - self_weight, other)])

    def get_delta_for_epsilon(self, epsilon: float) -> float:
        eps = check_nonnegative("epsilon", epsilon)
        return max(p.delta(eps) for p in self._directions())

    def get_epsilon_for_delta(self, delta: float) -> float:
        dl = check_delta("delta", delta)
        return max(p.epsilon(dl) for p in self._directions())


#: Single-step PLDs kept by :func:`cached_step` (the most recently used).
STEP_CACHE_SIZE = 64
_STEPS: "collections.OrderedDict[object, PrivacyLossDistribution]" = collections.OrderedDict()


def cached_step(key: object, build: Callable[[], PrivacyLossDistribution]) -> "PrivacyLossDistribution":
    """``build()`` (a single step's PLD), kept under ``key`` (hashable: the frozen block with count 1,
    the relation and the grid): the accountant's passes (float64, direct powers, extended
    precision) and repeated queries of the same event construct each step once. The masses are
    made read-only (shared); nothing composes in place."""
    try:
        hit = _STEPS.pop(key, None)
    except TypeError:  # an unhashable block (a field holding a list): not kept
        return build()
    if hit is None:
        hit = build()
        for part in hit._directions():
            part.masses.flags.writeable = False
    _STEPS[key] = hit
    while len(_STEPS) > STEP_CACHE_SIZE:
        _STEPS.popitem(last=False)
    return hit


def mixture(components: list[tuple[float, PrivacyLossDistribution]]) -> PrivacyLossDistribution:
    """PLD of the *labelled* mixture that runs mechanism i with probability w_i (the weights, >= 0,
    sum to 1): the weighted sum of the PLDs, direction by direction."""
    weights = [float(w) for w, _ in components]
    plds = [p for _, p in components]
    if min(weights) < 0 or not math.isclose(sum(weights), 1.0, rel_tol=1e-9):
        raise ValueError(f"components: weights must be >= 0 and sum to 1, got sum {sum(weights)}")
    remove = _mix([p.remove for p in plds], weights)
    add = None if all(p.add is None for p in plds) else _mix([p.add or p.remove for p in plds], weights)
    return PrivacyLossDistribution(remove, add, min(p.log_mass_truncation_bound for p in plds))


def from_privacy_parameters(epsilon: float, delta: float, value_discretization_interval: float = 1e-4,
                            log_mass_truncation_bound: float = LOG_TAIL_MASS) -> PrivacyLossDistribution:
    """PLD of the pair that dominates every (epsilon, delta)-DP mechanism (Kairouz, Oh & Viswanath
    2015): loss +inf w.p. delta, +eps w.p. (1-delta) e^eps/(1+e^eps), -eps w.p. (1-delta)/(1+e^eps);
    finite losses rounded up to the grid."""
    eps = check_nonnegative("epsilon", epsilon)
    if not 0.0 <= delta < 1.0:
        raise ValueError(f"delta: must lie in [0, 1), got {delta}")
    h = check_positive("value_discretization_interval", value_discretization_interval)
    if eps > MAX_LOSS or 2 * eps / h > MAX_POINTS:
        raise ValueError(f"epsilon: the pld grid holds losses up to {MAX_LOSS:g} in at most {MAX_POINTS} points; "
                         f"epsilon={eps:g} at discretization {h:g} is beyond it (use 'rdp' or a coarser grid)")
    top, bottom = math.ceil(eps / h), math.ceil(-eps / h)
    masses = np.zeros(top - bottom + 1)
    masses[-1] += (1.0 - delta) / (1.0 + math.exp(-eps))
    masses[0] += (1.0 - delta) / (1.0 + math.exp(eps))
    return PrivacyLossDistribution(LossPmf(h, bottom, masses, float(delta)), None, log_mass_truncation_bound)


def identity(value_discretization_interval: float = 1e-4,
             log_mass_truncation_bound: float = LOG_TAIL_MASS) -> PrivacyLossDistribution:
    """PLD of a mechanism that releases nothing (all loss 0)."""
    h = check_positive("value_discretization_interval", value_discretization_interval)
    return PrivacyLossDistribution(LossPmf(h, 0, np.ones(1), 0.0), None, log_mass_truncation_bound)


def non_private(value_discretization_interval: float = 1e-4,
                log_mass_truncation_bound: float = LOG_TAIL_MASS) -> PrivacyLossDistribution:
    """PLD of a mechanism with no privacy (all loss +inf)."""
    h = check_positive("value_discretization_interval", value_discretization_interval)
    return PrivacyLossDistribution(LossPmf(h, 0, np.zeros(1), 1.0), None, log_mass_truncation_bound)
