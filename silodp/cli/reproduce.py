"""``silodp reproduce`` (run or resume a paper grid into a results store and summarize it),
``silodp plot`` (test error versus epsilon from a store) and ``silodp report`` (a stamped markdown
table of a store, written into a doc; ``--check``: no stamped table is stale)."""

from __future__ import annotations

from silodp.cli.domains import Int, PathArg, text

import sys
from pathlib import Path

FIGURE_SUFFIXES = ("png", "pdf", "svg")
CALIBRATION_CHOICES = {"tight": ("tight",), "paper": ("paper",), "both": ("tight", "paper")}


def register(subparsers) -> None:
    from silodp.progress import add_quiet_flag

    p = subparsers.add_parser("reproduce", help="reproduce a paper experiment: resumable sweep, summary, claims")
    p.add_argument("preset", metavar="PRESET",
                   help="wbcd | wbcd-sdp | mnist | cifar10 | scaffold-synthetic, or a .json/.toml grid file")
    p.add_argument("--quick", action="store_true", help="the preset's small variant (seconds)")
    p.add_argument("--store", type=PathArg("out"), default="results.db", help="SQLite results store (created in an existing folder; resumed if present)")
    p.add_argument("--scheduler", type=text("a Dask scheduler address such as tcp://host:8786"), default=None, metavar="ADDR", help="Dask scheduler address, e.g. tcp://host:8786")
    p.add_argument("--workers", type=Int(1, 4096), default=None, help="local worker processes (default: all CPUs; 1 = in-process)")
    p.add_argument("--data-path", type=PathArg("dir"), default=None, help="local MNIST IDX files or CIFAR-10 python batches")
    p.add_argument("--calibration", choices=sorted(CALIBRATION_CHOICES), default=None,
                   help="override the preset's calibrations (both: tight and the paper's closed form side by side)")
    p.add_argument("--max-runs", type=Int(0), default=None, help="stop after this many runs (resume later)")
    p.add_argument("--retry-failed", action="store_true", help="run failed and skipped runs again")
    p.add_argument("--json", action="store_true")
    add_quiet_flag(p)
    p.set_defaults(handler=handle_reproduce)

    q = subparsers.add_parser("plot", help="test error versus epsilon from a results store")
    q.add_argument("--store", type=PathArg("in"), default="results.db", help="SQLite results store written by silodp reproduce")
    q.add_argument("--out", type=PathArg("out", FIGURE_SUFFIXES), required=True, help="image file to write (png, pdf, svg)")
    q.add_argument("--calibration", choices=sorted(CALIBRATION_CHOICES), default=None,
                   help="panels to draw (default: every calibration in the store)")
    q.add_argument("--output", choices=("algorithm", "last"), default="algorithm",
                   help="evaluate each algorithm's own output (default) or its last iterate")
    q.add_argument("--json", action="store_true")
    q.set_defaults(handler=handle_plot)

    r = subparsers.add_parser("report", help="a stamped results table from a store, or --check that docs' tables are current")
    r.add_argument("preset", metavar="PRESET", nargs="?", default=None,
                   help="the preset or grid file the store was reproduced from (as given to silodp reproduce)")
    r.add_argument("--store", type=PathArg("in"), default=None, help="SQLite results store written by silodp reproduce (default results.db)")
    r.add_argument("--quick", action="store_true", help="the preset's small variant")
    r.add_argument("--calibration", choices=sorted(CALIBRATION_CHOICES), default=None,
                   help="the --calibration the store was reproduced with")
    r.add_argument("--kind", choices=("errors", "scaffold", "claims"), default="errors",
                   help="errors: test error per epsilon and algorithm; scaffold: DP-SCAFFOLD vs DP-FedAvg per K; "
                        "claims: the papers' claims checked on the store")
    r.add_argument("--output", choices=("algorithm", "last"), default="algorithm",
                   help="evaluate each algorithm's own output (default) or its last iterate")
    r.add_argument("--into", type=PathArg("in"), default=None, help="markdown file whose block --name is replaced")
    r.add_argument("--name", type=text("a table name"), default=None, help="the block's name (default: the preset's stem)")
    r.add_argument("--check", nargs="*", type=PathArg("in"), default=None, metavar="FILE",
                   help="check every stamped table in FILEs (default docs/*.md) against the current code; no runs")
    r.add_argument("--full", action="store_true",
                   help="with --check: rebuild every generated table (also the expensive ones) and compare")
    r.add_argument("--generated", type=text("a generated table's name"), default=None, metavar="NAME",
                   help="rebuild the generated table NAME (accounting, sigma_g, mechanism tables of docs/; "
                        "silodp/experiments/doctables.py) instead of a sweep's table; with --into, write it there")
    r.add_argument("--recorded", type=text("a recorded table's name"), default=None, metavar="NAME",
                   help="restamp the recorded table NAME of --into (an audit or timing table whose body was "
                        "pasted from its command's output) under the current accounting version")
    r.add_argument("--machine", type=text("a machine label without spaces"), default=None,
                   help="with --recorded, for a measurement: the machine it was measured on")
    r.add_argument("--json", action="store_true")
    r.set_defaults(handler=handle_report)


