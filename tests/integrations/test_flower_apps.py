"""The example Flower apps (examples/flower) end to end on an in-process grid, without Ray: the
worst-silo epsilon equals the simulator's certificate of the same configuration, the test error
agrees with a simulator run within noise, and a silo refuses once its budget is spent."""

import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("flwr")

from flwr.app import Context, RecordDict

from silodp.algorithms.privacy import certify

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "flower"))

from silodp_flower.client_app import app as client_app  # noqa: E402
from silodp_flower.server_app import run  # noqa: E402
from silodp_flower.task import Settings, setup  # noqa: E402


@pytest.fixture(autouse=True)
def _task_identity(monkeypatch):
    from flwr.supercore.task_identity import TaskIdentity

    for attr in ("_run_id", "_task_id", "_node_id"):
        monkeypatch.setattr(TaskIdentity, attr, 1)


class InProcessGrid:
    """Delivers each message to the real ClientApp of its node, each node with its own Context
    (persistent state, partition-id), as a SuperNode would; no engine, no Ray."""

    def __init__(self, num_nodes: int, run_config: dict) -> None:
        self.contexts = {100 + i: Context(run_id=1, node_id=100 + i, node_config={"partition-id": i},
                                          state=RecordDict(), run_config=dict(run_config)) for i in range(num_nodes)}

    def get_node_ids(self):
        return list(self.contexts)

    def send_and_receive(self, messages, *, timeout=None):
        return [client_app(m, self.contexts[m.metadata.dst_node_id]) for m in messages]


# accountant "rdp": every silo evaluates its ledger each round, and silodp's PLD of with-replacement
# batches (the labelled-multiplicity bound) takes seconds per evaluation on 2 shared cores
@pytest.mark.parametrize("config", [
    {"algorithm": "isrl-mb-sgd", "rounds": 20, "epsilon": 3.0, "batch-size": 32},
    {"algorithm": "isrl-spider", "rounds": 12, "epsilon": 8.0, "batch-size": 64, "q": 3},
])
def test_flower_run_certifies_what_silodp_run_certifies(config):
    config = {**config, "delta": 1e-4, "accountant": "rdp"}
    settings = Settings.from_run_config(config)
    prepared = setup(settings)
    cfg = prepared.algorithm.transcript_config(prepared.problem, prepared.data.train)
    simulator, _ = certify(prepared.algorithm, cfg, prepared.sigmas, settings.delta, accountant="rdp")
    assert simulator <= settings.epsilon
    runs = [run(InProcessGrid(2, config), settings) for _ in range(4)]
    # the smallest silo's ledger is the simulator's declaration, release for release: equal
    assert all(out["worst_silo_epsilon"] == simulator for out in runs)
    # last iterates' mean test error over 4 runs within noise of 4 simulator runs (WBCD, 2 silos,
    # 113 test records; single noisy runs spread by +-0.1 here, more for SPIDER's uniform output)
    flower = np.mean([out["last_test_error"] for out in runs])
    sim = np.mean([1.0 - prepared.problem.accuracy(prepared.algorithm.run(prepared.problem, prepared.data.train,
                                                                           seed=k).w_last, prepared.data.test)
                   for k in range(4)])
    assert abs(flower - sim) <= 0.1
    assert flower < 0.2


def test_silos_refuse_past_their_budget():
    config = {"algorithm": "isrl-mb-sgd", "rounds": 6, "epsilon": 3.0, "delta": 1e-4, "accountant": "rdp"}
    grid = InProcessGrid(2, config)
    run(grid, Settings.from_run_config(config))  # spends the budget calibrated for 6 rounds
    with pytest.raises(RuntimeError, match="budget exhausted"):  # a 7th round is refused
        run(grid, Settings.from_run_config({**config, "rounds": 1}))
