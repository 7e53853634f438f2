"""The silo: computes its noisy message on its own records, keeps its own ledger in the node state,
reports its epsilon, and refuses a request that would take it past its budget.

The silo's partition comes from the node config (``partition-id``; the simulation engine sets it,
a deployed SuperNode takes ``--node-config "partition-id=0"``), its budget from the run config.
"""

from __future__ import annotations

import secrets

import torch
from flwr.app import Array, ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from silodp.integrations.flower import EPSILON_KEY, SiloLedger
from silodp_flower.task import Settings, setup, silo_data, silo_message

app = ClientApp()


def train(msg: Message, context: Context) -> Message:
    settings = Settings.from_run_config(context.run_config)
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


app.train()(train)
