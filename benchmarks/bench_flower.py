"""Flower integration costs, each a ratio measured in one run. Run: ``python benchmarks/bench_flower.py``.

``ledger``: incremental composition (issue 21 item 3). The time of the 100th update of a ledger
against its first: ``SilodpAccountant`` (PLD, Poisson-subsampled Gaussians, compose + epsilon:
one more PLD folded into the kept composition, then one query), the silo's ledger file
(``SiloLedgerDB``: admit once, then release + progress epsilon per round, with-replacement
batches as the example releases) and ``IsrlDpMod``'s in-state ledger (project + record). No
ledger recomposes past rounds: target ratio <= 2. ``SilodpAccountant``'s update still grows with
the support of the composed PLD (about 3x wider after 100 rounds at the default grid), never
with the number of rounds itself. Numbers on a shared machine: run with OPENBLAS_NUM_THREADS=1
(numpy's BLAS threads otherwise spin against the other processes and dominate small updates).

``message``: what a round costs a silo in a deployment (item 4). A SuperNode starts a fresh
ClientApp process per message; the wall time of one such process answering a train message of
the example with the privacy layer (policy, plan admission, ledger, noise) against the same
process computing the same message with noise and ledger switched off. Target ratio <= 1.3.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


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

    cfg = PrivacyConfig(target_delta=1e-5, population_size=100, neighboring_relation=NeighboringRelation.ADD_OR_REMOVE_ONE,
                        sampling_method=SamplingMethod.POISSON)
    event = GaussianPrivacyEvent(noise_multiplier=1.2, sample_size=10, population_size=100)

    def accountant(_):
        acc = SilodpAccountant(cfg)
        return lambda: (acc.compose(event), acc.get_epsilon(1e-5))

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
            for name, fn in (("SilodpAccountant (pld)", accountant), ("SiloLedgerDB", silo), ("IsrlDpMod", mod))]


_MESSAGE = r'''
import sys, time
start = time.perf_counter()
import numpy as np
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.supercore.task_identity import TaskIdentity
for attr in ("_run_id", "_task_id", "_node_id"):
    setattr(TaskIdentity, attr, 1)
private, ledger, dim = sys.argv[1] == "private", sys.argv[2], int(sys.argv[3])
run = {"rounds": 25, "accountant": "rdp"}
node = {"partition-id": 0, "silodp-ledger": ledger, "silodp-budget-epsilon": 1e3, "silodp-budget-delta": 1e-4}
ctx = Context(run_id=1, node_id=1, node_config=node, state=RecordDict(), run_config=run)
msg = Message(RecordDict({"arrays": ArrayRecord({"w": Array(np.zeros(dim))}), "config": ConfigRecord({"kind": "grad"})}),
              dst_node_id=1, message_type=MessageType.TRAIN)
if private:
    from silodp_flower.client_app import app
    out = app(msg, ctx)
    assert not out.has_error(), out.error
else:  # the same message, computed without policy, plan, ledger or noise
    import torch
    from silodp_flower.task import Settings, silo_data, silo_message
    from silodp.algorithms import Problem
    from silodp.experiments.datasets import load_cached, model_for
    s = Settings.from_run_config(run)
    data = load_cached(s.dataset, s.seed, 0.2, 0.2)
    problem = Problem(model_for(data, s.model), data.loss, clip=s.clip)
    fed = silo_data(data, 0)
    silo_message(problem, fed, "grad", torch.zeros(dim, dtype=fed.x.dtype), None, 0.0, s.batch_size,
                 torch.Generator().manual_seed(0))
print(time.perf_counter() - start)
'''


def bench_message(repeats: int) -> tuple[float, float]:
    """Median wall seconds of a fresh process answering one train message: private, non-private."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "examples" / "flower")]),
           "FLWR_TELEMETRY_ENABLED": "0"}
    sys.path[:0] = [str(ROOT), str(ROOT / "examples" / "flower")]
    from silodp_flower.task import Settings, setup

    dim = setup(Settings.from_run_config({"rounds": 25, "accountant": "rdp"})).problem.model.dim
    ledger = Path(tempfile.mkdtemp(prefix="silodp-bench-")) / "silo.sqlite"

    def once(kind: str) -> float:
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", _MESSAGE, kind, str(ledger), str(dim)], env=env, check=True,
                       capture_output=True)
        return time.perf_counter() - start

    once("private")  # the silo's first message of a plan: calibration and admission, cached on its disk
    times = {kind: [] for kind in ("private", "plain")}
    for _ in range(repeats):  # interleaved, so both see the same machine
        for kind in times:
            times[kind].append(once(kind))
    return statistics.median(times["private"]), statistics.median(times["plain"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("part", nargs="*", choices=("ledger", "message"), default=None)
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args(argv)
    parts = args.part or ["ledger", "message"]
    if "ledger" in parts:
        print(f"ledger update {args.rounds} vs update 1 (median of {args.repeats} ledgers):")
        for name, first, last in bench_ledger(args.rounds, args.repeats):
            print(f"  {name:24s} first {first * 1e3:8.2f} ms  update {args.rounds} {last * 1e3:8.2f} ms  "
                  f"ratio {last / first:.2f}")
    if "message" in parts:
        private, plain = bench_message(args.repeats)
        print(f"train message in a fresh ClientApp process (median of {args.repeats}): private {private:.2f} s, "
              f"without noise and ledger {plain:.2f} s, ratio {private / plain:.2f}")


if __name__ == "__main__":
    main()
