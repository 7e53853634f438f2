"""Suite-wide settings. CI runs pytest with two workers on two cores: one intra-op thread per
worker avoids oversubscription (tiny torch steps were ~10x slower with the default threads).
Flower's telemetry is off for every test (no network at run time)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")


def pytest_addoption(parser):
    parser.addoption("--full", action="store_true", default=False,
                     help="also run the larger audits of real runs (docs/audit.md: the shipped-bug table, Flower)")
