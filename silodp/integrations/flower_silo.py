"""A silo's own privacy in a Flower deployment: its budget, its persistent ledger, its refusals.

Whoever calls ``flwr run`` writes the run config; whoever runs a SuperNode writes its node config.
A silo that trusts no server therefore takes its budget and its ledger from the node config only
(:class:`SiloPolicy`: ``silodp-ledger``, ``silodp-budget-epsilon``, ``silodp-budget-delta``,
optionally ``silodp-run-epsilon`` and caps on what the server may propose), and keeps its ledger
on its own disk (:class:`SiloLedgerDB`, SQLite), outside Flower's per-run ``Context.state``.

The ledger holds one row per release. Its epsilon is that of everything the silo ever released,
across runs, composed adaptively (:func:`silodp.accounting.releases.releases_event`, ISRL-DP's
replace-one relation, paper Definition 4) and certified by silodp's tightest sound accountant
(:func:`silodp.accounting.tightest_epsilon`). Identical releases are grouped (counts add), so an
evaluation costs the number of *distinct* releases, not of rounds; certificates are cached in the
ledger file by their grouped releases (a pure function of them).

Every write is one SQLite transaction taken with ``BEGIN IMMEDIATE`` (the file's write lock):
the check and the row it admits commit together or not at all (a SuperNode killed mid-write
leaves the ledger as before: SQLite's atomic commit, WAL journal, ``synchronous=FULL``), and two
runs at once are serialized. A release is recorded *before* it leaves the silo: a crash between
the two over-counts, never under-counts.

Admission (:meth:`SiloLedgerDB.admit`): before a run's first message, the whole declared plan is
composed with the past; if it does not fit, nothing is released. Mid-run
(:meth:`SiloLedgerDB.release`): a release inside the admitted plan, with no other run's release
since the admission, fits (the admitted certificate covers it: releasing fewer messages is
post-processing of releasing all of them); any other release is composed with everything
recorded and refused *before* it leaves if it would exceed the budget.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import math
import os
import sqlite3
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path

from silodp.accounting.releases import BatchSampling, GaussianRelease

#: The node-config keys (``flower-supernode --node-config``); the run config cannot set them.
NODE_LEDGER = "silodp-ledger"
NODE_BUDGET_EPSILON = "silodp-budget-epsilon"
NODE_BUDGET_DELTA = "silodp-budget-delta"
NODE_RUN_EPSILON = "silodp-run-epsilon"
#: The simulation engine gives its nodes no node config of their own (only ``partition-id``): there
#: the host's environment declares the silos' budgets, a ledger file per partition in a directory.
ENV_LEDGER_DIR, ENV_BUDGET_EPSILON, ENV_BUDGET_DELTA = "SILODP_LEDGER_DIR", "SILODP_BUDGET_EPSILON", "SILODP_BUDGET_DELTA"
#: Who computes the releases a ledger records (its ``mode``, shown by ``silodp ledger``): the silo
#: service, a process the silo's operator owns (:mod:`silodp.service`), or the ClientApp itself,
#: in the process of the app bundle the server ships (the operator trusts that bundle).
MODE_SERVICE, MODE_IN_PROCESS = "service", "in-process (the app bundle is trusted)"
#: Caps on what the server proposes (node-config key -> (field, default)).
NODE_CAPS = {"silodp-max-rounds": ("max_rounds", 10_000), "silodp-max-batch-size": ("max_batch_size", 100_000),
             "silodp-max-clip": ("max_clip", 1e3), "silodp-max-step-size": ("max_step_size", 1e3)}

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS releases (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, message TEXT NOT NULL,
    grp TEXT NOT NULL, count INTEGER NOT NULL, noise_multiplier REAL NOT NULL, sampling TEXT NOT NULL,
    batch_size INTEGER NOT NULL, dataset_size INTEGER NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS plans (
    run_id TEXT PRIMARY KEY, releases TEXT NOT NULL, epsilon REAL NOT NULL, after_id INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS refusals (
    id INTEGER PRIMARY KEY AUTOINCREMENT, run_id TEXT NOT NULL, reason TEXT NOT NULL, at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS cache (key TEXT PRIMARY KEY, value TEXT NOT NULL);
"""
_RELEASE_COLUMNS = "grp, count, noise_multiplier, sampling, batch_size, dataset_size"


class SiloRefusal(ValueError):
    """The silo refuses a message: nothing was released (the reason says why); ``recorded``:
    the ledger has counted it."""

    recorded = False


