"""``silodp audit``: an empirical epsilon lower bound against the accounting layer's claim.

    silodp audit --algorithm NAME [--mutation NAME] [--epsilon E] [--trials T] --json
    silodp audit --algorithm sdp-NAME [--epsilon E] [--trials T] --json    (shuffle DP, whole transcript)
    silodp audit --mechanism gaussian --noise-multiplier S --delta D --trials T --json
    silodp audit --mechanism pvec --epsilon E --delta D --messages N --json
    silodp audit --papers [--epsilon E] [--trials T] --json
    silodp audit --algorithm NAME --mutation NAME --repeats R --json      (detection rate)
"""

from __future__ import annotations

from silodp.cli.domains import DELTA, POSITIVE, SEED, Int, Real

ESTIMATOR_CHOICES = ("clopper-pearson", "gdp")


def register(subparsers) -> None:
    p = subparsers.add_parser("audit", help="audit a privacy claim: empirical epsilon lower bound vs the accountant")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--algorithm", help="algorithm to audit, e.g. isrl-prox-sgd (Gaussian game) or sdp-prox-sgd (real runs)")
    what.add_argument("--mechanism", choices=("gaussian", "pvec"),
                      help="audit one release: a Gaussian, or the shuffle protocol P_vec certified for --epsilon")
    what.add_argument("--papers", action="store_true", help="audit the papers' closed-form calibrations")
    p.add_argument("--mutation", default=None, help="deliberate privacy bug to inject (see docs/audit.md)")
    p.add_argument("--epsilon", type=Real(0.05, 100.0, closed="lowhigh"), default=2.0,
                   help="target epsilon the noise is calibrated to, in [0.05, 100] (default 2; an audit resolves no less)")
    p.add_argument("--delta", type=DELTA, default=1e-5, help="delta (default 1e-5)")
    p.add_argument("--noise-multiplier", type=POSITIVE, default=None,
                   help="--mechanism gaussian: sigma / C for one release under add/remove (shift C)")
    p.add_argument("--messages", type=Int(1, 10 ** 6), default=100, help="--mechanism pvec: number of shuffled messages")
    p.add_argument("--trials", type=Int(2, 10 ** 7), default=None,
                   help="runs per neighbouring dataset (default 100000, or the mutation's budget)")
    p.add_argument("--estimator", choices=ESTIMATOR_CHOICES, default="clopper-pearson",
                   help="lower bound that decides 'violation' (both are always reported)")
    p.add_argument("--alpha", type=Real(0.0, 1.0), default=0.05, help="1 - confidence of the lower bound (default 0.05)")
    p.add_argument("--repeats", type=Int(1, 10 ** 4), default=None, help="with --mutation: repeat the audit, report the detection rate")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=handle)


def _human(payload: dict) -> str:
    return "\n".join(f"{k:>30}: {v}" for k, v in payload.items())


def _check_applicable(args) -> None:
    """Flags that the chosen mode does not read are errors, not silently ignored."""
    from silodp.cli import refuse

    if args.mechanism == "gaussian":
        refuse(args, ("--epsilon", "--messages", "--mutation", "--repeats"), "to --mechanism gaussian")
    elif args.mechanism == "pvec":
        refuse(args, ("--noise-multiplier", "--mutation", "--repeats"), "to --mechanism pvec")
    elif args.papers:
        refuse(args, ("--noise-multiplier", "--messages", "--mutation", "--repeats", "--alpha"), "to --papers")
    else:
        refuse(args, ("--noise-multiplier", "--messages"), "to --algorithm (use --epsilon)")


def _check_args(args) -> None:
    if args.trials is not None and args.trials < 2:
        raise ValueError(f"--trials: must be >= 2, got {args.trials}")
    if args.repeats is not None and (args.repeats < 1 or args.mutation is None):
        raise ValueError("--repeats: needs --mutation and a count >= 1")
    if args.mutation is not None and args.algorithm is None:
        raise ValueError("--mutation: needs --algorithm")
    if not 0 < args.alpha < 1:
        raise ValueError(f"--alpha: must lie in (0, 1), got {args.alpha}")


