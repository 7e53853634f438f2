"""Reproduce an experiment end to end: grid -> sweep (resumable) -> selection -> summary, claims.

``reproduce("wbcd", quick=True, store="results.db")`` is what ``silodp reproduce`` and the
notebooks call; ``store_summary(store)`` is what ``silodp plot`` uses.
"""

from __future__ import annotations

from pathlib import Path

from .grid import PRESETS, GridSpec, load_grid, preset
from .report import check_claims, summarize
from .runner import run_grid
from .select import select
from .store import Store


def resolve_grid(name: str | Path | GridSpec, quick: bool = False, data_path: str | None = None) -> GridSpec:
    """A preset name (``wbcd``, ``mnist``, ``cifar10``, ``scaffold-synthetic``), a ``.json`` /
    ``.toml`` grid file, or a :class:`GridSpec` itself."""
    if isinstance(name, GridSpec):
        return name
    if str(name) in PRESETS:
        if str(name) in ("mnist", "cifar10"):
            return preset(str(name), quick=quick, path=data_path)
        if data_path is not None:
            raise ValueError(f"data_path: only the mnist and cifar10 presets read local files, not {name!r}")
        return preset(str(name), quick)
    if Path(name).suffix in (".json", ".toml"):
        return load_grid(name)
    raise ValueError(f"preset: must be one of {PRESETS} or a .json/.toml grid file, got {str(name)!r}")


def store_summary(store: Store, hashes=None, calibration: str = "tight", output: str = "algorithm"):
    """Summary rows (``output``: "algorithm" or "last", see :func:`.select.select`) and claim
    checks of the successful runs in ``store`` (of ``hashes`` only)."""
    records = store.records("ok", hashes)
    rows = summarize(select(records, output))
    last = rows if output == "last" else summarize(select(records, "last"))
    return rows, check_claims(rows, calibration, last)


def reproduce(name: str | Path | GridSpec, quick: bool = False, store: str | Path = "results.db", *,
              workers: int | None = None, scheduler: str | None = None, data_path: str | None = None,
              calibrations: tuple[str, ...] | None = None, max_runs: int | None = None,
              progress: bool | str | None = None, retry_failed: bool = False) -> dict:
    """Run (or resume) a grid into ``store`` and summarize it. Returns a JSON-able payload:
    ``preset``, ``grid``, ``quick``, ``store``, ``runs`` (what the sweep did, the store's
    counts for this grid, and ``worker_failed``: its failed runs whose worker died, which a plain
    rerun retries), ``summary`` (per experiment, calibration, algorithm and epsilon: mean
    and std of the test error over trials at the validation-selected hyperparameters),
    ``claims`` and ``failures`` (a few failed runs' errors)."""
    spec = resolve_grid(name, quick, data_path)
    if calibrations:
        spec = spec.with_calibrations(calibrations)
    with Store(store) as st, st.sweep_lock():  # before expand() imports torch: a second sweep is refused at once
        configs = spec.expand()
        hashes = [c.config_hash for c in configs]
        sweep = run_grid(configs, st, workers=workers, scheduler=scheduler, progress=progress, max_runs=max_runs,
                         retry_failed=retry_failed, desc=spec.name)
        rows, claims = store_summary(st, hashes)
        failures = [{"algorithm": r.config.algorithm, "config_hash": r.config_hash, "error": (r.error or "").splitlines()[0]}
                    for r in st.records("failed", hashes)[:5]]
        counts = st.counts(hashes)
        lost = len(st.worker_failures() & set(hashes))
    return {"preset": str(name) if not isinstance(name, GridSpec) else spec.name, "grid": spec.name, "quick": quick,
            "store": str(store), "runs": {**sweep.as_dict(), "stored": counts, "worker_failed": lost},
            "summary": rows, "claims": claims,
            "failures": failures, "notes": spec.notes}
