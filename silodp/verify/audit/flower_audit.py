"""One-run audit of a Flower app on the simulation engine: record-level canaries in one silo's data,
scored from what the ISRL-DP adversary sees -- the server, observing that silo's messages.

``audit_flower_app("examples/flower", canaries=M)`` runs the app's own ServerApp and ClientApp
code (``silodp_flower.server_app.run`` and ``silodp_flower.client_app.train``, unchanged) on
Flower's simulation engine, with two wrappers around it and nothing inside it:

* the data: the app loads its dataset by name (``Settings.dataset``); the audit registers a name
  whose loader is the base dataset plus M free coordinates (zero for every real record), silo 0
  being made of M canary records only, canary j being ``x = A e_{d+j}`` with label 1 (included,
  S_j = 1) or 0 (excluded): replace-one neighbours, so silo 0's size and the claim do not depend
  on S. The run's batch size is M, so silo 0's batch (K = M draws with replacement from its M
  records) holds each canary in about 63% of the rounds (1 - (1 - 1/M)^M), every canary
  contributing in most rounds rather than about once per run. Under the logistic loss the canary's
  clipped per-record gradient points along ``-+(A e_{d+j}, 1)``, a direction no real record uses
  (Nasr et al. 2021's gradient canary; see :mod:`.canaries`).
* the server: a recording grid between the app's ServerApp and Flower's grid keeps every reply;
  a ClientApp wrapper adds the silo's (public) partition id to its reply's metrics, so the
  recording knows which replies are silo 0's.

Canary j's score is minus the sum, over the gradient rounds, of coordinate d + j of silo 0's
noisy messages; the scores are judged by :func:`.onerun.estimate_all` against the worst-silo
epsilon the silos themselves reported (their ledgers).

``mutation="public-seed-noise"`` (:data:`APP_MUTATIONS`; the second paper's code) switches the
shipped bug on in the app's silos: the ClientApp wrapper replaces ``silodp_flower.task.silo_message``
in the silo's process by the same message whose noise comes from a generator seeded with a public
seed and the round (the same noise in every silo). The adversary regenerates that noise (the
silo's noise scale is public: ``silo_plan`` of the run config and silo 0's size) and subtracts it,
so every canary drawn at least once is read exactly: Steinke et al.'s bound (valid for every
mechanism) exceeds the claim. ``mutation="halve-noise"`` (silodp's own mutation suite) halves the
silos' noise after calibration, their ledgers keeping the calibrated claim. The with-replacement claim itself is loose for this app (at K
draws from K records one record may be drawn many times, and the accountant calibrates for that),
so without the bug the bounds stay near 0 however the canaries are placed: the audit catches the bug, it does not show
the claim tight.

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
#: the bugs the audit can switch on in the app's silos (the second paper's public seed; silodp's halved noise)
APP_MUTATIONS = ("public-seed-noise", "halve-noise")


def inclusion(canaries: int, seed: int) -> np.ndarray:
    """S_j for each canary (fair coins from ``seed``)."""
    return np.random.default_rng([seed, 24]).random(canaries) < 0.5


def canaried_federation(fed, canaries: int, included: np.ndarray, silo: int = 0, value: float = CANARY_VALUE,
                        keep_records: bool = True):
    """``fed`` with ``canaries`` zero features appended and canary records appended to ``silo``
    (in place of its records where ``keep_records`` is false: a silo of canaries); ``fed``'s
    availability and reconstruction threshold are kept."""
    from silodp.algorithms.federation import Federation

    xs, ys = [], []
    for i in range(fed.num_silos):
        n = int(fed.counts[i]) if keep_records or i != silo else 0
        x = torch.cat([fed.x[i, :n], torch.zeros(n, canaries, dtype=fed.x.dtype)], dim=1)
        y = fed.y[i, :n]
        if i == silo:
            c = torch.zeros(canaries, x.shape[1], dtype=fed.x.dtype)
            c[torch.arange(canaries), fed.x.shape[-1] + torch.arange(canaries)] = value
            x = torch.cat([x, c])
            y = torch.cat([y, torch.as_tensor(included, dtype=y.dtype)])
        xs.append(x)
        ys.append(y)
    return Federation.from_silos(xs, ys, silos_per_round=fed.silos_per_round, availability=fed.availability,
                                 reconstruction_threshold=fed.reconstruction_threshold)


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
        return dataclasses.replace(data, train=canaried_federation(data.train, m, inclusion(m, seed), keep_records=False), val=pad[0],
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


def public_noise(round_: int, dim: int) -> torch.Tensor:
    """The unit noise of every silo's message in ``round_`` under ``public-seed-noise``."""
    from silodp.verify.audit.flower_mod import PUBLIC_SEED

    return torch.randn(dim, generator=torch.Generator().manual_seed(PUBLIC_SEED + round_), dtype=torch.float64)


