"""The example Flower apps (examples/flower) end to end on Flower's simulation engine (Ray), from
Python and through ``flwr run`` and a SuperLink: the run completes its rounds, the worst-silo
epsilon equals silodp's certificate of the same configuration, and no Ray or Flower process the
test started outlives it."""

import contextlib
import dataclasses
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # before flwr reads it at import
pytest.importorskip("flwr")
pytest.importorskip("ray", reason="the simulation engine needs silodp[simulation] (flwr[simulation], Ray)")

import psutil  # noqa: E402
import ray  # noqa: E402

from silodp.algorithms.privacy import certify  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flower"
sys.path.insert(0, str(EXAMPLE))

from silodp_flower.simulation import simulate  # noqa: E402
from silodp_flower.task import Settings, setup  # noqa: E402

#: 2 supernodes (WBCD's 2 silos), 2 rounds; "rdp": each silo evaluates its ledger every round
CONFIG = {"algorithm": "isrl-mb-sgd", "rounds": 2, "epsilon": 3.0, "delta": 1e-4, "accountant": "rdp"}
BIN = Path(sys.executable).parent  # flwr, flower-superlink (which starts flower-superexec from PATH)


class Descendants:
    """Every process that descends from this one while it watches (polled every 0.1 s), with its
    latest command line (a child seen between fork and exec still shows its parent's)."""

    #: Python's own helper of this process (multiprocessing's semaphore tracker, started by any
    #: earlier use of multiprocessing in the worker): it lives as long as the test process.
    OWN_HELPERS = ("multiprocessing.resource_tracker",)

    def __init__(self) -> None:
        self.seen: dict[psutil.Process, str] = {}  # a Process is its (pid, creation time)
        self._before = set(psutil.Process().children(recursive=True))  # not the test's to stop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _poll(self) -> None:
        for proc in psutil.Process().children(recursive=True):
            if proc in self._before:
                continue
            with contextlib.suppress(psutil.Error):
                if any(helper in " ".join(proc.cmdline()) for helper in self.OWN_HELPERS):
                    continue
                if cmd := " ".join(proc.cmdline()):  # a zombie's is empty: keep the last one
                    self.seen[proc] = cmd
                else:
                    self.seen.setdefault(proc, proc.name())

    def _watch(self) -> None:
        while not self._stop.wait(0.1):
            self._poll()

    def __enter__(self) -> "Descendants":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._poll()

    def started(self, *programs: str) -> bool:
        """Whether each of ``programs`` appeared in the command line of a process seen."""
        return all(any(program in cmd for cmd in list(self.seen.values())) for program in programs)

    def running(self, program: str = "") -> list[psutil.Process]:
        """The processes seen (whose command line contains ``program``) still running, zombies aside."""
        alive = []
        for proc, cmd in list(self.seen.items()):  # the watch may be adding to it
            with contextlib.suppress(psutil.NoSuchProcess):
                if program in cmd and proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                    alive.append(proc)
        return alive

    def wait(self, program: str = "", timeout: float = 30.0) -> list[psutil.Process]:
        """Wait up to ``timeout`` seconds for the processes seen (``program``'s) to end; those left."""
        deadline = time.monotonic() + timeout
        while (alive := self.running(program)) and time.monotonic() < deadline:
            time.sleep(0.2)
        return alive

    def assert_none_left(self, timeout: float = 30.0) -> None:
        """Every process seen has ended within ``timeout`` seconds; kills (by PID) any that has not."""
        alive = self.wait(timeout=timeout)
        for proc in alive:
            with contextlib.suppress(psutil.NoSuchProcess):
                proc.kill()
        assert not alive, f"left running: {[(p.pid, self.seen[p][:100]) for p in alive]}"


def expected_epsilons(settings: Settings) -> tuple[float, float]:
    """silodp's certificate of ``settings`` (RDP), and of the same noise with one round fewer."""
    prepared = setup(settings)
    cfg = prepared.algorithm.transcript_config(prepared.problem, prepared.data.train)
    return tuple(certify(prepared.algorithm, dataclasses.replace(cfg, rounds=rounds), prepared.sigmas,
                         settings.delta, accountant="rdp")[0] for rounds in (settings.rounds, settings.rounds - 1))


@pytest.fixture
def engine_env(monkeypatch):
    """No telemetry, no Ray cluster to join, and after the test this process' PYTHONPATH and
    Flower's process-wide TaskIdentity back as they were (RayBackend and run_simulation set them)."""
    from flwr.supercore import telemetry
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, getattr(TaskIdentity, attr))
    monkeypatch.setattr(telemetry, "FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.setenv("FLWR_TELEMETRY_ENABLED", "0")
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.environ.get("PYTHONPATH", ""))


