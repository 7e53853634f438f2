"""PLDs of the other mechanisms dp-accounting users bring: Laplace, discrete Laplace, randomized response.

Each is a symmetric pair (D_alpha(P||Q) = D_alpha(Q||P) and likewise every hockey-stick curve), so
one direction of the PLD suffices. Shifts follow the silodp convention: a parameter is relative to
the per-record contribution bound C, and the relation's sensitivity in units of C
(:func:`silodp.accounting.events.sensitivity`: 1 under add/remove, 2 under replace-one) multiplies
the shift.

* Laplace with scale s = noise_multiplier * C, l1 shift D: eps0 = D / s; the hockey-stick curve is
  delta(eps) = 1 - e^{(eps - eps0) / 2} on [0, eps0), 0 above (dp-accounting's LaplacePrivacyLoss;
  Koskela et al. 2021), and delta(eps) = 1 - e^eps + e^eps delta(-eps) below 0 (symmetry);
  discretized by connect the dots (pessimistic, :func:`silodp.accounting.pld_pairs.connect_the_dots`).
* Discrete Laplace, P(x) = tanh(a / 2) e^{-a |x|} on the integers, integer shift D: the loss
  a(|x - D| - |x|) takes finitely many values, aD with mass 1 / (1 + e^{-a}) (x <= 0), -aD with
  mass e^{-aD} / (1 + e^{-a}) (x >= D) and a(D - 2x) with mass tanh(a / 2) e^{-ax} in between.
* Discrete Gaussian, P(x) ~ e^{-x^2 / (2 sigma^2)} on the integers (Canonne, Kamath & Steinke 2020),
  integer shift D: the loss (D^2 - 2 x D) / (2 sigma^2) at each x of |x| <= K (beyond, the mass of
  P, summed out to K + 40 sigma, is charged to +inf), K covering all but e^bound of each tail;
  the normalizer is summed over the same range (a smaller normalizer only raises the masses).
* k-ary randomized response with noise p (replace-one: the input bucket changes): the loss is
  +-log(A / B), A = 1 - p + p / k, B = p / k, with masses A and B, and 0 with mass (k - 2) B.

Finite losses are rounded *up* to the grid: delta(eps) = E[(1 - e^{eps - L})_+] only grows, so the
PLD stays pessimistic (as dp-accounting's pessimistic estimate). Tested against dp-accounting's PLD.

The lattice. The losses of the discrete mechanisms are integer multiples j g of one step g (discrete
Laplace: g = a, j = |x - D| - |x|; discrete Gaussian: g = D / (2 sigma^2), j = D - 2x; randomized
response: g = log(A / B), j in {1, 0, -1}), and so are the losses of their compositions. When a
composition holds one such mechanism only (:func:`lattice_step`), :func:`pld` places the masses on
that lattice instead of the accountant's grid: the PLD is then the mechanism's exact one (no
rounding up; the grid's is never smaller), a few points per step instead of 2 L / interval, and its
self-composition one small FFT. The step as computed, g', is within c u g of g (c: the operations
that computed it; u the unit round-off) and each loss value (offset + i) g' is rounded once more,
so every computed loss is within (c + 1) u |j| g of the true one; as delta(eps) = E[(1 - e^{eps -
L})_+] moves by at most e^{eps - l} <= 1 per unit of a loss l >= eps, that distance summed over the
steps bounds the change of delta, and it is charged like round-off ((c + 1) u max |j| g per step in
``roundoff``, composed as round-off is: at least T times over T steps). Randomized response
composed alone needs no PLD at all: :func:`randomized_response_epsilon` answers from its exact
composed masses (the pld accountant asks it first).
"""

from __future__ import annotations

import dataclasses
import math
import operator
from typing import Any

import numpy as np

from silodp.accounting import events as ev, pld as pld_lib, pld_pairs
from silodp.accounting.blocks import Block, Mechanism, Sampling, UnsupportedEventError

#: The mechanisms of this module.
KINDS = frozenset({Mechanism.LAPLACE, Mechanism.DISCRETE_LAPLACE, Mechanism.RANDOMIZED_RESPONSE,
                   Mechanism.DISCRETE_GAUSSIAN})
#: Most integer points a discrete Gaussian's support may span.
_MAX_SUPPORT = 10_000_000