def _finite(name: str, value, cap: float | None = None) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise SiloRefusal(f"{name}: must be a number, got {value!r}") from None
    if not (math.isfinite(out) and out > 0):
        raise SiloRefusal(f"{name}: must be positive and finite, got {value!r}")
    if cap is not None and out > cap:
        raise SiloRefusal(f"{name}: {out:g} exceeds this silo's cap {cap:g}")
    return out


@dataclasses.dataclass(frozen=True)
class SiloPolicy:
    """What the silo's operator decided (the node config): the budget, where the ledger lives,
    the most epsilon one run may ask for, and caps on the values the server proposes."""

    ledger: str
    budget_epsilon: float
    budget_delta: float
    run_epsilon: float | None = None
    max_rounds: int = NODE_CAPS["silodp-max-rounds"][1]
    max_batch_size: int = NODE_CAPS["silodp-max-batch-size"][1]
    max_clip: float = NODE_CAPS["silodp-max-clip"][1]
    max_step_size: float = NODE_CAPS["silodp-max-step-size"][1]

    def __post_init__(self) -> None:
        if not str(self.ledger):
            raise SiloRefusal(f"{NODE_LEDGER}: must be a file path")
        _finite(NODE_BUDGET_EPSILON, self.budget_epsilon)
        if not 0 < _finite(NODE_BUDGET_DELTA, self.budget_delta) < 1:
            raise SiloRefusal(f"{NODE_BUDGET_DELTA}: must lie in (0, 1), got {self.budget_delta!r}")
        if self.run_epsilon is not None:
            _finite(NODE_RUN_EPSILON, self.run_epsilon)
        for key, (field, _) in NODE_CAPS.items():
            _finite(key, getattr(self, field))

    @classmethod
    def from_node_config(cls, node_config: Mapping) -> "SiloPolicy":
        """The policy of a SuperNode's ``--node-config``; a refusal if the budget is not declared
        there (a silo without its own budget releases nothing)."""
        missing = [k for k in (NODE_LEDGER, NODE_BUDGET_EPSILON, NODE_BUDGET_DELTA) if k not in node_config]
        if missing:
            raise SiloRefusal(f"this SuperNode declares no silodp budget: --node-config lacks {missing}")
        caps = {field: type(default)(_finite(key, node_config[key])) for key, (field, default) in NODE_CAPS.items()
                if key in node_config}
        run = node_config.get(NODE_RUN_EPSILON)
        return cls(str(node_config[NODE_LEDGER]), _finite(NODE_BUDGET_EPSILON, node_config[NODE_BUDGET_EPSILON]),
                   _finite(NODE_BUDGET_DELTA, node_config[NODE_BUDGET_DELTA]),
                   None if run in (None, "") else _finite(NODE_RUN_EPSILON, run),
                   **caps)

    @classmethod
    def for_node(cls, node_config: Mapping, environ: Mapping | None = None) -> "SiloPolicy":
        """:meth:`from_node_config`, or, when the node config declares no budget and the host's
        environment does (``SILODP_LEDGER_DIR``, ``SILODP_BUDGET_EPSILON``, ``SILODP_BUDGET_DELTA``:
        the simulation engine, whose one operator runs every silo), the ledger
        ``silo-<partition-id>.sqlite`` in that directory. Never the run config."""
        env = os.environ if environ is None else environ
        if NODE_LEDGER in node_config or ENV_LEDGER_DIR not in env or "partition-id" not in node_config:
            return cls.from_node_config(node_config)
        path = Path(env[ENV_LEDGER_DIR]) / f"silo-{int(node_config['partition-id'])}.sqlite"
        return cls.from_node_config({**node_config, NODE_LEDGER: str(path),
                                     NODE_BUDGET_EPSILON: env.get(ENV_BUDGET_EPSILON, "missing"),
                                     NODE_BUDGET_DELTA: env.get(ENV_BUDGET_DELTA, "missing")})

    def check_proposal(self, *, rounds, batch_size, clip, step_size) -> None:
        """The server's proposed plan, against this silo's caps: each a positive finite number
        within its cap (rounds and batch size integers), or a refusal naming it."""
        for name, value, cap in (("rounds", rounds, self.max_rounds), ("batch-size", batch_size, self.max_batch_size)):
            if _finite(name, value, cap) != int(value):
                raise SiloRefusal(f"{name}: must be an integer, got {value!r}")
        _finite("clip", clip, self.max_clip)
        _finite("step-size", step_size, self.max_step_size)

    def open_ledger(self, mode: str = MODE_IN_PROCESS) -> "SiloLedgerDB":
        return SiloLedgerDB(self.ledger, self.budget_epsilon, self.budget_delta, mode=mode)


