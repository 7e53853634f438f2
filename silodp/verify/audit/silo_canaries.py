"""Few-run audits of the simulator's real runs for the bugs that need one special canary per run.

``median-clip`` (the batch median moves with one record), ``spider-sensitivity`` (steered
iterates), ``with-replacement-as-disjoint`` (a homogeneous silo) and ``per-layer-clip`` (a
canary's excess lives in every parameter tensor, shared by canaries of one silo) cannot hold
many canaries in one silo, as the gradient canaries of :mod:`.simulator_audit` do. Here each
*silo* is one trial: ``audit_silos(mutation, silos=R)`` builds a federation of R silos, silo j a
copy of the scenario's D or D' (:mod:`.canaries`) by a fair coin S_j, and runs the real algorithm
(the library's ``run``, the bug switched on through its channel
:meth:`~.mutations.Mutation.context`) once on all of them, in runs of at most ``chunk``
silos.

**Why the silos are independent runs.** Every release of these scenarios is made at a query
point no silo's message moves: the public start ``w0`` (one round: ``per-layer-clip``,
``median-clip``, ``with-replacement-as-disjoint``), or iterates steered by a replayed server
(``spider-sensitivity``: ``run(..., replay=)`` with :func:`.canaries.spider_replay`; ISRL-DP,
paper Def 4, protects a silo's transcript for every fixed sequence of the server's messages).
Silo j's transcript is then a function of its own records, batches and noise only, exactly the
transcript that silo would send in a run of its own: the R silos are R independent runs, each
holding one canary by a coin (the few-run audit of the Opacus ``shuffled-accounted-as-poisson``
row, vectorized: silos are batched tensors).

**Scored from what the ISRL-DP adversary sees**: silo j's messages. The white-box adversary
knows the code and every record but the coin; a noiseless run of the same code (``sigmas`` 0)
on the two worlds gives the mean messages ``mD_t``, ``mD'_t`` of each release t. ``shift``
scores ``sum_t <m_tj - mD_t, mD'_t - mD_t> / std_t^2`` (the likelihood ratio of a Gaussian
release with a known mean; with sampling with replacement, the canary's copies scale the same
shift, and the ratio stays monotone in it), with ``std_t`` the release's noise, fixed by the code
and not by the data in these scenarios; ``norm`` scores ``sum_t ||m_tj - mD_t||`` (``median-clip``:
the noise scale is the batch median, which the canary moves). The claim is the accounting
layer's calibration of the *correct* algorithm (the bug's parameters off) at the target epsilon.

Estimators: the silos are independent trials, so the Clopper-Pearson bound of the two-world
split (valid for every mechanism) decides where the mechanism is not Gaussian (``median-clip``:
a data-dependent noise scale; ``with-replacement-as-disjoint``: a mixture over the canary's
copies); where every silo's transcript is a composition of Gaussians with fixed means
(``per-layer-clip``, ``spider-sensitivity``: full batches at fixed query points) the f-DP
one-run bound is a proof and decides.
"""

from __future__ import annotations

import dataclasses
import math
import time

import numpy as np

from silodp.verify.audit.audits import Scenario
from silodp.verify.audit.onerun import CanaryScores, RunAudit, judge_run


@dataclasses.dataclass(frozen=True)
class SiloScenario:
    """A mutation's few-run audit: the game's :class:`~.audits.Scenario` for one silo (its D and
    D'), the claim's target ``epsilon``, the statistic (``shift`` | ``norm``), the estimator that
    decides and the default number of silos (trials)."""

    scenario: Scenario
    epsilon: float
    silos: int
    score: str = "shift"
    verdict_by: str = "clopper-pearson"