def handle_reproduce(args) -> int:
    from silodp.cli import emit
    from silodp.experiments import format_summary, reproduce
    from silodp.progress import progress_mode

    if args.workers is not None and args.workers < 1:
        raise ValueError(f"--workers: must be >= 1, got {args.workers}")
    if args.max_runs is not None and args.max_runs < 0:
        raise ValueError(f"--max-runs: must be >= 0, got {args.max_runs}")
    if args.scheduler is not None and "://" not in args.scheduler:
        raise ValueError(f"--scheduler: must be an address such as tcp://host:8786, got {args.scheduler!r}")
    if args.scheduler is not None and args.workers is not None:
        raise ValueError("--workers: does not apply with --scheduler (the cluster's workers run the sweep)")
    if args.data_path is not None and args.preset not in ("mnist", "cifar10"):
        raise ValueError(f"--data-path: only the mnist and cifar10 presets read local files, not {args.preset!r}")
    payload = reproduce(args.preset, quick=args.quick, store=args.store, workers=args.workers,
                        scheduler=args.scheduler, data_path=args.data_path,
                        calibrations=CALIBRATION_CHOICES.get(args.calibration), max_runs=args.max_runs,
                        retry_failed=args.retry_failed, progress=progress_mode(args.json, args.quiet))
    runs = payload["runs"]
    if runs.get("recalibrated"):  # cached calibrations that did not re-certify (tampered, or another version)
        print(f"silodp reproduce: note: {runs['recalibrated']} cached calibrations did not re-certify and were redone",
              file=sys.stderr)
    human = (f"{payload['grid']}: {runs['total']} runs, {runs['already_done']} already in {payload['store']}, "
             f"ran {runs['ran']} ({runs['failed']} failed, {runs['skipped']} skipped) in {runs['wall_s']:.1f} s\n"
             + format_summary(payload["summary"], payload["claims"]))
    emit(payload, args.json, human)
    if runs["failed"]:  # the results are printed; the exit status says that some are missing
        lost = min(runs["worker_failed"], runs["failed"])  # stored worker failures a plain rerun retries
        own = runs["failed"] - lost
        advice = [f"{lost} lost their worker: rerun the same command to retry them"] if lost else []
        advice += ["fix the cause and rerun with --retry-failed"] if own > 0 else []
        raise ValueError(f"{runs['failed']} of {runs['total']} runs failed (their errors are in the JSON "
                         f"and in {payload['store']}; {'; '.join(advice)})")
    return 0


def handle_plot(args) -> int:
    from silodp.cli import check_writable, emit
    from silodp.experiments import Store, error_vs_epsilon, store_summary

    if not Path(args.store).is_file():
        raise ValueError(f"--store: no such file {args.store!r}")
    check_writable(args.out, "--out")
    with Store(args.store, read_only=True) as st:
        rows, claims = store_summary(st, output=args.output)
    if not rows:
        raise ValueError(f"--store: no finished runs in {args.store!r}")
    fig = error_vs_epsilon(rows, CALIBRATION_CHOICES.get(args.calibration))
    try:
        fig.savefig(args.out, dpi=120)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--out: cannot write {args.out!r}: {exc}") from exc
    payload = {"out": str(args.out), "experiments": sorted({r["experiment"] for r in rows}), "summary": rows,
               "claims": claims}
    emit(payload, args.json, f"wrote {args.out} ({len(payload['experiments'])} experiments, {len(rows)} rows)")
    return 0


