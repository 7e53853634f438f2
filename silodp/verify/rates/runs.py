"""Empirical versus theoretical rates (issues 6, 14): vary one of eps, n, M, N, d, kappa; fit the slope.

:func:`run_rates` runs the algorithm of a theorem (:mod:`silodp.verify.rates.theorems`) on a family
with known constants at every grid value, ``trials`` independent runs per value (stacked,
:mod:`silodp.verify.rates.trials`), and returns a :class:`RateResult`:

* per point: the trial mean of the metric with a percentile-bootstrap interval, the rate-form
  bound (each term, the dominant one and its exponent along the varied parameter), the explicit
  bound at the run's actual constants and noise, and whether mean + interval stays below it;
* the log-log slope of the means with a bootstrap interval, compared with the exponent of the
  rate bound's dominant term at the grid's centre (``theory_exponent``).

What is held fixed: everything but the varied parameter. For Prox-SGD the number of rounds R is
fixed (``rounds``) and ``K = floor(n / R)``, so varying n changes the batch size and with it the
sensitivity ``2L/K`` and the noise; with ``rounds=None`` R and K follow Thm E.1's prescription at
every point. Varying N sets ``M = N``; varying d rebuilds the family with the same constants
(features of norm <= 1, same ridge), so L, beta, mu do not move; varying kappa rebuilds
``logistic-ridge`` with ridge ``lam = beta / (kappa - 1)`` (so ``mu = beta / kappa``, beta fixed).
:func:`quick_setup` and :func:`full_setup` hold grids chosen inside the regime where the bound's
privacy term dominates; :func:`prescribed_setup` runs every algorithm at its theorem's own
prescriptions (R, K, q, step size, noise) in regimes where the output improves on the start w0 = 0,
with the statistical (Thm 2.1, n at large eps), kappa (Thm 2.2) and optimization (Thm 3.1, the
``(eps n)^(-4/3)`` term) dependences exercised.

Per point, besides the mean: ``start_metric`` (the metric at w0 = 0: Delta, or ||G(w0)||^2) and,
with ``noise_floor``, ``noise_only_mean``: the same algorithm, data and noise started at the optimum
w* of the reference (no initial gap), i.e. the accumulated noise alone (privacy noise and, for SO,
minibatch noise). ``mean / noise_only_mean`` then shows what the theorem's optimization term adds.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import asdict, dataclass, field, replace

import numpy as np
import torch

from silodp.bounds import get_bound
from silodp.verify.rates import families as fam_mod
from silodp.verify.rates import stats
from silodp.verify.rates.theorems import THEOREMS, Theorem, for_bound, get_theorem, problem_params
from silodp.verify.rates.trials import TrialContext, run_trials

VARIABLES = ("eps", "n", "M", "N", "d", "kappa")
NOISE = ("paper", "tight")
INTEGER = {"n", "M", "N", "d"}


@dataclass(frozen=True)
class RateSetup:
    """A rate experiment: ``algorithm``, the varied parameter and its ``values``, the fixed rest.

    ``rounds``: R for Prox-SGD (``K = n // R``); None for the proof's prescription (PL-SVRG: E,
    SPIDER: R). ``noise``: the accounting layer's calibration ("paper": the paper's closed form,
    certified by a tight accountant; "tight"). ``fit_privacy_only``: fit the slope on the grid
    points where the rate bound's privacy term dominates. ``baseline``: also run with zero noise
    (the non-private floor of the same algorithm and batches). ``family``: another family of
    :mod:`silodp.verify.rates.families` than the theorem's (its builder's defaults). ``kappa``: the
    condition number of ``logistic-ridge`` (None: its default ridge, kappa = 3). ``noise_floor``:
    also run from the optimum w* (``noise_only_mean``). ``output``: the output rule
    (:data:`silodp.algorithms.base.OUTPUTS`; None: the algorithm's own, e.g. Alg 3's random iterate).
    ``mutation``: a deliberately broken variant applied to the private runs (an object with
    ``algorithm(algo) -> algo`` and ``context(base) -> TrialContext subclass``, e.g.
    :class:`silodp.verify.rates.mutations.Mutation`; None: the algorithm as it is).
    """

    algorithm: str = "isrl-prox-sgd"
    vary: str = "eps"
    values: tuple = (0.07, 0.14)
    n: int = 8192
    N: int = 4
    M: int = 4
    eps: float = 0.1
    delta: float = 1e-5
    d: int = 3
    rounds: int | None = 15
    heterogeneity: float = 0.5
    trials: int = 64
    noise: str = "paper"
    bootstrap: int = 2000
    confidence: float = 0.95
    seed: int = 0
    fit_privacy_only: bool = False
    baseline: bool = False
    family: str | None = None
    kappa: float | None = None
    noise_floor: bool = False
    output: str | None = None
    mutation: object | None = None

    def __post_init__(self):
        if self.vary not in VARIABLES:
            raise ValueError(f"vary: must be one of {VARIABLES}, got {self.vary!r}")
        if self.noise not in NOISE:
            raise ValueError(f"noise: must be one of {NOISE}, got {self.noise!r}")
        vals = tuple(float(v) for v in self.values)
        if len(vals) < 2 or len(set(vals)) < 2 or min(vals) <= 0:
            raise ValueError(f"values: need at least two distinct positive values, got {self.values}")
        if self.vary in INTEGER and any(v != int(v) for v in vals):
            raise ValueError(f"values: {self.vary} takes integers, got {self.values}")
        if int(self.trials) < 2:
            raise ValueError(f"trials: must be >= 2, got {self.trials}")
        if self.family is not None and self.family not in fam_mod.FAMILIES:
            raise ValueError(f"family: must be one of {fam_mod.FAMILIES}, got {self.family!r}")
        if self.kappa is not None and not float(self.kappa) > 1:
            raise ValueError(f"kappa: must be > 1 (mu < beta), got {self.kappa}")
        if self.vary == "kappa" and min(vals) <= 1:
            raise ValueError(f"values: kappa must be > 1, got {self.values}")
        object.__setattr__(self, "values", tuple(sorted(vals)))
        for v in self.values:
            self.point(v)

    def point(self, value: float) -> dict:
        """The fixed parameters with ``vary`` set to ``value`` (M = N when varying N)."""
        p = {"n": int(self.n), "N": int(self.N), "M": int(self.M), "eps": float(self.eps),
             "delta": float(self.delta), "d": int(self.d)}
        if self.kappa is not None:
            p["kappa"] = float(self.kappa)
        p[self.vary] = int(value) if self.vary in INTEGER else float(value)
        if self.vary == "N":
            p["M"] = p["N"]
        if not 1 <= p["M"] <= p["N"]:
            raise ValueError(f"M: must satisfy 1 <= M <= N, got M={p['M']}, N={p['N']}")
        if not (0 < p["delta"] < 1 and p["eps"] > 0 and p["d"] >= 2 and p["n"] >= 1):
            raise ValueError(f"eps: need eps > 0, delta in (0, 1), d >= 2, n >= 1; got {p}")
        return p


@dataclass
class RateResult:
    """Rows per grid value, the fitted slope and the comparison with the theorem."""

    setup: RateSetup
    theorem: Theorem
    rows: list[dict]
    fit: stats.PowerLawFit
    theory_exponent: float
    dominant_term: str
    curve: dict = field(default_factory=dict)
    samples: list = field(default_factory=list, repr=False)

    @property
    def privacy_dominated(self) -> bool:
        """Whether the rate bound's privacy term dominates at every grid point."""
        return all(r["dominant_term"] == "privacy" for r in self.rows)

    @property
    def explicit_bound_holds(self) -> bool | None:
        """Mean + interval below the explicit bound at every point (None: no explicit bound)."""
        checks = [r["explicit_holds"] for r in self.rows]
        return None if any(c is None for c in checks) else all(checks)

    @property
    def explicit_conditions_hold(self) -> bool | None:
        """Whether the explicit bound's hypotheses (e.g. eq. 45's q_small) hold at every point."""
        conds = [r["explicit_conditions"] for r in self.rows]
        if any(c is None for c in conds):
            return None
        return all(v is not False for c in conds for v in c.values())

    @property
    def improves_on_start(self) -> bool:
        """Whether the upper end of the mean's interval is below the metric at w0 at every point."""
        return all(r["ci_high"] < r["start_metric"] for r in self.rows)

    @property
    def slope_agrees(self) -> bool:
        """Whether the slope's interval contains the theory exponent (alone, not a verdict: a run
        worse than w0 can have the right slope; see :attr:`verdict`)."""
        return self.fit.contains(self.theory_exponent)

    @property
    def verdict(self) -> str:
        """The one summary of the experiment (:func:`rate_verdict`)."""
        return rate_verdict(self.slope_agrees, self.improves_on_start, self.explicit_bound_holds)

    @property
    def noise_slope(self) -> float | None:
        """Log-log slope of the total Gaussian noise variance sum_k sigma_k^2 over the grid: the
        slope the metric would have if it were proportional to the noise variance."""
        var = [sum(v * v for v in r["noise"].values()) if r["noise"] and all(
            isinstance(v, float) for v in r["noise"].values()) else None for r in self.rows]
        if any(v is None or not v > 0 for v in var):
            return None
        return float(stats.ols_loglog(np.array(self.setup.values), np.array(var))[0])

    def to_dict(self) -> dict:
        """JSON-ready summary (the CLI's ``--json`` payload)."""
        s = self.setup
        return {
            "vary": s.vary, "slope": self.fit.slope, "slope_ci": list(self.fit.slope_ci),
            "theory_exponent": self.theory_exponent, "explicit_bound_holds": self.explicit_bound_holds,
            "verdict": self.verdict,
            "slope_agrees": self.slope_agrees, "privacy_dominated": self.privacy_dominated,
            "explicit_conditions_hold": self.explicit_conditions_hold, "noise_slope": self.noise_slope,
            "improves_on_start": self.improves_on_start,
            "dominant_term": self.dominant_term, "algorithm": s.algorithm, "theorem": self.theorem.theorem,
            "bound": self.theorem.bound, "explicit_bound": self.theorem.explicit,
            "family": s.family or self.theorem.family,
            "setting": self.theorem.setting, "metric": self.theorem.metric, "confidence": s.confidence,
            "slope_se": self.fit.slope_se, "intercept": self.fit.intercept,
            "setup": {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(s).items()},
            "points": self.rows,
        }

    def to_csv(self) -> str:
        """One line per grid value (nested fields flattened as ``term_<name>``)."""
        flat = [_flatten(r) for r in self.rows]
        keys = list(dict.fromkeys(k for r in flat for k in r))
        out = io.StringIO()
        writer = csv.DictWriter(out, fieldnames=keys)
        writer.writeheader()
        writer.writerows(flat)
        return out.getvalue()