def handle(args) -> int:
    from silodp.cli import emit, strict_json
    from silodp.verify import audit

    _check_args(args)
    _check_applicable(args)
    if args.mechanism == "gaussian":
        if args.noise_multiplier is None:
            raise ValueError("--noise-multiplier: required with --mechanism gaussian")
        res = audit.audit_gaussian(args.noise_multiplier, args.delta, args.trials or 100_000, args.estimator,
                                   args.alpha, args.seed)
        payload = {"mechanism": "gaussian", "noise_multiplier": args.noise_multiplier, **res.as_dict()}
    elif args.mechanism == "pvec":
        if args.messages < 1:
            raise ValueError(f"--messages: must be >= 1, got {args.messages}")
        res = audit.audit_pvec(args.epsilon, args.delta, args.messages, args.trials or 100_000, args.estimator,
                               args.alpha, args.seed)
        payload = {"mechanism": "pvec", "messages": args.messages, **res.as_dict()}
    elif args.papers:
        rows = audit.audit_papers(args.epsilon, args.delta, args.trials or 100_000, args.estimator, args.seed)
        payload = {"papers": rows, "trials": args.trials or 100_000}
        human = "\n".join(f"{r['formula']:<22} target {r['target_epsilon']:g}  certified {r['certified_epsilon']:.3f}"
                          f"  audit >= {r['epsilon_lower_clopper_pearson']:.3f} (cp) / {r['epsilon_lower_gdp']:.3f} (gdp)"
                          for r in rows)
        emit(payload, args.json, human)
        return 0
    elif args.repeats is not None:
        if args.mutation not in audit.MUTATION_SCENARIOS:
            raise ValueError(f"--mutation: must be one of {sorted(audit.MUTATION_SCENARIOS)}, got {args.mutation!r}")
        if audit.MUTATION_SCENARIOS[args.mutation].algorithm != args.algorithm:
            raise ValueError(f"--algorithm: the detection scenario of {args.mutation!r} runs "
                             f"{audit.MUTATION_SCENARIOS[args.mutation].algorithm!r}")
        payload = audit.detection_rate(args.mutation, args.repeats, args.trials, args.epsilon, args.delta,
                                       args.estimator, args.seed)
    elif _shuffled(args.algorithm):  # shuffle-DP: real runs, whole transcripts (audit_sdp)
        from silodp.verify.audit.sdp import audit_sdp

        if args.mutation is not None:
            raise ValueError("--mutation: the mutation suite targets the Gaussian algorithms")
        res = audit_sdp(args.algorithm, args.epsilon, args.delta, args.trials or 20_000, args.estimator,
                        args.alpha, args.seed)
        payload = {"algorithm": args.algorithm, **res.as_dict()}
    else:
        _check_names(args, audit)
        trials = args.trials or (audit.MUTATION_TRIALS.get(args.mutation, 100_000) if args.mutation else 100_000)
        res = audit.audit_algorithm(args.algorithm, args.epsilon, args.delta, trials, args.mutation, args.estimator,
                                    args.alpha, args.seed)
        payload = {"algorithm": args.algorithm, **res.as_dict()}
    payload = strict_json(payload)
    emit(payload, args.json, _human(payload))
    return 0


def _shuffled(name: str) -> bool:
    from silodp.algorithms import ALGORITHMS

    return name in ALGORITHMS and ALGORITHMS[name].shuffled


def _check_names(args, audit) -> None:
    from silodp.verify.audit.mutations import MUTATIONS

    if args.algorithm not in audit.SCENARIOS:
        raise ValueError(f"--algorithm: must be one of {sorted(audit.SCENARIOS)}, got {args.algorithm!r}")
    if args.mutation is not None and args.mutation not in MUTATIONS:
        raise ValueError(f"--mutation: must be one of {sorted(MUTATIONS)}, got {args.mutation!r}")
