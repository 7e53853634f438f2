"""The mutation table of docs/rates.md: which rates preset catches which utility mutation.

    python docs/figures/rates_mutations.py                       # every preset (what `silodp rates
                                                                 # --mutations --json` prints), and
                                                                 # the per-run criteria
    python docs/figures/rates_mutations.py --preset NAME ...     # some presets only (one process each;
                                                                 # merge the JSON files with --merge)
    python docs/figures/rates_mutations.py --merge A.json B.json # the table of several runs

Writes ``rates_mutations.json`` (the suite's payload and every run's criteria) next to this script
(or ``--out``) and prints the markdown table.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from silodp.verify.rates import mutations

HERE = Path(__file__).resolve().parent


def table(runs: dict) -> str:
    presets = list(dict.fromkeys(p for p, _ in (k.split("|") for k in runs)))
    names = list(mutations.MUTATIONS)
    lines = ["| mutation | " + " | ".join(f"`{p}`" for p in presets) + " | caught |",
             "|---|" + "---|" * (len(presets) + 1)]
    for m in ["correct", *names]:
        cells, caught = [], False
        for p in presets:
            run = runs.get(f"{p}|{m}")
            if run is None:
                cells.append("n/a")
                continue
            failed = [c for c, ok in run["criteria"].items() if not ok]
            caught = caught or bool(failed)
            cells.append("pass" if not failed else "**fails** " + ", ".join(failed))
        verdict = ("all pass" if not caught else "no: a correct run fails") if m == "correct" else \
            ("yes" if caught else "**no**")
        lines.append(f"| {m} | " + " | ".join(cells) + f" | {verdict} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", nargs="*", default=None, choices=list(mutations.PRESETS))
    ap.add_argument("--merge", nargs="*", default=None)
    ap.add_argument("--out", default=str(HERE / "rates_mutations.json"))
    args = ap.parse_args()
    if args.merge:
        runs, seconds = {}, 0.0
        for path in args.merge:
            part = json.loads(Path(path).read_text())
            runs.update(part["runs"])
            seconds += part["seconds"]
        suite = {"mutations": {m: [p for p in dict.fromkeys(k.split("|")[0] for k in runs)
                                   if f"{p}|{m}" in runs and not runs[f"{p}|{m}"]["passes"]]
                               for m in mutations.MUTATIONS},
                 "correct_pass": all(v["passes"] for k, v in runs.items() if k.endswith("|correct"))}
    else:
        start, details = time.time(), {}
        suite = mutations.run_suite(presets=tuple(args.preset) if args.preset else None, details=details)
        seconds = time.time() - start
        runs = {f"{p}|{m}": v for (p, m), v in details.items()}
    Path(args.out).write_text(json.dumps({"suite": suite, "runs": runs, "seconds": seconds}, indent=1))
    print(json.dumps(suite))
    print(f"{seconds:.0f} s")
    print(table(runs))


if __name__ == "__main__":
    main()
