"""The malicious-server battery (issue 34 item 4): a server written against Flower's Message API
(:mod:`silodp.verify.audit.malicious`) plays every attack class against the example's silos and
records every reply. Asserted: every release received is finite; each silo's ledger counts
exactly the releases the server received; spent <= budget; two silos that differ in one record
(WBCD silo 0, record ``target`` replaced) give error texts that are identical (no text carries a
number computed from records) and, with the noise off (the test-only hook :func:`noiseless`, a
monkeypatch in this process, which no config can reach), releases whose centres differ by at
most the declared sensitivity; every hostile run config is refused by every silo.

The seam: the deployment under test is the ``federation`` fixture, which yields a grid (what the
server sends through), the silos' ledger paths and node ids, and whether the noise can be turned
off. Its ``inprocess`` parameter delivers each message to the real ClientApp with each node's own
Context and node config, as a SuperNode would. A real localhost deployment (SuperLink and
SuperNodes as separate processes, ``flower_processes.start_deployment``) and h34s's silo service
(``silodp federation up``) are further parameters of the same fixture: each yields the same
things (for a deployment, the battery runs as ``make_server_app`` in its own process and writes
its records as JSON): ``test_the_battery_in_a_localhost_deployment`` (SuperLink and two
SuperNodes, the short battery: a SuperNode starts a process per message, about 100 s on 2 shared
cores) and ``test_the_battery_against_the_silo_service`` (h34s's ``flower_processes.federation``,
skipped where ``silodp.service.federation`` is absent) check the same properties from the JSON,
matching nodes to ledgers by their counts of the run's releases. Tests that failed before the release primitive and the hardened silos:
``test_every_release_is_finite`` (the ``inf - inf`` model released NaN, issue 34 leak 1).

Against services (round 7): ``test_neighbour_services_differ_by_at_most_the_declared_sensitivity``
compares two ``silodp silo serve`` processes whose records differ in one record, with the noise
off through the operator's test-only environment variable (``SILODP_SERVICE_TEST_NOISELESS``,
read once at start; no message reaches it); ``test_isrl_dp_mod_forwards_...`` runs ``IsrlDpMod``'s
service mode in a fresh process; ``test_isrl_dp_mod_silos_and_a_record_reader_in_two_concurrent_runs``
ships a server's own ClientApp (``IsrlDpMod`` and a record reader) to the module's one
``silodp federation up`` deployment in two concurrent runs (kept to one message a run, the
reader's probe riding on the mod's update: a SuperNode answers one message at a time, a process
each).
"""

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "flower"))

from test_flower_apps import InProcessGrid  # noqa: E402

from silodp.integrations.flower_silo import SiloLedgerDB  # noqa: E402
from silodp.verify.audit import malicious  # noqa: E402
from silodp_flower.client_app import app as client_app  # noqa: E402
from silodp_flower.task import Settings, SiloRecords, setup  # noqa: E402

CONFIG = {"algorithm": "isrl-mb-sgd", "rounds": 6, "epsilon": 3.0, "delta": 1e-4, "accountant": "rdp"}
BUDGET = 20.0
NEIGHBOUR = 102  # node id of silo 0 with one record replaced


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1)


def _aimed(settings):
    """A record of silo 0 that a finite model can single out, and the model's parameters."""
    x = SiloRecords.load(settings, 0).fed.x[0].numpy()
    for target in range(len(x)):
        aimed = malicious.aim_at_record(x, target)
        if aimed is not None:
            return target, aimed
    pytest.fail("no record of silo 0 can be singled out by two features")


class SuperNodeGrid(InProcessGrid):
    """As a SuperNode does, an exception of the ClientApp becomes an error reply (Flower's own
    text of the exception: the app's code, not the silo's, decides what it says)."""

    def send_and_receive(self, messages, *, timeout=None):
        from flwr.app import Error, Message
        from flwr.common.constant import ErrorCode

        out = []
        for m in messages:
            try:
                out.append(client_app(m, self.contexts[m.metadata.dst_node_id]))
            except Exception as exc:  # noqa: BLE001 (what the SuperNode does)
                out.append(Message(Error(ErrorCode.CLIENT_APP_RAISED_EXCEPTION, f"{type(exc).__name__}: {exc}"),
                                   reply_to=m))
        return out


