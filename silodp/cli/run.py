"""``silodp run``: train one federated algorithm on one dataset and report its test error."""

from __future__ import annotations

import math

DATASETS = ("wbcd", "mnist", "synthetic")


def register(subparsers) -> None:
    p = subparsers.add_parser("run", help="run one federated algorithm on a dataset")
    p.add_argument("--algorithm", required=True, help="algorithm name, e.g. isrl-spider (see docs/algorithms.md)")
    p.add_argument("--dataset", required=True, choices=DATASETS)
    p.add_argument("--epsilon", type=float, required=True, help="per-silo ISRL-DP/SDP epsilon (ignored by non-private baselines)")
    p.add_argument("--delta", type=float, default=None, help="delta (default 1/n^2, n = smallest silo's training size)")
    p.add_argument("--rounds", type=int, default=25)
    p.add_argument("--silos-per-round", type=int, default=None, help="M (default: all silos)")
    p.add_argument("--batch-size", type=int, default=None, help="K (default: n / 4)")
    p.add_argument("--step-size", type=float, default=0.1)
    p.add_argument("--clip", type=float, default=1.0, help="per-sample gradient clip L")
    p.add_argument("--hidden", type=int, nargs="*", default=None, help="MLP hidden sizes (default: paper's model)")
    p.add_argument("--calibration", choices=("tight", "paper"), default="tight")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true")
    p.set_defaults(handler=handle)


def _default_hidden(dataset: str) -> list[int]:
    return {"wbcd": [5], "mnist": [64], "synthetic": []}[dataset]


def handle(args) -> int:
    import torch  # noqa: F401  (heavy import stays inside the handler)

    from silodp.algorithms import ALGORITHMS, Problem, get_algorithm, mlp, mnist, synthetic, wbcd
    from silodp.cli import emit

    if args.algorithm not in ALGORITHMS:
        raise ValueError(f"--algorithm: must be one of {sorted(ALGORITHMS)}, got {args.algorithm!r}")
    if not args.epsilon > 0:
        raise ValueError(f"--epsilon: must be > 0, got {args.epsilon}")
    if args.rounds < 1:
        raise ValueError(f"--rounds: must be >= 1, got {args.rounds}")
    data = {"wbcd": wbcd, "mnist": mnist, "synthetic": synthetic}[args.dataset](seed=args.seed)
    train = data.train.with_availability(args.silos_per_round)
    hidden = _default_hidden(args.dataset) if args.hidden is None else args.hidden
    problem = Problem(mlp(data.num_features, hidden, data.num_outputs), data.loss, clip=args.clip)
    batch = args.batch_size or max(1, train.min_size // 4)
    cls = ALGORITHMS[args.algorithm]
    params = dict(rounds=args.rounds, batch_size=batch, step_size=args.step_size, calibration=args.calibration)
    if cls.private:
        params.update(epsilon=args.epsilon, delta=args.delta)
    algo = get_algorithm(args.algorithm, **params, metrics_every=0 if args.json else 1)
    result = _run_with_progress(algo, problem, train, args)
    acc = problem.accuracy(result.w_priv, data.test)
    payload = {
        "algorithm": args.algorithm,
        "epsilon": None if result.epsilon is None or math.isinf(result.epsilon) else result.epsilon,
        "delta": result.delta,
        "test_error": None if acc is None else 1.0 - acc,
        "train_loss": problem.objective(result.w_priv, train),
        "noise": result.shuffle if cls.shuffled else {k: (v if math.isfinite(v) else None) for k, v in result.sigmas.items()},
        "dataset": args.dataset,
        "rounds": args.rounds,
        "silos_per_round": train.silos_per_round,
        "batch_size": batch,
        "seed": args.seed,
    }
    human = "\n".join(f"{k:>16}: {v}" for k, v in payload.items())
    emit(payload, args.json, human)
    return 0


def _run_with_progress(algo, problem, train, args):
    if args.json:
        return algo.run(problem, train, seed=args.seed)
    from tqdm import tqdm

    with tqdm(desc=args.algorithm, unit="round") as bar:
        return algo.run(problem, train, seed=args.seed, callback=lambda r, w: bar.update(1))