#: the values of :func:`rate_verdict`, best first
VERDICTS = ("agrees", "slope-disagrees", "no-improvement", "explicit-bound-fails")


def rate_verdict(slope_agrees: bool, improves_on_start: bool, explicit_bound_holds: bool | None) -> str:
    """One verdict on a rate experiment (:data:`VERDICTS`): ``explicit-bound-fails`` when the measured
    mean (upper end of its interval) exceeds the explicit bound at a point (a bound is violated);
    else ``no-improvement`` when at some point the output is not better than the start w0 (the
    algorithm did worse than doing nothing there, so its slope says nothing about the theorem);
    else ``agrees`` or ``slope-disagrees`` as the slope's interval contains the theory exponent or
    not. ``agrees`` therefore implies ``improves_on_start``."""
    if explicit_bound_holds is False:
        return "explicit-bound-fails"
    if not improves_on_start:
        return "no-improvement"
    return "agrees" if slope_agrees else "slope-disagrees"


def _flatten(row: dict) -> dict:
    out = {}
    for k, v in row.items():
        if isinstance(v, dict):
            out.update({f"{k}_{kk}": vv for kk, vv in v.items()})
        else:
            out[k] = v
    return out


# ------------------------------------------------------------------------------- pieces
def _family(theorem: Theorem, setup: RateSetup, point: dict, cache: dict):
    name = setup.family or theorem.family
    extra = {}
    if "kappa" in point:
        if name != "logistic-ridge":
            raise ValueError(f"kappa: only the logistic-ridge family sets its condition number, not {name!r}")
        extra["lam_ratio"] = 1.0 / (point["kappa"] - 1.0)  # mu = beta lam/(beta + lam) = beta / kappa
    key = (name, point["d"], point["N"], point.get("kappa"))
    if key not in cache:
        cache[key] = fam_mod.get_family(name, dim=point["d"], num_silos=point["N"],
                                        heterogeneity=setup.heterogeneity, seed=setup.seed, **extra)
    return cache[key]


