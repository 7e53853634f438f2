"""The test error of tests/integrations/test_secagg.py's SecAgg+ runs over many runs: the false-failure
probability of its "below the majority-class error" assertions (silo noise and batch seeds are
secret, so the engine runs cannot be seeded).

    PYTHONPATH=. python benchmarks/secagg_error_tails.py [--runs 1000] [--only alg9 alg10]

Each run goes through the app's own silo and server code (silodp.integrations.secagg: batches,
clipping, encoding and noise, decoding, the server's steps) with the modular sum taken here
instead of by SecAgg+ (which returns exactly that sum, test_secagg_quantization_is_the_identity...),
for each configuration of the test module's ``RUNS`` (over ``DEFAULTS``), fresh batch seeds and
noise per run. Silo 0 is missing from rounds 1 and 2 (the engine run drops it in round 2 and may
start round 1 without it): the fewest messages the engine can sum there, so the most noise.
Printed per configuration: the runs, the error's mean, sd, max, 4th central moment m4, and
Markov's bound P(error >= majority) <= m4 / (majority - mean)^4 (distribution-free given m4;
m4 is the sample's).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _test_module():
    spec = importlib.util.spec_from_file_location("test_secagg", ROOT / "tests" / "integrations" / "test_secagg.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def tail(config: dict, runs: int, seed: int = 0) -> dict:
    """The error distribution of ``runs`` runs of one configuration (module docstring)."""
    import torch

    from silodp.integrations import secagg

    sys.path.insert(0, str(ROOT / "examples" / "flower_secagg"))
    from run_simulation import RUN_CONFIG, wbcd_silos

    xs, ys, xt, yt = wbcd_silos()
    cfg = {**RUN_CONFIG, **config}
    dep = secagg.deployment(cfg.pop("algorithm"), xs, ys, **cfg)
    rng = np.random.default_rng(seed)
    errors = []
    for _ in range(runs):
        seeds = rng.integers(0, 2 ** 62, size=len(xs))
        state = {"w": np.zeros(dep.dimension), "second": np.zeros(dep.dimension)}
        for r in range(1, dep.flower_rounds + 1):
            silos = range(1, len(xs)) if r <= 2 else range(len(xs))
            msgs = [dep.message(dep.terms([state["w"], state["second"]], i, r, int(seeds[i])), r,
                                torch.Generator().manual_seed(int(rng.integers(0, 2 ** 62)))) for i in silos]
            dep.step(state, np.mod(sum(msgs), 1 << dep.bits), len(msgs), r)
        errors.append(secagg.error_rate(state["w"], xt, yt))
    e = np.array(errors)
    majority = float(min(yt.mean(), 1 - yt.mean()))
    m4 = float(np.mean((e - e.mean()) ** 4))
    return {"runs": runs, "sums": dep.flower_rounds, "epsilon": dep.epsilon, "majority_error": majority,
            "mean": float(e.mean()), "sd": float(e.std(ddof=1)), "max": float(e.max()), "m4": m4,
            "markov_bound": m4 / (majority - e.mean()) ** 4 if e.mean() < majority else 1.0}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--only", nargs="+", help="names of the test module's RUNS (default: every one)")
    args = ap.parse_args()
    test = _test_module()
    for name in args.only or list(test.RUNS):
        print(json.dumps({"name": name, **tail({**test.DEFAULTS, **test.RUNS[name]}, args.runs)}), flush=True)


if __name__ == "__main__":
    main()
