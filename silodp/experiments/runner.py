"""The sweep runner: run the configs a store does not hold yet, locally or on a Dask cluster.

``run_grid(configs, store)`` skips every run already recorded (``ok``; ``failed`` and ``skipped``
too unless ``retry_failed``; runs skipped because their algorithm was not registered are retried
once it is), calibrates each distinct transcript once (:mod:`.execute`), then executes the rest in
chunks on

* the calling process (``workers=1``),
* a local process pool (``workers=K``, default: all CPUs; one torch thread per worker), or
* a Dask distributed cluster (``scheduler="tcp://host:port"``; its workers need silodp installed).

Results come back to this process, which writes each run in its own transaction, so killing the
sweep at any point loses at most the runs in flight, never a recorded one, and never writes a run
twice. A failing run is recorded with its error and the grid goes on; a run whose worker died
(``worker: BrokenProcessPool ...``) is retried by the next call, failures or not. A sweep holds the
store's lock (:meth:`.store.Store.sweep_lock`): a second sweep on the same store is refused. A
cached calibration is re-certified before use (:func:`.execute.recertify`); one that does not
certify what it says (tampered, or made by another accounting version) is recalibrated, counted
in ``recalibrated`` and logged. Progress (:mod:`silodp.progress`) shows runs done, of the total,
the ETA and the failures, and the calibration searches.
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import logging
import multiprocessing
import os
import subprocess
import time
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor
from concurrent.futures import wait as futures_wait
from concurrent.futures.process import BrokenProcessPool
from pathlib import Path
from typing import Iterable

from . import execute as ex
from .grid import RunConfig
from .store import WORKER_ERROR, Store

log = logging.getLogger(__name__)


@functools.lru_cache(maxsize=1)
def code_version() -> str:
    """``silodp.__version__`` plus the git commit of the checkout (``+dirty`` with local changes)."""
    import silodp

    version = silodp.__version__
    root = Path(silodp.__file__).resolve().parents[1]
    try:
        sha = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=root, capture_output=True,
                             text=True, timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--", "silodp"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return version
    return f"{version}+g{sha}{'.dirty' if dirty else ''}" if sha else version


@dataclasses.dataclass
class SweepReport:
    """What :func:`run_grid` did."""

    total: int
    already_done: int = 0
    ran: int = 0
    ok: int = 0
    failed: int = 0
    skipped: int = 0
    calibrations: int = 0
    recalibrated: int = 0
    stopped: bool = False
    wall_s: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


# -- executors ------------------------------------------------------------------------------------
class _Task:
    """A deferred call for the inline executor."""

    def __init__(self, fn, arg):
        self.fn, self.arg = fn, arg


class InlineExecutor:
    """Runs each task in the calling process when waited on (``workers=1``)."""

    window = 1

    def submit(self, fn, arg):
        return _Task(fn, arg)

    def wait(self, handles):
        task = next(iter(handles))
        try:
            return [(task, task.fn(task.arg), None)]
        except Exception as exc:  # pragma: no cover - tasks catch their own errors
            return [(task, None, exc)]

    def close(self):
        pass


def _watch_parent(parent: int, every: float = 1.0) -> None:
    """Pool-worker initializer: exit when the sweep's process is gone (killed sweeps leave no
    orphaned workers behind)."""
    import threading

    def watch():
        while os.getppid() == parent:
            time.sleep(every)
        os._exit(1)

    threading.Thread(target=watch, daemon=True).start()


class PoolExecutor:
    """A local process pool (spawned workers: no fork after torch has started threads)."""

    def __init__(self, workers: int):
        self.workers = workers
        self.window = 2 * workers
        self._start()

    def _start(self):
        self.pool = ProcessPoolExecutor(self.workers, mp_context=multiprocessing.get_context("spawn"),
                                        initializer=_watch_parent, initargs=(os.getpid(),))

    def submit(self, fn, arg):
        """Submit to the pool, or to a fresh one when a worker has died (the dead pool's tasks
        fail with ``BrokenProcessPool`` and are recorded as worker failures, retried on resume)."""
        try:
            return self.pool.submit(fn, arg)
        except BrokenProcessPool:
            self.pool.shutdown(wait=False)
            self._start()
            return self.pool.submit(fn, arg)

    def wait(self, handles):
        done, _ = futures_wait(handles, return_when=FIRST_COMPLETED)
        return [(f, None if f.exception() else f.result(), f.exception()) for f in done]

    def close(self):
        self.pool.shutdown(wait=True, cancel_futures=True)


class DaskExecutor:
    """Tasks on a Dask distributed cluster (``distributed.Client(address)``)."""

    def __init__(self, address: str, timeout: float = 30.0):
        try:
            from distributed import Client
        except ImportError as exc:  # pragma: no cover - distributed is a dev dependency
            raise ValueError("scheduler: the Dask path needs the 'distributed' package") from exc
        try:
            self.client = Client(address, timeout=timeout)
        except (OSError, TimeoutError) as exc:
            raise ValueError(f"scheduler: cannot reach a Dask scheduler at {address!r}: {exc}") from exc
        self.window = max(2, 2 * sum(self.client.nthreads().values()))

    def submit(self, fn, arg):
        return self.client.submit(fn, arg, pure=False)

    def wait(self, handles):
        from distributed import wait

        out = []
        for f in wait(list(handles), return_when="FIRST_COMPLETED").done:
            if f.status == "finished":
                out.append((f, f.result(), None))
                continue
            try:
                exc = f.exception()
            except Exception as err:  # cancelled futures raise instead of returning
                exc = err
            out.append((f, None, exc or RuntimeError(f"dask future {f.status}")))
        return out

    def close(self):
        self.client.close()


def make_executor(workers: int | None = None, scheduler: str | None = None):
    if scheduler:
        return DaskExecutor(scheduler)
    workers = (os.cpu_count() or 1) if workers is None else int(workers)
    if workers < 1:
        raise ValueError(f"workers: must be >= 1, got {workers}")
    return InlineExecutor() if workers == 1 else PoolExecutor(workers)


_END = object()


def _drain(executor, fn, items: Iterable, on_done) -> None:
    """For each ``(payload, context)`` of ``items`` (pulled lazily), run ``fn(payload)`` with at
    most ``executor.window`` in flight; call ``on_done(context, result, exception)`` as each ends."""
    items = iter(items)
    inflight = {}
    exhausted = False
    while True:
        while not exhausted and len(inflight) < executor.window:
            item = next(items, _END)
            if item is _END:
                exhausted = True
                break
            payload, context = item
            inflight[executor.submit(fn, payload)] = context
        if not inflight:
            return
        for handle, result, exc in executor.wait(inflight):
            on_done(inflight.pop(handle), result, exc)


# -- the sweep ------------------------------------------------------------------------------------
def _sort_key(cfg: RunConfig):
    return (cfg.dataset, repr(cfg.data), repr(cfg.partition), cfg.trial, cfg.algorithm, cfg.calibration, cfg.epsilon or 0.0,
            cfg.silos_per_round or 0, cfg.rounds, cfg.param("period") or 0, cfg.param("local_steps") or 0, cfg.step_size, cfg.clip)


def _plan(pending: list[RunConfig]):
    """Calibration request (or an immediate outcome) of every pending run, prepared once per
    group of runs that differ only in step size and clip, in the sweep's run order (one trial's
    data after another: a grid's trials are its innermost loop, and cycling through more trials
    than the loader's cache holds would reload every dataset for every group)."""
    requests, outcomes, groups = {}, {}, collections.defaultdict(list)
    for cfg in sorted(pending, key=_sort_key):
        groups[dataclasses.replace(cfg, step_size=1.0, clip=1.0)].append(cfg)
    for key_cfg, members in groups.items():
        try:
            request = ex.calibration_request(key_cfg)
        except ex.SkipRun as exc:
            outcomes.update({c: {"status": "skipped", "error": str(exc)} for c in members})
            continue
        except Exception as exc:
            outcomes.update({c: {"status": "failed", "error": f"{type(exc).__name__}: {exc}"} for c in members})
            continue
        if request is not None:
            requests.update({c: request for c in members})
    return requests, outcomes


