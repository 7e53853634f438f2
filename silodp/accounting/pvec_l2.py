"""The l2-aware certificate of P_vec: Renyi moments of the binomial counts under an l2-bounded shift
of one message (paper Alg 4-5, Thm D.2; the l2 analysis of the distributed discrete Gaussian and
Skellam mechanisms: Kairouz, Liu & Steinke 2021; Agarwal, Kairouz & Liu 2021).

:mod:`silodp.accounting.pvec` charges every coordinate the worst shift g: d' g^2 in all, about
2 ln(2 d' / beta) times a Gaussian of the messages' l2 sensitivity. Here the shift *vector* is
charged. One record moves one message (k, drawn with replacement) from level vector c to c' with

* |c_j - c'_j| <= g (levels lie in [0, g]) and
* ||c - c'||_2 <= Lambda = g L / gamma: rotation (orthogonal) and clamping (coordinatewise,
  non-expansive) keep ||y - y'||_2 <= 2 L, and the scaling maps the range 2 gamma to g levels
  (gamma = L without rotation: Lambda = g). Replace-one neighbours (the offsets cancel).

**Rounding** (joint convexity). Randomized rounding r = floor(c + U) has the marginals of
Alg 5's rounding; coupling both neighbours' roundings through the same U gives, per coordinate,
r - r' in {floor(t), ceil(t)} (t = |c_j - c'_j|) with mean t, independently over coordinates and
over a record's k copies (identical messages, independent rounding): a shift k floor(t) +
Bin(k, frac t). The other messages' levels add the same independent term on both sides
(post-processing). (p, q) -> p^a q^(1-a) is jointly convex, so the moment of the mixtures is at
most the mixture of the moments T(s) = sum_x P_s(x)^a Q(x)^(1-a) of the pure shifts.

**Truncation.** Q = Bin(m, 1/2) whole; P's noise is restricted to the symmetric window W
(+-:data:`WINDOW_SDS` sd), its outside mass charged to delta. Then H_e^eps(P || Q) <= H(P_W || Q) +
P(N not in W), and P_W has support inside Q's when hi + k g <= m. With p = 1/2, T(-s) = T(s)
(reflection), and the reverse direction has the same moments. Per shift s,
T(s) = sum_{y in W} B(y)^a B(y + s)^(1 - a), exact log-pmfs (:func:`pvec_protocol.log_pmf_window`).

**The worst shift vector.** Per coordinate the log-moment is at most h(t) = log((1 - phi)
V_j + phi V_{j+1}) for t = j + phi, V_j = Tbar(k j) (Tbar the running maximum of T, so h is
non-decreasing; for k >= 2 the Bernstein mixture of the convex sequence Tbar is below its chord,
convexity checked at run time, else no certificate). As a function of u = t^2, h is concave on
each [j^2, (j+1)^2]; its concave envelope F is bounded by min_B [sup_u (h(u) - B u) + B u0]
(every B >= 0 gives an upper bound; the sup is attained in closed form on each arc). By Jensen,
sum_j h(t_j) <= d' F(Lambda^2 / d') for every feasible shift vector.

**Composition and conversion.** Moments multiply over the adaptive invocations (each bound holds
for every history); a with-replacement multiplicity k ~ Bin(K, 1/n) is a labelled mixture of
moments, k beyond the (1 - tail) quantile charged to delta. With log-moment M(a) of the whole
transcript and the charged mass c, eps(a) = (M - a ln a + (a - 1) ln(a - 1) - ln(delta - c)) /
(a - 1) (the pointwise bound (z - e^eps)_+ <= z^a sup_z (z - e^eps) / z^a, Canonne, Kamath &
Steinke 2020 Prop 12, valid for the sub-probability P_W), minimized over :data:`ORDERS`.
"""

from __future__ import annotations

import functools
import math
from typing import NamedTuple
import numpy as np
from scipy.special import logsumexp

from silodp.accounting import _binomial, pvec_protocol
from silodp.accounting import pld as pld_lib

#: Renyi orders the certificate tries (more orders only tighten the minimum).
ORDERS = (1.1, 1.25, 1.5, 1.75, 2.0, 2.5, 3.0, 3.5, 4.0, 5.0, 6.0, 7.0, 8.0, 10.0, 12.0, 14.0,
          16.0, 20.0, 24.0, 32.0, 48.0, 64.0, 96.0, 128.0, 256.0, 512.0, 1024.0, 2048.0, 4096.0)
