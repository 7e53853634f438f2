"""The silo: owns its budget, its ledger and its noise, and replies only what it has accounted.

Trust (see docs/integrations.md): the budget, the ledger file and the caps come from this
SuperNode's own ``--node-config`` (:class:`~silodp.integrations.flower_silo.SiloPolicy`), never
from the run config, which whoever calls ``flwr run`` writes. The run config only *proposes* an
algorithm, rounds, batch size, step size, clip and a target epsilon; the silo checks them against
its caps, calibrates its own noise for its own records (cached on its disk per plan), admits the
run's whole declared plan against everything it ever released before the first message, records
each release before it leaves (refusing the one that would exceed), and computes that release's
noise from its own secret randomness. EVALUATE and QUERY messages carry no declared release: they
are refused (and counted as refusals). A silo's records come from its node config: its
``partition-id`` and, where the node config fixes them (:data:`DATA_KEYS`: ``dataset``,
``seed``, which choose the split and the partition), a run proposing other records is refused,
so the server cannot choose which records a silo trains on.

torch and the data load only where a message trains: the plan (calibration, declared releases)
is cached on the silo's disk per (silo, plan), so a run refused at admission never imports them.
"""

from __future__ import annotations

import dataclasses
import json
import math

from flwr.app import Array, ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from silodp.integrations.flower import EPSILON_KEY
from silodp.integrations.flower_silo import (
    SiloLedgerDB,
    SiloPolicy,
    SiloRefusal,
    as_declared,
    dump_releases,
    load_releases,
)

#: Reply metrics besides EPSILON_KEY: the silo's epsilon spent over all runs, and what is left.
SPENT_KEY, LEFT_KEY = "silodp_spent", "silodp_left"
#: Node-config keys that fix the silo's records (the run config may only propose the same).
DATA_KEYS = ("dataset", "seed")


def _refusal(msg: Message, reason: str) -> Message:
    return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION, reason), reply_to=msg)


def _model(arrays: ArrayRecord, name: str, dim: int):
    """The server's array ``name`` as float64, refused unless present, of ``dim`` entries and finite:
    checked before anything touches the silo's records."""
    import numpy as np

    if name not in arrays:
        raise SiloRefusal(f"arrays: the message lacks {name!r}")
    value = np.asarray(arrays[name].numpy(), dtype=np.float64)
    if value.shape != (dim,):
        raise SiloRefusal(f"arrays[{name!r}]: shape {value.shape}, expected ({dim},)")
    if not np.isfinite(value).all():
        raise SiloRefusal(f"arrays[{name!r}]: holds non-finite values")
    return value


def train(msg: Message, context: Context, settings=None, policy: SiloPolicy | None = None) -> Message:
    """Silo ``partition-id``'s reply to a train message: its noisy message, or a refusal."""
    try:
        policy = policy or SiloPolicy.for_node(context.node_config)
        ledger = policy.open_ledger()
    except (SiloRefusal, OSError) as exc:
        return _refusal(msg, str(exc))
    run_id = str(context.run_id)
    try:
        return _train(msg, context, settings, policy, ledger, run_id)
    except SiloRefusal as exc:
        return _refusal(msg, str(exc if exc.recorded else ledger.refuse(run_id, f"silo refuses run {run_id}: {exc}")))
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        return _refusal(msg, str(ledger.refuse(run_id, f"silo refuses a train message of run {run_id}: {exc}")))


def _plan_entry(settings, policy: SiloPolicy, partition_id: int) -> dict:
    """What the silo caches on its disk per (silo, plan): its calibration, its declared releases
    and the model's dimension (computing them needs torch and the data; reading them does not)."""
    import torch

    from silodp_flower.task import SiloRecords, silo_plan

    records = SiloRecords.beside(policy.ledger, settings, partition_id)
    plan = silo_plan(settings, partition_id, policy.budget_delta, records=records)
    dim = plan.problem.model.init(torch.Generator().manual_seed(0), dtype=torch.float64).numel()
    return {"sigmas": plan.sigmas, "releases": dump_releases(plan.releases), "dim": int(dim)}


