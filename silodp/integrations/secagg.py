"""Distributed noise under Flower's SecAgg+ (flwr 1.42 ``SecAggPlusWorkflow`` + ``secaggplus_mod``):
every silo encodes and noises its own message, the server learns only the modular sum.

A silo's message is :func:`silodp.algorithms.distributed.encode` (Skellam or discrete Gaussian
noise, record level: its vector is the sum of its per-record clipped gradients), residues in
[0, 2^bits). SecAgg+ quantizes floats itself (``quantize``: clip to +-clipping_range, scale by
quantization_range / (2 clipping_range), stochastic rounding) and weights each update by
num_examples / max_weight. :func:`workflow_settings` makes both the identity on our integers:
clipping_range = 2^(bits-1), quantization_range = 2^bits (scale 1), max_weight = num_examples = 1,
and the silo sends residue - 2^(bits-1) (:func:`to_flower`), an integer-valued float that the
stochastic rounding leaves unchanged. SecAgg+ sums modulo modulus_range = 2^32, a multiple of
2^bits, and hands the strategy (sum - n clipping_range) / n for the n silos summed, from which
:func:`from_flower` recovers the sum modulo 2^bits exactly.

Dropouts go through SecAgg+'s reconstruction: the sum is revealed only when at least
``reconstruction_threshold`` silos' masked vectors are summed, so the certificate
(:func:`silodp.accounting.distributed.calibrate` with ``summed`` = the threshold) counts the
noise of that many silos only and holds whoever drops.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from silodp.accounting import distributed as acc

#: SecAgg+'s modulus (its largest): a multiple of every 2^bits, bits <= 31.
FLOWER_MODULUS = 1 << 32


def workflow_settings(p: acc.DistributedParams) -> dict:
    """SecAggPlusWorkflow's quantization arguments that make its quantization the identity on the
    silos' residues (module docstring)."""
    if p.bits > 31 or p.silos * p.modulus >= FLOWER_MODULUS:
        raise ValueError(f"bits: SecAgg+ sums modulo 2^32, so silos * 2^bits must stay below it, got {p.bits}")
    return {"clipping_range": float(p.modulus // 2), "quantization_range": p.modulus,
            "modulus_range": FLOWER_MODULUS, "max_weight": 1.0}


def to_flower(residues: np.ndarray, p: acc.DistributedParams) -> np.ndarray:
    """A silo's residues as the float vector SecAgg+ quantizes back to them."""
    return residues.astype(np.float64) - p.modulus // 2


def from_flower(aggregate: np.ndarray, summed: int, p: acc.DistributedParams) -> np.ndarray:
    """The sum of the ``summed`` silos' residues modulo 2^bits from SecAgg+'s aggregate."""
    total = np.rint(aggregate.astype(np.float64) * summed + summed * (p.modulus // 2)).astype(np.int64)
    return np.mod(total, p.modulus)


@dataclasses.dataclass(frozen=True)
class Deployment:
    """One SecAgg+ training run of logistic regression: ``params`` the certified configuration,
    ``x``/``y`` per silo, ``rounds`` of full-batch noisy gradient steps of size ``lr``."""

    params: acc.DistributedParams
    threshold: int
    delta: float
    xs: tuple
    ys: tuple
    lr: float = 1.0
    public_seed: int = 0

    @property
    def epsilon(self) -> float:
        """silodp's certificate of this configuration."""
        return acc.certified_epsilon(self.params, self.delta)


def deployment(xs, ys, mechanism: str, clip: float, vector_norm: float, bits: int, epsilon: float, delta: float,
               rounds: int, threshold: int, lr: float = 1.0) -> Deployment:
    """Calibrate the mechanism for the silos' data at the reconstruction ``threshold``."""
    dim = xs[0].shape[1] + 1
    p = acc.calibrate(mechanism, dim, clip, len(xs), bits, epsilon, delta, rounds, summed=threshold,
                      vector_norm=vector_norm)
    return Deployment(p, threshold, delta, tuple(xs), tuple(ys), lr)


def signs(dep: Deployment, server_round: int):
    """The round's public rotation (from the run's public seed)."""
    import torch

    from silodp.algorithms.shuffle import rotation_signs

    return rotation_signs(dep.params.dimension, torch.Generator().manual_seed(dep.public_seed * 100003 + server_round))


def silo_vector(w: np.ndarray, x: np.ndarray, y: np.ndarray, clip: float) -> np.ndarray:
    """The sum of the silo's per-record logistic gradients, each clipped to ``clip``."""
    xa = np.hstack([x, np.ones((len(x), 1))])
    g = (1.0 / (1.0 + np.exp(-xa @ w)) - y)[:, None] * xa
    g *= np.minimum(1.0, clip / np.maximum(np.linalg.norm(g, axis=1, keepdims=True), 1e-300))
    return g.sum(0)


def make_client_app(dep: Deployment, drop: tuple[int, int] | None = None):
    """The silos' ClientApp (legacy NumPyClient behind ``secaggplus_mod``). ``drop``: (silo,
    round) at which that silo fails (a dropout, for tests)."""
    import secrets

    import torch
    from flwr.client import ClientApp, NumPyClient
    from flwr.client.mod import secaggplus_mod

    from silodp.algorithms import distributed as enc

    class Silo(NumPyClient):
        def __init__(self, pid: int) -> None:
            self.pid = pid

        def fit(self, parameters, config):
            r = int(config["round"])
            if drop is not None and (self.pid, r) == drop:
                raise RuntimeError(f"silo {self.pid} drops out in round {r}")
            v = silo_vector(parameters[0], dep.xs[self.pid], dep.ys[self.pid], dep.params.clip)
            gen = torch.Generator().manual_seed(secrets.randbits(63))  # secret: the server must not know it
            residues = enc.encode(torch.from_numpy(v)[None], dep.params, signs(dep, r), gen)[0].numpy()
            return [to_flower(residues, dep.params)], 1, {}

    def client_fn(context):
        return Silo(int(context.node_config["partition-id"])).to_client()

    return ClientApp(client_fn=client_fn, mods=[secaggplus_mod])


def make_server_app(dep: Deployment, sink):
    """The ServerApp: SecAgg+ sums the silos' residues; the strategy decodes the sum and steps.
    ``sink`` receives {"w", "epsilon", "summed"} when the run ends."""
    import torch
    from flwr.common import ndarrays_to_parameters, parameters_to_ndarrays
    from flwr.server import LegacyContext, ServerApp, ServerConfig
    from flwr.server.strategy import FedAvg
    from flwr.server.workflow import DefaultWorkflow, SecAggPlusWorkflow

    from silodp.algorithms import distributed as enc

    p, m = dep.params, len(dep.xs)
    total_records = sum(len(x) for x in dep.xs)
    state = {"w": np.zeros(p.dimension), "summed": []}

    class Decode(FedAvg):
        def aggregate_fit(self, server_round, results, failures):
            n = len(results)
            if n < dep.threshold:  # SecAgg+ never reveals fewer; refuse all the same
                raise ValueError(f"summed: {n} silos, the certificate needs at least {dep.threshold}")
            agg = parameters_to_ndarrays(results[0][1].parameters)[0]
            total = torch.from_numpy(from_flower(agg, n, p))
            est = enc.decode(total, p, n, signs(dep, server_round)).numpy()
            state["w"] = state["w"] - dep.lr * est / total_records
            state["summed"].append(n)
            return ndarrays_to_parameters([state["w"]]), {}

    strategy = Decode(fraction_fit=1.0, fraction_evaluate=0.0, min_fit_clients=dep.threshold,
                      min_available_clients=m, initial_parameters=ndarrays_to_parameters([state["w"]]),
                      on_fit_config_fn=lambda r: {"round": r})
    app = ServerApp()

    @app.main()
    def main(grid, context) -> None:
        legacy = LegacyContext(context, config=ServerConfig(num_rounds=p.rounds), strategy=strategy)
        workflow = DefaultWorkflow(fit_workflow=SecAggPlusWorkflow(num_shares=m, reconstruction_threshold=dep.threshold,
                                                                   **workflow_settings(p)))
        workflow(grid, legacy)
        sink({"w": state["w"].copy(), "epsilon": dep.epsilon, "summed": list(state["summed"])})

    return app


def error_rate(w: np.ndarray, x: np.ndarray, y: np.ndarray) -> float:
    xa = np.hstack([x, np.ones((len(x), 1))])
    return float(np.mean((xa @ w > 0) != (y > 0.5)))


__all__ = ["Deployment", "deployment", "error_rate", "from_flower", "make_client_app", "make_server_app",
           "to_flower", "workflow_settings"]
