"""One run of a sweep: data, model, noise, algorithm, metrics -- and the calibration it needs.

Noise comes from the algorithm's plan (``calibrate``, ``certify_noise``) as in a run, but
a sweep calibrates each distinct *transcript* once instead of once per run: the accounting
config of a run (its ``Transcript``, built by the algorithm itself, and the
``calibration_settings`` its hooks read) is taken with clip L = 1, and the resulting noise standard deviations are
multiplied by the run's clip. This is exact, not an approximation: every sensitivity of the
paper's ISRL-DP messages is proportional to L (2L/K, 4L/K, 2L/n), so the event of a run with clip
L and noise L * sigma is *the same event* as the one calibrated (tested); DP-SCAFFOLD's noise
std sigma_g 2C / m is proportional to C too.

A request carries the accounting version (:data:`silodp.accounting.version.ACCOUNTING_VERSION`)
it was made under; a stored calibration is used only under the same version and after
:func:`recertify` has evaluated what its noise certifies (one epsilon evaluation).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import time
import traceback
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .grid import RunConfig

if TYPE_CHECKING:
    from silodp.algorithms.data import FederatedData


class SkipRun(Exception):
    """A run that cannot be done as configured, for a documented reason (recorded as skipped)."""


def paper_batch_size(n: int, rounds: int, epsilon: float = 24.0) -> int:
    """App H.2: K = n sqrt(epsilon) / (2 sqrt(R)), at least 1 and at most n (the authors' code
    evaluates it at epsilon = 24, "the largest epsilon that we test", for every run)."""
    return max(1, min(int(n), int(n * math.sqrt(epsilon) / (2.0 * math.sqrt(rounds)))))


def regularizer(spec: str | None):
    """f1 from a short spec: None (f1 = 0), "l1:LAM" or "l2:LAM" (silodp.algorithms.prox)."""
    from silodp.algorithms.prox import L1, L2Squared

    if spec is None:
        return None
    kind, _, lam = spec.partition(":")
    kinds = {"l1": L1, "l2": L2Squared}
    try:
        return kinds[kind](float(lam))
    except (KeyError, ValueError):
        raise ValueError(f"regularizer: must be 'l1:LAM' or 'l2:LAM', got {spec!r}") from None


@dataclass
class Prepared:
    """What a run needs before its noise is known."""

    data: "FederatedData"
    train: object
    problem: object
    params: dict
    delta: float
    private: bool
    algorithm_class: type


def prepare(cfg: RunConfig) -> Prepared:
    """Load (cached) data, build the problem and the algorithm's non-privacy parameters."""
    from silodp.algorithms import Problem
    from silodp.algorithms.registry import ALGORITHMS

    from .datasets import load_cached, model_for

    cls = ALGORITHMS.get(cfg.algorithm)
    if cls is None:
        raise SkipRun(f"algorithm {cfg.algorithm!r} is not registered (have {sorted(ALGORITHMS)})")
    data = load_cached(cfg.dataset, cfg.seed, cfg.val_fraction, cfg.test_fraction, cfg.data, cfg.partition)
    train = data.train.with_availability(cfg.silos_per_round)
    problem = Problem(model_for(data, cfg.model), data.loss, regularizer=regularizer(cfg.regularizer), clip=cfg.clip)
    n = train.min_size
    batch = cfg.batch_size if cfg.batch_size is not None else paper_batch_size(n, cfg.rounds, cfg.batch_epsilon)
    params = dict(rounds=cfg.rounds, batch_size=batch, step_size=cfg.step_size, replacement=cfg.replacement,
                  metrics_every=0)
    own = dict(cfg.params)
    if own.get("local_steps") is not None and cfg.batch_size is None:
        params["batch_size"] = max(1, batch // own["local_steps"])  # the rule's K records over the local steps
    params.update(own)
    delta = cfg.delta if cfg.delta is not None else 1.0 / n ** 2
    return Prepared(data, train, problem, params, delta, bool(cls.private) and cfg.epsilon is not None, cls)


def calibration_request(cfg: RunConfig, prep: Prepared | None = None) -> dict | None:
    """The calibration a private run needs, as plain data (None when it is not private): the
    algorithm's transcript at clip 1 and its :meth:`~silodp.algorithms.plan.Plan.calibration_settings`
    (key ``settings``, where it has any). Runs differing only in step size and clip share it."""
    prep = prep or prepare(cfg)
    if not prep.private:
        return None
    algo = prep.algorithm_class(**prep.params)
    tc = dataclasses.replace(algo.plan.transcript_config(prep.problem, prep.train), clip=1.0)
    from silodp.accounting.version import ACCOUNTING_VERSION

    settings = algo.plan.calibration_settings()
    return {"algorithm": cfg.algorithm, "method": cfg.calibration, "epsilon": cfg.epsilon, "delta": prep.delta,
            "transcript": dataclasses.asdict(tc), **({"settings": settings} if settings else {}),
            "accounting_version": ACCOUNTING_VERSION}


def _requested(request: dict, **params):
    """The algorithm of ``request`` (its calibration settings, method and ``params``) and its transcript."""
    from silodp.algorithms import privacy

    cls = privacy.algorithm_class(request["algorithm"])
    algo = cls(calibration=request["method"], **request.get("settings", {}), **params)
    return algo, privacy.stored_transcript(request["transcript"], cls.Transcript)


def request_key(request: dict) -> str:
    """The store key of a request: everything but the accounting version, which the stored
    request keeps, so that a calibration from another version is found, refused and redone; the
    transcript as keyed before round 8 (:func:`silodp.algorithms.privacy.keyed_transcript`)."""
    from silodp.algorithms.privacy import keyed_transcript

    request = {k: v for k, v in request.items() if k != "accounting_version"}
    if isinstance(request.get("transcript"), dict):
        request["transcript"] = keyed_transcript(request["transcript"])
    text = json.dumps(request, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def calibrate_request(request: dict) -> dict:
    """Noise for one request (clip 1): ``status`` ok | skipped (no closed form in the paper) | failed."""
    try:
        algo, tc = _requested(request)
        eps, delta, method = request["epsilon"], request["delta"], request["method"]
        if method == "paper":
            try:
                algo.plan.paper_noise(tc, eps, delta)
            except ValueError as exc:
                return {"status": "skipped", "error": f"paper calibration: {exc}"}
        cal = algo.plan.calibrate(tc, eps, delta)
        spec = {} if cal.spec is None else {"accountant_spec": cal.spec.to_json()}
        return {"status": "ok", "sigmas": dict(cal.sigmas), "shuffle": dict(cal.shuffle), "epsilon": float(cal.epsilon),
                "delta": float(cal.delta), "accountant": cal.accountant, **spec}
    except Exception as exc:  # recorded; the runs that need it fail with this message
        return {"status": "failed", "error": f"calibration: {type(exc).__name__}: {exc}"}


#: Relative slack of a re-certification (floating-point noise of one epsilon evaluation).
RECERTIFY_RTOL = 1e-9


def _certified(request: dict, result: dict) -> float:
    """What the stored noise of ``result`` certifies for ``request`` (clip 1), with the stored
    accountant: the Gaussian transcript's certificate (:func:`silodp.algorithms.privacy.certify`),
    or the P_vec certificate of the stored (g, b, p, rotate) per message group."""
    from silodp.accounting.spec import AccountantSpec

    stored = result.get("accountant_spec")  # the spec, never the printed label
    spec = AccountantSpec.from_json(stored) if stored else result["accountant"]
    algo, tc = _requested(request, accountant=spec)
    return algo.plan.certify_stored(tc, result, request["delta"], request["epsilon"])


def recertify(request: dict, result: dict, stored_request: dict | None = None) -> str | None:
    """None when a stored calibration (``result`` of ``stored_request``, by default ``request``)
    certifies what it says for ``request``, else why not. Checked: the accounting version it was
    made under; its noise re-certified (one epsilon evaluation) at no
    more than its stored epsilon, and for ``tight`` the guarantee the target was met for
    (``targeted_epsilon``: the stored epsilon, or DP-SCAFFOLD's toward its observer) at most the target; for ``paper``, the
    noise is the paper's closed form. A skipped calibration (no closed form) needs no check."""
    from silodp.accounting.version import ACCOUNTING_VERSION

    made = (request if stored_request is None else stored_request).get("accounting_version")
    if made != ACCOUNTING_VERSION:
        return f"made under accounting version {made!r}, now {ACCOUNTING_VERSION}"
    if result.get("status") == "skipped":
        return None
    try:
        stored = float(result["epsilon"])
        algo, tc = _requested(request)
        aimed = algo.plan.targeted_epsilon(tc, result.get("sigmas") or {}, request["delta"], stored)
        if request["method"] == "tight" and not aimed <= request["epsilon"] * (1 + RECERTIFY_RTOL):
            return f"stored epsilon {aimed} above the target {request['epsilon']}"
        if request["method"] == "paper" and result.get("sigmas"):
            paper = algo.plan.paper_noise(tc, request["epsilon"], request["delta"])
            if any(not math.isclose(result["sigmas"].get(k, math.nan), v, rel_tol=RECERTIFY_RTOL) for k, v in paper.items()):
                return "noise differs from the paper's closed form"
        certified = _certified(request, result)
    except Exception as exc:  # a malformed row certifies nothing
        return f"cannot re-certify: {type(exc).__name__}: {exc}"
    if not certified <= stored * (1 + RECERTIFY_RTOL):
        return f"its noise certifies epsilon {certified:.6g}, not the stored {stored:.6g}"
    return None


def evaluate(problem, w, federation) -> tuple[float | None, float | None]:
    """(error rate, objective F(w)) on a federation: ``1 - Problem.accuracy`` (pooled over the
    real records) and ``Problem.objective`` (mean over silos of each silo's mean loss, plus f1);
    a non-finite objective is ``None``."""
    accuracy = problem.accuracy(w, federation)
    loss = problem.objective(w, federation)
    return (None if accuracy is None else 1.0 - accuracy), (loss if math.isfinite(loss) else None)


def _metrics(prep: Prepared, w, prefix: str) -> dict:
    (test_error, test_loss), (val_error, val_loss) = evaluate(prep.problem, w, prep.data.test), evaluate(prep.problem, w, prep.data.val)
    return {f"{prefix}test_error": test_error, f"{prefix}val_error": val_error, f"{prefix}test_loss": test_loss,
            f"{prefix}val_loss": val_loss, f"{prefix}train_loss": evaluate(prep.problem, w, prep.train)[1]}


def _noise(prep: Prepared, cfg: RunConfig, calibration: dict) -> dict:
    """The algorithm's noise arguments from a clip-1 calibration: Gaussian standard deviations
    times the run's clip, or the binomial protocol's (g, b, p) per message group as they are
    (P_vec normalizes every message by its bound, so they do not depend on the clip; tested)."""
    try:
        return prep.algorithm_class.plan.noise_arguments(calibration.get("sigmas") or {}, calibration.get("shuffle"),
                                                         cfg.clip)
    except ValueError as exc:  # only a shuffle-DP plan needs more than standard deviations
        raise RuntimeError("calibration: a shuffle-DP calibration without protocol parameters (stored by an "
                           "older silodp); run with a new store") from exc


def execute(cfg: RunConfig, calibration: dict | None = None) -> dict:
    """Run ``cfg`` and return its record: status, metrics, certified epsilon, noise, wall time.

    Metrics are those of the algorithm's output ``w_priv`` (``test_error``, ``val_error``, losses)
    and, prefixed ``last_``, of the last iterate ``w_last`` (post-processing of the same released
    messages, so the same privacy): for SPIDER and SVRG, whose output is a uniformly random iterate
    (Alg 1, 3 line 17), selection can also be made for the last-iterate rule of MB-SGD.

    ``calibration``: the result of :func:`calibrate_request` for this run's request (required for
    private runs of algorithms the accounting layer knows)."""
    start = time.perf_counter()
    prep = prepare(cfg)
    kwargs = dict(prep.params)
    if prep.private:
        if calibration is not None:
            if calibration["status"] == "skipped":
                raise SkipRun(calibration["error"])
            if calibration["status"] != "ok":
                raise RuntimeError(calibration["error"])
            kwargs.update(epsilon=calibration["epsilon"], delta=calibration["delta"], **_noise(prep, cfg, calibration))
        else:
            raise ValueError("calibration: a private run needs its calibration (calibrate_request)")
    algo = prep.algorithm_class(**kwargs)
    result = algo.run(prep.problem, prep.train, seed=cfg.seed)
    metrics = {**_metrics(prep, result.w_priv, ""), "n": prep.train.min_size, "batch_size": kwargs["batch_size"]}
    if result.w_last is result.w_priv or bool((result.w_last == result.w_priv).all()):
        metrics.update({f"last_{k}": v for k, v in metrics.items() if k.endswith(("error", "loss"))})
    else:  # uniform-output algorithms (Alg 1, 3, 11): the last iterate too, as an ablation
        metrics.update(_metrics(prep, result.w_last, "last_"))
    eps = result.epsilon if prep.private else None
    return {"status": "ok", "error": None, "metrics": metrics,
            "certified_epsilon": eps if eps is not None and math.isfinite(eps) else None,
            "delta": result.delta if prep.private else None,
            "sigmas": {k: (v if math.isfinite(v) else None) for k, v in result.sigmas.items()},
            "wall_s": time.perf_counter() - start}


def execute_safely(cfg: RunConfig | dict, calibration: dict | None = None) -> dict:
    """:func:`execute`, with any exception turned into a failed (or skipped) record."""
    start = time.perf_counter()
    try:
        return execute(cfg if isinstance(cfg, RunConfig) else RunConfig.from_dict(cfg), calibration)
    except SkipRun as exc:
        return {"status": "skipped", "error": str(exc), "wall_s": time.perf_counter() - start}
    except Exception as exc:
        tb = traceback.format_exc(limit=6)
        return {"status": "failed", "error": f"{type(exc).__name__}: {exc}", "traceback": tb,
                "wall_s": time.perf_counter() - start}


def run_chunk(chunk: list[tuple[dict, dict | None]]) -> list[dict]:
    """Execute ``[(config dict, calibration or None), ...]`` with one torch thread; the worker
    task of the sweep runner (local pool or Dask)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return [execute_safely(c, cal) for c, cal in chunk]
    finally:
        torch.set_num_threads(threads)
