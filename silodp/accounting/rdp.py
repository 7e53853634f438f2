"""Renyi DP of the (Poisson-subsampled) Gaussian mechanism, and its conversion to (epsilon, delta).

* Gaussian with noise multiplier z (std / sensitivity): RDP(alpha) = alpha / (2 z^2)
  (Mironov 2017, Prop 7).
* Poisson-subsampled Gaussian under add/remove (the Sampled Gaussian Mechanism, Mironov, Talwar &
  Zhang 2019): RDP(alpha) = log(A_alpha) / (alpha - 1) with A_alpha = E_{x~N(0,z^2)}[((1 - q) +
  q e^{(2x - 1)/(2 z^2)})^alpha], the larger of the two orderings of the pair (MTZ19, Thm 5).
  Integer alpha: the binomial expansion (MTZ19, Sec 3.3, eq. for integer alpha). Fractional
  alpha: the two convergent generalized-binomial series split at z0 = z^2 log(1/q - 1) + 1/2,
  where (1 - q) N(0, z^2) and q N(1, z^2) cross (MTZ19, Sec 3.3). Where a series would need more
  than ``_MAX_TERMS`` terms (large z: its terms then fall off only polynomially), log A_alpha is
  bounded by the chord between the neighbouring integer orders instead: (alpha - 1) D_alpha =
  log E_Q[(dP/dQ)^alpha] is a cumulant generating function, convex in alpha (Hoelder; van Erven &
  Harremoes 2014, Thm 11), so log A_alpha <= (k + 1 - alpha) log A_k + (alpha - k) log A_{k+1},
  k = floor(alpha), log A_1 = 0. Closed form, O(alpha) terms: every order costs microseconds.
* Gaussian on a minibatch of m draws *with replacement* from n records, replace-one, z relative to
  one draw's replace-one shift 2C (the accountant passes sigma / (2C)): the *labelled-multiplicity* bound. The changed record is drawn
  K ~ Bin(m, 1/n) times; releasing K as well (post-processing runs the other way, so this only
  adds leakage) makes the step a labelled mixture of Gaussians with shifts 2KC, whose RDP is
  log(sum_k P[K=k] exp((alpha - 1) alpha k^2 / (2 z^2))) / (alpha - 1). Sound, but it credits
  no amplification in epsilon (docs/accounting.md).
* Gaussian on a uniformly random subset of m = q n of n records (sampling *without* replacement),
  replace-one, z relative to the replace-one shift 2C (the accountant passes sigma / (2C)): the
  RDP of the *symmetric* pair whose hockey-stick curve is, in both directions, the "remove" curve
  s(e) = H_e((1 - q) N(0, z^2) + q N(1, z^2) || N(0, z^2)) of the Poisson pair,
  :func:`without_replacement_gaussian_rdp`. Proof. (i) Every step is dominated by s in both
  directions: :func:`silodp.accounting.pld_pairs.from_without_replacement_gaussian` (Balle, Barthe &
  Gaboardi 2018, Thm 2, and joint convexity of H_e). (ii) For any P, Q and convex f,
  E_Q[f(dP/dQ)] = f(1) + int_1^inf f''(e) H_e(P || Q) de + int_0^1 f''(e) E_Q[(e - dP/dQ)_+] de
  (Taylor's formula with integral remainder), and E_Q[(e - dP/dQ)_+] = e - 1 + H_e(P || Q)
  = e H_{1/e}(Q || P) for e < 1; with f(r) = r^alpha and u = 1/e,
  A_alpha(P || Q) = 1 + alpha (alpha - 1) int_1^inf [u^{alpha - 2} H_u(P || Q) + u^{-alpha - 1} H_u(Q || P)] du,
  increasing in both curves: any pair dominated by s both ways has A_alpha at most
  1 + alpha (alpha - 1) int_1^inf (u^{alpha - 2} + u^{-alpha - 1}) s(u) du, whatever the orientation of
  each step (RDP composes additively). (iii) The Poisson pair itself has that formula with its "add"
  curve a(u) = H_u(N(0) || (1 - q) N(0) + q N(1)) in the second term, and its A_alpha is MTZ19's;
  so A_alpha(symmetric) = A_alpha(MTZ19) + alpha (alpha - 1) int_0^inf e^{-alpha t} (s - a)(e^t) dt.
  (a <= s: BBG18 Thm 2 writes a(u) = q H_{u'}(N(0) || (1 - b) N(0) + b N(1)), u' = 1 + (u - 1) / q,
  b = u / u' <= 1, which joint convexity bounds by q b H_{u'}(N(1) || N(0)) <= s(u).) s and a
  decrease in u, so the integral is bounded above by a Riemann sum (s at each cell's left end, a
  at its right end) on a geometric grid of t, plus the tail beyond it (s(T) e^{-alpha T} / alpha).
  The sharper bound D_alpha <= MTZ19's RDP at z (what ``rdp`` charged before) would follow if
  D_alpha((1 - q) N(0) + q N(a - w) || (1 - q) N(0) + q N(b - w)) were largest at w = b over the
  clip ball; an exact search over small datasets finds no counter-example, but it is unproven, so
  it is only :func:`without_replacement_conjectured_rdp`, never a certificate.
* (alpha, r)-RDP implies (r + log(1 - 1/alpha) - (log delta + log alpha)/(alpha - 1), delta)-DP
  (Balle, Barthe, Gaboardi, Hsu & Sato 2020, Thm 21; Canonne, Kamath & Steinke 2020, Prop 12);
  :func:`epsilon_from_rdp` takes the best order and :func:`delta_from_rdp` inverts it exactly.

Self-contained (numpy and scipy.special only); tested against dp-accounting's RDP accountant.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import gammaln, log_ndtr, logsumexp

from silodp.accounting._numerics import logsumexp_rows

#: The fractional series stop once their terms fall below exp(-_SERIES_TOL) (A_alpha >= 1).
_SERIES_TOL = 30.0
#: Added to every log A_alpha: covers the rounding of its (signed) sum, so RDP is rounded up.
_LOG_A_SLACK = 1e-12
#: Fractional orders whose series needs more terms than this take the integer-order chord bound.
_MAX_TERMS = 1 << 12


def gaussian_rdp(noise_multiplier: float, orders: np.ndarray) -> np.ndarray:
    """RDP of the Gaussian mechanism: alpha / (2 z^2) (Mironov 2017, Prop 7)."""
    return np.asarray(orders, dtype=float) / (2.0 * noise_multiplier ** 2)


def _log_a_integer(q: float, z: float, alpha: int) -> float:
    """log A_alpha for integer alpha: logsumexp_k [log C(alpha, k) + k log q + (alpha - k) log(1 - q)
    + (k^2 - k) / (2 z^2)] (MTZ19, Sec 3.3)."""
    k = np.arange(alpha + 1, dtype=float)
    log_binom = gammaln(alpha + 1.0) - gammaln(k + 1.0) - gammaln(alpha - k + 1.0)
    terms = log_binom + k * math.log(q) + (alpha - k) * math.log1p(-q) + (k * k - k) / (2.0 * z * z)
    return float(logsumexp_rows(terms[None, :])[0])  # scipy's logsumexp without its per-call overhead


def _log_a_chord(q: float, z: float, alpha: float) -> float:
    """Upper bound on log A_alpha by log-convexity in alpha: the chord between the integer orders
    floor(alpha) and floor(alpha) + 1 (module docstring), log A_1 = 0."""
    k = math.floor(alpha)
    t = alpha - k
    low = _log_a_integer(q, z, k) if k >= 2 else 0.0
    return (1.0 - t) * low + t * _log_a_integer(q, z, k + 1)


def _log_a_fractional(q: float, z: float, alpha: float) -> float:
    """log A_alpha for fractional alpha: the sum of the two series of MTZ19 Sec 3.3, or the chord
    bound :func:`_log_a_chord` where the series converge too slowly or cancel.

    Below z0 the integrand is expanded in powers of q mu1/mu0, above it in powers of
    (1 - q) mu0/mu1; term i of each integrates in closed form to
    C(alpha, i) q^i (1-q)^{alpha-i} e^{(i^2 - i)/(2 z^2)} Phi((z0 - i)/z) and, with j = alpha - i,
    C(alpha, i) q^j (1-q)^i e^{(j^2 - j)/(2 z^2)} Phi((j - z0)/z). Signs of C(alpha, i) alternate
    once i > alpha; terms are summed until both series drop below exp(-_SERIES_TOL), and the
    last term of each is added as a bound on its remainder (rounding A_alpha up).
    """
    z0 = z * z * math.log(1.0 / q - 1.0) + 0.5
    log_q, log_1q = math.log(q), math.log1p(-q)
    log_gamma_a = math.lgamma(alpha + 1.0)
    terms: list[np.ndarray] = []
    signs: list[np.ndarray] = []
    start, size = 0, 64
    while True:
        i = np.arange(start, start + size, dtype=float)
        j = alpha - i
        log_binom = log_gamma_a - gammaln(i + 1.0) - gammaln(j + 1.0)  # log |C(alpha, i)|
        sign = np.where(i > alpha, (-1.0) ** (i - math.floor(alpha) - 1.0), 1.0)
        s0 = log_binom + i * log_q + j * log_1q + (i * i - i) / (2 * z * z) + log_ndtr((z0 - i) / z)
        s1 = log_binom + j * log_q + i * log_1q + (j * j - j) / (2 * z * z) + log_ndtr((j - z0) / z)
        terms += [s0, s1]
        signs += [sign, sign]
        if (start > alpha + 1 and max(s0[-1], s1[-1]) < -_SERIES_TOL
                and np.all(np.diff(s0[-8:]) < 0) and np.all(np.diff(s1[-8:]) < 0)):
            break
        start += size
        size *= 2
        if start >= _MAX_TERMS:
            return _log_a_chord(q, z, alpha)  # the series converge too slowly here
    t, sg = np.concatenate(terms), np.concatenate(signs)
    top = float(np.max(t))
    # past i > alpha both series alternate with decreasing terms: the remainder of each is at
    # most its last term, added in full so that A_alpha is rounded up
    total = float(np.sum(sg * np.exp(t - top))) + 2.0 * math.exp(max(s0[-1], s1[-1]) - top)
    if total <= 0:
        return _log_a_chord(q, z, alpha)  # cancellation ate the sum
    return min(top + math.log(total), _log_a_chord(q, z, alpha))


def poisson_subsampled_gaussian_rdp(q: float, noise_multiplier: float, orders: np.ndarray) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian (add/remove, sampling probability q), MTZ19.

    Rounded up by ``_LOG_A_SLACK / (alpha - 1)`` (floating point). Orders where the computation is not finite are returned as ``inf`` (no certificate there).
    """
    z = float(noise_multiplier)
    alphas = np.asarray(orders, dtype=float)
    if q >= 1.0:
        return gaussian_rdp(z, alphas)
    out = np.empty_like(alphas)
    for n, alpha in enumerate(alphas):
        if q == 0.0:
            out[n] = 0.0
            continue
        is_int = float(alpha).is_integer()
        log_a = _log_a_integer(q, z, int(alpha)) if is_int else _log_a_fractional(q, z, float(alpha))
        out[n] = (max(log_a, 0.0) + _LOG_A_SLACK) / (alpha - 1.0)
    return np.where(np.isfinite(out), out, np.inf)


