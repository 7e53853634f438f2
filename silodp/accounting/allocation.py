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

Discretization (pessimistic by construction: convex order, not rounding). Both directions are
functionals of S = sum_i Y_i under Q, where the Y_i are i.i.d. lognormal with mean 1:
delta_remove(eps) = H_{e^eps}(P || Q) = E_Q[(S / t - e^eps)_+] and
delta_add(eps) = H_{e^eps}(Q || P) = E_Q[(1 - e^eps S / t)_+], both *convex* in S. So any S' that
is larger in convex order (S' = S + a martingale difference) bounds them, and a sum of independent
variables each larger in convex order is larger in convex order. Each Y is put on the grid j d by
splitting each cell's mass between its two ends *keeping its mean* (:func:`_spread_pmf`), and
every re-binning onto a grid twice as coarse (add only) splits each odd point half and half
(:func:`_halve`): martingale spreads, whose error is second order in d (rounding every value up, as before issue 38,
biased the loss by about d per variable: +34% in epsilon at 1000 batches). Remove: the P-law of S is
the size-biased one, E_Q[S / t; S in ds] = E_Q[Y_1; S in ds] by exchangeability (every spread Y_i
alike on one grid, partial sums cut but never re-binned: :func:`_remove_sum`), and
delta_remove(eps) = E_P[(1 - e^{eps} t / S)_+]; any sub-measure of it, with the missing P-mass
charged at +inf loss ((1 - e^{eps - L})_+ <= 1), bounds it: Y past its cap (the size-biased tail,
1e-17 / t of P-mass) and partial sums past the cap are dropped, and 1 - (the mass kept) goes to
+inf. Add: Q-masses at -log(S / t), where (1 - e^eps S / t)_+ also *decreases* in S, so Y past its
grid and partial sums past t e^3 (losses below -3) are moved *down* to the cap; S = 0 (a spread
down to 0) is +inf. Losses are rounded up to the PLD grid, and delta(eps) = E[(1 - e^{eps - L})_+]
is increasing in L and preserved by composing epochs (a convolution of losses). Probability masses
come from the normal CDF (:func:`scipy.special.ndtr`, upper tails from the complement); their
round-off and every convolution's l1 error bound (:func:`silodp.accounting.pld._convolve`) travel
as ``roundoff``, charged to delta. Against Feldman & Shenfeld's ``pld-accounting`` 2.0 (z 0.9,
delta 1e-6): inside its (lower, upper) range at 50-1000 batches, 1-2% below its upper bound.
Below z = 0.5 (log-normal tails so heavy that the grid must span ~1e11) and for a direction whose
spread carries a round-off bound above 1e-7 (the cell shares' cancellation grows with the grid
index), that direction is the rounded PLD of :mod:`silodp.accounting._allocation_rounded` (each
variable rounded up, resp. down: stochastic order, the method before issue 38; sound, looser).

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
from typing import Any, Self

import numpy as np
from scipy.special import log_ndtr, ndtr, ndtri

from silodp.accounting import _allocation_rounded, pld as pld_lib, pld_pairs
from silodp.accounting._numerics import monotone_root
from silodp._validation import check_count, check_delta, check_positive

#: Tail mass beyond the grid of each variable's log-normal (its exact mass, from the normal CDF,
#: goes to +inf loss or down to the cap): 1e-17 per epoch over all t variables, and for the record's own.
_TAIL = 1e-17
_U = 2.0 ** -53


