"""The mutation table of docs/rates.md: which rates preset catches which utility mutation.

    python docs/figures/rates_mutations.py                       # every preset (what `silodp rates
                                                                 # --mutations --json` prints), and
                                                                 # the per-run criteria
    python docs/figures/rates_mutations.py --preset NAME ...     # some presets only (one process each;
                                                                 # merge the JSON files with --merge)
    python docs/figures/rates_mutations.py --merge A.json B.json # the table of several runs
    python docs/figures/rates_mutations.py --quick --preset NAME # the presets' quick variants (fewer
                                                                 # trials, the same criteria)

Writes ``rates_mutations.json`` (the suite's payload and every run's criteria) next to this script
(or ``--out``) and prints the markdown table. The file is rewritten after every run (``"partial":
true`` until the last), so a run stopped early still leaves its finished cells to merge.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from silodp.verify.rates import mutations

HERE = Path(__file__).resolve().parent


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", nargs="*", default=None, choices=list(mutations.PRESETS))
    ap.add_argument("--merge", nargs="*", default=None)
    ap.add_argument("--out", default=str(HERE / "rates_mutations.json"))
    ap.add_argument("--quick", action="store_true", help="the presets' quick variants (fewer trials)")
    args = ap.parse_args()
    if args.merge:
        runs, seconds, quick = {}, 0.0, {}
        for path in args.merge:
            part = json.loads(Path(path).read_text())
            runs.update(part["runs"])
            seconds += part["seconds"]
            quick.update(part.get("quick", {}))
        suite = {"mutations": {m: [p for p in dict.fromkeys(k.split("|")[0] for k in runs)
                                   if f"{p}|{m}" in runs and not runs[f"{p}|{m}"]["passes"]]
                               for m in mutations.MUTATIONS},
                 "correct_pass": all(v["passes"] for k, v in runs.items() if k.endswith("|correct"))}
    else:
        start = time.time()
        presets = tuple(args.preset) if args.preset else tuple(mutations.PRESETS)
        quick = {p: args.quick for p in presets}

        def save(details: dict, suite: dict | None = None) -> dict:
            runs = {f"{p}|{m}": v for (p, m), v in details.items()}
            Path(args.out).write_text(json.dumps({"suite": suite, "runs": runs, "seconds": time.time() - start,
                                                  "quick": quick, "partial": suite is None}, indent=1))
            return runs

        details: dict = {}
        suite = mutations.run_suite(quick=args.quick, presets=presets, details=details, on_run=save)
        seconds = time.time() - start
        runs = save(details, suite)
    if args.merge:
        Path(args.out).write_text(json.dumps({"suite": suite, "runs": runs, "seconds": seconds, "quick": quick},
                                             indent=1))
    print(json.dumps(suite))
    print(f"{seconds:.0f} s")
    print(mutations.markdown(runs, quick))


if __name__ == "__main__":
    main()
