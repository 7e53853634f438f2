"""One-run audit of a Flower app on the simulation engine: record-level canaries in one silo's data,
scored from what the ISRL-DP adversary sees -- the server, observing that silo's messages.

``audit_flower_app("examples/flower", canaries=M)`` runs the app's own ServerApp and ClientApp
code (``silodp_flower.server_app.run`` and ``silodp_flower.client_app.train``, unchanged) on
Flower's simulation engine, with two wrappers around it and nothing inside it:

* the data: the app loads its dataset by name (``Settings.dataset``); the audit registers a name
  whose loader is the base dataset plus M free coordinates (zero for every real record) and M
  canary records in silo 0, canary j being ``x = A e_{d+j}`` with label 1 (included, S_j = 1) or
  0 (excluded): replace-one neighbours, so silo 0's size and the claim do not depend on S. Under
  the logistic loss the canary's clipped per-record gradient points along ``-+(A e_{d+j}, 1)``,
  a direction no real record uses (Nasr et al. 2021's gradient canary; see :mod:`.canaries`).
* the server: a recording grid between the app's ServerApp and Flower's grid keeps every reply;
  a ClientApp wrapper adds the silo's (public) partition id to its reply's metrics, so the
  recording knows which replies are silo 0's.

Canary j's score is minus the sum, over the gradient rounds, of coordinate d + j of silo 0's
noisy messages; the scores are judged by :func:`.onerun.estimate_all` against the worst-silo
epsilon the silos themselves reported (their ledgers).

For your own ClientApp: insert canaries into the records your ClientApp trains on with
:func:`canaried_federation`, wrap your ServerApp's grid in :class:`RecordingGrid`, and pass the
recorded messages' canary coordinates to :class:`~.onerun.CanaryScores` (docs/audit.md).
"""

from __future__ import annotations

import dataclasses
import importlib
import os
import sys
import tempfile
import time
from contextlib import contextmanager

import numpy as np
import torch

from silodp.verify.audit.onerun import CanaryScores, RunAudit, judge_run

#: the canary's free-coordinate value A (logistic loss: the clipped gradient keeps norm L while
#: |w_{d+j}| stays below about log(A - 1) / A)
CANARY_VALUE = 10.0
_PREFIX = "audit-canaries"
PARTITION_KEY = "silodp-audit-partition-id"


def inclusion(canaries: int, seed: int) -> np.ndarray:
    """S_j for each canary (fair coins from ``seed``)."""
    return np.random.default_rng([seed, 24]).random(canaries) < 0.5


def canaried_federation(fed, canaries: int, included: np.ndarray, silo: int = 0, value: float = CANARY_VALUE):
    """``fed`` with ``canaries`` zero features appended and canary records appended to ``silo``."""
    from silodp.algorithms.federation import Federation

    xs, ys = [], []
    for i in range(fed.num_silos):
        n = int(fed.counts[i])
        x = torch.cat([fed.x[i, :n], torch.zeros(n, canaries, dtype=fed.x.dtype)], dim=1)
        y = fed.y[i, :n]
        if i == silo:
            c = torch.zeros(canaries, x.shape[1], dtype=fed.x.dtype)
            c[torch.arange(canaries), fed.x.shape[-1] + torch.arange(canaries)] = value
            x = torch.cat([x, c])
            y = torch.cat([y, torch.as_tensor(included, dtype=y.dtype)])
        xs.append(x)
        ys.append(y)
    return Federation.from_silos(xs, ys)


def dataset_name(base: str, canaries: int, seed: int) -> str:
    return f"{_PREFIX}:{base}:{canaries}:{seed}"


def register(name: str) -> None:
    """Make dataset ``name`` (:func:`dataset_name`) loadable in this process (the app's processes
    call it through the ClientApp wrapper)."""
    from silodp.experiments import datasets

    if name in datasets.LOADERS:
        return
    _, base, m, seed = name.split(":")
    m, seed = int(m), int(seed)

    def load(**kwargs):
        data = datasets.load(base, **kwargs)
        pad = [canaried_federation(f, m, np.zeros(m), silo=-1) for f in (data.val, data.test)]
        return dataclasses.replace(data, train=canaried_federation(data.train, m, inclusion(m, seed)), val=pad[0],
                                   test=pad[1], input_shape=(data.num_features + m,))

    datasets.LOADERS[name] = load