def _public_seed_message(original, round_: int):
    """The app's ``silo_message`` (``original``) with its noise from :func:`public_noise` of ``round_``."""
    from silodp_flower import task

    def silo_message(problem, fed, kind, w, w_prev, std, batch_size, generator):
        term, _ = original(problem, fed, kind, w, w_prev, 0.0, batch_size, generator)
        _, release = task.silo_release(problem, kind, w, w_prev, std, batch_size, fed.min_size)
        return term + std * public_noise(round_, term.numel()).to(term.dtype), release

    silo_message.original = original
    return silo_message


def _halved_message(original, round_: int):
    """The app's ``silo_message`` (``original``) with its noise std halved after calibration; the
    ledger's release keeps the calibrated std, so the silo still reports the correct claim."""
    from silodp_flower import task

    def silo_message(problem, fed, kind, w, w_prev, std, batch_size, generator):
        message, _ = original(problem, fed, kind, w, w_prev, 0.5 * std, batch_size, generator)
        _, release = task.silo_release(problem, kind, w, w_prev, std, batch_size, fed.min_size)
        return message, release

    silo_message.original = original
    return silo_message


_MUTATED_MESSAGES = {"public-seed-noise": _public_seed_message, "halve-noise": _halved_message}


def _switch(mutation: str | None, round_: int) -> None:
    """In this silo's process: ``silodp_flower.task.silo_message`` with ``mutation`` on for
    ``round_``, or the app's own (``None``)."""
    from silodp.service import silo as computed  # where the silo's code lives; the app re-exports it
    from silodp_flower import task

    original = getattr(computed.silo_message, "original", computed.silo_message)
    computed.silo_message = task.silo_message = (
        original if mutation is None else _MUTATED_MESSAGES[mutation](original, round_))


def _apps(settings, results: list, mutation: str | None = None):
    from flwr.clientapp import ClientApp
    from flwr.serverapp import ServerApp
    from silodp_flower import client_app, server_app

    client = ClientApp()

    @client.train()
    def _train(msg, context):
        register(settings.dataset)
        _switch(mutation, int(msg.content["config"]["round"]))
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
    mutation: str | None
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


def audit_flower_app(path: str = "examples/flower", canaries: int = 200, estimator: str = "steinke",
                     alpha: float = 0.05, seed: int = 0, mutation: str | None = None, **settings) -> FlowerAudit:
    """Run the Flower app at ``path`` once with a silo 0 of ``canaries`` canaries (the run's batch
    size) and audit it, with ``mutation`` (:data:`APP_MUTATIONS`) switched on in the silos or none
    (``settings``: overrides of the app's ``Settings``, e.g. ``rounds=10``)."""
    from flwr.simulation import run_simulation

    if int(canaries) < 2:
        raise ValueError(f"canaries: need at least 2, got {canaries}")
    if mutation is not None and mutation not in APP_MUTATIONS:
        raise ValueError(f"mutation: must be one of {APP_MUTATIONS}, got {mutation!r}")
    if "batch_size" in settings:
        raise ValueError("batch_size: the audit sets it (to canaries: silo 0's full size)")
    task = _import_app(path)
    base = task.Settings(**settings)
    real = task.load_cached(base.dataset, base.seed, 0.2, 0.2)
    if not int(canaries) <= int(real.train.counts[1:].min()):
        raise ValueError(f"canaries: at most the other silos' smallest size {int(real.train.counts[1:].min())} "
                         f"(the run's batch size), got {canaries}")
    name = dataset_name(base.dataset, int(canaries), seed)
    register(name)
    run = dataclasses.replace(base, dataset=name, model="linear", accountant=base.accountant or "rdp",
                              batch_size=int(canaries))
    d = real.num_features
    started = time.perf_counter()
    results: list = []
    server, client = _apps(run, results, mutation)
    with tempfile.TemporaryDirectory() as ledgers, _silo_budgets(ledgers, run.epsilon, run.delta):
        run_simulation(server_app=server, client_app=client, num_supernodes=task.setup(run).data.train.num_silos,
                       backend_config={"client_resources": {"num_cpus": 1}})
    if not results:
        raise RuntimeError("the Flower simulation ended without a result (see Flower's log)")
    out, recording = results[0]
    # the adversary of public-seed-noise regenerates silo 0's noise: its scale from the public plan
    public = mutation == "public-seed-noise"
    std = task.silo_plan(run, 0, run.delta).std("grad", None, None) if public else 0.0
    scores = np.zeros(canaries)
    for config, replies in recording.rounds:
        if config.get("kind") != "grad":
            continue
        for reply in replies:
            if int(reply.content["metrics"][PARTITION_KEY]) == 0:
                message = reply.content["arrays"]["message"].numpy()
                noise = std * public_noise(int(config["round"]), message.size).numpy() if public else 0.0
                scores -= (message - noise)[d:d + canaries]
    canary = CanaryScores(scores, inclusion(canaries, seed))
    return FlowerAudit(**judge_run(canary, float(out["worst_silo_epsilon"]), run.delta, alpha, estimator),
                       algorithm=run.algorithm, mutation=mutation, rounds=int(out["rounds"]),
                       wall_s=time.perf_counter() - started)


__all__ = ["APP_MUTATIONS", "FlowerAudit", "RecordingGrid", "audit_flower_app", "canaried_federation", "dataset_name", "public_noise", "register"]