def _key(release: GaussianRelease) -> tuple:
    return (release.group, float(release.noise_multiplier), BatchSampling(release.sampling).value,
            int(release.batch_size), int(release.dataset_size))


def grouped(releases: Iterable[GaussianRelease]) -> list[GaussianRelease]:
    """``releases`` with identical ones merged (counts add), in order of first appearance."""
    counts: Counter = Counter()
    for r in releases:
        counts[_key(r)] += int(r.count)
    return [GaussianRelease(g, c, z, BatchSampling(s), k, n) for (g, z, s, k, n), c in counts.items() if c]


def as_declared(release: GaussianRelease, plan: Iterable[GaussianRelease]) -> GaussianRelease:
    """``release`` charged as the plan's release of its group, sampling and sizes with the
    largest noise multiplier not above its own, if any (a Gaussian with more noise is
    post-processing of one with less: the declared release dominates), else ``release`` itself."""
    same = [r for r in plan if _key(r)[:1] + _key(r)[2:] == _key(release)[:1] + _key(release)[2:]
            and r.noise_multiplier <= release.noise_multiplier]
    if not same:
        return release
    best = max(same, key=lambda r: r.noise_multiplier)
    return dataclasses.replace(best, count=release.count)


def certify_releases(releases: Iterable[GaussianRelease], delta: float) -> float:
    """silodp's tightest certificate of the adaptive composition of ``releases`` at ``delta``
    (:func:`silodp.accounting.tightest_epsilon` of their
    :func:`~silodp.accounting.releases.releases_event`; 0 for none), memoized per process."""
    return _certified(dump_releases(releases), float(delta))


@functools.lru_cache(maxsize=256)
def _certified(dumped: str, delta: float) -> float:
    from silodp.accounting import REPLACE_ONE, tightest_epsilon
    from silodp.accounting.releases import releases_event

    rows = load_releases(dumped)
    return tightest_epsilon(releases_event(rows), delta, REPLACE_ONE)[0] if rows else 0.0


def bound_releases(releases: Iterable[GaussianRelease], delta: float) -> float:
    """A fast sound upper bound on :func:`certify_releases` (``rdp``, microseconds where the
    tightest certificate of with-replacement batches takes seconds; the tightest when ``rdp``
    cannot account them): for progress reports, never for the budget."""
    from silodp.accounting import REPLACE_ONE, get_accountant
    from silodp.accounting.releases import releases_event

    rows = grouped(releases)
    acc = get_accountant("rdp", REPLACE_ONE)
    event = releases_event(rows)
    return acc.compose(event).get_epsilon(delta) if rows and acc.supports(event) else certify_releases(rows, delta)


def dump_releases(releases: Iterable[GaussianRelease]) -> str:
    """``releases``, grouped, as JSON (:func:`load_releases` reads it back)."""
    return json.dumps([list(_key(r)) + [int(r.count)] for r in grouped(releases)])


def load_releases(text: str) -> list[GaussianRelease]:
    return [GaussianRelease(g, int(c), float(z), BatchSampling(s), int(k), int(n)) for g, z, s, k, n, c in json.loads(text)]


