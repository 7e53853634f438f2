"""Balls-in-bins batches (random allocation): a PLD upper bound and a rigorous lower bound.

Balls-in-bins (Chua et al. 2025, "Balls-and-bins sampling for DP-SGD"; the k = 1 case of
Feldman & Shenfeld 2025, "Privacy amplification by random allocation"): each epoch, every record
is put in exactly one of ``t`` batches, chosen uniformly and independently of the other records;
the epoch runs ``t`` Gaussian steps, one per batch (noise multiplier z = sigma / C).

Dominating pair (add/remove, one epoch; Chua et al. 2025 and Feldman & Shenfeld 2025 reduce any
adaptive sequence of Gaussian steps to it): with x in R^t,
P = (1/t) sum_i N(e_i, z^2 I), Q = N(0, z^2 I). The likelihood ratio is
R(x) = (1/t) sum_i Y_i, Y_i = exp((2 x_i - 1) / (2 z^2)), so every loss is a function of one
number S = sum_i Y_i:

* remove, (P, Q): loss log(S / t) under P, where log Y_1 ~ N(+1/(2z^2), 1/z^2) (the record's
  batch, taken as batch 1 by symmetry) and log Y_i ~ N(-1/(2z^2), 1/z^2) for i >= 2, all independent;
* add, (Q, P): loss -log(S / t) under Q, every log Y_i ~ N(-1/(2z^2), 1/z^2).

Discretization (pessimistic by construction). S is a sum of independent nonnegative variables.
Each Y is put on a grid j * d by rounding *up* (remove: the loss increases in S) or *down* (add:
the loss decreases in S), and the grid's partial sums are formed by FFT convolution; whenever a
partial sum's grid grows too long it is re-binned onto a grid twice as coarse, again rounding up
(resp. down), and values beyond the cap (a partial sum already past the loss range) go to +inf
loss (remove) or down to the cap (add). Every step is a monotone map applied to the variables, so
the computed S dominates (resp. is dominated by) the true one in the usual stochastic order; its
loss, rounded up to the PLD grid, therefore dominates the true loss, and the hockey-stick curve
delta(eps) = E[(1 - e^{eps - L})_+] is increasing in L, preserved by adding independent epochs
(composition is a convolution of the losses). Probability masses come from the normal CDF
(:func:`scipy.special.ndtr`, upper tails taken from the complement); their round-off and every
convolution's l1 error bound (:func:`silodp.accounting.pld._convolve`) travel as ``roundoff``,
charged to delta. The mass of Y beyond its (1 - 1e-17 / t) quantile (its exact mass) is charged at +inf.

Replace-one: the record x is replaced by x' in the same slot. Removing x (add/remove pair above,
remove direction) and then adding x' (add direction) chains two neighbouring datasets, so the run
is (eps_1 + eps_2, delta_1 + e^{eps_1} delta_2)-DP for every split (group privacy over two steps,
Dwork & Roth 2014, Thm 2.2 style): :func:`replace_one_epsilon`. Sound and about twice the
add/remove epsilon; the un-amplified charge (one Gaussian step at shift 2C per epoch) is also
sound, and the smaller of the two is what :func:`epsilon` answers.

Lower bound (:func:`lower_bound_epsilon`). On the worst-case instance (every other record
contributes 0, the differing record +C, or -C for its replacement) the adversary may test
"max_i x_i > tau" in each epoch and reject when at least m of the E epochs pass. Under P one
coordinate of each epoch is shifted, so the per-epoch pass probabilities are closed forms,
p_P = 1 - Phi((tau - s)/z) Phi(tau/z)^{t-1} and p_Q = 1 - Phi(tau/z)^t (s = 1; replace-one: the
other dataset's coordinate is shifted by -1), and delta(eps) >= P[Bin(E, p_P) >= m] -
e^eps P[Bin(E, p_Q) >= m] for every (tau, m). This is the test Chua et al. (2024, "How private are
DP-SGD implementations?") use for shuffled batches, whose instance gives exactly these outputs
(the record sits in a uniformly random batch of each epoch): it is also a lower bound for
``SHUFFLED`` batches, beside their sound un-amplified upper bound.
"""

