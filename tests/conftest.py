"""Suite-wide settings. CI runs pytest with two workers on two cores: one intra-op thread per
worker avoids oversubscription (tiny torch steps were ~10x slower with the default threads).
Flower's telemetry is off for every test (no network at run time).

Hypothesis runs the "silodp-ci" profile unless ``--hypothesis-profile`` names another: each
property test draws the same examples every run (``derandomize``: seeded from the test's own
source), so CI's verdict is a function of the commit, never of the draw. The price is that a run
does not explore new examples; that is what ``--hypothesis-profile=explore`` is for (fresh random
examples each run), run by hand when a property or the code under it changes -- a failure
found there becomes a fixed ``@example``. No deadline and no ``too_slow`` health check: both time
the test on a shared machine (CI runs two workers on two cores), which no assertion may depend on."""

import os

from hypothesis import HealthCheck, settings

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")

settings.register_profile("silodp-ci", derandomize=True, deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", derandomize=False, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("silodp-ci")  # before the test modules build their settings(...) on it


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="also run the larger audits of real runs (docs/audit.md: the shipped-bug table, Flower)")
