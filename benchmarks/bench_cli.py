"""Start-up latency of the accounting CLI (issue 2: "answer in well under a second").

Each command runs as a fresh process (median of ``--repeats``), next to two baselines measured in
the same run: the bare interpreter (``python -c pass``, the floor) and ``import dp_accounting``
(what the accounting commands cost before silodp had its own RDP/PLD engines). Reported as
seconds and as ratios to the dp-accounting import.

    python benchmarks/bench_cli.py [--repeats 7] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time

BASELINES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "import dp_accounting": [sys.executable, "-c", "import dp_accounting"],
}
#: the installed console script, or the module when the script is not on PATH (venv not activated)
SILODP = [shutil.which("silodp")] if shutil.which("silodp") else [sys.executable, "-m", "silodp"]
COMMANDS = {
    "epsilon (pld, poisson)": [*SILODP, "epsilon", "--noise-multiplier", "1.1", "--steps", "1000", "--delta", "1e-5",
                               "--sampling", "poisson", "--q", "0.01", "--json"],
    "epsilon --accountant all": [*SILODP, "epsilon", "--noise-multiplier", "1.1", "--steps", "1000", "--delta",
                                 "1e-5", "--sampling", "poisson", "--q", "0.01", "--accountant", "all", "--json"],
    "noise (pld, poisson)": [*SILODP, "noise", "--epsilon", "1", "--delta", "1e-5", "--steps", "1000", "--sampling",
                             "poisson", "--q", "0.01", "--json"],
    "shuffle": [*SILODP, "shuffle", "--eps0", "4", "--n", "100000", "--delta", "1e-6", "--json"],
}


def wall(cmd: list[str], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        subprocess.run(cmd, check=True, capture_output=True)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = {name: wall(cmd, args.repeats) for name, cmd in {**BASELINES, **COMMANDS}.items()}
    ref = rows["import dp_accounting"]
    print(f"{'command':<28} {'median s':>9} {'vs import dp_accounting':>24}")
    for name, sec in rows.items():
        print(f"{name:<28} {sec:9.3f} {sec / ref:23.2f}x")
    slowest = max(rows[name] for name in COMMANDS)
    print(f"\nslowest accounting command: {slowest:.3f} s (target: well under 1 s)")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"median_seconds": rows, "slowest_command_seconds": slowest}, fh, indent=1)


if __name__ == "__main__":
    main()
