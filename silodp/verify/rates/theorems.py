"""What each rate experiment checks: the theorem's algorithm, family, metric and bounds.

A :class:`Theorem` ties an algorithm of Lowy, Ghafelebashi & Razaviyayn 2023 (arXiv:2203.06735) to

* the problem family it is run on (:mod:`silodp.verify.rates.families`) and the setting of the theorem
  ("SO": fresh i.i.d. data every trial, population excess risk; "ERM": one data set, expectation
  over the algorithm only, as Thms 2.2 and 3.1 state);
* the rate-form bound whose dominant term's exponent the fitted slope is compared with, and the
  explicit bound (if the paper has one) checked against the measured mean at the run's constants;
* the algorithm parameters at a grid point (:meth:`Theorem.plan`) -- the proof's prescriptions
  from :mod:`silodp.bounds` where they are runnable -- and the explicit bound's parameters at the
  noise actually used (:meth:`Theorem.explicit_params`).

Noise always comes from the accounting layer (the algorithm's ``calibration``); the explicit bounds
are evaluated at that noise, not at a formula's.

A registry (``tests/test_capabilities.py`` lists it in ``REGISTRIES``): :data:`THEOREMS` keys each
theorem by the algorithm it bounds, and each record carries its own presets (its grid, its
proof-prescribed settings, whether the non-private baseline runs), so :mod:`.runs` asks the theorem
and never compares an algorithm's name.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable

from silodp.bounds import get_bound


@dataclass(frozen=True)
class Theorem:
    """One theorem's rate experiment (see module docstring)."""

    algorithm: str
    theorem: str
    bound: str
    explicit: str | None
    printed: str | None
    family: str
    setting: str
    metric: str
    plan_fn: Callable
    explicit_fn: Callable | None = None
    #: the metric of a uniform output is its exact expectation over the iterates (the theorem bounds
    #: that expectation), not one draw per trial
    exact_uniform: bool = False
    #: the theorem's own quick / full preset (``values`` per variable, ``quick_values`` where the quick
    #: grid is smaller, and the run's settings); None: the shared Prox-SGD grids of :mod:`.runs`
    own_grid: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    #: the proof-prescribed preset (:func:`.runs.prescribed_setup`; ``quick_baseline``: the quick run
    #: keeps the non-private baseline); None: none
    prescribed: dict[str, Any] | None = field(default=None, hash=False, compare=False)
    #: whether the full preset runs the non-private baseline beside it (not for an SDP algorithm)
    baseline: bool = True

    def plan(self, point: dict, rounds: int | None, constants, ref) -> dict:
        """Algorithm keyword arguments (rounds, batch sizes, step size, ...) at ``point``."""
        return self.plan_fn(point, rounds, constants, ref)

    def explicit_params(self, point: dict, plan: dict, constants, ref, sigmas: dict) -> dict | None:
        """Parameters of :attr:`explicit` at the run's actual constants and noise (or None)."""
        if self.explicit_fn is None:
            return None
        return self.explicit_fn(point, plan, constants, ref, sigmas)


def problem_params(point: dict, constants, ref) -> dict:
    """The bound parameters a problem and grid point determine (before filtering per bound); the
    point's values may be arrays (a dense grid)."""
    out = {k: point[k] for k in ("n", "N", "M", "d", "eps", "delta")}
    out.update(L=constants.L, beta=constants.beta)
    if constants.mu is not None:
        out["mu"] = constants.mu
    if ref.Delta > 0:
        out["Delta"] = ref.Delta
    if ref.upsilon2_max > 0:
        out["upsilon"] = math.sqrt(ref.upsilon2_max)
    return out


def for_bound(bound_id: str, params: dict) -> dict:
    """``params`` restricted to what bound ``bound_id`` can use."""
    return get_bound(bound_id).split_params(params)[0]


# --------------------------------------------------------------------- Thm 2.1: Prox-SGD
def _prox_sgd_plan(point, rounds, constants, ref) -> dict:
    """``rounds`` given: R = rounds, K = floor(n/R). None: Thm E.1's prescription,
    R = ceil(2 kappa ln(mu Delta/L^2 min{Mn, eps^2 n^2 M/(d ln(1/delta))})), K = floor(n/R)."""
    if rounds is None:
        rounds = int(get_bound("thm2.1-isrl").prescribe(for_bound("thm2.1-isrl", problem_params(point, constants, ref)))["R"])
    rounds = int(rounds)
    k = int(point["n"]) // rounds
    if k < 1:
        raise ValueError(f"n: must be >= rounds ({rounds}) so that K = floor(n/R) >= 1, got {point['n']}")
    return {"rounds": rounds, "batch_size": k}