@dataclasses.dataclass
class Federation:
    grid: object
    ledgers: dict  # node id -> ledger path
    target: int
    aimed: tuple
    dim: int


def noiseless(monkeypatch) -> None:
    """The test-only hook: the example silo's noise off and its batch draw fixed (so neighbours
    draw the same batch), in this process only; the ledger still records the calibrated noise."""
    import secrets

    import silodp_flower.task as task

    real = task.silo_message
    monkeypatch.setattr(task, "silo_message", lambda problem, fed, kind, w, w_prev, std, *rest:
                        real(problem, fed, kind, w, w_prev, 0.0, *rest))
    monkeypatch.setattr(secrets, "randbits", lambda bits: 12345)


def _replaced(settings, target: int):
    """Silo 0's records with record ``target`` replaced by silo 1's first (its neighbour)."""
    from silodp.algorithms import Federation as Fed

    own, other = SiloRecords.load(settings, 0), SiloRecords.load(settings, 1)
    x, y = own.fed.x.clone(), own.fed.y.clone()
    x[0, target], y[0, target] = other.fed.x[0, 0], other.fed.y[0, 0]
    n = int(own.fed.counts[0])
    return dataclasses.replace(own, fed=Fed.from_silos([x[0, :n]], [y[0, :n]]))


@pytest.fixture(params=["inprocess"])
def federation(request, tmp_path):
    settings = Settings.from_run_config(CONFIG)
    target, aimed = _aimed(settings)
    grid = SuperNodeGrid(3, CONFIG, tmp_path, BUDGET, settings.delta)
    for ctx in grid.contexts.values():
        ctx.node_config.update({"dataset": "wbcd", "seed": 0})  # each silo fixes its records
    grid.contexts[NEIGHBOUR].node_config["partition-id"] = 0
    ledger = grid.ledgers[2]
    _replaced(settings, target).save(ledger.with_name(f"{ledger.name}.records-wbcd-seed0-silo0.npz"))
    yield Federation(grid, {100 + i: p for i, p in enumerate(grid.ledgers)}, target, aimed,
                     setup(settings).problem.model.dim)


def _battery(fed):
    return malicious.play(fed.grid, malicious.attacks(fed.dim, fed.aimed))


def test_the_aimed_model_singles_out_one_record(federation):
    import torch

    settings = Settings.from_run_config(CONFIG)
    w = torch.from_numpy(malicious.crafted_models(federation.dim, federation.aimed)["inf-minus-inf"])
    x = SiloRecords.load(settings, 0).fed.x[0]
    logits = setup(settings).problem.model.forward(w, x).reshape(-1)
    assert torch.isnan(logits).nonzero().reshape(-1).tolist() == [federation.target]


def test_every_release_is_finite_and_counted(federation):
    records = _battery(federation)
    assert malicious.non_finite_releases(records) == []
    received = malicious.releases_by_node(records)
    for node, path in federation.ledgers.items():
        s = SiloLedgerDB(path).summary()
        assert sum(r["releases"] for r in s["runs"]) == received.get(node, 0)
        assert s["epsilon_spent"] <= s["budget_epsilon"] == BUDGET
    # past its plan of 6 a silo still answers while its budget holds, each release accounted
    assert min(received.values()) > CONFIG["rounds"]


def test_error_texts_do_not_depend_on_the_records(federation):
    records = _battery(federation)
    mine, neighbour = (malicious.error_texts(records, node) for node in (100, NEIGHBOUR))
    assert [a for a, _ in mine] == [a for a, _ in neighbour]
    assert mine == neighbour
    assert any(e is not None for _, e in mine) and any(e is None for _, e in mine)


