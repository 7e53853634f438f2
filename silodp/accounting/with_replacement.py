"""The certificate for Gaussian sums over batches drawn *with replacement* (paper Alg 1, 3, 11).

A batch is m i.i.d. uniform draws from n records; the changed record (contribution a in D, b in
D', norms <= C) is drawn K ~ Bin(m, 1/n) times; the release is the sum plus N(0, sigma^2 I),
sigma = z C. The multiplicity K is *not* released, and this bound does not charge it as if it
were (the labelled mixture sum_k P[K = k] PLD(N(2kC) vs N(0)) does, and has no amplification of
epsilon at all).

Theorem. With p_k = P[K = k], gamma = 1 - p_0, pi_k = p_k / gamma (k >= 1), d = 2 / z, for every
e >= 1 and every pair of neighbouring datasets, both H_e(P || Q) and H_e(Q || P) are at most

    f(e) = gamma [(1 - beta) T(alpha) + beta L(alpha)],  alpha = 1 + (e - 1) / gamma, beta = e / alpha,
    T(alpha) = H_alpha(sum_k pi_k N(k d, 1) || N(0, 1)),
    L(alpha) = sum_k pi_k H_alpha(N(k d, 1) || N(0, 1)).

Proof. (1) Draw the m "other" records W_1..W_m i.i.d. uniform among the n - 1 others, independent
of K; given K = k the batch is the changed record k times and W_1..W_{m-k}. So (P, Q) is the
average over w of (P_w, Q_w), P_w = sum_k p_k N(mu_k), Q_w = sum_k p_k N(nu_k), with
mu_k = k a + S_{m-k}, nu_k = k b + S_{m-k}, S_j = w_1 + ... + w_j, and by joint convexity of
H_e it suffices to bound every (P_w, Q_w). (2) The K = 0 component R = N(mu_0) = N(nu_0) is
common: P_w = p_0 R + gamma A, Q_w = p_0 R + gamma B (A, B the K >= 1 parts). Advanced joint
convexity (Balle, Barthe & Gaboardi 2018, Thm 2) gives
H_e(P_w || Q_w) = gamma H_alpha(A || (1 - beta) R + beta B), and joint convexity in the second
argument (A = (1 - beta) A + beta A) bounds it by gamma [(1 - beta) H_alpha(A || R) + beta H_alpha(A || B)].
(3) H_alpha(A || B) <= sum_k pi_k H_alpha(N(mu_k) || N(nu_k)) (joint convexity, component by
component), and |mu_k - nu_k| = k |a - b| <= 2kC: at most L(alpha) in units of sigma. (4)
H_alpha(A || R) = E[(sum_k pi_k Y_k - alpha)_+] over X ~ R, Y_k = exp(<mu_k - mu_0, X - mu_0> / sigma^2
- r_k^2 / 2), r_k = |mu_k - mu_0| / sigma <= k d (a walk of k steps a - w_j, each of norm
<= 2C). Each Y_k is lognormal with mean 1 and log-variance r_k^2; a sum with any dependence is below
the comonotonic sum of the same marginals in convex order (Kaas, Dhaene & Goovaerts 2000; Dhaene,
Denuit, Goovaerts, Kaas & Vyncke 2002), whose stop-loss is the minimum over retentions
sum_k pi_k d_k = alpha of sum_k pi_k E(Y_k - d_k)_+ (ibid.), each term increasing in r_k (exp(B_t - t / 2) is a martingale, so the
lognormals increase in convex order with r_k). Hence H_alpha(A || R) <= T(alpha), the collinear
walk r_k = k d. The reverse direction is the same argument with a and b exchanged
(|nu_k - nu_0| <= 2kC, and the Gaussian pairs in L are symmetric). QED.

The bound is tight when K <= 1 surely (then T = L and f is the curve of the pair attained by all
others equal to b, as for sampling without replacement). It is charged as the *symmetric* pair
with curve f in both directions (:func:`silodp.accounting.pld_pairs.symmetric_loss_pmf`: f need not be
convex; its convex minorant is used), so a step's orientation may change from step to step.
Multiplicities beyond the binomial's 1 - e^bound quantile are released (a labelled component of
infinite loss). A rigorous lower bound (every other record at b) is
:mod:`silodp.accounting.replacement_lower`; on issue 23's case (n 40, m 8, z 6, 25 steps, delta
1e-6) this certificate is 2.56 against a lower bound of 1.75 (the labelled mixture: 6.16).

Numerics. T's threshold x*(alpha) (the root of log sum_k pi_k e^{k d x - k^2 d^2 / 2} = ln alpha, convex and
increasing in x) is found by Newton's method from the right and bracketed, x_lo <= x* <= x_hi,
by evaluating the loss at both ends; T(alpha) <= P_A(X > x_lo) - alpha Q(X > x_hi) is then an upper
bound whatever the bracket's width. The curve is raised by 1e-9 relative for the tails' few-ulp
errors.
"""