def _erm_data(family, n: int, seed: int, cache: dict):
    """One fixed data set (ERM) of ``n`` records per silo and its reference quantities."""
    key = (id(family), n)
    if key not in cache:
        x, y = family.sample(n, 1, torch.Generator().manual_seed(seed + 7919))
        fed = fam_mod.Federation(x[0], y[0], torch.full((family.num_silos,), n))
        ref = fam_mod.reference(family.problem, fed, family.constants, family.convex, seed=seed)
        cache[key] = (x, y, fed, ref)
    return cache[key]


def _metric(theorem: Theorem, family, fed, ref, w: torch.Tensor, eta: float) -> np.ndarray:
    if theorem.metric == "squared gradient mapping norm":
        values = fam_mod.grad_mapping_sq(family.problem, fed, w, eta)
    else:
        values = fam_mod.objective(family.problem, fed, w) - ref.F_star
    return values.detach().numpy().astype(float)


def _shift(params: dict, vary: str, factor: float) -> dict:
    """``params`` with ``vary`` multiplied by ``factor`` (M with N; kappa through mu = beta/kappa)."""
    out = dict(params)
    if vary == "kappa":
        out["mu"] = params["mu"] / factor
        return out
    out[vary] = params[vary] * factor
    if vary == "N" and "M" in out:
        out["M"] = params["M"] * factor
    return out


