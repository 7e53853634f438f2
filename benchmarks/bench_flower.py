"""Flower integration costs, each a ratio measured in one run. Run: ``python benchmarks/bench_flower.py``.

``ledger``: incremental composition (issue 21 item 3, issue 34 item 6). The time of the 100th
update of a ledger against its first: ``SilodpAccountant`` (PLD, compose + epsilon: one more PLD
folded into the kept composition, then one query) with Poisson-subsampled Gaussians and without
amplification (plain Gaussians, whose composed PLD widens about 10x in 100 rounds at the default
grid), the silo's ledger file (``SiloLedgerDB``: admit once, then release + progress epsilon per
round, with-replacement batches as the example releases) and ``IsrlDpMod``'s in-state ledger
(project + record). No ledger recomposes past rounds: target ratio <= 2, and <= 1.2 for both
``SilodpAccountant`` rows (its kept composition holds at most ``SilodpAccountant.GROWTH`` times
the grid points of one call's PLD: past that its grid interval doubles, pessimistically).
Numbers on a shared machine: run with OPENBLAS_NUM_THREADS=1 (numpy's BLAS threads otherwise
spin against the other processes and dominate small updates).

``deployment``: what a round costs in a real deployment (item 4). One SuperLink and two SuperNodes
(one per WBCD silo) on 127.0.0.1, started and stopped by PID (``tests/integrations/
flower_processes.py``); the ISRL-DP example (``isrl-mb-sgd``) and the same app with noise and
ledger switched off (its ClientApp computes the same message from the same records, without
policy, plan admission, ledger or noise; written to a copy of the example) run alternately on it,
``--rounds`` rounds each, ``--repeats`` times. Per-round wall time: the ServerApp's own timing of
each round (broadcast, both silos' fresh ClientApp processes, aggregation, logging), the median
over rounds 2.. (round 1 of a silo's first private run calibrates and caches its plan). Target
ratio <= 1.3.
"""

from __future__ import annotations

import argparse
import contextlib
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent


def _timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def _first_and_last(update, rounds: int, repeats: int) -> tuple[float, float]:
    """Median seconds of update 1 and update ``rounds`` over ``repeats`` fresh ledgers."""
    first, last = [], []
    for k in range(repeats):
        step = update(k)
        times = [_timed(step) for _ in range(rounds)]
        first.append(times[0])
        last.append(times[-1])
    return statistics.median(first), statistics.median(last)


def bench_ledger(rounds: int, repeats: int) -> list[tuple[str, float, float]]:
    from flwr.app import Context, RecordDict
    from flwr.supercore.privacy_accounting import GaussianPrivacyEvent, NeighboringRelation, PrivacyConfig, SamplingMethod

    from silodp.accounting.releases import BatchSampling, GaussianRelease
    from silodp.integrations.flower import IsrlDpMod, SilodpAccountant, _update_release
    from silodp.integrations.flower_silo import SiloLedgerDB

    event = GaussianPrivacyEvent(noise_multiplier=1.2, sample_size=10, population_size=100)

    def accountant(sampling: SamplingMethod):
        cfg = PrivacyConfig(target_delta=1e-5, population_size=100,
                            neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE, sampling_method=sampling)

        def fresh(_):
            acc = SilodpAccountant(cfg)
            return lambda: (acc.compose(event), acc.get_epsilon(1e-5))
        return fresh

    tmp = Path(tempfile.mkdtemp(prefix="silodp-bench-"))
    release = GaussianRelease("grad", 1, 5.0, BatchSampling.WITH_REPLACEMENT, 32, 136)

    def silo(k):
        db = SiloLedgerDB(tmp / f"l{k}.sqlite", 1e3, 1e-4)
        db.admit("r", [GaussianRelease("grad", rounds, 5.0, BatchSampling.WITH_REPLACEMENT, 32, 136)])
        return lambda: (db.release("r", release, "train"), db.epsilons("r"))

    def mod(_):
        m = IsrlDpMod(clipping_norm=1.0, epsilon=1e3, delta=1e-5, rounds=10 * rounds)
        ctx = Context(run_id=0, node_id=1, node_config={}, state=RecordDict(), run_config={})
        ledger, one = m.ledger(ctx), _update_release(m.noise_multiplier)
        return lambda: (ledger.epsilon(1e-5, one), ledger.record(one))

    return [(name, *_first_and_last(fn, rounds, repeats))
            for name, fn in (("SilodpAccountant (pld)", accountant(SamplingMethod.POISSON)),
                             ("SilodpAccountant (no amp.)", accountant(SamplingMethod.NO_AMPLIFICATION)),
                             ("SiloLedgerDB", silo), ("IsrlDpMod", mod))]


