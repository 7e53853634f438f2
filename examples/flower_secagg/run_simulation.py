"""Logistic regression on WBCD under Flower's SecAgg+, on the simulation engine: 3 silos, each
encodes and noises its own message, the server learns only the modular sum
(silodp.integrations.secagg). The run config's ``algorithm``: sdp-prox-sgd (paper Alg 7) or
sdp-prox-svrg (Alg 8, ``rounds`` epochs of 1 + ``inner_steps`` sums), sdp-pl-svrg (Alg 9,
``restarts`` of those) or sdp-spider (Alg 10, a fresh gradient every ``period`` rounds), the binomial P_vec reports
summed by SecAgg+ in the shuffler's role, or isrl-mb-sgd (the distributed twin of ISRL-DP
minibatch SGD with Skellam or discrete-Gaussian noise per silo).

    FLWR_TELEMETRY_ENABLED=0 PYTHONPATH=. python examples/flower_secagg/run_simulation.py \
        --algorithm sdp-prox-sgd [--drop]
    FLWR_TELEMETRY_ENABLED=0 PYTHONPATH=. python examples/flower_secagg/run_simulation.py \
        --algorithm isrl-mb-sgd --mechanism skellam --bits 20 [--drop]
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


#: The run config's defaults (every key a keyword of :func:`simulate`).
RUN_CONFIG = {"algorithm": "sdp-prox-sgd", "mechanism": "discrete-gaussian", "rounds": 3, "epsilon": 4.0,
              "delta": 1e-5, "bits": 20, "batch_size": 50, "threshold": 2, "inner_steps": None,
              "restarts": None, "period": None}


def simulate(drop: tuple[int, int] | None = None, **run_config) -> dict:
    """One run on the simulation engine (``run_config`` over :data:`RUN_CONFIG`); ``drop``: (silo,
    round) at which that silo drops out."""
    return simulate_runs([run_config], drop)[0]


def simulate_runs(run_configs: list[dict], drop: tuple[int, int] | None = None) -> list[dict]:
    """Several runs, one after the other in one session of the simulation engine (each
    ``run_config`` over :data:`RUN_CONFIG`; ``drop`` applies to each), one result per run."""
    from flwr.simulation import run_simulation

    from silodp.integrations import secagg

    xs, ys, xt, yt = wbcd_silos()
    deps = []
    for run_config in run_configs:
        unknown = set(run_config) - set(RUN_CONFIG)
        if unknown:
            raise ValueError(f"run_config: unknown keys {sorted(unknown)}")
        cfg = {**RUN_CONFIG, **run_config}
        deps.append(secagg.deployment(cfg.pop("algorithm"), xs, ys, **cfg))
    out: list[dict] = []
    run_simulation(server_app=secagg.make_server_app(deps, out.append), client_app=secagg.make_client_app(deps, drop),
                   num_supernodes=len(xs), backend_config={"client_resources": {"num_cpus": 1}})
    if len(out) != len(deps):
        raise RuntimeError(f"the simulation ended with {len(out)} of {len(deps)} results (see Flower's log)")
    majority = float(min(yt.mean(), 1 - yt.mean()))
    return [{"epsilon": res["epsilon"], "bits": dep.bits, "summed": res["summed"],
             "test_error": secagg.error_rate(res["w"], xt, yt), "majority_error": majority}
            for res, dep in zip(out, deps)]


if __name__ == "__main__":
    from silodp.integrations.secagg import ALGORITHMS

    ap = argparse.ArgumentParser()
    ap.add_argument("--algorithm", default=RUN_CONFIG["algorithm"], choices=ALGORITHMS)
    ap.add_argument("--mechanism", default=RUN_CONFIG["mechanism"], choices=("skellam", "discrete-gaussian"),
                    help="isrl-mb-sgd's per-silo noise")
    ap.add_argument("--bits", type=int, default=RUN_CONFIG["bits"], help="isrl-mb-sgd's residue width")
    ap.add_argument("--rounds", type=int, default=RUN_CONFIG["rounds"])
    ap.add_argument("--inner-steps", type=int, default=None, help="sdp-prox-svrg's and sdp-pl-svrg's Q (default floor(n / K))")
    ap.add_argument("--restarts", type=int, default=None, help="sdp-pl-svrg's S (default 3)")
    ap.add_argument("--period", type=int, default=None, help="sdp-spider's period (the paper's q; default 2)")
    ap.add_argument("--epsilon", type=float, default=RUN_CONFIG["epsilon"])
    ap.add_argument("--drop", action="store_true", help="silo 0 drops out in round 2")
    args = ap.parse_args()
    print(json.dumps(simulate(drop=(0, 2) if args.drop else None, algorithm=args.algorithm, mechanism=args.mechanism,
                              bits=args.bits, rounds=args.rounds, epsilon=args.epsilon,
                              inner_steps=args.inner_steps, restarts=args.restarts, period=args.period)))
