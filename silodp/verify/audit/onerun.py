"""Epsilon lower bounds from ONE training run: m canaries, each included with probability 1/2.

The auditor inserts m canaries, flips a fair coin S_i for each (included or not), trains once, and
scores every canary (higher = more evidence it was included). It then *guesses* "included" for
the ``k_plus`` highest scores and "excluded" for the ``k_minus`` lowest, abstains on the rest, and
counts the correct guesses. Each estimator is a separate function of those scores
(:class:`CanaryScores`: collect once, estimate many).

* :func:`steinke_epsilon` -- Steinke, Nasr & Jagielski (2023, arXiv:2305.08846), Theorem 3
  (with delta = 0 the bound is the exact binomial tail alone). If the run is (eps, delta)-DP in each canary
  and W counts the correct guesses among r, then for every v
  ``P[W >= v] <= f(v) + 2 m delta max_{1<=i<=v} (f(v - i) - f(v)) / i``,
  ``f(v) = P[Binomial(r, e^eps / (1 + e^eps)) >= v]``. The lower bound is the largest eps whose
  right-hand side at the observed v is at most ``alpha``. Valid for every mechanism.
* :func:`fdp_epsilon` -- Mahloujifar, Melis & Chaudhuri (2024, arXiv:2410.22235), the f-DP
  refinement (their numerical bound on the tail of the number of correct guesses): for a
  mu-GDP run the same guessing game is bounded through the trade-off curve G_mu, not through one
  (eps, delta) pair, which is much tighter for Gaussian mechanisms. The lower bound is on mu,
  converted to (eps, delta) by the exact mu-GDP curve (Balle & Wang 2018); it assumes the
  mechanism's trade-off curve is Gaussian (as :func:`~.estimators.gdp_epsilon` does).
* :func:`two_world_scores` -- the included / excluded canaries' scores as
  :class:`~.estimators.Scores`, for the Clopper-Pearson and GDP estimators of :mod:`.estimators`.
  Those treat canaries as independent trials, which holds when each canary moves its own
  coordinate of an independently noised release (the free-coordinate canaries of this package);
  otherwise read them as estimates.

Guess sizes: ``guesses`` fixes one ``(k_plus, k_minus)`` plan, or a list of plans chosen before
seeing the scores; with P plans every plan is tested at ``alpha / P`` (Bonferroni), so reporting
the best plan is still a (1 - alpha) lower bound. Every function accepts a batch of independent
runs (scores of shape ``(T, m)``) and then returns arrays of shape ``(T,)``: the coverage tests
audit thousands of runs in one call.
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

import numpy as np
from scipy.special import expit, ndtr, ndtri
from scipy.stats import binom

from silodp._validation import check_delta
from silodp.verify.audit.estimators import Scores, _check_alpha, gdp_to_epsilon

#: cap of the bisections on epsilon and mu (a bound at the cap means "at least this")
EPS_CAP = 30.0
MU_CAP = 30.0
#: the delta term's maximum is taken exactly over i <= this, and bounded by (1 - f(v)) / (I + 1)
#: beyond it (the term is at most (1 - f(v)) / i), so the p-value is never underestimated
_DELTA_TERMS = 256


@dataclasses.dataclass(frozen=True)
class CanaryScores:
    """One run's canary scores and which canaries were included (``included[i] = S_i``).

    Shapes ``(m,)`` for one run or ``(T, m)`` for T independent runs (a batch).
    """

    scores: np.ndarray
    included: np.ndarray

    def __post_init__(self) -> None:
        s = np.asarray(self.scores, dtype=float)
        inc = np.asarray(self.included)
        if s.ndim not in (1, 2) or s.shape[-1] < 2:
            raise ValueError(f"scores: need shape (m,) or (T, m) with m >= 2, got {s.shape}")
        if inc.shape != s.shape:
            raise ValueError(f"included: shape {inc.shape} != scores' {s.shape}")
        if inc.dtype != bool and not np.isin(inc, (0, 1)).all():
            raise ValueError("included: must be booleans (or 0/1)")
        if not np.all(np.isfinite(s)):
            raise ValueError("scores: must be finite (no NaN or inf)")
        object.__setattr__(self, "scores", s)
        object.__setattr__(self, "included", inc.astype(bool))

    @property
    def canaries(self) -> int:
        return int(self.scores.shape[-1])

    @property
    def batched(self) -> bool:
        return self.scores.ndim == 2

    def rows(self) -> tuple[np.ndarray, np.ndarray]:
        """(scores, included) as 2-D arrays (one row per run)."""
        return np.atleast_2d(self.scores), np.atleast_2d(self.included)


@dataclasses.dataclass(frozen=True)
class OneRunBound:
    """A one-run epsilon lower bound (arrays of shape (T,) for a batch of runs).

    ``guesses`` and ``correct`` belong to the plan that gave the bound; ``plans`` is how many
    plans shared ``alpha`` (Bonferroni); ``mu`` is set by the f-DP estimator.
    """

    method: str
    epsilon: float | np.ndarray
    delta: float
    alpha: float
    canaries: int
    guesses: int | np.ndarray
    correct: int | np.ndarray
    plans: int
    mu: float | np.ndarray | None = None

    def as_dict(self) -> dict:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in dataclasses.asdict(self).items()}


def default_plans(m: int) -> list[tuple[int, int]]:
    """Guess sizes fixed before the run: r = m, m/2, m/4, ... (down to 8 guesses), each either
    split evenly between the top and the bottom scores or all on the top."""
    plans = []
    r = int(m)
    while r >= 8:
        plans += [(r - r // 2, r // 2), (r, 0)]
        r //= 2
    return sorted(set(plans)) or [(1, 1)]


def _plans(m: int, guesses) -> list[tuple[int, int]]:
    if guesses is None:
        return default_plans(m)
    if isinstance(guesses, (int, np.integer)):
        guesses = [(int(guesses), 0)]
    elif len(guesses) == 2 and all(isinstance(g, (int, np.integer)) for g in guesses):
        guesses = [tuple(guesses)]
    out = []
    for plan in guesses:
        kp, km = (int(plan[0]), int(plan[1]))
        if kp < 0 or km < 0 or kp + km < 1 or kp + km > m:
            raise ValueError(f"guesses: each (k_plus, k_minus) needs 1 <= k_plus + k_minus <= m = {m}, got {plan}")
        out.append((kp, km))
    return out


def correct_guesses(canary: CanaryScores, plans: Sequence[tuple[int, int]]) -> np.ndarray:
    """Correct guesses of each plan in each run, shape (T, P): "included" on the ``k_plus``
    highest scores, "excluded" on the ``k_minus`` lowest (ties broken by a fixed random order)."""
    scores, included = canary.rows()
    jitter = np.random.default_rng(0).permutation(scores.shape[1])
    order = np.lexsort((jitter[None, :].repeat(len(scores), 0), -scores), axis=1)  # descending
    ranked = np.take_along_axis(included, order, axis=1)
    hits_top = np.concatenate([np.zeros((len(scores), 1), int), np.cumsum(ranked, axis=1)], axis=1)
    misses_bottom = np.concatenate([np.zeros((len(scores), 1), int), np.cumsum(~ranked[:, ::-1], axis=1)], axis=1)
    return np.stack([hits_top[:, kp] + misses_bottom[:, km] for kp, km in plans], axis=1)


def steinke_p_value(eps, r, v, m: int, delta: float) -> np.ndarray:
    """Theorem 3's bound on P[W >= v] for an (eps, delta)-DP run (broadcast over arrays)."""
    eps, r, v = np.broadcast_arrays(np.asarray(eps, float), np.asarray(r), np.asarray(v))
    q = expit(eps)
    tail = binom.sf(v - 1, r, q)
    if delta == 0:
        return tail
    i = np.arange(1, _DELTA_TERMS + 1)
    vi = v[..., None] - i
    terms = np.where(vi >= 0, (binom.sf(vi - 1, r[..., None], q[..., None]) - tail[..., None]) / i, 0.0)
    beyond = (1.0 - tail) / (_DELTA_TERMS + 1)
    worst = np.maximum(terms.max(axis=-1), np.where(v > _DELTA_TERMS, beyond, 0.0))
    return np.minimum(tail + 2.0 * m * delta * worst, 1.0)


