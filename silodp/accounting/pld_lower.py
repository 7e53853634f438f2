"""Rigorous lower bounds on the epsilon of composed mechanism pairs (the optimistic side of
:mod:`silodp.accounting.pld`, for measuring how tight the pessimistic ``pld`` accountant is).

:func:`optimistic_loss_pmf` builds a PLD *dominated* by a pair's (the mass of each grid cell at its
lower end, the tails dropped); :func:`lower_bound_epsilon` composes such PMFs and subtracts every
mass the composition may have added; :func:`count_test_lower_bound` is a closed-form hypothesis
test (counting the steps above a threshold), strong where a few steps carry the loss. Pairs are
those of :mod:`silodp.accounting.pld_pairs` (or any with the same methods).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np

from silodp.accounting._numerics import monotone_root
from silodp.accounting.pld import LOG_TAIL_MASS, MAX_LOSS, MAX_POINTS, _U, LossPmf
from silodp._validation import check_delta


def optimistic_loss_pmf(pair: Any, interval: float, log_mass_truncation_bound: float) -> LossPmf:
    """A PLD *dominated* by ``pair``'s (a :class:`GaussianPair`, or any pair with an increasing loss
    offering ``loss_range``, ``survival`` = P[L > eps] and ``SURVIVAL_UNITS``): the mass of the loss
    in (eps_i, eps_{i+1}] at eps_i, the mass below the first and above the last grid point dropped
    (so every delta(eps) it gives is at most the pair's, up to ``roundoff``: the survival
    function's few-ulp errors)."""
    l_lo, l_hi = pair.loss_range(log_mass_truncation_bound)
    first, last = math.floor(l_lo / interval), math.ceil(l_hi / interval)
    if last - first > MAX_POINTS or max(abs(l_lo), abs(l_hi)) > MAX_LOSS:
        raise ValueError("noise_multiplier: too small for a lower-bound PLD on this grid")
    surv = pair.survival(np.arange(first, last + 1) * interval)  # P[L > eps_i]
    masses = np.maximum(surv[:-1] - surv[1:], 0.0)
    return LossPmf(interval, first, masses, 0.0, pair.SURVIVAL_UNITS * _U * float(np.sum(surv)))


def lower_bound_epsilon(pairs: list[tuple[Any, int]], delta: float, interval: float = 1e-4,
                        log_mass_truncation_bound: float = LOG_TAIL_MASS) -> float:
    """A rigorous lower bound on the epsilon at ``delta`` of composing ``count`` copies of each
    (one-direction) ``pair``: the dominated PLD of :func:`optimistic_loss_pmf` composed by FFT, with
    every mass it may have added subtracted from delta -- the round-off, the mass the window wraps
    (charged at +inf by :meth:`LossPmf.self_compose`) and the tails :meth:`LossPmf.truncate` moves
    (at most e^bound per side and operation). Largest eps (to 1e-6 relative) whose lower delta
    still exceeds ``delta``."""
    dl = check_delta("delta", delta)
    total: Any = None
    ops = 0
    for pair, count in pairs:
        part = optimistic_loss_pmf(pair, interval, log_mass_truncation_bound).self_compose(
            count, log_mass_truncation_bound)
        total = part if total is None else total.compose(part, log_mass_truncation_bound)
        ops += 2
    slack = total.roundoff + total.infinity_mass + 2.0 * ops * math.exp(log_mass_truncation_bound)
    finite = dataclasses.replace(total, infinity_mass=0.0, roundoff=0.0)

    def low(eps: float) -> float:
        return finite.delta(eps) - slack

    if low(0.0) <= dl:
        return 0.0
    hi = float(finite.losses[-1])  # beyond the largest loss the lower delta is <= 0
    return monotone_root(low, dl, min(1e-3, hi / 2), hi, increasing=False, safe="below", rtol=1e-6,
                         name="epsilon")


def count_test_lower_bound(pair: Any, steps: int, delta: float) -> float:
    """A rigorous lower bound on the epsilon at ``delta`` of ``steps`` independent copies of
    ``pair``, from a test: count the steps whose output exceeds tau and reject when at least m do.
    The per-step pass probabilities (``pair.pass_probabilities``) are closed forms in Phi, so for every (tau, m)
    delta <= P[Bin(T, p_P) >= m] - e^eps P[Bin(T, p_Q) >= m]; the best over a grid of (tau, m), with
    the binomial tails' relative error (1e-9) counted against it. Strong where a few steps carry
    the loss (small q, many steps), where a grid-based lower PLD is loose."""
    from scipy.stats import binom

    dl = check_delta("delta", delta)
    p_pass, q_pass = pair.pass_probabilities()
    counts = np.unique(np.geomspace(1, steps, 60).astype(np.int64))[:, None]
    sf_p = binom.sf(counts - 1, steps, p_pass[None, :]) * (1 - 1e-9)
    sf_q = binom.sf(counts - 1, steps, q_pass[None, :]) * (1 + 1e-9)
    usable = (sf_p > dl) & (sf_q > 1e-250)  # tails deep in the subnormals are not trusted
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.where(usable, np.log(np.where(usable, sf_p - dl, 1.0)) - np.log(np.where(usable, sf_q, 1.0)), 0.0)
    return float(max(0.0, np.max(eps)))