def _spread_pmf(sd_log: float, step: float, cap: float) -> tuple[np.ndarray, float, np.ndarray, float]:
    """Y = exp(N(-sd^2/2, sd^2)) (mean 1, its law under Q) restricted to Y <= n step,
    n = ceil(cap / step), each cell's mass split between its two ends so that its mean is kept (a
    martingale spread: convex order up). Returns (Q-masses q_j at j step, j = 0..n, a bound on
    their l1 error, the P-weights j step q_j of the size-biased law, a bound on their l1 error).

    Cell ((j-1) d, j d] has mass m_j = Phi(u_j) - Phi(u_{j-1}) and first moment
    M_j = Phi(u_j - sd) - Phi(u_{j-1} - sd), u_j = (ln(j d) + sd^2 / 2) / sd; it sends
    j m_j - M_j / d to (j-1) d and M_j / d - (j-1) m_j to j d. Each difference of normal CDFs is
    taken from the nearer tail (a few ulps: 8 u min(F, 1 - F) per end, e_j), so cell j's two
    shares are off by at most 32 u [(j + 1)(m_j + e_j) + (M_j + e'_j) / d], and the two additions
    by u each; the P-weights, at most j d times those."""
    n = int(math.ceil(cap / step))
    edges = np.log(np.arange(1, n + 1) * step)
    centre = 0.5 * sd_log * sd_log

    def cell_masses(shift: float) -> tuple[np.ndarray, np.ndarray]:
        z = (edges + centre) / sd_log - shift  # edges j * step, j = 1..n
        lower, upper = ndtr(z), ndtr(-z)
        lo_prev, up_prev = np.concatenate(([0.0], lower[:-1])), np.concatenate(([1.0], upper[:-1]))
        left = np.concatenate(([z[0]], z[:-1]))
        m = np.where(z <= 0, lower - lo_prev, np.where(left >= 0, up_prev - upper, 1.0 - lo_prev - upper))
        return np.maximum(m, 0.0), np.minimum(lower, upper)

    mass, err_m = cell_masses(0.0)
    moment, err_moment = cell_masses(sd_log)
    j = np.arange(1, n + 1, dtype=float)
    down = np.maximum(j * mass - moment / step, 0.0)  # to (j-1) step
    up = np.maximum(moment / step - (j - 1.0) * mass, 0.0)  # to j step
    q = np.zeros(n + 1)
    q[:-1] += down
    q[1:] += up
    cell = 32.0 * _U * ((j + 1.0) * (mass + err_m) + (moment + err_moment) / step)
    x = np.arange(n + 1) * step
    p = x * q
    q_err = float(np.sum(cell)) + 2.0 * _U * float(np.sum(q))
    p_err = float(np.sum(j * step * cell)) + 3.0 * _U * float(np.sum(p))
    return q, q_err, p, p_err


def _halve(masses: np.ndarray) -> np.ndarray:
    """Values j d onto the grid 2d, keeping every mean: even j to j / 2, odd j half to each
    neighbour (a martingale spread; halving is exact)."""
    if len(masses) % 2:
        masses = np.append(masses, 0.0)
    even, odd = masses[0::2], masses[1::2] * 0.5
    out = np.zeros(len(even) + 1)
    out[:-1] += even + odd
    out[1:] += odd
    return out


def _max_points(t: int) -> int:
    """Grid points of every partial sum: 2^16 up to 100 batches, 2^17 up to 200, 2^18 beyond (the
    spread's error is second order: epsilon within 0.1% of a twice finer grid at z 0.9, 50-1000 batches)."""
    return 1 << min(18, max(16, 16 + math.ceil(math.log2(t / 100.0))))


class _Sum(_allocation_rounded._Sum):
    """A sub-probability law on the grid j * step, j <= cap / step (the rest dropped), with a bound
    ``roundoff`` on the l1 error of its masses; at most ``limit`` points."""

    def __init__(self, masses: np.ndarray, roundoff: float, *, step: float, cap: float, limit: int,
                 down: bool = False) -> None:
        self.masses, self.roundoff, self.step, self.cap, self.limit = masses, roundoff, step, cap, limit
        self.down = down

    def _fit(self) -> Self:
        last = int(self.cap / self.step) + 1
        if len(self.masses) > last:  # past the cap: dropped, or (``down``) moved down to it
            beyond = float(np.sum(self.masses[last:]))
            self.masses = self.masses[:last].copy()
            if self.down:
                self.masses[-1] += beyond
        while len(self.masses) > self.limit:
            self._halve()
        return self

    def _halve(self) -> None:  # (coarsen_to is the rounded sum's)
        self.masses, self.step = _halve(self.masses), 2.0 * self.step
        self.roundoff += 2.0 * _U * float(np.sum(self.masses))

    def plus(self, other: _allocation_rounded._Sum) -> "_Sum":
        step = max(self.step, other.step)
        a, b = self.coarsen_to(step), other.coarsen_to(step)
        out, fresh = pld_lib._convolve(a.masses, a.masses if b is a else b.masses)
        ra, rb = a.roundoff, b.roundoff
        return _Sum(out, ra + rb + ra * rb + fresh, step=step, cap=a.cap, limit=a.limit, down=a.down)._fit()