def _commit(records) -> str:
    """The code version(s) that computed ``records``: the git commit of each (``.dirty`` kept)."""
    versions = sorted({(r.code_version or "unknown").split("+g")[-1] for r in records})
    return ",".join(versions) or "unknown"


def handle_report(args) -> int:
    from silodp.cli import emit
    from silodp.experiments import Store, select, summarize
    from silodp.experiments import stamp, tables
    from silodp.experiments.report import alg11_rule, check_claims

    if args.full and args.check is None:
        raise ValueError("--full: only with --check")
    if args.check is not None:
        if args.preset is not None or args.into is not None or args.generated is not None:
            raise ValueError("--check: takes files only (no PRESET, no --into, no --generated)")
        paths = args.check or sorted(Path("docs").glob("*.md"))
        count, problems = stamp.check_files(paths, full=args.full)
        payload = {"files": [str(p) for p in paths], "tables": count, "stale": problems}
        emit(payload, args.json, "\n".join(problems) or f"{count} stamped tables, all current")
        if problems:
            raise ValueError(f"{len(problems)} of {count} stamped tables are stale: {problems[0]}")
        return 0
    if args.recorded is not None:
        if args.into is None or args.preset is not None or args.generated is not None:
            raise ValueError("--recorded: needs --into FILE, and no PRESET or --generated")
        path = Path(args.into)
        matches = [b for a, b in stamp.blocks(path.read_text()) if a.get("name") == args.recorded]
        if len(matches) != 1:
            raise ValueError(f"--recorded: {len(matches)} blocks named {args.recorded!r} in {args.into!r} (need one)")
        block = stamp.render_block(stamp.recorded_attrs(args.recorded, args.machine), matches[0])
        path.write_text(stamp.replace_block(path.read_text(), args.recorded, block))
        emit({"name": args.recorded, "into": str(args.into), "table": block}, args.json, block)
        return 0
    if args.generated is not None:
        if args.preset is not None or args.store is not None:
            raise ValueError("--generated: takes no PRESET and no --store (it runs its own command)")
        block = stamp.generated_block(args.generated)
        if args.into is not None:
            path = Path(args.into)
            path.write_text(stamp.replace_block(path.read_text(), args.generated, block))
        emit({"name": args.generated, "into": None if args.into is None else str(args.into), "table": block},
             args.json, block)
        return 0
    if args.preset is None:
        raise ValueError("PRESET: required (or --check, or --generated)")
    args.store = args.store or "results.db"
    if not Path(args.store).is_file():
        raise ValueError(f"--store: no such file {args.store!r}")
    if args.into is not None and not str(args.into).endswith(".md"):
        raise ValueError(f"--into: must be a markdown file, got {args.into!r}")
    calibration = ",".join(CALIBRATION_CHOICES[args.calibration]) if args.calibration else None
    attrs = {"preset": args.preset, "quick": "1" if args.quick else None, "calibration": calibration}
    spec = stamp.resolve(attrs)
    hashes = [c.config_hash for c in spec.expand()]
    with Store(args.store, read_only=True) as st:
        records = st.records("ok", hashes)
        counts = st.counts(hashes)
    if not records:
        raise ValueError(f"--store: no finished runs of {args.preset!r} in {args.store!r}")
    plain = summarize(select(records, args.output))
    last = plain if args.output == "last" else summarize(select(records, "last"))
    claims = check_claims(plain, "tight", last)
    rows = alg11_rule(plain)
    name = args.name or Path(args.preset).stem
    block = stamp.render_block(stamp.stamp_attrs(
        name, args.preset, args.kind, _commit(records), spec, quick=attrs["quick"], calibration=calibration,
        runs=f"{counts['ok']}/{len(hashes)}",
        output=None if args.output == "algorithm" else args.output), tables.render(args.kind, rows, claims))
    if args.into is not None:
        path = Path(args.into)
        path.write_text(stamp.replace_block(path.read_text(), name, block))
    payload = {"preset": args.preset, "name": name, "into": None if args.into is None else str(args.into),
               "stored": counts, "table": block, "summary": rows, "claims": claims}
    emit(payload, args.json, block)
    return 0
