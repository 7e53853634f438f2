"""silodp.experiments.store: one row per run under a unique key, never a finished run overwritten."""

import json
import sqlite3

import pytest

from silodp.experiments.grid import RunConfig
from silodp.experiments.store import Store


def _cfg(trial=0, **kw):
    return RunConfig(**{**dict(dataset="wbcd", algorithm="isrl-mb-sgd", epsilon=1.0, calibration="tight",
                                silos_per_round=2, rounds=5, step_size=0.1, clip=1.0, trial=trial), **kw})


def _ok(err=0.1):
    return {"status": "ok", "metrics": {"test_error": err, "val_error": err / 2, "train_loss": 0.3},
            "certified_epsilon": 0.99, "delta": 1e-4, "sigmas": {"sigma": 0.5, "sigma2": None}, "wall_s": 0.01}


def test_record_and_read_back(tmp_path):
    with Store(tmp_path / "r.db") as st:
        st.record(_cfg(), _ok(), "v1")
        [rec] = st.records()
    assert rec.config == _cfg() and rec.config_hash == _cfg().config_hash and rec.seed == 0
    assert (rec.test_error, rec.val_error, rec.certified_epsilon, rec.code_version) == (0.1, 0.05, 0.99, "v1")
    assert rec.sigmas == {"sigma": 0.5, "sigma2": None} and rec.metrics["train_loss"] == 0.3


def test_one_row_per_config_and_ok_is_never_overwritten(tmp_path):
    path = tmp_path / "r.db"
    with Store(path) as st:
        st.record(_cfg(), {"status": "failed", "error": "boom"})
        st.record(_cfg(), _ok(0.2))                                   # a retry replaces a failure
        st.record(_cfg(), {"status": "failed", "error": "later"})   # ... but never a success
        st.record(_cfg(), _ok(0.9))
        assert st.counts() == {"ok": 1, "failed": 0, "skipped": 0}
        assert st.records()[0].test_error == 0.2
    rows = sqlite3.connect(path).execute("SELECT COUNT(*), COUNT(DISTINCT config_hash) FROM runs").fetchone()
    assert rows == (1, 1)


def test_persists_across_reopen_and_filters(tmp_path):
    with Store(tmp_path / "r.db") as st:
        for t in range(3):
            st.record(_cfg(t), _ok())
        st.record(_cfg(3), {"status": "skipped", "error": "algorithm 'x' is not registered (have [])"})
    with Store(tmp_path / "r.db") as st:
        assert st.counts() == {"ok": 3, "failed": 0, "skipped": 1}
        assert len(st.records(hashes=[_cfg(0).config_hash, _cfg(3).config_hash])) == 1
        assert len(st.records(status=None)) == 4
        assert st.unregistered_skips() == {_cfg(3).config_hash}
        assert st.counts([_cfg(1).config_hash]) == {"ok": 1, "failed": 0, "skipped": 0}


def test_calibrations_table(tmp_path):
    with Store(tmp_path / "r.db") as st:
        st.record_calibration("k", {"algorithm": "a"}, {"status": "ok", "sigmas": {"sigma2": float("inf")}})
    with Store(tmp_path / "r.db") as st:
        assert st.calibrations() == {"k": {"status": "ok", "sigmas": {"sigma2": float("inf")}}}


def test_bad_status_and_bad_path(tmp_path):
    with Store(tmp_path / "r.db") as st, pytest.raises(ValueError, match="status"):
        st.record(_cfg(), {"status": "maybe"})
    with pytest.raises(ValueError, match="store"):
        Store(tmp_path).counts()


def test_a_file_that_is_not_a_database_is_refused(tmp_path):
    path = tmp_path / "notes.db"
    path.write_text("these are not runs\n" * 50)
    for read_only in (False, True):
        with pytest.raises(ValueError, match="store: .* not a readable SQLite database"):
            Store(path, read_only=read_only).counts()
    assert path.read_text().startswith("these are not runs")


def test_a_foreign_database_is_never_written_into(tmp_path):
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE runs (id INTEGER, note TEXT)")
    before = path.read_bytes()
    for read_only in (False, True):
        with pytest.raises(ValueError, match="not a silodp results store"):
            Store(path, read_only=read_only).counts()
    assert path.read_bytes() == before
    empty = tmp_path / "empty.db"
    sqlite3.connect(empty).close()
    with pytest.raises(ValueError, match="not a silodp results store .*; refusing to read"):
        Store(empty, read_only=True).counts()
    assert not [t for (t,) in sqlite3.connect(empty).execute("SELECT name FROM sqlite_master")]