def _train(msg: Message, context: Context, settings, policy: SiloPolicy, ledger: SiloLedgerDB, run_id: str) -> Message:
    from silodp_flower.settings import Settings

    settings = settings or Settings.from_run_config(context.run_config)
    policy.check_proposal(rounds=settings.rounds, batch_size=settings.batch_size, clip=settings.clip,
                          step_size=settings.step_size)
    if not (math.isfinite(settings.epsilon) and settings.epsilon > 0):
        raise SiloRefusal(f"epsilon: must be positive and finite, got {settings.epsilon!r}")
    for key in DATA_KEYS:
        if key in context.node_config and str(context.node_config[key]) != str(getattr(settings, key)):
            raise SiloRefusal(f"{key}: this silo's records are {key} {context.node_config[key]!s} (its node "
                              f"config), the run proposes {getattr(settings, key)!s}")
    if policy.run_epsilon is not None and settings.epsilon > policy.run_epsilon:
        raise SiloRefusal(f"epsilon: the run asks for {settings.epsilon:g}, this silo allows one run "
                          f"{policy.run_epsilon:g}")
    arrays, config = msg.content["arrays"], msg.content["config"]
    kind = str(config["kind"])
    if kind not in ("grad", "diff"):
        raise SiloRefusal(f"config['kind']: must be 'grad' or 'diff', got {kind!r}")
    partition = int(context.node_config["partition-id"])
    own = dataclasses.asdict(dataclasses.replace(settings, model_path=""))
    entry = ledger.cached(f"plan|{json.dumps(own, sort_keys=True)}|{partition}|{policy.budget_delta!r}",
                          lambda: _plan_entry(settings, policy, partition))
    declared = load_releases(entry["releases"])
    w = _model(arrays, "w", entry["dim"])
    w_prev = _model(arrays, "w_prev", entry["dim"]) if kind == "diff" else None
    ledger.admit(run_id, declared, policy.run_epsilon)  # the whole plan, before the first release
    return _release(msg, settings, policy, ledger, run_id, partition, entry["sigmas"], declared, kind, w, w_prev)


def _release(msg, settings, policy, ledger, run_id, partition, sigmas, declared, kind, w, w_prev) -> Message:
    """The admitted run's release: accounted, then computed on the silo's records."""
    import secrets

    import torch

    from silodp_flower.task import SiloRecords, silo_message, silo_plan, silo_release

    records = SiloRecords.beside(policy.ledger, settings, partition)  # from its disk: no dataset load
    plan = silo_plan(settings, partition, policy.budget_delta, sigmas, records)
    w = torch.from_numpy(w).to(plan.fed.x.dtype)
    w_prev = None if w_prev is None else torch.from_numpy(w_prev).to(plan.fed.x.dtype)
    std = plan.std(kind, w, w_prev)  # the silo's noise, from its calibration and the server's model only
    _, release = silo_release(plan.problem, kind, w, w_prev, std, settings.batch_size, plan.fed.min_size)
    ledger.release(run_id, as_declared(release, declared), "train")  # recorded before it leaves
    # fresh secret randomness: a seed the server could know would let it subtract the noise
    generator = torch.Generator().manual_seed(secrets.randbits(63))
    message, _ = silo_message(plan.problem, plan.fed, kind, w, w_prev, std, settings.batch_size, generator)
    run_eps, spent = ledger.epsilons(run_id)
    metrics = MetricRecord({"num-examples": 1, EPSILON_KEY: run_eps, SPENT_KEY: spent,
                            LEFT_KEY: max(0.0, policy.budget_epsilon - spent)})
    return Message(RecordDict({"arrays": ArrayRecord({"message": Array(message.numpy())}), "metrics": metrics}),
                   reply_to=msg)


def unreleased(msg: Message, context: Context, policy: SiloPolicy | None = None) -> Message:
    """An EVALUATE or QUERY message: no declared release answers it, so the silo refuses it (and
    records the refusal); nothing computed on its records leaves."""
    reason = f"silo refuses a {msg.metadata.message_type} message: it releases only its declared train messages"
    try:
        (policy or SiloPolicy.for_node(context.node_config)).open_ledger().refuse(str(context.run_id), reason)
    except (SiloRefusal, OSError) as exc:
        reason = f"{reason} ({exc})"
    return _refusal(msg, reason)


def make_app(settings=None, policy_for=None) -> ClientApp:
    """The silo's ClientApp; ``settings`` (else the run config's) and ``policy_for(node_config)``
    (else the node config's :class:`SiloPolicy`) are for Python callers such as the simulation
    engine, whose nodes have no node config of their own."""
    app = ClientApp()

    def policy(context: Context) -> SiloPolicy | None:
        return policy_for(context.node_config) if policy_for is not None else None

    @app.train()
    def _train_handler(msg: Message, context: Context) -> Message:
        return train(msg, context, settings, policy(context))

    @app.evaluate()
    def _evaluate(msg: Message, context: Context) -> Message:
        return unreleased(msg, context, policy(context))

    @app.query()
    def _query(msg: Message, context: Context) -> Message:
        return unreleased(msg, context, policy(context))

    return app


app = make_app()
