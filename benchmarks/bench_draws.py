"""The simulator's draws: CPU time of :mod:`silodp.algorithms.draws` against torch's own
``torch.randn`` / ``torch.rand`` (the baseline, measured in the same process), at the sizes one
round of ``bench_simulator.py`` draws: the noise ``randn [N, d]`` (d = 3,329, the MLP 50-64-1's
parameters, float32) and the minibatch keys ``rand [N, n]`` (n = 1,234, float32), N = 25 and 100,
and the with-replacement uniforms ``rand [N, K]`` (K = 600, float64); and the without-replacement
sampler's permutation of its keys, :func:`draws.argsort_rows` against ``keys.argsort(dim=1)``.

One torch thread; each repetition times torch's call and the compiled draw back to back on two
generators from one seed (interleaved: both saw the same load), and the medians over repetitions
are kept; every repetition also checks the two draws' values and the generators' states equal bit
for bit (the module's guarantee, which the ratio would otherwise not show). The compiled passes
are loaded (or compiled) and self-checked before timing.

With ``--rounds N1,N2``: also one steady MB-SGD round of ``bench_simulator.py`` (its data, model and
noise; ``silodp_round``) at those N with the compiled draws and with torch's
(:func:`silodp.algorithms.draws.torch_draws`), interleaved run by run, medians of ``--round-reps``.

    python benchmarks/bench_draws.py [--reps 200] [--rounds 25,100] [--round-reps 15] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import torch

from silodp.algorithms import draws

CASES = [("randn", (25, 3329), torch.float32), ("randn", (100, 3329), torch.float32),
         ("rand", (25, 1234), torch.float32), ("rand", (100, 1234), torch.float32),
         ("rand", (25, 600), torch.float64), ("rand", (100, 600), torch.float64)]


def measure(kind: str, shape: tuple[int, ...], dtype: torch.dtype, reps: int) -> dict:
    """Medians of torch's and the compiled draw's CPU milliseconds, interleaved; equality checked."""
    baseline = torch.randn if kind == "randn" else torch.rand
    compiled = getattr(draws, kind)
    g_torch, g_ours = torch.Generator().manual_seed(1), torch.Generator().manual_seed(1)
    theirs, ours = [], []
    for _ in range(reps):
        t0 = time.process_time()
        want = baseline(shape, generator=g_torch, dtype=dtype)
        t1 = time.process_time()
        got = compiled(shape, g_ours, dtype)
        t2 = time.process_time()
        theirs.append(t1 - t0)
        ours.append(t2 - t1)
        if not (torch.equal(got, want) and torch.equal(g_ours.get_state(), g_torch.get_state())):
            raise SystemExit(f"{kind} {shape} {dtype}: the compiled draw differs from torch's")
    a, b = statistics.median(theirs) * 1e3, statistics.median(ours) * 1e3
    return {"kind": kind, "shape": list(shape), "dtype": str(dtype).replace("torch.", ""), "torch_ms": a,
            "draws_ms": b, "ratio": a / b}


def rounds(silos: int, reps: int) -> dict:
    """Medians of the steady MB-SGD round's CPU milliseconds with torch's draws and the compiled ones."""
    import bench_simulator as sim

    from silodp.algorithms import Federation

    args = argparse.Namespace(n=1234, d=50, hidden=64, batch=600, rounds=7)
    x, y = sim.data(silos, args.n, args.d, "cpu")
    fed = Federation(x, y, torch.full((silos,), args.n))
    algo, beta = sim.silodp_algorithms(args)["silodp mb-sgd (ghost)"]
    times: dict[str, list[float]] = {"torch": [], "draws": []}
    for rep in range(reps + 1):  # the first a warm-up
        with draws.torch_draws():
            theirs = sim.silodp_round(algo, beta, fed, args, "cpu")[0]
        ours = sim.silodp_round(algo, beta, fed, args, "cpu")[0]
        if rep:
            times["torch"].append(theirs)
            times["draws"].append(ours)
    a, b = statistics.median(times["torch"]) * 1e3, statistics.median(times["draws"]) * 1e3
    return {"silos": silos, "torch_ms": a, "draws_ms": b, "saved_ms": a - b, "ratio": a / b}


def measure_order(silos: int, n: int, reps: int) -> dict:
    """Medians of ``keys.argsort(dim=1)`` and :func:`draws.argsort_rows` on the sampler's keys ``[N, n]``
    (fresh keys each repetition, the two interleaved, equality checked)."""
    g = torch.Generator().manual_seed(2)
    theirs, ours = [], []
    for _ in range(reps):
        keys = torch.rand(silos, n, generator=g)
        t0 = time.process_time()
        want = keys.argsort(dim=1)
        t1 = time.process_time()
        got = draws.argsort_rows(keys)
        t2 = time.process_time()
        theirs.append(t1 - t0)
        ours.append(t2 - t1)
        if not torch.equal(got, want):
            raise SystemExit(f"argsort_rows [{silos}, {n}] differs from torch's argsort")
    a, b = statistics.median(theirs) * 1e3, statistics.median(ours) * 1e3
    return {"kind": "argsort_rows", "shape": [silos, n], "dtype": "float32", "torch_ms": a, "draws_ms": b,
            "ratio": a / b}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--reps", type=int, default=200)
    ap.add_argument("--rounds", default="", help="comma-separated N: also the MB-SGD round with and without")
    ap.add_argument("--round-reps", type=int, default=15)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    for kind, shape, dtype in CASES:  # load or compile, and self-check, before timing
        getattr(draws, kind)(shape, torch.Generator(), dtype)
    rows = [measure(kind, shape, dtype, args.reps) for kind, shape, dtype in CASES]
    rows += [measure_order(silos, 1234, max(10, args.reps // 4)) for silos in (25, 100)]
    print(f"one torch thread; {args.reps} interleaved repetitions (medians); load "
          + " ".join(f"{v:.1f}" for v in os.getloadavg()))
    print(f"draws.status(): {draws.status()}\n")
    print("| draw | shape | dtype | torch CPU ms | draws CPU ms | torch / draws |\n|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['kind']} | {'x'.join(map(str, r['shape']))} | {r['dtype']} | {r['torch_ms']:.4f} | "
              f"{r['draws_ms']:.4f} | {r['ratio']:.2f}x |")
    round_rows = [rounds(int(n), args.round_reps) for n in args.rounds.split(",") if n]
    if round_rows:
        print(f"\nsteady MB-SGD round (bench_simulator.py's), {args.round_reps} interleaved runs (medians); load "
              + " ".join(f"{v:.1f}" for v in os.getloadavg()))
        print("\n| N | torch's draws CPU ms | compiled draws CPU ms | saved ms | ratio |\n|---|---|---|---|---|")
        for r in round_rows:
            print(f"| {r['silos']} | {r['torch_ms']:.3f} | {r['draws_ms']:.3f} | {r['saved_ms']:.3f} | {r['ratio']:.3f}x |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"rows": rows, "rounds": round_rows, "status": draws.status(), "reps": args.reps,
                       "load": os.getloadavg()}, fh, indent=1)


if __name__ == "__main__":
    main()