def test_reading_a_store_writes_nothing(tmp_path):
    """plot and summaries open the store read-only (SQLite mode=ro, else immutable), so a store on
    a read-only disk can still be read: the database file is not touched."""
    path = tmp_path / "r.db"
    with Store(path) as st:
        st.record(_cfg(), _ok(), "v1")
    before = path.read_bytes()
    for uri_mode in ("mode=ro", "immutable"):
        st = Store(path, read_only=True)
        if uri_mode == "immutable":  # what a read-only disk leaves: the fallback
            st._db = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro&immutable=1", uri=True, isolation_level=None)
        with st:
            assert st.counts() == {"ok": 1, "failed": 0, "skipped": 0} and len(st.records()) == 1
            with pytest.raises(sqlite3.OperationalError, match="readonly"):
                st.record(_cfg(trial=1), _ok(), "v1")
    assert path.read_bytes() == before


# -- issue 28: a tamper-evident, versioned store that adopts nothing ---------------------------------
def _tiny():
    from silodp.experiments.grid import AlgorithmGrid, GridSpec

    return GridSpec("tiny", "wbcd", (AlgorithmGrid("isrl-mb-sgd", (0.5,)),), (2.0,), ((2, 3),), trials=2).expand()


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The tiny grid swept once: the store's bytes and its rows (copied per test)."""
    from silodp.experiments import runner

    path = tmp_path_factory.mktemp("swept") / "r.db"
    with Store(path) as st:
        report = runner.run_grid(_tiny(), st, workers=1, progress=False)
        rows = {r.config_hash: r.sigmas for r in st.records()}
    assert (report.ok, report.calibrations) == (2, 1)
    return path.read_bytes(), rows


def _copy(swept, tmp_path):
    path = tmp_path / "r.db"
    path.write_bytes(swept[0])
    return path


def test_a_tampered_calibration_is_recertified_and_recalibrated(swept, tmp_path, caplog):
    """The issue's attack: every cached sigma scaled by 1/1000 and the finished rows deleted. The
    resume re-certifies the cached calibration, finds its noise certifies far more than its stored
    epsilon, says so, and recalibrates: the rewritten runs have the original noise."""
    from silodp.experiments import runner

    path = _copy(swept, tmp_path)
    db = sqlite3.connect(path)
    [(key, result)] = db.execute("SELECT key, result FROM calibrations").fetchall()
    tampered = json.loads(result)
    tampered["sigmas"] = {k: v / 1000 for k, v in tampered["sigmas"].items()}
    with db:
        db.execute("UPDATE calibrations SET result = ? WHERE key = ?", (json.dumps(tampered), key))
        db.execute("DELETE FROM runs")
    db.close()
    with Store(path) as st, caplog.at_level("WARNING", logger="silodp.experiments.runner"):
        report = runner.run_grid(_tiny(), st, workers=1, progress=False)
        assert (report.recalibrated, report.calibrations, report.ok) == (1, 1, 2)
        assert {r.config_hash: r.sigmas for r in st.records()} == swept[1]
    assert "does not re-certify" in caplog.text and "certifies epsilon" in caplog.text