def _caps(z: float, t: int) -> tuple[float, float]:
    """(the cap of each Y, the cap of every partial sum): past them the P-mass is below 1e-17 each
    (module docstring)."""
    s2 = 1.0 / (z * z)
    sd = math.sqrt(s2)
    y_cap = math.exp(0.5 * s2 - float(ndtri(_TAIL / t)) * sd)  # E[Y; Y > y_cap] = P[shifted Y > y_cap]
    others = math.exp(-0.5 * s2 - float(ndtri(_TAIL / t)) * sd)
    return y_cap, y_cap + others + (t - 1) * (1.0 + 6.0 * math.sqrt(math.expm1(s2)))


def _remove_sum(z: float, t: int, limit: int) -> _Sum:
    """The P-law of S = Y_1 + ... + Y_t (spread, module docstring), t >= 2: the size-biased Y_1
    added to the rest Y_2 + ... + Y_t, on one grid of ``limit`` steps up to the cap.

    Every Y_i has the same spread law on that grid and the partial sums are only *cut* at the cap,
    never re-binned: then the spread sum is a sum of t exchangeable terms, so its size-biased law
    E_Q[S / t; S = s] is exactly E[Y_1; S = s], the convolution below, and cutting keeps a
    sub-measure of it (the missing P-mass is charged at +inf). (Re-binning the rest alone would
    break the exchangeability this identity needs.)"""
    y_cap, cap = _caps(z, t)
    step = cap / limit
    q, q_err, p, p_err = _spread_pmf(1.0 / z, step, y_cap)
    never = int(cap / step) + 2  # partial sums are cut at the cap before they could need re-binning
    rest = _allocation_rounded._power(_Sum(q, q_err, step=step, cap=cap, limit=never)._fit(), t - 1)
    assert rest is not None  # t >= 2
    if rest.step != step:
        raise ArithmeticError("allocation: the remove sum was re-binned")
    out, fresh = pld_lib._convolve(rest.masses, p)
    r = rest.roundoff
    return _Sum(out[:int(cap / step) + 1], r + p_err + r * p_err + fresh, step=step, cap=cap, limit=never)


def _add_sum(z: float, t: int, limit: int) -> _Sum:
    """The Q-law of S (spread), S past t e^3 (losses below -3) moved down to it."""
    add_cap = t * math.exp(3.0)
    step = add_cap / limit
    q, q_err, _, _ = _spread_pmf(1.0 / z, step, add_cap)
    q[-1] += float(ndtr(-(math.log((len(q) - 1) * step) + 0.5 / (z * z)) * z))  # P[Y past the grid], down
    base = _Sum(q, q_err + 2.0 * _U, step=step, cap=add_cap, limit=limit, down=True)._fit()
    out = _allocation_rounded._power(base, t)
    assert out is not None  # t >= 1
    return out


#: Largest round-off (l1, charged to delta) a direction of the spread PLD may carry: above it (small
#: noise, whose heavy-tailed likelihood ratios make the spread's cancellation bound large) that
#: direction is the rounded one of :mod:`silodp.accounting._allocation_rounded` (sound, looser).
_ROUNDOFF = 1e-7
#: Below this noise multiplier the likelihood ratios' tails (log-sd 1/z) stretch the grid so far that
#: the rounded PLD is the tighter (z 0.4, 10 batches: 12.24 against the spread's 12.84; at z 0.5 the
#: spread wins, 9.415 against 9.424 at 30 batches, delta 1e-8).
_SPREAD_MIN_Z = 0.5


def _sums(z: float, t: int) -> tuple[_Sum, _Sum]:
    limit = _max_points(t)
    return _remove_sum(z, t, limit), _add_sum(z, t, limit)