from __future__ import annotations

import functools
import math

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

from silodp.accounting import pld as pld_lib
from silodp.accounting._numerics import monotone_root
from silodp._validation import check_count, check_delta, check_positive

#: Grid points all the partial sums of one direction may hold together (about a second): a sum
#: of t variables takes about log2(t) + 1 convolutions, each partial sum at most
#: WORK / (log2(t) + 1) points (between 2^17 and 2^20) before it is re-binned twice as coarse.
WORK = 1 << 21
#: Tail mass beyond the grid of each variable's log-normal (its exact mass, from the normal CDF,
#: goes to +inf loss or down to the cap): 1e-17 per epoch over all t variables, and for the record's own.
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

    def __init__(self, masses, inf, roundoff, *, step, cap, up, limit):
        self.masses, self.step, self.inf, self.roundoff = masses, step, inf, roundoff
        self.cap, self.up, self.limit = cap, up, limit

    def _fit(self) -> "_Sum":
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

    def coarsen_to(self, step: float) -> "_Sum":
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


def _power(base: _Sum, count: int) -> _Sum | None:
    """The sum of ``count`` independent copies (binary powering)."""
    out, sq = None, base
    while count:
        if count & 1:
            out = sq if out is None else out.plus(sq)
        count >>= 1
        if count:
            sq = sq.plus(sq)
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


def _direction(z: float, t: int, interval: float, remove: bool, bound: float) -> pld_lib.LossPmf:
    """One direction of one epoch (module docstring)."""
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
    return _loss_pmf(total, t, interval, remove).truncate(bound)