def test_a_calibration_from_another_accounting_version_is_redone(swept, tmp_path, monkeypatch, caplog):
    from silodp.accounting import version
    from silodp.experiments import runner

    path = _copy(swept, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM runs")
    monkeypatch.setattr(version, "ACCOUNTING_VERSION", version.ACCOUNTING_VERSION + 1)
    with Store(path) as st, caplog.at_level("WARNING", logger="silodp.experiments.runner"):
        report = runner.run_grid(_tiny(), st, workers=1, progress=False)
        assert (report.recalibrated, report.calibrations, report.ok) == (1, 1, 2)
        [(request, _)] = st.calibration_rows().values()
    assert request["accounting_version"] == version.ACCOUNTING_VERSION
    assert "accounting version" in caplog.text


def test_recertify_checks_the_stored_epsilon_against_the_target():
    from silodp.experiments import execute as ex

    cfg = _tiny()[0]
    request = ex.calibration_request(cfg)
    result = ex.calibrate_request(request)
    assert ex.recertify(request, result) is None
    assert "above the target" in ex.recertify(request, {**result, "epsilon": 2 * request["epsilon"]})
    low = {**result, "epsilon": result["epsilon"] / 2}  # noise unchanged, a smaller claim
    assert "certifies epsilon" in ex.recertify(request, low)
    assert "cannot re-certify" in ex.recertify(request, {**result, "sigmas": {}})


def test_a_foreign_store_shaped_database_is_refused_before_any_write(tmp_path):
    """Tables named runs / calibrations / meta and even a schema_version row are not a store's
    identifier: refused, its bytes unchanged, never switched to WAL, nothing created beside it."""
    path = tmp_path / "foreign.db"
    with sqlite3.connect(path) as db:
        for table in ("runs", "calibrations", "meta"):
            db.execute(f"CREATE TABLE {table} (key TEXT, value TEXT)")
        db.execute("INSERT INTO meta VALUES ('schema_version', '1')")
    empty = tmp_path / "empty.db"
    with sqlite3.connect(empty) as db:
        db.execute("PRAGMA user_version = 7")
    for victim in (path, empty):
        before = victim.read_bytes()
        with pytest.raises(ValueError, match="not a silodp results store .*refusing to write into"):
            Store(victim).counts()
        assert victim.read_bytes() == before
        assert sqlite3.connect(victim).execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty.db", "foreign.db"]


def test_a_new_store_carries_its_identifier(tmp_path):
    from silodp.experiments.store import APPLICATION_ID, STORE_ID

    path = tmp_path / "new.db"
    with Store(path) as st:
        st.record(_cfg(), _ok())
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA application_id").fetchone() == (APPLICATION_ID,)
    assert db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone() == (STORE_ID,)
    with Store(path) as st:  # reopened, written again
        st.record(_cfg(1), _ok())
        assert st.counts()["ok"] == 2


def test_read_only_opening_leaves_no_wal_or_shm(swept, tmp_path):
    path = _copy(swept, tmp_path)
    with Store(path, read_only=True) as st:
        assert st.counts()["ok"] == 2 and len(st.records()) == 2
    from silodp.cli import main

    assert main(["plot", "--store", str(path), "--out", str(tmp_path / "fig.png")]) == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fig.png", "r.db"]


def test_runs_of_a_killed_worker_are_retried_on_resume(swept, tmp_path):
    """A worker killed mid-chunk records its runs ``failed: worker: BrokenProcessPool``; a plain
    resume (no --retry-failed) runs them again, while the runs' own failures stay final."""
    from silodp.experiments import runner

    path = _copy(swept, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE runs SET status = 'failed', error = 'worker: BrokenProcessPool: a process died'")
    with Store(path) as st:
        assert len(st.worker_failures()) == 2
        report = runner.run_grid(_tiny(), st, workers=1, progress=False)
        assert (report.already_done, report.ran, report.ok) == (0, 2, 2)
        assert st.counts() == {"ok": 2, "failed": 0, "skipped": 0} and not st.worker_failures()


def test_a_second_sweep_on_the_same_store_is_refused(swept, tmp_path):
    from silodp.experiments import runner

    path = _copy(swept, tmp_path)
    with sqlite3.connect(path) as db:
        db.execute("DELETE FROM runs")
    with Store(path) as first, first.sweep_lock(), Store(path) as second:
        with pytest.raises(ValueError, match="another sweep is running"):
            runner.run_grid(_tiny(), second, workers=1, progress=False)
        assert second.counts()["ok"] == 0
    with Store(path) as st:  # the lock ends with its holder
        assert runner.run_grid(_tiny(), st, workers=1, progress=False).ran == 2


def test_recertify_a_shuffle_calibration():
    """The P_vec path: the stored (g, b, p, rotate) re-certified; trials cut 100-fold are caught."""
    import dataclasses

    from silodp.accounting.version import ACCOUNTING_VERSION
    from silodp.algorithms.privacy import algorithm_class
    from silodp.experiments import execute as ex

    tc = algorithm_class("sdp-prox-sgd").plan.transcript(n=50, rounds=1, batch_size=10, num_silos=2, dimension=1)
    request = {"algorithm": "sdp-prox-sgd", "method": "tight", "epsilon": 2.0, "delta": 1e-4,
               "transcript": dataclasses.asdict(tc), "accounting_version": ACCOUNTING_VERSION}
    result = ex.calibrate_request(request)
    assert result["status"] == "ok" and ex.recertify(request, result) is None
    fewer = {**result, "shuffle": {k: {**v, "b": max(1, v["b"] // 100)} for k, v in result["shuffle"].items()}}
    assert "certifies epsilon" in ex.recertify(request, fewer)
