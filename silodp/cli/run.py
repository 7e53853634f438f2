"""``silodp run``: train one federated algorithm on one dataset and report its test error."""

from __future__ import annotations

from silodp.cli.domains import COUNT, DELTA, EPSILON, SCALE, Int, POSITIVE, Real, SEED

import math

DATASETS = ("wbcd", "mnist", "synthetic")
#: --output: the algorithm's own output rule or the last iterate (FederatedAlgorithm's ``output``)
OUTPUT_RULES = ("random", "last")
#: flags renamed in round 7 (``--beta`` is the smoothness of ``silodp noise``, ``--alpha`` was the
#: audit's 1 - confidence): old -> (new, what it is); refused with the new name (silodp.cli._precheck)
RENAMED_FLAGS = {"--alpha": ("--model-heterogeneity", "FedProx Synthetic(alpha, beta)'s alpha"),
                 "--beta": ("--input-heterogeneity", "FedProx Synthetic(alpha, beta)'s beta")}


def register(subparsers) -> None:
    from silodp.cli.params import generate_on_algorithm
    from silodp.progress import add_quiet_flag

    p = subparsers.add_parser("run", help="run one federated algorithm on a dataset")
    p.add_argument("--algorithm", required=True, help="algorithm name, e.g. isrl-spider (see docs/algorithms.md)")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--epsilon", type=EPSILON, required=True, help="per-silo ISRL-DP/SDP epsilon (ignored by non-private baselines)")
    p.add_argument("--delta", type=DELTA, default=None, help="delta (default 1/n^2, n = smallest silo's training size)")
    p.add_argument("--rounds", type=Int(1, 10 ** 6), default=25)
    p.add_argument("--silos-per-round", type=COUNT, default=None, help="M (default: all silos)")
    p.add_argument("--batch-size", type=COUNT, default=None, help="K (default: n / 4)")
    p.add_argument("--step-size", type=POSITIVE, default=0.1)
    p.add_argument("--clip", type=SCALE, default=1.0, help="per-sample gradient clip L")
    p.add_argument("--hidden", type=Int(1, 10 ** 5), nargs="+", default=None, help="MLP hidden sizes (default: paper's model)")
    p.add_argument("--calibration", choices=("tight", "paper"), default="tight")
    from silodp.accounting import accountant_choices

    p.add_argument("--accountant", choices=accountant_choices(), default=None,
                   help="the registered accountant that calibrates and certifies the run (default: the tightest)")
    p.add_argument("--output", choices=OUTPUT_RULES, default="random",
                   help="which iterate test_error scores: random = the algorithm's own rule (Alg 1, 2, 3, 11: "
                        "a uniformly random iterate; MB-SGD, Local SGD: the last one), last = the last iterate "
                        "(post-processing, no privacy cost); both errors are reported")
    p.add_argument("--seed", type=SEED, default=0)
    p.add_argument("--json", action="store_true")
    add_quiet_flag(p)
    g = p.add_argument_group("heterogeneous data (FedProx, Noble et al. 2022)")
    g.add_argument("--model-heterogeneity", type=Real(0.0, 1e3, closed="lowhigh"), default=None,
                   help="synthetic: FedProx Synthetic(alpha, beta)'s alpha, the variance of the shift of each user's "
                        "model (W_k, b_k) from the others'")
    g.add_argument("--input-heterogeneity", type=Real(0.0, 1e3, closed="lowhigh"), default=None,
                   help="synthetic: FedProx Synthetic(alpha, beta)'s beta, the variance of the shift of each user's "
                        "input mean v_k")
    g.add_argument("--iid", action="store_true", help="synthetic: FedProx's i.i.d. variant")
    g.add_argument("--similarity", type=Real(0.0, 1.0, closed="lowhigh"), default=None, help="mnist: label-skew partition, fraction of i.i.d. data")
    g.add_argument("--users", type=Int(1, 10 ** 5), default=None, help="number of users for --model-heterogeneity/--input-heterogeneity/--iid/--similarity data")
    p.renamed_flags = RENAMED_FLAGS  # type: ignore[attr-defined]
    p.set_defaults(handler=handle)
    generate_on_algorithm(p, transcript_only=False,
                          title="the algorithm's own parameters (generated from its config: docs/algorithms.md)")


def _default_hidden(dataset: str) -> list[int]:
    return {"wbcd": [5], "mnist": [64], "synthetic": []}[dataset]


def _load_data(args):
    from silodp.algorithms import mnist, synthetic, wbcd
    from silodp.algorithms.fedprox_data import fedprox_synthetic, mnist_label_skew

    from silodp._validation import check_nonnegative

    model, inputs = args.model_heterogeneity, args.input_heterogeneity
    for flag, value in (("--model-heterogeneity", model), ("--input-heterogeneity", inputs),
                        ("--similarity", args.similarity)):
        if value is not None:
            check_nonnegative(flag, value)  # finite: Synthetic(alpha, beta) with inf is degenerate
    if args.similarity is not None and args.similarity > 1:
        raise ValueError(f"--similarity: must lie in [0, 1], got {args.similarity}")
    fedprox = model is not None or inputs is not None or args.iid
    if fedprox and args.dataset != "synthetic":
        raise ValueError("--model-heterogeneity/--input-heterogeneity/--iid: only with --dataset synthetic")
    if args.similarity is not None and args.dataset != "mnist":
        raise ValueError("--similarity: only with --dataset mnist")
    users = {} if args.users is None else {"num_users": args.users}
    if fedprox:
        return fedprox_synthetic(model or 0.0, inputs or 0.0, iid=args.iid, seed=args.seed, **users)
    if args.similarity is not None:
        return mnist_label_skew(similarity=args.similarity, seed=args.seed, **users)
    if args.users is not None:
        raise ValueError("--users: only with --model-heterogeneity/--input-heterogeneity/--iid (synthetic) or "
                         "--similarity (mnist)")
    return {"wbcd": wbcd, "mnist": mnist, "synthetic": synthetic}[args.dataset](seed=args.seed)


