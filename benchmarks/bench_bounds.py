"""Points per second of a bound on a grid: one compiled, broadcast evaluation of a 1000 x 1000
grid (thmF.1 over n and epsilon, the grid tests/bounds/test_core.py checks for one call) against
the baseline of evaluating the same bound point by point (``--loop-points`` of them), in the same
run. The target that unit test once timed ("a million points under a second") is the grid's
wall time here, and the ratio is the speed-up over the loop.

    python benchmarks/bench_bounds.py [--repeats 5] [--loop-points 2000]
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np

from silodp.bounds import get_bound

SPIDER = dict(N=10, delta=1e-5, d=50, L=1.0, beta=1.0, Delta=1.0, M=5)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--loop-points", type=int, default=2000)
    args = ap.parse_args(argv)
    b = get_bound("thmF.1")
    ns, eps = np.logspace(2, 6, 1000), np.logspace(-2, 1, 1000)
    grid = {**SPIDER, "n": ns[:, None], "eps": eps}
    b.evaluate(grid)  # compile once, as a session would
    walls = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        b.evaluate(grid)
        walls.append(time.perf_counter() - start)
    grid_s = statistics.median(walls)
    rng = np.random.default_rng(0)
    points = [(float(ns[i]), float(eps[j])) for i, j in rng.integers(0, 1000, (args.loop_points, 2))]
    start = time.perf_counter()
    for n, e in points:
        b.evaluate({**SPIDER, "n": n, "eps": e})
    per_point = (time.perf_counter() - start) / len(points)
    print(f"grid 1000 x 1000: {grid_s:.4f} s (median of {args.repeats}), {1e6 / grid_s:.3g} points/s")
    print(f"point by point: {per_point * 1e6:.1f} us/point, {1 / per_point:.3g} points/s")
    print(f"speed-up of the grid over the loop: {per_point * 1e6 / grid_s:,.0f}x")


if __name__ == "__main__":
    main()
