"""The silo's own ledger (silodp.integrations.flower_silo): budgets from the node config only,
admission of a whole plan before the first message, refusal before a release that would exceed,
one row per release that survives a killed writer, two runs at once, and ``silodp ledger``.

Releases here are un-subsampled Gaussians: silodp certifies them exactly (GDP, Dong-Roth-Su 2022
Cor 3.3), and the reference is the analytic Gaussian of the composed multiplier z / (2 sqrt T)
(replace-one: the shift is 2C)."""

import json
import math
import os
import signal
import subprocess
import sys
import threading

import pytest

from silodp.accounting.gaussian import epsilon_for_delta
from silodp.accounting.releases import BatchSampling, GaussianRelease
from silodp.cli import main
from silodp.integrations.flower_silo import (
    MODE_IN_PROCESS,
    MODE_SERVICE,
    SiloLedgerDB,
    SiloPolicy,
    SiloRefusal,
    as_declared,
)

DELTA = 1e-5
Z = 4.0


def step(count=1, z=Z):
    return GaussianRelease("update", count, z, BatchSampling.FULL, 1, 1)


def exact(rounds, z=Z):
    return epsilon_for_delta(z / (2 * math.sqrt(rounds)), DELTA)


@pytest.fixture
def budget():
    return exact(10) * 1.0001  # room for exactly 10 releases


def test_certificate_is_the_exact_composition_across_runs(tmp_path, budget):
    db = SiloLedgerDB(tmp_path / "l.sqlite", budget, DELTA)
    assert db.admit("a", [step(6)]) == pytest.approx(exact(6), rel=1e-6)
    for _ in range(6):
        db.release("a", step(), "train")
    db.admit("b", [step(4)])
    for _ in range(4):
        db.release("b", step(), "train")
    assert db.spent() == pytest.approx(exact(10), rel=1e-6) and db.spent() <= budget
    assert db.epsilons("b")[0] == pytest.approx(exact(4), rel=1e-6)
    # the whole plan of a third run is refused before its first message, naming the numbers
    with pytest.raises(SiloRefusal, match=r"budget epsilon .* spent .* requested") as info:
        db.admit("c", [step(1)])
    assert f"{budget:g}" in str(info.value)
    with pytest.raises(SiloRefusal, match="declared no plan"):
        db.release("c", step(), "train")
    out = SiloLedgerDB(tmp_path / "l.sqlite").summary()  # the budget read back from the file
    assert list(out) == ["mode", "budget_epsilon", "budget_delta", "epsilon_spent", "runs", "refused"]
    assert out["mode"] == MODE_IN_PROCESS  # the default: who computes the releases is labelled
    assert [(r["run_id"], r["releases"]) for r in out["runs"]] == [("a", 6), ("b", 4)]
    assert out["refused"] == 2 and out["budget_epsilon"] == budget


def test_a_release_past_the_plan_is_refused_before_it_is_recorded(tmp_path, budget):
    db = SiloLedgerDB(tmp_path / "l.sqlite", budget, DELTA)
    db.admit("a", [step(8)])
    for _ in range(8):
        db.release("a", step(), "train")
    db.release("a", step(2), "train")  # off plan: composed with everything, still fits (10)
    with pytest.raises(SiloRefusal, match="a train message of run a"):
        db.release("a", step(), "train")  # the 11th would exceed
    assert db.summary()["runs"][0]["releases"] == 10 and db.spent() <= budget


