"""The server of the example: broadcasts the model, averages the silos' noisy messages, steps.

It is not trusted with privacy: each silo calibrates its own noise, keeps its own ledger and
decides whether it replies (``client_app``). The server proposes a plan (the run config), then
only post-processes what the silos released (averages, the SPIDER estimator h, the prox step).
It logs each round (loss and test error on the public test split, each silo's epsilon planned: the
admitted plan its ledger charged before the first release, and what is left; the round's wall time) through Flower's logger, saves the final model where the run config's ``model-path`` says,
and reports a silo that refuses apart from a SuperNode that is unavailable (it released nothing).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from logging import INFO, WARNING
from pathlib import Path

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.common.constant import ErrorCode
from flwr.common.logger import log
from flwr.serverapp import Grid, ServerApp

from silodp.integrations.flower import EPSILON_KEY, worst_silo_epsilon
from silodp_flower.client_app import LEFT_KEY, SPENT_KEY
from silodp_flower.task import Settings, setup


def wait_for_nodes(grid: Grid, count: int, timeout: float = 120.0) -> list[int]:
    """The ids of the grid's ``count`` nodes (one per silo), once they have all connected."""
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    if len(nodes) != count:
        raise ValueError(f"grid: need one node per silo ({count}), got {len(nodes)} (waited up to {timeout:g} s)")
    return nodes


def run(grid: Grid, settings: Settings) -> dict:
    """Run ``settings`` on the nodes of ``grid`` (one per silo). Returns the outputs, the rounds
    completed, the worst-silo epsilon the silos reported, the refusals (``refused``: node id ->
    reason; a refusal ends the run) and the nodes unavailable in some round (``unavailable``:
    node id -> rounds missed; a round needs one reply at least)."""
    prepared = setup(settings)
    problem, algo = prepared.problem, prepared.algorithm
    nodes = wait_for_nodes(grid, prepared.data.train.num_silos)
    gen = torch.Generator().manual_seed(settings.seed)
    w = problem.model.init(gen, dtype=torch.float64)
    eta, w_prev, h, iterates, worst = algo.eta(problem), None, None, [], None
    refused: dict[int, str] = {}
    unavailable: dict[int, list[int]] = {}
    for r in range(settings.rounds):
        start = time.perf_counter()
        anchor = settings.algorithm == "isrl-mb-sgd" or r % settings.period == 0
        arrays = {"w": Array(w.numpy())}
        if not anchor:
            arrays["w_prev"] = Array(w_prev.numpy())
        content = RecordDict({"arrays": ArrayRecord(arrays),
                              "config": ConfigRecord({"kind": "grad" if anchor else "diff", "round": r})})
        replies = list(grid.send_and_receive([Message(content, dst_node_id=n, message_type=MessageType.TRAIN)
                                              for n in nodes]))
        answered = []
        for m in replies:
            if not m.has_error():
                answered.append(m)
            elif m.error.code == ErrorCode.NODE_UNAVAILABLE:
                unavailable.setdefault(m.metadata.src_node_id, []).append(r)
            else:
                refused[m.metadata.src_node_id] = m.error.reason
        for node, reason in refused.items():
            log(WARNING, "round %d: silo node %d refused: %s", r, node, reason)
        for node in sorted(unavailable):
            if unavailable[node][-1] == r:
                log(WARNING, "round %d: silo node %d unavailable (it released nothing this round)", r, node)
        if refused or not answered:
            break
        mean = torch.from_numpy(np.mean([m.content["arrays"]["message"].numpy() for m in answered], axis=0))
        h = mean if anchor else h + mean
        w_prev, w = w, problem.regularizer.prox(w - eta * h, eta)
        iterates.append(w)
        worst = worst_silo_epsilon([m.content for m in answered], "num-examples")
        test = prepared.data.test
        loss = problem.objective(w, test)
        # the silo's ledger charges the whole admitted plan before its first release: what it reports
        # is planned (committed for all rounds), not what the rounds so far have spent
        silos = ", ".join(f"node {m.metadata.src_node_id}: epsilon {m.content['metrics'][SPENT_KEY]:.4g} planned "
                          f"(the admitted {settings.rounds}-round plan, committed), "
                          f"{m.content['metrics'][LEFT_KEY]:.4g} left of its budget" for m in answered)
        log(INFO, "round %d/%d: test loss %.4f, test error %.4f; %s (%.2f s)", r + 1, settings.rounds, loss,
            1.0 - problem.accuracy(w, test), silos, time.perf_counter() - start)
    out = {"rounds": len(iterates), "refused": refused, "unavailable": unavailable,
           "worst_silo_epsilon": float(worst[EPSILON_KEY]) if worst else 0.0, "simulator_epsilon": prepared.certified}
    if iterates:  # the algorithm's output: the last iterate (MB-SGD) or a uniform one (SPIDER, Alg 3 line 17)
        w_out = iterates[int(torch.randint(len(iterates), (1,), generator=gen))] if algo.uniform_output else w
        out.update(w=w_out, test_error=1.0 - problem.accuracy(w_out, prepared.data.test),
                   last_test_error=1.0 - problem.accuracy(w, prepared.data.test))
    return out


def summary(out: dict) -> str:
    """The run's one-line summary."""
    head = f"{out['rounds']} rounds; "
    if "test_error" in out:
        head += f"test error {out['test_error']:.4f}; "
    return (head + f"worst-silo epsilon {out['worst_silo_epsilon']!r} (silodp run certifies "
            f"{out['simulator_epsilon']!r}); refused by {len(out['refused'])} silos, "
            f"{len(out['unavailable'])} unavailable")


def make_app(settings: Settings | None = None, on_result: Callable[[dict], None] | None = None) -> ServerApp:
    """The ServerApp, with ``settings`` or the run config's when ``None`` (the simulation engine's
    Python API passes no run config); ``on_result`` receives :func:`run`'s outputs."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        chosen = settings or Settings.from_run_config(context.run_config)
        out = run(grid, chosen)
        if chosen.model_path and "w" in out:
            np.save(Path(chosen.model_path), out["w"].numpy())
            log(INFO, "final model saved to %s", chosen.model_path)
        log(INFO, "%s", summary(out))
        if on_result is not None:
            on_result(out)

    return app


app = make_app()