def _prox_sgd_explicit(point, plan, constants, ref, sigmas) -> dict:
    """eq. (19) unrolled with the silo-sampling term (``eq20-sampling``; it is ``eq20-corrected``
    at M = N) at the run's sigma: its ``eps`` is the one for which Prop D.2's
    sigma^2 = 16 L^2 ln(1/delta) / (eps K)^2 equals the sigma used; ``upsilon^2`` is the largest
    heterogeneity over the reference's probe points (a lower estimate of the supremum)."""
    k, sigma = plan["batch_size"], sigmas["sigma"]
    eps_eff = 4 * constants.L * math.sqrt(math.log(1 / point["delta"])) / (k * sigma)
    return {"Delta": ref.Delta, "K": k, "L": constants.L, "M": point["M"], "N": point["N"], "R": plan["rounds"],
            "n": point["n"], "d": point["d"], "delta": point["delta"], "eps": eps_eff, "kappa": constants.kappa,
            "mu": constants.mu, "upsilon": math.sqrt(max(ref.upsilon2_max, 1e-300))}


# ------------------------------------------------------------------- Thm 2.2: PL-SVRG
def _pl_svrg_plan(point, rounds, constants, ref) -> dict:
    """Thm E.2's prescription corrected for the halving (variant "halving": R = 48 kappa with the 8
    of eta kept, sigma_2 over the E Q messages sent; docs/paper-notes.md notes 29-30): S, K, E, eta,
    Q = floor(n/K), M = N. ``rounds`` given: the epochs E per restart."""
    p = get_bound("thm2.2-isrl").prescribe(for_bound("thm2.2-isrl", problem_params(point, constants, ref)),
                                           variant="halving")
    k = min(int(point["n"]), int(p["K"]))
    return {"rounds": int(p["E"]) if rounds is None else int(rounds), "batch_size": k,
            "inner_steps": max(1, int(point["n"]) // k), "restarts": int(p["S"]), "step_size": float(p["eta"])}


def _pl_svrg_explicit(point, plan, constants, ref, sigmas) -> dict:
    """``eq40-restarts`` (the restarted recursion of Thm E.2's proof) at the declared sigma_1,
    sigma_2, with R = E Q inner steps per restart and S restarts of the plan."""
    return {"Delta": ref.Delta, "eta": plan["step_size"], "mu": constants.mu, "beta": constants.beta,
            "R": plan["rounds"] * plan["inner_steps"], "S": plan["restarts"], "d": point["d"], "M": point["M"],
            "N": point["N"], "sigma1": sigmas["sigma1"], "sigma2": sigmas["sigma2"],
            "upsilon": math.sqrt(max(ref.upsilon2_max, 1e-300))}


# -------------------------------------------------------------------- Thm 3.1: SPIDER
def _spider_plan(point, rounds, constants, ref, replacement: bool = False) -> dict:
    """Thm F.1's corrected prescription (q with q eta^2 tau_2^2 <= 1/4, R, eta = 1/(2 beta),
    K1 = K2 = n; docs/paper-notes.md notes 16-18), M = N, at the proof's full batch (every record
    once per round); ``replacement``: K1 = K2 = n draws with replacement (Alg 3 as printed, not the
    proof's setting: a sampling floor the theorem does not have)."""
    p = get_bound("thm3.1").prescribe(for_bound("thm3.1", problem_params(point, constants, ref)), variant="corrected")
    n = int(point["n"])
    return {"rounds": max(1, math.ceil(p["R"])) if rounds is None else int(rounds), "batch_size": n,
            "batch_size2": n, "period": int(p["q"]), "step_size": float(p["eta"]), "replacement": bool(replacement)}


def _spider_plan_replacement(point, rounds, constants, ref) -> dict:
    return _spider_plan(point, rounds, constants, ref, replacement=True)


def _spider_explicit(point, plan, constants, ref, sigmas) -> dict:
    """eq. (45) re-derived (``eq45-corrected``) at the run's sigma_1 (and sigma_2 for q_small)."""
    return {"Delta": ref.Delta, "L": constants.L, "M": point["M"], "N": point["N"], "R": plan["rounds"],
            "d": point["d"], "eta": plan["step_size"], "n": point["n"], "sigma1": sigmas["sigma1"],
            "q": plan["period"], "beta": constants.beta, "sigma2": max(sigmas["sigma2"], 1e-300)}


#: The proof-prescribed settings of PL-SVRG (Thm 2.2) and SPIDER (Thm 3.1), M = N: their own grids.
_PL_SVRG_GRID = dict(n=500, eps=1.0, d=11, rounds=None, noise="tight", trials=64,
                     values={"eps": (0.5, 1.0, 2.0, 4.0), "n": (250, 500, 1000, 2000)})
_SPIDER_GRID = dict(n=250, eps=1.0, d=11, rounds=None, noise="tight", trials=16,
                    values={"eps": (0.5, 1.0, 2.0, 4.0), "n": (125, 250, 500, 1000)},
                    quick_values={"eps": (1.0, 2.0, 4.0)})  # at eps 0.5 the output is not below w0's

#: Every theorem at its own prescriptions (issue 14), in regimes where the output improves on w0 = 0:
#: Thm 2.1 (Prox-SGD: R, K of Thm E.1, its noise) over n at eps = 8, where the bound's statistical
#: term dominates, and over eps; Thm 2.2 (PL-SVRG: Thm E.2's R = 12 kappa, S, K, E, eta; tight noise)
#: over kappa at eps = 15, d = 3; Thm 3.1 (SPIDER: Thm F.1's corrected q, R, eta = 1/(2 beta),
#: K1 = K2 = n; tight noise) over eps and n, where the bound's optimization term (exponent -4/3)
#: dominates. ``quick`` keeps the ends of each grid and fewer trials.
_PROX_SGD_PRESCRIBED = dict(n=2000, eps=8.0, d=11, noise="paper", trials=192, quick_trials=64,
                            values={"n": (1000, 2000, 4000, 8000, 16000), "eps": (0.5, 1.0, 2.0, 4.0, 8.0)},
                            quick_values={"n": (1000, 4000), "eps": (1.0, 8.0)}, quick_baseline=True)
_PL_SVRG_PRESCRIBED = dict(n=1000, eps=15.0, d=3, noise="tight", trials=12, quick_trials=6,
                           values={"kappa": (2.0, 4.0, 8.0)}, quick_values={"kappa": (2.0, 4.0)})
_SPIDER_PRESCRIBED = dict(n=1000, eps=2.0, d=11, noise="tight", trials=32, quick_trials=8,
                          values={"eps": (1.0, 2.0, 4.0, 8.0), "n": (250, 500, 1000, 2000)},
                          quick_values={"eps": (1.0, 4.0), "n": (500, 2000)})

THEOREMS: dict[str, Theorem] = {
    "isrl-prox-sgd": Theorem("isrl-prox-sgd", "Thm 2.1 (ISRL-DP)", "thm2.1-isrl", "eq20-sampling", "eq20",
                             "logistic-ridge", "SO", "excess risk", _prox_sgd_plan, _prox_sgd_explicit,
                             prescribed=_PROX_SGD_PRESCRIBED),
    "sdp-prox-sgd": Theorem("sdp-prox-sgd", "Thm 2.1 (SDP)", "thm2.1-sdp", None, None, "logistic-ridge",
                            "SO", "excess risk", _prox_sgd_plan, baseline=False),
    "isrl-pl-svrg": Theorem("isrl-pl-svrg", "Thm 2.2 (ISRL-DP)", "thm2.2-isrl", "eq40-restarts", None,
                            "logistic-ridge", "ERM", "excess empirical risk", _pl_svrg_plan, _pl_svrg_explicit,
                            own_grid=_PL_SVRG_GRID, prescribed=_PL_SVRG_PRESCRIBED),
    "isrl-spider": Theorem("isrl-spider", "Thm 3.1 (ISRL-DP), full batch", "thm3.1", "eq45-corrected", "eq45",
                           "sigmoid-l1", "ERM", "squared gradient mapping norm", _spider_plan, _spider_explicit,
                           exact_uniform=True, own_grid=_SPIDER_GRID, prescribed=_SPIDER_PRESCRIBED),
    "isrl-spider-replacement": Theorem(
        "isrl-spider", "Thm 3.1 (ISRL-DP), K1 = K2 = n drawn with replacement (not the proof's setting)", "thm3.1",
        "eq45-corrected", "eq45", "sigmoid-l1", "ERM", "squared gradient mapping norm", _spider_plan_replacement,
        _spider_explicit, exact_uniform=True, own_grid=_SPIDER_GRID, prescribed=_SPIDER_PRESCRIBED),
}


def get_theorem(algorithm: str) -> Theorem:
    """The rate experiment for ``algorithm`` (one of :data:`THEOREMS`)."""
    if algorithm not in THEOREMS:
        raise ValueError(f"algorithm: rates are available for {sorted(THEOREMS)}, got {algorithm!r}")
    return THEOREMS[algorithm]