def term_exponents(bound_id: str, params: dict, vary: str, h: float = 1e-4) -> dict[str, float]:
    """``d log(term) / d log(vary)`` of every term of a bound (M moves with N when varying N;
    a backward difference where a forward step would break ``M <= N``)."""
    bound = get_bound(bound_id)
    moved = {"N": ("N", "M"), "kappa": ("kappa", "mu")}.get(vary, (vary,))
    if not set(moved) & set(bound.parameters):
        return {t: 0.0 for t in bound.term_names}
    step_up = 0.0 if vary == "M" and params["M"] * math.exp(h) > params.get("N", math.inf) else h
    up = bound.term_values(for_bound(bound_id, _shift(params, vary, math.exp(step_up))))
    down = bound.term_values(for_bound(bound_id, _shift(params, vary, math.exp(-h))))
    return {t: (math.log(up[t]) - math.log(down[t])) / (step_up + h) if up[t] > 0 and down[t] > 0 else 0.0
            for t in bound.term_names}


def _algorithm(theorem: Theorem, setup: RateSetup, plan: dict, point: dict, private: bool, w0=None):
    from silodp.algorithms.registry import algorithm_class, get_algorithm

    params = dict(plan, metrics_every=0, output=setup.output, w0=w0)
    if private:
        params.update(epsilon=point["eps"], delta=point["delta"], calibration=setup.noise)
    else:
        cls = algorithm_class(theorem.algorithm)
        try:  # the same transcript with no noise: standard deviations 0 (a P_vec plan has none to zero)
            params.update(cls.plan.noise_arguments({k: 0.0 for k in cls.noise_keys}, None))
        except ValueError as exc:
            raise ValueError("baseline: the zero-noise floor is only available for Gaussian (ISRL-DP) algorithms") from exc
    return get_algorithm(theorem.algorithm, **params)


def _bound_check(bound_id: str | None, params: dict | None, high: float) -> tuple[float | None, bool | None]:
    if bound_id is None or params is None:
        return None, None
    value = get_bound(bound_id).evaluate(for_bound(bound_id, params))
    return value, bool(high <= value)


@dataclass
class _Measured:
    """One grid point's run: parameters, family, reference, plan, trials and metric values; the
    metric at w0 = 0, the non-private floor and the mean of the runs started at the optimum."""

    point: dict
    family: fam_mod.Family
    ref: fam_mod.Reference
    plan: dict
    outcome: object
    samples: np.ndarray
    start: float
    floor: float | None
    noise_only: float | None