def _max_loss(block: Block, relation: ev.NeighboringRelation) -> float:
    shift = ev.sensitivity(relation)
    if block.kind == Mechanism.LAPLACE:
        return shift / block.noise_multiplier
    if block.kind == Mechanism.DISCRETE_LAPLACE:
        a, d = block.params
        return a * d * shift
    if block.kind == Mechanism.DISCRETE_GAUSSIAN:
        sigma, d, k = _dgauss_support(block, relation, pld_lib.LOG_TAIL_MASS)
        return (d * d + 2.0 * k * d) / (2.0 * sigma * sigma)
    p, k = block.params
    return math.log1p(k * (1.0 - p) / p)


#: :func:`laplace_pure_epsilon` answers when the pure bound is within this share of the true epsilon.
PURE_GAP = 1e-6


def laplace_pure_epsilon(block: Block, relation: ev.NeighboringRelation, delta: float) -> float | None:
    """``count`` eps0 for ``count`` Laplace steps of pure loss bound eps0 = sensitivity / b (each step is
    eps0-DP, Dwork & Roth 2014, Thm 3.6; pure DP composes additively, their Thm 3.16), where that is
    within :data:`PURE_GAP` of the true epsilon at ``delta``; else None (compute the PLD).

    Tightness: one step's loss is eps0 exactly with probability 1/2 (x on the far side of both
    means; the curve's atom: delta(eps) = 1 - e^{(eps - eps0)/2} near eps0), so T steps' loss is T eps0
    with probability >= 2^-T and delta(eps) >= 2^-T (1 - e^{eps - T eps0}): every (eps, delta)
    certificate has eps >= T eps0 + ln(1 - 2^T delta). The answer is sound (an upper bound) always;
    it is returned only when it exceeds that lower bound by at most ``PURE_GAP`` T eps0."""
    if block.kind != Mechanism.LAPLACE or getattr(block, "sampling", None) not in (None, Sampling.NONE):
        return None
    steps = block.count
    if steps * math.log(2.0) + math.log(delta) >= 0.0:
        return None
    total = steps * _max_loss(block, relation)
    gap = -math.log1p(-math.exp(steps * math.log(2.0) + math.log(delta)))
    return total if gap <= PURE_GAP * total else None


def _dgauss_support(block: Block, relation: ev.NeighboringRelation, log_tail: float) -> tuple[float, int, int]:
    sigma, d = block.params[0], block.params[1] * int(ev.sensitivity(relation))
    return sigma, d, int(math.ceil(math.sqrt(-2.0 * log_tail) * sigma)) + d


def check(block: Block, relation: ev.NeighboringRelation, interval: float) -> None:
    """UnsupportedEventError for a block this module cannot turn into a PLD (before allocating)."""
    if block.kind == Mechanism.DISCRETE_GAUSSIAN:
        sigma, d, k = _dgauss_support(block, relation, pld_lib.LOG_TAIL_MASS)
        top = _max_loss(block, relation)
        if 2 * k + 80 * sigma > _MAX_SUPPORT or top > pld_lib.MAX_LOSS or 2.0 * top / interval > pld_lib.MAX_POINTS:
            raise UnsupportedEventError(f"discrete-gaussian: sigma={sigma:g}, sensitivity {block.params[1]} needs "
                                        "too many support or grid points for the pld accountant")
        return
    if block.kind == Mechanism.RANDOMIZED_RESPONSE and ev.relation(relation) != ev.REPLACE_ONE:
        raise UnsupportedEventError("randomized response is defined under REPLACE_ONE only (as dp-accounting)")
    top = _max_loss(block, relation)
    if top > pld_lib.MAX_LOSS or 2.0 * top / interval > pld_lib.MAX_POINTS:
        raise UnsupportedEventError(f"{block.kind.value}: privacy losses reach {top:.3g}, more than the pld "
                                    f"accountant's grid holds at discretization {interval:g} (epsilon is huge)")
    if block.kind == Mechanism.DISCRETE_LAPLACE and block.params[1] * ev.sensitivity(relation) > pld_lib.MAX_POINTS:
        raise UnsupportedEventError(f"discrete-laplace: sensitivity {block.params[1]} has too many loss values")


def _laplace_delta(eps: np.ndarray, eps0: float) -> np.ndarray:
    pos = np.abs(eps)
    above = np.where(pos < eps0, -np.expm1((pos - eps0) / 2.0), 0.0)  # delta(|eps|)
    return np.where(eps >= 0, above, -np.expm1(eps) + np.exp(eps) * above)