def _bisect_largest(rejects, upper: float, shape, iterations: int = 40) -> np.ndarray:
    """Largest x in [0, upper] with ``rejects(x)`` True (rejects decreasing in x), elementwise;
    0 where even x = 0 is not rejected. Returns the lower end of the final bracket (conservative)."""
    lo, hi = np.zeros(shape), np.full(shape, upper)
    ok_lo = rejects(lo)
    top = rejects(hi)
    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        r = rejects(mid)
        lo, hi = np.where(r, mid, lo), np.where(r, hi, mid)
    return np.where(top, upper, np.where(ok_lo, lo, 0.0))


def _setup(canary: CanaryScores, delta: float, alpha: float, guesses):
    if not isinstance(canary, CanaryScores):
        raise ValueError("canary: expected a silodp.verify.audit.onerun.CanaryScores")
    dl = 0.0 if delta == 0 else check_delta("delta", delta)  # delta = 0: pure DP (the binomial tail alone)
    a = _check_alpha(alpha)
    plans = _plans(canary.canaries, guesses)
    r = np.array([kp + km for kp, km in plans])
    v = correct_guesses(canary, plans)
    return dl, a, plans, r, v


def _pick(values: np.ndarray, r: np.ndarray, v: np.ndarray):
    best = np.argmax(values, axis=1)
    rows = np.arange(len(values))
    return values[rows, best], r[best], v[rows, best]


