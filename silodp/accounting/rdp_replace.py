"""Renyi DP of the Poisson-subsampled Gaussian under replace-one: the replace-one pair itself.

With contributions in the ball of radius C and noise sigma = z C, replacing one record moves its
contribution from -C to +C when it is sampled, so (after scaling by C, as :mod:`silodp.accounting.pld`
does) the dominating pair is P = (1 - q) N(0, z^2) + q N(1, z^2), Q = (1 - q) N(0, z^2) + q N(-1, z^2)
(symmetric: D_alpha(P||Q) = D_alpha(Q||P)). Charging it as add/remove at shift 2C (MTZ19 at z / 2)
is sound but 2-4x looser in epsilon; this module bounds A_alpha = E_Q[r^alpha], r = dP/dQ, directly.

The bound (rigorous, any real alpha > 1). r(x) is increasing in x with r(0) = 1 (its logarithm is
the difference of log((1 - q) + q e^{(2x - 1)/(2 z^2)}), increasing, and its mirror image), and
E_Q[r] = 1, so A_alpha = 1 + E_Q[R(r)] with R(r) = r^alpha - 1 - alpha (r - 1) >= 0, which
decreases for r < 1 and increases for r > 1 (R'(r) = alpha (r^{alpha - 1} - 1)). On a grid
0 = x_0 < ... < x_N = L:

* a cell [x_{i-1}, x_i] on the right contributes at most Q([x_{i-1}, x_i]) R(r(x_i)), and, since
  R <= r^alpha and d log r / dx = (w_+(x) + w_-(x)) / z^2 with w_+ increasing and w_- decreasing
  (the posterior weights of the shifted components), log r(x) <= log r(x_i) - k (x_i - x) with
  k = (w_+(x_{i-1}) + w_-(x_i)) / z^2, at most r(x_i)^alpha e^{-t x_i} int q(x) e^{t x} dx over the
  cell, t = alpha k (a Gaussian integral in closed form); each cell takes the smaller;
* its mirror cell on the left at most Q([-x_i, -x_{i-1}]) R(r(-x_i));
* x > L (L >= 1/2): p(x) <= phi(x - 1) and q(x) >= (1 - q) phi(x), so
  p^alpha q^{1 - alpha} <= (1 - q)^{1 - alpha} e^{alpha (alpha - 1) / (2 z^2)} phi(x - alpha);
* x < -L: R <= R(0) = alpha - 1, times Q((-inf, -L]).

Everything is summed in log space and the total rounded up by a relative 1e-9 (the cell masses
and log_ndtr are accurate to a few ulps). The grid only decides tightness: cells of width z / 2000
across the bulk, then geometric (ratio 1.005) out to L; it is computed at the orders
:data:`NODES` and chorded in between (convexity of log A_alpha in alpha). Tested against mpmath quadrature of
A_alpha and against the replace-one PLD (silodp's and dp-accounting's).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from scipy.special import log_ndtr

from silodp.accounting._numerics import logsumexp_rows

#: Added to every log A_alpha (as :data:`silodp.accounting.rdp._LOG_A_SLACK`).
_LOG_A_SLACK = 1e-12
#: Relative rounding-up of the summed bound.
_REL_SLACK = 1e-9
#: Uniform cells per noise standard deviation across the bulk, and how far (in std) it reaches.
_BULK_CELLS, _BULK_STD = 250, 10.0
#: Ratio of consecutive grid points beyond the bulk.
_RATIO = 1.005
#: The orders the bound is computed at; any other order in (1, 4096] takes the chord between its
#: neighbours here (log A_alpha is convex in alpha: :mod:`silodp.accounting.rdp`), log A_1 = 0.
NODES = tuple(sorted({round(1.0 + k / 10.0, 2) for k in range(1, 10)} | {2.0 + k / 4.0 for k in range(37)}
                     | set(range(12, 65, 2)) | {80, 96, 128, 160, 192, 256, 384, 512, 768, 1024, 1536,
                                                  2048, 3072, 4096}))


def _log_mass(lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """log(Phi(hi) - Phi(lo)) for lo < hi, stable in both tails."""
    right = lo > 0
    a = np.where(right, -hi, lo)  # mass = Phi(b') - Phi(a') with a' < b' <= ... mirrored when right
    b = np.where(right, -lo, hi)
    lb, la = log_ndtr(b), log_ndtr(a)
    with np.errstate(divide="ignore"):
        return lb + np.log(-np.expm1(la - lb))


def _log_q_mass(lo: np.ndarray, hi: np.ndarray, q: float, z: float, tilt: Any = 0.0) -> np.ndarray:
    """log int_lo^hi q(x) e^{t x} dx for Q = (1 - q) N(0, z^2) + q N(-1, z^2), t = ``tilt``
    (exponential tilting: int phi_z(x - mu) e^{t x} = e^{t mu + t^2 z^2 / 2} Phi-mass shifted by t z^2)."""
    t = np.asarray(tilt, dtype=float)
    shift = t * z * z
    core = t * t * z * z / 2.0
    m0 = math.log1p(-q) + core + _log_mass((lo - shift) / z, (hi - shift) / z)
    m1 = math.log(q) - t + core + _log_mass((lo + 1.0 - shift) / z, (hi + 1.0 - shift) / z)
    return np.logaddexp(m0, m1)


def _log_ratio(x: np.ndarray, q: float, z: float) -> np.ndarray:
    """log r(x) = log (dP/dQ)(x) for x >= 0, as log1p(2 q a sinh(x / z^2) / ((1 - q) + q a e^{-x/z^2})),
    a = e^{-1/(2 z^2)} (accurate near x = 0)."""
    y = x / (z * z)
    with np.errstate(divide="ignore"):
        log_sinh = np.where(y < 20.0, np.log(np.sinh(np.minimum(y, 20.0))), y - math.log(2.0))
    log_qa = math.log(q) - 0.5 / (z * z)
    log_den = np.logaddexp(math.log1p(-q), log_qa - y)
    return np.logaddexp(0.0, math.log(2.0) + log_qa + log_sinh - log_den)


def _log_r_excess(ell: np.ndarray, alpha: float) -> np.ndarray:
    """log R(e^ell) = log(e^{alpha ell} - 1 - alpha (e^ell - 1)); where alpha ell > 30, alpha ell
    itself (R < r^alpha for r > 1)."""
    a_ell = alpha * ell
    out = np.empty_like(ell)
    small = np.abs(a_ell) < 0.1
    big = a_ell > 30.0
    mid = ~(small | big)
    e = ell[small]
    # series sum_{k >= 2} (alpha^k - alpha) ell^k / k!: by k = 16 the terms are below 1e-16 of the first
    term = e * e / 2.0
    series = (alpha * alpha - alpha) * term
    for k in range(3, 17):
        term = term * e / k
        series = series + (alpha ** k - alpha) * term
    with np.errstate(divide="ignore"):
        out[small] = np.log(series)
        out[mid] = np.log(np.expm1(a_ell[mid]) - alpha * np.expm1(ell[mid]))
    out[big] = a_ell[big]
    return out


def _grid(z: float, top: float) -> np.ndarray:
    bulk = np.linspace(0.0, _BULK_STD * z, int(_BULK_CELLS * _BULK_STD) + 1)
    if top <= bulk[-1]:
        return bulk
    n = int(math.ceil(math.log(top / bulk[-1]) / math.log(_RATIO)))
    return np.concatenate([bulk, bulk[-1] * _RATIO ** np.arange(1, n + 1)])


@functools.lru_cache(maxsize=256)
def _log_a_nodes(q: float, z: float) -> np.ndarray:
    """Upper bounds on log A_alpha at :data:`NODES` (module docstring)."""
    alphas = np.asarray(NODES)
    top = float(alphas.max())
    length = max(0.5, top + z * math.sqrt(2.0 * top * max(1.0, -math.log(q)) + 200.0) + 1.0)
    x = _grid(z, length)
    lo, hi = x[:-1], x[1:]
    ell_hi = _log_ratio(hi, q, z)
    log_right = _log_q_mass(lo, hi, q, z)
    log_left = _log_q_mass(-hi, -lo, q, z)
    # slope bound of log r on each right cell: (w_+(lo) + w_-(hi)) / z^2
    log_qa, log_1q = math.log(q) - 0.5 / (z * z), math.log1p(-q)
    w_plus = np.exp(log_qa + lo / (z * z) - np.logaddexp(log_1q, log_qa + lo / (z * z)))
    w_minus = np.exp(log_qa - hi / (z * z) - np.logaddexp(log_1q, log_qa - hi / (z * z)))
    slope = (w_plus + w_minus) / (z * z)
    log_q_below = float(_log_q_mass(np.array([-np.inf]), np.array([-length]), q, z)[0])
    out = []
    for alpha in alphas:
        right = log_right + _log_r_excess(ell_hi, alpha)
        steep = alpha * ell_hi > 1.0  # where R is close to r^alpha, the tilted bound is the tighter
        t = alpha * slope[steep]
        tilted = alpha * ell_hi[steep] - t * hi[steep] + _log_q_mass(lo[steep], hi[steep], q, z, t)
        right[steep] = np.minimum(right[steep], tilted)
        left = log_left + _log_r_excess(-ell_hi, alpha)
        tail_right = ((1.0 - alpha) * log_1q + alpha * (alpha - 1.0) / (2.0 * z * z)
                      + float(log_ndtr(-(length - alpha) / z)))
        tail_left = log_q_below + math.log(alpha - 1.0)
        log_sum = float(logsumexp_rows(np.concatenate([right, left, [tail_right, tail_left]])[None, :])[0])
        log_a = math.log1p(math.exp(log_sum) * (1.0 + _REL_SLACK)) if log_sum < 700 else log_sum + _REL_SLACK
        out.append(log_a + _LOG_A_SLACK)
    return np.asarray(out)


def poisson_replace_one_gaussian_rdp(q: float, noise_multiplier: float, orders: np.ndarray) -> np.ndarray:
    """RDP of the Poisson-subsampled Gaussian under replace-one (module docstring), noise multiplier
    sigma / C, sampling probability q in (0, 1); ``inf`` where the bound is not finite."""
    alphas = np.asarray(orders, dtype=float)
    nodes = np.concatenate([[1.0], NODES])
    log_a = np.concatenate([[0.0], _log_a_nodes(float(q), float(noise_multiplier))])
    j = np.clip(np.searchsorted(nodes, alphas), 1, len(nodes) - 1)  # nodes[j - 1] < alpha <= nodes[j]
    t = (alphas - nodes[j - 1]) / (nodes[j] - nodes[j - 1])
    with np.errstate(invalid="ignore"):
        chord = (1.0 - t) * log_a[j - 1] + t * log_a[j]
    out = np.where(alphas <= nodes[-1], chord / (alphas - 1.0), np.inf)
    return np.where(np.isfinite(out), out, np.inf)
