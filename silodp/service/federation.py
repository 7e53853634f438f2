"""A local federation in one call (``silodp federation up`` / ``down``): a SuperLink, N SuperNodes
and N silo privacy services on 127.0.0.1, each a separate process started in its own process
group and stopped by its PID.

Silo ``i`` is a service (``silodp silo serve DIR/silo-i/service.toml``: its records, partition
``i`` of ``dataset`` with ``seed``; its ledger ``DIR/silo-i/ledger.sqlite``; the budget; listening
on 127.0.0.1 with a token kept in ``DIR/silo-i/token``, mode 0600) and a SuperNode whose node
config names only its partition and the service (``silodp-service``, ``silodp-service-token``):
the ClientApp that ``flwr run`` ships reaches the records only through the service. The state
(each process's PID and start time, so that ``down`` never signals a recycled PID) is
``DIR/federation.json``; the ``flwr run`` connection (``silodp-<hash of DIR>``) is added to the
Flower configuration of the caller (``$FLWR_HOME/config.toml``) and removed by ``down``.

Processes that the caller's operating system user runs all of: a local federation is for trying
the deployment and for tests; docs/integrations.md shows the OS boundary of a real silo.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from typing import Any

STATE = "federation.json"
#: the processes this interpreter started (kept: a Popen collected while its process runs warns)
_STARTED: list[subprocess.Popen] = []


def _free_ports(count: int) -> list[int]:
    """``count`` distinct free 127.0.0.1 ports, bound all at once before any is released."""
    with contextlib.ExitStack() as stack:
        socks = [stack.enter_context(socket.socket()) for _ in range(count)]
        for sock in socks:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in socks]


def _program(name: str) -> str:
    beside = Path(sys.executable).parent / name  # this environment's Flower commands
    return str(beside) if beside.exists() else name


def healthy(port: int) -> bool:
    """Whether a Flower process or silo service answers on 127.0.0.1:``port``/health."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
            return response.status == 200
    except OSError:
        return False


