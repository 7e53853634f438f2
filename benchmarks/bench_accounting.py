"""Calibrated noise and wall time: silodp vs dp-accounting (RDP, PLD) vs Opacus, in one run.

Each row calibrates the noise multiplier of a Poisson-subsampled Gaussian (add/remove relation,
the one all three libraries support) for a target (epsilon, delta=1e-5) over ``steps`` steps.
Reported: the multipliers, silodp-PLD's noise relative to dp-accounting's PLD calibration (target
within 0.5%), and the speed-up of silodp's PLD calibration over dp-accounting's (target >= 10x).

    python benchmarks/bench_accounting.py [--quick] [--json out.json]
    python benchmarks/bench_accounting.py --mechanisms [--quick]   # bench_mechanisms.py: 30 mechanisms
    python benchmarks/bench_accounting.py --sweep                  # bench_mechanisms.py --sweep: the 1% sweep
    python benchmarks/bench_accounting.py --ledger [10,100,1000]    # k distinct releases composed

``--ledger``: the epsilon at delta 1e-5 of a ledger of k *distinct* Poisson-subsampled Gaussians
(q = 0.01, noise multipliers 1 + i / k) by silodp's PLD accountant (identical releases grouped, the
distinct ones merged in a balanced tree: silodp.accounting.pld_tree) and by dp-accounting's, CPU
seconds of each in the same process (targets: 1000 releases under 2 s, >= 3x dp-accounting);
``--reference-up-to K`` skips dp-accounting above K releases (it takes minutes at 1000).
"""

from __future__ import annotations

import one_thread  # noqa: F401  (first: numpy's BLAS on one thread)
import argparse
import json
import time
import warnings

import dp_accounting as dpa
from dp_accounting import mechanism_calibration

from silodp.accounting import ADD_OR_REMOVE_ONE, GaussianDpEvent, PoissonSampledDpEvent, SelfComposedDpEvent, calibrate

GRID = [(q, steps, eps) for q in (0.001, 0.01, 0.1) for steps in (100, 1000, 10000) for eps in (0.5, 2.0, 8.0)]
QUICK = [(0.01, 1000, 1.0), (0.1, 100, 2.0)]


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def row(q: float, steps: int, eps: float, delta: float = 1e-5) -> dict:
    fn = lambda z: SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), steps)
    ours, t_ours = timed(lambda: calibrate(fn, eps, delta, "pld", ADD_OR_REMOVE_ONE).noise_multiplier)
    ours_rdp, t_ours_rdp = timed(lambda: calibrate(fn, eps, delta, "rdp", ADD_OR_REMOVE_ONE).noise_multiplier)
    theirs = lambda z: dpa.SelfComposedDpEvent(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)), steps)  # noqa: E731
    pld, t_pld = timed(lambda: mechanism_calibration.calibrate_dp_mechanism(dpa.pld.PLDAccountant, theirs, eps, delta))
    rdp, t_rdp = timed(lambda: mechanism_calibration.calibrate_dp_mechanism(dpa.rdp.RdpAccountant, theirs, eps, delta))
    try:
        from opacus.accountants.utils import get_noise_multiplier
        opacus, t_opacus = timed(lambda: get_noise_multiplier(target_epsilon=eps, target_delta=delta,
                                                              sample_rate=q, steps=steps, accountant="rdp"))
    except ImportError:  # opacus is a dev extra
        opacus, t_opacus = float("nan"), float("nan")
    return {"q": q, "steps": steps, "epsilon": eps,
            "silodp_pld": ours, "silodp_rdp": ours_rdp, "dp_accounting_pld": pld, "dp_accounting_rdp": rdp,
            "opacus_rdp": opacus, "noise_vs_dp_accounting_pld": ours / pld - 1.0,
            "speedup_vs_dp_accounting_pld": t_pld / t_ours,
            "seconds": {"silodp_pld": t_ours, "silodp_rdp": t_ours_rdp, "dp_accounting_pld": t_pld,
                        "dp_accounting_rdp": t_rdp, "opacus_rdp": t_opacus}}


