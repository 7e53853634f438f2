"""The hostile-input matrix of issue 28, run against the CLI: every subcommand, every flag.

Generated from the parsers themselves (``silodp.cli.build_parser``): for each value-taking flag of
each subcommand, a valid base invocation with that flag's value replaced by each class of the
matrix (empty, blank, negative, zero, NaN, +-inf, 1e308, 1e-320, 1e-300, a huge integer, a
fraction, unicode, a missing path), the flag given without a value, the flag removed when it is
required; each mode (``store_true``) flag added to every base (contradictory combinations); and
the issue's listed cases. Each input runs in this process (``silodp.cli.main``; the imports are
paid once) under a per-input limit (default 60 s) and is classified:

* **traceback**: a traceback printed, or an exit status other than 0 and 2;
* **hang**: over the limit;
* **wrong success**: exit 0 for a value no domain admits (empty, blank, NaN, inf, unicode or a
  missing path for a number, a missing input path, an unknown choice) or for a listed case that
  must be refused;
* **unclear**: exit 2 without exactly one line on stderr naming the flag typed, or a warning
  printed before it.

    nice -n 15 python scripts/hostile_matrix.py [--limit-s 60] [--only CMD ...] [--json out.json]

Prints a Markdown summary (the counts and every failing input); exit status 1 when any count
is nonzero.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

#: the classes of the matrix (value, whether no domain of a number admits it)
CLASSES = [("", True), (" ", True), ("-1", False), ("0", False), ("nan", True), ("inf", True), ("-inf", True),
           ("1e308", False), ("1e-320", False), ("1e-300", False), ("123456789012345678901234567890", False),
           ("0.5", False), ("ünïcödé", True), ("/nonexistent-silodp/x", True)]

#: the issue's listed cases (argv, the flag the refusal must name): the CI fuzz test's own list
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "cli"))
from test_fuzz import ISSUE_CASES as LISTED  # noqa: E402


class Hang(BaseException):
    """Raised by the alarm: not an Exception, so no handler swallows it."""


BOUND = [f"--param={p}" for p in ("n=1000", "M=10", "d=10", "eps=1", "delta=1e-5", "L=1", "mu=1", "kappa=10")]


def _bases(store: str, out: str, ledger: str) -> dict[str, list[str]]:
    return {
        "epsilon": ["--noise-multiplier", "2", "--steps", "10", "--delta", "1e-5"],
        "noise": ["--epsilon", "2", "--steps", "10", "--delta", "1e-5"],
        "shuffle": ["--eps0", "1", "--n", "1000", "--delta", "1e-6"],
        "bound": ["thm2.1-isrl", *BOUND],
        "run": ["--algorithm", "isrl-prox-sgd", "--dataset", "wbcd", "--epsilon", "2", "--rounds", "2"],
        "audit": ["--mechanism", "gaussian", "--noise-multiplier", "2", "--trials", "200"],
        "rates": ["--vary", "M", "--quick", "--trials", "2", "--values", "1", "4"],
        "reproduce": ["wbcd", "--quick", "--store", out + "-repro.db", "--max-runs", "2", "--workers", "1"],
        "plot": ["--store", store, "--out", out + ".png"],
        "report": ["wbcd", "--quick", "--store", store],
        "distributed": ["--mechanism", "skellam", "--dimension", "10", "--clip", "1", "--silos", "3", "--bits", "16",
                        "--epsilon", "1", "--delta", "1e-5"],
        "ledger": [ledger],
    }


def _name(action) -> str:
    return action.option_strings[0] if action.option_strings else action.dest


def _numeric(action) -> bool:
    from silodp.cli.domains import Int, Real

    return isinstance(action.type, (Int, Real))


def _never_valid(action, value: str, impossible: bool) -> bool:
    """Whether no reading of the flag admits ``value`` (the oracle of a wrong success)."""
    from silodp.cli.domains import PathArg

    if action.choices:
        return value not in map(str, action.choices)
    if _numeric(action):
        return impossible
    if isinstance(action.type, PathArg):
        return value.strip() == "" or (action.type.kind != "out" and value.startswith("/nonexistent"))
    return value.strip() == ""


def cases(store: str, out: str, ledger: str):
    """``(argv, flag, must_refuse)`` for every input of the matrix."""
    from silodp.cli import build_parser

    bases = _bases(store, out, ledger)
    subs = build_parser()._subparsers._group_actions[0].choices
    for cmd, sub in subs.items():
        base = [cmd, *bases[cmd]]
        for action in sub._actions:
            if action.dest == "help" or not action.option_strings:
                continue
            flag = _name(action)
            if action.nargs == 0:  # a mode flag added to the base: a contradiction or a valid mode
                yield [*base, flag], flag, False
                continue
            for value, impossible in CLASSES:
                argv = list(base)
                text = f"n={value}" if flag == "--param" else value
                if flag in argv and flag != "--param":
                    argv[argv.index(flag) + 1] = text
                else:
                    argv += [flag, text] if action.nargs in (None, "?") else [flag, text]
                yield argv, flag, _never_valid(action, value, impossible)
            yield [*base, flag], flag, True  # the flag without its value
            if action.required and flag in base:
                i = base.index(flag)
                yield base[:i] + base[i + 2:], flag, True  # missing
    for argv, flag in LISTED:
        yield argv, flag, True


def run_one(argv: list[str], limit_s: float) -> dict:
    from silodp.cli import main

    def alarm(signum, frame):
        raise Hang()

    out, err = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, limit_s)
    start = time.perf_counter()
    hang = False
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main(argv)
            except SystemExit as exc:
                code = int(exc.code or 0)
    except Hang:
        code, hang = None, True
    except BaseException as exc:  # noqa: BLE001 - a crash of the contract is what we count
        code = None
        err.write(f"Traceback (uncaught {type(exc).__name__}: {exc})\n")
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return {"code": code, "hang": hang, "out": out.getvalue(), "err": err.getvalue(),
            "wall_s": time.perf_counter() - start}


def classify(argv: list[str], flag: str, must_refuse: bool, res: dict) -> str | None:
    err = res["err"]
    if res["hang"]:
        return "hang"
    if "Traceback" in res["out"] + err or res["code"] not in (0, 2):
        return "traceback"
    if res["code"] == 0:
        return "wrong success" if must_refuse else None
    lines = [line for line in err.splitlines() if line.strip()]
    named = flag in lines[0] if lines else False
    if flag == "--param":  # bound's params are named by their name (n=...)
        named = named or "param" in lines[0] if lines else False
    if len(lines) != 1 or not lines[0].startswith("silodp") or not named or "warning" in err.lower():
        return "unclear"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit-s", type=float, default=60.0, help="per-input time limit (a hang beyond it)")
    ap.add_argument("--only", nargs="*", default=None, help="subcommands to run (default: all)")
    ap.add_argument("--json", default=None, help="write every result here")
    args = ap.parse_args(argv)
    json_path = Path(args.json).resolve() if args.json else None
    os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
    from silodp.experiments.grid import RunConfig
    from silodp.experiments.store import Store

    with tempfile.TemporaryDirectory() as tmp:
        os.chdir(tmp)  # an input that writes (a store, a figure) writes here
        store = str(Path(tmp) / "r.db")
        cfg = RunConfig(dataset="wbcd", algorithm="isrl-mb-sgd", epsilon=1.0, calibration="tight",
                        silos_per_round=2, rounds=5, step_size=0.1, clip=1.0, trial=0)
        with Store(store) as st:
            st.record(cfg, {"status": "ok", "metrics": {"test_error": 0.1, "val_error": 0.1},
                            "certified_epsilon": 1.0, "delta": 1e-5, "sigmas": {"sigma": 1.0}})
        ledger = str(Path(tmp) / "ledger.sqlite")
        try:
            from silodp.integrations.flower_silo import SiloLedgerDB

            SiloLedgerDB(ledger, 8.0, 1e-5)
        except ImportError:  # no flower extra: the ledger base is refused, as it should be
            pass
        todo = [c for c in cases(store, str(Path(tmp) / "out"), ledger) if args.only is None or c[0][0] in args.only]
        results, counts = [], {"traceback": 0, "wrong success": 0, "hang": 0, "unclear": 0}
        start = time.perf_counter()
        for i, (cmd, flag, must_refuse) in enumerate(todo):
            res = run_one(cmd, args.limit_s)
            verdict = classify(cmd, flag, must_refuse, res)
            if verdict:
                counts[verdict] += 1
                print(f"[{verdict}] {' '.join(map(repr, cmd))}: {(res['err'].strip() or res['out'].strip())[:200]}",
                      file=sys.stderr)
            results.append({"argv": cmd, "flag": flag, "must_refuse": must_refuse, "verdict": verdict,
                            "code": res["code"], "wall_s": round(res["wall_s"], 3),
                            "err": res["err"].strip()[:300]})
            if (i + 1) % 100 == 0:
                print(f"{i + 1}/{len(todo)} inputs, {time.perf_counter() - start:.0f} s", file=sys.stderr)
    ok = sum(r["code"] == 0 for r in results)
    slowest = max(results, key=lambda r: r["wall_s"]) if results else None
    print(f"Hostile-input matrix (`python scripts/hostile_matrix.py`): {len(results)} inputs over "
          f"{len({r['argv'][0] for r in results})} subcommands; {ok} answered (exit 0), {len(results) - ok} refused; "
          f"**{counts['traceback']} tracebacks, {counts['wrong success']} wrong successes, "
          f"{counts['hang']} hangs over {args.limit_s:g} s, {counts['unclear']} unclear messages**"
          + (f"; slowest input {slowest['wall_s']:.1f} s (`{' '.join(slowest['argv'])}`)" if slowest else "") + ".")
    for r in results:
        if r["verdict"]:
            print(f"- {r['verdict']}: `{' '.join(r['argv'])}` -> {r['err'][:160]}")
    if json_path:
        json_path.write_text(json.dumps({"counts": counts, "results": results}, indent=1))
    return 1 if any(counts.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
