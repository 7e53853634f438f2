"""Regenerate the full-mode rate experiments of docs/rates.md: figures ``rates_*.png`` and the
tables ``rates_full.json`` / ``rates_full.csv`` next to this script.

    python docs/figures/rates_figures.py            # full mode (several minutes on 2 cores)
    python docs/figures/rates_figures.py --quick    # the quick presets (seconds), same outputs
    python docs/figures/rates_figures.py --prescribed   # every theorem at its own prescriptions:
                                                        # rates_prescribed_*.png, rates_prescribed.json/.csv
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import time
from pathlib import Path

import torch

from silodp.verify import rates
from silodp.verify.rates.plots import plot_comparison, plot_rates

HERE = Path(__file__).resolve().parent

#: name -> (algorithm, vary, overrides of the preset)
EXPERIMENTS = {
    "eps": ("isrl-prox-sgd", "eps", {}),
    "n": ("isrl-prox-sgd", "n", {}),
    "M": ("isrl-prox-sgd", "M", {}),
    "d": ("isrl-prox-sgd", "d", {}),
    "lsq_ball_eps": ("isrl-prox-sgd", "eps", {"family": "least-squares-ball", "baseline": False}),
    "plsvrg_eps": ("isrl-pl-svrg", "eps", {}),
    "spider_eps": ("isrl-spider", "eps", {}),
    "spider_n": ("isrl-spider", "n", {}),
}
#: the same, at the theorems' own prescriptions (rates.prescribed_setup; issue 14)
PRESCRIBED = {
    "proxsgd_n": ("isrl-prox-sgd", "n", {}),
    "proxsgd_eps": ("isrl-prox-sgd", "eps", {}),
    "plsvrg_kappa": ("isrl-pl-svrg", "kappa", {}),
    "spider_eps": ("isrl-spider", "eps", {}),
    "spider_n": ("isrl-spider", "n", {}),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--prescribed", action="store_true", help="the experiments at the theorems' prescriptions")
    parser.add_argument("--only", nargs="*", default=None, help="experiment names (and/or 'sdp')")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if args.prescribed:
        def preset(algorithm, vary, **overrides):
            return rates.prescribed_setup(algorithm, vary, args.quick, **overrides)
        experiments, prefix, args.only = PRESCRIBED, "rates_prescribed", args.only or list(PRESCRIBED)
    else:
        preset = rates.quick_setup if args.quick else rates.full_setup
        experiments, prefix = EXPERIMENTS, "rates"
    summary, tables = {}, []
    for name, (algorithm, vary, overrides) in experiments.items():
        if args.only is not None and name not in args.only:
            continue
        start = time.time()
        result = rates.run_rates(preset(algorithm, vary, **overrides))
        plot_rates(result).savefig(HERE / f"{prefix}_{name}.png", dpi=110)
        summary[name] = {**result.to_dict(), "seconds": round(time.time() - start, 1)}
        tables.append((name, result.to_csv()))
        print(name, summary[name]["slope"], summary[name]["slope_ci"], summary[name]["theory_exponent"],
              summary[name]["explicit_bound_holds"], summary[name]["improves_on_start"], summary[name]["seconds"],
              flush=True)
    if args.only is None or "sdp" in args.only:
        start = time.time()
        setup = preset("isrl-prox-sgd", "N", trials=48 if not args.quick else 24, baseline=False)
        cmp = rates.compare(setup, "sdp-prox-sgd")
        plot_comparison(cmp).savefig(HERE / "rates_isrl_vs_sdp.png", dpi=110)
        plot_rates(cmp.first).savefig(HERE / "rates_N.png", dpi=110)
        summary["sdp"] = {**cmp.to_dict(), "isrl": cmp.first.to_dict(), "sdp": cmp.second.to_dict(),
                          "seconds": round(time.time() - start, 1)}
        tables += [("N", cmp.first.to_csv()), ("N_sdp", cmp.second.to_csv())]
        print("sdp", cmp.fit.slope, cmp.fit.slope_ci, cmp.theory_exponent, summary["sdp"]["seconds"], flush=True)
    out = "rates_prescribed" if args.prescribed else "rates_full"
    (HERE / f"{out}.json").write_text(json.dumps(summary, indent=1))
    rows = [{"experiment": name, **row} for name, text in tables for row in csv.DictReader(io.StringIO(text))]
    with open(HERE / f"{out}.csv", "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
        writer.writeheader()
        writer.writerows(rows)

if __name__ == "__main__":
    main()
