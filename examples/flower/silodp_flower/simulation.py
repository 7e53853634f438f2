"""The example on Flower's simulation engine (Ray), from Python: one supernode per silo.

Needs ``pip install "silodp[simulation]"`` (``flwr[simulation]``, which brings Ray).
"""

from __future__ import annotations

from flwr.simulation import run_simulation

from silodp_flower import client_app, server_app
from silodp_flower.task import Settings, setup


def simulate(settings: Settings, backend_config: dict | None = None) -> dict:
    """Run ``settings`` on the simulation engine; returns :func:`server_app.run`'s outputs.

    ``backend_config`` is Flower's (``init_args`` go to ``ray.init``, ``client_resources`` to each
    actor); by default one CPU per silo.
    """
    results: list[dict] = []
    num_silos = setup(settings).data.train.num_silos
    run_simulation(server_app=server_app.make_app(settings, results.append),
                   client_app=client_app.make_app(settings), num_supernodes=num_silos,
                   backend_config=backend_config or {"client_resources": {"num_cpus": 1}})
    if not results:  # the engine stopped before the ServerApp finished; run_simulation returns anyway
        raise RuntimeError("the simulation ended without a result (see Flower's log)")
    return results[0]
