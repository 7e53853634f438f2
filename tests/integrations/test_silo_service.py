"""The silo privacy service (silodp.service) as its own process: ``silodp silo serve`` on a Unix
domain socket created 0600; the thin client's admit / release / status; every refusal one of
the fixed texts and written to the ledger; a SIGKILLed service loses no ledger entry; the
example's ClientApp forwards to it without importing torch; and ``silodp federation up`` /
``down`` with a real ``flwr run`` (slow)."""

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


@pytest.fixture
def unprivileged_user():
    """A user created for the test (removed after it), or a skip naming why it cannot be."""
    import pwd
    import shutil

    if os.geteuid() != 0 or shutil.which("useradd") is None:
        pytest.skip("creating a user needs root and useradd")
    created = subprocess.run(["useradd", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
                             capture_output=True, text=True)
    if created.returncode not in (0, 9):  # 9: exists already
        pytest.skip(f"useradd failed: {created.stderr.strip()[:200]}")
    try:
        try:
            probe = subprocess.run([sys.executable, "-c", "import silodp.service.client"], user=USER,
                                   capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)},
                                   timeout=120)
        except OSError as exc:
            probe = subprocess.CompletedProcess([], 1, "", str(exc))
        if probe.returncode != 0:
            pytest.skip(f"this Python or checkout is not readable by another user: {probe.stderr.strip()[-200:]}")
        yield pwd.getpwnam(USER)
    finally:
        if created.returncode == 0:
            subprocess.run(["userdel", USER], capture_output=True)


def test_the_os_boundary_the_client_app_reads_neither_records_nor_ledger(tmp_path, unprivileged_user):
    """The service runs as root and owns the records and the ledger (0600 in a 0700 directory);
    the ClientApp's process runs as another user: it cannot open either, and gets releases."""
    from silodp.service.silo import SiloRecords

    private = tmp_path / "silo"
    private.mkdir(mode=0o700)
    records = private / "records.npz"
    SiloRecords.from_dataset("wbcd", 0, 0).save(records)
    os.chmod(records, 0o600)
    sock_dir = tmp_path / "run"
    sock_dir.mkdir(mode=0o755)
    os.chmod(tmp_path, 0o755)
    (tmp_path / "silo.toml").write_text(
        f'[records]\npath = "{records}"\n\n[ledger]\npath = "{private / "ledger.sqlite"}"\nbudget_epsilon = 2.0\n'
        f'budget_delta = 1e-4\n\n[listen]\nsocket = "{sock_dir / "silo.sock"}"\nuser = "{USER}"\n')
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    with started([sys.executable, "-m", "silodp", "silo", "serve", str(tmp_path / "silo.toml")], env,
                 tmp_path / "service.log") as proc:
        deadline = time.monotonic() + 120
        while not (sock_dir / "silo.sock").exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "service.log").read_text()[-2000:]
            time.sleep(0.2)
        assert stat.S_IMODE(os.stat(private).st_mode) == 0o700
        probe = f"""
import numpy as np
from silodp.service.client import ServiceClient, proposal_of
for path in ({str(records)!r}, {str(private / 'ledger.sqlite')!r}):
    try:
        open(path, 'rb')
        print('READ', path)
    except PermissionError:
        print('denied')
message, out = ServiceClient('unix:{sock_dir / "silo.sock"}').release(
    '5', proposal_of({{'rounds': 3, 'epsilon': 1.0, 'accountant': 'rdp'}}), 'grad', np.zeros({DIM}))
print(message.shape, np.isfinite(message).all())
"""
        out = subprocess.run([sys.executable, "-c", probe], user=USER, capture_output=True, text=True, env=env,
                             timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split("\n")[:3] == ["denied", "denied", f"({DIM},) True"]
    assert SiloLedgerDB(private / "ledger.sqlite").summary()["runs"][0]["releases"] == 1


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
    plan = silo_plan(Settings(algorithm=UPDATE, rounds=4, epsilon=1.0, clip=2.0, accountant="rdp"), 0, 1e-4)
    (declared,) = plan.releases
    mod = IsrlDpMod(clipping_norm=2.0, epsilon=1.0, delta=1e-4, rounds=4, accountant="rdp")
    assert declared.count == 4 and declared.noise_multiplier >= mod.noise_multiplier
    assert declared.noise_multiplier == pytest.approx(mod.noise_multiplier, rel=1e-12)
    assert plan.sigmas["sigma"] / 2.0 == declared.noise_multiplier
    assert certify_releases(plan.releases, 1e-4) <= 1.0
