"""A real Flower deployment on 127.0.0.1, as docs/integrations.md sets it up: a SuperLink and two
SuperNodes (one per WBCD silo) as separate processes, each SuperNode on its own port with its own
node config (partition, ledger file, budget). Two consecutive ``flwr run`` of the same plan, whose
total exceeds each silo's budget: the first completes, the second is refused by both silos before
they release anything; ``silodp ledger`` then shows each silo within its budget with a refusal,
and the first run's epsilon is silodp's own certificate of the same configuration. Every process
the test starts is stopped by its PID (its process group), and none outlives the test."""

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
pytest.importorskip("flwr")
pytest.importorskip("psutil")

sys.path.insert(0, str(Path(__file__).resolve().parent))
from flower_processes import BIN, ROOT, Descendants, deployment_env, run_in_own_group, start_deployment, stop  # noqa: E402

EXAMPLE = ROOT / "examples" / "flower"
sys.path.insert(0, str(EXAMPLE))

from silodp.integrations.flower_silo import certify_releases  # noqa: E402
from silodp_flower.task import Settings, setup, silo_plan  # noqa: E402

#: 2 rounds; "rdp" calibrates fast, the silos' ledgers certify with the tightest accountant
CONFIG = {"algorithm": "isrl-mb-sgd", "rounds": 2, "epsilon": 3.0, "delta": 1e-4, "accountant": "rdp"}
#: each silo's budget: 1.2 times its certificate of one run (two runs do not fit)
ROOM = 1.2


def ledgers(paths: list[Path], env: dict) -> list[dict]:
    """``silodp ledger PATH --json`` of each of ``paths``, the commands running at once."""
    procs = [subprocess.Popen([sys.executable, "-m", "silodp", "ledger", str(path), "--json"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for path in paths]
    outs = [(proc.communicate(timeout=120), proc.returncode) for proc in procs]
    assert all(code == 0 for _, code in outs), [err for (_, err), _ in outs]
    return [json.loads(out) for (out, _), _ in outs]


@pytest.mark.slow
def test_two_flwr_runs_the_second_refused_by_the_silos(tmp_path):
    settings = Settings.from_run_config(CONFIG)
    certified = setup(settings).certified  # silodp's own certificate of this configuration
    # each silo's certificate of one run: silo 0 (the smallest) declares what the simulator does
    budgets = [ROOM * certified,
               ROOM * certify_releases(silo_plan(settings, 1, settings.delta).releases, settings.delta)]
    env = deployment_env(tmp_path / "flwr-home")
    files = [tmp_path / f"silo-{i}.sqlite" for i in range(2)]  # the silos' ledgers
    model = tmp_path / "model.npy"  # the ServerApp saves the final model there (a run that ran rounds)
    run_config = " ".join(f'{k}="{v}"' if isinstance(v, str) else f"{k}={v}"
                          for k, v in {**CONFIG, "model-path": str(model)}.items())
    node_configs = [f'partition-id={i} dataset="wbcd" seed=0 silodp-ledger="{files[i]}" '
                    f"silodp-budget-epsilon={budgets[i]!r} silodp-budget-delta={settings.delta!r}" for i in range(2)]
    procs = Descendants()
    try:
        with procs, contextlib.ExitStack() as stack:
            nodes = start_deployment(stack, node_configs, env, tmp_path)
            runs = [run_in_own_group([str(BIN / "flwr"), "run", str(EXAMPLE), "local", "--stream",
                                      "--run-config", run_config], env, timeout=240) for _ in range(2)]
            stop(*nodes)  # their shutdowns overlap (the stack then finds them stopped)
        assert all(r.returncode == 0 for r in runs), runs[-1].stdout[-3000:]
        first, second = (r.stdout for r in runs)
        assert "2 rounds; test error" in first and "refused by 0 silos, 0 unavailable" in first, first[-3000:]
        assert first.count("rounds; ") == 1 and first.count("round 2/2: test loss") == 1  # logged once each
        assert np.load(model).shape == (setup(settings).problem.model.dim,)
        assert "0 rounds;" in second and "refused by 2 silos" in second, second[-3000:]
        assert second.count("budget epsilon") >= 2 and "requested" in second
        silos = ledgers(files, env)
        for silo, budget in zip(silos, budgets):
            assert silo["epsilon_spent"] <= silo["budget_epsilon"] == budget and silo["refused"] >= 1
            assert len(silo["runs"]) == 1 and silo["runs"][0]["releases"] == settings.rounds  # run 2: nothing
        # the smallest silo (0) is the simulator's declaration, release for release
        assert silos[0]["runs"][0]["epsilon"] == certified == silos[0]["epsilon_spent"]
        assert f"worst-silo epsilon {certified!r}" in first
    finally:
        procs.assert_none_left()
