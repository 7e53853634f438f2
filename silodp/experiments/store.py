"""The results store: one SQLite row per run, keyed by the config hash.

Each finished run is written in its own transaction (``BEGIN IMMEDIATE ... COMMIT``) under a
unique key, in WAL mode: a sweep killed at any moment leaves every recorded run intact and
nothing half-written, and re-running it skips what is recorded. A row records the config (JSON)
and its hash, the seed, the status (``ok`` | ``failed`` | ``skipped``) and error, the metrics, the
certified epsilon and delta, the noise, the code version and the wall time. A successful row is
never overwritten; a failed or skipped one is replaced when the run is retried.

Calibrations (noise per transcript, see :mod:`.execute`) are kept in a second table, so a resumed
sweep does not calibrate again; their key holds the accounting version
(:data:`silodp.accounting.version.ACCOUNTING_VERSION`) and the runner re-certifies each before use.

Fail closed about what is the store's own: a store is created only at a path holding nothing (no
file, or an empty one), and stamped at creation with an identifier (the SQLite header's
``application_id`` and a ``meta`` row); a database without both is refused before anything is
written, converted (WAL) or created beside it. Reading (``read_only=True``) leaves no file behind:
with no ``-wal`` file present the database is opened ``immutable`` (the main file alone). A sweep
holds an exclusive lock on the store (:meth:`Store.sweep_lock`, an ``flock`` released when its
process ends, however it ends), so two sweeps never run the same work.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .grid import RunConfig

STATUSES = ("ok", "failed", "skipped")
SCHEMA_VERSION = "1"
#: The SQLite header's application_id of a silodp store ("SILD"), written at creation.
APPLICATION_ID = 0x53494C44
#: The ``meta`` row ``store_id`` written at creation.
STORE_ID = "silodp-results-store"
#: Prefix of the error of a run whose worker died (not the run's own failure: retried on resume).
WORKER_ERROR = "worker: "

_SCHEMA = """
CREATE TABLE runs (
    config_hash TEXT PRIMARY KEY,
    config TEXT NOT NULL,
    dataset TEXT NOT NULL,
    algorithm TEXT NOT NULL,
    epsilon REAL,
    calibration TEXT NOT NULL,
    silos_per_round INTEGER,
    rounds INTEGER NOT NULL,
    trial INTEGER NOT NULL,
    seed INTEGER NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('ok', 'failed', 'skipped')),
    error TEXT,
    test_error REAL,
    val_error REAL,
    train_loss REAL,
    certified_epsilon REAL,
    delta REAL,
    sigmas TEXT,
    metrics TEXT,
    code_version TEXT,
    wall_s REAL,
    finished_at REAL NOT NULL
);
CREATE INDEX runs_status ON runs (status);
CREATE TABLE calibrations (
    key TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    status TEXT NOT NULL,
    code_version TEXT,
    finished_at REAL NOT NULL
);
CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""

_UPSERT = """
INSERT INTO runs (config_hash, config, dataset, algorithm, epsilon, calibration, silos_per_round, rounds,
                  trial, seed, status, error, test_error, val_error, train_loss, certified_epsilon, delta,
                  sigmas, metrics, code_version, wall_s, finished_at)
VALUES (:config_hash, :config, :dataset, :algorithm, :epsilon, :calibration, :silos_per_round, :rounds,
        :trial, :seed, :status, :error, :test_error, :val_error, :train_loss, :certified_epsilon, :delta,
        :sigmas, :metrics, :code_version, :wall_s, :finished_at)
ON CONFLICT (config_hash) DO UPDATE SET
    status = excluded.status, error = excluded.error, test_error = excluded.test_error,
    val_error = excluded.val_error, train_loss = excluded.train_loss,
    certified_epsilon = excluded.certified_epsilon, delta = excluded.delta, sigmas = excluded.sigmas,
    metrics = excluded.metrics, code_version = excluded.code_version, wall_s = excluded.wall_s,
    finished_at = excluded.finished_at
WHERE runs.status != 'ok' AND NOT (runs.status = excluded.status AND runs.error IS excluded.error)
"""


