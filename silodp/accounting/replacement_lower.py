"""A rigorous *lower* bound for Gaussian sums over batches drawn with replacement.

The certificate for sampling with replacement (:mod:`silodp.accounting.with_replacement`) is
bounded from below here by one concrete neighbouring pair, so a user sees the gap between what is
certified and what any certificate must allow.

The pair (replace-one, contributions in the ball of radius C; one coordinate, the others are pure
noise): the changed record contributes +C in D and -C in D', every other record contributes -C.
A batch of m draws then sums to -mC + 2KC under D and to -mC under D', whatever K is, so after
shifting by mC and scaling by C, with s = z (noise sigma = zC):

    P = sum_k P[K = k] N(2k, s^2)        Q = N(0, s^2)

(D' hides K completely). Each step draws its batch afresh, so T steps are the T-fold product of
this pair, and any (eps, delta) guarantee of the mechanism must hold for it (P against Q; the
other order is not used: dropping Q's far multiplicities would not be safe there, and its loss is
at most log(1 / P[K = 0]) a step anyway). Its privacy loss is increasing in x (a log-sum-exp of increasing
affine functions), so the dominated PLD of :func:`silodp.accounting.pld_lower.optimistic_loss_pmf` applies:
the mass of x in (x_i, x_{i+1}] is placed at eps_i, where the threshold x_i is found by bisection
from above (L(x_i) >= eps_i + margin, so every unit of mass sits at or below its true loss);
multiplicities beyond the binomial's 1 - e^bound quantile are dropped from P (p only
decreases, so every integral of (prod p - e^eps prod q)_+ does too). :func:`silodp.accounting.pld_lower.lower_bound_epsilon` then composes it with every mass it
may have added subtracted from delta. A lower bound only: the worst pair is not known, so this
says nothing about how tight an upper bound could be made.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
from scipy.special import log_ndtr

from silodp.accounting import _binomial
from silodp.accounting._numerics import logsumexp_rows
from silodp.accounting import pld, pld_lower
from silodp._validation import check_delta, check_positive

#: Bisection steps of the threshold (the bracket of width ~100 shrinks to ~1e-12).
_BISECTIONS = 48


@dataclasses.dataclass(frozen=True)
class CollinearPair:
    """P = sum_k w_k N(k d, s^2) (a sub-probability when truncated) against Q = N(0, s^2),
    ``w_k`` = ``weights[k]``, d = ``shift``."""

    weights: tuple[float, ...]
    shift: float
    s: float

    @property
    def SURVIVAL_UNITS(self) -> float:  # noqa: N802 (the name optimistic_loss_pmf reads)
        """Bound on the relative error of :meth:`survival` in units of u, both ends of a mass: a few
        ulps per tail and per term summed, and t^2 ulps from the rounding of each tail's argument t
        (|t| <= K d / s + sqrt(-2 bound) on the grid of :meth:`loss_range`)."""
        t = (len(self.weights) - 1) * self.shift / self.s + math.sqrt(-2.0 * pld.LOG_TAIL_MASS) + 1.0
        return 2.0 * (16.0 + 4.0 * len(self.weights) + t * t)

    def _terms(self, x: np.ndarray) -> np.ndarray:
        k = np.arange(len(self.weights))
        logw = np.log(np.maximum(np.asarray(self.weights, dtype=float), 1e-300))
        return logw + (2.0 * k * self.shift * x[..., None] - (k * self.shift) ** 2) / (2.0 * self.s ** 2)

    def loss(self, x: np.ndarray) -> np.ndarray:
        """Privacy loss log(dP/dQ)(x), increasing in x."""
        return logsumexp_rows(self._terms(np.asarray(x, dtype=float)))

    def loss_range(self, log_mass_truncation_bound: float) -> tuple[float, float]:
        """The losses at the ends of an x range outside which P has mass below e^bound per side."""
        k = math.sqrt(-2.0 * log_mass_truncation_bound)
        top = (len(self.weights) - 1) * self.shift
        l_lo, l_hi = self.loss(np.array([-k * self.s, top + k * self.s]))
        return float(l_lo), float(l_hi)

    def threshold(self, epsilon: np.ndarray) -> np.ndarray:
        """An x with L(x) >= eps + 1e-9 (1 + |eps|) (above the root; bisection from above)."""
        target = np.asarray(epsilon, dtype=float)
        target = target + 1e-9 * (1.0 + np.abs(target))
        span = 60.0 * self.s + len(self.weights) * self.shift
        lo, hi = np.full(target.shape, -span), np.full(target.shape, span)
        for _ in range(_BISECTIONS):
            mid = 0.5 * (lo + hi)
            up = self.loss(mid) >= target
            hi, lo = np.where(up, mid, hi), np.where(up, lo, mid)
        hi = np.where(self.loss(hi) >= target, hi, np.inf)  # the root beyond the bracket: no mass
        return np.maximum.accumulate(hi)  # increasing with eps (raising x only raises L(x))

    def survival(self, epsilon: np.ndarray) -> np.ndarray:
        """P[X > x(eps)] <= P[L > eps] (x from :meth:`threshold`)."""
        x = self.threshold(epsilon)
        k = np.arange(len(self.weights))
        logw = np.log(np.maximum(np.asarray(self.weights, dtype=float), 1e-300))
        with np.errstate(divide="ignore", invalid="ignore"):
            log_p = logsumexp_rows(logw + log_ndtr((k * self.shift - x[:, None]) / self.s))
        return np.where(np.isposinf(x), 0.0, np.exp(log_p))


    def pass_probabilities(self) -> tuple[np.ndarray, np.ndarray]:
        """P(x > tau) and Q(x > tau) over a grid of tau (for
        :func:`silodp.accounting.pld_lower.count_test_lower_bound`)."""
        k = np.arange(len(self.weights))
        w = np.asarray(self.weights, dtype=float)
        taus = np.linspace(-3.0, 12.0, 301) * self.s + 0.5 * self.shift
        return np.exp(log_ndtr((k * self.shift - taus[:, None]) / self.s)) @ w, np.exp(log_ndtr(-taus / self.s))


def collinear_pair(noise_multiplier: float, sample_size: int, dataset_size: int,
                   log_mass_truncation_bound: float = pld.LOG_TAIL_MASS) -> CollinearPair:
    """The module's pair for a batch of ``sample_size`` draws from ``dataset_size``
    records at ``noise_multiplier`` = sigma / C (shift 2C per draw of the changed record)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    m, n = int(sample_size), int(dataset_size)
    if m < 1 or n < 1:
        raise ValueError(f"sample_size and dataset_size must be >= 1, got {m}, {n}")
    kmax = min(m, _binomial.isf(math.exp(log_mass_truncation_bound), m, 1.0 / n))
    weights = tuple(float(_binomial.pmf(k, m, 1.0 / n)) for k in range(kmax + 1))
    return CollinearPair(weights, 2.0, z)


