"""The example Flower apps (examples/flower) end to end on Flower's simulation engine (Ray), from
Python and through ``flwr run`` and a SuperLink: the run completes its rounds, the worst-silo
epsilon equals silodp's certificate of the same configuration, and no Ray or Flower process the
test started outlives it. The ``flwr run`` on a simulation SuperLink runs with ``--full`` only."""

import contextlib
import dataclasses
import os
import re
import sys
import tempfile
from pathlib import Path

import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")  # before flwr reads it at import
pytest.importorskip("flwr")
pytest.importorskip("ray", reason="the simulation engine needs silodp[simulation] (flwr[simulation], Ray)")

import ray  # noqa: E402

from silodp.algorithms.privacy import certify  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flower_processes import Descendants, free_port, run_in_own_group, started, wait_healthy  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "flower"
sys.path.insert(0, str(EXAMPLE))

from silodp_flower.simulation import simulate  # noqa: E402
from silodp_flower.task import Settings, setup  # noqa: E402

#: 2 supernodes (WBCD's 2 silos), 2 rounds; "rdp" calibrates fast (the ledgers certify tightest)
CONFIG = {"algorithm": "isrl-mb-sgd", "rounds": 2, "epsilon": 3.0, "delta": 1e-4, "accountant": "rdp"}
BIN = Path(sys.executable).parent  # flwr, flower-superlink (which starts flower-superexec from PATH)


def expected_epsilons(settings: Settings) -> tuple[float, float]:
    """silodp's certificate of ``settings`` (the tightest, as every silo's ledger certifies), and of
    the same noise with one round fewer."""
    prepared = setup(settings)
    cfg = prepared.algorithm.plan.transcript_config(prepared.problem, prepared.data.train)
    return tuple(certify(prepared.algorithm, dataclasses.replace(cfg, rounds=rounds), prepared.sigmas,
                         settings.delta)[0] for rounds in (settings.rounds, settings.rounds - 1))


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


@contextlib.contextmanager
def superlink(env: dict, log: Path, timeout: float = 60.0):
    """A SuperLink in simulation mode on a free port, in its own process group; yields its
    address, then stops that group (its SuperExec and simulation processes follow their parent).
    Runtime dependency installation is off: the app runs in this environment, silodp included."""
    port = free_port()
    with started([str(BIN / "flower-superlink"), "--insecure", "--simulation", "--disable-runtime-dependency-installation",
                  "--host", "127.0.0.1", "--port", str(port)], env, log) as proc:
        wait_healthy(port, proc, log, timeout)
        yield f"127.0.0.1:{port}"


@pytest.mark.full
def test_flwr_run_on_a_superlink_certifies_what_silodp_certifies(engine_env, ray_tmp, tmp_path, request):
    # --full only: the default run has `flwr run` on a SuperLink in
    # test_flower_deployment.py, the engine above, and the environment's budgets in test_flower_silo.py
    if not request.config.getoption("--full"):
        pytest.skip("larger check: run with --full")
    settings = Settings.from_run_config(CONFIG)
    certified, _ = expected_epsilons(settings)
    home = tmp_path / "flwr-home"
    home.mkdir()
    # the simulation's silos have no node config: the host's environment declares their budgets
    env = {**os.environ, "FLWR_HOME": str(home), "RAY_TMPDIR": ray_tmp, "FLWR_DISABLE_UPDATE_CHECK": "1",
           "SILODP_LEDGER_DIR": str(tmp_path / "ledgers"), "SILODP_BUDGET_EPSILON": str(CONFIG["epsilon"]),
           "SILODP_BUDGET_DELTA": str(CONFIG["delta"]),
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
