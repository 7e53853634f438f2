"""Whole-transcript audits of the shuffle-DP algorithms (paper Alg 7, 8, 9, 10).

The Gaussian game of :mod:`silodp.verify.audit.game` replays Gaussian messages; the shuffle
algorithms release P_vec outputs instead (binomial noise on every coordinate). Here the game is
played with the algorithms' real runs: ``trials`` independent runs per neighbouring dataset are
stacked by :func:`silodp.verify.rates.trials.run_trials` (P_vec drawn per trial) and the score of a
run is the final model's weight on the canary's free coordinate
(:func:`silodp.verify.audit.canaries.gradient_canary`), which only the canary's gradients move. The
final model is post-processing of the whole transcript, so the estimators' lower bound applies
to the transcript's claim: the epsilon that the accounting layer certified when the algorithm
calibrated its P_vec invocations (its plan's ``resolve``).
"""

from __future__ import annotations

import dataclasses

from silodp._validation import check_delta, check_positive
from silodp.verify.audit.audits import DEFAULT_DELTA, AuditResult, Claim, Scenario, _check_estimator, judge
from silodp.verify.audit.estimators import Scores

_FULL = dict(rounds=1, batch_size=20, replacement=False, step_size=0.5)
#: Default scenario per shuffle-DP algorithm: one round on full batches, so the P_vec releases
#: that carry the canary are few and the audit is as strong as it gets.
SDP_SCENARIOS: dict[str, Scenario] = {s.algorithm: s for s in (
    Scenario("sdp-prox-sgd", _FULL),
    Scenario("sdp-prox-svrg", dict(_FULL, inner_steps=1)),
    Scenario("sdp-pl-svrg", dict(_FULL, inner_steps=1, restarts=1)),
    Scenario("sdp-spider", dict(_FULL, rounds=2, period=1)),
)}


def sdp_scores(scenario: Scenario, epsilon: float, delta: float, trials: int, seed: int = 0,
               mutation: str | None = None) -> tuple[Scores, Claim]:
    """Scores of ``trials`` real runs per world, and the claim the algorithm calibrated for
    (``mutation``: a bug of :data:`silodp.verify.audit.mutations.SDP_MUTATIONS`; the claim is the one
    the buggy calibration makes, the runs are the buggy ones)."""
    import torch

    from silodp.algorithms import get_algorithm
    from silodp.verify.audit.mutations import get_sdp_mutation
    from silodp.verify.rates.trials import TrialContext, run_trials

    mut = None if mutation is None else get_sdp_mutation(mutation)
    if mut is not None:
        scenario = dataclasses.replace(scenario, **mut.scenario)
    problem, worlds, _ = scenario.build()
    params = dict(scenario.algorithm_params(), metrics_every=0,
                  w0=problem.model.init(torch.Generator().manual_seed(seed), dtype=worlds[0].x.dtype))
    if mut is not None:
        params.update(mut.params)
    # calibrate once (both worlds have the same sizes), then run both with those P_vec parameters
    claimed = dict(params, **(mut.claim_params if mut is not None else {}))
    _, certified, dl, shuffle, _ = get_algorithm(scenario.algorithm, epsilon=epsilon, delta=delta,
                                              **claimed).plan.resolve(problem, worlds[0])
    algo = get_algorithm(scenario.algorithm, epsilon=certified, delta=dl, shuffle_params=shuffle, **params)
    context = TrialContext if mut is None or mut.context is None else mut.context()
    free = scenario.d  # weight of the last input feature (the canary's free coordinate)
    scores = []
    for index, world in enumerate(worlds):
        def data(t, _gen, world=world):
            return world.x.expand(t, *world.x.shape), world.y.expand(t, *world.y.shape)

        scores.append(run_trials(algo, problem, data, trials, seed=seed + index, context=context).w_last[:, free].numpy())
    return Scores(scores[0], scores[1]), Claim(float(certified), float(dl), "pvec (whole transcript)", {})


def audit_sdp(algorithm: str, epsilon: float = 2.0, delta: float = DEFAULT_DELTA, trials: int = 20_000,
              estimator: str = "clopper-pearson", alpha: float = 0.05, seed: int = 0,
              scenario: Scenario | None = None, mutation: str | None = None) -> AuditResult:
    """Audit a shuffle-DP algorithm end to end (module docstring) against the epsilon it claims,
    optionally with the shuffle-DP bug ``mutation`` (:data:`silodp.verify.audit.mutations.SDP_MUTATIONS`)."""
    _check_estimator(estimator)
    sc = scenario if scenario is not None else SDP_SCENARIOS.get(algorithm)
    if sc is None:
        raise ValueError(f"algorithm: no shuffle-DP audit scenario for {algorithm!r}; one of {sorted(SDP_SCENARIOS)}")
    if int(trials) < 2:
        raise ValueError(f"trials: must be >= 2, got {trials}")
    scores, claim = sdp_scores(sc, check_positive("epsilon", epsilon), check_delta("delta", delta), int(trials), seed,
                               mutation)
    return judge(scores, claim, sc.algorithm, estimator, alpha, seed=seed)
