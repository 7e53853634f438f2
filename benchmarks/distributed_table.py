"""The mechanism table of docs/shuffle.md: binomial, Skellam and distributed discrete Gaussian at
equal epsilon over secure-aggregation bit widths (silodp.accounting.distributed).

    PYTHONPATH=. python benchmarks/distributed_table.py [--dimension 1024 --silos 10 --rounds 50 ...]
"""

from __future__ import annotations

import argparse

from silodp.accounting import distributed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dimension", type=int, default=1024)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--silos", type=int, default=10)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--epsilon", type=float, default=3.0)
    ap.add_argument("--delta", type=float, default=1e-5)
    ap.add_argument("--bits", type=int, nargs="+", default=list(range(8, 25, 2)))
    args = ap.parse_args()
    print(f"D = {args.dimension}, C = {args.clip:g}, M = {args.silos}, R = {args.rounds}, "
          f"epsilon = {args.epsilon:g}, delta = {args.delta:g}\n")
    print(distributed.comparison_table(args.dimension, args.clip, args.silos, args.rounds, args.epsilon,
                                       args.delta, args.bits))


if __name__ == "__main__":
    main()
