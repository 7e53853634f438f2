"""Amplification by shuffling: n parties each apply an eps0-LDP randomizer, a shuffler permutes.

* ``erlingsson2019``: Erlingsson, Feldman, Mironov, Raghunathan, Talwar & Thakurta (SODA 2019),
  Corollary 9: for eps0 < 1/2, the shuffled output is (12 eps0 sqrt(ln(1/delta) / n), delta)-DP.
* ``fmt21_closed_form``: Feldman, McMillan & Talwar (FOCS 2021), Theorem 3.1: for
  eps0 <= ln(n / (16 ln(2/delta))), eps = ln(1 + (e^eps0 - 1)/(e^eps0 + 1) (8 sqrt(e^eps0 ln(4/delta)/n) + 8 e^eps0 / n)).
* ``fmt21_numerical``: FMT21 Theorem 3.2: the shuffled mechanism is as private as the pair
  P0 = (A + D, C - A + 1 - D), P1 = (A + 1 - D, C - A + D) with C ~ Bin(n - 1, e^-eps0),
  A ~ Bin(C, 1/2), D ~ Bern(e^eps0 / (e^eps0 + 1)). Given C = c (which the pair reveals), the
  likelihood ratio is explicit, so delta(eps) is an exact sum; the few tail values of C and A
  left out are charged in full to delta, so the result is a valid upper bound.
"""

from __future__ import annotations

import math

import numpy as np

from silodp.accounting import _binomial
from silodp._validation import check_count, check_delta, check_positive
from silodp.accounting._profiles import DiscreteProfile


def _check(eps0: float, n: int, delta: float) -> tuple[float, int, float]:
    return check_positive("eps0", eps0), check_count("n", n, minimum=2), check_delta("delta", delta)


def erlingsson2019(eps0: float, n: int, delta: float) -> float:
    """EFMRTT19 Cor 9 (requires eps0 < 1/2)."""
    e0, n, dl = _check(eps0, n, delta)
    if e0 >= 0.5:
        raise ValueError(f"eps0: must be < 1/2 for the Erlingsson et al. 2019 bound, got {e0}")
    return 12.0 * e0 * math.sqrt(math.log(1.0 / dl) / n)


def fmt21_closed_form(eps0: float, n: int, delta: float) -> float:
    """FMT21 Thm 3.1 closed form (requires eps0 <= ln(n / (16 ln(2/delta))))."""
    e0, n, dl = _check(eps0, n, delta)
    limit = math.log(n / (16.0 * math.log(2.0 / dl)))
    if e0 > limit:
        raise ValueError(f"eps0: must be <= ln(n/(16 ln(2/delta))) = {limit:.4g} for the FMT21 closed form, got {e0}")
    ee = math.exp(e0)
    inner = 8.0 * math.sqrt(ee * math.log(4.0 / dl) / n) + 8.0 * ee / n
    return math.log1p((ee - 1.0) / (ee + 1.0) * inner)


def _fmt21_pair(eps0: float, n: int, tail: float = 1e-14, width: float = 9.0) -> DiscreteProfile:
    q = math.exp(-eps0)
    p = math.exp(eps0) / (math.exp(eps0) + 1.0)
    c_lo, c_hi = int(_binomial.ppf(tail, n - 1, q)), int(_binomial.isf(tail, n - 1, q))
    cs = np.arange(max(c_lo, 0), c_hi + 1)
    left_out = float(_binomial.cdf(c_lo - 1, n - 1, q) + _binomial.sf(c_hi, n - 1, q))
    log_pc = _binomial.logpmf(cs, n - 1, q)
    l0s, l1s = [], []
    for c, lpc in zip(cs.tolist(), log_pc):  # c: a Python int
        half = width * math.sqrt(c + 1) / 2.0 + 2
        xs = np.arange(max(0, int(c / 2 - half)), min(c + 1, int(c / 2 + half)) + 1)
        # P0(x) = p b(x-1) + (1-p) b(x), P1(x) = (1-p) b(x-1) + p b(x), b = Bin(c, 1/2)
        lb = _binomial.logpmf(xs, c, 0.5)
        lbm = _binomial.logpmf(xs - 1, c, 0.5)
        l0 = np.logaddexp(math.log(p) + lbm, math.log1p(-p) + lb)
        l1 = np.logaddexp(math.log1p(-p) + lbm, math.log(p) + lb)
        kept = np.exp(l0).sum()
        left_out += math.exp(lpc) * max(0.0, 1.0 - kept)
        l0s.append(lpc + l0)
        l1s.append(lpc + l1)
    return DiscreteProfile(np.concatenate(l0s), np.concatenate(l1s), left_out)


def fmt21_numerical(eps0: float, n: int, delta: float) -> float:
    """Smallest eps (rounded up) with delta(eps) <= ``delta`` for the FMT21 Thm 3.2 pair."""
    e0, n, dl = _check(eps0, n, delta)
    pair = _fmt21_pair(e0, n)
    if pair.left_out >= dl:
        raise ValueError(f"delta={dl:g} is below the numerical method's tail bound {pair.left_out:.2g}")
    return min(e0, pair.epsilon(dl, hi=e0))  # shuffling never hurts: eps0 itself is valid


def shuffle_bounds(eps0: float, n: int, delta: float) -> dict[str, float | None]:
    """All three bounds; one that is not defined here is ``None``: a closed form whose condition on
    eps0 fails, or ``numerical`` when ``delta`` is below the mass its tails leave out. Invalid
    arguments raise ``ValueError``."""
    e0, n, dl = _check(eps0, n, delta)
    out: dict[str, float | None] = {}
    for key, fn in (("closed_form", fmt21_closed_form), ("numerical", fmt21_numerical),
                    ("erlingsson2019", erlingsson2019)):
        try:
            out[key] = fn(e0, n, dl)
        except ValueError:  # the theorem's condition does not hold at these arguments
            out[key] = None
    return out