def _run_point(theorem: Theorem, setup: RateSetup, index: int, value: float, caches: dict) -> _Measured:
    point = setup.point(value)
    family = _family(theorem, setup, point, caches.setdefault("family", {}))
    if theorem.setting == "SO":
        ref, fed = family.reference(), family.pool

        def data(t, g):
            return family.sample(point["n"], t, g)
    else:
        x, y, fed, ref = _erm_data(family, point["n"], setup.seed, caches.setdefault("erm", {}))

        def data(t, g):
            return x.expand(t, *x.shape[1:]), y.expand(t, *y.shape[1:])
    plan = theorem.plan(point, setup.rounds, family.constants, ref)
    eta = plan.get("step_size", 1.0 / (2.0 * family.constants.beta))
    seed = setup.seed * 1000 + index
    algo, hook = _algorithm(theorem, setup, plan, point, True), {}
    if setup.mutation is not None:
        algo, hook = setup.mutation.algorithm(algo), {"context": setup.mutation.context(TrialContext)}
    out = run_trials(algo, family.problem, data, setup.trials, point["M"], seed=seed, **hook)
    floor = noise_only = None
    def output_metric(outcome) -> np.ndarray:
        """Per trial: the metric of the output, or (``exact_uniform``) its exact expectation over
        the uniform output's iterates."""
        if theorem.exact_uniform and outcome.iterates is not None:
            return np.mean([_metric(theorem, family, fed, ref, w, eta) for w in outcome.iterates], axis=0)
        return _metric(theorem, family, fed, ref, outcome.w_priv, eta)

    if setup.baseline:
        base = run_trials(_algorithm(theorem, setup, plan, point, False), family.problem, data, setup.trials,
                          point["M"], seed=seed)
        floor = float(output_metric(base).mean())
    if setup.noise_floor:
        at_opt = run_trials(_algorithm(theorem, setup, plan, point, True, w0=ref.w_star.to(fed.x.dtype)),
                            family.problem, data, setup.trials, point["M"], seed=seed)
        noise_only = float(output_metric(at_opt).mean())
    start = float(_metric(theorem, family, fed, ref, torch.zeros(1, family.dim, dtype=fed.x.dtype), eta)[0])
    samples = output_metric(out)
    return _Measured(point, family, ref, plan, out, samples, start, floor, noise_only)


def _row(theorem: Theorem, setup: RateSetup, m: _Measured, mean: float, lo: float, hi: float) -> dict:
    point, c, ref, plan, out = m.point, m.family.constants, m.ref, m.plan, m.outcome
    params = problem_params(point, c, ref)
    terms = get_bound(theorem.bound).term_values(for_bound(theorem.bound, params))
    dominant = max(terms, key=terms.__getitem__)
    explicit_params = theorem.explicit_params(point, plan, c, ref, out.sigmas)
    explicit, holds = _bound_check(theorem.explicit, explicit_params, hi)
    printed_params, conditions = explicit_params, None
    if explicit_params is not None:
        conditions = get_bound(theorem.explicit).check(for_bound(theorem.explicit, explicit_params))
        if theorem.printed == "eq20":  # as printed, at the nominal eps
            printed_params = {**explicit_params, "eps": point["eps"]}
    printed, printed_holds = _bound_check(theorem.printed, printed_params, hi)
    exps = term_exponents(theorem.bound, params, setup.vary)
    return {
        "value": point[setup.vary], "mean": mean, "ci_low": lo, "ci_high": hi,
        "std": float(np.std(m.samples, ddof=1)), "trials": int(m.samples.size),
        "bound": float(sum(terms.values())), "terms": terms, "dominant_term": dominant,
        "dominant_exponent": exps[dominant], "term_exponents": exps,
        "explicit_bound": explicit, "explicit_holds": holds, "explicit_conditions": conditions,
        "explicit_as_printed": printed, "explicit_as_printed_holds": printed_holds,
        "nonprivate_mean": m.floor, "start_metric": m.start, "improves_on_start": bool(hi < m.start),
        "noise_only_mean": m.noise_only,
        "mean_over_noise_only": mean / m.noise_only if m.noise_only else None,
        "noise": {k: float(v) for k, v in out.sigmas.items()} or out.shuffle,
        "certified_epsilon": out.epsilon, **{k: point[k] for k in ("n", "N", "M", "d", "eps", "delta")},
        "plan": dict(plan), "L": c.L, "beta": c.beta, "mu": c.mu, "kappa": c.kappa,
        "Delta": ref.Delta, "F_star": ref.F_star, "upsilon2_at_opt": ref.upsilon2_at_opt,
        "upsilon2_max": ref.upsilon2_max, "mean_over_Delta": mean / ref.Delta if ref.Delta > 0 else None,
    }