class RecordingGrid:
    """A Flower ``Grid`` that keeps every (sent config, replies) pair of ``send_and_receive``."""

    def __init__(self, grid) -> None:
        self._grid = grid
        self.rounds: list[tuple[dict, list]] = []

    def __getattr__(self, name):
        return getattr(self._grid, name)

    def send_and_receive(self, messages, *args, **kwargs):
        messages = list(messages)
        replies = list(self._grid.send_and_receive(messages, *args, **kwargs))
        config = dict(messages[0].content["config"]) if "config" in messages[0].content else {}
        self.rounds.append((config, replies))
        return replies


def _apps(settings, results: list):
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from silodp_flower import client_app, server_app

    client = ClientApp()

    @client.train()
    def _train(msg, context):
        register(settings.dataset)
        out = client_app.train(msg, context, settings)
        if not out.has_error():
            out.content["metrics"][PARTITION_KEY] = int(context.node_config["partition-id"])
        return out

    server = ServerApp()

    @server.main()
    def _main(grid, context):
        register(settings.dataset)
        recording = RecordingGrid(grid)
        results.append((server_app.run(recording, settings), recording))

    return server, client


def _import_app(path: str):
    root = os.path.abspath(path)
    if not os.path.isdir(os.path.join(root, "silodp_flower")):
        raise ValueError(f"flower_app: {path!r} holds no silodp_flower package (expected examples/flower)")
    if root not in sys.path:
        sys.path.insert(0, root)
    os.environ["PYTHONPATH"] = os.pathsep.join([root, *filter(None, [os.environ.get("PYTHONPATH")])])
    return importlib.import_module("silodp_flower.task")


@dataclasses.dataclass(frozen=True)
class FlowerAudit(RunAudit):
    """Result of :func:`audit_flower_app` (the issue's JSON keys, then the run's)."""

    algorithm: str
    rounds: int
    wall_s: float


@contextmanager
def _silo_budgets(ledgers: str, epsilon: float, delta: float):
    """The simulation's silos have no node config: as their one operator, declare each silo's
    budget (the run's own epsilon and delta) and a fresh ledger directory through the host's
    environment (:meth:`silodp.integrations.flower_silo.SiloPolicy.for_node`), for this call only."""
    from silodp.integrations.flower_silo import ENV_BUDGET_DELTA, ENV_BUDGET_EPSILON, ENV_LEDGER_DIR

    declared = {ENV_LEDGER_DIR: ledgers, ENV_BUDGET_EPSILON: repr(float(epsilon)), ENV_BUDGET_DELTA: repr(float(delta))}
    saved = {key: os.environ.get(key) for key in declared}
    os.environ.update(declared)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def audit_flower_app(path: str = "examples/flower", canaries: int = 500, estimator: str = "steinke",
                     alpha: float = 0.05, seed: int = 0, **settings) -> FlowerAudit:
    """Run the Flower app at ``path`` once with ``canaries`` canaries in silo 0 and audit it
    (``settings``: overrides of the app's ``Settings``, e.g. ``rounds=10``)."""
    from flwr.simulation import run_simulation

    if int(canaries) < 2:
        raise ValueError(f"canaries: need at least 2, got {canaries}")
    task = _import_app(path)
    base = task.Settings(**settings)
    name = dataset_name(base.dataset, int(canaries), seed)
    register(name)
    run = dataclasses.replace(base, dataset=name, model="linear", accountant=base.accountant or "rdp")
    d = task.setup(dataclasses.replace(run, dataset=base.dataset)).data.num_features
    started = time.perf_counter()
    results: list = []
    server, client = _apps(run, results)
    with tempfile.TemporaryDirectory() as ledgers, _silo_budgets(ledgers, run.epsilon, run.delta):
        run_simulation(server_app=server, client_app=client, num_supernodes=task.setup(run).data.train.num_silos,
                       backend_config={"client_resources": {"num_cpus": 1}})
    if not results:
        raise RuntimeError("the Flower simulation ended without a result (see Flower's log)")
    out, recording = results[0]
    scores = np.zeros(canaries)
    for config, replies in recording.rounds:
        if config.get("kind") != "grad":
            continue
        for reply in replies:
            if int(reply.content["metrics"][PARTITION_KEY]) == 0:
                scores -= reply.content["arrays"]["message"].numpy()[d:d + canaries]
    canary = CanaryScores(scores, inclusion(canaries, seed))
    return FlowerAudit(**judge_run(canary, float(out["worst_silo_epsilon"]), run.delta, alpha, estimator),
                       algorithm=run.algorithm, rounds=int(out["rounds"]), wall_s=time.perf_counter() - started)


__all__ = ["FlowerAudit", "RecordingGrid", "audit_flower_app", "canaried_federation", "dataset_name", "register"]
