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
from typing import Any

import numpy as np
from scipy.special import log_ndtr

from silodp._validation import check_delta, check_positive
from silodp.accounting._numerics import monotone_root
from silodp.accounting import zcdp

METHODS = ("classical", "zcdp", "analytic")


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


def _classical_epsilon(ratio: float, delta: float) -> float:
    eps = math.sqrt(2.0 * math.log(1.25 / delta)) / ratio
    if eps >= 1:
        raise ValueError("the classical Gaussian bound (Dwork-Roth Thm A.1) only covers epsilon < 1; "
                         f"this sigma would need epsilon = {eps:.3g}")
    return eps


def _analytic_epsilon(ratio: float, delta: float) -> float:
    log_target = math.log(delta)
    if analytic_log_delta(0.0, ratio) <= log_target:
        return 0.0
    return monotone_root(lambda e: float(analytic_log_delta(e, ratio)), log_target, 1e-6, 1.0,
                         increasing=False, safe="above", name="epsilon")


def _analytic_ratio(epsilon: float, delta: float) -> float:
    return monotone_root(lambda r: float(analytic_log_delta(epsilon, r)), math.log(delta), 1e-3, 10.0,
                         increasing=False, safe="above", name="sigma")


#: per method, in units of ``ratio = sigma / sensitivity`` (each inverse rounded toward more
#: privacy): delta(epsilon, ratio), epsilon(ratio, delta), ratio(epsilon, delta)
_FORMULAS = {
    "classical": (lambda eps, r: min(1.0, 1.25 * math.exp(-0.5 * (r * _classical_range(eps)) ** 2)),
                  _classical_epsilon,
                  lambda eps, dl: math.sqrt(2.0 * math.log(1.25 / dl)) / _classical_range(eps)),
    "zcdp": (lambda eps, r: zcdp.delta_for_epsilon(zcdp.gaussian_rho(r, 1.0), eps),
             lambda r, dl: zcdp.epsilon_for_rho(zcdp.gaussian_rho(r, 1.0), dl),
             lambda eps, dl: 1.0 / math.sqrt(2.0 * zcdp.rho_for_budget(eps, dl))),
    "analytic": (lambda eps, r: float(np.exp(analytic_log_delta(eps, r))), _analytic_epsilon, _analytic_ratio),
}


def _formulas(method: str) -> tuple[Any, ...]:
    if method not in METHODS:
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    return _FORMULAS[method]


def delta_for_epsilon(
    epsilon: float, sigma: float, sensitivity: float = 1.0, method: str = "analytic"
) -> float:
    """Smallest delta such that the Gaussian mechanism is (epsilon, delta)-DP (per ``method``)."""
    formula = _formulas(method)[0]
    eps, s = check_positive("epsilon", epsilon), check_positive("sigma", sigma)
    return formula(eps, s / check_positive("sensitivity", sensitivity))


def epsilon_for_delta(
    sigma: float, delta: float, sensitivity: float = 1.0, method: str = "analytic"
) -> float:
    """Smallest epsilon (rounded up) such that the mechanism is (epsilon, delta)-DP."""
    formula = _formulas(method)[1]
    s, dl = check_positive("sigma", sigma), check_delta("delta", delta)
    return formula(s / check_positive("sensitivity", sensitivity), dl)


def sigma_for_budget(
    epsilon: float, delta: float, sensitivity: float = 1.0, method: str = "analytic"
) -> float:
    """Smallest noise standard deviation sigma (rounded up) giving (epsilon, delta)-DP."""
    formula = _formulas(method)[2]
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    return formula(eps, dl) * check_positive("sensitivity", sensitivity)
