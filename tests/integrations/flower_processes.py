"""Processes of the Flower tests: every descendant a test starts is watched, and stopped by PID
if it outlives the test; a free localhost port; a command run in its own process group; a
localhost deployment (a SuperLink and SuperNodes) for the deployment test and benchmark."""

import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import psutil
import pytest

from silodp.service.federation import healthy

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent  # this venv's flwr, flower-superlink, flower-supernode


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


def free_ports(count: int) -> list[int]:
    """``count`` distinct free 127.0.0.1 ports, bound all at once before any is released: ports
    asked for one at a time may repeat (the kernel can hand a just-released port out again, about
    1 in 14,000 per pair, which would crash the second process to bind it)."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def free_port() -> int:
    return free_ports(1)[0]


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


def run_all_in_own_groups(cmds: list[list[str]], env: dict, timeout: float) -> list[subprocess.CompletedProcess]:
    """Each of ``cmds`` at once (concurrently), each in its own process group; on timeout every
    group (and only those) is killed."""
    procs = [subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              start_new_session=True) for cmd in cmds]
    deadline = time.monotonic() + timeout
    outs = []
    try:
        for proc in procs:
            outs.append(proc.communicate(timeout=max(1.0, deadline - time.monotonic()))[0])
    except subprocess.TimeoutExpired:
        for proc in procs:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        tails = [proc.communicate()[0][-2000:] for proc in procs]
        pytest.fail(f"{cmds[0][:2]} ran past {timeout} s:\n" + "\n---\n".join(tails))
    return [subprocess.CompletedProcess(cmd, proc.returncode, out) for cmd, proc, out in zip(cmds, procs, outs)]


@contextlib.contextmanager
def started(cmd: list[str], env: dict, log: Path):
    """``cmd`` in its own process group (its children with it); stopped by its PID on exit."""
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        stop(proc)


def stop(*procs: subprocess.Popen, timeout: float = 20.0) -> None:
    """Stop each of ``procs`` (its process group) by its PID, all at once (SIGTERM, then SIGKILL
    after ``timeout`` seconds): their graceful shutdowns overlap. One already stopped is left."""
    running = [proc for proc in procs if proc.poll() is None]
    for proc in running:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    for proc in running:
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


@contextlib.contextmanager
def silo_service(config: Path, env: dict, log: Path, sock: Path, timeout: float = 120.0):
    """``silodp silo serve config`` (listening on the Unix socket ``sock``) in its own process
    group, yielded once the socket exists; stopped by its PID on exit."""
    with started([sys.executable, "-m", "silodp", "silo", "serve", str(config)], env, log) as proc:
        deadline = time.monotonic() + timeout
        while not sock.exists():
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-3000:]
            time.sleep(0.2)
        yield proc


def wait_healthy(port: int, proc: subprocess.Popen, log: Path, timeout: float = 60.0) -> None:
    """Wait until ``proc`` answers on ``port``'s /health (it must not exit meanwhile)."""
    deadline = time.monotonic() + timeout
    while not healthy(port):
        assert proc.poll() is None and time.monotonic() < deadline, f"{proc.args[0]} did not start:\n{log.read_text()[-3000:]}"
        time.sleep(0.2)


def deployment_env(home: Path) -> dict:
    """The environment of a deployment's processes: Flower's home at ``home`` (created; its
    config.toml names the SuperLink), no telemetry or update check, this checkout importable,
    this venv's Flower commands first on PATH."""
    home.mkdir(exist_ok=True)
    return {**os.environ, "FLWR_HOME": str(home), "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
            "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def start_deployment(stack: contextlib.ExitStack, node_configs: list[str], env: dict,
                     logs: Path) -> list[subprocess.Popen]:
    """A SuperLink on a free 127.0.0.1 port and one SuperNode per ``--node-config`` string, each on
    its own port (both would take 9094 and the second would crash), entered in ``stack`` (each
    stopped by its PID when the stack closes); ``env``'s config.toml names the SuperLink "local".
    Returns the SuperNodes."""
    link, *ports = free_ports(1 + len(node_configs))
    superlink = stack.enter_context(started(
        [str(BIN / "flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
         "--host", "127.0.0.1", "--port", str(link)], env, logs / "superlink.log"))
    wait_healthy(link, superlink, logs / "superlink.log")
    nodes = [stack.enter_context(started(
        [str(BIN / "flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
         "--host", "127.0.0.1", "--port", str(port), "--node-config", config], env, logs / f"supernode-{i}.log"))
        for i, (config, port) in enumerate(zip(node_configs, ports))]
    (Path(env["FLWR_HOME"]) / "config.toml").write_text(f'[superlink]\ndefault = "local"\n\n[superlink.local]\n'
                                                        f'address = "127.0.0.1:{link}"\ninsecure = true\n')
    return nodes



@contextlib.contextmanager
def _flwr_home(home: str):
    """``FLWR_HOME`` set to ``home`` in this process (where Flower's configuration is read and written)."""
    saved = os.environ.get("FLWR_HOME")
    os.environ["FLWR_HOME"] = home
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("FLWR_HOME", None)
        else:
            os.environ["FLWR_HOME"] = saved


@contextlib.contextmanager
def federation(directory: Path, silos: int = 2, budget_epsilon: float = 3.0, budget_delta: float = 1e-4,
               dataset: str = "wbcd"):
    """A local federation with silo privacy services (``silodp federation up``'s library call,
    :func:`silodp.service.federation.up`) in ``directory``, stopped by PID on exit (``down``),
    and asserted gone. Yields ``(info, env)``: ``info`` is ``up``'s JSON (``superlink``,
    ``silos``: each ``pid``, ``service_pid``, ``ledger``, ``port``; ``connection``), ``env`` the
    environment in which ``flwr run APP info["connection"]`` finds the connection (its own
    ``FLWR_HOME``, ``directory / "client-home"``). For the malicious-server battery: parametrize
    over it like any fixture; every process it starts is stopped even when the test fails."""
    from silodp.service.federation import down, up

    directory.mkdir(parents=True, exist_ok=True)
    env = deployment_env(directory / "client-home")
    with _flwr_home(env["FLWR_HOME"]):
        info = up(directory, silos, budget_epsilon, budget_delta, dataset)
    pids = [info["superlink"]["pid"]] + [p for s in info["silos"] for p in (s["pid"], s["service_pid"])]
    try:
        yield info, env
    finally:
        with _flwr_home(env["FLWR_HOME"]):
            down(directory)
        left = [pid for pid in pids if psutil.pid_exists(pid) and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        assert not left, f"federation processes left running: {left}"