def _centre_params(setup: RateSetup, value: float, m: _Measured) -> dict:
    """Bound parameters at a (possibly non-integer) grid value, with ``m``'s constants."""
    point = {**m.point, setup.vary: value}
    if setup.vary == "N":
        point["M"] = value
    params = problem_params(point, m.family.constants, m.ref)
    if setup.vary == "kappa":
        params["mu"] = params["beta"] / np.asarray(value, dtype=float)
    return params


def _curve(bound_id: str, setup: RateSetup, m: _Measured, points: int = 64) -> dict:
    """The rate bound and its terms on a dense grid of the varied parameter (``m``'s constants)."""
    xs = np.geomspace(setup.values[0], setup.values[-1], points)
    bound = get_bound(bound_id)
    terms = bound.term_values(for_bound(bound_id, _centre_params(setup, xs, m)))
    stacked = np.stack([np.broadcast_to(terms[t], xs.shape) for t in bound.term_names])
    privacy = (stacked[bound.term_names.index("privacy")] >= stacked.max(0) if "privacy" in terms
               else np.zeros(points, bool))
    return {"x": xs.tolist(), "bound": stacked.sum(0).tolist(), "privacy_dominates": privacy.tolist(),
            "terms": {t: stacked[i].tolist() for i, t in enumerate(bound.term_names)}}


