"""The silo privacy service (silodp.service) as its own process: ``silodp silo serve`` on a Unix
domain socket created 0600; the thin client's admit / release / status; every refusal one of
the fixed texts and written to the ledger; a SIGKILLed service loses no ledger entry; the
example's ClientApp forwards to it without importing torch; and ``silodp federation up`` /
``down`` with a real ``flwr run`` (slow)."""

import contextlib
import json
import math
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
pytest.importorskip("flwr")
pytest.importorskip("fastapi")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flower_processes import BIN, ROOT, Descendants, federation, run_in_own_group, started  # noqa: E402

from silodp.integrations.flower_silo import MODE_SERVICE, SiloLedgerDB  # noqa: E402
from silodp.service import config as service_config  # noqa: E402
from silodp.service.client import ServiceClient, ServiceRefused, proposal_of  # noqa: E402
from silodp.service.wire import REFUSALS  # noqa: E402

PROPOSAL = proposal_of({"rounds": 3, "epsilon": 1.0, "accountant": "rdp"})
DIM = 31  # WBCD's linear model


def _toml(tmp: Path, budget: float = 2.0) -> Path:
    path = tmp / "silo.toml"
    path.write_text('[records]\ndataset = "wbcd"\npartition = 0\nseed = 0\n\n'
                    f'[ledger]\npath = "ledger.sqlite"\nbudget_epsilon = {budget}\nbudget_delta = 1e-4\n\n'
                    '[listen]\nsocket = "silo.sock"\n')
    return path


def test_config_names_the_bad_key(tmp_path):
    base = {"records": {"dataset": "wbcd"}, "ledger": {"path": "l", "budget_epsilon": 1.0, "budget_delta": 1e-4},
            "listen": {"socket": "s"}}
    assert service_config.parse(base, tmp_path).address == f"unix:{tmp_path / 's'}"
    for bad, key in [({**base, "listen": {"host": "0.0.0.0", "port": 1}}, "host"),
                     ({**base, "listen": {"host": "127.0.0.1", "port": 8000}}, "token"),
                     ({**base, "ledger": {**base["ledger"], "budget_epsilon": math.inf}}, "budget-epsilon"),
                     ({**base, "records": {}}, "records"), ({**base, "extra": {}}, "extra"),
                     ({**base, "caps": {"max_clip": "x"}}, "max_clip")]:
        with pytest.raises(ValueError, match=key):
            service_config.parse(bad, tmp_path)


def test_nested_commands_take_their_own_flags_and_suggest_close_ones(tmp_path, capsys):
    from silodp.cli import main

    assert main(["silo", "admits", str(tmp_path / "none.toml"), "--run-confg", "x"]) == 2
    assert "did you mean --run-config?" in capsys.readouterr().err
    assert main(["federation", "down", str(tmp_path)]) == 2  # its own flags parse; no federation there
    assert "no federation in" in capsys.readouterr().err


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    """One ``silodp silo serve`` process for the module, stopped by its PID."""
    tmp = tmp_path_factory.mktemp("service")
    config = _toml(tmp)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "examples" / "flower")])}
    with started([sys.executable, "-m", "silodp", "silo", "serve", str(config)], env, tmp / "service.log") as proc:
        sock = tmp / "silo.sock"
        deadline = time.monotonic() + 120
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp / "service.log").read_text()[-2000:]
            time.sleep(0.2)
        yield proc, tmp, sock


