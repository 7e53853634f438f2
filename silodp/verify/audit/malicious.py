"""A malicious server against silodp's Flower silos (issue 34 item 4): the attacks and their recorder.

The server is not trusted (paper Definition 4: ISRL-DP holds whatever the server sends), so a
silo must survive every message a server can write. This module holds the attack classes of
issue 34, written against Flower 1.42's Message API (not a Strategy):

* **crafted finite models** (:func:`crafted_models`): ``+-MAX``, subnormals, mixed scales,
  ``1e7 e_k``, and ``inf - inf`` logits aimed at one record (:func:`aim_at_record`: ``w[a] =
  MAX / t_a``, ``w[b] = -MAX / t_b`` with thresholds that only the target record passes on both
  features, so only its logit is ``inf - inf = NaN``);
* **malformed arrays** (:func:`malformed_arrays`): NaN, inf, wrong shape, empty, another
  architecture (more arrays, other names);
* **hostile run configs** (:data:`HOSTILE_RUN_CONFIGS`: epsilon 1000, delta 0, clip 1e4 and
  1e-300, batch 0, rounds 20000, NaN epsilon, an unknown accountant, another dataset or model);
* **message types** (:data:`MESSAGE_TYPES`): EVALUATE, QUERY and custom ones;
* more TRAIN rounds than the plan (:func:`attacks` ends with ``extra_rounds`` honest ones).

:func:`play` sends each attack to every node of a grid (Flower's ``Grid``, or any object with
``get_node_ids`` and ``send_and_receive``) and records every reply as a plain dict
(:class:`Reply`): the attack, the node, the error text or the released arrays and metrics.
:func:`make_server_app` wraps it as a ``ServerApp`` that writes the records as JSON where the
run config's ``battery-out`` says, so a test can run it in a real deployment (a separate
process) and read what the server received. The properties the battery checks are functions of
those records (:func:`non_finite_releases`, :func:`releases_by_node`, :func:`error_texts`).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from collections.abc import Callable, Iterable

import numpy as np

MAX = sys.float_info.max
#: EVALUATE, QUERY and custom message types (``<category>.<action>``): none releases anything declared
MESSAGE_TYPES = ("evaluate", "query", "train.leak", "evaluate.loss", "query.records")
#: run configs a server may propose (each is one ``flwr run``): every one must be refused
HOSTILE_RUN_CONFIGS: dict[str, dict] = {
    "epsilon-1000": {"epsilon": 1000.0},
    "delta-0": {"delta": 0.0},
    "clip-1e4": {"clip": 1e4},
    "clip-1e-300": {"clip": 1e-300},
    "batch-0": {"batch-size": 0},
    "rounds-20000": {"rounds": 20000},
    "epsilon-nan": {"epsilon": math.nan},
    "unknown-accountant": {"accountant": "no-such-accountant"},
    "other-dataset": {"dataset": "mnist"},
    "other-model": {"model": "mlp"},
}


def aim_at_record(x: np.ndarray, target: int) -> tuple[int, int, float, float] | None:
    """Two features ``a``, ``b`` and positive thresholds ``t_a``, ``t_b`` such that record
    ``target`` of ``x`` ([n, d]) is the only record with ``x[:, a] > t_a`` and ``x[:, b] > t_b``
    (each threshold halfway below the target's value and above the others' that pass the other
    feature), or None when no pair singles it out. With ``w[a] = MAX / t_a`` and ``w[b] = -MAX /
    t_b`` the target's logit is ``inf - inf = NaN`` and every other record's is finite or one-signed."""
    x = np.asarray(x, dtype=np.float64)
    me = x[target]
    others = np.delete(x, target, axis=0)
    positive = np.flatnonzero(me > 0)
    for a in positive:
        for b in positive:
            if b <= a:
                continue
            # the largest t_a < me[a] such that no other record exceeds both thresholds
            t_b = me[b] * 0.999
            above_b = others[others[:, b] > t_b]
            top_a = above_b[:, a].max(initial=-math.inf)
            if top_a < me[a]:
                t_a = max(top_a, 0.0) + (me[a] - max(top_a, 0.0)) / 2
                if t_a > 0:
                    return int(a), int(b), float(t_a), float(t_b)
    return None


def crafted_models(dim: int, aimed: tuple[int, int, float, float] | None = None) -> dict[str, np.ndarray]:
    """Finite models of ``dim`` entries that break naive clipping (name -> model)."""
    tiny = np.nextafter(0.0, 1.0)
    models = {
        "plus-max": np.full(dim, MAX), "minus-max": np.full(dim, -MAX),
        "alternating-max": np.where(np.arange(dim) % 2 == 0, MAX, -MAX),
        "subnormal": np.full(dim, tiny), "mixed-scales": np.where(np.arange(dim) % 2 == 0, 1e300, 1e-300),
        "1e7-e0": np.eye(dim)[0] * 1e7, "offset-1.5*2^51": np.full(dim, 1.5 * 2.0 ** 51),
    }
    if aimed is not None:
        a, b, t_a, t_b = aimed
        w = np.zeros(dim)
        w[a], w[b] = MAX / t_a, -MAX / t_b
        models["inf-minus-inf"] = w
    return models


def malformed_arrays(dim: int) -> dict[str, dict[str, np.ndarray]]:
    """Arrays no silo can train on (name -> the message's arrays)."""
    nan, inf = np.zeros(dim), np.zeros(dim)
    nan[0], inf[-1] = math.nan, math.inf
    return {"nan": {"w": nan}, "inf": {"w": inf}, "wrong-shape": {"w": np.zeros(dim + 1)},
            "matrix": {"w": np.zeros((dim, 2))}, "empty": {"w": np.zeros(0)}, "no-w": {"weights": np.zeros(dim)},
            "other-architecture": {"w": np.zeros(dim), "layer2": np.zeros(7)}, "int": {"w": np.zeros(dim, dtype=np.int64)}}


@dataclasses.dataclass
class Reply:
    """One reply the server received: the attack, the node, the error text (None for a release),
    the released arrays (lists of floats, possibly non-finite) and metrics."""

    attack: str
    node: int
    message_type: str
    error: str | None = None
    arrays: dict[str, list] = dataclasses.field(default_factory=dict)
    metrics: dict[str, float] = dataclasses.field(default_factory=dict)
    config: dict[str, str] = dataclasses.field(default_factory=dict)


def _reply(attack: str, msg) -> Reply:
    out = Reply(attack, int(msg.metadata.src_node_id), str(msg.metadata.message_type))
    if msg.has_error():
        out.error = str(msg.error.reason)
        return out
    for rec in msg.content.array_records.values():
        for key, arr in rec.items():
            out.arrays[key] = np.asarray(arr.numpy(), dtype=np.float64).ravel().tolist()
    for rec in msg.content.metric_records.values():
        out.metrics.update({k: float(v) for k, v in rec.items() if isinstance(v, (int, float))})
    for crec in msg.content.config_records.values():
        out.config.update({k: str(v) for k, v in crec.items()})
    return out


#: the attacks of :func:`attacks` ``(short=True)``: one of each class, for a deployment whose
#: SuperNodes start a process per message (seconds each)
SHORT = ("model:inf-minus-inf", "model:plus-max", "arrays:nan", "arrays:wrong-shape", "type:train.leak",
         "type:query", "round:0")


def attacks(dim: int, aimed=None, extra_rounds: int = 3, short: bool = False) -> list[tuple[str, str, dict, dict]]:
    """The battery of one run: (name, message type, arrays, config) for every attack (``short``:
    those of :data:`SHORT`), then the honest model ``extra_rounds`` times past a plan (the silo's
    plan bounds what it answers)."""
    out: list[tuple[str, str, dict, dict]] = [(f"model:{name}", "train", {"w": w}, {"kind": "grad"})
                                              for name, w in crafted_models(dim, aimed).items()]
    out += [(f"arrays:{name}", "train", arrays, {"kind": "grad"}) for name, arrays in malformed_arrays(dim).items()]
    out += [("config:diff-without-w_prev", "train", {"w": np.zeros(dim)}, {"kind": "diff"}),
            ("config:kind-records", "train", {"w": np.zeros(dim)}, {"kind": "records"})]
    out += [(f"type:{t}", t, {"w": np.zeros(dim)}, {"kind": "grad"}) for t in MESSAGE_TYPES]
    out += [(f"round:{r}", "train", {"w": np.zeros(dim)}, {"kind": "grad", "round": r}) for r in range(extra_rounds)]
    return [a for a in out if a[0] in SHORT] if short else out


def mod_attacks(dim: int, updates: int = 1, hostile: bool = False) -> list[tuple[str, str, dict, dict]]:
    """The battery of one run against an ``IsrlDpMod`` silo in service mode (:func:`make_mod_client_app`):
    ``updates`` honest updates, the first also probed by the record reader (:func:`read_records`),
    and with ``hostile`` a ``+MAX`` model and a NaN array (the service refuses both). Short by
    default: a SuperNode answers one message at a time, each in a process of its own."""
    out: list[tuple[str, str, dict, dict]] = [(f"update:{r}", "train", {"w": np.zeros(dim)},
                                               {"round": r, **({"probe": "reader"} if r == 0 else {})})
                                              for r in range(updates)]
    if hostile:
        nan = np.zeros(dim)
        nan[0] = math.nan
        out += [("model:plus-max", "train", {"w": np.full(dim, MAX)}, {}), ("arrays:nan", "train", {"w": nan}, {})]
    return out


#: the run id under which :func:`record_reader` calls the service (its own run, accounted as one)
READER_RUN = "reader-{run_id}"


def read_records(msg, context) -> dict[str, str]:
    """What a ClientApp that a server ships gets when it tries to read the silo's records itself,
    in a SuperNode whose node config names a silo service (every value a string): the node config's keys (``node-config``) and those naming an existing file
    (``paths``); whether the in-process silo's policy opens (``policy``: the records live beside
    its ledger); the service's ``status`` fields; the service's answer to kinds that would
    release records or un-noised values (``kind-*``) and to a request with an extra field that
    would turn the noise off (``noise-field``); whether two ``grad`` releases at the same model
    differ (``repeat-differs``: the noise is on) -- under its own run id (:data:`READER_RUN`)."""
    import os

    from silodp.integrations.flower_silo import SiloPolicy, SiloRefusal
    from silodp.service import wire
    from silodp.service.client import ServiceClient, ServiceRefused, proposal_of

    node = dict(context.node_config)
    found = {"node-config": ",".join(sorted(node)), "partition": str(node.get("partition-id", "")),
             "paths": ",".join(sorted(k for k, v in node.items() if isinstance(v, str) and os.path.exists(v)))}
    try:
        SiloPolicy.for_node(node)
        found["policy"] = "opened"
    except (SiloRefusal, ValueError, OSError):
        found["policy"] = "refused"
    client = ServiceClient.for_node(node)
    if client is None:
        found["service"] = "none"
        return found
    run = READER_RUN.format(run_id=context.run_id)
    proposal = proposal_of(context.run_config)
    arrays = msg.content.array_records.get("arrays")
    w = np.asarray(arrays["w"].numpy(), dtype=np.float64) if arrays is not None and "w" in arrays else np.zeros(0)
    found["status-fields"] = ",".join(sorted(client.status().model_dump()))
    for kind in ("records", "loss", "evaluate", "plain"):
        try:
            client.release(run, proposal, kind, w)
            found[f"kind-{kind}"] = "RELEASED"
        except ServiceRefused as exc:
            found[f"kind-{kind}"] = str(exc)
    body = {"run_id": run, "proposal": proposal, "kind": "grad", "w": {"shape": [0], "data": ""}, "noise": 0.0}
    try:
        client._call("POST", "/release", body, wire.Released)
        found["noise-field"] = "ACCEPTED"
    except ServiceRefused as exc:
        found["noise-field"] = str(exc)
    try:
        a, _ = client.release(run, proposal, "grad", w)
        b, _ = client.release(run, proposal, "grad", w)
        found["repeat-differs"] = str(bool(np.any(a != b)))
    except ServiceRefused as exc:
        found["repeat-differs"] = str(exc)
    client.close()
    return found


def record_reader(msg, context):
    """A ClientApp handler replying :func:`read_records`' findings (config record ``found``)."""
    from flwr.app import ConfigRecord, Message, RecordDict

    return Message(RecordDict({"found": ConfigRecord(read_records(msg, context))}), reply_to=msg)


def make_mod_client_app():
    """A ClientApp a server ships: ``IsrlDpMod`` (clip 1, epsilon 1, 2 rounds) around an app that
    would train on the silo's records; on a message whose config says ``probe = "reader"`` it
    first tries to read the records (:func:`read_records`) and adds its findings to the mod's
    reply (config record ``found``). In service mode the mod never calls the wrapped app."""
    from flwr.clientapp import ClientApp

    from silodp.integrations.flower import IsrlDpMod

    mod = IsrlDpMod(clipping_norm=1.0, epsilon=1.0, delta=1e-5, rounds=2)
    app = ClientApp()

    def trains_on_records(msg, context):
        raise RuntimeError("the wrapped app would train on the silo's records here")

    @app.train()
    def _train(msg, context):
        from flwr.app import ConfigRecord

        config = msg.content.config_records.get("config")
        found = read_records(msg, context) if config is not None and config.get("probe") == "reader" else None
        out = mod(msg, context, trains_on_records)
        if found is not None and not out.has_error():
            out.content["found"] = ConfigRecord(found)
        return out

    return app


def play(grid, battery: Iterable[tuple[str, str, dict, dict]], nodes: list[int] | None = None) -> list[dict]:
    """Send each attack of ``battery`` to every node (``nodes``, default all of the grid's) and
    record every reply (:class:`Reply` as a dict), in order."""
    from flwr.app import Array, ArrayRecord, ConfigRecord, Message, RecordDict

    nodes = sorted(grid.get_node_ids()) if nodes is None else nodes
    records = []
    for name, message_type, arrays, config in battery:
        content = RecordDict({"arrays": ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()}),
                              "config": ConfigRecord(dict(config))})
        messages = [Message(content, dst_node_id=n, message_type=message_type) for n in nodes]
        records += [dataclasses.asdict(_reply(name, m)) for m in grid.send_and_receive(messages)]
    return records


