"""The balls-in-bins PLD by rounding (stochastic order), the fallback of :mod:`silodp.accounting.allocation`.

Each likelihood ratio Y is put on a grid j * d by rounding *up* (remove: the loss increases in S)
or *down* (add: the loss decreases in S), partial sums are formed by FFT convolution and re-binned
onto grids twice as coarse (rounding up, resp. down) when too long; values past the cap go to +inf
loss (remove) or down to the cap (add). Every step is a monotone map applied to the variables, so
the computed S dominates (resp. is dominated by) the true one in the usual stochastic order and
its loss, rounded up to the PLD grid, dominates the true loss. Sound but biased by about one grid
step per variable (+34% in epsilon at 1000 batches): :mod:`~silodp.accounting.allocation` uses it
only for a direction whose mean-keeping spread carries a round-off bound above
:data:`silodp.accounting.allocation._ROUNDOFF` (heavy-tailed ratios at small noise), where this
one's is far smaller. The code of silodp before issue 38, unchanged.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import ndtr, ndtri
from typing import Self, TypeVar, cast

from silodp.accounting import pld as pld_lib

#: Grid points all the partial sums of one direction may hold together (about a second).
WORK = 1 << 21
#: Tail mass beyond the grid of each variable's log-normal: 1e-17 per epoch over all t variables.
_TAIL = 1e-17
_U = 2.0 ** -53


def _grid_pmf(mean_log: float, sd_log: float, step: float, cap: float, up: bool) -> tuple[np.ndarray, float, float]:
    """Y = exp(N(mean_log, sd_log^2)) on the grid j * step (j <= cap / step), rounded up (``up``) or
    down; returns (masses, mass past the cap, round-off bound). Past the cap: +inf when rounding
    up, moved to the last point (<= cap) when rounding down.

    Interval masses are differences of lower tails left of the median and of upper tails right of
    it (one interval straddles it), each tail from :func:`scipy.special.ndtr` to a few ulps, so
    the l1 error is at most 16 u sum_j min(F_j, 1 - F_j) + 4 u."""
    n = int(math.ceil(cap / step))
    z = (np.log(np.arange(1, n + 1) * step) - mean_log) / sd_log  # edges j * step, j = 1..n
    lower, upper = ndtr(z), ndtr(-z)  # P[Y <= edge], P[Y > edge]
    lo_prev, up_prev = np.concatenate(([0.0], lower[:-1])), np.concatenate(([1.0], upper[:-1]))
    masses = np.where(z <= 0, lower - lo_prev, np.where(np.concatenate(([z[0]], z[:-1])) >= 0,
                                                          up_prev - upper, 1.0 - lo_prev - upper))
    masses = np.maximum(masses, 0.0)  # mass of ((j-1) step, j step], j = 1..n
    err = 16.0 * _U * float(np.sum(np.minimum(lower, upper))) + 4.0 * _U
    above = float(upper[-1])
    if up:  # to j step; index 0 (Y = 0) is empty
        return np.concatenate(([0.0], masses)), above, err
    masses[-1] += above  # to (j-1) step; past the cap down to the last point
    return masses, 0.0, err


def _coarsen(masses: np.ndarray, up: bool) -> np.ndarray:
    """Re-bin values j * d onto multiples of 2d: ceil(j / 2) (``up``) or floor(j / 2)."""
    if len(masses) % 2:
        masses = np.append(masses, 0.0)
    pairs = masses.reshape(-1, 2)
    if up:  # 2i-1 and 2i go to i: shift by one
        out = np.zeros(len(pairs) + 1)
        out[0] = masses[0]
        out[1:] += pairs[:, 1]
        out[1:len(pairs)] += pairs[1:, 0]
        return out
    return pairs.sum(axis=1)


def _max_points(t: int) -> int:
    return int(min(1 << 20, max(1 << 17, WORK // (math.ceil(math.log2(t)) + 1))))


class _Sum:
    """A nonnegative variable on the grid j * step (j <= cap / step), + mass at +inf, + round-off;
    at most ``limit`` points."""

    def __init__(self, masses: np.ndarray, inf: float, roundoff: float, *, step: float, cap: float, up: bool,
                 limit: int) -> None:
        self.masses, self.step, self.inf, self.roundoff = masses, step, inf, roundoff
        self.cap, self.up, self.limit = cap, up, limit

    def _fit(self) -> Self:
        last = int(self.cap / self.step) + 1
        if len(self.masses) > last:  # past the cap: +inf (up) or down to the cap
            beyond = float(np.sum(self.masses[last:]))
            self.masses = self.masses[:last].copy()
            if self.up:
                self.inf += beyond
            else:
                self.masses[-1] += beyond
        while len(self.masses) > self.limit:
            self._halve()
        return self

    def _halve(self) -> None:
        """Twice as coarse a grid (pairwise sums: l1 round-off <= u sum)."""
        self.masses, self.step = _coarsen(self.masses, self.up), 2.0 * self.step
        self.roundoff += _U * float(np.sum(self.masses))

    def coarsen_to(self, step: float) -> Self:
        while self.step < step * (1 - 1e-12):
            self._halve()
        return self

    def plus(self, other: "_Sum") -> "_Sum":
        step = max(self.step, other.step)
        a, b = self.coarsen_to(step), other.coarsen_to(step)
        out, fresh = pld_lib._convolve(a.masses, a.masses if b is a else b.masses)
        inf = 1.0 - (1.0 - a.inf) * (1.0 - b.inf)
        ra, rb = a.roundoff, b.roundoff
        return _Sum(out, inf, ra + rb + ra * rb + fresh, step=step, cap=a.cap, up=a.up, limit=a.limit)._fit()


#: a sum law: the rounded one here, or allocation's spread one
S = TypeVar("S", bound=_Sum)


def _power(base: S, count: int) -> S | None:
    """The sum of ``count`` independent copies (binary powering)."""
    out, sq = None, base
    while count:
        if count & 1:
            out = sq if out is None else cast(S, out.plus(sq))
        count >>= 1
        if count:
            sq = cast(S, sq.plus(sq))
    return out


def _loss_pmf(total: _Sum, t: int, interval: float, remove: bool) -> pld_lib.LossPmf:
    """The loss +-log(S / t) of the grid variable S, rounded up to multiples of ``interval``."""
    j = np.arange(len(total.masses))
    with np.errstate(divide="ignore"):
        x = np.log(j * total.step / t)
    masses, inf = total.masses, total.inf
    if remove:  # loss log(S/t), increasing; S = 0 joins the lowest point (rounded up)
        x[0] = x[1] if len(x) > 1 else 0.0
        idx = np.ceil(x / interval).astype(np.int64)
    else:  # loss -log(S/t); S = 0 is +inf
        inf = inf + float(masses[0])
        masses, x = masses[1:], x[1:]
        idx = np.ceil(-x / interval).astype(np.int64)
    lo = int(idx.min())
    binned = np.bincount(idx - lo, weights=masses)
    roundoff = total.roundoff + 4.0 * _U * float(np.sum(masses))
    return pld_lib.LossPmf(interval, lo, binned, float(min(1.0, inf)), roundoff)


#: Most grid points one variable's PMF may span (:func:`_grid_pmf` holds a few float64 arrays of
#: this length, 0.5 GiB each; z 0.4 at 10 batches needs 5.6e7); a smaller noise is refused before
#: anything is allocated.
MAX_GRID = 1 << 26


def grid_points(z: float, t: int) -> int:
    """The points of the widest grid :func:`direction` builds (the changed record's likelihood
    ratio in the remove direction, out to its 1 - 1e-17 quantile)."""
    limit, s2 = _max_points(t), 1.0 / (z * z)
    sd = math.sqrt(s2)
    y_cap = math.exp(-0.5 * s2 - float(ndtri(_TAIL / t)) * sd)
    mine_cap = math.exp(min(700.0, 0.5 * s2 - float(ndtri(_TAIL)) * sd))
    cap = mine_cap + y_cap + (t - 1) * (1.0 + 6.0 * math.sqrt(math.expm1(min(s2, 700.0))))
    step = min(y_cap, cap) / (limit // 2)
    return int(min(math.ceil(min(mine_cap, cap) / step), 2 ** 62))


def check(z: float, t: int) -> None:
    """ValueError (naming ``noise_multiplier``) where :func:`direction` would need more than
    :data:`MAX_GRID` points, before anything is allocated."""
    need = grid_points(z, t)
    if need > MAX_GRID:
        raise ValueError(f"noise_multiplier: {z:g} is too small for the balls-in-bins pld at {t} batches (a "
                         f"grid of {need:.3g} points, more than {MAX_GRID}); use a larger noise_multiplier")


def direction(z: float, t: int, interval: float, remove: bool, bound: float) -> pld_lib.LossPmf:
    """One direction of one epoch (module docstring); refused by :func:`check` beyond :data:`MAX_GRID`."""
    check(z, t)
    limit = _max_points(t)
    s2 = 1.0 / (z * z)
    sd = math.sqrt(s2)
    spread = -float(ndtri(_TAIL / t))  # the (1 - 1e-17 / t) normal quantile (t variables: 1e-17 in all)
    y_cap = math.exp(-0.5 * s2 + spread * sd)  # an unshifted Y past it: mass 1e-17 / t
    if remove:  # S past the cap: the shifted Y past its quantile, or the rest past one jump
        mine_cap = math.exp(0.5 * s2 - float(ndtri(_TAIL)) * sd)
        cap = mine_cap + y_cap + (t - 1) * (1.0 + 6.0 * math.sqrt(math.expm1(s2)))
    else:  # S/t past e^3: losses below -3, moved up to -3 (rounded down in S)
        cap = t * math.exp(3.0)
    step = min(y_cap, cap) / (limit // 2)
    others = _Sum(*_grid_pmf(-0.5 * s2, sd, step, min(y_cap, cap), remove), step=step, cap=cap, up=remove, limit=limit)._fit()
    total = _power(others, t - 1 if remove else t)
    if remove:
        mine = _Sum(*_grid_pmf(0.5 * s2, sd, step, min(mine_cap, cap), True), step=step, cap=cap, up=True, limit=limit)._fit()
        total = mine if total is None else total.plus(mine)
    if total is None:
        raise ValueError(f"t: needs at least one batch, got {t!r}")
    return _loss_pmf(total, t, interval, remove).truncate(bound)