def test_the_service_releases_refuses_with_fixed_texts_and_records_everything(service):
    proc, tmp, sock = service
    assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600  # only its owner (and root) may connect
    client = ServiceClient(f"unix:{sock}")
    admitted = client.admit("1", PROPOSAL)
    assert 0 < admitted.epsilon_run <= admitted.epsilon_total <= admitted.budget_epsilon == 2.0
    message, out = client.release("1", PROPOSAL, "grad", np.zeros(DIM))
    assert message.shape == (DIM,) and np.isfinite(message).all() and out.epsilon_spent <= 2.0
    nan = np.zeros(DIM)
    nan[3] = math.nan
    hostile = [("1", PROPOSAL, "grad", np.zeros(DIM + 1)), ("1", PROPOSAL, "grad", nan),
               ("1", PROPOSAL, "diff", np.zeros(DIM)), ("1", {**PROPOSAL, "clip": 1e9}, "grad", np.zeros(DIM)),
               ("1", {**PROPOSAL, "epsilon": math.nan}, "grad", np.zeros(DIM)),
               ("1", {**PROPOSAL, "model": "cnn"}, "grad", np.zeros(DIM)),
               ("1", {**PROPOSAL, "rounds": "many"}, "grad", np.zeros(DIM)), ("1", PROPOSAL, "evaluate", np.zeros(DIM))]
    for args in hostile:
        with pytest.raises(ServiceRefused) as info:
            client.release(*args)
        assert str(info.value) in REFUSALS.values() and not any(ch.isdigit() for ch in str(info.value))
    status = client.status()
    assert status.mode == MODE_SERVICE and status.releases == 1 and status.refused == len(hostile)
    bad = ServiceClient(f"unix:{sock}")._http.post("/nothing", content=b"{")  # routing errors too: fixed text
    assert bad.json()["refusal"] in REFUSALS.values()


def test_the_example_client_app_forwards_without_torch(service):
    """The thin ClientApp in a fresh process (as a SuperNode runs it): its message reaches the
    service, a release comes back, and neither torch nor the records were touched."""
    _, _, sock = service
    probe = f"""
import sys, numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity
for attr in ("_run_id", "_task_id", "_node_id"):
    setattr(TaskIdentity, attr, 1)
from silodp_flower.client_app import app
ctx = Context(run_id=2, node_id=1, node_config={{"partition-id": 0, "silodp-service": "unix:{sock}"}},
              state=RecordDict(), run_config={{"rounds": 3, "epsilon": 1.0, "accountant": "rdp"}})
msg = Message(RecordDict({{"arrays": ArrayRecord({{"w": Array(np.zeros({DIM}))}}),
                          "config": ConfigRecord({{"kind": "grad"}})}}), dst_node_id=1, message_type=MessageType.TRAIN)
msg.metadata.__dict__["_message_id"] = msg.object_id
out = app(msg, ctx)
print(out.has_error(), out.content["arrays"]["message"].numpy().shape if not out.has_error() else out.error.reason,
      "torch" in sys.modules)
"""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "examples" / "flower")])}
    proc = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split("\n")[-2] == f"False ({DIM},) False"


def test_a_killed_service_loses_no_ledger_entry(tmp_path):
    config = _toml(tmp_path)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with started([sys.executable, "-m", "silodp", "silo", "serve", str(config)], env, tmp_path / "log") as proc:
        deadline = time.monotonic() + 120
        while not (tmp_path / "silo.sock").exists():
            assert proc.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        client = ServiceClient(f"unix:{tmp_path / 'silo.sock'}")
        for _ in range(3):
            client.release("9", PROPOSAL, "grad", np.zeros(DIM))
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    summary = SiloLedgerDB(tmp_path / "ledger.sqlite").summary()
    assert summary["mode"] == MODE_SERVICE and summary["runs"][0]["releases"] == 3


@pytest.mark.slow
def test_federation_up_runs_the_example_and_down_leaves_nothing(tmp_path):
    from silodp.integrations.flower_silo import certify_releases
    from silodp.service.plan import Settings
    from silodp.service.silo import silo_plan

    config = 'rounds=2 epsilon=1.0 accountant="rdp"'
    settings = Settings(rounds=2, epsilon=1.0, accountant="rdp")
    one_run = certify_releases(silo_plan(settings, 0, 1e-4).releases, 1e-4)  # silo 0's certificate of a run
    budget = 1.2 * one_run  # one run fits silo 0, two do not
    procs = Descendants()
    with procs:
        with federation(tmp_path / "fed", silos=2, budget_epsilon=budget, budget_delta=1e-4) as (info, env):
            assert set(info) == {"superlink", "silos", "connection"}
            assert all(set(s) == {"pid", "service_pid", "ledger", "port"} for s in info["silos"])
            runs = [run_in_own_group([str(BIN / "flwr"), "run", str(ROOT / "examples" / "flower"), info["connection"],
                                      "--stream", "--run-config", config], env, timeout=300) for _ in range(2)]
            first, second = (r.stdout for r in runs)
            assert "2 rounds; test error" in first and "refused by 0 silos" in first, first[-3000:]
            assert REFUSALS["budget"] in second, second[-3000:]  # silo 0 has no room for a second run
            ledgers = [SiloLedgerDB(s["ledger"]).summary() for s in info["silos"]]
            assert all(s["mode"] == MODE_SERVICE and s["epsilon_spent"] <= budget for s in ledgers)
            assert ledgers[0]["epsilon_spent"] == ledgers[0]["runs"][0]["epsilon"] == one_run
            assert ledgers[0]["runs"][0]["releases"] == 2 and len(ledgers[0]["runs"]) == 1 and ledgers[0]["refused"] >= 1
            assert stat.S_IMODE(os.stat(Path(info["silos"][0]["ledger"]).parent / "token").st_mode) == 0o600
    procs.assert_none_left()
    assert not (tmp_path / "fed" / "federation.json").exists()



