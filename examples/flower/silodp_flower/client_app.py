"""The silo's ClientApp: a thin client of the silo's privacy service, or, where the silo's
operator trusts this app bundle, the same silo code in process.

Trust (see docs/integrations.md): this ClientApp ships inside the app bundle (FAB) that the
server submits with ``flwr run``, so a silo that trusts no server runs the **silo privacy
service** (``silodp silo serve CONFIG.toml``, :mod:`silodp.service`) as the records' owner and
names it in its SuperNode's node config (``silodp-service``: ``unix:/path/silo.sock``, or
``http://127.0.0.1:PORT`` with ``silodp-service-token``). This app then only forwards the
server's proposal (the run config) and model to the service and returns what the service
released: it never opens the records or the ledger and imports no torch. The service checks the
proposal against its caps, calibrates its own noise, admits the run's whole plan against its
ledger, records each release before it leaves, and answers every refusal with one fixed text.

In-process mode (the simulation engine, or an operator who accepts this bundle as trusted): with
``silodp-ledger`` / ``silodp-budget-*`` in the node config (or the simulation's environment,
:meth:`~silodp.integrations.flower_silo.SiloPolicy.for_node`) the same silo code
(:class:`silodp.service.core.Silo`) runs here, on records saved beside the ledger; its ledger is
labelled ``in-process (the app bundle is trusted)``. EVALUATE and QUERY messages carry no
declared release: they are refused (and counted as refusals) in both modes.
"""

from __future__ import annotations

from flwr.app import Array, ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode

from silodp.integrations.flower import EPSILON_KEY
from silodp.integrations.flower_silo import SiloPolicy, SiloRefusal
from silodp.service.core import DATA_KEYS  # noqa: F401 (the node-config keys that fix the records)

#: Reply metrics besides EPSILON_KEY: the silo's epsilon spent over all runs, and what is left.
SPENT_KEY, LEFT_KEY = "silodp_spent", "silodp_left"


def _refusal(msg: Message, reason: str) -> Message:
    return Message(Error(ErrorCode.MOD_FAILED_PRECONDITION, reason), reply_to=msg)


def _reply(msg: Message, message, metrics: dict) -> Message:
    out = MetricRecord({"num-examples": 1, EPSILON_KEY: metrics["epsilon_run"], SPENT_KEY: metrics["epsilon_spent"],
                        LEFT_KEY: metrics["epsilon_left"]})
    return Message(RecordDict({"arrays": ArrayRecord({"message": Array(message)}), "metrics": out}), reply_to=msg)


def _arrays(msg: Message):
    """The server's ``w`` and ``w_prev`` (None where absent) and the message kind, unchecked."""
    import numpy as np

    arrays = msg.content.array_records.get("arrays")
    config = msg.content.config_records.get("config")
    kind = str(config["kind"]) if config is not None and "kind" in config else ""

    def get(name: str):
        return np.asarray(arrays[name].numpy(), dtype=np.float64) if arrays is not None and name in arrays else None

    return get("w"), get("w_prev"), kind


def _forwarded(msg: Message, context: Context, settings, client, kind: str | None = None) -> Message:
    """Service mode: the proposal and the model go to the service; its release (or its fixed
    refusal) comes back. ``kind``: a message type the service refuses (and records)."""
    import dataclasses

    import numpy as np

    from silodp.service.client import ServiceRefused, proposal_of

    proposal = proposal_of(dataclasses.asdict(settings) if settings is not None else context.run_config)
    w, w_prev, message_kind = _arrays(msg)
    try:
        message, out = client.release(str(context.run_id), proposal, kind or message_kind,
                                      np.zeros(0) if w is None else w, w_prev)
    except ServiceRefused as exc:
        return _refusal(msg, str(exc))
    finally:
        client.close()
    return _reply(msg, message, out.model_dump())


def _in_process(context: Context, policy: SiloPolicy):
    """The silo code of the in-process mode (the app bundle is trusted), records beside its ledger."""
    from silodp.integrations.flower_silo import MODE_IN_PROCESS
    from silodp.service.core import Silo

    partition = int(context.node_config["partition-id"])
    fixed = {k: context.node_config[k] for k in DATA_KEYS if k in context.node_config}

    def records(settings):
        from silodp.service.silo import SiloRecords

        return SiloRecords.beside(policy.ledger, settings, partition)

    return Silo(policy, records, fixed=fixed, partition=partition, mode=MODE_IN_PROCESS)


def train(msg: Message, context: Context, settings=None, policy: SiloPolicy | None = None) -> Message:
    """Silo ``partition-id``'s reply to a train message: its noisy message, or a refusal."""
    from silodp.service.client import ServiceClient

    client = ServiceClient.for_node(context.node_config) if policy is None else None
    if client is not None:
        return _forwarded(msg, context, settings, client)
    try:
        policy = policy or SiloPolicy.for_node(context.node_config)
        silo = _in_process(context, policy)
    except (SiloRefusal, OSError, KeyError, ValueError) as exc:
        return _refusal(msg, str(exc))
    run_id = str(context.run_id)
    try:
        from silodp.service.plan import Settings

        settings = settings or Settings.from_run_config(context.run_config)
        w, w_prev, kind = _arrays(msg)
        message, metrics = silo.release(run_id, settings, kind, w, w_prev)
    except SiloRefusal as exc:
        return _refusal(msg, str(exc))  # recorded by the silo
    except (ValueError, KeyError, TypeError, OverflowError) as exc:
        return _refusal(msg, str(silo.refuse(run_id, exc)))
    return _reply(msg, message, metrics)


def unreleased(msg: Message, context: Context, policy: SiloPolicy | None = None) -> Message:
    """An EVALUATE or QUERY message: no declared release answers it, so the silo refuses it (and
    records the refusal); nothing computed on its records leaves."""
    from silodp.service.client import ServiceClient

    client = ServiceClient.for_node(context.node_config) if policy is None else None
    if client is not None:
        return _forwarded(msg, context, None, client, kind=str(msg.metadata.message_type))
    reason = f"silo refuses a {msg.metadata.message_type} message: it releases only its declared train messages"
    try:
        (policy or SiloPolicy.for_node(context.node_config)).open_ledger().refuse(str(context.run_id), reason)
    except (SiloRefusal, OSError) as exc:
        reason = f"{reason} ({exc})"
    return _refusal(msg, reason)


def make_app(settings=None, policy_for=None) -> ClientApp:
    """The silo's ClientApp; ``settings`` (else the run config's) and ``policy_for(node_config)``
    (else the node config's service, or its :class:`SiloPolicy`) are for Python callers such as
    the simulation engine, whose nodes have no node config of their own."""
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
