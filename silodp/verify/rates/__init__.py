"""Measured rates against the papers' bounds.

* :mod:`.runs` -- rate setups, runs, slope fits, comparisons (the entry points, re-exported here);
* :mod:`.trials` -- stacked trials of one algorithm; :mod:`.theorems` -- which bound and which
  prescriptions each algorithm is checked against; :mod:`.families` -- problem families with known
  constants; :mod:`.stats` -- power-law fits with confidence intervals; :mod:`.plots` -- figures.
"""

from silodp.verify.rates.runs import (
    INTEGER,
    NOISE,
    VARIABLES,
    VERDICTS,
    Comparison,
    RateResult,
    RateSetup,
    compare,
    full_setup,
    noise_dominated_setup,
    prescribed_setup,
    quick_setup,
    rate_verdict,
    run_rates,
    term_exponents,
)

__all__ = [
    "Comparison", "INTEGER", "NOISE", "RateResult", "RateSetup", "VARIABLES", "VERDICTS", "compare",
    "full_setup", "noise_dominated_setup", "prescribed_setup", "quick_setup", "rate_verdict", "run_rates", "term_exponents",
]