USER = "silodp-supernode-test"

#: the example's thin ClientApp behind what a hostile app bundle would try first: open the silo's
#: records and ledger (the paths in the run config's ``snoop``); it reports, per message, the uid
#: it ran as, what each open gave and whether torch or a dataset loader (sklearn, pandas) was
#: imported, into ``report-dir``
_SNOOP_CLIENT = """\"\"\"The example's ClientApp, and a try at the silo's files from the same process.\"\"\"
import json
import os
import sys
from pathlib import Path

from flwr.app import Context, Message
from flwr.clientapp import ClientApp

from silodp_flower.client_app import app as example

app = ClientApp()


@app.train()
def _train(msg: Message, context: Context) -> Message:
    tries = {}
    for path in str(context.run_config["snoop"]).split(","):
        try:
            with open(path, "rb") as opened:
                opened.read(1)
            tries[path] = "read"
        except PermissionError:
            tries[path] = "PermissionError"
        except OSError as exc:
            tries[path] = type(exc).__name__
    reply = example(msg, context)
    report = {"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "tries": tries,
              "heavy": sorted({"torch", "sklearn", "pandas"} & set(sys.modules)), "error": reply.has_error()}
    name = f"{context.node_config['partition-id']}-{os.getpid()}.json"
    Path(str(context.run_config["report-dir"]), name).write_text(json.dumps(report))
    return reply
"""


@pytest.fixture
def unprivileged_user():
    """A user created for the test (removed after it), or a skip naming why it cannot be."""
    import pwd
    import shutil

    if os.geteuid() != 0 or shutil.which("useradd") is None or shutil.which("userdel") is None:
        pytest.skip("creating a user needs root, useradd and userdel")
    created = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                             capture_output=True, text=True)
    if created.returncode not in (0, 9):  # 9: exists already
        pytest.skip(f"useradd failed: {created.stderr.strip()[:200]}")
    try:
        yield pwd.getpwnam(USER)
    finally:
        if created.returncode == 0:
            subprocess.run(["userdel", USER], capture_output=True)


def _snooping_app(into: Path) -> Path:
    """A copy of the example whose ClientApp is :data:`_SNOOP_CLIENT`."""
    import shutil

    app = into / "app"
    shutil.copytree(ROOT / "examples" / "flower", app, ignore=shutil.ignore_patterns("__pycache__"))
    (app / "silodp_flower" / "snoop_client.py").write_text(_SNOOP_CLIENT)
    toml = app / "pyproject.toml"
    text = toml.read_text().replace('"silodp_flower.client_app:app"', '"silodp_flower.snoop_client:app"')
    toml.write_text(text.replace("[tool.flwr.app.config]\n", '[tool.flwr.app.config]\nsnoop = ""\nreport-dir = ""\n'))
    return app