def _dgauss_weights(block: Block, relation: ev.NeighboringRelation, log_tail: float) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """The discrete Gaussian's points x (out to K + 40 sigma), their normalized masses, the mask
    |x| <= K and the integer shift D."""
    sigma, d, k = _dgauss_support(block, relation, log_tail)
    wide = k + int(math.ceil(40.0 * sigma))
    x = np.arange(-wide, wide + 1, dtype=float)
    log_w = -x * x / (2.0 * sigma * sigma)
    w = np.exp(log_w - log_w.max())
    w /= float(np.sum(w))
    return x, w, np.abs(x) <= k, d


def _discrete(losses: np.ndarray, masses: np.ndarray, interval: float) -> pld_lib.LossPmf:
    """Point masses at ``losses``, each rounded up to the grid (pessimistic)."""
    idx = np.ceil(losses / interval).astype(np.int64)
    idx = np.where(idx * interval < losses, idx + 1, idx)  # the quotient's rounding: still up
    first = int(idx.min())
    out = np.zeros(int(idx.max()) - first + 1)
    np.add.at(out, idx - first, masses)
    return pld_lib.LossPmf(interval, first, out, 0.0)


#: The mechanisms whose losses lie on a lattice of their own (module docstring).
LATTICE_KINDS = frozenset({Mechanism.DISCRETE_LAPLACE, Mechanism.RANDOMIZED_RESPONSE, Mechanism.DISCRETE_GAUSSIAN})
#: Operations (in units u) behind each lattice step as computed: a is exact, D / (2 sigma^2) two
#: roundings, log1p(k (1 - p) / p) at most four (three roundings and log1p's ulp).
_STEP_UNITS = {Mechanism.DISCRETE_LAPLACE: 0.0, Mechanism.DISCRETE_GAUSSIAN: 2.0, Mechanism.RANDOMIZED_RESPONSE: 4.0}


def lattice_step(block: Any, relation: ev.NeighboringRelation) -> float | None:
    """The step g of the lattice that holds every loss of ``block`` (a discrete mechanism of
    :data:`LATTICE_KINDS`), else None."""
    kind = getattr(block, "kind", None)
    if kind not in LATTICE_KINDS:
        return None
    if kind == Mechanism.DISCRETE_LAPLACE:
        return float(block.params[0])
    if kind == Mechanism.DISCRETE_GAUSSIAN:
        sigma, d, _ = _dgauss_support(block, relation, pld_lib.LOG_TAIL_MASS)
        return d / (2.0 * sigma * sigma)
    return _max_loss(block, relation)


def _on_lattice(j: np.ndarray, masses: np.ndarray, step: float, units: float) -> pld_lib.LossPmf:
    """Point masses at the losses ``j`` * ``step`` (``j`` integers), their distance to the true
    losses charged (module docstring)."""
    first = int(j.min())
    # the loss values j are distinct (each mechanism's j below), so each point holds one mass: bincount
    # (it adds in index order, 0 + m = m) places the same values as np.add.at, in a fraction of its time
    out = np.bincount(j - first, weights=masses, minlength=int(j.max()) - first + 1)
    charge = (units + 1.0) * pld_lib._U * float(np.max(np.abs(j))) * step
    return pld_lib.LossPmf(step, first, out, 0.0, charge)


