"""Noise calibration: the smallest noise multiplier whose *certified* epsilon meets a target.

``calibrate(event_fn, epsilon, delta, accountant)`` needs only a function from a noise multiplier
to an event (as dp-accounting's ``mechanism_calibration``). It brackets the answer automatically
and bisects in log space, always keeping the end of the bracket whose certified epsilon is
<= target; it stops once that end is within ``rtol`` (default 1%) of the target. The returned
multiplier is therefore rounded toward *more* privacy by construction, and its epsilon is
re-certified by the accountant that was asked for.

For ``pld`` the discretization defaults to 1e-3 (pessimistic, hence still a valid upper bound)
and the search uses safeguarded secant steps in log-log space, which converge in a handful of
evaluations.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from silodp.accounting import events as ev
from silodp.accounting._checks import check_delta, check_positive
from silodp.accounting.accountants import get_accountant

EventFn = Callable[[float], ev.DpEvent]


@dataclasses.dataclass(frozen=True)
class Calibration:
    """Result of :func:`calibrate`: ``noise_multiplier`` certified (``epsilon``, ``delta``)-DP."""

    noise_multiplier: float
    epsilon: float
    delta: float
    target_epsilon: float
    accountant: str


def _certifier(event_fn: EventFn, delta: float, accountant: str, neighbouring, **kwargs) -> Callable[[float], float]:
    def eps_of(z: float) -> float:
        return get_accountant(accountant, neighbouring, **kwargs).compose(event_fn(z)).get_epsilon(delta)
    return eps_of


def _search(eps_of: Callable[[float], float], target: float, rtol: float, start: float = 1.0,
            factor: float = 2.0) -> tuple[float, float]:
    """Bracket by steps of ``factor``, then safeguarded secant/bisection on log z.

    Returns (z, eps(z)) with target * (1 - rtol) <= eps(z) <= target (or the smallest z tried).
    """
    lo, hi = start, start
    eps_lo = eps_hi = eps_of(start)
    while eps_hi > target:  # too little noise: move up
        lo, eps_lo = hi, eps_hi
        hi *= factor
        if hi > 1e7:
            raise ValueError(f"epsilon={target:g} is unreachable: a noise multiplier above 1e7 would be needed")
        eps_hi = eps_of(hi)
    if lo == hi:  # start already private enough: move down until it is not
        while eps_lo <= target:
            hi, eps_hi = lo, eps_lo
            if eps_hi >= target * (1.0 - rtol):
                return hi, eps_hi
            lo /= factor
            if lo < 1e-4:
                return hi, eps_hi  # even tiny noise meets the budget (e.g. huge epsilon)
            eps_lo = eps_of(lo)
    while eps_hi < target * (1.0 - rtol) and hi / lo - 1.0 > 1e-9:
        # secant step in log-log space, safeguarded into the bracket
        try:
            t = (math.log(target * (1 - rtol / 2)) - math.log(eps_lo)) / (math.log(eps_hi) - math.log(eps_lo))
            mid = math.exp(math.log(lo) + min(max(t, 0.1), 0.9) * (math.log(hi) - math.log(lo)))
        except (ValueError, ZeroDivisionError):
            mid = math.sqrt(lo * hi)
        eps_mid = eps_of(mid)
        if eps_mid > target:
            lo, eps_lo = mid, eps_mid
        else:
            hi, eps_hi = mid, eps_mid
    return hi, eps_hi


def calibrate(
    event_fn: EventFn,
    epsilon: float,
    delta: float,
    accountant: str = "pld",
    neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE,
    rtol: float = 0.01,
    **accountant_kwargs,
) -> Calibration:
    """Smallest noise multiplier z (within ``rtol``) with certified epsilon(event_fn(z), delta) <= epsilon.

    Raises ``ValueError`` naming the argument when the budget cannot be met (e.g. a delta that
    the (epsilon, delta) events alone already exceed, or a target needing z > 1e7).
    """
    eps = check_positive("epsilon", epsilon)
    dl = check_delta("delta", delta)
    if not 0 < rtol < 0.5:
        raise ValueError(f"rtol must lie in (0, 0.5), got {rtol}")
    reason = get_accountant(accountant, neighbouring, **accountant_kwargs).unsupported_reason(event_fn(1.0))
    if reason:
        raise ValueError(f"accountant {accountant!r} cannot certify this mechanism: {reason}")
    if accountant == "pld" and "value_discretization_interval" not in accountant_kwargs:
        # A discretization of 1e-3 (pessimistic, so still certified) keeps the certified epsilon
        # within ~0.1% of the 1e-4 default at a tenth of the cost; the tighter stopping tolerance
        # makes up for the rest.
        accountant_kwargs = {"value_discretization_interval": min(1e-3, max(1e-4, eps * 1e-3))}
        rtol = min(rtol, 0.003)
    eps_of = _certifier(event_fn, dl, accountant, neighbouring, **accountant_kwargs)
    z, certified = _search(eps_of, eps, rtol=rtol)
    return Calibration(z, certified, dl, eps, accountant)
