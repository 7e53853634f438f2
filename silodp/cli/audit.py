"""``silodp audit``: an empirical epsilon lower bound against the accounting layer's claim.

    silodp audit --algorithm NAME [--mutation NAME] [--epsilon E] [--trials T] --json
    silodp audit --algorithm sdp-NAME [--epsilon E] [--trials T] --json    (shuffle DP, whole transcript)
    silodp audit --mechanism gaussian --noise-multiplier S --delta D --trials T --json
    silodp audit --mechanism pvec --epsilon E --delta D --messages N --json
    silodp audit --papers [--epsilon E] [--trials T] --json
    silodp audit --algorithm NAME --mutation NAME --repeats R --json      (detection rate)
    silodp audit --opacus [--mutation NAME [--counterpart]] [--canaries M] [--runs R] --json
    silodp audit --simulator --mutation NAME [--counterpart] [--canaries M] --json  (one or a few simulator runs)
    silodp audit --shipped [--mutation NAME] [--json]          (the shipped bugs' table, docs/audit.md)
    silodp audit --flower-app PATH [--mutation public-seed-noise|halve-noise] --canaries M --json  (a Flower app)

The last four are one-run audits of real training runs (:mod:`silodp.verify.audit.onerun`): they
print ``claimed_epsilon``, ``epsilon_lower`` (per estimator), ``confidence``, ``canaries`` and
``verdict`` (``consistent`` / ``violated``).

Exit status (so a CI step needs no JSON parsing): 0 when every audited claim is consistent, 1 when
one is violated (``"violation": true`` or ``"verdict": "violated"``), 2 on an error. The two modes
that measure the audit itself with deliberate bugs (``--repeats``, ``--shipped``) exit 1 only when a
correct counterpart is flagged.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

from silodp.cli.domains import DELTA, SEED, Int, PathArg, Real

ESTIMATOR_CHOICES = ("clopper-pearson", "gdp")
ONE_RUN_CHOICES = ("steinke", "fdp", "clopper-pearson", "gdp")
#: flags renamed in round 7 (``--alpha`` was the heterogeneity of ``silodp run``; alpha is also an
#: RDP order): old -> (new, what it is); refused with the new name (silodp.cli._precheck)
RENAMED_FLAGS = {"--alpha": ("--confidence", "the lower bound's confidence, 1 - alpha: --alpha 0.05 is --confidence 0.95")}


@dataclasses.dataclass(frozen=True)
class MechanismAudit:
    """One ``--mechanism`` mode: the flags it refuses (it does not read them) and its run, which
    calls the library's audit (:mod:`silodp.verify.audit`, passed in: imported only when run) and
    returns the payload."""

    name: str
    refuses: tuple[str, ...]
    run: Callable[[Any, Any], dict]


def _audit_gaussian(args, audit) -> dict:
    if args.noise_multiplier is None:
        raise ValueError("--noise-multiplier: required with --mechanism gaussian")
    res = audit.audit_gaussian(args.noise_multiplier, args.delta, args.trials or 100_000, args.estimator,
                               args.alpha, args.seed)
    return {"mechanism": "gaussian", "noise_multiplier": args.noise_multiplier, **res.as_dict()}


def _audit_pvec(args, audit) -> dict:
    if args.messages < 1:
        raise ValueError(f"--messages: must be >= 1, got {args.messages}")
    res = audit.audit_pvec(args.epsilon, args.delta, args.messages, args.trials or 100_000, args.estimator,
                           args.alpha, args.seed)
    return {"mechanism": "pvec", "messages": args.messages, **res.as_dict()}


#: ``--mechanism``'s modes by name (its choices): the one place a mode is defined.
MECHANISM_AUDITS: dict[str, MechanismAudit] = {m.name: m for m in (
    MechanismAudit("gaussian", ("--epsilon", "--messages", "--mutation", "--repeats"), _audit_gaussian),
    MechanismAudit("pvec", ("--noise-multiplier", "--mutation", "--repeats"), _audit_pvec),
)}


def register(subparsers) -> None:
    p = subparsers.add_parser("audit", help="audit a privacy claim: empirical epsilon lower bound vs the accountant")
    what = p.add_mutually_exclusive_group(required=True)
    what.add_argument("--algorithm", help="algorithm to audit, e.g. isrl-prox-sgd (Gaussian game) or sdp-prox-sgd (real runs)")
    what.add_argument("--mechanism", choices=tuple(MECHANISM_AUDITS),
                      help="audit one release: a Gaussian, or the shuffle protocol P_vec certified for --epsilon")
    what.add_argument("--papers", action="store_true", help="audit the papers' closed-form calibrations")
    what.add_argument("--opacus", action="store_true",
                      help="one-run audit of a real Opacus run (an MLP on breast cancer; --mutation: a shipped bug's run)")
    what.add_argument("--simulator", action="store_true",
                      help="audit of real simulator runs with --mutation (or its --counterpart): one run of M canaries, or M silos "
                           "of one canary each (docs/audit.md)")
    what.add_argument("--shipped", action="store_true", help="the shipped privacy bugs, each audited with and without it")
    what.add_argument("--flower-app", type=PathArg("dir"), default=None, metavar="PATH",
                      help="one-run audit of a Flower app (e.g. examples/flower) on the simulation engine")
    p.add_argument("--canaries", type=Int(1, 10 ** 6), default=None, help="one-run audits: canaries per run (--simulator's few-run audits: silos, one canary each)")
    p.add_argument("--runs", type=Int(1, 10 ** 4), default=None, help="one-run audits: independent runs pooled (few-run audit)")
    p.add_argument("--counterpart", action="store_true",
                   help="--opacus / --simulator --mutation: run the correct counterpart")
    p.add_argument("--mutation", default=None, help="deliberate privacy bug to inject (see docs/audit.md)")
    p.add_argument("--epsilon", type=Real(0.05, 100.0, closed="lowhigh"), default=2.0,
                   help="target epsilon the noise is calibrated to, in [0.05, 100] (default 2; an audit resolves no less)")
    p.add_argument("--delta", type=DELTA, default=1e-5, help="delta (default 1e-5)")
    p.add_argument("--noise-multiplier", type=Real(1e-4, 1e100, closed="lowhigh"), default=None,
                   help="--mechanism gaussian: sigma / C for one release under add/remove (shift C)")
    p.add_argument("--messages", type=Int(1, 10 ** 6), default=100, help="--mechanism pvec: number of shuffled messages")
    p.add_argument("--trials", type=Int(2, 10 ** 7), default=None,
                   help="runs per neighbouring dataset (default 100000, or the mutation's budget)")
    p.add_argument("--estimator", choices=ONE_RUN_CHOICES, default=None,
                   help="lower bound that decides 'violation' (all are always reported); default clopper-pearson, "
                        "steinke for one-run audits")
    p.add_argument("--confidence", type=Real(0.0, 1.0), default=0.95,
                   help="confidence of the epsilon lower bound (default 0.95)")
    p.add_argument("--repeats", type=Int(1, 10 ** 4), default=None, help="with --mutation: repeat the audit, report the detection rate")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.set_defaults(handler=handle)
    p.renamed_flags = RENAMED_FLAGS  # type: ignore[attr-defined]


def _check_applicable(args) -> None:
    """Flags that the chosen mode does not read are errors, not silently ignored."""
    from silodp.cli import refuse

    one_run = ("--canaries", "--runs", "--counterpart")
    if args.opacus or args.shipped or args.simulator or args.flower_app is not None:
        refuse(args, ("--noise-multiplier", "--messages", "--repeats", "--trials", "--epsilon"), "to one-run audits")
        if args.simulator:
            refuse(args, ("--runs",), "to --simulator (the scenario fixes the runs)")
        if args.shipped:
            refuse(args, one_run, "to --shipped")
        if args.flower_app is not None:
            refuse(args, ("--counterpart", "--runs"), "to --flower-app")
        return
    refuse(args, one_run, "outside one-run audits (--opacus, --simulator, --flower-app)")
    if args.estimator in ("steinke", "fdp"):
        raise ValueError(f"--estimator: {args.estimator} is a one-run estimator (--opacus, --shipped, --flower-app)")
    if args.mechanism is not None:
        refuse(args, MECHANISM_AUDITS[args.mechanism].refuses, f"to --mechanism {args.mechanism}")
    elif args.papers:
        refuse(args, ("--noise-multiplier", "--messages", "--mutation", "--repeats", "--confidence"), "to --papers")
    else:
        refuse(args, ("--noise-multiplier", "--messages"), "to --algorithm (use --epsilon)")


def _check_args(args) -> None:
    if args.trials is not None and args.trials < 2:
        raise ValueError(f"--trials: must be >= 2, got {args.trials}")
    if args.repeats is not None and (args.repeats < 1 or args.mutation is None):
        raise ValueError("--repeats: needs --mutation and a count >= 1")
    if args.mutation is not None and args.algorithm is None and not (args.opacus or args.shipped or args.simulator
                                                                     or args.flower_app is not None):
        raise ValueError("--mutation: needs --algorithm, --opacus, --simulator, --shipped or --flower-app")
    if args.simulator and args.mutation is None:
        raise ValueError("--simulator: needs --mutation (the bug whose one-run scenario to audit)")
    if args.counterpart and args.mutation is None:
        raise ValueError("--counterpart: needs --mutation")
    for flag, value in (("--canaries", args.canaries), ("--runs", args.runs)):
        if value is not None and value < 1:
            raise ValueError(f"{flag}: must be >= 1, got {value}")
    if not 0 < args.confidence < 1:
        raise ValueError(f"--confidence: must lie in (0, 1), got {args.confidence}")
    args.alpha = round(1.0 - args.confidence, 12)  # the estimators' level: 1 - confidence (0.05 exactly at 0.95)


def handle(args) -> int:
    from silodp.cli import emit, strict_json
    from silodp.verify import audit

    _check_args(args)
    _check_applicable(args)
    if args.opacus or args.shipped or args.simulator or args.flower_app is not None:
        return _one_run(args)
    args.estimator = args.estimator or "clopper-pearson"
    if args.mechanism is not None:
        payload = MECHANISM_AUDITS[args.mechanism].run(args, audit)
    elif args.papers:
        rows = audit.audit_papers(args.epsilon, args.delta, args.trials or 100_000, args.estimator, args.seed)
        payload = {"papers": rows, "trials": args.trials or 100_000}
        from silodp.cli.tables import columns

        keys = ("formula", "target_epsilon", "certified_epsilon", "epsilon_lower_clopper_pearson", "epsilon_lower_gdp")
        emit(payload, args.json, columns(("formula", "target", "certified", "audit >= (cp)", "audit >= (gdp)"),
                                         [[r[k] for k in keys] for r in rows]))
        return exit_code(payload)
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
    emit(payload, args.json)
    return 0 if args.repeats is not None else exit_code(payload)


def exit_code(payload: dict) -> int:
    """1 when ``payload`` reports a violated claim (``violation`` true, ``verdict`` violated, in
    itself or any row of ``papers``; for ``shipped`` rows, only a violated correct counterpart),
    else 0."""
    rows = [payload, *payload.get("papers", ())]
    bad = any(r.get("violation") is True or r.get("verdict") == "violated" for r in rows)
    bad = bad or any(r.get("counterpart_verdict") == "violated" for r in payload.get("shipped", ()))
    return 1 if bad else 0


def _shuffled(name: str) -> bool:
    """Whether ``name`` is a registered algorithm whose plan releases through P_vec (its audit:
    real runs, whole transcripts)."""
    from silodp.algorithms import ALGORITHMS
    from silodp.algorithms.plan import ShufflePlan

    return name in ALGORITHMS and isinstance(ALGORITHMS[name].plan, ShufflePlan)


def _check_names(args, audit) -> None:
    from silodp.verify.audit.mutations import MUTATIONS

    try:  # any registered Gaussian ISRL-DP algorithm: its tuned scenario, or one derived from its config
        audit.scenario_for(args.algorithm)
    except ValueError as exc:
        raise ValueError(f"--{exc}") from None
    if args.mutation is not None and args.mutation not in MUTATIONS:
        raise ValueError(f"--mutation: must be one of {sorted(MUTATIONS)}, got {args.mutation!r}")


def _one_run(args) -> int:
    """``--opacus``, ``--simulator``, ``--shipped``, ``--flower-app``: audits of real runs, one (or a few) each."""
    import warnings

    from silodp.cli import emit, strict_json
    from silodp.verify.audit import shipped

    warnings.filterwarnings("ignore", message=".*(secure_mode|empty).*")
    estimator = args.estimator  # None: each scenario's own (steinke unless the run is a Gaussian mechanism)
    if args.simulator:
        from silodp.verify.audit.simulator_audit import audit_simulator

        res = audit_simulator(args.mutation, canaries=args.canaries, counterpart=args.counterpart,
                              estimator=estimator, alpha=args.alpha, seed=args.seed)
        payload = strict_json(res.as_dict())
        emit(payload, args.json)
        return exit_code(payload)
    names = shipped.table_names() if args.shipped else shipped.SHIPPED
    if args.mutation is not None and args.mutation not in names and args.flower_app is None:
        raise ValueError(f"--mutation: must be one of {sorted(names)}, got {args.mutation!r}")
    if args.shipped:
        rows = shipped.shipped_table([args.mutation] if args.mutation else None, estimator, args.alpha, args.seed)
        emit({"shipped": rows}, args.json, shipped.markdown(rows))
        return exit_code({"shipped": rows})
    if args.flower_app is not None:
        from silodp.verify.audit.flower_audit import APP_MUTATIONS, audit_flower_app

        if args.mutation is not None and args.mutation not in APP_MUTATIONS:
            raise ValueError(f"--mutation: with --flower-app must be one of {list(APP_MUTATIONS)}, got {args.mutation!r}")
        res = audit_flower_app(args.flower_app, canaries=args.canaries or 200, estimator=estimator or "steinke",
                               alpha=args.alpha, seed=args.seed, mutation=args.mutation)
    elif args.mutation is not None:
        res = shipped.audit_shipped(args.mutation, not args.counterpart, args.canaries, args.runs, estimator,
                                    args.alpha, args.seed)
    else:
        res = shipped.audit_default_opacus(args.canaries or 1000, args.runs or 1, estimator, args.alpha, args.seed)
    payload = strict_json(res.as_dict())
    emit(payload, args.json)
    return exit_code(payload)