def test_neighbours_releases_differ_by_at_most_the_declared_sensitivity(federation, monkeypatch):
    noiseless(monkeypatch)
    records = _battery(federation)
    clip = Settings.from_run_config(CONFIG).clip
    by = {(r["attack"], r["node"]): r for r in records}
    compared = 0
    for attack, node in list(by):
        if node != 100 or by[attack, 100]["error"] is not None or by[attack, NEIGHBOUR]["error"] is not None:
            continue
        a, b = (np.asarray(by[attack, n]["arrays"]["message"]) for n in (100, NEIGHBOUR))
        # a mean of K clipped gradients: replacing one record moves it by 2C per draw of that record (<= 2C)
        assert np.linalg.norm(a - b) <= 2 * clip * (1 + 1e-9), attack
        compared += 1
    assert compared >= 1


#: hostile run configs every silo refuses outright; the others (delta 0, clip 1e4 / 1e-300, another
#: model, epsilon 1000) it may serve at its own delta, caps, calibration and budget, accounted
REFUSED = ("batch-0", "epsilon-nan", "other-dataset", "rounds-20000", "unknown-accountant")


@pytest.mark.parametrize("name", sorted(malicious.HOSTILE_RUN_CONFIGS))
def test_a_hostile_run_config_is_refused_or_accounted(federation, name):
    config = {**CONFIG, **malicious.HOSTILE_RUN_CONFIGS[name]}
    federation.grid.new_run(7, config)
    records = malicious.play(federation.grid, [("honest", "train", {"w": np.zeros(federation.dim)}, {"kind": "grad"})])
    assert len(records) == 3 and malicious.non_finite_releases(records) == []
    if name in REFUSED:
        assert all(r["error"] for r in records), name
    received = malicious.releases_by_node(records)
    for node, path in federation.ledgers.items():
        s = SiloLedgerDB(path).summary()
        assert sum(r["releases"] for r in s["runs"]) == received.get(node, 0)
        assert s["epsilon_spent"] <= s["budget_epsilon"]


# -- the same battery in real localhost deployments (separate processes, stopped by PID) ----------
def _battery_app(into: Path, server: str = "make_server_app()", client: str | None = None) -> Path:
    """A copy of the example whose ServerApp is :func:`malicious.make_server_app` (``server``: the
    expression of :mod:`malicious` that makes it); the ClientApp is the example's (the silo under
    test) or ``client``'s (an expression of :mod:`malicious`: a ClientApp the server ships)."""
    import shutil

    app = into / ("battery-app" if client is None else "mod-battery-app")
    shutil.copytree(Path(__file__).resolve().parents[2] / "examples" / "flower", app,
                    ignore=shutil.ignore_patterns("__pycache__"))
    (app / "silodp_flower" / "battery_server.py").write_text(
        f"from silodp.verify.audit.malicious import *  # noqa: F403\n\napp = {server}\n")
    toml = app / "pyproject.toml"
    text = toml.read_text().replace('"silodp_flower.server_app:app"', '"silodp_flower.battery_server:app"')
    if client is not None:
        (app / "silodp_flower" / "battery_client.py").write_text(
            f"from silodp.verify.audit.malicious import *  # noqa: F403\n\napp = {client}\n")
        text = text.replace('"silodp_flower.client_app:app"', '"silodp_flower.battery_client:app"')
    toml.write_text(text.replace("[tool.flwr.app.config]\n", '[tool.flwr.app.config]\nbattery-out = ""\n'
                                 'battery-dim = 0\nbattery-aim = ""\nbattery-nodes = 0\nbattery-size = "full"\n', 1))
    return app