#: the example's ClientApp without its privacy layer: same records, same message, no noise or ledger
_PLAIN_CLIENT = '''\"\"\"benchmarks/bench_flower.py's baseline: the example's train message, no privacy layer.\"\"\"
import secrets

from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()


@app.train()
def _train(msg: Message, context: Context) -> Message:
    import numpy as np
    import torch

    from silodp.algorithms import Problem
    from silodp.experiments.datasets import model_for
    from silodp_flower.task import Settings, SiloRecords, silo_message

    s = Settings.from_run_config(context.run_config)
    # the private app's records cache (its first message saves them beside the ledger)
    records = SiloRecords.beside(context.node_config["silodp-ledger"], s, int(context.node_config["partition-id"]))
    problem, fed = Problem(model_for(records, s.model), records.loss, clip=s.clip), records.fed
    arrays, kind = msg.content["arrays"], str(msg.content["config"]["kind"])

    def model(name):
        return torch.from_numpy(np.asarray(arrays[name].numpy(), dtype=np.float64)).to(fed.x.dtype)

    w, w_prev = model("w"), model("w_prev") if kind == "diff" else None
    message, _ = silo_message(problem, fed, kind, w, w_prev, 0.0, s.batch_size,
                              torch.Generator().manual_seed(secrets.randbits(63)))
    metrics = MetricRecord({"num-examples": 1, **dict.fromkeys(KEYS, 0.0)})
    return Message(RecordDict({"arrays": ArrayRecord({"message": Array(message.numpy())}), "metrics": metrics}),
                   reply_to=msg)
'''


def _plain_app(into: Path) -> Path:
    """A copy of the example whose ClientApp is :data:`_PLAIN_CLIENT`."""
    from silodp.integrations.flower import EPSILON_KEY
    from silodp_flower.client_app import LEFT_KEY, SPENT_KEY

    app = into / "plain-app"
    shutil.copytree(ROOT / "examples" / "flower", app, ignore=shutil.ignore_patterns("__pycache__"))
    keys = (EPSILON_KEY, SPENT_KEY, LEFT_KEY)
    (app / "silodp_flower" / "plain_client.py").write_text(_PLAIN_CLIENT + f"\nKEYS = {keys!r}\n")
    toml = app / "pyproject.toml"
    toml.write_text(toml.read_text().replace('"silodp_flower.client_app:app"', '"silodp_flower.plain_client:app"'))
    return app


_ROUND = re.compile(r"round (\d+)/(\d+): test loss .* \((\d+\.\d+) s\)")


def _round_times(app: Path, rounds: int, env: dict, timeout: float) -> list[float]:
    """``flwr run`` of ``app`` for ``rounds`` rounds; the ServerApp's wall time of each round."""
    from flower_processes import run_in_own_group

    config = f'algorithm="isrl-mb-sgd" rounds={rounds} accountant="rdp"'
    out = run_in_own_group([str(BIN / "flwr"), "run", str(app), "local", "--stream", "--run-config", config],
                           env, timeout)
    times = {int(m[1]): float(m[3]) for m in _ROUND.finditer(out.stdout)}
    if out.returncode or sorted(times) != list(range(1, rounds + 1)):
        raise RuntimeError(f"{app.name}: the run did not complete its {rounds} rounds:\n{out.stdout[-3000:]}")
    return [times[r] for r in sorted(times)]


def bench_deployment(rounds: int, repeats: int) -> tuple[float, float]:
    """Median per-round wall seconds (rounds 2..) of the private and the plain app, one deployment."""
    sys.path[:0] = [str(ROOT / "tests" / "integrations"), str(ROOT), str(ROOT / "examples" / "flower")]
    from flower_processes import Descendants, deployment_env, start_deployment

    tmp = Path(tempfile.mkdtemp(prefix="silodp-bench-deploy-"))
    env = deployment_env(tmp / "flwr-home")
    apps = {"private": ROOT / "examples" / "flower", "plain": _plain_app(tmp)}
    times: dict[str, list[float]] = {kind: [] for kind in apps}
    node_configs = [f'partition-id={i} silodp-ledger="{tmp / f"silo-{i}.sqlite"}" silodp-budget-epsilon=1000.0 '
                    "silodp-budget-delta=1e-4" for i in range(2)]
    procs = Descendants()
    try:
        with procs, contextlib.ExitStack() as stack:
            start_deployment(stack, node_configs, env, tmp)
            for _ in range(repeats):  # alternately, so both see the same machine
                for kind, app in apps.items():
                    times[kind] += _round_times(app, rounds, env, timeout=120 + 60 * rounds)[1:]
    finally:
        procs.assert_none_left()
        shutil.rmtree(tmp, ignore_errors=True)
    return statistics.median(times["private"]), statistics.median(times["plain"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", nargs="*", choices=("ledger", "deployment"), default=None)
    ap.add_argument("--rounds", type=int, default=100, help="ledger updates")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--deployment-rounds", type=int, default=4, help="rounds of each flwr run")
    ap.add_argument("--deployment-repeats", type=int, default=2, help="flwr runs of each app")
    args = ap.parse_args(argv)
    parts = args.part or ["ledger", "deployment"]
    if "ledger" in parts:
        print(f"ledger update {args.rounds} vs update 1 (median of {args.repeats} ledgers):")
        for name, first, last in bench_ledger(args.rounds, args.repeats):
            print(f"  {name:26s} first {first * 1e3:8.2f} ms  update {args.rounds} {last * 1e3:8.2f} ms  "
                  f"ratio {last / first:.2f}")
    if "deployment" in parts:
        private, plain = bench_deployment(args.deployment_rounds, args.deployment_repeats)
        print(f"round of a localhost deployment (2 SuperNodes, median of rounds 2-{args.deployment_rounds} of "
              f"{args.deployment_repeats} runs each): private {private:.2f} s, without noise and ledger "
              f"{plain:.2f} s, ratio {private / plain:.2f}")

if __name__ == "__main__":
    main()