@pytest.mark.slow
def test_the_os_boundary_the_client_app_reads_neither_records_nor_ledger(unprivileged_user):
    """The OS boundary of a deployment (docs/integrations.md), in real processes: each silo's
    service runs as root and owns its records (0600) and ledger in a 0700 directory; each
    SuperNode and every ClientApp process it runs are another user's (``supernode_as_user.py``:
    started as root, it drops to that uid and gid before it serves). A ``flwr run`` of the example
    whose ClientApp first tries to open the records and the ledger: every try is refused by the
    OS (PermissionError), in a process of that uid that imported neither torch nor a dataset
    loader, and the run still gets its releases, which each silo's ledger counts."""
    import shutil
    import tempfile

    from flower_processes import Descendants, deployment_env, free_ports, wait_healthy

    from silodp.service.silo import SiloRecords

    user = unprivileged_user
    base = Path(tempfile.mkdtemp(prefix="silodp-os-boundary-"))  # not under pytest's 0700 basetemp
    os.chmod(base, 0o755)
    try:
        silos, secret = [], []
        for i in range(2):  # WBCD's two silos: the example's server waits for one node each
            private = base / f"silo-{i}"
            private.mkdir(mode=0o700)
            records, ledger, sock = private / "records.npz", private / "ledger.sqlite", base / f"run-{i}" / "silo.sock"
            SiloRecords.from_dataset("wbcd", i, 0).save(records)
            os.chmod(records, 0o600)
            sock.parent.mkdir(mode=0o755)
            (private / "silo.toml").write_text(
                f'[records]\npath = "{records}"\n\n[ledger]\npath = "{ledger}"\nbudget_epsilon = 10.0\n'
                f'budget_delta = 1e-4\n\n[listen]\nsocket = "{sock}"\nuser = "{USER}"\n')
            home = base / f"node-home-{i}"
            home.mkdir()
            os.chown(home, user.pw_uid, user.pw_gid)
            silos.append((private, sock, home))
            secret += [str(records), str(ledger)]
        reports = base / "reports"
        reports.mkdir()
        os.chown(reports, user.pw_uid, user.pw_gid)
        app = _snooping_app(base)
        env = deployment_env(base / "client-home")
        config = f'rounds=2 snoop="{",".join(secret)}" report-dir="{reports}"'
        procs = Descendants()
        with procs, contextlib.ExitStack() as stack:
            services = [stack.enter_context(started([sys.executable, "-m", "silodp", "silo", "serve",
                                                     str(private / "silo.toml")], env, base / f"service-{i}.log"))
                        for i, (private, _, _) in enumerate(silos)]
            for i, (proc, (_, sock, _)) in enumerate(zip(services, silos)):
                deadline = time.monotonic() + 120
                while not sock.exists():
                    assert proc.poll() is None and time.monotonic() < deadline, (base / f"service-{i}.log").read_text()
                    time.sleep(0.2)
                assert stat.S_IMODE(os.stat(sock).st_mode) == 0o600 and os.stat(sock).st_uid == user.pw_uid
            link, *ports = free_ports(3)
            superlink = stack.enter_context(started(
                [str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                 "--host", "127.0.0.1", "--port", str(link)], env, base / "superlink.log"))
            wait_healthy(link, superlink, base / "superlink.log")
            launcher = str(Path(__file__).resolve().parent / "supernode_as_user.py")
            for i, ((_, sock, home), port) in enumerate(zip(silos, ports)):
                stack.enter_context(started(
                    [sys.executable, launcher, USER, str(home), "--", "--insecure", "--superlink", f"127.0.0.1:{link}",
                     "--host", "127.0.0.1", "--port", str(port), "--node-config",
                     f'partition-id={i} silodp-service="unix:{sock}"'], env, base / f"supernode-{i}.log"))
            (Path(env["FLWR_HOME"]) / "config.toml").write_text(
                f'[superlink]\ndefault = "local"\n\n[superlink.local]\naddress = "127.0.0.1:{link}"\ninsecure = true\n')
            run = run_in_own_group([str(BIN / "flwr"), "run", str(app), "local", "--stream", "--run-config", config],
                                   env, timeout=400)
            runners = {p.uids().real for p in procs.running("supernode_as_user.py")}
        procs.assert_none_left()
        logs = "\n".join(f"{f.name}: {f.read_text()[-1500:]}" for f in sorted(base.glob("*.log")))
        assert "2 rounds; test error" in run.stdout and "refused by 0 silos" in run.stdout, run.stdout[-3000:] + logs
        assert runners == {user.pw_uid}  # both SuperNode launchers (and their SuperNodes) run as the user
        seen = [json.loads(f.read_text()) for f in sorted(reports.glob("*.json"))]
        assert len(seen) == 4, logs  # two rounds, two silos: one ClientApp process per message
        for report in seen:
            assert (report["uid"], report["gid"], report["groups"]) == (user.pw_uid, user.pw_gid, [])
            assert report["tries"] == dict.fromkeys(secret, "PermissionError")
            assert report["heavy"] == [] and not report["error"]  # no torch, no dataset loader
        for private, _, _ in silos:
            assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
            assert stat.S_IMODE(os.stat(private / "records.npz").st_mode) == 0o600
            summary = SiloLedgerDB(private / "ledger.sqlite").summary()
            assert summary["mode"] == MODE_SERVICE and summary["runs"][0]["releases"] == 2 and summary["refused"] == 0
    finally:
        shutil.rmtree(base, ignore_errors=True)