def _run_config(out: Path, nodes: int) -> str:
    """The ``--run-config`` of a battery run writing its records to ``out``."""
    settings = Settings.from_run_config(CONFIG)
    _, aimed = _aimed(settings)
    return " ".join([*(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in CONFIG.items()),
                     f'battery-out="{out}"', f"battery-dim={setup(settings).problem.model.dim}",
                     f'battery-aim="{",".join(map(str, aimed))}"', f"battery-nodes={nodes}", 'battery-size="short"'])


def _deployed_battery(tmp_path, connection: str, env: dict, nodes: int, ledgers: list[Path]):
    """Run the battery through ``flwr run`` on ``connection``; check what it recorded against the ledgers."""
    import json

    from flower_processes import BIN, run_in_own_group

    out = tmp_path / "battery.json"
    run_config = _run_config(out, nodes)
    done = run_in_own_group([str(BIN / "flwr"), "run", str(_battery_app(tmp_path)), connection, "--stream",
                             "--run-config", run_config], env, timeout=240)
    assert done.returncode == 0 and out.is_file(), done.stdout[-3000:]
    result = json.loads(out.read_text())
    records = result["records"]
    assert malicious.non_finite_releases(records) == []
    received = sorted(malicious.releases_by_node(records).get(n, 0) for n in {r["node"] for r in records})
    counted = []
    for path in ledgers:
        s = SiloLedgerDB(path).summary()
        counted.append(sum(r["releases"] for r in s["runs"] if r["run_id"] == str(result["run_id"])))
        assert s["epsilon_spent"] <= s["budget_epsilon"]
    assert sorted(counted) == received and len(received) == nodes


@pytest.mark.slow
def test_the_battery_in_a_localhost_deployment(tmp_path):
    from flower_processes import Descendants, deployment_env, start_deployment
    import contextlib

    env = deployment_env(tmp_path / "flwr-home")
    ledgers = [tmp_path / f"silo-{i}.sqlite" for i in range(2)]
    configs = [f'partition-id={i} dataset="wbcd" seed=0 silodp-ledger="{ledgers[i]}" '
               f"silodp-budget-epsilon={BUDGET!r} silodp-budget-delta=0.0001" for i in range(2)]
    procs = Descendants()
    try:
        with procs, contextlib.ExitStack() as stack:
            start_deployment(stack, configs, env, tmp_path)
            _deployed_battery(tmp_path, "local", env, 2, ledgers)
    finally:
        procs.assert_none_left()


@pytest.fixture(scope="module")
def service_federation(tmp_path_factory):
    """One local federation with silo services (``silodp federation up``'s library call) for the
    module's deployment tests, stopped by PID (and asserted gone) after the last."""
    from flower_processes import federation

    tmp = tmp_path_factory.mktemp("service-federation")
    with federation(tmp / "fed", silos=2, budget_epsilon=BUDGET) as (info, env):
        yield info, env


@pytest.mark.slow
def test_the_battery_against_the_silo_service(service_federation, tmp_path):
    """The example's thin ClientApp against the services of ``silodp federation up``."""
    info, env = service_federation
    _deployed_battery(tmp_path, info["connection"], env, 2, [Path(s["ledger"]) for s in info["silos"]])


