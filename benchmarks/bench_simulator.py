"""Rounds per second: the vectorized simulator (ghost clipping and the vmap reference) against a
per-silo, per-sample loop, at the paper's MNIST sizes (N = 25, n ~ 1,234, d = 50, MLP with 64
hidden units, batch ~ 600). Run: ``python benchmarks/bench_simulator.py [--loop-rounds 2]``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline_loop import loop_round  # noqa: E402

from silodp.algorithms import Federation, IsrlMBSGD, Problem, mlp  # noqa: E402
from silodp.algorithms.problems import loss_from_outputs  # noqa: E402


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--silos", type=int, default=25)
    ap.add_argument("--n", type=int, default=1234)
    ap.add_argument("--d", type=int, default=50)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--batch", type=int, default=600)
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--loop-rounds", type=int, default=2)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(args.silos, args.n, args.d, generator=gen)
    y = (torch.rand(args.silos, args.n, generator=gen) < 0.5).float()
    fed = Federation(x, y, torch.full((args.silos,), args.n))
    model = mlp(args.d, [args.hidden], 1)
    problem = Problem(model, "logistic", clip=1.0)

    rates = {}
    for method in ("ghost", "materialize"):
        algo = IsrlMBSGD(rounds=args.rounds, batch_size=args.batch, step_size=0.1, sigmas={"sigma": 0.01},
                         grad_method=method, metrics_every=0)
        algo.run(problem, fed, seed=0)  # warm-up
        t = time.perf_counter()
        algo.run(problem, fed, seed=0)
        rates[f"vectorized ({method})"] = args.rounds / (time.perf_counter() - t)

    xs, ys = list(x), list(y)
    w = model.init(gen, dtype=torch.float32)
    t = time.perf_counter()
    for _ in range(args.loop_rounds):
        w = loop_round(model, lambda o, t_: loss_from_outputs("logistic", o, t_), w, xs, ys, args.batch, 1.0, 0.01, 0.1, gen)
    rates["per-silo per-sample loop"] = args.loop_rounds / (time.perf_counter() - t)

    base = rates["per-silo per-sample loop"]
    print(f"N={args.silos} n={args.n} d={args.d} MLP({args.hidden}) K={args.batch} threads={torch.get_num_threads()}")
    print(f"{'implementation':<28}{'rounds/s':>12}{'ratio':>10}")
    for name, r in rates.items():
        print(f"{name:<28}{r:>12.3f}{r / base:>10.1f}")


if __name__ == "__main__":
    main()