def test_the_service_asks_the_algorithm_classes_what_it_computes():
    """The algorithms a service computes and the noise of each message kind come from the
    registered classes (``silo_noise``, declared on the class itself), never from a table of
    names; IsrlDpMod's ``update`` plan is certified at the requested epsilon with at least the
    mod's own noise (the same calibration, rounded toward more noise)."""
    from silodp.integrations.flower import IsrlDpMod
    from silodp.integrations.flower_silo import certify_releases
    from silodp.service.plan import UPDATE, service_algorithms, silo_noise
    from silodp.service.plan import Settings
    from silodp.service.silo import silo_plan

    assert service_algorithms() == ("isrl-mb-sgd", "isrl-spider", UPDATE)
    assert silo_noise("isrl-spider") == {"grad": "sigma1", "diff": "diff_noise"} and silo_noise(UPDATE) == {"update": "sigma"}
    for name in ("mb-sgd", "sdp-spider", "isrl-prox-sgd", "no-such"):  # non-private, shuffled, not opted in, unknown
        with pytest.raises(ValueError, match="algorithm: must be one of"):
            silo_noise(name)
    with pytest.raises(ValueError, match="algorithm: must be a registered algorithm"):
        Settings(algorithm=UPDATE).algorithm_object()  # the service's own mechanism has no simulator class
    plan = silo_plan(Settings(algorithm=UPDATE, rounds=4, epsilon=1.0, clip=2.0, accountant="rdp"), 0, 1e-4)
    (declared,) = plan.releases
    mod = IsrlDpMod(clipping_norm=2.0, epsilon=1.0, delta=1e-4, rounds=4, accountant="rdp")
    assert declared.count == 4 and declared.noise_multiplier >= mod.noise_multiplier
    assert declared.noise_multiplier == pytest.approx(mod.noise_multiplier, rel=1e-12)
    assert plan.sigmas["sigma"] / 2.0 == declared.noise_multiplier
    assert certify_releases(plan.releases, 1e-4) <= 1.0


def test_the_local_steps_of_an_update_are_capped_by_the_operator(tmp_path):
    """``[caps] max_local_steps`` (an ``update`` message's local training, IsrlDpMod's service
    mode) is the operator's: a proposal above it, or not a positive integer, is refused (code
    ``plan``) before any record is read, and recorded."""
    from silodp.integrations.flower_silo import MODE_SERVICE
    from silodp.service.core import Refusal, Silo
    from silodp.service.plan import UPDATE, Settings

    base = {"records": {"dataset": "wbcd"}, "ledger": {"path": "l.sqlite", "budget_epsilon": 1.0, "budget_delta": 1e-4},
            "listen": {"socket": "s"}}
    assert service_config.parse(base, tmp_path).max_local_steps == 100
    config = service_config.parse({**base, "caps": {"max_local_steps": 4}}, tmp_path)
    for bad in (0, "4"):
        with pytest.raises(ValueError, match="max_local_steps"):
            service_config.parse({**base, "caps": {"max_local_steps": bad}}, tmp_path)

    def no_records(settings):
        raise AssertionError("a refused proposal reads no record")

    silo = Silo(config.policy, no_records, mode=MODE_SERVICE, max_local_steps=config.max_local_steps)
    for steps in (5, 0):
        with pytest.raises(Refusal) as info:
            silo.release("1", Settings(algorithm=UPDATE, local_steps=steps), "update", np.zeros(DIM))
        assert info.value.code == "plan" and "local_steps" in str(info.value)
    assert silo.status()["refused"] == 2
