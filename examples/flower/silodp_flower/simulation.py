"""The example on Flower's simulation engine (Ray), from Python: one supernode per silo.

Needs ``pip install "silodp[simulation]"`` (``flwr[simulation]``, which brings Ray). The engine's
nodes have no node config of their own, so each silo's policy is bound here: a ledger file per
silo in ``ledger_dir`` and a budget of the run's own (epsilon, delta).
"""

from __future__ import annotations

import functools
import tempfile
from pathlib import Path

from flwr.simulation import run_simulation

from silodp.integrations.flower_silo import SiloPolicy
from silodp_flower import client_app, server_app
from silodp_flower.task import Settings, setup


def silo_policy(ledger_dir: str, epsilon: float, delta: float, node_config: dict) -> SiloPolicy:
    """Silo ``partition-id``'s policy: its ledger in ``ledger_dir``, budget (``epsilon``, ``delta``)."""
    return SiloPolicy(str(Path(ledger_dir) / f"silo-{node_config['partition-id']}.sqlite"), epsilon, delta)


def simulate(settings: Settings, backend_config: dict | None = None, ledger_dir: str | None = None) -> dict:
    """Run ``settings`` on the simulation engine; returns :func:`server_app.run`'s outputs.

    ``backend_config`` is Flower's (``init_args`` go to ``ray.init``, ``client_resources`` to each
    actor); by default one CPU per silo. ``ledger_dir``: where the silos' ledgers live (default: a
    fresh temporary directory).
    """
    results: list[dict] = []
    num_silos = setup(settings).data.train.num_silos
    ledger_dir = ledger_dir or tempfile.mkdtemp(prefix="silodp-ledgers-")
    policy_for = functools.partial(silo_policy, ledger_dir, settings.epsilon, settings.delta)
    run_simulation(server_app=server_app.make_app(settings, results.append),
                   client_app=client_app.make_app(settings, policy_for), num_supernodes=num_silos,
                   backend_config=backend_config or {"client_resources": {"num_cpus": 1}})
    if not results:  # the engine stopped before the ServerApp finished; run_simulation returns anyway
        raise RuntimeError("the simulation ended without a result (see Flower's log)")
    return results[0]
