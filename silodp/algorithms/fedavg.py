"""The FedAvg template (McMahan et al. 2017): rounds of local steps from the server model, each
step's noisy clipped gradient the message a silo releases, then a server step. The family differs
only in its hooks, as Flower's FedAvgM overrides only the aggregation: who takes part
(:meth:`LocalUpdates.participants`), the local update (:meth:`LocalUpdates.local_step`), the
server's (:meth:`LocalUpdates.server_step`) and an optional start (:meth:`LocalUpdates.start`).
Local SGD, FedAvgM (server momentum) and the DP-SCAFFOLD family (DP-FedAvg, DP-FedSGD) run this
one loop. Every hook sees released values and public state only (post-processing)."""

from __future__ import annotations

from typing import Any

import torch

from .base import FederatedAlgorithm
from .context import Context


class LocalUpdates(FederatedAlgorithm):
    """The loop of the FedAvg family (not registered: a template). Needs ``local_steps`` in its
    config; releases ``local_steps`` messages "grad" per round from every participant."""

    def _run(self, ctx: Context, w: torch.Tensor) -> torch.Tensor:
        steps = int(self.local_steps)
        sampler = self.local_sampler(ctx)
        std = ctx.sigmas.get("sigma", 0.0)
        state = self.start(ctx, w, sampler, std)
        for _ in range(int(self.rounds)):
            part = self.participants(ctx)
            if bool(part.any()):
                local = w.expand(ctx.num_silos, -1).clone()
                for _ in range(steps):
                    data = ctx.batch(sampler)
                    _, released = ctx.send("grad", ctx.term(data, local), part, std=std)
                    local = self.local_step(ctx, local, released, state)
                w = self.server_step(ctx, w, local, part.to(w.dtype), state)
            ctx.end_round(w)
        return w

    def local_sampler(self, ctx: Context) -> Any:
        """The local steps' minibatches (default: ``batch_size`` records, the class's sampling)."""
        return ctx.sampler(int(self.batch_size))

    def start(self, ctx: Context, w: torch.Tensor, sampler: Any, std: float) -> dict:
        """The state the hooks share across rounds, before the first round (default: empty)."""
        return {}

    def participants(self, ctx: Context) -> torch.Tensor:
        """The silos that take part in this round ([N] bool; default: the available ones)."""
        return ctx.available()

    def local_step(self, ctx: Context, local: torch.Tensor, released: torch.Tensor, state: dict) -> torch.Tensor:
        """Every silo's local model after one step along its released gradient (default: SGD)."""
        return local - ctx.eta * released

    def server_step(self, ctx: Context, w: torch.Tensor, local: torch.Tensor, weights: torch.Tensor,
                    state: dict) -> torch.Tensor:
        """The next server model from the local models ``[N, d]`` of the participants (``weights``
        [N], 1 for a participant; default: ``prox_{eta f1}`` of their mean)."""
        return ctx.prox(self.average(local, weights))

    @staticmethod
    def average(local: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """The participants' mean local model."""
        return (local * weights[:, None]).sum(0) / weights.sum()