class SiloLedgerDB:
    """The silo's persistent ledger (see the module docstring); ``budget_*`` None: read the budget
    recorded in the file (e.g. by ``silodp ledger``). ``mode``: who computes its releases
    (:data:`MODE_SERVICE` or :data:`MODE_IN_PROCESS`), recorded in the file with the budget."""

    def __init__(self, path: str | Path, budget_epsilon: float | None = None, budget_delta: float | None = None,
                 timeout: float = 120.0, mode: str = MODE_IN_PROCESS) -> None:
        self.path = Path(path)
        self.timeout = float(timeout)
        if budget_epsilon is None:
            if not self.path.is_file():
                raise ValueError(f"path: no silodp ledger at {str(self.path)!r}")
            with self._read() as db:
                meta = dict(db.execute("SELECT key, value FROM meta"))
            try:
                self.budget_epsilon, self.budget_delta = float(meta["budget_epsilon"]), float(meta["budget_delta"])
            except KeyError:
                raise ValueError(f"path: {str(self.path)!r} is not a silodp ledger (no budget recorded)") from None
            self.mode = meta.get("mode", MODE_IN_PROCESS)  # ledgers before the service: in process
            return
        if mode not in (MODE_SERVICE, MODE_IN_PROCESS):
            raise ValueError(f"mode: must be {MODE_SERVICE!r} or {MODE_IN_PROCESS!r}, got {mode!r}")
        self.mode = mode
        self.budget_epsilon = _finite(NODE_BUDGET_EPSILON, budget_epsilon)
        self.budget_delta = float(budget_delta)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with self._write() as db:  # the operator's latest budget is the one in force
            db.executemany("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)",
                           [("budget_epsilon", repr(self.budget_epsilon)), ("budget_delta", repr(self.budget_delta)),
                            ("mode", self.mode)])

    # -- connections -------------------------------------------------------------------------
    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout, isolation_level=None)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA synchronous=FULL")
        db.executescript(_SCHEMA)
        return db

    @contextlib.contextmanager
    def _read(self) -> Iterator[sqlite3.Connection]:
        db = self._connect()
        try:
            yield db
        finally:
            db.close()

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        """One transaction under the file's write lock: committed whole, or rolled back whole."""
        db = self._connect()
        try:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")
        finally:
            db.close()

    # -- reading -----------------------------------------------------------------------------
    @staticmethod
    def _rows(db: sqlite3.Connection, run_id: str | None = None) -> list[GaussianRelease]:
        sql, args = f"SELECT {_RELEASE_COLUMNS} FROM releases", ()
        if run_id is not None:
            sql, args = sql + " WHERE run_id = ?", (str(run_id),)
        return [GaussianRelease(g, c, z, BatchSampling(s), k, n) for g, c, z, s, k, n in db.execute(sql, args)]

    def _cache_key(self, releases: Iterable[GaussianRelease]) -> str:
        return f"eps|{self.budget_delta!r}|{dump_releases(releases)}"

    def _certify(self, db: sqlite3.Connection, releases: Iterable[GaussianRelease]) -> float:
        """The certificate of ``releases`` at the budget's delta, cached in the file by its key."""
        eps = self._cached(db, releases)
        if eps < math.inf:
            return eps
        eps = certify_releases(releases, self.budget_delta)
        if db.in_transaction:
            db.execute("INSERT OR REPLACE INTO cache (key, value) VALUES (?, ?)", (self._cache_key(releases), repr(eps)))
        return eps

    def epsilons(self, run_id: str) -> tuple[float, float]:
        """Run ``run_id``'s epsilon and the silo's over all runs, for progress reports, without
        a tight certification per message: each is the tightest certificate when the file has it
        cached, else the smaller of two sound upper bounds, :func:`bound_releases` and the
        certificate admission computed (the run's whole plan; the past plus the plan, while no
        other run released since). A run that completed its plan reports its exact certificate."""
        run_id = str(run_id)
        with self._read() as db:
            plan = db.execute("SELECT releases, epsilon, after_id FROM plans WHERE run_id = ?", (run_id,)).fetchone()
            caps = [math.inf, math.inf]
            if plan is not None:
                caps[0] = self._cached(db, load_releases(plan[0]))
                foreign = db.execute("SELECT COUNT(*) FROM releases WHERE id > ? AND run_id != ?",
                                     (plan[2], run_id)).fetchone()[0]
                caps[1] = math.inf if foreign else float(plan[1])
            out = []
            for rows, cap in zip((self._rows(db, run_id), self._rows(db)), caps):
                hit = self._cached(db, rows)
                out.append(hit if hit < math.inf else min(cap, bound_releases(rows, self.budget_delta)))
        return out[0], out[1]

    def _cached(self, db: sqlite3.Connection, releases: Iterable[GaussianRelease]) -> float:
        """The cached tightest certificate of ``releases``, or inf."""
        hit = db.execute("SELECT value FROM cache WHERE key = ?", (self._cache_key(releases),)).fetchone()
        return float(hit[0]) if hit else math.inf

    def recorded(self) -> list[GaussianRelease]:
        """Every release recorded, all runs."""
        with self._read() as db:
            return self._rows(db)

    def spent(self) -> float:
        """The certified epsilon of everything this silo ever released."""
        with self._write() as db:
            return self._certify(db, self._rows(db))

    def summary(self) -> dict:
        """``silodp ledger``'s report: budget, spent, each run's releases and epsilon, refusals."""
        with self._read() as db:
            runs = [r for (r,) in db.execute("SELECT run_id FROM releases GROUP BY run_id ORDER BY MIN(id)")]
            out = {"mode": self.mode, "budget_epsilon": self.budget_epsilon, "budget_delta": self.budget_delta,
                   "epsilon_spent": self._certify(db, self._rows(db)),
                   "runs": [{"run_id": r, "releases": sum(x.count for x in self._rows(db, r)),
                             "epsilon": self._certify(db, self._rows(db, r))} for r in runs],
                   "refused": db.execute("SELECT COUNT(*) FROM refusals").fetchone()[0]}
        return out

    def cached(self, key: str, compute: Callable[[], object]) -> object:
        """``compute()`` once per ``key`` on this silo's disk (JSON), e.g. a run's calibration."""
        with self._read() as db:
            hit = db.execute("SELECT value FROM cache WHERE key = ?", (key,)).fetchone()
        if hit:
            return json.loads(hit[0])
        value = compute()
        with self._write() as db:
            db.execute("INSERT OR REPLACE INTO cache (key, value) VALUES (?, ?)", (key, json.dumps(value)))
        return value

    # -- writing -----------------------------------------------------------------------------
    def refuse(self, run_id: str, reason: str) -> SiloRefusal:
        """Record a refusal; returns the exception to raise or report."""
        with self._write() as db:
            db.execute("INSERT INTO refusals (run_id, reason, at) VALUES (?, ?, ?)", (str(run_id), reason, time.time()))
        out = SiloRefusal(reason)
        out.recorded = True
        return out

    def _over(self, spent: float, requested: float, total: float, what: str) -> str:
        return (f"silo refuses {what}: budget epsilon {self.budget_epsilon:g} at delta {self.budget_delta:g}, "
                f"spent {spent:.6g}, requested {requested:.6g} (would certify {total:.6g} in all)")

    def admit(self, run_id: str, plan: list[GaussianRelease], run_cap: float | None = None) -> float:
        """Admit run ``run_id``'s whole declared ``plan`` (what it will release) before its first
        message, or raise (and record) a :class:`SiloRefusal` naming the budget, the spent and the
        requested epsilon. Idempotent: a run admitted before returns its admitted total. Returns
        the certificate of everything recorded plus the plan."""
        run_id, refusal = str(run_id), None
        with self._write() as db:
            row = db.execute("SELECT epsilon FROM plans WHERE run_id = ?", (run_id,)).fetchone()
            if row:
                return float(row[0])
            past = self._rows(db)
            requested = self._certify(db, plan)
            total = self._certify(db, past + list(plan))
            if run_cap is not None and requested > run_cap:
                refusal = (f"silo refuses run {run_id}: its plan certifies epsilon {requested:.6g}, more than "
                           f"this silo allows one run ({run_cap:g})")
            elif total > self.budget_epsilon:
                refusal = self._over(self._certify(db, past), requested, total, f"run {run_id}")
            if refusal is None:
                after = db.execute("SELECT COALESCE(MAX(id), 0) FROM releases").fetchone()[0]
                db.execute("INSERT INTO plans (run_id, releases, epsilon, after_id) VALUES (?, ?, ?, ?)",
                           (run_id, dump_releases(plan), total, after))
                return total
        raise self.refuse(run_id, refusal)

    def release(self, run_id: str, release: GaussianRelease, message: str) -> None:
        """Record ``release`` of run ``run_id`` (message type ``message``) before it leaves the
        silo, or raise (and record) a :class:`SiloRefusal` if it would take the silo past its
        budget; the run must have been admitted."""
        run_id, refusal = str(run_id), None
        with self._write() as db:
            plan = db.execute("SELECT releases, after_id FROM plans WHERE run_id = ?", (run_id,)).fetchone()
            if plan is None:
                refusal = f"silo refuses a {message} message of run {run_id}: the run declared no plan"
            else:
                declared = Counter({_key(r): r.count for r in load_releases(plan[0])})
                mine = Counter({_key(r): r.count for r in grouped(self._rows(db, run_id))})
                foreign = db.execute("SELECT COUNT(*) FROM releases WHERE id > ? AND run_id != ?",
                                     (plan[1], run_id)).fetchone()[0]
                covered = not foreign and mine[_key(release)] + release.count <= declared[_key(release)]
                if not covered:
                    past = self._rows(db)
                    total = self._certify(db, past + [release])
                    if total > self.budget_epsilon:
                        refusal = self._over(self._certify(db, past), self._certify(db, [release]), total,
                                             f"a {message} message of run {run_id}")
            if refusal is None:
                db.execute(f"INSERT INTO releases (run_id, message, {_RELEASE_COLUMNS}, at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                           (run_id, message, *_key(release)[:1], int(release.count), *_key(release)[1:], time.time()))
                return
        raise self.refuse(run_id, refusal)


__all__ = ["ENV_BUDGET_DELTA", "ENV_BUDGET_EPSILON", "ENV_LEDGER_DIR", "MODE_IN_PROCESS", "MODE_SERVICE",
           "NODE_BUDGET_DELTA", "NODE_BUDGET_EPSILON",
           "NODE_LEDGER", "NODE_RUN_EPSILON", "SiloLedgerDB", "SiloPolicy", "SiloRefusal", "as_declared",
           "bound_releases", "certify_releases", "dump_releases", "grouped", "load_releases"]