@dataclass
class RunRecord:
    """One stored run."""

    config: RunConfig
    config_hash: str
    seed: int
    status: str
    error: str | None = None
    test_error: float | None = None
    val_error: float | None = None
    train_loss: float | None = None
    certified_epsilon: float | None = None
    delta: float | None = None
    sigmas: dict | None = None
    metrics: dict = field(default_factory=dict)
    code_version: str | None = None
    wall_s: float | None = None


def _num(x):
    return None if x is None or (isinstance(x, float) and not math.isfinite(x)) else x


def _header_application_id(path: Path) -> int | None:
    """The application_id of the SQLite database at ``path`` read from its header (offset 68),
    without opening it; None when the file is not an SQLite database."""
    with open(path, "rb") as f:
        head = f.read(100)
    if len(head) < 100 or not head.startswith(b"SQLite format 3\x00"):
        return None
    return int.from_bytes(head[68:72], "big")


def _has_store_id(db: sqlite3.Connection) -> bool:
    try:
        row = db.execute("SELECT value FROM meta WHERE key = 'store_id'").fetchone()
    except sqlite3.DatabaseError:
        return False
    return row is not None and row[0] == STORE_ID


def _is_legacy_store(db: sqlite3.Connection) -> bool:
    """A store written by a silodp from before the store identifier (readable, never written)."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    return {"runs", "calibrations", "meta"} <= tables and db.execute(
        "SELECT 1 FROM meta WHERE key = 'schema_version'").fetchone() is not None


class Store:
    """SQLite results store at ``path`` (created on first use). Use as a context manager or call
    :meth:`close`. Only one process should write at a time (the sweep's parent does).

    ``read_only=True`` opens an existing store without writing anything (so a store on a read-only
    disk can still be summarized and plotted). Fail closed: a file that is not an SQLite database,
    or a database with tables that are not silodp's, is refused (ValueError naming ``store``),
    never written into.
    """

    def __init__(self, path: str | Path, read_only: bool = False):
        self.path = Path(path)
        self.read_only = bool(read_only)
        self._db: sqlite3.Connection | None = None
        self._sweeping = False

    # -- connection ------------------------------------------------------------------------------
    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._connect()
        return self._db

    def _refuse(self, why: str):
        raise ValueError(f"store: {str(self.path)!r} is not a silodp results store ({why}); refusing to "
                         f"{'read' if self.read_only else 'write into'} it")

    def _connect_read_only(self) -> sqlite3.Connection:
        """``immutable=1`` (the main file alone, nothing created beside it) unless a ``-wal`` file
        is present (a sweep writing, or one killed), then ``mode=ro``, which reads it."""
        uri = self.path.resolve().as_uri()
        wal = Path(f"{self.path}-wal").exists()
        db = sqlite3.connect(f"{uri}?mode=ro" + ("" if wal else "&immutable=1"), uri=True, isolation_level=None)
        db.execute("SELECT count(*) FROM sqlite_master").fetchone()
        return db

    def _check_identity(self) -> None:
        """Refuse, before opening it, a file that is not a database or not stamped as a store."""
        if self.path.stat().st_size == 0:
            self._refuse("an empty file")
        app = _header_application_id(self.path)
        if app is None:
            raise ValueError(f"store: {str(self.path)!r} is not a readable SQLite database")
        if app != APPLICATION_ID and not self.read_only:
            self._refuse("no silodp store identifier: created by another program, or by a silodp "
                         "from before store identifiers; use a new store")

    def _create(self) -> sqlite3.Connection:
        """A new store at an empty path: identifier, schema and meta rows in one transaction,
        then WAL. Another process creating it at the same moment is tolerated (its store is ours)."""
        db = sqlite3.connect(self.path, isolation_level=None, timeout=60)
        try:
            db.execute("BEGIN IMMEDIATE")
            if db.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID:
                db.execute("ROLLBACK")
                return db
            if db.execute("SELECT count(*) FROM sqlite_master").fetchone()[0]:
                db.execute("ROLLBACK")
                db.close()
                self._refuse("a database appeared at the path while the store was being created")
            db.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            for statement in _SCHEMA.split(";"):
                if statement.strip():
                    db.execute(statement)
            db.executemany("INSERT INTO meta VALUES (?, ?)", (("store_id", STORE_ID), ("schema_version", SCHEMA_VERSION)))
            db.execute("COMMIT")
        except sqlite3.OperationalError as exc:
            db.close()
            raise ValueError(f"store: cannot create {str(self.path)!r} ({exc})") from None
        return db

    def _connect(self) -> sqlite3.Connection:
        if str(self.path) == ":memory:":
            if self.read_only:
                raise ValueError("store: a read-only store needs a file, not ':memory:'")
            return self._create()
        if self.path.is_dir():
            raise ValueError(f"store: {self.path} is a directory, expected a database file")
        if self.read_only and not self.path.is_file():
            raise ValueError(f"store: no such file {str(self.path)!r}")
        try:
            fresh = not self.read_only and (not self.path.exists() or self.path.stat().st_size == 0)
            if fresh:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = self._create()
            else:
                self._check_identity()
                db = self._connect_read_only() if self.read_only else sqlite3.connect(
                    self.path, isolation_level=None, timeout=60)
        except (sqlite3.DatabaseError, OSError) as exc:
            raise ValueError(f"store: {str(self.path)!r} is not a readable SQLite database ({exc})") from None
        try:
            ours = _has_store_id(db) or (self.read_only and _is_legacy_store(db))
        except sqlite3.DatabaseError as exc:
            db.close()
            raise ValueError(f"store: {str(self.path)!r} is not a readable SQLite database ({exc})") from None
        if not ours:
            db.close()
            self._refuse("no silodp store identifier")
        if not self.read_only:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
            except sqlite3.OperationalError as exc:
                db.close()
                raise ValueError(f"store: cannot write to {str(self.path)!r} ({exc}); plot and summaries "
                                 "read a store without writing") from None
        return db

    @contextlib.contextmanager
    def sweep_lock(self):
        """Hold the store exclusively for one sweep (``flock`` on the database file, released when
        the process ends however it ends); a second sweep is refused at once (ValueError). Reentrant
        on this object (``reproduce`` takes it before importing torch, ``run_grid`` again inside)."""
        self.db  # noqa: B018 - open (and identify, or create) the store first
        if str(self.path) == ":memory:" or self._sweeping:
            yield
            return
        import fcntl

        fd = os.open(self.path, os.O_RDONLY)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise ValueError(f"store: another sweep is running on {str(self.path)!r}; wait for it to end "
                                 "(this one would redo its runs) or use another --store") from None
            self._sweeping = True
            yield
        finally:
            self._sweeping = False
            os.close(fd)

    def close(self) -> None:
        if self._db is not None:
            self._db.close()
            self._db = None

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _transaction(self, sql: str, params) -> None:
        db = self.db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.execute(sql, params)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    # -- runs ------------------------------------------------------------------------------------
    def record(self, config: RunConfig, outcome: dict, code_version: str | None = None) -> None:
        """Write one run's outcome (from :func:`.execute.execute_safely`) in its own transaction."""
        status = outcome.get("status")
        if status not in STATUSES:
            raise ValueError(f"status: must be one of {STATUSES}, got {status!r}")
        metrics = dict(outcome.get("metrics") or {})
        error = outcome.get("error")
        if outcome.get("traceback"):
            error = f"{error}\n{outcome['traceback']}"
        row = {
            "config_hash": config.config_hash, "config": json.dumps(config.to_dict(), sort_keys=True),
            "dataset": config.dataset, "algorithm": config.algorithm, "epsilon": config.epsilon,
            "calibration": config.calibration, "silos_per_round": config.silos_per_round, "rounds": config.rounds,
            "trial": config.trial, "seed": config.seed, "status": status, "error": error,
            "test_error": _num(metrics.get("test_error")), "val_error": _num(metrics.get("val_error")),
            "train_loss": _num(metrics.get("train_loss")),
            "certified_epsilon": _num(outcome.get("certified_epsilon")), "delta": _num(outcome.get("delta")),
            "sigmas": None if outcome.get("sigmas") is None else json.dumps(outcome["sigmas"]),
            "metrics": json.dumps(metrics), "code_version": code_version, "wall_s": outcome.get("wall_s"),
            "finished_at": time.time(),
        }
        self._transaction(_UPSERT, row)

    def statuses(self) -> dict[str, str]:
        """``{config_hash: status}`` of every stored run."""
        return dict(self.db.execute("SELECT config_hash, status FROM runs"))

    def unregistered_skips(self) -> set[str]:
        """Hashes of runs skipped because their algorithm was not registered at the time."""
        rows = self.db.execute("SELECT config_hash FROM runs WHERE status = 'skipped' AND error LIKE 'algorithm % is not registered%'")
        return {h for (h,) in rows}

    def worker_failures(self) -> set[str]:
        """Hashes of runs failed because their worker died (BrokenProcessPool, a lost Dask worker):
        not the run's own failure, so a resume retries them."""
        rows = self.db.execute("SELECT config_hash FROM runs WHERE status = 'failed' AND error LIKE ?", (WORKER_ERROR + "%",))
        return {h for (h,) in rows}

    def counts(self, hashes=None) -> dict[str, int]:
        """Number of stored runs per status (of ``hashes`` only, when given)."""
        out = {s: 0 for s in STATUSES}
        if hashes is None:
            for status, n in self.db.execute("SELECT status, COUNT(*) FROM runs GROUP BY status"):
                out[status] = n
            return out
        wanted = set(hashes)
        for h, status in self.statuses().items():
            if h in wanted:
                out[status] += 1
        return out

    def records(self, status: str | None = "ok", hashes=None) -> list[RunRecord]:
        """Stored runs (with ``status``; all when None), optionally only those in ``hashes``."""
        sql = ("SELECT config_hash, config, seed, status, error, test_error, val_error, train_loss, "
               "certified_epsilon, delta, sigmas, metrics, code_version, wall_s FROM runs")
        rows = self.db.execute(sql + (" WHERE status = ?" if status else ""), (status,) if status else ())
        wanted = None if hashes is None else set(hashes)
        out = []
        for (h, cfg, seed, st, err, te, ve, tl, ce, dl, sig, met, cv, ws) in rows:
            if wanted is not None and h not in wanted:
                continue
            out.append(RunRecord(RunConfig.from_dict(json.loads(cfg)), h, seed, st, err, te, ve, tl, ce, dl,
                                 None if sig is None else json.loads(sig), json.loads(met or "{}"), cv, ws))
        return out

    # -- calibrations ----------------------------------------------------------------------------
    def calibrations(self) -> dict[str, dict]:
        """``{key: result}`` of every stored calibration."""
        return {k: json.loads(r) for k, r in self.db.execute("SELECT key, result FROM calibrations")}

    def calibration_rows(self) -> dict[str, tuple[dict, dict]]:
        """``{key: (request, result)}`` of every stored calibration."""
        rows = self.db.execute("SELECT key, request, result FROM calibrations")
        return {k: (json.loads(q), json.loads(r)) for k, q, r in rows}

    def record_calibration(self, key: str, request: dict, result: dict, code_version: str | None = None) -> None:
        self._transaction("INSERT OR REPLACE INTO calibrations VALUES (?, ?, ?, ?, ?, ?)",
                          (key, json.dumps(request, sort_keys=True), json.dumps(result), result.get("status", "ok"),
                           code_version, time.time()))
