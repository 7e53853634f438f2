"""The silo: computes its noisy message on its own records, keeps its own ledger in the node state,
reports its epsilon, and refuses a request that would take it past its budget.

The silo's partition comes from the node config (``partition-id``; the simulation engine sets it,
a deployed SuperNode takes ``--node-config "partition-id=0"``), its budget from the run config
(or from the settings :func:`make_app` binds).
"""

from __future__ import annotations

import secrets

import torch
from flwr.app import Array, ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from silodp.integrations.flower import EPSILON_KEY, SiloLedger
from silodp_flower.task import Settings, setup, silo_data, silo_message


def train(msg: Message, context: Context, settings: Settings) -> Message:
    """Silo ``partition-id``'s reply to a train message under ``settings``: its noisy message, or
    an error if the release would take it past its budget."""
    prepared = setup(settings)
    fed = silo_data(prepared.data, int(context.node_config["partition-id"]))
    arrays = msg.content["arrays"]
    config = msg.content["config"]
    w = torch.from_numpy(arrays["w"].numpy()).to(fed.x.dtype)
    w_prev = torch.from_numpy(arrays["w_prev"].numpy()).to(fed.x.dtype) if "w_prev" in arrays else None
    ledger = SiloLedger(context, settings.accountant or None)
    # fresh secret randomness: a seed the server could know would let it subtract the noise
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    message, release = silo_message(prepared.problem, fed, str(config["kind"]), w, w_prev, float(config["std"]),
                                    settings.batch_size, generator)
    projected = ledger.epsilon(settings.delta, release)
    if projected > settings.epsilon:
        return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION,
                             f"silo budget exhausted: this release would certify epsilon {projected:.6g} > "
                             f"{settings.epsilon:g}"), reply_to=msg)
    ledger.record(release)  # the ledger now holds exactly the projected releases
    metrics = MetricRecord({"num-examples": 1, EPSILON_KEY: projected})
    return Message(RecordDict({"arrays": ArrayRecord({"message": Array(message.numpy())}), "metrics": metrics}),
                   reply_to=msg)


def make_app(settings: Settings | None = None) -> ClientApp:
    """The silo's ClientApp, with ``settings``, or the run config's when ``None`` (the simulation
    engine's Python API passes no run config)."""
    app = ClientApp()

    @app.train()
    def _train(msg: Message, context: Context) -> Message:
        return train(msg, context, settings or Settings.from_run_config(context.run_config))

    return app


app = make_app()
