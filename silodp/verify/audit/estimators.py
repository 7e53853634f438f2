"""Epsilon lower bounds from the scores of a distinguishing game: collect, then estimate.

A game runs a mechanism many times on each of two neighbouring datasets and scores every run
(higher = more evidence for the canary dataset D'). Each estimator here is a separate function
of those scores, so expensive runs happen once and cheap estimators can be compared side by side
(the "collect, then estimate" design of jax_privacy's auditing).

Both estimators choose their threshold on a held-out *selection* split and report rates measured
on the disjoint *evaluation* split, so the threshold search does not bias the bound.

* :func:`clopper_pearson_epsilon` -- Nasr, Song, Thakurta, Papernot & Carlini (2021,
  arXiv:2101.04535), Sec. 4: an (eps, delta)-DP mechanism satisfies FPR + e^eps FNR >= 1 - delta
  and FNR + e^eps FPR >= 1 - delta for every test, so with one-sided Clopper-Pearson upper bounds
  on FPR and FNR (Bonferroni: ``alpha / 2`` each) eps >= log((1 - delta - FNR+) / FPR+) holds with
  confidence 1 - alpha. Valid for every mechanism.
* :func:`gdp_epsilon` -- Nasr, Hayes, Steinke, Balle, Tramer, Jagielski, Carlini & Terzis (2023,
  arXiv:2302.07956), Sec. 5: if the mechanism is mu-GDP (Dong, Roth & Su 2019) every test has
  FNR >= Phi(Phi^-1(1 - FPR) - mu), so mu >= Phi^-1(1 - FPR+) - Phi^-1(FNR+); mu-GDP is exactly
  the Gaussian mechanism with sensitivity / sigma = mu, whose exact (eps, delta) curve
  (Balle & Wang 2018) turns the bound on mu into one on eps. Much tighter than Clopper-Pearson
  for Gaussian mechanisms, but only valid for mechanisms whose trade-off curve is Gaussian.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

import numpy as np
from scipy.special import ndtri
from scipy.stats import beta as beta_dist

from silodp.accounting import gaussian
from silodp._validation import check_delta


@dataclasses.dataclass(frozen=True)
class Scores:
    """Scores of the runs on D (``null``, no canary) and on D' (``alt``, with the canary)."""

    null: np.ndarray
    alt: np.ndarray

    def __post_init__(self) -> None:
        for name in ("null", "alt"):
            arr = np.asarray(getattr(self, name), dtype=float).ravel()
            if arr.size < 2:
                raise ValueError(f"scores.{name}: need at least 2 scores, got {arr.size}")
            if not np.all(np.isfinite(arr)):
                raise ValueError(f"scores.{name}: scores must be finite (no NaN or inf)")
            object.__setattr__(self, name, arr)

    @property
    def trials(self) -> int:
        """Number of runs per dataset (the smaller of the two)."""
        return int(min(self.null.size, self.alt.size))

    def split(self, fraction: float, seed: int = 0) -> tuple["Scores", "Scores"]:
        """(selection, evaluation): a random ``fraction`` of each side selects, the rest evaluates."""
        if not 0.0 < fraction < 1.0:
            raise ValueError(f"select_fraction: must lie in (0, 1), got {fraction}")
        rng = np.random.default_rng(seed)
        parts = []
        for arr in (self.null, self.alt):
            perm = rng.permutation(arr.size)
            cut = min(max(1, int(round(fraction * arr.size))), arr.size - 1)
            parts.append((arr[perm[:cut]], arr[perm[cut:]]))
        return Scores(parts[0][0], parts[1][0]), Scores(parts[0][1], parts[1][1])


@dataclasses.dataclass(frozen=True)
class EpsilonBound:
    """An epsilon lower bound and the test that gave it.

    ``direction`` is +1 when large scores are declared "canary" (the bound uses FNR / FPR as
    printed) and -1 for the mirrored test. ``fpr``, ``fnr`` are the evaluation split's observed
    rates, ``fpr_upper``, ``fnr_upper`` their Clopper-Pearson upper bounds; ``mu`` is set by the
    Gaussian-DP estimator.
    """

    method: str
    epsilon: float
    delta: float
    alpha: float
    threshold: float
    direction: int
    fpr: float
    fnr: float
    fpr_upper: float
    fnr_upper: float
    trials: int
    mu: float | None = None

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


