"""Distributed noise under Flower's SecAgg+ (silodp.integrations.secagg): the quantization
settings make SecAgg+'s own quantize/mask/mod/dequantize the identity on the silos' residues, and
on the simulation engine (3 WBCD silos, 2 rounds, silo 0 dropping out in round 2) the model trains
below the majority-class error, the printed epsilon is silodp's certificate of the same
configuration, and the round summed over 2 silos is still within it (reconstruction threshold 2)."""

import contextlib
import os
import sys
import threading
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
pytest.importorskip("flwr")

from silodp.accounting import distributed as acc  # noqa: E402
from silodp.integrations import secagg  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flower_secagg"


def test_secagg_quantization_is_the_identity_on_the_residues():
    """Flower's own quantize (stochastic rounding), weight factor and dequantize with offset, as
    SecAggPlusWorkflow applies them, return the silos' sum modulo 2^bits exactly."""
    from flwr.common.secure_aggregation.quantization import dequantize, quantize

    p = acc.calibrate("skellam", 8, 1.0, 3, 20, 3.0, 1e-5, 1, vector_norm=10.0)
    s = secagg.workflow_settings(p)
    rng = np.random.default_rng(0)
    residues = [rng.integers(0, p.modulus, size=8) for _ in range(3)]
    for n in (3, 2):
        q = [quantize([secagg.to_flower(r, p)], s["clipping_range"], s["quantization_range"])[0] for r in residues[:n]]
        total = np.mod(sum(x.astype(np.int64) for x in q), s["modulus_range"])
        agg = dequantize([total], s["clipping_range"], s["quantization_range"])[0]
        agg = (agg - (n - 1) * s["clipping_range"]) / n  # the workflow's offset and 1 / total weight
        assert np.array_equal(secagg.from_flower(agg, n, p), np.mod(sum(residues[:n]), p.modulus))
    with pytest.raises(ValueError, match="bits"):
        secagg.workflow_settings(acc.DistributedParams("skellam", 8, 1.0, 3, 3, 31, 1, 1.0, 1.0))


def test_secagg_simulation_trains_certifies_and_survives_a_dropout():
    pytest.importorskip("ray", reason="the simulation engine needs flwr[simulation] (Ray)")
    import psutil

    sys.path.insert(0, str(EXAMPLE))
    from run_simulation import simulate

    before = set(psutil.Process().children(recursive=True))
    seen: set = set()
    done = threading.Event()

    def watch():  # Ray's actors outlive their raylet as orphans: note every descendant while it runs
        while not done.wait(0.1):
            seen.update(p for p in psutil.Process().children(recursive=True) if p not in before)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        res = simulate("discrete-gaussian", rounds=2, epsilon=4.0, delta=1e-5, bits=20, drop=(0, 2))
    finally:
        done.set()
        watcher.join()
        for proc in seen:  # every Ray/Flower process this test started, by its id
            with contextlib.suppress(psutil.Error):
                proc.kill()
        _, alive = psutil.wait_procs(list(seen), timeout=10)
    assert not alive
    xs, ys, _, _ = __import__("run_simulation").wbcd_silos()
    p = acc.calibrate("discrete-gaussian", 31, 1.0, 3, 20, 4.0, 1e-5, 2, summed=2, vector_norm=64.0)
    assert res["epsilon"] == acc.certified_epsilon(p, 1e-5) <= 4.0
    # silo 0 dropped in round 2 (round 1 may also start with the first 2 nodes up): never below 2
    assert len(res["summed"]) == 2 and res["summed"][1] == 2 and min(res["summed"]) >= 2
    assert res["test_error"] < res["majority_error"]