def _out(canary: CanaryScores, x):
    return x if canary.batched else x[0].item()


def steinke_epsilon(canary: CanaryScores, delta: float, alpha: float = 0.05, guesses=None) -> OneRunBound:
    """(1 - alpha) lower bound on epsilon from one run (Steinke, Nasr & Jagielski 2023, Thm 3).

    The plan is chosen by the delta = 0 bound (the binomial tail alone), then its bound is recomputed with
    Theorem 3's delta term; all plans are tested at ``alpha / P``, so the choice is free.
    """
    dl, a, plans, r, v = _setup(canary, delta, alpha, guesses)
    level = a / len(plans)
    pure = _bisect_largest(lambda e: steinke_p_value(e, r, v, canary.canaries, 0.0) <= level, EPS_CAP, v.shape)
    _, r_best, v_best = _pick(pure, r, v)
    eps = _bisect_largest(lambda e: steinke_p_value(e, r_best, v_best, canary.canaries, dl) <= level,
                          EPS_CAP, v_best.shape)
    return OneRunBound("steinke", _out(canary, eps), dl, a, canary.canaries, _out(canary, r_best),
                       _out(canary, v_best), len(plans))


def _gdp_tail_rejects(mu, m: int, r, v, tau: float) -> np.ndarray:
    """Whether ``P[W >= v] >= tau`` is impossible for a mu-GDP run (Mahloujifar et al. 2024,
    numerical tail bound, with the Gaussian trade-off): starting from the mass tau v / m of correct and
    tau (r - v) / m of wrong guesses at level v, walk down the levels i = v - 1, ..., 0; each
    level's wrong-guess mass must be at least G_mu's image Phi(Phi^-1(correct) - mu) of the
    correct-guess mass, which in turn grows by i / (r - i) of the added wrong mass. If the masses
    needed exceed the r / m that r guesses among m canaries can hold, the tail is below tau."""
    mu, r, v = np.broadcast_arrays(np.asarray(mu, float), np.asarray(r, float), np.asarray(v, float))
    correct = tau * v / m
    wrong = tau * (r - v) / m
    active = v > 0
    for i in range(int(v.max()) - 1, -1, -1):
        if not active.any():
            break
        live = active & (i < v)
        floor = ndtr(ndtri(np.clip(correct, 0.0, 1.0)) - mu)
        grown = np.where(live, np.maximum(wrong, floor), wrong)
        added = grown - wrong
        active = active & ~(live & (added <= 0))  # nothing changed: nothing changes below
        correct = np.minimum(correct + np.where(live, i / np.maximum(r - i, 1.0) * added, 0.0), 1.0)
        wrong = grown
    return correct + wrong > r / m


