"""Power of ``assert_dp`` (issue 36): how often it catches a noise bug, and how often it flags the
correct mechanism, over many seeds, per trial count, bug size and estimator.

The mechanism is one Gaussian release of a sensitivity-1 query, claimed (epsilon 1, delta 1e-5)
with the analytic Gaussian noise (Balle & Wang 2018); a bug of size ``cut`` releases with noise
``(1 - cut) * sigma``. Each cell is the fraction of seeds whose audit flags it; cut 0 is the false
alarm rate. The issue's target: at the defaults, a 20% cut is caught in >= 95% of seeds and the
correct mechanism is never flagged.

    python benchmarks/bench_audit_power.py                 # the docs/audit.md table (~2 min)
    python benchmarks/bench_audit_power.py --quick         # 20 seeds, the defaults only
    python benchmarks/bench_audit_power.py --json
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from silodp.accounting import gaussian
from silodp.verify.audit.testing import DEFAULT_TRIALS, audit

EPSILON, DELTA = 1.0, 1e-5


def mechanism(cut: float):
    sigma = gaussian.sigma_for_budget(EPSILON, DELTA) * (1.0 - cut)

    def release(world: int, trials: int, gen: torch.Generator) -> torch.Tensor:
        return world + sigma * torch.randn(trials, 1, generator=gen, dtype=torch.float64)

    return release


def power(cut: float, trials: int, estimator: str, seeds: int) -> dict:
    t = time.perf_counter()
    flagged = sum(audit(mechanism(cut), EPSILON, DELTA, trials, estimator=estimator, seed=s).violation
                  for s in range(seeds))
    return {"cut": cut, "trials": trials, "estimator": estimator, "seeds": seeds, "flagged": flagged,
            "rate": flagged / seeds, "seconds_per_audit": (time.perf_counter() - t) / seeds}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=20)
    ap.add_argument("--quick", action="store_true", help="20 seeds, the defaults only")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    if args.quick:
        grid = [(c, DEFAULT_TRIALS, "auto") for c in (0.0, 0.2)]
        seeds = 20
    else:
        grid = [(c, n, e) for e in ("auto", "clopper-pearson") for n in (20_000, DEFAULT_TRIALS)
                for c in (0.0, 0.1, 0.2, 0.5)]
        seeds = args.seeds
    rows = [power(c, n, e, seeds) for c, n, e in grid]
    if args.json:
        print(json.dumps(rows))
        return
    print("| estimator | trials per world | cut 0 (false alarms) | cut 10% | cut 20% | cut 50% | s per audit |")
    print("|---|---|---|---|---|---|---|")
    for e in dict.fromkeys(r["estimator"] for r in rows):
        for n in dict.fromkeys(r["trials"] for r in rows if r["estimator"] == e):
            cells = {r["cut"]: r for r in rows if r["estimator"] == e and r["trials"] == n}
            fmt = [f"{cells[c]['flagged']}/{cells[c]['seeds']}" if c in cells else "" for c in (0.0, 0.1, 0.2, 0.5)]
            sec = max(r["seconds_per_audit"] for r in cells.values())
            print(f"| {e} | {n:,} | " + " | ".join(fmt) + f" | {sec:.2f} |")
    target = [r for r in rows if r["estimator"] == "auto" and r["trials"] == DEFAULT_TRIALS]
    ok = all(r["rate"] >= 0.95 for r in target if r["cut"] == 0.2) and all(r["flagged"] == 0 for r in target if r["cut"] == 0)
    print(f"\ndefaults ({DEFAULT_TRIALS:,} trials, auto): 20% cut caught >= 95% and no false alarm: {ok}")


if __name__ == "__main__":
    main()
