"""Distributed discrete Gaussian (or Skellam) logistic regression on WBCD under Flower's SecAgg+,
on the simulation engine: 3 silos, each encodes and noises its own message, the server learns only
the modular sum (silodp.integrations.secagg).

    FLWR_TELEMETRY_ENABLED=0 PYTHONPATH=. python examples/flower_secagg/run_simulation.py [--drop]
"""

from __future__ import annotations

import argparse
import json

import numpy as np


def wbcd_silos(num_silos: int = 3, seed: int = 0):
    """WBCD standardized, 20% held out, the rest split at random into ``num_silos`` silos."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    x, y = x[order], y[order].astype(float)
    test = len(x) // 5
    mean, sd = x[test:].mean(0), x[test:].std(0) + 1e-12
    x = (x - mean) / sd
    xs = np.array_split(x[test:], num_silos)
    ys = np.array_split(y[test:], num_silos)
    return xs, ys, x[:test], y[:test]


def simulate(mechanism: str = "discrete-gaussian", rounds: int = 4, epsilon: float = 4.0, delta: float = 1e-5,
             bits: int = 20, drop: tuple[int, int] | None = None) -> dict:
    from flwr.simulation import run_simulation

    from silodp.integrations import secagg

    xs, ys, xt, yt = wbcd_silos()
    dep = secagg.deployment(xs, ys, mechanism, clip=1.0, vector_norm=64.0, bits=bits, epsilon=epsilon,
                            delta=delta, rounds=rounds, threshold=2)
    out: list[dict] = []
    run_simulation(server_app=secagg.make_server_app(dep, out.append), client_app=secagg.make_client_app(dep, drop),
                   num_supernodes=len(xs), backend_config={"client_resources": {"num_cpus": 1}})
    if not out:
        raise RuntimeError("the simulation ended without a result (see Flower's log)")
    res = out[0]
    majority = float(min(yt.mean(), 1 - yt.mean()))
    return {"epsilon": res["epsilon"], "summed": res["summed"], "test_error": secagg.error_rate(res["w"], xt, yt),
            "majority_error": majority}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--mechanism", default="discrete-gaussian", choices=("skellam", "discrete-gaussian"))
    ap.add_argument("--drop", action="store_true", help="silo 0 drops out in round 2")
    args = ap.parse_args()
    print(json.dumps(simulate(args.mechanism, drop=(0, 2) if args.drop else None)))