_FULL = dict(rounds=1, batch_size=20, replacement=False, step_size=0.1)
#: mutation -> its few-run scenario (the correct counterpart: the same silos, the switch off).
#: ``per-layer-clip`` uses 14 parameter tensors (each clipped to L: up to sqrt(14) L), the many-run
#: game's 4; ``spider-sensitivity`` and ``with-replacement-as-disjoint`` are read at epsilon 4 (a factor
#: of two in the noise, or the canary's repeated copies, shows best at a larger mu), where 10^5 silos
#: per world resolve the excess of the repeated copies (at epsilon 2 the game needs 3 x 10^5 per world).
FEW_RUN_MUTATIONS: dict[str, SiloScenario] = {
    "median-clip": SiloScenario(Scenario("isrl-prox-sgd", dict(_FULL, batch_size=21), num_silos=1, n=21,
                                         canary="median"), 2.0, 2000, score="norm"),
    "per-layer-clip": SiloScenario(Scenario("isrl-prox-sgd", _FULL, num_silos=1, hidden=(4,) * 6), 2.0, 4000,
                                   verdict_by="fdp"),
    "spider-sensitivity": SiloScenario(
        Scenario("isrl-spider", dict(rounds=4, period=4, batch_size=20, replacement=False, step_size=0.1), num_silos=1,
                 hidden=(1,), steer=True, noise_shape={"sigma1": 20.0, "sigma2": math.inf, "sigma2_hat": 1.0}),
        4.0, 64_000, verdict_by="fdp"),
    "with-replacement-as-disjoint": SiloScenario(Scenario("isrl-prox-sgd", _FULL, num_silos=1), 4.0, 400_000),
}


def stacked_worlds(worlds, included: np.ndarray):
    """R silos (R = len(included)): silo j is the one silo of D' where ``included[j]``, of D elsewhere."""
    import torch

    from silodp.algorithms.federation import Federation

    d, d2 = worlds
    inc = torch.as_tensor(np.asarray(included, bool))
    x = torch.where(inc[:, None, None], d2.x[0], d.x[0])
    y = torch.where(inc[:, None], d2.y[0], d.y[0])
    return Federation(x, y, d.counts[:1].expand(len(inc)).clone())


def _claim(sc: Scenario, problem, world, epsilon: float, delta: float):
    """(sigmas, certified epsilon) of the correct algorithm at the target."""
    from silodp.algorithms import get_algorithm
    from silodp.algorithms.privacy import calibrate_algorithm
    from silodp.verify.audit.audits import _calibrate_shape

    cfg = get_algorithm(sc.algorithm, **sc.algorithm_params()).plan.transcript_config(problem, world)
    if sc.noise_shape is not None:
        sigmas, eps, _ = _calibrate_shape(sc.algorithm, cfg, sc.noise_shape, epsilon, delta)
        return sigmas, eps
    cal = calibrate_algorithm(sc.algorithm, cfg, epsilon, delta)
    return dict(cal.sigmas), cal.epsilon


def _messages(algo, context, problem, fed, seed: int, replay) -> tuple[np.ndarray, list]:
    """Every release's messages ``[T, R, d]`` and noise std (a float, or one per silo) of one real run."""
    res = algo.run(problem, fed, seed=seed, replay=replay, context=context)
    rows = np.stack([e["messages"].detach().double().numpy() for e in res.transcript])
    return rows, [e["std"] for e in res.transcript]


def _steering(sc: Scenario, problem, silos: int):
    """The steered server's replay for ``silos`` silos (None: not steered), and the public start:
    the replay's, or an init seeded by the scenario's ``data_seed`` (part of the scenario, as its
    data: at a start where a canary's gradient vanishes in some tensor, per-layer clipping adds less)."""
    import torch

    from silodp.verify.audit import canaries

    if not sc.steer:
        return None, problem.model.init(torch.Generator().manual_seed(sc.data_seed), dtype=torch.float64)
    its = canaries.flip_iterates(problem.model, int(sc.params["rounds"]) + 1, seed=sc.data_seed)
    replay = canaries.spider_replay(its, float(sc.params["step_size"]), int(sc.params.get("period", 2)), silos)
    return replay, replay.w_priv