from __future__ import annotations

import math

import numpy as np
from scipy.special import log_ndtr

from silodp.accounting import _binomial
from silodp.accounting._numerics import logsumexp_rows
from silodp.accounting import pld, pld_pairs
from silodp._validation import check_positive

#: Newton steps on the threshold (quadratic convergence from a bound within ~k d of the root).
_NEWTON = 40
#: The curve is evaluated on every _STRIDE-th grid point (chords between: second order, sound).
_STRIDE = 16
#: Up to this many grid points per side the curve is evaluated at every one.
_FINE_POINTS = 50_000
#: Below this P[K >= 1] every draw is charged as releasing the record (delta += P[K >= 1]).
_RARE = 1e-12
#: Most grid points per side the certificate's losses may span (:func:`check_grid`).
MAX_GRID = 4_000_000
#: Relative raise of the computed curve (the log-space tails' round-off, a few ulps each).
_SLACK = 1e-9


class Profile:
    """The theorem's f(e), e = e^eps, for a multiplicity law ``weights`` (p_0, p_1, ..., p_kmax,
    summing to 1) at shift ``shift`` = 2 / z per draw, in units of sigma."""

    def __init__(self, weights: np.ndarray, shift: float):
        w = np.asarray(weights, dtype=float)
        self.gamma = float(1.0 - w[0])
        self.k = np.arange(1, len(w))
        self.log_pi = np.log(np.maximum(w[1:], 1e-300)) - math.log(self.gamma)
        self.pi = np.exp(self.log_pi)
        self.means = self.k * float(shift)

    def _loss(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """log sum_k pi_k N(k d)/N(0) at x, and its derivative."""
        terms = self.log_pi + self.means * x[:, None] - 0.5 * self.means ** 2
        value = logsumexp_rows(terms)
        return value, np.sum(np.exp(terms - value[:, None]) * self.means, axis=1)

    def _threshold(self, log_alpha: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """A bracket x_lo <= x* <= x_hi of the root of the loss = ln alpha (checked at both ends)."""
        d = self.means[0]
        x = (log_alpha - self.log_pi[0]) / d + 0.5 * d  # the k = 1 term alone reaches ln alpha here: x >= x*
        for _ in range(_NEWTON):  # convex increasing: from the right, Newton stays right of the root
            value, slope = self._loss(x)
            step = (value - log_alpha) / slope
            x = x - step
            if np.all(np.abs(step) <= 1e-13 * (1.0 + np.abs(x))):
                break
        width = 1e-9 * (1.0 + np.abs(x))
        hi, lo = x + width, x - width
        for _ in range(60):  # widen until the loss brackets ln alpha at both ends
            up, down = self._loss(hi)[0] < log_alpha, self._loss(lo)[0] > log_alpha
            if not (np.any(up) or np.any(down)):
                return lo, hi
            width = np.where(up | down, 4.0 * width, width)
            hi, lo = x + width, x - width
        raise ArithmeticError("with-replacement threshold did not bracket its root")

    def mixture_curve(self, alpha: np.ndarray) -> np.ndarray:
        """An upper bound on T(alpha) (the module docstring's bracket)."""
        log_alpha = np.log(alpha)
        lo, hi = self._threshold(log_alpha)
        log_p = logsumexp_rows(self.log_pi + log_ndtr(self.means - lo[:, None]))
        log_q = log_ndtr(-hi)
        return np.maximum(np.exp(log_p) * -np.expm1(np.minimum(log_alpha + log_q - log_p, 0.0)), 0.0)

    def labelled_curve(self, alpha: np.ndarray) -> np.ndarray:
        """L(alpha): the Gaussian curves at shifts k d (closed form, log space)."""
        log_alpha = np.log(alpha)
        out = np.zeros_like(alpha)
        for pi, mean in zip(self.pi, self.means):
            out += pi * pld_pairs.GaussianPair(1.0, 0.0, 1.0 / mean).delta(log_alpha)
        return out

    def __call__(self, epsilon: np.ndarray) -> np.ndarray:
        """f(e^eps) for eps >= 0 (raised by :data:`_SLACK`)."""
        e = np.exp(np.asarray(epsilon, dtype=float))
        alpha = 1.0 + (e - 1.0) / self.gamma
        beta = e / alpha
        out = self.gamma * ((1.0 - beta) * self.mixture_curve(alpha) + beta * self.labelled_curve(alpha))
        return out * (1.0 + _SLACK)


def _profile(z: float, m: int, n: int, h: float, bound: float) -> tuple[Profile, float, float]:
    """The theorem's profile (multiplicities up to the binomial's 1 - e^bound quantile), the mass
    past them (released) and the largest loss the PLD holds (the profile below e^bound beyond)."""
    kmax = max(1, min(m, _binomial.isf(math.exp(bound), m, 1.0 / n)))
    tail = float(_binomial.sf(kmax, m, 1.0 / n))  # released: infinite loss
    weights = np.array([float(_binomial.pmf(k, m, 1.0 / n)) for k in range(kmax + 1)]) / (1.0 - tail)
    profile = Profile(weights, 2.0 / z)
    top = kmax * (2.0 / z) * (kmax * (2.0 / z) / 2.0 + math.sqrt(-2.0 * bound)) + 1.0  # the k_max walk's loss at its tail
    top = min(top, pld.MAX_LOSS)
    while top > h and float(profile(np.array([top / 2]))[0]) <= math.exp(bound):
        top /= 2.0
    return profile, tail, top


def check_grid(noise_multiplier: float, sample_size: int, dataset_size: int, value_discretization_interval: float,
               log_mass_truncation_bound: float = pld.LOG_TAIL_MASS) -> None:
    """ValueError (naming ``noise_multiplier``) where the certificate's losses span more than
    :data:`MAX_GRID` grid points per side (n 10, m 30, z 1: the largest loss 600, 6e6 points at
    1e-4, about 10-16 s to build and far more to compose); the pld accountant asks it before
    :func:`gaussian_pld` evaluates anything (so that one is not a candidate there: rdp and advanced
    answer), a direct call of :func:`gaussian_pld` still builds it."""
    z, m, n, h = float(noise_multiplier), int(sample_size), int(dataset_size), float(value_discretization_interval)
    if n == 1:
        top = 0.5 * (2.0 * m / z) ** 2 + 20.0 * (2.0 * m / z)  # one Gaussian at shift 2 m C, tails included
    elif -math.expm1(m * math.log1p(-1.0 / n)) < _RARE:
        return
    else:
        top = _profile(z, m, n, h, float(log_mass_truncation_bound))[2]
    if top / h > MAX_GRID or top >= pld.MAX_LOSS:
        raise ValueError(f"noise_multiplier: {z:g} with {m} draws with replacement from {n} records gives privacy "
                         f"losses up to {top:.3g} ({top / h:.3g} grid points at value_discretization_interval {h:g}, "
                         f"more than {MAX_GRID}): too many for the pld accountant; use a larger noise, 'rdp' or "
                         "'advanced'")


def gaussian_pld(noise_multiplier: float, sample_size: int, dataset_size: int,
                 value_discretization_interval: float = 1e-4,
                 log_mass_truncation_bound: float = pld.LOG_TAIL_MASS) -> pld.PrivacyLossDistribution:
    """The module's certificate for one step as a symmetric PLD (``noise_multiplier`` = sigma / C)."""
    z = check_positive("noise_multiplier", noise_multiplier)
    h = check_positive("value_discretization_interval", value_discretization_interval)
    m, n = int(sample_size), int(dataset_size)
    if m < 1 or n < 1:
        raise ValueError(f"sample_size and dataset_size must be >= 1, got {m}, {n}")
    bound = float(log_mass_truncation_bound)
    if n == 1:  # every draw is the changed record: K = m surely, one Gaussian at shift 2 m C (exact)
        from silodp.accounting import events as ev

        return pld_pairs.from_gaussian_mechanism(z / m, 1.0, ev.REPLACE_ONE, h, bound)
    drawn = -math.expm1(m * math.log1p(-1.0 / n))  # P[K >= 1], without cancellation
    if drawn < _RARE:  # too rare for the profile's arithmetic: a draw is charged as no privacy at all
        return pld.mixture([(1.0 - drawn, pld.identity(h, bound)), (drawn, pld.non_private(h, bound))])
    profile, tail, top = _profile(z, m, n, h, bound)
    curve = (lambda eps: (1.0 - tail) * profile(eps) + tail) if tail > 0 else profile
    stride = _STRIDE if top / h > _FINE_POINTS else 1  # a narrow range: every point (cheap)
    return pld.PrivacyLossDistribution(pld_pairs.symmetric_loss_pmf(curve, top, h, stride), None, bound)
