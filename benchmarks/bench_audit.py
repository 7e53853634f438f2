"""Privacy audits: speed of the vectorized game against a loop over real ``run`` calls (the
baseline, measured in the same run), the mutation suite's detection rates, and docs figures.

    python benchmarks/bench_audit.py                    # trials/second, vectorized vs loop
    python benchmarks/bench_audit.py --detection 50     # detection-rate table (docs/audit.md)
    python benchmarks/bench_audit.py --figures docs/figures
    python benchmarks/bench_audit.py --quick            # small versions of all three
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from silodp.verify.audit import (
    MUTATION_SCENARIOS,
    MUTATION_TRIALS,
    SCENARIOS,
    AlgorithmGame,
    audit_gaussian,
    detection_rate,
    judge,
)


def speed(names: list[str], trials: int, loop_trials: int) -> list[dict]:
    """Transcript pairs per second: vectorized ``collect`` vs one real ``run`` per trial."""
    rows = []
    for name in names:
        g = AlgorithmGame(name, epsilon=2.0).setup()
        g.collect(1000)  # warm-up
        t = time.perf_counter()
        g.collect(trials, seed=1)
        vec = trials / (time.perf_counter() - t)
        t = time.perf_counter()
        g.collect_runs(loop_trials, seed=1)
        loop = loop_trials / (time.perf_counter() - t)
        rows.append({"algorithm": name, "releases": len(g.plan_.releases), "vectorized_per_s": vec,
                     "loop_per_s": loop, "ratio": vec / loop})
    return rows


def detection(repeats: int, trials_scale: float = 1.0) -> list[dict]:
    out = []
    for name in MUTATION_SCENARIOS:
        t = time.perf_counter()
        row = detection_rate(name, repeats, max(1000, int(MUTATION_TRIALS[name] * trials_scale)))
        row["seconds"] = time.perf_counter() - t
        out.append(row)
        print(json.dumps(row), flush=True)
    return out


def figures(outdir: Path, trials: int) -> None:
    from silodp.verify.audit.plots import plot_brackets, plot_gaussian_tightness

    outdir.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in SCENARIOS:
        g = AlgorithmGame(name, epsilon=2.0).setup()
        r = judge(g.collect(trials, 1), g.claim, name, seed=1)
        rows.append({"label": name, "epsilon_claimed": r.epsilon_claimed,
                     **{f"epsilon_lower_{k.replace('-', '_')}": b.epsilon for k, b in r.bounds.items()}})
    for name, sc in MUTATION_SCENARIOS.items():
        g = AlgorithmGame(sc, epsilon=2.0, mutation=name).setup()
        r = judge(g.collect(MUTATION_TRIALS[name], 1), g.claim, name, seed=1)
        rows.append({"label": f"{sc.algorithm} + {name}", "epsilon_claimed": r.epsilon_claimed,
                     **{f"epsilon_lower_{k.replace('-', '_')}": b.epsilon for k, b in r.bounds.items()}})
    fig = plot_brackets(rows, f"Claims vs audits, {trials:,}+ trials per world")
    fig.savefig(outdir / "audit_claims_vs_audits.png", dpi=130)
    gauss = []
    for z in (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0):
        r = audit_gaussian(z, 1e-5, 100_000, seed=0)
        gauss.append({"noise_multiplier": z, "epsilon_claimed": r.epsilon_claimed, "trials": 100_000,
                      **{f"epsilon_lower_{k.replace('-', '_')}": b.epsilon for k, b in r.bounds.items()}})
    plot_gaussian_tightness(gauss).savefig(outdir / "audit_gaussian_tightness.png", dpi=130)
    print(json.dumps({"brackets": rows, "gaussian": gauss}))


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=100_000)
    ap.add_argument("--loop-trials", type=int, default=100)
    ap.add_argument("--detection", type=int, default=0, metavar="REPEATS")
    ap.add_argument("--figures", type=Path, default=None)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.trials, args.loop_trials = 20_000, 20
    names = ["isrl-prox-sgd", "isrl-spider", "isrl-prox-svrg"] if not args.quick else ["isrl-prox-sgd"]
    print(f"{'algorithm':<16}{'releases':>9}{'vectorized/s':>15}{'loop/s':>10}{'ratio':>9}")
    for r in speed(names, args.trials, args.loop_trials):
        print(f"{r['algorithm']:<16}{r['releases']:>9}{r['vectorized_per_s']:>15,.0f}{r['loop_per_s']:>10.1f}"
              f"{r['ratio']:>8,.0f}x")
    if args.detection or args.quick:
        rows = detection(args.detection or 2, 0.2 if args.quick else 1.0)
        print("\n| mutation | algorithm | claimed eps | trials/world | CP detected | GDP detected | min CP bound |")
        print("|---|---|---|---|---|---|---|")
        for r in rows:
            print(f"| `{r['mutation']}` | {r['algorithm']} | {r['epsilon_claimed']:.3f} | {r['trials']:,} | "
                  f"{r['rates']['clopper-pearson']:.0%} | {r['rates']['gdp']:.0%} | {r['epsilon_lower_min']:.2f} |")
    if args.figures is not None:
        figures(args.figures, args.trials)


if __name__ == "__main__":
    main()