def _start(cmd: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
    _STARTED.append(proc)
    return proc


def _started_at(pid: int) -> float | None:
    import psutil

    with contextlib.suppress(psutil.Error):
        return psutil.Process(pid).create_time()
    return None


def connection_name(directory: str | Path) -> str:
    """The ``flwr run`` connection of the federation in ``directory``."""
    return "silodp-" + hashlib.sha256(str(Path(directory).resolve()).encode()).hexdigest()[:10]


def _service_config(silo: Path, dataset: str, partition: int, seed: int, budget_epsilon: float, budget_delta: float,
                    port: int) -> Path:
    token = silo / "token"
    fd = os.open(token, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(secrets.token_urlsafe(32))
    config = silo / "service.toml"
    config.write_text(f'[records]\ndataset = {json.dumps(dataset)}\npartition = {partition}\nseed = {seed}\n\n'
                      f'[ledger]\npath = "ledger.sqlite"\nbudget_epsilon = {budget_epsilon!r}\n'
                      f'budget_delta = {budget_delta!r}\n\n'
                      f'[listen]\nhost = "127.0.0.1"\nport = {port}\ntoken_file = "token"\n')
    return config


def up(directory: str | Path, silos: int, budget_epsilon: float, budget_delta: float, dataset: str = "wbcd",
       seed: int = 0, timeout: float = 180.0) -> dict:
    """Start a local federation in ``directory`` (created; it must hold no running federation)
    and return ``{"superlink": {"pid", "address"}, "silos": [{"pid", "service_pid", "ledger",
    "port"}], "connection"}`` (``pid``: the SuperNode's, ``port``: its service's). On any failure
    every process started is stopped again and the error raised."""
    from silodp._validation import check_count, check_delta, check_positive

    check_count("silos", silos)
    check_positive("budget_epsilon", budget_epsilon)
    check_delta("budget_delta", budget_delta)
    directory = Path(directory).resolve()
    directory.mkdir(parents=True, exist_ok=True)
    if (directory / STATE).exists():
        raise ValueError(f"dir: {str(directory)!r} holds a federation already (silodp federation down it first)")
    env = {**os.environ, "FLWR_TELEMETRY_ENABLED": "0", "FLWR_DISABLE_UPDATE_CHECK": "1",
           "FLWR_HOME": str(directory / "flwr-home")}
    (directory / "flwr-home").mkdir(exist_ok=True)
    link, *ports = _free_ports(1 + 2 * silos)
    procs: list[subprocess.Popen] = []
    state: dict[str, Any] = {"directory": str(directory), "connection": connection_name(directory), "processes": []}
    try:
        services = []
        for i in range(silos):
            silo = directory / f"silo-{i}"
            silo.mkdir(exist_ok=True)
            config = _service_config(silo, dataset, i, seed, budget_epsilon, budget_delta, ports[i])
            services.append(_start([sys.executable, "-m", "silodp", "silo", "serve", str(config)], env,
                                   silo / "service.log"))
        procs += services
        superlink = _start([_program("flower-superlink"), "--insecure", "--disable-runtime-dependency-installation",
                            "--host", "127.0.0.1", "--port", str(link)], env, directory / "superlink.log")
        procs.append(superlink)
        _wait(link, superlink, directory / "superlink.log", timeout)
        for i, service in enumerate(services):
            _wait(ports[i], service, directory / f"silo-{i}" / "service.log", timeout)
        nodes = []
        for i in range(silos):
            token = (directory / f"silo-{i}" / "token").read_text()
            node_config = (f'partition-id={i} silodp-service="http://127.0.0.1:{ports[i]}" '
                           f'silodp-service-token="{token}"')
            nodes.append(_start([_program("flower-supernode"), "--insecure", "--superlink", f"127.0.0.1:{link}",
                                 "--host", "127.0.0.1", "--port", str(ports[silos + i]), "--node-config", node_config],
                                env, directory / f"silo-{i}" / "supernode.log"))
        procs += nodes
        out = {"superlink": {"pid": superlink.pid, "address": f"127.0.0.1:{link}"},
               "silos": [{"pid": node.pid, "service_pid": service.pid,
                          "ledger": str(directory / f"silo-{i}" / "ledger.sqlite"), "port": ports[i]}
                         for i, (node, service) in enumerate(zip(nodes, services))],
               "connection": state["connection"]}
        state["processes"] = [[p.pid, _started_at(p.pid)] for p in procs]
        state["up"] = out
        (directory / STATE).write_text(json.dumps(state, indent=1))
        _add_connection(state["connection"], out["superlink"]["address"])
    except BaseException:
        _stop([[p.pid, _started_at(p.pid)] for p in procs])
        with contextlib.suppress(FileNotFoundError):
            (directory / STATE).unlink()
        raise
    return out


def _wait(port: int, proc: subprocess.Popen, log: Path, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not healthy(port):
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = log.read_text()[-2000:] if log.exists() else ""
            args = [str(a) for a in proc.args] if isinstance(proc.args, (list, tuple)) else [str(proc.args)]
            raise RuntimeError(f"{Path(args[0]).name} {' '.join(args[1:4])} did not start: {tail}")
        time.sleep(0.2)


@contextlib.contextmanager
def _flower_config():
    """Flower's own reader and writer of its configuration, quiet (it prints when it creates the
    file, and its imports warn): this command's output stays its own."""
    import io
    import warnings

    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        from flwr.cli import flower_config

        yield flower_config


def _add_connection(name: str, address: str) -> None:
    with _flower_config() as flower_config:
        from flwr.cli.typing import SuperLinkConnection

        flower_config.write_superlink_connection(SuperLinkConnection(name, address=address, insecure=True))


def _remove_connection(name: str) -> None:
    with contextlib.suppress(Exception), _flower_config() as flower_config:
        read_flower_config, write_flower_config = flower_config.read_flower_config, flower_config.write_flower_config
        config, _ = read_flower_config()
        links = config.get("superlink", {})
        if name in links:
            del links[name]
            if links.get("default") == name:
                del links["default"]
            write_flower_config(config)


def _alive(pid: int, started: float | None) -> bool:
    import psutil

    try:
        proc = psutil.Process(pid)
        return (started is None or abs(proc.create_time() - started) < 1e-3) and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _stop(processes: list, timeout: float = 20.0) -> list[int]:
    """SIGTERM each process group (by its leader's PID, if it is still the process started),
    then SIGKILL what is left after ``timeout`` seconds; the PIDs signalled."""
    live = [(pid, started) for pid, started in processes if _alive(pid, started)]
    for pid, _ in live:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive(pid, s) for pid, s in live) and time.monotonic() < deadline:
        _reap(live)
        time.sleep(0.1)
    for pid, started in live:
        if _alive(pid, started):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
    _reap(live)
    return [pid for pid, _ in live]


def _reap(processes) -> None:
    """Collect the exit status of those of ``processes`` this interpreter started."""
    pids = {pid for pid, _ in processes}
    for proc in list(_STARTED):
        if proc.pid in pids and proc.poll() is not None:
            _STARTED.remove(proc)


def down(directory: str | Path, timeout: float = 20.0) -> dict:
    """Stop the federation started in ``directory`` (by PID, each process group) and remove its
    ``flwr run`` connection; ``{"stopped": [pid, ...]}``."""
    path = Path(directory).resolve() / STATE
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"dir: no federation in {str(Path(directory))!r} (no {STATE})") from None
    except ValueError:
        raise ValueError(f"dir: {str(path)!r} is not a federation state file") from None
    stopped = _stop(state.get("processes", []), timeout)
    _remove_connection(state.get("connection", ""))
    path.unlink()
    return {"stopped": stopped}


__all__ = ["connection_name", "down", "up"]
