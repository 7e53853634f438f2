"""One-run audits of the simulator's real algorithm runs: m gradient canaries in silo 0, one run.

``audit_simulator(mutation, canaries=m)`` builds a federation whose records have ``d`` real
features plus m *free* coordinates (zero for every real record), puts m canary records in silo 0
(canary j: ``x = A e_{d+j}``, label ``+Y`` when included, S_j = 1, or ``-Y``: replace-one
neighbours, the silo's size fixed), runs the real algorithm (:mod:`silodp.algorithms`) ONCE with
the mutation's channel (:meth:`~.mutations.Mutation.context`: the same switch the many-run
game uses) and scores canary j from what the ISRL-DP server sees, silo 0's messages: minus the
sum over releases of coordinate d + j (under the squared loss the canary's clipped gradient is
``-+L e_{d+j}`` up to 1/A, the gradient canary of :mod:`.canaries`). The claim is the accounting
layer's calibration of the *correct* algorithm at the target epsilon (as in the many-run game).

The one-run audit reads a per-canary signal, so it applies to the bugs that act on every record
(:data:`ONE_RUN_MUTATIONS`). The others need one special canary per run -- ``median-clip`` (the
batch median moves with one record), ``spider-sensitivity`` (steered iterates),
``with-replacement-as-disjoint`` (a homogeneous silo), ``per-layer-clip`` (a canary's excess lives
in every parameter tensor, shared by the canaries of one silo) -- and ``audit_simulator`` hands
them to the few-run audit of :mod:`.silo_canaries` (one canary per silo, the silos independent
runs: :data:`~.silo_canaries.FEW_RUN_MUTATIONS`).

Full batches make each canary's released sum a Gaussian mechanism (a composition of Gaussians),
so the f-DP one-run bound (:func:`.onerun.fdp_epsilon`) decides where the mutated run is still
Gaussian; ``shared-seed`` releases are not (the noise cancels), and Steinke et al.'s bound, valid
for every mechanism, decides there. For ``shared-seed`` the adversary subtracts silo 1's message
(no canary there: its free coordinates carry the shared noise alone).
"""

from __future__ import annotations

import dataclasses
import time

import numpy as np

from silodp.verify.audit.onerun import CanaryScores, RunAudit, judge_run

#: canary feature value A and label magnitude Y (squared loss: the residual keeps its sign)
CANARY_SCALE = 1e3
CANARY_LABEL = 1e6


@dataclasses.dataclass(frozen=True)
class OneRunScenario:
    """The run a mutation is audited on: algorithm parameters, silos, the batch as a fraction of
    silo 0's records, the estimator that decides, and the adversary's statistic per canary: "sum"
    (minus the sum over releases) or "range" (2 mean - max - min over releases: with one noise draw
    shared by every release, a canary drawn in some rounds only shows a noise-free level shift,
    below the majority level when its gradient is -L, i.e. when it is included)."""

    params: dict
    num_silos: int = 2
    batch_fraction: float = 1.0
    #: the claim the run is calibrated to (a factor of 2 in the noise shows best at a larger mu)
    epsilon: float = 2.0
    verdict_by: str = "fdp"
    score: str = "sum"


_FULL = dict(rounds=4, step_size=0.1, replacement=False)
#: mutation -> the one-run scenario that catches it (its correct counterpart: the same run, switch off)
ONE_RUN_MUTATIONS: dict[str, OneRunScenario] = {
    "halve-noise": OneRunScenario(_FULL, epsilon=4.0),
    "missing-k": OneRunScenario(_FULL),
    "noise-on-average-not-sum": OneRunScenario(_FULL, num_silos=4, epsilon=4.0),
    "shared-seed": OneRunScenario(dict(_FULL, rounds=8), batch_fraction=0.25, verdict_by="steinke", score="range"),
}


@dataclasses.dataclass(frozen=True)
class SimulatorAudit(RunAudit):
    """Result of :func:`audit_simulator` (the issue's JSON keys, then the run's)."""

    algorithm: str
    mutation: str | None
    rounds: int
    wall_s: float


def canary_federation(num_silos: int, n: int, d: int, included: np.ndarray, seed: int = 0):
    """``num_silos`` silos of ``n + m`` records (m = len(included)), ``d + m`` features: real records
    ``x ~ N(0, I_d)`` (zero free coordinates), ``y = x w* + 0.1 N(0, 1)``; silo 0's last m records
    are the canaries ``A e_{d+j}`` with label ``+-Y`` by ``included``."""
    import torch

    from silodp.algorithms.federation import Federation

    m = len(included)
    gen = torch.Generator().manual_seed(int(seed))
    x = torch.randn(num_silos, n + m, d, generator=gen, dtype=torch.float64)
    w_true = torch.randn(d, generator=gen, dtype=torch.float64) / d ** 0.5
    y = x @ w_true + 0.1 * torch.randn(num_silos, n + m, generator=gen, dtype=torch.float64)
    x = torch.cat([x, torch.zeros(num_silos, n + m, m, dtype=torch.float64)], dim=-1)
    x[0, n:] = 0.0
    x[0, n + torch.arange(m), d + torch.arange(m)] = CANARY_SCALE
    y[0, n:] = torch.as_tensor(np.where(included, CANARY_LABEL, -CANARY_LABEL))
    return Federation(x, y, torch.full((num_silos,), n + m))


