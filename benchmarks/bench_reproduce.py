"""Wall time of a full paper preset (default: ``wbcd``, 51,600 runs) on K local workers, against a
serial baseline measured in the same run.

Baseline: a stratified random sample of the grid's runs executed one after another in this process
(noise calibrated beforehand, not timed) gives seconds per run for each algorithm, hence the serial
time of the whole grid. Then the whole preset runs from scratch into a fresh store with ``--workers``
processes (calibration included). Reported: wall time, runs per second, the speed-up over the
serial estimate, and whether the preset met the target (10 minutes by default). The machine's load
average is printed too: on a shared machine other processes slow the sweep down.

Run: ``python benchmarks/bench_reproduce.py [--preset wbcd] [--workers 2] [--sample 300] [--store PATH]``
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import random
import tempfile
import time
from pathlib import Path

from silodp.experiments import Store, preset, run_grid, store_summary
from silodp.experiments import execute as ex


def serial_seconds_per_run(configs, sample: int, seed: int = 0) -> dict[str, float]:
    """Mean seconds per run of each algorithm, from ``sample`` runs executed in this process."""
    by_alg = collections.defaultdict(list)
    for c in configs:
        by_alg[c.algorithm].append(c)
    rng = random.Random(seed)
    per = max(1, sample // len(by_alg))
    out = {}
    for alg, cs in sorted(by_alg.items()):
        chosen = rng.sample(cs, min(per, len(cs)))
        cals = {}
        payload = []
        for c in chosen:
            request = ex.calibration_request(c)
            if request is not None:
                key = ex.request_key(request)
                cals.setdefault(key, ex.calibrate_request(request))
                payload.append((c.to_dict(), cals[key]))
            else:
                payload.append((c.to_dict(), None))
        ex.run_chunk(payload[:2])  # warm-up (imports, data)
        start = time.perf_counter()
        results = ex.run_chunk(payload)
        out[alg] = (time.perf_counter() - start) / len(payload)
        assert all(r["status"] == "ok" for r in results), [r.get("error") for r in results if r["status"] != "ok"][:3]
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="wbcd")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--sample", type=int, default=300, help="runs in the serial baseline")
    ap.add_argument("--store", default=None, help="results store (default: a fresh temporary file)")
    ap.add_argument("--target-s", type=float, default=600.0)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)

    spec = preset(args.preset)
    configs = spec.expand()
    counts = collections.Counter(c.algorithm for c in configs)
    load_before = os.getloadavg()
    per_run = serial_seconds_per_run(configs, args.sample)
    serial_estimate = sum(counts[a] * per_run[a] for a in counts)

    store = Path(args.store) if args.store else Path(tempfile.mkdtemp()) / "bench.db"
    if store.exists():
        raise SystemExit(f"--store: {store} exists; the benchmark needs a fresh store")
    start = time.perf_counter()
    with Store(store) as st:
        report = run_grid(configs, st, workers=args.workers, progress=not args.json, desc=spec.name)
        wall = time.perf_counter() - start
        worker_seconds = sum(r.wall_s or 0.0 for r in st.records(None))
        rows, _ = store_summary(st)
    load_after = os.getloadavg()
    result = {
        "preset": spec.name, "runs": len(configs), "runs_by_algorithm": dict(counts), "workers": args.workers,
        "cpus": os.cpu_count(), "wall_s": wall, "runs_per_s": len(configs) / wall,
        "ok": report.ok, "failed": report.failed, "skipped": report.skipped, "calibrations": report.calibrations,
        "serial_seconds_per_run": per_run, "serial_estimate_s": serial_estimate,
        "speedup_vs_serial_estimate": serial_estimate / wall, "worker_seconds": worker_seconds,
        "target_s": args.target_s, "met_target": wall <= args.target_s,
        "load_average_before": load_before, "load_average_after": load_after, "store": str(store),
        "summary_rows": len(rows),
    }
    if args.json:
        print(json.dumps(result))
        return
    print(f"{spec.name}: {len(configs)} runs {dict(counts)}")
    print(f"serial baseline (s/run): " + ", ".join(f"{a} {t * 1000:.1f} ms" for a, t in per_run.items()))
    print(f"serial estimate: {serial_estimate:.0f} s; {args.workers} workers on {os.cpu_count()} CPUs: "
          f"{wall:.0f} s wall ({len(configs) / wall:.1f} runs/s), speed-up {serial_estimate / wall:.2f}x")
    print(f"ok {report.ok}, failed {report.failed}, skipped {report.skipped}, calibrations {report.calibrations}")
    print(f"target {args.target_s:.0f} s: {'met' if wall <= args.target_s else 'MISSED'}; "
          f"load average before {load_before[0]:.2f}, after {load_after[0]:.2f}; store {store}")


if __name__ == "__main__":
    main()