@pytest.mark.slow
def test_isrl_dp_mod_silos_and_a_record_reader_in_two_concurrent_runs(service_federation, tmp_path):
    """A server ships its own ClientApp (:func:`malicious.make_mod_client_app`: ``IsrlDpMod``
    around an app that would train on records, and a record reader) to the services' SuperNodes
    and starts two runs at once (two new run ids). Per run and silo, the ledger counts exactly the
    releases the server received (the reader's own calls under its own run id, also counted);
    every release is finite; spent <= budget across all runs; every refusal is a fixed text; and
    the reader got no records and no un-noised value: its node config names only the partition and
    the service (no path), the in-process policy is refused, the service refuses every other kind
    and an extra (noise) field, its status carries the ledger's summary only, and two releases at
    the same model differ."""
    import json

    from flower_processes import BIN, run_all_in_own_groups

    from silodp.service.wire import REFUSALS, Status

    info, env = service_federation
    app = _battery_app(tmp_path, "make_server_app(mod_attacks)", "make_mod_client_app()")
    outs = [tmp_path / f"mod-battery-{i}.json" for i in range(2)]
    runs = run_all_in_own_groups([[str(BIN / "flwr"), "run", str(app), info["connection"], "--stream",
                                   "--run-config", _run_config(out, 2)] for out in outs], env, timeout=420)
    for done, out in zip(runs, outs):
        assert done.returncode == 0 and out.is_file(), done.stdout[-3000:]
    results = [json.loads(out.read_text()) for out in outs]
    assert len({r["run_id"] for r in results}) == 2  # two runs, each its own id
    ledgers = [SiloLedgerDB(s["ledger"]).summary() for s in info["silos"]]
    fixed = set(REFUSALS.values())
    for result in results:
        records, run = result["records"], str(result["run_id"])
        assert malicious.non_finite_releases(records) == []
        readers = {r["node"]: r["config"] for r in records if r["attack"] == "update:0"}
        assert len(readers) == 2
        received = malicious.releases_by_node(records)
        for node, found in readers.items():
            counted = {r["run_id"]: r["releases"] for r in ledgers[int(found["partition"])]["runs"]}
            assert counted.get(run, 0) == received.get(node, 0) == 1  # the mod's update, through the service
            assert counted[malicious.READER_RUN.format(run_id=run)] == 2  # the reader's two grad releases
            assert found["node-config"] == "partition-id,silodp-service,silodp-service-token" and found["paths"] == ""
            assert found["policy"] == "refused" and found["repeat-differs"] == "True"
            assert found["status-fields"] == ",".join(sorted(Status.model_fields))
            assert {found[f"kind-{k}"] for k in ("records", "loss", "evaluate", "plain")} == {REFUSALS["kind"]}
            assert found["noise-field"] == REFUSALS["request"]
        for r in records:
            if r["error"] is not None:
                assert r["error"].removeprefix("IsrlDpMod: ") in fixed, r
    assert all(s["epsilon_spent"] <= s["budget_epsilon"] == BUDGET for s in ledgers)


def test_models_the_silo_cannot_evaluate_on_its_input_box_are_refused(federation):
    """``release.check_model`` in the service core: the aimed ``inf - inf`` model and the ±MAX models
    are refused by every silo before a record is read (the same text for the neighbours), while the
    ordinary finite ones are answered."""
    records = _battery(federation)
    for node in federation.ledgers:
        replies = dict(malicious.error_texts(records, node))
        for attack in ("model:inf-minus-inf", "model:plus-max", "model:minus-max", "model:alternating-max"):
            assert replies[attack] is not None, (node, attack)
        assert replies["model:subnormal"] is None and replies["model:1e7-e0"] is None