def audit_simulator(mutation: str, canaries: int | None = None, counterpart: bool = False,
                    algorithm: str = "isrl-prox-sgd", epsilon: float | None = None, delta: float = 1e-5, n: int = 20,
                    d: int = 4, estimator: str | None = None, alpha: float = 0.05, seed: int = 0):
    """One run of ``algorithm`` in ``mutation``'s scenario (:data:`ONE_RUN_MUTATIONS`) with the bug
    switched on in its channel (off: ``counterpart``), ``canaries`` canaries in silo 0 (default
    4000), judged against the correct algorithm's claim at the target ``epsilon`` (default: the
    scenario's) by ``estimator`` (default: the scenario's). A mutation of
    :data:`~.silo_canaries.FEW_RUN_MUTATIONS` gets its few-run audit instead
    (:func:`~.silo_canaries.audit_silos`: ``canaries`` silos, one canary each, in its own scenario)."""
    from silodp.verify.audit.silo_canaries import FEW_RUN_MUTATIONS, audit_silos

    if mutation in FEW_RUN_MUTATIONS:
        return audit_silos(mutation, silos=canaries, counterpart=counterpart, epsilon=epsilon, delta=delta,
                           estimator=estimator, alpha=alpha, seed=seed)
    if mutation not in ONE_RUN_MUTATIONS:
        names = sorted({*ONE_RUN_MUTATIONS, *FEW_RUN_MUTATIONS})
        raise ValueError(f"mutation: simulator audits cover {names}, got {mutation!r}")
    return _audit_one_run(mutation, 4000 if canaries is None else canaries, counterpart, algorithm, epsilon, delta,
                          n, d, estimator, alpha, seed)


def _audit_one_run(mutation: str, canaries: int, counterpart: bool, algorithm: str, epsilon: float | None,
                   delta: float, n: int, d: int, estimator: str | None, alpha: float, seed: int) -> SimulatorAudit:
    """:func:`audit_simulator` of a mutation of :data:`ONE_RUN_MUTATIONS`."""

    from silodp.algorithms import Problem, get_algorithm, linear_model
    from silodp.algorithms.privacy import calibrate_algorithm
    from silodp.verify.audit.mutations import get_mutation
    from silodp.verify.instruments import RecordingContext

    if int(canaries) < 2:
        raise ValueError(f"canaries: need at least 2, got {canaries}")
    sc = ONE_RUN_MUTATIONS[mutation]
    started = time.perf_counter()
    included = np.random.default_rng([seed, 24]).random(int(canaries)) < 0.5
    fed = canary_federation(sc.num_silos, n, d, included, seed)
    problem = Problem(linear_model(d + int(canaries)), "squared", clip=1.0)
    k = max(1, int(sc.batch_fraction * int(fed.counts[0])))
    mut = None if counterpart else get_mutation(mutation)
    params = dict(sc.params, batch_size=k, **(mut.params if mut else {}))
    cfg = get_algorithm(algorithm, **params).plan.transcript_config(problem, fed)
    cal = calibrate_algorithm(algorithm, cfg, sc.epsilon if epsilon is None else epsilon, delta)
    algo = get_algorithm(algorithm, **params, sigmas=dict(cal.sigmas), record_transcript=True, metrics_every=0)
    if mut is not None:
        mut.check(algo)
    res = algo.run(problem, fed, seed=seed, context=mut.context() if mut else RecordingContext)
    free = slice(d, d + int(canaries))
    rows = []
    for entry in res.transcript:
        rows.append(entry["messages"][0, free].detach().double().numpy())
    rows = np.asarray(rows)
    scores = 2 * rows.mean(0) - rows.max(0) - rows.min(0) if sc.score == "range" else -rows.sum(0)
    verdict = judge_run(CanaryScores(scores, included), cal.epsilon, delta, alpha, estimator or sc.verdict_by)
    return SimulatorAudit(**verdict, algorithm=algorithm, mutation=None if counterpart else mutation, rounds=int(sc.params["rounds"]),
                          wall_s=time.perf_counter() - started)


__all__ = ["ONE_RUN_MUTATIONS", "OneRunScenario", "SimulatorAudit", "audit_simulator", "canary_federation"]
