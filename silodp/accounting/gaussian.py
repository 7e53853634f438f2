"""The Gaussian mechanism, three ways.

A release ``q(X) + N(0, sigma^2 I)`` of a query with l2-sensitivity ``sensitivity`` (the largest
change of ``q`` between neighbouring datasets; for ISRL-DP, replace-one within a silo).

* ``classical``: Dwork & Roth (2014), Theorem A.1: sigma >= sensitivity * sqrt(2 ln(1.25/delta)) / eps,
  proved only for eps < 1.
* ``zcdp``: the mechanism is rho-zCDP with rho = sensitivity^2 / (2 sigma^2) (Bun & Steinke 2016,
  Prop 1.6; paper Prop D.2), converted to (eps, delta) by the tight conversion of Canonne,
  Kamath & Steinke (2020) (see :mod:`silodp.accounting.zcdp`).
* ``analytic``: the exact privacy profile of Balle & Wang (2018), Theorem 8:
  delta(eps) = Phi(D/(2 s) - eps s/D) - e^eps Phi(-D/(2 s) - eps s/D). Tight for every eps.

Inverses round toward more privacy: sigma up, epsilon up, delta up.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr

from silodp._validation import check_delta, check_positive
from silodp.accounting._numerics import monotone_root
from silodp.accounting import zcdp

METHODS = ("classical", "zcdp", "analytic")


def _check_method(method: str) -> str:
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    return method


def _classical_range(eps: float) -> float:
    if eps >= 1:
        raise ValueError("epsilon: must be < 1 for the classical Gaussian bound (Dwork-Roth Thm A.1)")
    return eps


def analytic_log_delta(epsilon: float | np.ndarray, ratio: float | np.ndarray) -> np.ndarray:
    """log delta(eps) of the Gaussian mechanism with ``ratio = sigma / sensitivity`` (Balle-Wang).

    Vectorized, computed in log space so that deltas down to 1e-300 keep their precision.
    """
    eps = np.asarray(epsilon, dtype=float)
    r = np.asarray(ratio, dtype=float)
    a = log_ndtr(1.0 / (2.0 * r) - eps * r)
    b = eps + log_ndtr(-1.0 / (2.0 * r) - eps * r)
    with np.errstate(divide="ignore"):
        return a + np.log(-np.expm1(np.minimum(b - a, 0.0)))


def delta_for_epsilon(
    epsilon: float, sigma: float, sensitivity: float = 1.0, method: str = "analytic"
) -> float:
    """Smallest delta such that the Gaussian mechanism is (epsilon, delta)-DP (per ``method``)."""
    _check_method(method)
    eps = check_positive("epsilon", epsilon)
    s = check_positive("sigma", sigma)
    d = check_positive("sensitivity", sensitivity)
    if method == "classical":
        return min(1.0, 1.25 * math.exp(-0.5 * (s * _classical_range(eps) / d) ** 2))
    if method == "zcdp":
        return zcdp.delta_for_epsilon(zcdp.gaussian_rho(s, d), eps)
    return float(np.exp(analytic_log_delta(eps, s / d)))


def epsilon_for_delta(
    sigma: float, delta: float, sensitivity: float = 1.0, method: str = "analytic"
) -> float:
    """Smallest epsilon (rounded up) such that the mechanism is (epsilon, delta)-DP."""
    _check_method(method)
    s = check_positive("sigma", sigma)
    dl = check_delta("delta", delta)
    d = check_positive("sensitivity", sensitivity)
    if method == "classical":
        eps = d * math.sqrt(2.0 * math.log(1.25 / dl)) / s
        if eps >= 1:
            raise ValueError(
                "the classical Gaussian bound (Dwork-Roth Thm A.1) only covers epsilon < 1; "
                f"this sigma would need epsilon = {eps:.3g}"
            )
        return eps
    if method == "zcdp":
        return zcdp.epsilon_for_rho(zcdp.gaussian_rho(s, d), dl)
    log_target = math.log(dl)
    if analytic_log_delta(0.0, s / d) <= log_target:
        return 0.0
    return monotone_root(
        lambda e: float(analytic_log_delta(e, s / d)),
        log_target,
        1e-6,
        1.0,
        increasing=False,
        safe="above",
        name="epsilon",
    )


def sigma_for_budget(
    epsilon: float, delta: float, sensitivity: float = 1.0, method: str = "analytic"
) -> float:
    """Smallest noise standard deviation (rounded up) giving (epsilon, delta)-DP."""
    _check_method(method)
    eps = check_positive("epsilon", epsilon)
    dl = check_delta("delta", delta)
    d = check_positive("sensitivity", sensitivity)
    if method == "classical":
        return d * math.sqrt(2.0 * math.log(1.25 / dl)) / _classical_range(eps)
    if method == "zcdp":
        return d / math.sqrt(2.0 * zcdp.rho_for_budget(eps, dl))
    log_target = math.log(dl)
    ratio = monotone_root(
        lambda r: float(analytic_log_delta(eps, r)),
        log_target,
        1e-3,
        10.0,
        increasing=False,
        safe="above",
        name="sigma",
    )
    return ratio * d