@pytest.fixture
def ray_tmp():
    """A short temporary directory for Ray (its unix sockets live there: paths <= 107 bytes)."""
    with tempfile.TemporaryDirectory(prefix="silodp-ray-", ignore_cleanup_errors=True) as path:
        yield path


@pytest.mark.slow
def test_simulation_engine_run_certifies_what_silodp_certifies(engine_env, ray_tmp):
    settings = Settings.from_run_config(CONFIG)
    certified, one_fewer = expected_epsilons(settings)
    # one actor serves both supernodes (one CPU): a single torch import in a Ray worker
    backend = {"client_resources": {"num_cpus": 1},
               "init_args": {"address": "local", "num_cpus": 1, "include_dashboard": False,
                             "object_store_memory": 100 * 2**20, "_temp_dir": ray_tmp}}
    procs = Descendants()
    try:
        with procs:
            try:
                out = simulate(settings, backend)
            finally:
                ray.shutdown()
        assert out["rounds"] == settings.rounds
        # every silo's ledger is the simulator's declaration, release for release: equal, and the
        # epsilon of all its rounds (one round fewer certifies less)
        assert out["worst_silo_epsilon"] == certified
        assert one_fewer < certified <= settings.epsilon
        # the run was on Ray: its head processes were this test's descendants
        assert procs.started("raylet", "gcs_server")
    finally:
        procs.assert_none_left()


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_in_own_group(cmd: list[str], env: dict, timeout: float) -> subprocess.CompletedProcess:
    """``cmd`` in its own process group; on timeout that group (and only it) is killed."""
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        stdout, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        stdout, _ = proc.communicate()
        pytest.fail(f"{cmd[:2]} ran past {timeout} s:\n{stdout[-3000:]}")
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout)


@contextlib.contextmanager
def superlink(env: dict, log: Path, timeout: float = 60.0):
    """A SuperLink in simulation mode on a free port, in its own process group; yields its
    address, then stops that group (its SuperExec and simulation processes follow their parent).
    Runtime dependency installation is off: the app runs in this environment, silodp included."""
    port = free_port()
    with log.open("w") as out:
        proc = subprocess.Popen([str(BIN / "flower-superlink"), "--insecure", "--simulation",
                                 "--disable-runtime-dependency-installation", "--host", "127.0.0.1",
                                 "--port", str(port)], env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)
    try:
        deadline = time.monotonic() + timeout
        while not _healthy(port):
            assert proc.poll() is None and time.monotonic() < deadline, \
                f"flower-superlink did not start:\n{log.read_text()[-3000:]}"
            time.sleep(0.2)
        yield f"127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


@pytest.mark.slow
def test_flwr_run_on_a_superlink_certifies_what_silodp_certifies(engine_env, ray_tmp, tmp_path):
    settings = Settings.from_run_config(CONFIG)
    certified, _ = expected_epsilons(settings)
    home = tmp_path / "flwr-home"
    home.mkdir()
    env = {**os.environ, "FLWR_HOME": str(home), "RAY_TMPDIR": ray_tmp, "FLWR_DISABLE_UPDATE_CHECK": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    run_config = " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}" for k, v in CONFIG.items())
    procs = Descendants()
    try:
        with procs, superlink(env, tmp_path / "superlink.log") as address:
            (home / "config.toml").write_text(f'[superlink]\ndefault = "test"\n\n[superlink.test]\n'
                                              f'address = "{address}"\ninsecure = true\n')
            result = run_in_own_group(
                [str(BIN / "flwr"), "run", str(EXAMPLE), "test", "--stream", "--run-config", run_config,
                 "--federation-config", "num-supernodes=2 client-resources-num-cpus=1 init-args-num-cpus=1"],
                env, timeout=300)
            procs.wait("flwr-simulation", timeout=60)  # the run's own shutdown (Ray's) first
        assert result.returncode == 0, result.stdout[-3000:]
        # the ServerApp's summary, streamed from the SuperLink
        found = re.search(r"(\d+) rounds; test error \S+; worst-silo epsilon (\S+) \(silodp run certifies",
                          result.stdout)
        assert found, result.stdout[-3000:]
        assert int(found[1]) == settings.rounds
        assert float(found[2]) == certified
        assert procs.started("flower-superexec", "flwr-simulation", "raylet", "gcs_server")
    finally:
        procs.assert_none_left()
