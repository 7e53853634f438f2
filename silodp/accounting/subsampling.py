"""Privacy amplification by subsampling for (eps, delta)-DP (Balle, Barthe & Gaboardi 2018).

All three results follow from BBG18's *advanced joint convexity* (their Theorem 2): if the
differing record enters the minibatch with probability gamma, a step that is (eps, delta)-DP on
the minibatch is (log(1 + gamma (e^eps - 1)), gamma * delta)-DP on the dataset.

* Poisson sampling with rate q (BBG18 Thm 8 for add/remove, Thm 9-style for replace-one): gamma = q.
* Sampling m of n *without* replacement under replace-one (BBG18 Thm 9): gamma = m / n.
* Sampling m indices *with* replacement under replace-one (BBG18 Thm 10): gamma = 1 - (1 - 1/n)^m,
  and the record may be drawn k times (k ~ Binomial(m, 1/n)), so the delta term mixes the *group*
  privacy profile: delta' = sum_k P[k] * delta_k(eps), where delta_k is the profile of the base
  mechanism on inputs differing in k entries. For the Gaussian mechanism delta_k(eps) is the
  analytic profile at sensitivity k * D (:func:`with_replacement_gaussian_delta`).

The paper's Algorithms 1, 3 and 11 sample with replacement; dp-accounting's RDP accountant has no
event for it, which is why silodp's ``advanced`` accountant uses Thm 10 for them.
"""

from __future__ import annotations

import math

import numpy as np

from silodp.accounting import _binomial
from silodp._validation import check_count, check_nonnegative, check_positive, check_probability
from silodp.accounting.gaussian import analytic_log_delta


def amplify(epsilon: float, delta: float, gamma: float) -> tuple[float, float]:
    """(log(1 + gamma (e^eps - 1)), gamma delta): a step hit with probability ``gamma`` (BBG18 Thm 2)."""
    eps = check_nonnegative("epsilon", epsilon)
    dl = check_nonnegative("delta", delta)
    g = check_probability("gamma", gamma)
    return math.log1p(g * math.expm1(eps)), g * dl


def poisson(epsilon: float, delta: float, q: float) -> tuple[float, float]:
    """Poisson subsampling with rate ``q`` (BBG18 Thm 8)."""
    return amplify(epsilon, delta, check_probability("q", q))


def without_replacement(epsilon: float, delta: float, sample_size: int, dataset_size: int) -> tuple[float, float]:
    """``sample_size`` of ``dataset_size`` records without replacement, replace-one relation (BBG18 Thm 9)."""
    m = check_count("sample_size", sample_size)
    n = check_count("dataset_size", dataset_size)
    if m > n:
        raise ValueError(f"sample_size: must be <= dataset_size, got {m} > {n}")
    return amplify(epsilon, delta, m / n)


def with_replacement_gamma(sample_size: int, dataset_size: int) -> float:
    """Probability that a given record is drawn at least once: 1 - (1 - 1/n)^m."""
    m = check_count("sample_size", sample_size)
    n = check_count("dataset_size", dataset_size)
    return -math.expm1(m * math.log1p(-1.0 / n)) if n > 1 else 1.0


def with_replacement_gaussian_delta(
    epsilon: float, noise_multiplier: float, sample_size: int, dataset_size: int, tail: float = 1e-15
) -> float:
    """delta'(eps') of a Gaussian sum over a with-replacement minibatch (BBG18 Thm 10), replace-one.

    ``noise_multiplier`` is sigma over the replace-one sensitivity D of one draw's contribution.
    eps' = ``epsilon`` maps to the base level eps = log(1 + (e^eps' - 1)/gamma); multiplicities k
    beyond the (1 - ``tail``) quantile are charged delta_k = 1 (sound).
    """
    eps_out = check_nonnegative("epsilon", epsilon)
    z = check_positive("noise_multiplier", noise_multiplier)
    m = check_count("sample_size", sample_size)
    n = check_count("dataset_size", dataset_size)
    gamma = with_replacement_gamma(m, n)
    # eps = log(1 + (e^eps' - 1)/gamma), written to stay finite for large eps'
    eps_base = eps_out - math.log(gamma) + math.log1p(-math.exp(-eps_out) * (1 - gamma)) if eps_out > 30 \
        else math.log1p(math.expm1(eps_out) / gamma)
    kmax = int(min(m, _binomial.isf(tail, m, 1.0 / n) + 1))
    k = np.arange(1, kmax + 1)
    pk = _binomial.pmf(k, m, 1.0 / n)
    deltas = np.exp(analytic_log_delta(eps_base, z / k))
    return float(min(1.0, np.sum(pk * deltas) + _binomial.sf(kmax, m, 1.0 / n)))
