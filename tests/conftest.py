"""Suite-wide settings. CI runs pytest with two workers on two cores: one intra-op thread per
worker avoids oversubscription (tiny torch steps were ~10x slower with the default threads).
Flower's telemetry is off for every test (no network at run time)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