def ledger_row(k: int, reference: bool, delta: float = 1e-5, q: float = 0.01) -> dict:
    """Both accountants on k distinct Poisson Gaussians; CPU seconds (``time.process_time``)."""
    from silodp.accounting import ComposedDpEvent
    from silodp.accounting.accountants import get_accountant

    zs = [1.0 + i / k for i in range(k)]
    t = time.process_time()
    ours = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(
        ComposedDpEvent([PoissonSampledDpEvent(q, GaussianDpEvent(z)) for z in zs])).get_epsilon(delta)
    t_ours = time.process_time() - t
    theirs = t_theirs = float("nan")
    if reference:
        t = time.process_time()
        acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
        for z in zs:
            acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)))
        theirs = acc.get_epsilon(delta)
        t_theirs = time.process_time() - t
    return {"releases": k, "silodp_epsilon": ours, "dp_accounting_epsilon": theirs,
            "seconds": {"silodp": t_ours, "dp_accounting": t_theirs}}


def ledger(sizes: list[int], reference_up_to: int) -> list[dict]:
    rows = [ledger_row(k, k <= reference_up_to) for k in sizes]
    print(f"{'releases':>8} | {'silodp eps':>10} {'dpa eps':>10} | {'silodp CPU s':>12} {'dpa CPU s':>10} {'speed-up':>8}")
    for r in rows:
        s = r["seconds"]
        print(f"{r['releases']:>8} | {r['silodp_epsilon']:10.4f} {r['dp_accounting_epsilon']:10.4f} | "
              f"{s['silodp']:12.2f} {s['dp_accounting']:10.2f} {s['dp_accounting'] / s['silodp']:7.1f}x")
    big = max(rows, key=lambda r: r["releases"])
    ratio = big["seconds"]["dp_accounting"] / big["seconds"]["silodp"]
    print(f"\n{big['releases']} distinct releases: {big['seconds']['silodp']:.2f} s CPU (target < 2 s: "
          f"{'met' if big['seconds']['silodp'] < 2 else 'MISSED'}); >= 3x dp-accounting: "
          + ("not measured" if ratio != ratio else f"{ratio:.1f}x, {'met' if ratio >= 3 else 'MISSED'}"))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", default=None)
    ap.add_argument("--mechanisms", action="store_true", help="the held-out mechanisms benchmark instead")
    ap.add_argument("--sweep", action="store_true", help="the 1%% sweep of bench_mechanisms.py instead")
    ap.add_argument("--ledger", nargs="?", const="10,100,1000", default=None,
                    help="k distinct releases composed (comma-separated k) instead")
    ap.add_argument("--reference-up-to", type=int, default=1000, help="--ledger: dp-accounting up to this k")
    args = ap.parse_args()
    if args.ledger:
        rows = ledger([int(k) for k in args.ledger.split(",")], args.reference_up_to)
        if args.json:
            with open(args.json, "w") as fh:
                json.dump(rows, fh, indent=1)
        return None
    if args.mechanisms or args.sweep:
        import sys

        import bench_mechanisms

        sys.argv = [sys.argv[0]] + (["--quick"] if args.quick else []) + (["--sweep"] if args.sweep else [])
        return bench_mechanisms.main()
    warnings.filterwarnings("ignore")
    rows = [row(*r) for r in (QUICK if args.quick else GRID)]
    print(f"{'q':>6} {'steps':>6} {'eps':>4} | {'silodp':>8} {'dpa-PLD':>8} {'dpa-RDP':>8} {'opacus':>8} | "
          f"{'noise vs PLD':>12} {'speed-up':>8}")
    for r in rows:
        print(f"{r['q']:>6} {r['steps']:>6} {r['epsilon']:>4} | {r['silodp_pld']:8.4f} {r['dp_accounting_pld']:8.4f} "
              f"{r['dp_accounting_rdp']:8.4f} {r['opacus_rdp']:8.4f} | {100 * r['noise_vs_dp_accounting_pld']:+11.3f}% "
              f"{r['speedup_vs_dp_accounting_pld']:7.1f}x")
    worst = max(abs(r["noise_vs_dp_accounting_pld"]) for r in rows)
    slowest = min(r["speedup_vs_dp_accounting_pld"] for r in rows)
    total = sum(r["seconds"]["dp_accounting_pld"] for r in rows) / sum(r["seconds"]["silodp_pld"] for r in rows)
    print(f"\nworst noise gap vs dp-accounting PLD: {100 * worst:.3f}% (target 0.5%); "
          f"speed-up: min {slowest:.1f}x, aggregate {total:.1f}x (target 10x)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