def make_server_app(battery_for: Callable[[int], list] | None = None):
    """A ``ServerApp`` that plays :func:`attacks` (or ``battery_for(dim)``) on every node of its
    grid and writes the records (JSON) to the run config's ``battery-out``. The model size comes
    from the run config's ``battery-dim``; the aimed model from ``battery-aim`` ("a,b,t_a,t_b");
    ``battery-size`` "short" plays :data:`SHORT` only."""
    from flwr.app import Context
    from flwr.serverapp import Grid, ServerApp

    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        cfg = context.run_config
        dim = int(cfg["battery-dim"])
        aim = str(cfg.get("battery-aim", ""))
        aimed = tuple(float(v) for v in aim.split(",")) if aim else None
        aimed = (int(aimed[0]), int(aimed[1]), aimed[2], aimed[3]) if aimed else None
        short = str(cfg.get("battery-size", "full")) == "short"
        battery = battery_for(dim) if battery_for is not None else attacks(dim, aimed, short=short)
        wanted = int(cfg.get("battery-nodes", 0))
        import time

        deadline = time.monotonic() + 120
        while len(list(grid.get_node_ids())) < wanted and time.monotonic() < deadline:
            time.sleep(0.2)
        records = play(grid, battery)
        with open(str(cfg["battery-out"]), "w") as out:
            json.dump({"run_id": int(context.run_id), "records": records}, out)

    return app


def non_finite_releases(records: list[dict]) -> list[dict]:
    """The releases (replies without error) holding a non-finite number."""
    return [r for r in records if r["error"] is None and not all(math.isfinite(v) for a in r["arrays"].values()
                                                                 for v in a)]


def releases_by_node(records: list[dict]) -> dict[int, int]:
    """How many releases (replies without error that carry arrays) each node sent."""
    out: dict[int, int] = {}
    for r in records:
        if r["error"] is None and r["arrays"]:
            out[r["node"]] = out.get(r["node"], 0) + 1
    return out


def error_texts(records: list[dict], node: int) -> list[tuple[str, str | None]]:
    """(attack, error text or None) of ``node``'s replies, in order."""
    return [(r["attack"], r["error"]) for r in records if r["node"] == node]


__all__ = ["HOSTILE_RUN_CONFIGS", "MAX", "MESSAGE_TYPES", "READER_RUN", "Reply", "SHORT", "aim_at_record", "attacks",
           "crafted_models", "error_texts", "make_mod_client_app", "make_server_app", "malformed_arrays", "mod_attacks",
           "non_finite_releases", "play", "read_records", "record_reader", "releases_by_node"]
