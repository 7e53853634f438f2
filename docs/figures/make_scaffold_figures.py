"""Regenerate docs/figures/scaffold_headline.png: the ``scaffold-synthetic`` preset (Noble et al.
2022, Fig 1; 54 runs, about 3 minutes on 2 cores; ``--quick``: 8 runs, seconds), run or resumed
into a results store, then :func:`silodp.experiments.scaffold_headline` of its summary rows.
``--preset`` names another preset or grid file (as given to ``silodp reproduce``), e.g.
``docs/figures/scaffold_steps1000_eps2.json`` for ``scaffold_headline_eps2.png``.

    python docs/figures/make_scaffold_figures.py [--preset P] [--quick] [--store results.db] [--out PATH]

Prints the headline table (:func:`silodp.experiments.scaffold_gaps`) as JSON lines.
"""

import argparse
import json
from pathlib import Path

from silodp.experiments import reproduce, scaffold_gaps, scaffold_headline

HERE = Path(__file__).parent


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--preset", default="scaffold-synthetic")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--store", default="results.db")
    p.add_argument("--out", default=str(HERE / "scaffold_headline.png"))
    args = p.parse_args()
    out = reproduce(args.preset, quick=args.quick, store=args.store)
    for entry in scaffold_gaps(out["summary"]):
        print(json.dumps(entry), flush=True)
    scaffold_headline(out["summary"]).savefig(args.out, dpi=120)


if __name__ == "__main__":
    main()
