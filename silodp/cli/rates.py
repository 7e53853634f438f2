"""``silodp rates``: empirical versus theoretical rates (slope fit, explicit-bound check, figure)."""

from __future__ import annotations

from silodp.cli.domains import POSITIVE, SEED, Int, PathArg, text

VARY = ("eps", "n", "M", "N", "d", "kappa")
NOISE = ("paper", "tight")


def register(subparsers) -> None:
    from silodp.progress import add_quiet_flag

    p = subparsers.add_parser("rates", help="measured rate of an algorithm vs its theorem (log-log slope, bounds)")
    p.add_argument("--algorithm", default="isrl-prox-sgd",
                   help="isrl-prox-sgd (Thm 2.1), sdp-prox-sgd, isrl-pl-svrg (Thm 2.2), isrl-spider (Thm 3.1, full "
                        "batch) or isrl-spider-replacement (Thm 3.1's algorithm with K1 = K2 = n drawn with "
                        "replacement)")
    p.add_argument("--vary", default=None, choices=VARY, help="the parameter varied (the rest fixed; required "
                                                             "unless --mutations)")
    p.add_argument("--quick", action="store_true",
                   help="small grid and fewer trials, where the output improves on w0 (Prox-SGD: about 25 s of "
                        "one core, minutes on a busy machine; progress with an ETA on stderr)")
    p.add_argument("--mutations", action="store_true",
                   help="run every rates preset correct and under every utility mutation (step x3, x0.1, prox "
                        "dropped, noise x10, x0.1, wrong output, wrong snapshot) and print which presets catch "
                        "each: {\"mutations\": {NAME: [presets]}, \"correct_pass\": bool} (--quick: the "
                        "Prox-SGD preset only)")
    p.add_argument("--prescribed", action="store_true",
                   help="run at the theorem's own prescriptions (R, K, q, step size, noise) where the output "
                        "improves on w0: Prox-SGD varies n or eps, PL-SVRG kappa, SPIDER eps or n")
    p.add_argument("--values", type=POSITIVE, nargs="+", default=None, help="grid values (default: the preset's)")
    p.add_argument("--trials", type=Int(2, 10 ** 4), default=None, help="independent runs per grid value")
    p.add_argument("--noise", choices=NOISE, default=None,
                   help="calibration of the accounting layer (default: the preset's; paper for Prox-SGD)")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--compare", type=text("an algorithm name"), default=None, metavar="ALGORITHM",
                   help="also run ALGORITHM on the same grid and fit the slope of the ratio (e.g. sdp-prox-sgd)")
    p.add_argument("--plot", type=PathArg("out", ("png", "pdf", "svg")), default=None, metavar="PNG", help="write the log-log figure here")
    p.add_argument("--csv", type=PathArg("out", ("csv",)), default=None, metavar="CSV", help="write the per-point table here")
    p.add_argument("--json", action="store_true")
    add_quiet_flag(p)
    p.set_defaults(handler=handle)


def _human(payload: dict) -> str:
    """The per-point table (:mod:`silodp.cli.tables`, 4 significant digits, rounded up) and the slopes."""
    from silodp.cli.tables import columns

    keys = ("value", "mean", "ci_low", "ci_high", "bound", "explicit_bound", "start_metric", "noise_only_mean",
            "dominant_term")
    lines = [f"{payload['algorithm']} ({payload['theorem']}), varying {payload['vary']}: "
             f"{payload['metric']} vs {payload['bound']}",
             columns((payload["vary"], "mean", "ci_low", "ci_high", "bound", "explicit", "start", "noise-only",
                      "dominant"), [[r[k] for k in keys] for r in payload["points"]], digits=4)]
    lo, hi = payload["slope_ci"]  # slopes are statistics, not privacy numbers: nearest, 3 decimals
    lines.append(f"verdict: {payload['verdict']}  (slope {payload['slope']:.3f} [{lo:.3f}, {hi:.3f}], theory "
                 f"{payload['theory_exponent']:.3f} from the {payload['dominant_term']} term; "
                 f"explicit bound holds: {payload['explicit_bound_holds']}; "
                 f"improves on w0: {payload['improves_on_start']})")
    if "comparison" in payload:
        c = payload["comparison"]
        lines.append(f"{c['second']}/{c['first']}: slope {c['ratio_slope']:.3f} "
                     f"[{c['ratio_slope_ci'][0]:.3f}, {c['ratio_slope_ci'][1]:.3f}]  theory {c['theory_exponent']:.3f}")
    return "\n".join(lines)


def handle(args) -> int:
    import torch  # noqa: F401  (heavy imports stay inside the handler)

    from silodp.cli import check_writable, emit, refuse
    from silodp.verify import rates

    if args.mutations:  # the suite has its own presets: every other flag but --quick and --json is ignored
        refuse(args, ("--vary", "--algorithm", "--trials", "--noise", "--seed", "--values", "--prescribed", "--compare",
                      "--plot", "--csv"), "with --mutations (the suite runs its own presets)")
        from silodp.progress import Progress, progress_mode
        from silodp.verify.rates import mutations

        with Progress(mutations.suite_size(args.quick), "rates --mutations", "runs",
                      mode=progress_mode(args.json, args.quiet)) as bar:
            table = mutations.run_suite(quick=args.quick, on_run=lambda _: bar.update())
        emit(table, args.json, mutations.human(table))
        return 0
    if args.vary is None:
        raise ValueError("--vary: required (one of " + ", ".join(VARY) + ") unless --mutations")
    if args.trials is not None and args.trials < 2:
        raise ValueError(f"--trials: must be >= 2, got {args.trials}")
    for flag, path in (("--csv", args.csv), ("--plot", args.plot)):
        if path:
            check_writable(path, flag)  # before the (long) computation
    if args.compare is not None:  # before the (long) first computation
        from silodp.verify.rates.theorems import get_theorem

        try:
            get_theorem(args.compare)
        except ValueError as exc:
            raise ValueError(f"--compare: {str(exc).partition(': ')[2] or exc}") from None
    given = (("trials", args.trials), ("noise", args.noise), ("seed", args.seed))
    overrides = {k: v for k, v in given if v is not None}
    if args.values is not None:
        overrides["values"] = tuple(args.values)
    try:
        if args.prescribed:
            setup = rates.prescribed_setup(args.algorithm, args.vary, args.quick, **overrides)
        else:
            setup = (rates.quick_setup if args.quick else rates.full_setup)(args.algorithm, args.vary, **overrides)
    except ValueError as exc:  # name the flag the user typed: the values of the varied parameter, or the preset
        if args.values is not None and str(exc).startswith(f"{args.vary}:"):
            raise ValueError(f"--values: {exc}") from None
        if args.prescribed and "prescribed" in str(exc):
            raise ValueError(f"--prescribed: {exc}") from None
        raise
    from silodp.progress import progress_mode

    mode = progress_mode(args.json, args.quiet)  # one count per grid point with its ETA, on stderr
    if args.compare:
        comparison = rates.compare(setup, args.compare, mode)
        result = comparison.first
    else:
        comparison, result = None, rates.run_rates(setup, mode)
    payload = result.to_dict()
    if comparison is not None:
        payload["comparison"] = comparison.to_dict()
    if args.csv:
        with open(args.csv, "w", newline="") as fh:
            fh.write(result.to_csv())
    if args.plot:
        from silodp.verify.rates.plots import plot_comparison, plot_rates

        fig = plot_rates(result) if comparison is None else plot_comparison(comparison)
        fig.savefig(args.plot, dpi=120)
    emit(payload, args.json, _human(payload))
    return 0