def _own_params(cls, args) -> dict:
    """The algorithm's own parameters given as flags (generated from every config); a flag of
    another algorithm's parameter is refused."""
    from silodp.cli.params import dest

    given = {flag: f for flag, f in args.algorithm_flags.items() if getattr(args, dest(f)) is not None}
    bad = [flag for flag, f in given.items() if f.name not in cls.own_params()]
    if bad:
        raise ValueError(f"{bad[0]}: not a parameter of {cls.name}")
    return {f.name: getattr(args, dest(f)) for f in given.values()}


def handle(args) -> int:
    import torch  # noqa: F401  (heavy import stays inside the handler)

    from silodp.algorithms import ALGORITHMS, Problem, get_algorithm, mlp
    from silodp.cli import emit

    if args.algorithm not in ALGORITHMS:
        raise ValueError(f"--algorithm: must be one of {sorted(ALGORITHMS)}, got {args.algorithm!r}")
    if not ALGORITHMS[args.algorithm].private:
        from silodp.cli import refuse

        refuse(args, ("--delta", "--calibration", "--accountant"), f"to the non-private baseline {args.algorithm}")
    if not args.epsilon > 0:
        raise ValueError(f"--epsilon: must be > 0, got {args.epsilon}")
    if args.rounds < 1:
        raise ValueError(f"--rounds: must be >= 1, got {args.rounds}")
    data = _load_data(args)
    train = data.train.with_availability(args.silos_per_round)
    hidden = _default_hidden(args.dataset) if args.hidden is None else args.hidden
    problem = Problem(mlp(data.num_features, hidden, data.num_outputs), data.loss, clip=args.clip)
    if args.batch_size is not None and args.batch_size < 1:
        raise ValueError(f"--batch-size: must be an integer >= 1, got {args.batch_size}")
    batch = args.batch_size if args.batch_size is not None else max(1, train.min_size // 4)
    cls = ALGORITHMS[args.algorithm]
    params = dict(rounds=args.rounds, batch_size=batch, step_size=args.step_size, calibration=args.calibration,
                  **_own_params(cls, args))
    if cls.private:
        params.update(epsilon=args.epsilon, delta=args.delta, accountant=args.accountant)
    algo = get_algorithm(args.algorithm, **params, metrics_every=0 if args.json else 1)
    result = _run_with_progress(algo, problem, train, args)  # w_priv: the own rule, w_last: the last iterate
    errors = {rule: _test_error(problem, w, data.test) for rule, w in zip(OUTPUT_RULES, (result.w_priv, result.w_last))}
    chosen = result.w_priv if args.output == "random" else result.w_last
    certified = None if result.epsilon is None or math.isinf(result.epsilon) else result.epsilon
    payload = {
        "algorithm": args.algorithm,
        "epsilon": certified,
        "target_epsilon": args.epsilon if cls.private else None,
        "certified_epsilon": certified,
        "delta": result.delta,
        "accountant": args.accountant,
        "output": args.output,
        "test_error": errors[args.output],
        "test_error_random": errors["random"],
        "test_error_last": errors["last"],
        "train_loss": problem.objective(chosen, train),
        "noise": cls.plan.noise_payload(result.sigmas, result.shuffle),
        "dataset": args.dataset,
        "rounds": args.rounds,
        "silos_per_round": train.silos_per_round,
        "batch_size": batch,
        "seed": args.seed,
    }
    payload.update({k: result.params[k] for k in cls.own_params()})  # the algorithm's own parameters
    payload.update(result.details)  # family facts (DP-SCAFFOLD: sigma_g, both guarantees, the batch m)
    emit(payload, args.json)
    if cls.private and certified is not None and certified > args.epsilon * (1 + 1e-9):
        import sys  # the run happened, but its noise does not meet the requested budget: say so

        from silodp.cli.tables import num

        print(f"silodp run: warning: the noise certifies epsilon={num(certified)}, more than the requested "
              f"--epsilon {args.epsilon:g} (--calibration {args.calibration}: {payload['noise']})", file=sys.stderr)
    return 0


def _test_error(problem, w, test) -> float | None:
    acc = problem.accuracy(w, test)
    return None if acc is None else 1.0 - acc


def _run_with_progress(algo, problem, train, args):
    from silodp.progress import Progress, progress_mode

    with Progress(args.rounds, args.algorithm, "round", mode=progress_mode(args.json, args.quiet)) as bar:
        return algo.run(problem, train, seed=args.seed, callback=lambda r, w: bar.update(1))