def _registered() -> set[str]:
    from silodp.algorithms.registry import ALGORITHMS

    return set(ALGORITHMS)


def run_grid(configs: Iterable[RunConfig], store: Store, *, workers: int | None = None, scheduler: str | None = None,
             progress: bool | str | None = None, max_runs: int | None = None, retry_failed: bool = False,
             chunk_size: int | None = None, desc: str = "sweep") -> SweepReport:
    """Run every config of ``configs`` that ``store`` does not hold; see the module docstring.

    ``progress``: a :mod:`silodp.progress` mode, False (none), or True / None (a bar with total and
    ETA when stderr is a terminal, else a line every 10 s). ``max_runs``: stop after
    executing that many runs (the rest stay pending; a later call resumes).
    """
    configs = list(dict.fromkeys(configs))
    if max_runs is not None and int(max_runs) < 0:
        raise ValueError(f"max_runs: must be >= 0, got {max_runs}")
    with store.sweep_lock():
        return _run_grid(configs, store, workers, scheduler, progress, max_runs, retry_failed, chunk_size, desc)


def _cached_calibrations(store: Store, keyed: dict, report: SweepReport) -> dict:
    """The store's calibrations of ``keyed`` requests that re-certify (see the module docstring)."""
    cached = {}
    stored = store.calibration_rows()
    for key, request in keyed.items():
        made, result = stored.get(key, ({}, {}))
        if result.get("status") not in ("ok", "skipped"):
            continue
        problem = ex.recertify(request, result, made)
        if problem is None:
            cached[key] = result
        else:
            report.recalibrated += 1
            log.warning("store: the cached calibration %s for %s does not re-certify (%s); recalibrating",
                        key, request["algorithm"], problem)
    return cached


