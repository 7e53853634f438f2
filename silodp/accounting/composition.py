"""Composition of (eps, delta)-DP mechanisms.

* ``dwork_roth``: advanced composition, Dwork & Roth (2014) Theorem 3.20 (paper Thm D.1): k
  adaptive (eps, delta) mechanisms are (sqrt(2k ln(1/delta')) eps + k eps (e^eps - 1), k delta + delta')-DP.
* ``kov``: the *optimal* homogeneous composition, Kairouz, Oh & Viswanath (2015) Theorem 3.3, in
  the exact form for an arbitrary total epsilon given by Murtagh & Vadhan (2016), Lemma 3.2 / eq (1):
  delta_total = 1 - (1 - delta)^k (1 - sum_{l} C(k, l) max(0, e^{(k-l) eps} - e^{eps_g} e^{l eps}) / (1 + e^eps)^k).
  No composition of k (eps, delta)-DP mechanisms can be certified better.
* ``heterogeneous_kov``: mechanisms with different (eps_i, delta_i), Kairouz-Oh-Viswanath (2015)
  Theorem 3.5 (minimum of basic composition and the heterogeneous advanced bound).

Forward functions give the total; ``*_per_step`` functions invert (the largest per-step epsilon,
rounded down, that keeps the total within budget). All computed in log space: k up to 1e6 is fine.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import gammaln, logsumexp

from silodp._validation import check_count, check_delta, check_nonnegative, check_positive
from silodp.accounting._numerics import monotone_root


def dwork_roth_epsilon(epsilons: ArrayLike, counts: ArrayLike, delta_slack: float) -> float:
    """eps' of Dwork-Roth Thm 3.20 (paper Thm D.1) for ``counts[i]`` steps at ``epsilons[i]``:
    sqrt(2 ln(1/delta') sum_i k_i eps_i^2) + sum_i k_i eps_i (e^eps_i - 1) (the heterogeneous form
    is Dwork, Rothblum & Vadhan 2010, Thm III.3); inf when e^eps overflows."""
    e = np.asarray(epsilons, dtype=float)
    c = np.asarray(counts, dtype=float)
    with np.errstate(over="ignore"):  # e^eps beyond float range: no certificate
        return float(math.sqrt(2.0 * np.sum(c * e * e) * math.log(1.0 / delta_slack)) + np.sum(c * e * np.expm1(e)))


def dwork_roth(epsilon: float, delta: float, steps: int, delta_slack: float) -> tuple[float, float]:
    """Total (eps', k delta + delta') of ``steps`` adaptive (epsilon, delta) mechanisms (Thm 3.20)."""
    eps = check_nonnegative("epsilon", epsilon)
    dl = check_nonnegative("delta", delta)
    k = check_count("steps", steps)
    ds = check_delta("delta_slack", delta_slack)
    return dwork_roth_epsilon([eps], [k], ds), k * dl + ds


def dwork_roth_per_step(
    epsilon: float, delta: float, steps: int, delta_slack: float | None = None
) -> tuple[float, float]:
    """Per-step (eps, delta) so that ``steps`` compositions stay within (epsilon, delta) by Thm 3.20.

    ``delta_slack`` (delta' of the theorem) defaults to half of ``delta``; the rest is split evenly.
    """
    eps = check_positive("epsilon", epsilon)
    dl = check_delta("delta", delta)
    k = check_count("steps", steps)
    ds = dl / 2.0 if delta_slack is None else check_delta("delta_slack", delta_slack)
    if ds >= dl:
        raise ValueError(f"delta_slack: must be < delta, got {ds} >= {dl}")
    per_delta = (dl - ds) / k
    per_eps = monotone_root(
        lambda e: dwork_roth(e, 0.0, k, ds)[0], eps, 1e-12, eps,
        increasing=True, safe="below", name="per-step epsilon",
    )
    return per_eps, per_delta


def _log_delta_rr(epsilon: float, steps: int, total_epsilon: np.ndarray | float) -> np.ndarray:
    """log of the hockey-stick divergence of k-fold randomized response (the optimal case)."""
    k, eps = steps, epsilon
    eg = np.atleast_1d(np.asarray(total_epsilon, dtype=float))
    if eps == 0.0:
        return np.full(eg.shape, -np.inf)
    l = np.arange(k + 1, dtype=float)
    log_binom = gammaln(k + 1.0) - gammaln(l + 1.0) - gammaln(k - l + 1.0)
    gap = (k - 2.0 * l) * eps  # log-ratio e^{(k-l)eps} / e^{l eps}
    norm = k * np.logaddexp(0.0, eps)
    out = np.empty(eg.shape)
    for i, g in enumerate(eg):
        mask = gap > g
        if not mask.any():
            out[i] = -np.inf
            continue
        terms = log_binom[mask] + (k - l[mask]) * eps + np.log(-np.expm1(g - gap[mask]))
        out[i] = logsumexp(terms) - norm
    return out


#: The exact optimal composition sums over every step count: O(steps) memory and time. Beyond this
#: many steps it is refused before allocating (Dwork-Roth's bound has no such cost).
KOV_MAX_STEPS = 10_000_000


def _kov_steps(steps: int) -> int:
    k = check_count("steps", steps)
    if k > KOV_MAX_STEPS:
        raise ValueError(f"steps: the exact optimal composition (KOV) allocates O(steps); at most {KOV_MAX_STEPS}, "
                         f"got {k} (use the 'dwork-roth' accountant)")
    return k


def kov_delta(epsilon: float, delta: float, steps: int, total_epsilon: float) -> float:
    """Exact optimal total delta of ``steps`` adaptive (epsilon, delta) mechanisms at ``total_epsilon``."""
    eps = check_nonnegative("epsilon", epsilon)
    dl = check_nonnegative("delta", delta)
    k = _kov_steps(steps)
    eg = check_nonnegative("total_epsilon", total_epsilon)
    d_rr = float(np.exp(_log_delta_rr(eps, k, eg)[0]))
    if d_rr >= 1.0 or dl >= 1.0:
        return 1.0
    return float(min(1.0, -math.expm1(k * math.log1p(-dl) + math.log1p(-d_rr))))


def kov(epsilon: float, delta: float, steps: int, total_delta: float) -> float:
    """Smallest total epsilon (rounded up) at ``total_delta`` for ``steps`` (epsilon, delta) mechanisms."""
    eps = check_nonnegative("epsilon", epsilon)
    dl = check_nonnegative("delta", delta)
    k = _kov_steps(steps)
    td = check_delta("total_delta", total_delta)
    floor = -math.expm1(k * math.log1p(-dl)) if dl > 0 else 0.0
    if floor >= td:
        raise ValueError(
            f"total_delta={td:g} is unreachable: {k} steps with per-step delta={dl:g} already spend {floor:.3g}"
        )
    if eps == 0.0:
        return 0.0
    if kov_delta(eps, dl, k, 0.0) <= td:
        return 0.0
    # The total can never exceed basic composition k * eps.
    return monotone_root(
        lambda g: kov_delta(eps, dl, k, g), td, min(1e-6, k * eps / 2), k * eps * 1.0000001,
        increasing=False, safe="above", name="total epsilon",
    )


def kov_per_step(epsilon: float, delta: float, steps: int, per_step_delta: float) -> float:
    """Largest per-step epsilon (rounded down) such that ``steps`` of them are (epsilon, delta)-DP."""
    eps = check_positive("epsilon", epsilon)
    dl = check_delta("delta", delta)
    k = check_count("steps", steps)
    pd = check_nonnegative("per_step_delta", per_step_delta)
    return monotone_root(
        lambda e: kov(e, pd, k, dl), eps, eps / k / 2, eps,
        increasing=True, safe="below", name="per-step epsilon",
    )


def heterogeneous_kov(
    epsilons: Sequence[float], deltas: Sequence[float], counts: Sequence[int], delta_slack: float
) -> tuple[float, float]:
    """Total (eps, delta) of heterogeneous mechanisms (Kairouz-Oh-Viswanath 2015, Theorem 3.5).

    eps_g = min{ sum eps_i, sum eps_i (e^eps_i - 1)/(e^eps_i + 1) + sqrt(2 sum eps_i^2 ln(1/delta')) },
    delta_g = 1 - (1 - delta') prod (1 - delta_i). Each mechanism i is repeated ``counts[i]`` times.
    """
    e = np.array([check_nonnegative("epsilon", x) for x in epsilons])
    d = np.array([check_nonnegative("delta", x) for x in deltas])
    c = np.array([check_count("count", x) for x in counts], dtype=float)
    ds = check_delta("delta_slack", delta_slack)
    basic = float(np.sum(c * e))
    advanced = float(np.sum(c * e * np.tanh(e / 2.0)) + math.sqrt(2.0 * np.sum(c * e * e) * math.log(1.0 / ds)))
    log_keep = float(np.sum(c * np.log1p(-d))) + math.log1p(-ds)
    return min(basic, advanced), -math.expm1(log_keep)