def test_two_runs_at_once_cannot_overspend(tmp_path, budget):
    path = tmp_path / "l.sqlite"
    SiloLedgerDB(path, budget, DELTA)
    for run in "ab":  # both plans fit on their own, not together
        SiloLedgerDB(path, budget, DELTA).admit(run, [step(7)])
    refused = []

    def serve(run):
        db = SiloLedgerDB(path, budget, DELTA)
        for _ in range(7):
            try:
                db.release(run, step(), "train")
            except SiloRefusal:
                refused.append(run)

    threads = [threading.Thread(target=serve, args=(r,)) for r in "ab"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = SiloLedgerDB(path).summary()
    assert sum(r["releases"] for r in out["runs"]) == 10 and len(refused) == 4
    assert out["epsilon_spent"] <= budget


def test_a_writer_killed_mid_transaction_leaves_the_ledger_as_it_was(tmp_path, budget):
    path = tmp_path / "l.sqlite"
    db = SiloLedgerDB(path, budget, DELTA)
    db.admit("a", [step(3)])
    db.release("a", step(), "train")
    code = ("import os, signal, sys\nfrom silodp.integrations.flower_silo import SiloLedgerDB\n"
            "db = SiloLedgerDB(sys.argv[1], %r, %r)\n"
            "with db._write() as c:\n"
            "    c.execute(\"INSERT INTO releases (run_id, message, grp, count, noise_multiplier, sampling, \"\n"
            "              \"batch_size, dataset_size, at) VALUES ('a', 'train', 'update', 1, 4.0, 'full', 1, 1, 0)\")\n"
            "    os.kill(os.getpid(), signal.SIGKILL)\n") % (budget, DELTA)
    proc = subprocess.run([sys.executable, "-c", code, str(path)], env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert proc.returncode == -signal.SIGKILL
    assert db.summary()["runs"][0]["releases"] == 1  # the killed row never committed
    db.release("a", step(), "train")  # and the ledger still takes writes
    assert db.summary()["runs"][0]["releases"] == 2


def test_policy_comes_from_the_node_config_and_caps_the_server():
    with pytest.raises(SiloRefusal, match="declares no silodp budget"):
        SiloPolicy.from_node_config({"partition-id": 0})
    node = {"silodp-ledger": "x.sqlite", "silodp-budget-epsilon": 3.0, "silodp-budget-delta": 1e-5,
            "silodp-max-clip": 10.0}
    policy = SiloPolicy.from_node_config(node)
    assert (policy.budget_epsilon, policy.max_clip, policy.run_epsilon) == (3.0, 10.0, None)
    ok = {"rounds": 5, "batch_size": 32, "clip": 1.0, "step_size": 0.5}
    policy.check_proposal(**ok)
    for name, bad in [("clip", math.nan), ("clip", math.inf), ("clip", 1e6), ("clip", 0.0), ("rounds", 2.5),
                      ("step_size", -1.0), ("batch_size", 10**9)]:
        with pytest.raises(SiloRefusal, match=name.replace("_", "-")):
            policy.check_proposal(**{**ok, name: bad})
    with pytest.raises(SiloRefusal, match="silodp-budget-epsilon"):
        SiloPolicy.from_node_config({**node, "silodp-budget-epsilon": math.nan})
    # the simulation engine's nodes: the host's environment, a ledger per partition; never the run
    env = {"SILODP_LEDGER_DIR": "/ledgers", "SILODP_BUDGET_EPSILON": "2", "SILODP_BUDGET_DELTA": "1e-6"}
    sim = SiloPolicy.for_node({"partition-id": 1, "num-partitions": 2}, env)
    assert (sim.ledger, sim.budget_epsilon, sim.budget_delta) == ("/ledgers/silo-1.sqlite", 2.0, 1e-6)
    assert SiloPolicy.for_node(node, env).ledger == "x.sqlite"  # a node config's own budget first
    with pytest.raises(SiloRefusal, match="declares no silodp budget"):
        SiloPolicy.for_node({"partition-id": 1}, {})


def test_run_cap_and_declared_domination(tmp_path, budget):
    db = SiloLedgerDB(tmp_path / "l.sqlite", budget, DELTA)
    with pytest.raises(SiloRefusal, match="allows one run"):
        db.admit("a", [step(4)], run_cap=exact(3))
    plan = [step(3, z=5.0), step(3, z=4.0)]
    assert as_declared(step(z=4.5), plan) == step(z=4.0)  # more noise: charged as declared
    assert as_declared(step(z=3.0), plan) == step(z=3.0)  # less noise: charged as it is


def test_cli_prints_the_ledger(tmp_path, budget, capsys):
    path = tmp_path / "l.sqlite"
    db = SiloLedgerDB(path, budget, DELTA)
    db.admit("7", [step(2)])
    db.release("7", step(2), "train")
    assert main(["ledger", str(path), "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["runs"] == [{"run_id": "7", "releases": 2, "epsilon": pytest.approx(exact(2), rel=1e-6)}]
    assert out["mode"] == MODE_IN_PROCESS
    assert main(["ledger", str(path)]) == 0
    assert "mode:   in-process (the app bundle is trusted)" in capsys.readouterr().out
    SiloLedgerDB(path, budget, DELTA, mode=MODE_SERVICE)  # the silo service took the ledger over
    assert main(["ledger", str(path)]) == 0
    assert "mode:   service" in capsys.readouterr().out
    assert main(["ledger", str(tmp_path / "missing.sqlite")]) == 2
    assert "no silodp ledger" in capsys.readouterr().err
