"""The server of the example: broadcasts the model, averages the silos' noisy messages, steps.

It is not trusted with privacy: the noise each silo adds was calibrated by silodp (the same
calibration as ``silodp run``), and each silo's own ledger decides whether it replies. The server
only post-processes what the silos released (averages, the SPIDER estimator h, the prox step).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

import numpy as np
import torch
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, MessageType, RecordDict
from flwr.serverapp import Grid, ServerApp

from silodp.integrations.flower import worst_silo_epsilon
from silodp_flower.task import Settings, diff_std, setup

log = logging.getLogger(__name__)


def wait_for_nodes(grid: Grid, count: int, timeout: float = 120.0) -> list[int]:
    """The ids of the grid's ``count`` nodes (one per silo), once they have all connected."""
    deadline = time.monotonic() + timeout
    while len(nodes := sorted(grid.get_node_ids())) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    if len(nodes) != count:
        raise ValueError(f"grid: need one node per silo ({count}), got {len(nodes)} (waited up to {timeout:g} s)")
    return nodes


def run(grid: Grid, settings: Settings) -> dict:
    """Run ``settings`` on the nodes of ``grid`` (one per silo); returns the outputs, the number
    of rounds every silo answered and the worst-silo epsilon the silos reported."""
    prepared = setup(settings)
    problem, algo, sigmas = prepared.problem, prepared.algorithm, prepared.sigmas
    nodes = wait_for_nodes(grid, prepared.data.train.num_silos)
    gen = torch.Generator().manual_seed(settings.seed)
    w = problem.model.init(gen, dtype=torch.float64)
    eta, w_prev, h, iterates, metrics = algo.eta(problem), None, None, [], None
    for r in range(settings.rounds):
        anchor = settings.algorithm == "isrl-mb-sgd" or r % settings.q == 0
        kind = "grad" if anchor else "diff"
        std = sigmas["sigma" if settings.algorithm == "isrl-mb-sgd" else "sigma1"] if anchor else \
            diff_std(algo, sigmas, float((w - w_prev).norm()))
        arrays = {"w": Array(w.numpy())}
        if not anchor:
            arrays["w_prev"] = Array(w_prev.numpy())
        content = RecordDict({"arrays": ArrayRecord(arrays),
                              "config": ConfigRecord({"kind": kind, "std": float(std), "round": r})})
        replies = list(grid.send_and_receive([Message(content, dst_node_id=n, message_type=MessageType.TRAIN)
                                              for n in nodes]))
        refused = [m.error.reason for m in replies if m.has_error()]
        if refused:
            raise RuntimeError(f"round {r}: silos refused: {refused}")
        mean = torch.from_numpy(np.mean([m.content["arrays"]["message"].numpy() for m in replies], axis=0))
        h = mean if anchor else h + mean
        w_prev, w = w, problem.regularizer.prox(w - eta * h, eta)
        iterates.append(w)
        metrics = worst_silo_epsilon([m.content for m in replies], "num-examples")
    # the algorithm's output: the last iterate (MB-SGD) or a uniform one (SPIDER, Alg 3 line 17)
    w_out = iterates[int(torch.randint(len(iterates), (1,), generator=gen))] if algo.uniform_output else w
    test_error = 1.0 - problem.accuracy(w_out, prepared.data.test)
    return {"w": w_out, "rounds": len(iterates), "test_error": test_error,
            "last_test_error": 1.0 - problem.accuracy(w, prepared.data.test),
            "worst_silo_epsilon": float(metrics["silodp_epsilon"]), "simulator_epsilon": prepared.epsilon,
            "sigmas": sigmas}


def make_app(settings: Settings | None = None, on_result: Callable[[dict], None] | None = None) -> ServerApp:
    """The ServerApp, with ``settings`` or the run config's when ``None`` (the simulation engine's
    Python API passes no run config); ``on_result`` receives :func:`run`'s outputs."""
    app = ServerApp()

    @app.main()
    def _main(grid: Grid, context: Context) -> None:
        out = run(grid, settings or Settings.from_run_config(context.run_config))
        log.warning("%d rounds; test error %.4f; worst-silo epsilon %r (silodp run certifies %r)",
                    out["rounds"], out["test_error"], out["worst_silo_epsilon"], out["simulator_epsilon"])
        if on_result is not None:
            on_result(out)

    return app


app = make_app()
