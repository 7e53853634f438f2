"""The results store: one SQLite row per run, keyed by the config hash.

Each finished run is written in its own transaction (``BEGIN IMMEDIATE ... COMMIT``) under a
unique key, in WAL mode: a sweep killed at any moment leaves every recorded run intact and
nothing half-written, and re-running it skips what is recorded. A row records the config (JSON)
and its hash, the seed, the status (``ok`` | ``failed`` | ``skipped``) and error, the metrics, the
certified epsilon and delta, the noise, the code version and the wall time. A successful row is
never overwritten; a failed or skipped one is replaced when the run is retried.

Calibrations (noise per transcript, see :mod:`.execute`) are kept in a second table, so a resumed
sweep does not calibrate again.
"""

from __future__ import annotations

import json
import math
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from .grid import RunConfig

STATUSES = ("ok", "failed", "skipped")
SCHEMA_VERSION = "1"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
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
CREATE INDEX IF NOT EXISTS runs_status ON runs (status);
CREATE TABLE IF NOT EXISTS calibrations (
    key TEXT PRIMARY KEY,
    request TEXT NOT NULL,
    result TEXT NOT NULL,
    status TEXT NOT NULL,
    code_version TEXT,
    finished_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
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


def _is_silodp_store(db: sqlite3.Connection) -> bool | None:
    """True for a silodp store, None for a database with no tables, False for anything else."""
    tables = {name for (name,) in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    if not tables:
        return None
    if not {"runs", "calibrations", "meta"} <= tables:
        return False
    return db.execute("SELECT 1 FROM meta WHERE key = 'schema_version'").fetchone() is not None


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

    # -- connection ------------------------------------------------------------------------------
    @property
    def db(self) -> sqlite3.Connection:
        if self._db is None:
            self._db = self._connect()
        return self._db

    def _connect_read_only(self) -> sqlite3.Connection:
        """``mode=ro``; where even that cannot open (a WAL store on a read-only disk needs its
        shared-memory file), ``immutable=1``, which reads the main file alone."""
        uri = self.path.resolve().as_uri()
        try:
            db = sqlite3.connect(f"{uri}?mode=ro", uri=True, isolation_level=None)
            db.execute("SELECT count(*) FROM sqlite_master").fetchone()
            return db
        except sqlite3.OperationalError:
            return sqlite3.connect(f"{uri}?mode=ro&immutable=1", uri=True, isolation_level=None)

    def _connect(self) -> sqlite3.Connection:
        if self.path.is_dir():
            raise ValueError(f"store: {self.path} is a directory, expected a database file")
        if self.read_only and not self.path.is_file():
            raise ValueError(f"store: no such file {str(self.path)!r}")
        try:
            if self.read_only:
                db = self._connect_read_only()
            else:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                db = sqlite3.connect(self.path, isolation_level=None, timeout=60)
            ours = _is_silodp_store(db)
        except (sqlite3.DatabaseError, OSError) as exc:
            raise ValueError(f"store: {str(self.path)!r} is not a readable SQLite database ({exc})") from None
        if ours is False or (ours is None and self.read_only):
            db.close()
            raise ValueError(f"store: {str(self.path)!r} is not a silodp results store; refusing to "
                             f"{'read' if self.read_only else 'write into'} it")
        if not self.read_only:
            try:
                db.execute("PRAGMA journal_mode=WAL")
                db.execute("PRAGMA synchronous=NORMAL")
                db.executescript(_SCHEMA)
                db.execute("INSERT OR IGNORE INTO meta VALUES ('schema_version', ?)", (SCHEMA_VERSION,))
            except sqlite3.OperationalError as exc:
                db.close()
                raise ValueError(f"store: cannot write to {str(self.path)!r} ({exc}); plot and summaries "
                                 "read a store without writing") from None
        return db

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

    def record_calibration(self, key: str, request: dict, result: dict, code_version: str | None = None) -> None:
        self._transaction("INSERT OR REPLACE INTO calibrations VALUES (?, ?, ?, ?, ?, ?)",
                          (key, json.dumps(request, sort_keys=True), json.dumps(result), result.get("status", "ok"),
                           code_version, time.time()))