#: one-sided level of the selection split's rate estimates (conservative against the winner's curse)
SELECT_LEVEL = 0.05


def clopper_pearson_upper(k, n, alpha: float) -> np.ndarray:
    """One-sided (1 - alpha) Clopper-Pearson upper bound on a rate with ``k`` events in ``n`` trials.

    ``k`` may be fractional (expected counts when predicting a split's bound); 1 where k >= n.
    """
    k = np.asarray(k, dtype=float)
    n = np.asarray(n, dtype=float)
    with np.errstate(invalid="ignore"):
        upper = beta_dist.ppf(1.0 - alpha, k + 1.0, np.maximum(n - k, 1e-12))
    return np.where(k >= n, 1.0, upper)


def _check_alpha(alpha: float) -> float:
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha: must lie in (0, 1), got {alpha}")
    return float(alpha)


def _error_counts(scores: Scores, thresholds: np.ndarray, direction: int) -> tuple[np.ndarray, np.ndarray]:
    """False positives (null declared canary) and false negatives at each threshold.

    direction +1: declare "canary" when score >= t; -1: when score <= t.
    """
    null, alt = np.sort(scores.null), np.sort(scores.alt)
    if direction > 0:
        fp = null.size - np.searchsorted(null, thresholds, side="left")
        fn = np.searchsorted(alt, thresholds, side="left")
    else:
        fp = np.searchsorted(null, thresholds, side="right")
        fn = alt.size - np.searchsorted(alt, thresholds, side="right")
    return fp.astype(float), fn.astype(float)