def lower_bound_epsilon(noise_multiplier: float, sample_size: int, dataset_size: int, steps: int,
                        delta: float, interval: float = 1e-4) -> float:
    """A rigorous lower bound on the epsilon at ``delta`` of ``steps`` Gaussian sums over batches of
    ``sample_size`` draws with replacement from ``dataset_size`` records (replace-one): the larger,
    for the module's pair, of :func:`silodp.accounting.pld_lower.lower_bound_epsilon` (a
    dominated PLD) and :func:`silodp.accounting.pld_lower.count_test_lower_bound` (a test counting the
    steps past tau, stronger for rarely drawn records)."""
    dl = check_delta("delta", delta)
    if int(steps) < 1:
        raise ValueError(f"steps: must be >= 1, got {steps}")
    pair = collinear_pair(noise_multiplier, sample_size, dataset_size)
    counted = pld_lower.count_test_lower_bound(pair, int(steps), dl)
    pair, interval = _fitted(pair, float(interval))
    best = max(pld_lower.lower_bound_epsilon([(pair, int(steps))], dl, interval), counted)
    # a dominated PLD loses up to one grid step per step: where that is a large share of the answer
    # (rarely drawn records, tiny epsilon), again on a grid 50 T / epsilon finer (up to 2^20 points)
    l_lo, l_hi = pair.loss_range(pld.LOG_TAIL_MASS)
    fine = max(best / (50.0 * int(steps)), (l_hi - l_lo) / (1 << 20))
    if 0.0 < fine < interval / 4:
        best = max(best, pld_lower.lower_bound_epsilon([(pair, int(steps))], dl, fine))
    return best


def _fitted(pair: CollinearPair, interval: float) -> tuple[CollinearPair, float]:
    """The pair with its largest multiplicities dropped until its losses fit the pld grid (below half
    of :data:`pld.MAX_LOSS`; P only loses mass, so the bound stays a lower bound), and the interval
    coarsened until one step spans at most 2^18 points (a coarser grid of the
    dominated PLD is still dominated: only the bound's tightness changes)."""
    while len(pair.weights) > 2 and max(map(abs, pair.loss_range(pld.LOG_TAIL_MASS))) > pld.MAX_LOSS / 2:
        pair = dataclasses.replace(pair, weights=pair.weights[:-1])
    l_lo, l_hi = pair.loss_range(pld.LOG_TAIL_MASS)
    return pair, max(interval, (l_hi - l_lo) / (1 << 18))
