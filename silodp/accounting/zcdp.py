"""Zero-concentrated differential privacy (Bun & Steinke 2016).

* ``gaussian_rho``: the Gaussian mechanism with l2-sensitivity D and noise sigma is
  D^2 / (2 sigma^2)-zCDP (Bun-Steinke Prop 1.6; paper Prop D.2).
* ``compose``: zCDP composes additively, also adaptively (Bun-Steinke Lemma 2.3; paper Lemma D.1).
* ``epsilon_for_rho_paper``: rho-zCDP implies (rho + 2 sqrt(rho ln(1/delta)), delta)-DP
  (Bun-Steinke Prop 1.3; paper Prop D.1).
* ``epsilon_for_rho``: the tighter conversion of Canonne, Kamath & Steinke (2020), Prop 12 /
  Cor 13: eps = inf_{alpha > 1} rho*alpha + (ln(1/delta) + (alpha-1) ln(1 - 1/alpha) - ln alpha)/(alpha-1).
  Every alpha gives a valid bound, so a numerical minimizer can only err on the safe side.
* ``rho_for_budget`` / ``rho_for_budget_paper``: the inverse, the largest rho (rounded down) whose
  conversion stays within (eps, delta).

The neighbouring relation is whatever the sensitivity was computed for; for ISRL-DP, replace-one
within a silo.
"""

from __future__ import annotations

import math
from typing import Callable, Iterable

import numpy as np

from silodp._validation import check_delta, check_nonnegative, check_positive
from silodp.accounting._numerics import monotone_root


def gaussian_rho(sigma: float, sensitivity: float = 1.0) -> float:
    """rho of the Gaussian mechanism: sensitivity^2 / (2 sigma^2) (paper Prop D.2)."""
    s = check_positive("sigma", sigma)
    d = check_positive("sensitivity", sensitivity)
    return d * d / (2.0 * s * s)


def compose(rhos: Iterable[float]) -> float:
    """Adaptive composition: the rhos add up (paper Lemma D.1)."""
    return float(sum(check_nonnegative("rho", r) for r in rhos))


def _log_delta_at(alpha: np.ndarray, rho: float, epsilon: float) -> np.ndarray:
    return (alpha - 1.0) * (rho * alpha - epsilon) + (alpha - 1.0) * np.log1p(-1.0 / alpha) - np.log(alpha)


def _minimize_over_alpha(objective: Callable[[np.ndarray], np.ndarray]) -> float:
    """Minimize objective(alpha) over alpha > 1: dense log grid, then a bounded Brent refinement."""
    from scipy.optimize import minimize_scalar  # lazy: keeps CLI start-up fast
    grid = 1.0 + np.logspace(-6, 7, 400)
    values = objective(grid)
    i = int(np.nanargmin(values))
    lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    res = minimize_scalar(lambda a: float(objective(np.array([a]))[0]), bounds=(lo, hi), method="bounded")
    return float(min(values[i], res.fun))


def epsilon_for_rho(rho: float, delta: float) -> float:
    """Tight (eps, delta) of a rho-zCDP mechanism (Canonne-Kamath-Steinke 2020, Prop 12)."""
    r = check_nonnegative("rho", rho)
    dl = check_delta("delta", delta)
    if r == 0:
        return 0.0
    log_inv = -math.log(dl)

    def objective(alpha: np.ndarray) -> np.ndarray:
        return r * alpha + (log_inv + (alpha - 1.0) * np.log1p(-1.0 / alpha) - np.log(alpha)) / (alpha - 1.0)

    return max(0.0, _minimize_over_alpha(objective))


def delta_for_epsilon(rho: float, epsilon: float) -> float:
    """Smallest delta certified for (epsilon, delta)-DP from rho-zCDP (same conversion, inverted)."""
    r = check_nonnegative("rho", rho)
    eps = check_nonnegative("epsilon", epsilon)
    if r == 0:
        return 0.0
    return float(min(1.0, math.exp(_minimize_over_alpha(lambda a: _log_delta_at(a, r, eps)))))


def epsilon_for_rho_paper(rho: float, delta: float) -> float:
    """The conversion as the paper states it: rho + 2 sqrt(rho ln(1/delta)) (Prop D.1)."""
    r = check_nonnegative("rho", rho)
    dl = check_delta("delta", delta)
    return r + 2.0 * math.sqrt(r * math.log(1.0 / dl))


def rho_for_budget_paper(epsilon: float, delta: float) -> float:
    """Largest rho with rho + 2 sqrt(rho ln(1/delta)) <= epsilon: (sqrt(L + eps) - sqrt(L))^2."""
    eps = check_positive("epsilon", epsilon)
    log_inv = math.log(1.0 / check_delta("delta", delta))
    # Written as eps^2 / (sqrt(L+eps) + sqrt(L))^2 to avoid cancellation for tiny eps.
    return eps * eps / (math.sqrt(log_inv + eps) + math.sqrt(log_inv)) ** 2


def rho_for_budget(epsilon: float, delta: float) -> float:
    """Largest rho (rounded down) whose tight conversion is within (epsilon, delta)."""
    eps = check_positive("epsilon", epsilon)
    dl = check_delta("delta", delta)
    start = rho_for_budget_paper(eps, dl)  # always feasible: the paper's conversion is looser
    return monotone_root(
        lambda r: epsilon_for_rho(r, dl), eps, start, 4.0 * start + 1e-300,
        increasing=True, safe="below", name="rho",
    )