@dataclasses.dataclass(frozen=True)
class SiloAudit(RunAudit):
    """Result of :func:`audit_silos` (the issue's JSON keys, then the run's); ``runs``: the real
    runs (of at most ``chunk`` silos each) that held the ``canaries`` silos."""

    algorithm: str
    mutation: str | None
    rounds: int
    runs: int
    wall_s: float


def audit_silos(mutation: str, silos: int | None = None, counterpart: bool = False, epsilon: float | None = None,
                delta: float = 1e-5, estimator: str | None = None, alpha: float = 0.05, seed: int = 0,
                chunk: int = 50_000) -> SiloAudit:
    """The few-run audit of ``mutation`` (:data:`FEW_RUN_MUTATIONS`): ``silos`` silos (default: the
    scenario's), each one trial holding its canary by a coin, in real runs of at most ``chunk``
    silos with the bug switched on (off: ``counterpart``), judged against the correct algorithm's
    claim at ``epsilon`` (default: the scenario's) by ``estimator`` (default: the scenario's)."""
    from silodp.algorithms import get_algorithm
    from silodp.verify.audit.mutations import get_mutation
    from silodp.verify.instruments import RecordingContext

    if mutation not in FEW_RUN_MUTATIONS:
        raise ValueError(f"mutation: few-run simulator audits cover {sorted(FEW_RUN_MUTATIONS)}, got {mutation!r}")
    spec = FEW_RUN_MUTATIONS[mutation]
    total = spec.silos if silos is None else int(silos)
    if total < 20:
        raise ValueError(f"silos: need at least 20, one canary each (--canaries of silodp audit --simulator), got {silos}")
    if int(chunk) < 1:
        raise ValueError(f"chunk: must be >= 1, got {chunk}")
    started = time.perf_counter()
    sc = spec.scenario
    problem, worlds, _ = sc.build()
    sigmas, claimed = _claim(sc, problem, worlds[0], spec.epsilon if epsilon is None else epsilon, delta)
    mut = get_mutation(mutation)
    context = RecordingContext if counterpart else mut.context()
    base = dict(sc.algorithm_params(), record_transcript=True, metrics_every=0)
    # the means of each release in D and D' (noiseless, full batches: the bug's sampling off)
    replay, w0 = _steering(sc, problem, 2)
    ref = get_algorithm(sc.algorithm, **base, w0=w0, sigmas={k: 0.0 for k in sigmas})
    mean, _ = _messages(ref, context, problem, stacked_worlds(worlds, np.array([False, True])), seed, replay)
    m_d, shift = mean[:, 0], mean[:, 1] - mean[:, 0]
    algo = get_algorithm(sc.algorithm, **dict(base, **({} if counterpart else mut.params)), w0=w0, sigmas=sigmas)
    mut.check(algo)
    included = np.random.default_rng([seed, 24]).random(total) < 0.5
    size = -(-total // -(-total // int(chunk)))  # the fewest runs of at most ``chunk`` silos, sizes even
    starts = range(0, total, size)
    run_seeds = np.random.SeedSequence([seed, 24]).generate_state(len(starts))  # independent runs, any seed
    scores, runs = [], 0
    for start in starts:
        inc = included[start:start + size]
        replay, _ = _steering(sc, problem, len(inc))
        rows, std = _messages(algo, context, problem, stacked_worlds(worlds, inc), int(run_seeds[runs]), replay)
        dev = rows - m_d[:, None]
        if spec.score == "norm":
            scores.append(np.linalg.norm(dev, axis=-1).sum(0))
        else:
            scores.append(np.einsum("trd,td->r", dev, shift / np.array(std, float)[:, None] ** 2))
        runs += 1
    verdict = judge_run(CanaryScores(np.concatenate(scores), included), claimed, delta, alpha,
                        estimator or spec.verdict_by)
    return SiloAudit(**verdict, algorithm=sc.algorithm, mutation=None if counterpart else mutation,
                     rounds=int(sc.params["rounds"]), runs=runs, wall_s=time.perf_counter() - started)


__all__ = ["FEW_RUN_MUTATIONS", "SiloAudit", "SiloScenario", "audit_silos", "stacked_worlds"]