def _cp_epsilon(fpr_up: np.ndarray, fnr_up: np.ndarray, delta: float) -> np.ndarray:
    """max(log((1 - delta - FNR+) / FPR+), log((1 - delta - FPR+) / FNR+)), floored at 0: both
    DP inequalities hold for the same test (the relation is symmetric)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        eps = np.maximum(np.log(np.maximum(1.0 - delta - fnr_up, 0.0)) - np.log(fpr_up),
                         np.log(np.maximum(1.0 - delta - fpr_up, 0.0)) - np.log(fnr_up))
    return np.where(np.isfinite(eps), np.maximum(eps, 0.0), 0.0)


def _gdp_mu(fpr_up: np.ndarray, fnr_up: np.ndarray) -> np.ndarray:
    mu = -ndtri(np.clip(fpr_up, 1e-300, 1.0)) - ndtri(np.clip(fnr_up, 1e-300, 1.0))
    return np.maximum(np.where(np.isfinite(mu), mu, 0.0), 0.0)


def gdp_to_epsilon(mu: float, delta: float) -> float:
    """(eps, delta) of mu-GDP: the Gaussian mechanism with sigma / sensitivity = 1 / mu (exact)."""
    if not mu > 0:
        return 0.0
    return gaussian.epsilon_for_delta(1.0 / float(mu), check_delta("delta", delta))


def _candidates(scores: Scores, limit: int = 4096) -> np.ndarray:
    pooled = np.unique(np.concatenate([scores.null, scores.alt]))
    if pooled.size > limit:
        pooled = np.unique(np.quantile(pooled, np.linspace(0.0, 1.0, limit)))
    return pooled


def _select_and_evaluate(scores: Scores, delta: float, alpha: float, select_fraction: float, seed: int,
                         objective: Callable[[np.ndarray, np.ndarray], np.ndarray]):
    """Pick (threshold, direction) maximizing ``objective(fpr+, fnr+)`` as *predicted* for the
    evaluation split from the selection split's rates; return it with the evaluation split's rates."""
    select, evaluate = scores.split(select_fraction, seed)
    n0, n1 = evaluate.null.size, evaluate.alt.size
    thresholds = _candidates(select)
    best = (-math.inf, thresholds[0], 1)
    for direction in (1, -1):
        fp, fn = _error_counts(select, thresholds, direction)
        # predict the evaluation split's bound from a conservative rate on the selection split
        # (its own upper bound, so a lucky sparse tail is not taken at face value), at its size
        fpr_hat = clopper_pearson_upper(fp, select.null.size, SELECT_LEVEL)
        fnr_hat = clopper_pearson_upper(fn, select.alt.size, SELECT_LEVEL)
        fpr_up = clopper_pearson_upper(fpr_hat * n0, n0, alpha / 2)
        fnr_up = clopper_pearson_upper(fnr_hat * n1, n1, alpha / 2)
        value = objective(fpr_up, fnr_up)
        i = int(np.argmax(value))
        if value[i] > best[0]:
            best = (float(value[i]), float(thresholds[i]), direction)
    _, threshold, direction = best
    fp, fn = _error_counts(evaluate, np.array([threshold]), direction)
    fpr_up = float(clopper_pearson_upper(fp, n0, alpha / 2)[0])
    fnr_up = float(clopper_pearson_upper(fn, n1, alpha / 2)[0])
    return threshold, direction, float(fp[0] / n0), float(fn[0] / n1), fpr_up, fnr_up, evaluate.trials


def clopper_pearson_epsilon(scores: Scores, delta: float, alpha: float = 0.05, select_fraction: float = 0.2,
                            seed: int = 0) -> EpsilonBound:
    """Epsilon lower bound with confidence ``1 - alpha`` (Nasr et al. 2021, Clopper-Pearson).

    The threshold (and which side means "canary") is chosen on ``select_fraction`` of the runs,
    the bound is computed on the rest.
    """
    dl, a = check_delta("delta", delta), _check_alpha(alpha)
    if not isinstance(scores, Scores):
        raise ValueError("scores: expected a silodp.verify.audit.estimators.Scores")
    t, direction, fpr, fnr, fpr_up, fnr_up, n = _select_and_evaluate(
        scores, dl, a, select_fraction, seed, lambda f, g: _cp_epsilon(f, g, dl))
    eps = float(_cp_epsilon(np.array([fpr_up]), np.array([fnr_up]), dl)[0])
    return EpsilonBound("clopper-pearson", eps, dl, a, t, direction, fpr, fnr, fpr_up, fnr_up, n)


def gdp_epsilon(scores: Scores, delta: float, alpha: float = 0.05, select_fraction: float = 0.2,
                seed: int = 0) -> EpsilonBound:
    """Epsilon lower bound by the Gaussian-DP method (Nasr et al. 2023): a (1 - alpha) lower bound
    on mu from one test's Clopper-Pearson rates, converted by the exact mu-GDP curve.

    Assumes the mechanism's trade-off curve is Gaussian (true for a Gaussian release with the
    likelihood-ratio statistic); for other mechanisms read it as an estimate, not a proof.
    """
    dl, a = check_delta("delta", delta), _check_alpha(alpha)
    if not isinstance(scores, Scores):
        raise ValueError("scores: expected a silodp.verify.audit.estimators.Scores")
    t, direction, fpr, fnr, fpr_up, fnr_up, n = _select_and_evaluate(scores, dl, a, select_fraction, seed, _gdp_mu)
    mu = float(_gdp_mu(np.array([fpr_up]), np.array([fnr_up]))[0])
    return EpsilonBound("gdp", gdp_to_epsilon(mu, dl), dl, a, t, direction, fpr, fnr, fpr_up, fnr_up, n, mu)


#: Estimators by name (``method=`` everywhere in :mod:`silodp.verify`).
ESTIMATORS: dict[str, Callable[..., EpsilonBound]] = {
    "clopper-pearson": clopper_pearson_epsilon,
    "gdp": gdp_epsilon,
}


def estimate(scores: Scores, delta: float, method: str = "clopper-pearson", **kwargs) -> EpsilonBound:
    """Run the estimator called ``method`` (see :data:`ESTIMATORS`)."""
    if method not in ESTIMATORS:
        raise ValueError(f"method: must be one of {sorted(ESTIMATORS)}, got {method!r}")
    return ESTIMATORS[method](scores, delta, **kwargs)
