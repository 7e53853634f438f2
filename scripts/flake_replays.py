"""The false-failure probabilities quoted in the comments of the tests that assert on unseeded runs
(the silos draw their batches and noise from OS entropy: no test may seed them), replayed in
process with fresh seeds, so that each quoted number comes from a command.

* ``mod``: tests/verify/test_audit_flower_mod.py's plain mod, its 300 canaries' scores (+-1 plus
  the mod's noise and the public noise the adversary subtracts): Steinke's bound's quantiles
  against the claim 2;
* ``app-audit``: tests/verify/test_audit_flower.py's public-seed-noise run, its 200 canaries read
  exactly where drawn (3 x 200 draws with replacement) and 0 where not: Steinke's bound's
  quantiles against the silos' claim;
* ``server-noise``: tests/integrations/test_flower_apps.py's malicious-server check, the mean
  over coordinates of the sd of 6 messages of silo 0, in units of sigma.

(tests/integrations/test_secagg.py's runs: ``benchmarks/secagg_error_tails.py``.)

    nice -n 15 python scripts/flake_replays.py mod|app-audit|server-noise [--runs 20000]
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
def mod(runs: int, rng) -> None:
    from silodp.integrations.flower import IsrlDpMod
    from silodp.verify.audit.flower_mod import MOD_SCENARIOS
    from silodp.verify.audit.onerun import CanaryScores, steinke_epsilon

    sc = MOD_SCENARIOS["public-seed-noise"]
    z = IsrlDpMod(clipping_norm=1.0, epsilon=sc.epsilon, delta=1e-5, rounds=sc.rounds).noise_multiplier
    included = rng.random((runs, sc.rounds)) < 0.5
    scores = np.where(included, 1.0, -1.0) + rng.normal(0.0, np.sqrt(2.0) * z, included.shape)
    bound = steinke_epsilon(CanaryScores(scores, included), 1e-5, 0.05).epsilon
    print(f"plain mod, z {z:.2f}, {runs} runs: Steinke's bound quantiles (0.5, 0.99, max) "
          f"{np.quantile(bound, 0.5):.3f} {np.quantile(bound, 0.99):.3f} {bound.max():.3f}; claim {sc.epsilon:g}")


def app_audit(runs: int, rng, canaries: int = 200, rounds: int = 3) -> None:
    from silodp.verify.audit import flower_audit as fa
    from silodp.verify.audit.onerun import CanaryScores, steinke_epsilon

    task = fa._import_app(str(ROOT / "examples" / "flower"))
    base = task.Settings(rounds=rounds)
    name = fa.dataset_name(base.dataset, canaries, 0)
    fa.register(name)
    run = dataclasses.replace(base, dataset=name, model="linear", accountant=base.accountant or "rdp",
                              batch_size=canaries)
    claim = task.setup(run).certified
    included = fa.inclusion(canaries, 0)
    drawn = np.zeros((runs, canaries))
    for _ in range(rounds):
        draws = rng.integers(0, canaries, (runs, canaries))
        np.add.at(drawn, (np.arange(runs)[:, None], draws), 1.0)
    scores = np.where(included, 1.0, -1.0) * drawn * rng.uniform(0.5, 1.5, drawn.shape)  # any positive size
    bound = steinke_epsilon(CanaryScores(scores, np.broadcast_to(included, scores.shape)), run.delta, 0.05).epsilon
    print(f"public-seed-noise app audit, {runs} runs: never drawn per run {(drawn == 0).sum(1).max()} at most; "
          f"Steinke's bound min {bound.min():.3f}, median {np.median(bound):.3f}; the silos' claim {claim:.3f}")


def server_noise(runs: int, rng) -> None:
    import torch

    sys.path.insert(0, str(ROOT / "examples" / "flower"))
    from silodp_flower.task import Settings, setup, silo_message, silo_plan

    s = Settings.from_run_config({"algorithm": "isrl-mb-sgd", "rounds": 6, "epsilon": 3.0, "delta": 1e-4,
                                  "accountant": "rdp"})
    sigma = setup(s).sigmas["sigma"]
    plan = silo_plan(s, 0, 1e-4)
    w = torch.zeros(plan.problem.model.dim, dtype=plan.fed.x.dtype)
    for std in (plan.std("grad", w, None), 0.0):
        msgs = np.array([silo_message(plan.problem, plan.fed, "grad", w, None, std, s.batch_size,
                                      torch.Generator().manual_seed(int(rng.integers(0, 2**62))))[0].numpy()
                         for _ in range(6 * runs)])
        stat = msgs.reshape(runs, 6, -1).std(axis=1).mean(axis=1) / sigma
        print(f"silo noise std {std:.4f}, {runs} replays of 6 messages: statistic / sigma mean {stat.mean():.4f} "
              f"sd {stat.std():.4f}; (mean - 0.5) / sd = {(stat.mean() - 0.5) / stat.std():.1f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("what", choices=("mod", "app-audit", "server-noise"))
    ap.add_argument("--runs", type=int, default=None)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    if args.what == "mod":
        mod(args.runs or 20000, rng)
    elif args.what == "app-audit":
        app_audit(args.runs or 20000, rng)
    else:
        server_noise(args.runs or 3000, rng)


if __name__ == "__main__":
    main()