#: The first pass's orders; the second adds the orders of :data:`ORDERS` around the best of them.
COARSE = (1.25, 2.0, 3.0, 5.0, 8.0, 14.0, 32.0, 128.0, 512.0, 4096.0)
#: The coarse orders the first pass starts from (indices into :data:`COARSE`: 3, 5, 8); it then
#: walks toward the smaller epsilon until an order certifies more than the best (module
#: :func:`certificate`), skipping the orders far from the best (the high ones are the costliest).
START = (2, 3, 4)
#: Standard deviations of the noise window W (its outside mass, 2 exp(-WINDOW_SDS^2 / 2) per
#: coordinate, about 4e-22, is charged to delta).
WINDOW_SDS = 10.0
#: Relative slack on the log-moments for floating-point round-off (pessimistic).
SLACK = 1e-9
#: Largest orders x shifts x window points summed per noise size (about a second of matrix
#: products); more trials are certified at :func:`trials_cap` (sound: post-processing).
MAX_WORK = 2e9
#: log of the smallest scaled chunk sum :func:`log_correlations` accepts.
ACCEPT = -600.0
#: Fewest shifts per matrix product in :func:`log_correlations` (fewer: sums in log space).
MIN_CHUNK = 8
#: Most shifts per matrix product in :func:`log_correlations`.
CHUNK = 64


def shift_l2(g: int, dimension: int, rotate: bool) -> float:
    """Lambda, the l2 bound on one message's level shift: g L / gamma with the rotation (gamma =
    :func:`pvec_protocol.rotated_bound`), g without (module docstring)."""
    return g / pvec_protocol.rotated_bound(1.0, dimension) if rotate else float(g)


@functools.lru_cache(maxsize=256)
def shift_moments(trials: int, shifts: int, orders: tuple[float, ...] = ORDERS) -> tuple[np.ndarray, float]:
    """(log T_a(s) for a in ``orders`` and s = 0..``shifts``, an [orders, shifts + 1] array; the
    noise mass outside the window); +inf where P_W leaves Q's support, and everywhere beyond
    :data:`MAX_WORK`."""
    if trials > trials_cap(shifts, len(orders)):  # too costly: no l2 certificate
        return np.full((len(orders), shifts + 1), np.inf), 1.0
    lo, c, outside = pvec_protocol.log_pmf_window(trials, WINDOW_SDS, shifts)
    n = trials - 2 * lo + 1  # window points
    inside = min(shifts, len(c) - n) + 1
    out = np.full((len(orders), shifts + 1), np.inf)
    for i, a in enumerate(orders):
        out[i, :inside] = log_correlations(c, n, inside, a)
    return out, outside


