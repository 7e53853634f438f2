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

``deployment``: what a round costs in a real deployment with the silo privacy service (issue 34
item 6). One local federation (``silodp federation up``'s library call through
``tests/integrations/flower_processes.federation``: a SuperLink, two SuperNodes and two warm silo
services on 127.0.0.1, each started and stopped by its PID, asserted gone afterwards) runs, alternately,
``--deployment-repeats`` times each: the example (``isrl-mb-sgd``, its default run config; its thin
ClientApp forwards the server's proposal and model to the service, which admits the plan, checks
the model, records the release in its ledger, noises and answers) and a plain app doing the same
local computation without privacy (the clipped mean gradient of a with-replacement batch computed in
the ClientApp process from the silo's records in numpy: no torch, no service, no admission, ledger
or noise; checked equal to silodp's kernel first), ``--deployment-rounds`` rounds per run. Per-round
wall time: the ServerApp's own timing of each round (broadcast, both silos' fresh ClientApp
processes, aggregation, logging), the median over rounds 2.. (round 1 of a run admits its plan; the
first private run also calibrates). Target ratio <= 1.3 (:data:`TARGET`).
"""

from __future__ import annotations

import argparse
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
#: the deployment target: a private round costs at most this times the plain one (issue 34 item 6)
TARGET = 1.3


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


def clipped_mean_grad(w, x, y, clip: float, idx):
    """The plain app's local computation in numpy (no torch): the mean over the batch ``idx`` of
    the per-record logistic-loss gradients of the linear model ``w`` (W then b), each clipped to
    l2 norm ``clip`` (what the service computes before its noise; checked equal by
    :func:`_check_plain_computation`)."""
    import numpy as np

    xb, yb = x[idx], y[idx]
    z = xb @ w[:-1] + w[-1]
    coef = 0.5 * (1.0 + np.tanh(0.5 * z)) - yb  # sigmoid(z) - y, without overflow
    grads = coef[:, None] * np.concatenate([xb, np.ones((len(idx), 1))], axis=1)
    norms = np.linalg.norm(grads, axis=1)
    factor = np.minimum(1.0, clip / np.maximum(norms, 1e-300))
    return (grads * factor[:, None]).mean(axis=0)


#: the example's app without its privacy layer: the same message (the clipped mean gradient of a
#: with-replacement batch) computed in the ClientApp process from the silo's records (numpy only,
#: as cheap as a plain app gets), no service, no admission, no ledger, no noise
_PLAIN_CLIENT = '''"""benchmarks/bench_flower.py's baseline: the example's train message, no privacy layer."""
import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

app = ClientApp()
_RNG = np.random.default_rng()


@app.train()
def _train(msg: Message, context: Context) -> Message:
    partition = int(context.node_config["partition-id"])
    with np.load(f"{context.run_config['records-dir']}/silo-{partition}.npz") as saved:
        x, y = saved["x"], saved["y"]
    w = np.asarray(msg.content["arrays"]["w"].numpy(), dtype=np.float64)
    idx = _RNG.integers(0, len(x), int(context.run_config["batch-size"]))
    message = clipped_mean_grad(w, x, y, float(context.run_config["clip"]), idx)
    metrics = MetricRecord({"num-examples": 1, **dict.fromkeys(KEYS, 0.0)})
    return Message(RecordDict({"arrays": ArrayRecord({"message": Array(message)}), "metrics": metrics}),
                   reply_to=msg)
'''


def _plain_app(into: Path) -> Path:
    """A copy of the example whose ClientApp is :data:`_PLAIN_CLIENT` (its run config gains
    ``records-dir``, where the benchmark saved each silo's records)."""
    import inspect

    from silodp.integrations.flower import EPSILON_KEY
    from silodp_flower.client_app import LEFT_KEY, SPENT_KEY

    app = into / "plain-app"
    shutil.copytree(ROOT / "examples" / "flower", app, ignore=shutil.ignore_patterns("__pycache__"))
    keys = (EPSILON_KEY, SPENT_KEY, LEFT_KEY)
    (app / "silodp_flower" / "plain_client.py").write_text(
        _PLAIN_CLIENT + "\n\n" + inspect.getsource(clipped_mean_grad) + f"\n\nKEYS = {keys!r}\n")
    toml = app / "pyproject.toml"
    text = toml.read_text().replace('"silodp_flower.client_app:app"', '"silodp_flower.plain_client:app"')
    toml.write_text(text.replace("[tool.flwr.app.config]\n", '[tool.flwr.app.config]\nrecords-dir = ""\n'))
    return app


def _check_plain_computation(records) -> None:
    """The plain app computes what the service computes before its noise (silodp's kernel)."""
    import numpy as np
    import torch

    from silodp.algorithms import Problem
    from silodp.algorithms.grads import clipped_grad_sum
    from silodp.experiments.datasets import model_for

    problem, fed = Problem(model_for(records, "linear"), records.loss, clip=1.0), records.fed
    n = int(fed.counts[0])
    x, y = fed.x[0, :n].numpy(), fed.y[0, :n].numpy()
    rng = np.random.default_rng(0)
    w, idx = rng.normal(size=problem.model.dim), rng.integers(0, n, 32)
    ours = clipped_mean_grad(w, x, y, 1.0, idx)
    xb, yb = fed.gather(torch.from_numpy(idx)[None])
    theirs = clipped_grad_sum(problem, torch.from_numpy(w), xb, yb, torch.full((1, 32), 1 / 32, dtype=torch.float64),
                              1.0, "ghost")[0].reshape(-1).numpy()
    if not np.allclose(ours, theirs, rtol=1e-9, atol=1e-12):
        raise RuntimeError("the plain app's computation is not the service's")


_ROUND = re.compile(r"round (\d+)/(\d+): test loss .* \((\d+\.\d+) s\)")


def _round_times(app: Path, connection: str, config: str, rounds: int, env: dict, timeout: float) -> list[float]:
    """``flwr run`` of ``app`` for ``rounds`` rounds; the ServerApp's wall time of each round."""
    from flower_processes import run_in_own_group

    out = run_in_own_group([str(BIN / "flwr"), "run", str(app), connection, "--stream", "--run-config", config],
                           env, timeout)
    times = {int(m[1]): float(m[3]) for m in _ROUND.finditer(out.stdout)}
    if out.returncode or sorted(times) != list(range(1, rounds + 1)):
        raise RuntimeError(f"{app.name}: the run did not complete its {rounds} rounds:\n{out.stdout[-3000:]}")
    return [times[r] for r in sorted(times)]


def _per_message(silo: dict, records: Path, calls: int = 20) -> dict[str, float]:
    """Where a private message's time goes, against a warm service (median ms of ``calls``): one
    HTTP round trip (``GET /status``), one release (``POST /release``: proposal check, the plan's
    admission, the model check, the ledger's transaction, the noised kernel, JSON + base64 both
    ways) and the plain app's whole computation (``np.load`` of the records + the clipped mean)."""
    import numpy as np

    from silodp.service.client import ServiceClient, proposal_of

    client = ServiceClient(f"http://127.0.0.1:{silo['port']}", (Path(silo["ledger"]).parent / "token").read_text())
    proposal, w = proposal_of({"algorithm": "isrl-mb-sgd", "rounds": 1000}), np.zeros(31)

    def plain():
        with np.load(records / "silo-0.npz") as saved:
            x, y = saved["x"], saved["y"]
        clipped_mean_grad(w, x, y, 1.0, np.random.default_rng().integers(0, len(x), 32))

    client.release("bench-profile", proposal, "grad", w)  # admitted (and calibrated) once
    out = {name: 1e3 * statistics.median(_timed(fn) for _ in range(calls))
           for name, fn in (("http", client.status), ("release", lambda: client.release("bench-profile", proposal,
                                                                                            "grad", w)),
                            ("plain", plain))}
    client.close()
    return out


def bench_deployment(rounds: int, repeats: int) -> tuple[float, float, dict[str, float]]:
    """Median per-round wall seconds (rounds 2..) of the private and the plain app, one federation,
    and :func:`_per_message`'s profile."""
    import os

    sys.path[:0] = [str(ROOT / "tests" / "integrations"), str(ROOT), str(ROOT / "examples" / "flower")]
    os.environ["PYTHONPATH"] = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
    from flower_processes import Descendants, federation

    from silodp.service.silo import SiloRecords

    tmp = Path(tempfile.mkdtemp(prefix="silodp-bench-deploy-"))
    records = tmp / "records"
    records.mkdir()
    for i in range(2):
        saved = SiloRecords.from_dataset("wbcd", i, 0)
        saved.save(records / f"silo-{i}.npz")
    _check_plain_computation(saved)
    apps = {"private": (ROOT / "examples" / "flower", f"algorithm=\"isrl-mb-sgd\" rounds={rounds}"),
            "plain": (_plain_app(tmp), f"algorithm=\"isrl-mb-sgd\" rounds={rounds} records-dir=\"{records}\"")}
    times: dict[str, list[float]] = {kind: [] for kind in apps}
    procs = Descendants()
    try:
        with procs, federation(tmp / "fed", silos=2, budget_epsilon=1e3, budget_delta=1e-4) as (info, env):
            for _ in range(repeats):  # alternately, so both see the same machine
                for kind, (app, config) in apps.items():
                    times[kind] += _round_times(app, info["connection"], config, rounds, env,
                                                timeout=120 + 60 * rounds)[1:]
            profile = _per_message(info["silos"][0], records)
        procs.assert_none_left()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return statistics.median(times["private"]), statistics.median(times["plain"]), profile


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
        private, plain, profile = bench_deployment(args.deployment_rounds, args.deployment_repeats)
        ratio = private / plain
        print(f"round of a localhost federation (2 SuperNodes, 2 warm silo services; median of rounds "
              f"2-{args.deployment_rounds} of {args.deployment_repeats} runs each): private (ClientApp -> service) "
              f"{private:.3f} s, plain (same computation in the ClientApp, numpy) {plain:.3f} s, "
              f"ratio {ratio:.2f} ({'meets' if ratio <= TARGET else 'misses'} the target <= {TARGET})")
        print(f"  per message, warm service (median ms): HTTP round trip {profile['http']:.1f}, release "
              f"{profile['release']:.1f}; the plain app's computation {profile['plain']:.1f}")

if __name__ == "__main__":
    main()