def epoch_pld(noise_multiplier: float, batches: int, value_discretization_interval: float = 1e-3,
              log_mass_truncation_bound: float = pld_lib.LOG_TAIL_MASS) -> pld_lib.PrivacyLossDistribution:
    """Pessimistic PLD (both directions, add/remove) of one balls-in-bins epoch: ``batches``
    Gaussian steps (noise multiplier sigma / C), each record in one uniformly chosen batch
    (the last few are kept: an accountant asked again for the same epoch does not recompute it)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    t = check_count("batches", batches)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    return _epoch_pld(float(z), t, float(h), float(log_mass_truncation_bound))


@functools.lru_cache(maxsize=16)
def _epoch_pld(z: float, t: int, h: float, log_mass_truncation_bound: float) -> pld_lib.PrivacyLossDistribution:
    if t == 1:
        return pld_lib.from_gaussian_mechanism(z, 1.0, value_discretization_interval=h,
                                               log_mass_truncation_bound=log_mass_truncation_bound)
    bound = float(log_mass_truncation_bound)
    remove = _direction(z, t, h, True, bound)
    add = _direction(z, t, h, False, bound)
    for part in (remove, add):  # shared by the cache: read-only
        part.masses.flags.writeable = False
    return pld_lib.PrivacyLossDistribution(remove, add, bound)


def block_pld(block, neighbouring, value_discretization_interval: float,
              log_mass_truncation_bound: float) -> pld_lib.PrivacyLossDistribution:
    """PLD of one epoch of a :attr:`~silodp.accounting.blocks.Mechanism.BALLS_IN_BINS` block:
    :func:`epoch_pld` under add/remove; under replace-one the un-amplified Gaussian step at shift 2C
    (a record is in exactly one batch: parallel composition), since the replace-one chaining of
    :func:`replace_one_epsilon` is not a PLD."""
    from silodp.accounting import events as ev

    z, t = block.noise_multiplier, block.sample_size
    if ev.relation(neighbouring) == ev.REPLACE_ONE:
        return pld_lib.from_gaussian_mechanism(z, 1.0, ev.REPLACE_ONE, value_discretization_interval,
                                               log_mass_truncation_bound)
    return epoch_pld(z, t, value_discretization_interval, log_mass_truncation_bound)


def add_remove_pld(noise_multiplier: float, batches: int, epochs: int,
                   value_discretization_interval: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
    """``epochs`` independent balls-in-bins epochs (adaptive composition)."""
    e = check_count("epochs", epochs)
    one = epoch_pld(noise_multiplier, batches, value_discretization_interval)
    return one if e == 1 else one.self_compose(e)


def epsilon(noise_multiplier: float, batches: int, epochs: int, delta: float, neighbouring=None,
            value_discretization_interval: float = 1e-4) -> float:
    """Certified epsilon of ``epochs`` balls-in-bins epochs at ``delta``: the allocation PLD under
    add/remove (the default); under replace-one the smaller of :func:`replace_one_epsilon` and the
    un-amplified charge (one Gaussian step at shift 2C per epoch)."""
    from silodp.accounting import events as ev

    pld = add_remove_pld(noise_multiplier, batches, epochs, value_discretization_interval)
    if neighbouring is None or ev.relation(neighbouring) == ev.ADD_OR_REMOVE_ONE:
        return pld.get_epsilon_for_delta(delta)
    plain = pld_lib.from_gaussian_mechanism(noise_multiplier, 1.0, ev.REPLACE_ONE, value_discretization_interval)
    return min(replace_one_epsilon(pld, delta), plain.self_compose(epochs).get_epsilon_for_delta(delta))


def replace_one_epsilon(pld: pld_lib.PrivacyLossDistribution, delta: float, splits: int = 24) -> float:
    """Replace-one epsilon from the add/remove PLD by chaining remove then add (module docstring):
    min over splits of eps_r(d_r) + eps_a(d_a) with d_r + e^{eps_r} d_a <= delta."""
    dl = check_delta("delta", delta)
    best = math.inf
    for frac in np.linspace(0.05, 0.95, splits):
        d_r = frac * dl
        eps_r = pld.remove.epsilon(d_r)
        if math.isinf(eps_r):
            continue
        d_a = (dl - d_r) / math.exp(eps_r)
        best = min(best, eps_r + (pld.add or pld.remove).epsilon(d_a))
    return best


def lower_bound_delta(noise_multiplier: float, batches: int, epochs: int, epsilon: float,
                      replace_one: bool = False) -> float:
    """A rigorous lower bound on delta(eps) of ``epochs`` balls-in-bins (or shuffled) epochs: the
    max-coordinate test of the module docstring, best over tau and the pass count m."""
    z = check_positive("noise_multiplier", noise_multiplier)
    t, e = check_count("batches", batches), check_count("epochs", epochs)
    from scipy.stats import binom

    taus = np.linspace(-2.0, 12.0, 281) * z + 0.5
    log_rest = (t - 1) * log_ndtr(taus / z)
    log_stay_p = log_ndtr((taus - 1.0) / z) + log_rest
    log_stay_q = (log_ndtr((taus + 1.0) / z) + log_rest) if replace_one else t * log_ndtr(taus / z)
    p_p, p_q = -np.expm1(log_stay_p), -np.expm1(log_stay_q)
    m = np.arange(1, e + 1)[:, None]
    sf_p = binom.sf(m - 1, e, p_p[None, :])
    sf_q = binom.sf(m - 1, e, p_q[None, :])
    gap = sf_p - math.exp(epsilon) * sf_q
    return float(max(0.0, np.max(gap) - 1e-12))  # 1e-12: the CDFs' round-off, toward a lower bound


def lower_bound_epsilon(noise_multiplier: float, batches: int, epochs: int, delta: float,
                        replace_one: bool = False) -> float:
    """Largest eps (to 1e-4 relative) at which :func:`lower_bound_delta` still exceeds ``delta``: no sound
    accountant can certify less on this instance."""
    dl = check_delta("delta", delta)
    if lower_bound_delta(noise_multiplier, batches, epochs, 0.0, replace_one) <= dl:
        return 0.0
    return monotone_root(lambda eps: lower_bound_delta(noise_multiplier, batches, epochs, eps, replace_one), dl,
                         1e-3, 1.0, increasing=False, safe="below", rtol=1e-4, name="epsilon")