def _run_grid(configs, store, workers, scheduler, progress, max_runs, retry_failed, chunk_size, desc) -> SweepReport:
    start = time.perf_counter()
    statuses = store.statuses()
    final = ("ok",) if retry_failed else ("ok", "failed", "skipped")
    registered = _registered()
    unregistered = {h for h in store.unregistered_skips()} if not retry_failed else set()
    lost = store.worker_failures()
    pending = [c for c in configs if statuses.get(c.config_hash) not in final or c.config_hash in lost
               or (c.config_hash in unregistered and c.algorithm in registered)]
    report = SweepReport(total=len(configs), already_done=len(configs) - len(pending))
    if not pending:
        report.wall_s = time.perf_counter() - start
        return report
    version = code_version()
    from silodp.progress import Progress, as_mode

    bar = Progress(len(pending), desc, "run", mode=as_mode(progress))

    def record(cfg: RunConfig, outcome: dict) -> None:
        store.record(cfg, outcome, version)
        setattr(report, outcome["status"], getattr(report, outcome["status"]) + 1)
        bar.update(1)
        bar.set_postfix(failed=report.failed, skipped=report.skipped)

    executor = make_executor(workers, scheduler)
    try:
        requests, outcomes = _plan(pending)
        for cfg, outcome in outcomes.items():
            record(cfg, outcome)
        keyed = {ex.request_key(r): r for r in requests.values()}
        cached = _cached_calibrations(store, keyed, report)
        missing = [(k, r) for k, r in keyed.items() if k not in cached]

        def calibrated(context, result, exc):
            key, request = context
            cached[key] = result if exc is None else {"status": "failed", "error": f"calibration: {exc}"}
            store.record_calibration(key, request, cached[key], version)
            report.calibrations += 1

        with Progress(len(missing), f"{desc}: calibrations", "search", mode=as_mode(progress)) as searches:
            def counted(context, result, exc):
                calibrated(context, result, exc)
                searches.update(1)

            _drain(executor, ex.calibrate_request, ((r, (k, r)) for k, r in missing), counted)

        runnable = []
        for cfg in sorted((c for c in pending if c not in outcomes), key=_sort_key):
            cal = cached[ex.request_key(requests[cfg])] if cfg in requests else None
            if cal is not None and cal["status"] != "ok":
                record(cfg, {"status": cal["status"], "error": cal.get("error")})
            else:
                runnable.append((cfg, cal))
        if max_runs is not None:
            report.stopped = len(runnable) > int(max_runs)
            runnable = runnable[: int(max_runs)]
        size = chunk_size or max(1, min(64, len(runnable) // (8 * executor.window)))
        chunks = [runnable[i:i + size] for i in range(0, len(runnable), size)]

        def finished(chunk, results, exc):
            if exc is not None:
                results = [{"status": "failed", "error": f"{WORKER_ERROR}{type(exc).__name__}: {exc}"}] * len(chunk)
            for (cfg, _), outcome in zip(chunk, results):
                record(cfg, outcome)
                report.ran += 1

        _drain(executor, ex.run_chunk, (([(c.to_dict(), cal) for c, cal in chunk], chunk) for chunk in chunks), finished)
    finally:
        executor.close()
        bar.close()
    report.wall_s = time.perf_counter() - start
    return report