def log_correlations(c: np.ndarray, n: int, shifts: int, a: float) -> np.ndarray:
    """log sum_{y < n} exp(a c[y] + (1 - a) c[y + s]) for s = 0..``shifts`` - 1, an upper bound
    including floating-point round-off (``c``: finite, at least n + shifts - 1 values).

    A chunk of L shifts s0 + r is one matrix product: with y = j L + i, the sum is
    sum_i G[i, i + r], G = U^T V, U[j, i] = exp(a c[jL + i] - x_j), V[j, t] = exp((1 - a)
    c[jL + s0 + t] - w_j). Each row j is scaled by its own maxima and by top, the chunk's bound
    on every product (x_j + w_j = top), so every factor is at most 1 and no sum overflows. A
    product below 2^-1022 may be lost or subnormal (absolute error at most that, per product): a
    chunk is accepted when each of its sums is at least e^:data:`ACCEPT` (the loss is then below
    n e^-108 relative), else it is split in two (a single shift always passes: top is then its
    largest term). L starts where a row's bound overshoots its products by about 150 at most;
    where that is below :data:`MIN_CHUNK` shifts (steep exponents: small noise, large orders),
    the sums are taken term by term in log space (n exponentials per shift, as cheap there).
    Round-off (allowed for, upward): each exponent carries at most 8 (|a| + 1) max|c| units of
    2^-53, each sum of N positive terms at most N more (J + L for the products, log2 n + 16 for
    numpy's pairwise sums)."""
    m = n + shifts - 1
    lu_all, lv_all = a * c[:n], (1.0 - a) * c[:m]
    allowance = 2.0 ** -52 * (4.0 * (abs(a) + 1.0) * float(np.max(np.abs(c[:m]))) + 16.0)
    steep = (2.0 * abs(a) + 1.0) * float(np.max(np.abs(np.diff(c[:m])), initial=0.0))
    L0 = int(min(shifts, CHUNK, max(1.0, 150.0 / max(steep, 1e-300))))
    out = np.empty(shifts)
    if L0 < min(MIN_CHUNK, shifts):
        terms = np.lib.stride_tricks.sliding_window_view(lv_all, n)[:shifts] + lu_all
        top = terms.max(axis=1, keepdims=True)
        terms -= top
        np.exp(terms, out=terms)
        return np.log(terms.sum(axis=1)) + top[:, 0] + allowance + 2.0 ** -52 * n.bit_length()
    chunks = [(s0, min(L0, shifts - s0)) for s0 in range(0, shifts, L0)]
    while chunks:
        s0, L = chunks.pop()
        J = -(-n // L)
        flat = np.full(J * L, -np.inf)
        flat[:n] = lu_all
        lu = flat.reshape(J, L)
        lv = np.full(max((J + 1) * L + s0, m), -np.inf)
        lv[:m] = lv_all
        lv = np.lib.stride_tricks.sliding_window_view(lv[s0:], 2 * L - 1)[::L][:J]  # row j: z = jL + s0 + t
        mu, mv = lu.max(axis=1), lv.max(axis=1)
        live = np.isfinite(mu) & np.isfinite(mv)
        top = float(np.max((mu + mv)[live]))
        half = np.where(live, (mu + mv - top) / 2.0, -np.inf)  # <= 0
        u = np.exp(lu - np.where(live, mu - half, np.inf)[:, None])
        v = np.exp(lv - np.where(live, mv - half, np.inf)[:, None])
        g = _gram(u, v)
        sums = np.array([np.trace(g, offset=r) for r in range(L)])
        if L == 1 or np.all(sums >= math.exp(ACCEPT)):
            out[s0:s0 + L] = np.log(sums) + top + 2.0 ** -52 * (J + L) + n * math.exp(-100.0)
        else:
            chunks += [(s0, L // 2), (s0 + L // 2, L - L // 2)]
    return out + allowance


def _gram(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """u^T v as a sum of small products, each below OpenBLAS's threading thresholds (about 2.6e5
    multiply-adds for a matrix product, 1e4 for a dot product: a one-shift chunk is a dot product
    of the whole window), as threads contending for a loaded machine's cores, spinning after the
    call, cost more than the product."""
    k = max(1, min(len(u), 8192, 200_000 // (u.shape[1] * v.shape[1])))
    rows = -(-len(u) // k) * k
    if rows != len(u):
        u = np.concatenate([u, np.zeros((rows - len(u), u.shape[1]))])
        v = np.concatenate([v, np.zeros((rows - len(v), v.shape[1]))])
    return np.matmul(u.reshape(-1, k, u.shape[1]).transpose(0, 2, 1), v.reshape(-1, k, v.shape[1])).sum(axis=0)


def trials_cap(shifts: int, orders: int) -> int:
    """The most noise trials whose moments fit in :data:`MAX_WORK`. A group with more is certified
    at this many: the rest of its noise is an independent binomial added on top (Bin(m + m', 1/2)
    = Bin(m, 1/2) + Bin(m', 1/2)), post-processing, so the certificate stays sound and monotone."""
    return max(1, math.floor((MAX_WORK / (orders * (shifts + 1) * 2 * WINDOW_SDS * 0.5)) ** 2))


def _envelopes(log_v: np.ndarray, u0: float) -> np.ndarray:
    """Per row of ``log_v`` (log V_0..V_G, non-decreasing), an upper bound on the concave envelope
    at ``u0`` of h(u) = log((1 - phi) V_j + phi V_{j+1}), phi = sqrt(u) - j on [j^2, (j+1)^2]:
    min over B >= 0 of sup_u (h(u) - B u) + B u0 (every B bounds; golden section per row, the
    objective being convex in B)."""
    out = np.full(len(log_v), np.inf)
    ok = np.all(np.isfinite(log_v), axis=1)
    with np.errstate(over="ignore", invalid="ignore"):
        rho = np.expm1(np.diff(log_v, axis=1))  # V_{j+1} / V_j - 1 >= 0
    ok &= np.all(np.isfinite(rho), axis=1)
    if not ok.any():
        return out
    lv, rho = log_v[ok], rho[ok]
    j = np.arange(lv.shape[1] - 1, dtype=float)[None, :]

    inv = 1.0 / np.maximum(rho, 1e-300)

    def objective(log_b: np.ndarray) -> np.ndarray:  # per row; the sup per arc at phi in {0, 1, stationary}
        B = np.exp(log_b)[:, None]
        # h'(u) = B: 2 B (j + phi)(1 + phi rho) = rho, divided by rho (no overflow for large rho)
        a, b, c = 2 * B, 2 * B * (inv + j), 2 * B * j * inv - 1.0
        with np.errstate(over="ignore", invalid="ignore"):
            disc = np.sqrt(np.maximum(b * b - 4 * a * c, 0.0))
            root = np.where(c < 0, -2 * c / np.where(c < 0, b + disc, 1.0), 0.0)
        root = np.clip(np.nan_to_num(root, nan=0.0), 0.0, 1.0)  # any phi in [0, 1] is a valid candidate
        best = np.full(len(lv), -np.inf)
        for phi in (0.0, 1.0, root):
            best = np.maximum(best, np.max(lv[:, :-1] + np.log1p(phi * rho) - B * (j + phi) ** 2, axis=1))
        return best + B[:, 0] * u0

    slope = np.log(np.maximum(lv[:, -1] - lv[:, 0], 1e-300) / (lv.shape[1] - 1) ** 2)  # the mean slope
    lo, hi = slope - 30.0, slope + 10.0
    r = (math.sqrt(5) - 1) / 2
    x1, x2 = hi - r * (hi - lo), lo + r * (hi - lo)
    f1, f2 = objective(x1), objective(x2)
    best = np.minimum(lv[:, -1], np.minimum(f1, f2))  # lv[:, -1]: B = 0
    for _ in range(80):
        left = f1 <= f2  # the minimum lies in [lo, x2]
        hi, lo = np.where(left, x2, hi), np.where(left, lo, x1)
        x1, x2, f1, f2 = (np.where(left, hi - r * (hi - lo), x2), np.where(left, x1, lo + r * (hi - lo)),
                          np.where(left, np.nan, f2), np.where(left, f1, np.nan))
        new = objective(np.where(left, x1, x2))
        f1, f2 = np.where(left, new, f1), np.where(left, f2, new)
        best = np.minimum(best, new)
    out[ok] = np.where(np.isnan(best), np.inf, best)
    return out


def invocation_moments(g: int, trials: int, dimension: int, l2: float | None, multiplicity: int,
                       shifts: int | None = None, orders: tuple[float, ...] = ORDERS) -> np.ndarray:
    """log E_Q[(P_W / Q)^a] of one invocation (``dimension`` coordinates, Bin(``trials``, 1/2)
    each) when one record moves ``multiplicity`` identical messages with level shifts of l2 norm
    <= ``l2`` and at most g per coordinate, for a in ``orders`` (module docstring).
    ``shifts``: compute the shift moments that far (>= multiplicity g; shares the cache)."""
    return _multiplicity_moments(g, trials, dimension, l2, (multiplicity,), shifts or multiplicity * g, orders)[0]


def _multiplicity_moments(g: int, trials: int, dimension: int, l2: float | None, multiplicities: tuple[int, ...],
                          shifts: int, orders: tuple[float, ...]) -> np.ndarray:
    """:func:`invocation_moments` for each of ``multiplicities`` (rows), one envelope pass for all."""
    logT, _ = shift_moments(trials, shifts, orders)
    rows = []
    for k in multiplicities:
        bar = np.maximum.accumulate(logT[:, :k * g + 1], axis=1)
        if k > 1:  # the chord bound needs Tbar convex on 0..k g: rows that are not get no bound
            finite = np.all(np.isfinite(bar), axis=1)
            v = np.exp(bar[finite] - bar[finite, -1:])
            bad = np.flatnonzero(finite)[np.any(np.diff(v, 2, axis=1) < -1e-12 * v[:, 2:], axis=1)]
            bar[bad] = np.inf
        rows.append(bar[:, ::k])
    u0 = float(g * g) if l2 is None else min(l2 * l2 / dimension, float(g * g))  # None: only g per coordinate
    out = dimension * _envelopes(np.concatenate(rows), u0).reshape(len(multiplicities), len(orders))
    return out + SLACK * np.abs(out)


def group_moments(group: pvec_protocol.PvecGroup, tail: float, orders: tuple[float, ...] = ORDERS,
                  cap_orders: int | None = None) -> tuple[np.ndarray, float, bool]:
    """(log-moments of the group's ``uses`` invocations at ``orders``, the mass charged to delta,
    whether its noise was capped at :func:`trials_cap` of ``cap_orders`` orders, default
    ``len(orders)``)."""
    K, q = group.batch_size, 1.0 / group.dataset_size
    kmax = max(1, min(K, _binomial.isf(tail, K, q))) if group.with_replacement else 1
    cap = trials_cap(kmax * group.g, cap_orders or len(orders))
    m = min(group.messages * group.b, cap)
    _, outside = shift_moments(m, kmax * group.g, orders)
    charged = group.dimension * outside
    if not group.with_replacement:
        step = invocation_moments(group.g, m, group.dimension, group.l2, 1, None, orders)
    else:
        ks = tuple(range(1, kmax + 1))
        moments = _multiplicity_moments(group.g, m, group.dimension, group.l2, ks,
                                        kmax * group.g, orders)
        terms = [np.full(len(orders), math.log(float(_binomial.pmf(0, K, q))))]
        terms += [math.log(float(_binomial.pmf(k, K, q))) + row for k, row in zip(ks, moments)]
        step = logsumexp(np.array(terms), axis=0)
        charged += _binomial.sf(kmax, K, q)
    return group.uses * step, group.uses * charged, group.messages * group.b > cap


def _epsilons(groups: tuple[pvec_protocol.PvecGroup, ...], delta: float, orders: tuple[float, ...],
              cap_orders: int | None = None) -> tuple[np.ndarray, bool]:
    """(the converted epsilon at each order, module docstring, +inf where the charged mass
    reaches delta; whether a group's noise was capped; ``cap_orders``: :func:`group_moments`)."""
    uses = sum(g.uses for g in groups if g.with_replacement)
    tail = max(math.exp(pld_lib.LOG_TAIL_MASS), 1e-3 * delta / uses) if uses else 0.0
    total, charged, capped = np.zeros(len(orders)), 0.0, False
    for grp in groups:
        if grp.uses:
            m, c, cap = group_moments(grp, tail, orders, cap_orders)
            total, charged, capped = total + m, charged + c, capped or cap
    if charged >= delta:
        return np.full(len(orders), np.inf), capped
    return _convert(total, orders, delta - charged), capped


def _convert(moments: np.ndarray, orders: tuple[float, ...], delta: float) -> np.ndarray:
    """epsilon(a) = (M(a) - a ln a + (a - 1) ln(a - 1) - ln delta) / (a - 1) per order (module
    docstring); nan fails closed to +inf."""
    a = np.array(orders)
    eps = (moments - a * np.log(a) + (a - 1) * np.log(a - 1) - math.log(delta)) / (a - 1)
    return np.where(np.isnan(eps), np.inf, eps)


class Certificate(NamedTuple):
    """``epsilon``: certified at the delta asked; ``capped``: some group was certified at
    :func:`trials_cap` trials only; ``floor``: what the conversion alone costs (zero moments), the
    smallest epsilon this certificate can give at that delta."""

    epsilon: float
    capped: bool
    floor: float


@functools.lru_cache(maxsize=512)
def certificate(groups: tuple[pvec_protocol.PvecGroup, ...], delta: float) -> Certificate:
    """The l2-aware certificate of the whole transcript at ``delta`` (epsilon +inf when a group
    has no l2 bound or the charged mass reaches ``delta``): the minimum over :data:`COARSE` orders
    (from :data:`START`, then one or two more orders at a time on the side of the best until the
    best has an evaluated neighbour above it on each side: epsilon(a) falls then rises; all of
    them where none is finite), then over the :data:`ORDERS` between the best one's neighbours.
    Every order bounds, so the minimum over any of them is a certificate; each group is capped
    as if all :data:`COARSE` were summed."""
    floor = max(0.0, float(np.min(_convert(np.zeros(len(ORDERS)), ORDERS, delta))))
    if not groups or any(g.l2 is None for g in groups):
        return Certificate(math.inf, False, floor)
    coarse, capped = np.full(len(COARSE), np.nan), False
    todo = list(START)
    while todo:
        more, cap = _epsilons(groups, delta, tuple(COARSE[i] for i in todo), len(COARSE))
        coarse[todo], capped = more, capped or cap
        done = np.flatnonzero(~np.isnan(coarse))
        if not np.isfinite(coarse[done]).any():
            todo = [i for i in range(len(COARSE)) if np.isnan(coarse[i])]
            continue
        best = int(done[np.argmin(coarse[done])])
        todo = ([best - 1] if best == done[0] and best > 0 else
                list(range(best + 1, min(best + 3, len(COARSE)))) if best == done[-1] else [])
    coarse = np.where(np.isnan(coarse), np.inf, coarse)
    best = int(np.argmin(coarse))
    lo, hi = COARSE[max(best - 1, 0)], COARSE[min(best + 1, len(COARSE) - 1)]
    fine = tuple(a for a in ORDERS if lo < a < hi and a not in COARSE)
    eps = float(np.min(coarse))
    if fine:
        more, cap = _epsilons(groups, delta, fine)
        eps, capped = min(eps, float(np.min(more))), capped or cap
    return Certificate(max(0.0, eps), capped, floor)


def transcript_epsilon(groups: tuple[pvec_protocol.PvecGroup, ...], delta: float) -> float:
    """The certified epsilon of :func:`certificate`."""
    return certificate(groups, delta).epsilon