def with_replacement_gaussian_rdp(noise_multiplier: float, sample_size: int, dataset_size: int,
                                  orders: np.ndarray) -> np.ndarray:
    """RDP of the labelled-multiplicity bound for a with-replacement minibatch (module docstring)."""
    from silodp.accounting import _binomial

    z, m, n = float(noise_multiplier), int(sample_size), int(dataset_size)
    k = np.arange(m + 1, dtype=float)
    log_p = _binomial.logpmf(k, m, 1.0 / n)
    alphas = np.asarray(orders, dtype=float)[:, None]
    out = logsumexp(log_p + (alphas - 1.0) * alphas * k * k / (2.0 * z * z), axis=1)
    return np.maximum(out, 0.0) / (alphas[:, 0] - 1.0)


#: Grid of the without-replacement correction integral: t_0 = 0, then geometric from _WOR_T0 to _WOR_T1.
_WOR_POINTS, _WOR_T0, _WOR_T1 = 1 << 16, 1e-9, 40.0
#: Absolute slack on each hockey-stick value (log_ndtr to a few ulps; the curves are at most 1).
_WOR_CURVE_SLACK = 1e-15


@functools.lru_cache(maxsize=64)
def _wor_curves(q: float, z: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grid t, and s(e^t) rounded up, a(e^t) rounded down (module docstring)."""
    from silodp.accounting.pld_pairs import GaussianPair  # light: numpy and scipy.special

    t = np.concatenate([[0.0], np.geomspace(_WOR_T0, _WOR_T1, _WOR_POINTS)])
    s = np.minimum(GaussianPair(q, 0.0, z).delta(t) + _WOR_CURVE_SLACK, 1.0)
    a = np.maximum(GaussianPair(0.0, q, z).delta(t) - _WOR_CURVE_SLACK, 0.0)
    for v in (t, s, a):
        v.flags.writeable = False
    return t, s, a


def _wor_log_correction(q: float, z: float, alpha: float) -> float:
    """log of an upper bound on alpha (alpha - 1) int_0^inf e^{-alpha t} (s - a)(e^t) dt (-inf if 0)."""
    t, s, a = _wor_curves(q, z)
    lo, hi = t[:-1], t[1:]
    # int_cell e^{-alpha t} dt = e^{-alpha lo} (1 - e^{-alpha (hi - lo)}) / alpha, in logs
    log_cell = -alpha * lo + np.log(-np.expm1(-alpha * (hi - lo))) - math.log(alpha)
    gap = np.maximum(s[:-1] - a[1:], 0.0)  # s at the left end, a at the right end
    with np.errstate(divide="ignore"):
        terms = np.concatenate([log_cell + np.log(gap), [-alpha * t[-1] - math.log(alpha) + math.log(s[-1])]])
    return math.log(alpha) + math.log(alpha - 1.0) + float(logsumexp(terms)) + 1e-12


def without_replacement_gaussian_rdp(q: float, noise_multiplier: float, orders: np.ndarray) -> np.ndarray:
    """RDP of a Gaussian sum over a uniformly random subset (sampling without replacement, rate q),
    replace-one, ``noise_multiplier`` relative to the replace-one shift 2C (sigma / (2C)): the
    symmetric pair of the module docstring (proved there), rounded up; ``inf`` where not finite."""
    z = float(noise_multiplier)
    alphas = np.asarray(orders, dtype=float)
    if q >= 1.0:
        return gaussian_rdp(z, alphas)
    base = poisson_subsampled_gaussian_rdp(q, z, alphas)  # (log A_alpha(MTZ19) + slack) / (alpha - 1)
    out = np.empty_like(alphas)
    for n, alpha in enumerate(alphas):
        if q == 0.0:
            out[n] = 0.0
            continue
        log_a = base[n] * (alpha - 1.0)
        log_c = _wor_log_correction(float(q), z, float(alpha))
        out[n] = float(np.logaddexp(log_a, log_c)) / (alpha - 1.0)  # log(A_alpha + correction)
    return np.where(np.isfinite(out), out, np.inf)


def without_replacement_conjectured_rdp(q: float, noise_multiplier: float, orders: np.ndarray) -> np.ndarray:
    """CONJECTURE, not a certificate: MTZ19's Poisson RDP at the replace-one shift 2C, which would
    bound sampling without replacement if the conjecture of the module docstring held (an exact
    search over small datasets finds it attained, never exceeded). For comparison only."""
    return poisson_subsampled_gaussian_rdp(q, noise_multiplier, orders)


def epsilon_from_rdp(orders: np.ndarray, rdp: np.ndarray, delta: float) -> float:
    """Smallest certified epsilon over the orders (Balle et al. 2020, Thm 21), rounded up."""
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        eps = r + np.log1p(-1.0 / a) - (math.log(delta) + np.log(a)) / (a - 1.0)
    eps = np.where(np.isfinite(eps), eps, np.inf)
    return max(0.0, float(np.min(eps)))


def delta_from_rdp(orders: np.ndarray, rdp: np.ndarray, epsilon: float) -> float:
    """Smallest certified delta at ``epsilon`` over the orders: Thm 21 of Balle et al. solved for
    delta, log delta = (alpha - 1)(r - epsilon + log(1 - 1/alpha)) - log alpha."""
    a = np.asarray(orders, dtype=float)
    r = np.asarray(rdp, dtype=float)
    with np.errstate(over="ignore", invalid="ignore"):
        log_delta = (a - 1.0) * (r - epsilon + np.log1p(-1.0 / a)) - np.log(a)
    log_delta = np.where(np.isnan(log_delta), np.inf, log_delta)
    return float(min(1.0, math.exp(min(0.0, float(np.min(log_delta))))))