# -- neighbours across processes: two services, noise off by the operator's test-only hook --------
@pytest.fixture(scope="module")
def neighbour_services(tmp_path_factory):
    """Two ``silodp silo serve`` processes, silo 0's records and the same with record ``target``
    replaced, each started with the test-only :data:`~silodp.service.core.ENV_TEST_NOISELESS`
    (an environment variable of the process: no message or proposal reaches it); stopped by PID."""
    import contextlib
    import os

    from flower_processes import ROOT, silo_service

    from silodp.service.core import ENV_TEST_NOISELESS

    tmp = tmp_path_factory.mktemp("neighbours")
    settings = Settings.from_run_config(CONFIG)
    target, aimed = _aimed(settings)
    SiloRecords.load(settings, 0).save(tmp / "silo0.npz")
    _replaced(settings, target).save(tmp / "neighbour.npz")
    env = {**os.environ, ENV_TEST_NOISELESS: "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "examples" / "flower")])}
    socks = {}
    with contextlib.ExitStack() as stack:
        for name in ("silo0", "neighbour"):
            (tmp / f"{name}.toml").write_text(
                f'[records]\npath = "{name}.npz"\n\n[ledger]\npath = "{name}.sqlite"\nbudget_epsilon = 1000.0\n'
                f'budget_delta = 1e-4\n\n[listen]\nsocket = "{name}.sock"\n')
            socks[name] = tmp / f"{name}.sock"
            stack.enter_context(silo_service(tmp / f"{name}.toml", env, tmp / f"{name}.log", socks[name]))
        yield socks, aimed, setup(settings).problem.model.dim, tmp


def test_neighbour_services_differ_by_at_most_the_declared_sensitivity(neighbour_services):
    """Across processes (the test is the server, each service its own process): for every crafted
    model both services answer, the centres of a ``grad`` release (a mean of K clipped gradients,
    the same batch drawn) and of an ``update`` release (IsrlDpMod's: local steps, the update
    clipped to C) differ by at most 2C, the declared replace-one sensitivity; the models neither
    evaluates are refused by both with the same fixed text."""
    from silodp.service.client import ServiceClient, ServiceRefused, proposal_of
    from silodp.service.plan import UPDATE

    socks, aimed, dim, _ = neighbour_services
    clients = {name: ServiceClient(f"unix:{sock}") for name, sock in socks.items()}
    clip = 1.0
    proposals = {"grad": proposal_of({**CONFIG, "rounds": 20, "clip": clip}),
                 "update": proposal_of({**CONFIG, "algorithm": UPDATE, "rounds": 20, "clip": clip, "local-steps": 3})}
    compared, moved = 0, 0.0
    for kind, proposal in proposals.items():
        for name, w in {"zeros": np.zeros(dim), **malicious.crafted_models(dim, aimed)}.items():
            answers = {}
            for silo, client in clients.items():
                try:
                    answers[silo] = client.release(f"neighbours-{kind}", proposal, kind, w)[0]
                except ServiceRefused as exc:
                    answers[silo] = str(exc)
            a, b = answers.values()
            if isinstance(a, str) or isinstance(b, str):
                assert a == b, (kind, name)  # refused by both, with the same fixed text
                continue
            assert np.isfinite(a).all() and np.isfinite(b).all(), (kind, name)
            assert np.linalg.norm(a - b) <= 2 * clip * (1 + 1e-9), (kind, name)
            if kind == "update":
                assert np.linalg.norm(a - w) <= clip * (1 + 1e-9), name  # noise off: w + the clipped update
            compared += 1
            moved = max(moved, float(np.linalg.norm(a - b)))
    assert compared >= 4 and moved > 0  # the records do matter to some release: the comparison bites


def test_isrl_dp_mod_forwards_to_the_service_without_training_or_torch(neighbour_services):
    """``IsrlDpMod`` with ``silodp-service`` in its node config, in a fresh process (as a SuperNode
    runs the ClientApp): the TRAIN message's arrays go to the service as an ``update``, the reply
    is the service's release reshaped into the sent arrays (noise off here: ``w`` plus an update
    clipped to C), the wrapped app never runs, torch is never imported, and an EVALUATE message
    gets the service's fixed refusal; the service's ledger counts the one release."""
    import os
    import subprocess

    from flower_processes import ROOT

    from silodp.service.client import ServiceClient
    from silodp.service.wire import REFUSALS

    socks, _, dim, _ = neighbour_services
    before = ServiceClient(f"unix:{socks['silo0']}").status()
    probe = f"""
import sys, numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MessageType, RecordDict
from flwr.clientapp import ClientApp
from flwr.supercore.task_identity import TaskIdentity
for attr in ("_run_id", "_task_id", "_node_id"):
    setattr(TaskIdentity, attr, 1)
from silodp.integrations.flower import EPSILON_KEY, IsrlDpMod
called = []
app = ClientApp(mods=[IsrlDpMod(clipping_norm=1.0, epsilon=1.0, delta=1e-5, rounds=3)])
@app.train()
@app.evaluate()
def train(msg, ctx):
    called.append(1)
    raise RuntimeError("the wrapped app must not run in service mode")
ctx = Context(run_id=41, node_id=1, node_config={{"partition-id": 0, "silodp-service": "unix:{socks['silo0']}"}},
              state=RecordDict(), run_config={{"local-steps": 2, "step-size": 0.5}})
w = {{"weight": np.linspace(-0.1, 0.1, {dim - 1}).astype(np.float32), "bias": np.zeros(1)}}
replies = []
for kind in (MessageType.TRAIN, MessageType.EVALUATE):
    msg = Message(RecordDict({{"params": ArrayRecord({{k: Array(v) for k, v in w.items()}})}}), dst_node_id=1,
                  message_type=kind)
    msg.metadata.__dict__["_message_id"] = msg.object_id
    replies.append(app(msg, ctx))
out, ev = replies
arr = out.content["params"]
got = {{k: arr[k].numpy() for k in arr.keys()}}
step = np.concatenate([(got[k].astype(np.float64) - w[k]).ravel() for k in w])
print(out.has_error(), list(got), [str(v.dtype) for v in got.values()], 0 < np.linalg.norm(step) <= 1.0 + 1e-6,
      0 < out.content["metrics"][EPSILON_KEY] <= 1.0, bool(called), "torch" in sys.modules)
print(ev.error.reason)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "examples" / "flower")])}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=180, env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = proc.stdout.strip().split("\n")
    assert lines[-2] == "False ['weight', 'bias'] ['float32', 'float64'] True True False False", proc.stdout
    assert lines[-1] == f"IsrlDpMod: {REFUSALS['kind']}"
    after = ServiceClient(f"unix:{socks['silo0']}").status()
    assert (after.releases, after.refused) == (before.releases + 1, before.refused + 1)


def test_isrl_dp_mod_sends_no_release_that_is_not_finite_in_the_servers_dtype():
    """Service mode: the service's release (float64) is cast back to the dtypes the server sent;
    where that overflows (float32 arrays near their largest value), the mod sends the service's
    fixed text, not an inf; the reply otherwise keeps the sent names, shapes and dtypes."""
    import types

    from flwr.app import Array, ArrayRecord, Context, Message, MessageType, RecordDict

    from silodp.integrations.flower import EPSILON_KEY, IsrlDpMod
    from silodp.service.wire import REFUSALS

    class Service:  # stands in for ServiceClient: what the service released
        def __init__(self, message):
            self.message = message

        def release(self, run_id, proposal, kind, w):
            assert kind == "update" and proposal["algorithm"] == "clipped-update" and w.shape == (3,)
            return self.message, types.SimpleNamespace(epsilon_run=0.25)

        def close(self):
            pass

    mod = IsrlDpMod(clipping_norm=1.0, epsilon=1.0, delta=1e-5, rounds=2)
    ctx = Context(run_id=3, node_id=1, node_config={}, state=RecordDict(), run_config={})
    sent = {"a": np.zeros(2, dtype=np.float32), "b": np.zeros(1)}
    msg = Message(RecordDict({"p": ArrayRecord({k: Array(v) for k, v in sent.items()})}), dst_node_id=1,
                  message_type=MessageType.TRAIN)
    msg.metadata.__dict__["_message_id"] = msg.object_id
    out = mod._forward(Service(np.array([1e39, 0.5, 2.0])), msg, ctx)
    assert out.has_error() and out.error.reason == f"IsrlDpMod: {REFUSALS['release']}"
    out = mod._forward(Service(np.array([1.5, 0.5, 2.0])), msg, ctx)
    got = {k: out.content["p"][k].numpy() for k in out.content["p"].keys()}
    assert list(got) == ["a", "b"] and got["a"].dtype == np.float32 and got["a"].tolist() == [1.5, 0.5]
    assert got["b"].tolist() == [2.0] and out.content["metrics"][EPSILON_KEY] == 0.25
