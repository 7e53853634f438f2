"""silodp.experiments.runner: resumable sweeps (stopped, killed, re-run), failures recorded, the
local process pool and the Dask path giving the same results as the in-process runner."""

import io
import json
import os
import signal
import sqlite3
import subprocess
import sys
import time

import pytest

from silodp.algorithms import registry
from silodp.algorithms.baselines import IsrlMBSGD
from silodp.experiments import runner
from silodp.experiments.grid import AlgorithmGrid, GridSpec
from silodp.experiments.store import Store


def _spec(rounds=5, trials=2, extra=()):
    algs = (AlgorithmGrid("mb-sgd", (0.5,)), AlgorithmGrid("isrl-mb-sgd", (0.2, 0.5)), *extra)
    return GridSpec("tiny", "wbcd", algs, (2.0,), ((2, rounds),), trials=trials)


def _results(store) -> dict:
    return {r.config_hash: (r.status, r.test_error, r.val_error, r.certified_epsilon) for r in store.records(None)}


def _finished_at(path) -> dict:
    return dict(sqlite3.connect(path).execute("SELECT config_hash, finished_at FROM runs"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The tiny grid run once, uninterrupted, in-process."""
    path = tmp_path_factory.mktemp("ref") / "ref.db"
    with Store(path) as st:
        report = runner.run_grid(_spec().expand(), st, workers=1)
        return report, _results(st)


def test_a_grid_runs_and_rerunning_it_does_no_work(reference, tmp_path):
    report, results = reference
    assert (report.total, report.ran, report.ok, report.failed) == (6, 6, 6, 0)
    assert report.calibrations == 1  # one transcript: the two step sizes and trials share it
    with Store(tmp_path / "r.db") as st:
        runner.run_grid(_spec().expand(), st, workers=1)
        before = _finished_at(tmp_path / "r.db")
        again = runner.run_grid(_spec().expand(), st, workers=1)
        assert (again.already_done, again.ran, again.calibrations) == (6, 0, 0)
        assert _finished_at(tmp_path / "r.db") == before and _results(st) == results


def test_stopped_sweep_resumes_without_loss_or_duplicates(reference, tmp_path):
    _, results = reference
    with Store(tmp_path / "r.db") as st:
        first = runner.run_grid(_spec().expand(), st, workers=1, max_runs=2)
        assert first.ran == 2 and first.stopped and st.counts()["ok"] == 2
        kept = {h: v for h, v in _results(st).items()}
        second = runner.run_grid(_spec().expand(), st, workers=1)
        assert (second.already_done, second.ran, second.calibrations) == (2, 4, 0)
        assert _results(st) == results and all(results[h] == v for h, v in kept.items())
    n, distinct = sqlite3.connect(tmp_path / "r.db").execute(
        "SELECT COUNT(*), COUNT(DISTINCT config_hash) FROM runs").fetchone()
    assert n == distinct == 6


def test_a_failing_run_is_recorded_and_the_grid_goes_on(tmp_path):
    """A run config made by hand (a grid refuses it: its AlgorithmGrid validates the parameters)."""
    import dataclasses

    with pytest.raises(ValueError, match="^no_such_option: not a parameter of isrl-mb-sgd"):
        _spec(extra=(AlgorithmGrid("isrl-mb-sgd", (0.3,), params={"no_such_option": 1}),)).expand()
    good = AlgorithmGrid("isrl-mb-sgd", (0.3,))
    runs = _spec().expand() + tuple(dataclasses.replace(c, params={"no_such_option": 1})
                                    for c in _spec(extra=(good,)).expand() if c.step_size == 0.3)
    with Store(tmp_path / "r.db") as st:
        report = runner.run_grid(runs, st, workers=1)
        assert (report.ok, report.failed) == (6, 2)
        failed = st.records("failed")
        assert len(failed) == 2 and all("no_such_option" in r.error for r in failed)
        assert runner.run_grid(runs, st, workers=1).ran == 0  # failures are final ...
        assert runner.run_grid(runs, st, workers=1, retry_failed=True).failed == 2  # unless retried


def test_unregistered_algorithms_are_skipped_until_registered(tmp_path, monkeypatch):
    new = AlgorithmGrid("later-mb-sgd", (0.5,))
    with Store(tmp_path / "r.db") as st:
        report = runner.run_grid(_spec(extra=(new,)).expand(), st, workers=1)
        assert report.skipped == 2 and "not registered" in st.records("skipped")[0].error

        class Later(IsrlMBSGD):
            name = "isrl-mb-sgd"  # the accounting layer knows this transcript

        monkeypatch.setitem(registry.ALGORITHMS, "later-mb-sgd", Later)
        report = runner.run_grid(_spec(extra=(new,)).expand(), st, workers=1)
        assert (report.ran, report.ok) == (2, 2) and st.counts() == {"ok": 8, "failed": 0, "skipped": 0}


def test_progress_shows_runs_of_the_total_and_failures(tmp_path, monkeypatch):
    import functools

    from silodp import progress

    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)  # not a terminal: plain lines
    monkeypatch.setattr(progress.Progress, "__init__", functools.partialmethod(progress.Progress.__init__, after=0.0))
    with Store(tmp_path / "r.db") as st:
        runner.run_grid(_spec().expand(), st, workers=1, progress=True, desc="tiny")
    last = err.getvalue().splitlines()[-1]
    assert last.startswith("tiny: 6/6 run (100%)") and "ETA" in last and "failed=0" in last


def test_a_broken_pool_is_replaced_and_its_tasks_fail_alone():
    """SIGKILL the only worker: its tasks fail with BrokenProcessPool, later tasks run on a fresh
    pool, and a late failure of the dead pool does not touch the new pool's tasks."""
    from concurrent.futures.process import BrokenProcessPool

    pool = runner.PoolExecutor(1)
    try:
        first, second = pool.submit(time.sleep, 30), pool.submit(time.sleep, 30)
        os.kill(next(iter(pool.pool._processes)), signal.SIGKILL)
        assert isinstance(pool.wait({first})[0][2], BrokenProcessPool)
        fresh = pool.submit(abs, -3)
        outcomes = {}
        while fresh not in outcomes:
            outcomes.update({h: (r, e) for h, r, e in pool.wait({second, fresh} - set(outcomes))})
        assert isinstance(outcomes.get(second, (None, BrokenProcessPool()))[1], BrokenProcessPool)
        assert outcomes[fresh] == (3, None)
    finally:
        pool.close()


def test_a_pool_worker_killed_mid_sweep_loses_only_its_runs_and_resume_retries_them(reference, tmp_path, monkeypatch):
    """A real local-pool sweep; one worker SIGKILLed the moment the last run is handed out. The
    runs in flight are recorded ``failed: worker: BrokenProcessPool``, the sweep ends normally,
    a plain resume (no --retry-failed) runs exactly those again, and every result equals the
    in-process sweep's."""
    _, results = reference
    submit, handed = runner.PoolExecutor.submit, []

    def submit_then_kill(self, fn, arg):
        future = submit(self, fn, arg)
        handed.append(fn)
        if handed.count(runner.ex.run_chunk) == len(results):  # the last run is in flight
            os.kill(next(iter(self.pool._processes)), signal.SIGKILL)
        return future

    monkeypatch.setattr(runner.PoolExecutor, "submit", submit_then_kill)
    with Store(tmp_path / "r.db") as st:
        report = runner.run_grid(_spec().expand(), st, workers=2, chunk_size=1, progress=False)
        lost = st.worker_failures()
        assert report.failed == len(lost) >= 1 and report.ok + report.failed == 6
        assert all("BrokenProcessPool" in r.error for r in st.records("failed"))
        pooled = {h: v for h, v in _results(st).items() if v[0] == "ok"}
        assert all(results[h] == v for h, v in pooled.items())  # the pool's runs equal the in-process ones
        monkeypatch.undo()
        again = runner.run_grid(_spec().expand(), st, workers=1, progress=False)
        assert (again.already_done, again.ran, again.ok) == (6 - len(lost), len(lost), len(lost))
        assert _results(st) == results and not st.worker_failures()


def _signalled_sweep(args: list[str], runs: int, sig: signal.Signals, **popen) -> subprocess.Popen:
    """``silodp reproduce ARGS`` (the CLI's own main) in its own process group, which signals that
    group ``sig`` right after its ``runs``-th run is committed: caught mid-sweep by construction,
    not by a poller racing the sweep (12 short runs take about 0.3 s; a loaded CI core can stall a
    poller that long)."""
    code = (f"import os, signal, sys\nfrom silodp.experiments.store import Store\nrecord = Store.record\n"
            f"def record_then_signal(self, *args, **kwargs):\n    record(self, *args, **kwargs)\n"
            f"    Store.recorded = Store.__dict__.get('recorded', 0) + 1\n"
            f"    if Store.recorded == {runs}:\n        os.killpg(0, {int(sig)})\n"
            f"Store.record = record_then_signal\nfrom silodp.cli import main\nsys.exit(main(sys.argv[1:]))\n")
    return subprocess.Popen([sys.executable, "-c", code, "reproduce", *args], start_new_session=True, **popen)


def _wait_until_stopped(proc, timeout: float = 300) -> None:
    """Wait for ``proc`` to stop itself (a timeout for a hung child only; nothing is timed)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pid, status = os.waitpid(proc.pid, os.WUNTRACED | os.WNOHANG)
        if pid:
            assert os.WIFSTOPPED(status), f"the first sweep ended (status {status}) before recording a run"
            return
        time.sleep(0.05)
    pytest.fail(f"the first sweep recorded no run in {timeout} s")


def test_two_sweep_processes_on_one_store_never_run_a_run_twice(tmp_path):
    """Two real `silodp reproduce` processes on one store: the first is paused (SIGSTOP) mid-sweep,
    holding the store; the second is refused at once (exit 2, one line naming the store) and
    writes nothing; the first, resumed, finishes every run exactly once."""
    spec = {"name": "two", "dataset": "wbcd", "epsilons": [2.0], "settings": [[2, 5]], "trials": 6,
            "algorithms": {"isrl-mb-sgd": {"step_sizes": [0.2, 0.5]}}}
    grid, db = tmp_path / "grid.json", tmp_path / "r.db"
    grid.write_text(json.dumps(spec))
    args = [str(grid), "--store", str(db), "--workers", "1", "--json"]
    first = _signalled_sweep(args, 1, signal.SIGSTOP, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        _wait_until_stopped(first)
        assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1  # mid-sweep
        second = subprocess.run([sys.executable, "-m", "silodp", "reproduce", *args], capture_output=True, text=True,
                                timeout=120)
        assert second.returncode == 2 and second.stdout == ""
        assert second.stderr.count("\n") == 1 and "another sweep is running" in second.stderr and str(db) in second.stderr
        assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    finally:
        first.send_signal(signal.SIGCONT)
    out, _ = first.communicate(timeout=120)
    assert first.returncode == 0 and json.loads(out)["runs"]["ran"] == 12
    n, distinct = sqlite3.connect(db).execute("SELECT COUNT(*), COUNT(DISTINCT config_hash) FROM runs").fetchone()
    assert n == distinct == 12


def test_dask_local_cluster_matches_in_process(reference, tmp_path):
    distributed = pytest.importorskip("distributed")
    _, results = reference
    with distributed.LocalCluster(n_workers=1, threads_per_worker=2, processes=False, dashboard_address=None) as cluster:
        with Store(tmp_path / "r.db") as st:
            report = runner.run_grid(_spec().expand(), st, scheduler=cluster.scheduler_address, chunk_size=1)
            assert report.ok == 6, [r.error for r in st.records("failed")]
            assert _results(st) == results


def test_unreachable_scheduler_is_a_value_error():
    pytest.importorskip("distributed")
    with pytest.raises(ValueError, match="scheduler"):
        runner.DaskExecutor("tcp://127.0.0.1:9", timeout=1)


def test_bad_arguments():
    with pytest.raises(ValueError, match="workers"):
        runner.make_executor(workers=0)
    with pytest.raises(ValueError, match="max_runs"):
        runner.run_grid([], Store(":memory:"), max_runs=-1)


def test_killed_sweep_resumes(tmp_path):
    """SIGKILL a `silodp reproduce` process mid-sweep, re-run it: every run once, same results."""
    spec = {"name": "killme", "dataset": "wbcd", "epsilons": [2.0], "settings": [[2, 25]], "trials": 2,
            "algorithms": {"isrl-mb-sgd": {"step_sizes": {"exp_linspace": [-3, 0, 10]}, "clips": [1, 5]}}}
    grid, db = tmp_path / "grid.json", tmp_path / "r.db"
    grid.write_text(json.dumps(spec))
    args = [str(grid), "--store", str(db), "--workers", "1", "--json"]
    cmd = [sys.executable, "-m", "silodp", "reproduce", *args]
    proc = _signalled_sweep(args, 5, signal.SIGKILL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    assert proc.wait(timeout=300) == -signal.SIGKILL
    with Store(db) as st:
        at_kill = st.counts()["ok"]
    assert at_kill == 5, "the sweep was not killed right after its 5th run"
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=True)
    payload = json.loads(out.stdout)
    assert payload["runs"]["already_done"] == at_kill and payload["runs"]["ran"] == 40 - at_kill
    n, distinct = sqlite3.connect(db).execute("SELECT COUNT(*), COUNT(DISTINCT config_hash) FROM runs").fetchone()
    assert n == distinct == 40
    with Store(tmp_path / "clean.db") as clean, Store(db) as resumed:
        from silodp.experiments.grid import load_grid

        runner.run_grid(load_grid(grid).expand(), clean, workers=1)
        assert _results(clean) == _results(resumed)


def test_planning_loads_each_trials_data_once(monkeypatch):
    """The calibration plan prepares the runs one trial after another: with more trials than the
    loader's cache holds (8), a grid whose trials are its innermost loop is still loaded once per
    trial, not once per group of runs."""
    from silodp.experiments import datasets

    loads = []
    real = datasets.load
    monkeypatch.setattr(datasets, "load", lambda name, seed, *a, **k: loads.append(seed) or real(name, seed, *a, **k))
    datasets.load_cached.cache_clear()
    spec = GridSpec("tiny", "wbcd", (AlgorithmGrid("isrl-mb-sgd", (0.5,)), AlgorithmGrid("isrl-local-sgd", (0.5,))),
                    (2.0,), ((2, 2),), trials=10)
    requests, outcomes = runner._plan(list(spec.expand()))
    datasets.load_cached.cache_clear()
    assert len(requests) == 20 and not outcomes
    assert sorted(loads) == list(range(10))  # unsorted, trial-innermost order: 20 loads
