"""Privacy audits: the accountant's claim (an upper bound) against an empirical lower bound.

* :mod:`.audits` -- scenarios, the algorithm game, ``audit_gaussian|pvec|algorithm|papers``,
  detection rates (the entry points, re-exported here);
* :mod:`.game` -- the vectorized ISRL-DP distinguishing game and its end-to-end reference;
* :mod:`.sdp` -- whole-transcript audits of the shuffle-DP algorithms;
* :mod:`.canaries` -- the neighbouring datasets; :mod:`.mutations` -- deliberate privacy bugs;
* :mod:`.estimators` -- epsilon lower bounds from scores; :mod:`.onerun` -- from one run's canaries;
* real runs: :mod:`.opacus_audit`, :mod:`.flower_audit`, :mod:`.flower_mod` (silodp's Flower mod),
  :mod:`.simulator_audit` (the simulator: one run) and :mod:`.silo_canaries` (a few runs, one canary
  per silo), :mod:`.shipped` (the shipped bugs' table);
* :mod:`.testing` -- ``assert_dp``;
* :mod:`.plots` -- figures.
"""

from silodp.verify.audit.audits import (
    CANARIES,
    DEFAULT_DELTA,
    MUTATION_SCENARIOS,
    MUTATION_TRIALS,
    PAPER_CALIBRATIONS,
    SCENARIOS,
    AlgorithmGame,
    AuditResult,
    Claim,
    Scenario,
    audit_algorithm,
    audit_gaussian,
    audit_papers,
    audit_pvec,
    detection_rate,
    judge,
    prepare,
    scenario_for,
)

__all__ = [
    "AlgorithmGame", "AuditResult", "CANARIES", "Claim", "DEFAULT_DELTA", "MUTATION_SCENARIOS", "MUTATION_TRIALS",
    "PAPER_CALIBRATIONS", "SCENARIOS", "Scenario", "audit_algorithm", "audit_gaussian", "audit_papers", "audit_pvec",
    "detection_rate", "judge", "prepare", "scenario_for",
]
