"""Regenerate docs/figures/scaffold_headline.png (the full grid of docs/scaffold.md, a few minutes
on 2 cores): python docs/figures/make_scaffold_figures.py [--quick] [--total-steps N] [--non-private]
[--epsilon E] [--seeds S ...] [--out PATH]

Prints the per-run rows and the summary table as JSON lines.
"""

import argparse
import dataclasses
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from silodp.algorithms.scaffold_headline import QUICK, HeadlineConfig, headline_figure, run_headline, summarize  # noqa: E402

HERE = Path(__file__).parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--quick", action="store_true")
    p.add_argument("--total-steps", type=int, default=None)
    p.add_argument("--non-private", action="store_true", help="sigma_g = 0 (the client-drift reference)")
    p.add_argument("--epsilon", type=float, default=None)
    p.add_argument("--seeds", type=int, nargs="*", default=None)
    p.add_argument("--out", default=str(HERE / "scaffold_headline.png"))
    args = p.parse_args()
    cfg = QUICK if args.quick else HeadlineConfig()
    if args.total_steps:
        cfg = dataclasses.replace(cfg, total_steps=args.total_steps)
    if args.epsilon is not None:
        cfg = dataclasses.replace(cfg, epsilon=args.epsilon)
    if args.non_private:
        cfg = dataclasses.replace(cfg, epsilon=None)
    if args.seeds is not None:
        cfg = dataclasses.replace(cfg, seeds=tuple(args.seeds))
    rows = run_headline(cfg, progress=lambda r: print(json.dumps(r), flush=True))
    summary = summarize(rows)
    for entry in summary:
        print(json.dumps({"summary": entry}), flush=True)
    headline_figure(summary).savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