def _loss_pmfs(remove: _Sum, add: _Sum, t: int, interval: float,
               bound: float) -> tuple[pld_lib.LossPmf, pld_lib.LossPmf]:
    """(remove, add): P-mass at log(s / t), Q-mass at -log(s / t), each rounded up to multiples of
    ``interval``; the mass they miss (dropped, past the caps, S = 0 for add) at +inf."""
    out = []
    for sign, total in ((1.0, remove), (-1.0, add)):
        masses = total.masses[1:]  # S = 0: loss -inf (remove: no P-mass there) or +inf (add)
        loss = np.log(np.arange(1, len(total.masses)) * total.step / t)
        idx = np.ceil(sign * loss / interval).astype(np.int64)
        lo = int(idx.min())
        binned = np.bincount(idx - lo, weights=masses)
        inf = max(0.0, 1.0 - math.fsum(masses))
        roundoff = 2.0 * total.roundoff + 4.0 * _U * (1.0 + float(np.sum(masses)))
        out.append(pld_lib.LossPmf(interval, lo, binned, min(1.0, inf), roundoff).truncate(bound))
    return out[0], out[1]


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
        return pld_pairs.from_gaussian_mechanism(z, 1.0, value_discretization_interval=h,
                                               log_mass_truncation_bound=log_mass_truncation_bound)
    bound = float(log_mass_truncation_bound)
    spread = z >= _SPREAD_MIN_Z  # below: heavy-tailed ratios, the spread's grid is too coarse to win
    remove, add = _loss_pmfs(*_sums(z, t), t, h, bound) if spread else (None, None)
    if remove is None or remove.roundoff > _ROUNDOFF:
        remove = _allocation_rounded.direction(z, t, h, True, bound)
    if add is None or add.roundoff > _ROUNDOFF:
        add = _allocation_rounded.direction(z, t, h, False, bound)
    for part in (remove, add):  # shared by the cache: read-only
        part.masses.flags.writeable = False
    return pld_lib.PrivacyLossDistribution(remove, add, bound)


def block_pld(block: Any, neighbouring: Any, value_discretization_interval: float,
              log_mass_truncation_bound: float) -> pld_lib.PrivacyLossDistribution:
    """PLD of one epoch of a :attr:`~silodp.accounting.blocks.Mechanism.BALLS_IN_BINS` block:
    :func:`epoch_pld` under add/remove; under replace-one the un-amplified Gaussian step at shift 2C
    (a record is in exactly one batch: parallel composition), since the replace-one chaining of
    :func:`replace_one_epsilon` is not a PLD."""
    from silodp.accounting import events as ev

    z, t = block.noise_multiplier, block.sample_size
    if ev.relation(neighbouring) == ev.REPLACE_ONE:
        return pld_pairs.from_gaussian_mechanism(z, 1.0, ev.REPLACE_ONE, value_discretization_interval,
                                               log_mass_truncation_bound)
    return epoch_pld(z, t, value_discretization_interval, log_mass_truncation_bound)


def add_remove_pld(noise_multiplier: float, batches: int, epochs: int,
                   value_discretization_interval: float = 1e-3) -> pld_lib.PrivacyLossDistribution:
    """``epochs`` independent balls-in-bins epochs (adaptive composition)."""
    e = check_count("epochs", epochs)
    one = epoch_pld(noise_multiplier, batches, value_discretization_interval)
    return one if e == 1 else one.self_compose(e)


def epsilon(noise_multiplier: float, batches: int, epochs: int, delta: float, neighbouring: Any = None,
            value_discretization_interval: float = 1e-4) -> float:
    """Certified epsilon of ``epochs`` balls-in-bins epochs at ``delta``: the allocation PLD under
    add/remove (the default); under replace-one the smaller of :func:`replace_one_epsilon` and the
    un-amplified charge (one Gaussian step at shift 2C per epoch)."""
    from silodp.accounting import events as ev

    pld = add_remove_pld(noise_multiplier, batches, epochs, value_discretization_interval)
    if neighbouring is None or ev.relation(neighbouring) == ev.ADD_OR_REMOVE_ONE:
        return pld.get_epsilon_for_delta(delta)
    plain = pld_pairs.from_gaussian_mechanism(noise_multiplier, 1.0, ev.REPLACE_ONE, value_discretization_interval)
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
