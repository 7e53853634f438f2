"""Regenerate docs/figures/accounting_with_replacement.png (seconds):
python docs/figures/make_accounting_figures.py [--out PATH]

Certified epsilon (delta = 1e-5) of T Gaussian steps on minibatches drawn *with* replacement,
by the multiplicity-hiding bound (pld), the labelled-multiplicity bound (rdp) and BBG18 Thm 10 +
optimal composition (advanced), with the rigorous lower bound of one concrete neighbouring pair
(silodp.accounting.replacement_lower) and sampling *without* replacement (pld; a different
mechanism, for reference).
Prints the numbers as JSON lines.
"""

import argparse
import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

from matplotlib.figure import Figure  # noqa: E402

from silodp.accounting import (  # noqa: E402
    GaussianDpEvent,
    SampledWithoutReplacementDpEvent,
    SampledWithReplacementDpEvent,
    SelfComposedDpEvent,
    epsilon,
)
from silodp.accounting import replacement_lower  # noqa: E402
from silodp.accounting.events import REPLACE_ONE  # noqa: E402

HERE = Path(__file__).parent
PANELS = ((1000, 100, 4.0), (100_000, 10, 2.0))  # (n, batch m, noise multiplier z = sigma / C)
STEPS = (1, 3, 10, 30, 100, 300, 1000)
CURVES = (("pld", SampledWithReplacementDpEvent, "pld, multiplicity hidden"),
          ("rdp", SampledWithReplacementDpEvent, "rdp, labelled multiplicities"),
          ("advanced", SampledWithReplacementDpEvent, "advanced (BBG18 Thm 10 + KOV)"),
          ("pld", SampledWithoutReplacementDpEvent, "without replacement, pld (reference)"))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=str(HERE / "accounting_with_replacement.png"))
    args = p.parse_args()
    fig = Figure(figsize=(10, 3.8))
    for ax, (n, m, z) in zip(fig.subplots(1, 2), PANELS):
        for name, sampling, label in CURVES:
            eps = [epsilon(SelfComposedDpEvent(sampling(n, m, GaussianDpEvent(z)), t), 1e-5, name, REPLACE_ONE)
                   for t in STEPS]
            print(json.dumps({"n": n, "m": m, "z": z, "curve": label, "steps": STEPS, "epsilon": eps}))
            ax.plot(STEPS, eps, marker="o", ms=3, label=label, ls="--" if "reference" in label else "-")
        lower = [replacement_lower.lower_bound_epsilon(z, m, n, t, 1e-5) for t in STEPS]
        print(json.dumps({"n": n, "m": m, "z": z, "curve": "lower bound", "steps": STEPS, "epsilon": lower}))
        ax.plot(STEPS, lower, marker="v", ms=3, color="k", ls=":", label="lower bound (one concrete pair)")
        ax.set(xscale="log", yscale="log", xlabel="steps T", ylabel="certified epsilon (delta = 1e-5)",
               title=f"n = {n:,}, batch {m}, z = {z:g}")
        ax.grid(alpha=0.3)
    fig.axes[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
