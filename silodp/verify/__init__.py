"""Verify layer: privacy audits (:mod:`silodp.verify.audit`: games, estimators, mutations, testing)
and empirical rates against the bounds (:mod:`silodp.verify.rates`: runs, trials, families, stats).
torch is imported here.
"""

from silodp.verify.audit import (
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
)
from silodp.verify.audit.sdp import SDP_SCENARIOS, audit_sdp
from silodp.verify.audit.estimators import Scores, clopper_pearson_epsilon, estimate, gdp_epsilon
from silodp.verify.rates.families import Constants, Family, get_family, least_squares_ball, logistic_ridge, sigmoid_l1
from silodp.verify.audit.mutations import MUTATIONS
from silodp.verify.rates import Comparison, RateResult, RateSetup, compare, full_setup, quick_setup, run_rates
from silodp.verify.rates.stats import PowerLawFit, bootstrap_means, fit_power_law
from silodp.verify.audit.testing import assert_dp

__all__ = [
    "AlgorithmGame", "AuditResult", "Claim", "Comparison", "Constants", "Family", "MUTATIONS", "PowerLawFit",
    "RateResult", "RateSetup", "SDP_SCENARIOS", "Scenario", "Scores", "assert_dp", "audit_algorithm",
    "audit_gaussian", "audit_papers", "audit_pvec", "audit_sdp", "bootstrap_means", "clopper_pearson_epsilon",
    "compare", "detection_rate", "estimate", "fit_power_law", "full_setup", "gdp_epsilon", "get_family", "judge",
    "least_squares_ball", "logistic_ridge", "quick_setup", "run_rates", "sigmoid_l1",
]
