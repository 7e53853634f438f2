"""The binomial distribution Bin(n, p) on scipy.special (importing scipy.stats takes about half a
second, which the accounting CLI cannot afford). Same semantics as ``scipy.stats.binom``."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import bdtr, bdtrc, gammaln, xlog1py, xlogy


def logpmf(k: ArrayLike, n: int, p: float) -> np.ndarray:
    """log P[X = k] (``-inf`` outside 0..n)."""
    k = np.asarray(k, dtype=float)
    inside = (k >= 0) & (k <= n)
    kk = np.clip(k, 0, n)
    out = gammaln(n + 1.0) - gammaln(kk + 1.0) - gammaln(n - kk + 1.0) + xlogy(kk, p) + xlog1py(n - kk, -p)
    return np.where(inside, out, -np.inf)


def pmf(k: ArrayLike, n: int, p: float) -> np.ndarray:
    return np.exp(logpmf(k, n, p))


def cdf(k: int, n: int, p: float) -> float:
    """P[X <= k]."""
    return 0.0 if k < 0 else 1.0 if k >= n else float(bdtr(k, n, p))


def sf(k: int, n: int, p: float) -> float:
    """P[X > k]."""
    return 1.0 if k < 0 else 0.0 if k >= n else float(bdtrc(k, n, p))


def _smallest(pred: Callable[[int], bool], n: int) -> int:
    """Smallest k in 0..n with ``pred(k)`` true (``pred`` monotone, true at n)."""
    lo, hi = -1, n
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pred(mid):
            hi = mid
        else:
            lo = mid
    return hi


def ppf(prob: float, n: int, p: float) -> int:
    """Smallest k with P[X <= k] >= prob."""
    return _smallest(lambda k: cdf(k, n, p) >= prob, n)


def isf(prob: float, n: int, p: float) -> int:
    """Smallest k with P[X > k] <= prob."""
    return _smallest(lambda k: sf(k, n, p) <= prob, n)