def fdp_epsilon(canary: CanaryScores, delta: float, alpha: float = 0.05, guesses=None) -> OneRunBound:
    """(1 - alpha) lower bound on mu, hence on epsilon at ``delta``, from one run, by the f-DP
    guessing bound with the Gaussian trade-off curve (Mahloujifar, Melis & Chaudhuri 2024).

    Only the plan that maximizes the delta = 0 Steinke bound is evaluated (a data-dependent
    choice among plans that all share the Bonferroni ``alpha / P``, hence still valid).
    """
    dl, a, plans, r, v = _setup(canary, delta, alpha, guesses)
    level = a / len(plans)
    pure = _bisect_largest(lambda e: steinke_p_value(e, r, v, canary.canaries, 0.0) <= level, EPS_CAP, v.shape)
    _, r_best, v_best = _pick(pure, r, v)
    mu = _bisect_largest(lambda x: _gdp_tail_rejects(x, canary.canaries, r_best, v_best, level),
                         MU_CAP, v_best.shape, iterations=30)
    eps = np.array([gdp_to_epsilon(float(x), dl) if dl > 0 else (np.inf if x > 0 else 0.0) for x in mu])
    return OneRunBound("fdp", _out(canary, eps), dl, a, canary.canaries, _out(canary, r_best),
                       _out(canary, v_best), len(plans), _out(canary, mu))


def two_world_scores(canary: CanaryScores) -> Scores:
    """The excluded canaries' scores as the null world, the included as the alternative (one run)."""
    if canary.batched:
        raise ValueError("canary: two_world_scores takes one run, not a batch")
    return Scores(canary.scores[~canary.included], canary.scores[canary.included])


@dataclasses.dataclass(frozen=True)
class RunAudit:
    """The verdict on one audited claim: the issue's JSON keys (``as_dict``)."""

    claimed_epsilon: float
    epsilon_lower: dict
    confidence: float
    canaries: int
    verdict: str
    estimator: str

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def judge_run(canary: CanaryScores, claimed_epsilon: float, delta: float, alpha: float = 0.05,
              estimator: str = "steinke") -> dict:
    """Every estimator's bound on ``canary`` and the verdict by ``estimator``: the fields of
    :class:`RunAudit` (``violated`` when that (1 - alpha) lower bound exceeds the claim)."""
    if estimator not in ("steinke", "fdp", "clopper-pearson", "gdp"):
        raise ValueError(f"estimator: must be steinke, fdp, clopper-pearson or gdp, got {estimator!r}")
    lower = estimate_all(canary, delta, alpha)
    verdict = "violated" if lower.get(estimator, 0.0) > claimed_epsilon else "consistent"
    return dict(claimed_epsilon=float(claimed_epsilon), epsilon_lower=lower, confidence=1 - alpha,
                canaries=canary.canaries, verdict=verdict, estimator=estimator)


#: One-run estimators by name (each ``f(canary, delta, alpha=..., guesses=...)``).
ONE_RUN_ESTIMATORS = {"steinke": steinke_epsilon, "fdp": fdp_epsilon}


def estimate_all(canary: CanaryScores, delta: float, alpha: float = 0.05, guesses=None) -> dict[str, float]:
    """Every estimator's epsilon lower bound on the same scores: the two one-run bounds, and the
    Clopper-Pearson and GDP bounds of the two-world split (valid for independent canaries)."""
    from silodp.verify.audit.estimators import clopper_pearson_epsilon, gdp_epsilon

    out = {name: float(f(canary, delta, alpha, guesses).epsilon) for name, f in ONE_RUN_ESTIMATORS.items()}
    included = int(np.count_nonzero(canary.included))
    if min(included, canary.canaries - included) >= 10:
        split = two_world_scores(canary)
        out["clopper-pearson"] = clopper_pearson_epsilon(split, delta, alpha).epsilon
        out["gdp"] = gdp_epsilon(split, delta, alpha).epsilon
    return out


__all__ = ["CanaryScores", "ONE_RUN_ESTIMATORS", "OneRunBound", "RunAudit", "correct_guesses", "default_plans",
           "estimate_all", "fdp_epsilon", "judge_run", "steinke_epsilon", "steinke_p_value", "two_world_scores"]