def run_rates(setup: RateSetup, progress: bool | str | None = False) -> RateResult:
    """Run the experiment ``setup`` (see module docstring); deterministic given ``setup.seed``.
    ``progress``: one count per grid point on stderr (:func:`silodp.progress.as_mode`; False: none)."""
    from silodp.progress import Progress, as_mode

    theorem = get_theorem(setup.algorithm)
    caches: dict = {}
    measured = []
    with Progress(len(setup.values), f"rates {setup.algorithm} over {setup.vary}", "grid points",
                  mode=as_mode(progress)) as bar:
        for i, v in enumerate(setup.values):
            bar.set_postfix(**{setup.vary: f"{v:g}"})
            measured.append(_run_point(theorem, setup, i, v, caches))
            bar.update()
    samples = [m.samples for m in measured]
    replicates = stats.bootstrap_means(samples, setup.bootstrap, setup.seed)
    lo, hi = stats.percentile_interval(replicates, setup.confidence)
    means = np.array([s.mean() for s in samples])
    rows = [_row(theorem, setup, m, float(a), float(b), float(c)) for m, a, b, c in zip(measured, means, lo, hi)]
    use = [i for i, r in enumerate(rows) if r["dominant_term"] == "privacy"] if setup.fit_privacy_only else []
    use = use if len(use) >= 2 else list(range(len(rows)))
    for i, r in enumerate(rows):
        r["in_fit"] = i in use
    x = np.array(setup.values)
    fit = stats.fit_replicates(x[use], means[use], replicates[:, use], setup.confidence)
    centre = measured[use[len(use) // 2]]
    params = _centre_params(setup, float(np.exp(np.log(x[use]).mean())), centre)
    terms = get_bound(theorem.bound).term_values(for_bound(theorem.bound, params))
    dominant = max(terms, key=terms.__getitem__)
    exponent = term_exponents(theorem.bound, params, setup.vary)[dominant]
    curve = _curve(theorem.bound, setup, centre)
    return RateResult(setup, theorem, rows, fit, float(exponent), dominant, curve, samples)


# ------------------------------------------------------------------------------ presets
#: Prox-SGD's quick presets (and :class:`RateSetup`'s defaults): a regime where the output improves
#: on w0 = 0 at every grid point and the rate bound's privacy term dominates at the grid's centre.
#: Chosen from the constants (logistic-ridge, kappa 3, R = 15, K = n / R, the paper's noise): the
#: measured error is the accumulated noise, about 2.5e3 d / (n eps)^2 (d = 11: 0.70 at n 960, eps 0.2),
#: against 0.043 at w0 (d = 3); the bound's privacy term dominates its statistical one while
#: eps^2 n < 35 d. d = 3, n = 8192 and eps around 0.1 meet both with room: at eps 0.07 the mean is
#: about half the start, and eps^2 n is 80 < 105 at the centre (measured: docs/rates.md, quick mode).
_QUICK = {
    "eps": dict(values=(0.07, 0.14)),
    "n": dict(values=(6144, 12288)),
    "M": dict(values=(2, 4), N=4),
    "N": dict(values=(2, 4)),
    "d": dict(values=(3, 5), eps=0.115),
}
#: The regime of the full grids and of :func:`noise_dominated_setup` (the quick presets up to round
#: 7): n 960, eps 0.2, d 11, where the bound's privacy term dominates and the output is the
#: accumulated noise, *worse than w0* (mean 0.70 against 0.012 at the start): it exhibits the privacy
#: term's exponents, not the algorithm's utility (the verdict says ``no-improvement``).
_NOISE_BASE = dict(n=960, eps=0.2, d=11)
_NOISE = {
    "eps": dict(values=(0.05, 0.1, 0.2, 0.4)),
    "n": dict(values=(240, 480, 960, 1920)),
    "M": dict(values=(1, 2, 4, 8), N=8),
    "N": dict(values=(2, 4, 8, 16)),
    "d": dict(values=(5, 9, 17, 33)),
}
_FULL = {
    "eps": dict(values=tuple(np.round(np.geomspace(0.025, 3.2, 8), 4))),
    "n": dict(values=(120, 240, 480, 960, 1920, 3840, 7680, 15360)),
    "M": dict(values=(1, 2, 4, 8, 16), N=16),
    "N": dict(values=(2, 4, 8, 16, 32)),
    "d": dict(values=(3, 5, 9, 17, 33, 65)),
}
def prescribed_setup(algorithm: str = "isrl-prox-sgd", vary: str = "n", quick: bool = False,
                     **overrides) -> RateSetup:
    """The algorithm at its theorem's own prescriptions (``rounds=None``; its :attr:`Theorem.prescribed`),
    with the non-private floor and, in full mode, the runs from the optimum (``noise_floor``)."""
    prescribed = get_theorem(algorithm).prescribed
    if prescribed is None:
        have = sorted(name for name, t in THEOREMS.items() if t.prescribed is not None)
        raise ValueError(f"algorithm: prescribed presets exist for {have}, got {algorithm!r}")
    params = dict(prescribed)
    quick_baseline = params.pop("quick_baseline", False)
    grids, quick_grids = params.pop("values"), params.pop("quick_values")
    trials, quick_trials = params.pop("trials"), params.pop("quick_trials")
    if vary not in grids:
        raise ValueError(f"vary: prescribed presets for {algorithm} vary one of {sorted(grids)}, got {vary!r}")
    params.update(values=(quick_grids if quick else grids)[vary], trials=quick_trials if quick else trials,
                  rounds=None, baseline=not quick or quick_baseline, noise_floor=not quick)
    return RateSetup(algorithm=algorithm, vary=vary, **{**params, **overrides})


def quick_setup(algorithm: str = "isrl-prox-sgd", vary: str = "eps", **overrides) -> RateSetup:
    """A small grid where the output improves on w0 and, for Prox-SGD, the rate bound's privacy
    term dominates at the grid's centre (:data:`_QUICK`; PL-SVRG, SPIDER: their theorem's ``own_grid``,
    its ``quick_values`` and ``quick_fixed``)."""
    return _preset(algorithm, vary, False, overrides)


def noise_dominated_setup(algorithm: str = "isrl-prox-sgd", vary: str = "eps", **overrides) -> RateSetup:
    """Prox-SGD (or SDP Prox-SGD) where the privacy noise dominates the measured error and the bound
    (n 960, eps 0.2, d 11; :data:`_NOISE`): the privacy term's exponents are measured cleanly, but
    the output is worse than w0 = 0 (``verdict`` ``no-improvement``); for tests of the noise's
    scaling and the mutation suite, not for utility."""
    if get_theorem(algorithm).own_grid is not None or vary not in _NOISE:
        raise ValueError(f"vary: noise-dominated presets exist for Prox-SGD over {sorted(_NOISE)}, "
                         f"got {algorithm!r} over {vary!r}")
    return RateSetup(algorithm=algorithm, vary=vary, **{**_NOISE_BASE, "trials": 128, **_NOISE[vary], **overrides})


def full_setup(algorithm: str = "isrl-prox-sgd", vary: str = "eps", **overrides) -> RateSetup:
    """A wider grid (into the regime where the bound's statistical term dominates), more trials,
    the non-private floor, and the slope fitted on the privacy-dominated points (Prox-SGD); twice
    the trials of the quick preset (PL-SVRG, SPIDER)."""
    return _preset(algorithm, vary, True, overrides)


def _preset(algorithm: str, vary: str, full: bool, overrides: dict) -> RateSetup:
    theorem = get_theorem(algorithm)
    if vary not in VARIABLES:
        raise ValueError(f"vary: must be one of {VARIABLES}, got {vary!r}")
    if theorem.own_grid is not None:
        params = dict(theorem.own_grid)
        grid, quick = params.pop("values"), params.pop("quick_values", {})
        quick_fixed = params.pop("quick_fixed", {})
        if vary not in grid:
            raise ValueError(f"vary: presets for {algorithm} vary one of {sorted(grid)}, got {vary!r}")
        params.update(values=grid[vary] if full else quick.get(vary, grid[vary]),
                      trials=params["trials"] * (2 if full else 1))
        if not full:
            params.update(quick_fixed.get(vary, {}))
    elif vary not in (_FULL if full else _QUICK):
        raise ValueError(f"vary: presets for {algorithm} vary one of {sorted(_FULL if full else _QUICK)}, got {vary!r}")
    elif full:
        params = {**_NOISE_BASE, **_FULL[vary], "trials": 192, "fit_privacy_only": True,
                  "baseline": theorem.baseline}
    else:
        params = {**_QUICK[vary], "trials": 128}
    return RateSetup(algorithm=algorithm, vary=vary, **{**params, **overrides})


# --------------------------------------------------------------------------- comparison
@dataclass
class Comparison:
    """Two algorithms on the same grid: the ratio of their means and its slope."""

    first: RateResult
    second: RateResult
    ratio: list[dict]
    fit: stats.PowerLawFit
    theory_exponent: float

    def to_dict(self) -> dict:
        return {"vary": self.first.setup.vary, "first": self.first.setup.algorithm,
                "second": self.second.setup.algorithm, "ratio_slope": self.fit.slope,
                "ratio_slope_ci": list(self.fit.slope_ci), "theory_exponent": self.theory_exponent,
                "ratio": self.ratio}


def compare(setup: RateSetup, other: str = "sdp-prox-sgd", progress: bool | str | None = False) -> Comparison:
    """Run ``setup`` and the same grid with ``other``; fit the slope of mean(other)/mean(first).

    The theory exponent is that of the ratio of the two rate bounds' privacy terms (e.g. Thm 2.1:
    SDP/ISRL-DP = M ln^2(d/delta) / (N^2 ln(1/delta)), exponent -1 in N when M = N).
    """
    first = run_rates(setup, progress)
    second = run_rates(replace(setup, algorithm=other, baseline=False), progress)
    reps = (stats.bootstrap_means(second.samples, setup.bootstrap, setup.seed + 1)
            / stats.bootstrap_means(first.samples, setup.bootstrap, setup.seed))
    means = np.array([r2["mean"] / r1["mean"] for r1, r2 in zip(first.rows, second.rows)])
    lo, hi = stats.percentile_interval(reps, setup.confidence)
    fit = stats.fit_replicates(np.array(setup.values), means, reps, setup.confidence)
    centre = len(first.rows) // 2
    params = {k: first.rows[centre][k] for k in ("n", "N", "M", "d", "eps", "delta", "L", "mu", "kappa")}
    e1 = term_exponents(first.theorem.bound, params, setup.vary)["privacy"]
    e2 = term_exponents(second.theorem.bound, params, setup.vary)["privacy"]
    ratio = [{"value": v, "ratio": float(m), "ci_low": float(x), "ci_high": float(y)}
             for v, m, x, y in zip(setup.values, means, lo, hi)]
    return Comparison(first, second, ratio, fit, e2 - e1)

