"""The binomial shuffle protocol for vector summation (Cheu et al. 2021; paper Alg 4-5, Thm D.2).

Each of ``num_messages`` messages is a vector with l2 norm <= L. Coordinate j is shifted to
w = x_j + L in [0, 2L], scaled to [0, g], randomly rounded to an integer, and a Binomial(b, p)
count is added; the analyzer sums all messages of coordinate j and debiases.

Privacy (replace-one message). Coordinate j's view is an integer count plus Binomial(m, p) noise,
m = num_messages * b, and replacing one message moves that count by at most g + 1 (the range 2L
maps to g, plus one for rounding). silodp certifies each coordinate *exactly* -- the hockey-stick
divergence between Bin(m, p) and Bin(m, p) shifted by g + 1, summed over the support -- and
composes the d coordinates with the optimal composition theorem (Kairouz-Oh-Viswanath 2015). This
treats every coordinate as worst case, which is sound whatever the vectors; it does not exploit
the l2 bound across coordinates (see docs/paper-notes.md: Alg 5 as printed has no random
rotation, so its variance is not O(d L^2 log^2(d/delta)/eps^2) as Thm D.2 states).

This per-coordinate + KOV certificate is what silodp used before issue 13; the SDP algorithms
are now calibrated by the exact discrete PLD of :mod:`silodp.accounting.pvec` (composed over
coordinates and invocations, with the l2-aware rotation), which needs far less noise. It is
kept for the single-invocation P_vec audit (:func:`silodp.verify.audit.audit_pvec`)
and as the baseline of ``benchmarks/bench_shuffle.py``.

Utility. The output is unbiased for sum x_i and, per coordinate,
Var = (2L/g)^2 (m p (1-p) + sum_i f_ij (1 - f_ij)), with f_ij the fractional part that is randomly
rounded (at most 1/4 each). :func:`binomial_protocol_variance` reports the worst case.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from silodp.accounting import composition
from silodp.accounting import _binomial
from silodp._validation import check_count, check_delta, check_positive, check_probability
from silodp.accounting._profiles import DiscreteProfile


@dataclasses.dataclass(frozen=True)
class BinomialProtocolParams:
    """(g, b, p) of P_1D, and the (epsilon, delta) certified for one P_vec invocation."""

    g: int
    b: int
    p: float
    epsilon: float = math.nan
    delta: float = math.nan


def shifted_binomial_epsilon(delta: float, trials: int, p: float, shift: int) -> float:
    """Exact epsilon(delta) between Bin(trials, p) + shift and Bin(trials, p), worst direction.

    Points beyond 40 standard deviations are charged to delta in full (mass below 1e-300).
    """
    m = check_count("trials", trials)
    pp = check_probability("p", p)
    k = check_count("shift", shift, minimum=0)
    if k == 0:
        return 0.0
    sd = math.sqrt(m * pp * (1 - pp))
    x = np.arange(max(0, int(m * pp - 40 * sd) - k), min(m + k, int(m * pp + 40 * sd) + k) + 1)
    lq = _binomial.logpmf(x, m, pp)
    lp = _binomial.logpmf(x - k, m, pp)
    outside = max(0.0, 1.0 - float(np.exp(lp).sum()), 1.0 - float(np.exp(lq).sum()))
    return max(DiscreteProfile(lp, lq, outside).epsilon(delta), DiscreteProfile(lq, lp, outside).epsilon(delta))


def binomial_protocol_epsilon(params: BinomialProtocolParams, delta: float, dimension: int,
                              num_messages: int) -> float:
    """Certified epsilon of one P_vec invocation at ``delta`` (per-coordinate exact + KOV over d)."""
    dl = check_delta("delta", delta)
    d = check_count("dimension", dimension)
    n = check_count("num_messages", num_messages)
    m, shift = n * params.b, params.g + 1
    best = math.inf
    for frac in (0.2, 0.5, 0.8):
        per_delta = frac * dl / d
        per_eps = shifted_binomial_epsilon(per_delta, m, params.p, shift)
        if math.isfinite(per_eps):
            best = min(best, composition.kov(per_eps, per_delta, d, dl))
    return best


def binomial_protocol_params(epsilon: float, delta: float, bound: float, dimension: int,
                             num_messages: int, p: float = 0.25) -> BinomialProtocolParams:
    """Choose (g, b, p) so that one P_vec invocation is (epsilon, delta)-DP (certified), b minimal.

    g = max(ceil(sqrt(num_messages)), 4) keeps the rounding variance at most that of one message
    range per coordinate; b is the smallest integer whose certified epsilon is <= ``epsilon``.
    """
    eps = check_positive("epsilon", epsilon)
    dl = check_delta("delta", delta)
    check_positive("bound", bound)
    d = check_count("dimension", dimension)
    n = check_count("num_messages", num_messages)
    pp = check_probability("p", p)
    if pp >= 0.5:
        raise ValueError(f"p: must lie in (0, 1/2), got {pp}")
    g = max(math.ceil(math.sqrt(n)), 4)

    def ok(b: int) -> bool:
        return binomial_protocol_epsilon(BinomialProtocolParams(g, b, pp), dl, d, n) <= eps

    hi = 1
    while not ok(hi):
        hi *= 2
        if hi > 2 ** 40:
            raise ValueError(f"epsilon={eps:g} is unreachable for the binomial protocol at delta={dl:g}")
    lo = hi // 2
    while hi - lo > max(1, hi // 200):  # within 0.5% of the smallest feasible b
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if ok(mid) else (mid, hi)
    certified = binomial_protocol_epsilon(BinomialProtocolParams(g, hi, pp), dl, d, n)
    return BinomialProtocolParams(g, hi, pp, certified, dl)


def binomial_protocol_variance(params: BinomialProtocolParams, bound: float, dimension: int,
                               num_messages: int) -> float:
    """Worst-case E||P_vec(X) - sum_i x_i||^2 = d (2L/g)^2 (n b p (1-p) + n/4)."""
    L = check_positive("bound", bound)
    d = check_count("dimension", dimension)
    n = check_count("num_messages", num_messages)
    scale = (2.0 * L / params.g) ** 2
    return d * scale * (n * params.b * params.p * (1 - params.p) + n / 4.0)
