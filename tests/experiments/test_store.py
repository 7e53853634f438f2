"""silodp.experiments.store: one row per run under a unique key, never a finished run overwritten."""

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
    with pytest.raises(ValueError, match="not a silodp results store; refusing to read"):
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