def pld(block: Block, relation: ev.NeighboringRelation, interval: float, log_mass_truncation_bound: float,
        lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    """The pessimistic PLD of one step of ``block`` (module docstring); ``lattice``: on the
    mechanism's own lattice (:func:`lattice_step`; exact, for a composition of this mechanism
    alone) rather than the grid of ``interval``."""
    check(block, relation, interval)
    top = _max_loss(block, relation)
    step = lattice_step(block, relation) if lattice else None
    if step is not None:
        units = _STEP_UNITS[block.kind]
        if block.kind == Mechanism.DISCRETE_LAPLACE:
            a, d = block.params[0], block.params[1] * int(ev.sensitivity(relation))
            x = np.arange(1, d)
            j = np.concatenate([[d, -d], d - 2 * x]).astype(np.int64)
            masses = np.concatenate([[1.0 / (1.0 + math.exp(-a)), math.exp(-a * d) / (1.0 + math.exp(-a))],
                                     math.tanh(a / 2.0) * np.exp(-a * x)])
            one = _on_lattice(j, masses, step, units)
        elif block.kind == Mechanism.DISCRETE_GAUSSIAN:
            x, w, inside, d = _dgauss_weights(block, relation, log_mass_truncation_bound)
            one = _on_lattice((d - 2 * x[inside]).astype(np.int64), w[inside], step, units)
            one = dataclasses.replace(one, infinity_mass=min(1.0, float(np.sum(w[~inside]))))
        else:
            p, k = block.params
            one = _on_lattice(np.array([1, -1, 0]), np.array([1.0 - p + p / k, p / k, (k - 2) * p / k]), step, units)
        return pld_lib.PrivacyLossDistribution(one.truncate(log_mass_truncation_bound), None, log_mass_truncation_bound)
    if block.kind == Mechanism.LAPLACE:
        first, last = math.floor(-top / interval), math.ceil(top / interval)
        one = pld_pairs.connect_the_dots(lambda eps: _laplace_delta(eps, top), first, last, interval)
    elif block.kind == Mechanism.DISCRETE_LAPLACE:
        a, d = block.params[0], block.params[1] * int(ev.sensitivity(relation))
        x = np.arange(1, d)
        losses = np.concatenate([[a * d, -a * d], a * (d - 2.0 * x)])
        masses = np.concatenate([[1.0 / (1.0 + math.exp(-a)), math.exp(-a * d) / (1.0 + math.exp(-a))],
                                 math.tanh(a / 2.0) * np.exp(-a * x)])
        one = _discrete(losses, masses, interval)
    elif block.kind == Mechanism.DISCRETE_GAUSSIAN:
        x, w, inside, d = _dgauss_weights(block, relation, log_mass_truncation_bound)
        sigma = block.params[0]
        one = _discrete((d * d - 2.0 * x[inside] * d) / (2.0 * sigma * sigma), w[inside], interval)
        one = dataclasses.replace(one, infinity_mass=min(1.0, float(np.sum(w[~inside]))))
    else:
        p, k = block.params
        b = p / k
        losses = np.array([top, -top, 0.0])
        masses = np.array([1.0 - p + b, b, (k - 2) * b])
        one = _discrete(losses, masses, interval)
    return pld_lib.PrivacyLossDistribution(one.truncate(log_mass_truncation_bound), None, log_mass_truncation_bound)


#: Longest composition of randomized response that :func:`randomized_response_epsilon` answers (its
#: direct convolutions cost about (2T)^2 multiply-adds); a longer one takes the PLD's FFT.
RR_DIRECT_STEPS = 512
#: :func:`randomized_response_epsilon` answers only when every positive composed mass is at least
#: this (far above float64's underflow: then no product it forms underflows, see the function).
_RR_TINY = 2.0 ** -900


def randomized_response_epsilon(block: Block, relation: ev.NeighboringRelation, delta: float) -> float | None:
    """The epsilon at ``delta`` of ``block.count`` randomized-response steps (p, k) composed alone,
    from the exact composed distribution of the privacy loss; None where this function does not
    answer (another mechanism, more than :data:`RR_DIRECT_STEPS` steps, p = 1, masses near underflow):
    the PLD then answers.

    The loss is j g, j in [-T, T], g = log(A / B) with A = 1 - p + p / k, B = p / k, C = (k - 2) p / k
    the masses of one step at +g, -g and 0 (module docstring); the composed masses P(j) are the T-th
    convolution power of (B, C, A) (a trinomial). The other dataset's masses are P(j) e^{-jg} = P(-j)
    (the mechanism is symmetric). For every m, f_m(eps) = sum_{j >= m} P(j) (1 - e^{eps - jg})
    = S0(m) - e^eps S1(m), with S0(m) = sum_{j >= m} P(j) and S1(m) = sum_{j >= m} P(-j), omits only
    nonnegative terms of the hockey stick delta(eps) = E[(1 - e^{eps - L})_+] and adds only
    nonpositive ones, with equality at m the first j with jg > eps: delta(eps) = max_m f_m(eps) (the
    curve of :mod:`silodp.accounting.pld`'s module docstring, Koskela, Jalko & Honkela 2020;
    dp-accounting's PLD of randomized response is the same distribution, rounded up to its grid).
    So delta(eps) <= delta exactly when eps >= log((S0(m) - delta) / S1(m)) for every m with
    S0(m) > delta: epsilon is the largest of those
    logarithms (0 if none), and neither g nor any loss value is ever computed.

    Round-off (charged, never assumed away): A, B, C are within relative 3u of the true masses; the
    masses are >= 0, so the convolution power (:func:`silodp.accounting.pld.convolution_power`,
    direct convolutions) is within its relative bound of the power of the computed step, that
    within (1 + 3u)^T of the true one (k = 2: the binomial's recurrence, :func:`_rr_masses`), and
    each cumulative sum within relative
    gamma_n = n u / (1 - n u) (Higham 2002, eq. 3.5, Lemma 3.4: sums of nonnegative terms).
    Nothing underflows: every product formed is the mass of a path of at most T steps, each step's
    mass >= B (A > B, and C >= B where k > 2), so >= B^T, which is at most the smallest final mass,
    checked >= 2^-900. With S0, S1 within relative r, S0 <= S0~ / (1 - r) and S1 >= S1~ / (1 + r)
    are used, S0~ / (1 - r) computed as S0~ (1 + 8u) / (1 - r) (at least it after that factor's and
    the product's four roundings, so no cancellation in S0 - delta can undo them: that subtraction
    rounds relative to its result); the subtraction, the products, the division and the logarithm
    then move log((S0 - delta) / S1) by a few u (1 + eps), covered by an upward margin of 16u (1 + eps)."""
    if block.kind != Mechanism.RANDOMIZED_RESPONSE or ev.relation(relation) != ev.REPLACE_ONE:
        return None
    p, k = block.params
    steps = block.count
    if steps > RR_DIRECT_STEPS or not 0.0 < p < 1.0:
        return None
    masses, err = _rr_masses(p, int(k), steps)
    if masses is None:
        return None
    u = pld_lib._U
    n = len(masses)
    r = (1.0 + err) * (1.0 + pld_lib.gamma(n, u)) - 1.0  # and the cumulative sums'
    scale_up, scale_down = (1.0 + 8.0 * u) / (1.0 - r), 1.0 + r
    above = [0.0] * n  # S0 at each point, from the top
    total = 0.0
    for i in range(n - 1, -1, -1):
        total += masses[i]
        above[i] = total
    eps, mirrored = 0.0, 0.0  # mirrored: S1 at point i = the masses at points <= n - 1 - i
    for i in range(n - 1, -1, -1):
        mirrored += masses[n - 1 - i]
        num = above[i] * scale_up - delta
        if num > 0.0:
            eps = max(eps, math.log(num * scale_down / mirrored))
    return max(0.0, eps + 16.0 * u * (1.0 + abs(eps))) if eps > 0.0 else 0.0


def _rr_masses(p: float, k: int, steps: int) -> tuple[list[float] | None, float]:
    """The composed masses of :func:`randomized_response_epsilon` at its points j (k = 2: j = 2n - T,
    n = 0..T, the binomial; else j = -T..T, the trinomial), each within the returned relative
    error of the true mass; None where a positive mass is below :data:`_RR_TINY`.

    k = 2 (no zero atom): P(n) = C(T, n) A^n B^(T - n) by P(0) = B^T (binary powering: at most 2T
    roundings, and B's own u T times) and P(n + 1) = P(n) ((T - n) / (n + 1)) (A / B): per step three
    roundings and the ratio's error (A within 3u, B within u, the division u: 5u), so every mass is
    within gamma_(11T + 12). k > 2: the convolution power of (B, C, A)
    (:func:`silodp.accounting.pld.convolution_power`), the step's masses within gamma_3 each."""
    u = pld_lib._U
    b = p / k
    a = (1.0 - p) + b
    if k == 2:
        low = pld_lib.binary_power(b, steps, operator.mul)
        if not low >= _RR_TINY:
            return None, 0.0
        ratio = a / b
        masses = [low]
        for n in range(steps):
            low = low * ((steps - n) / (n + 1)) * ratio
            masses.append(low)
        return masses, pld_lib.gamma(11 * steps + 12, u)
    one = np.array([b, (k - 2) * b, a])  # losses -g, 0, +g
    out, power_err = pld_lib.convolution_power(one, steps)
    if not float(out.min()) >= _RR_TINY:
        return None, 0.0
    return out.tolist(), (1.0 + power_err) * (1.0 + pld_lib.gamma(3, u)) ** steps - 1.0
