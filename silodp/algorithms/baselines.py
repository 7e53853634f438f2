"""Baselines of the paper's experiments (Sec. 4): minibatch SGD and Local SGD (FedAvg),
non-private and ISRL-DP (Lowy and Razaviyayn 2021, arXiv:2106.09779), and FedAvgM (server
momentum) on the same loop through its server-step hook."""

from __future__ import annotations

import dataclasses
import math

import torch


from silodp._validation import check_count
from silodp.accounting.releases import GaussianRelease

from .config import AlgorithmConfig, check_unit, param
from .context import Context
from .fedavg import LocalUpdates
from .plan import gaussian_messages
from .privacy import TranscriptConfig
from .registry import register_algorithm
from .proxsgd import IsrlProxSGD


@register_algorithm
class IsrlMBSGD(IsrlProxSGD):
    """ISRL-DP minibatch SGD: Algorithm 6's update with minibatches drawn *with* replacement
    (privacy by subsampled composition instead of disjoint batches). Prox step for f1."""

    name = "isrl-mb-sgd"
    default_replacement = True
    #: what a silo service computes for this family (:mod:`silodp.service`): message kind -> the
    #: noise key of its std (declared on the class itself: a subclass opts in again)
    silo_noise = {"grad": "sigma"}
    paper_formula = None  # Thm E.1 is Alg 6's (disjoint batches)


@register_algorithm
class MBSGD(IsrlMBSGD):
    """Non-private minibatch SGD (clipping still applied when the problem sets ``clip``)."""

    name = "mb-sgd"
    private = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class LocalSgdConfig(AlgorithmConfig):
    """Local SGD: the shared parameters and the local steps per round."""

    local_steps: int = param(5, help="local steps per round", domain="count", transcript=True, noise_default=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("local_steps", self.local_steps)


@register_algorithm
class IsrlLocalSGD(LocalUpdates):
    """ISRL-DP Local SGD / FedAvg: each round, every available silo starts from the server model
    and takes ``local_steps`` noisy clipped-gradient steps; each step's noisy gradient
    (sensitivity 2L/K, noise ``sigma``) is what the silo releases; the server averages the local
    models and applies ``prox_{eta f1}`` (so one local step is exactly Algorithm 6's update).
    Output: the last server model. The loop is :class:`~silodp.algorithms.fedavg.LocalUpdates`'s."""

    name = "isrl-local-sgd"
    Config = LocalSgdConfig

    @classmethod
    def declare_gaussian(cls, cfg: TranscriptConfig, sigmas: dict[str, float]) -> list[GaussianRelease]:
        """R * local_steps noisy gradients "grad", noise multiplier sigma / (L / K)."""
        return [gaussian_messages("grad", cfg.rounds * cfg.local_steps, sigmas["sigma"], cfg.clip / cfg.batch_size,
                             cfg.batch_size, cfg)]


@register_algorithm
class LocalSGD(IsrlLocalSGD):
    """Non-private Local SGD (FedAvg)."""

    name = "local-sgd"
    private = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FedAvgMConfig(LocalSgdConfig):
    """FedAvgM: Local SGD's parameters and the server momentum."""

    server_momentum: float = param(0.9, help="server momentum beta_s in [0, 1) (FedAvgM)", domain="unit")
    server_step_size: float = param(1.0, help="server step eta_s of FedAvgM", domain="positive")

    def __post_init__(self) -> None:
        super().__post_init__()
        check_unit("server_momentum", self.server_momentum, closed_low=True)
        if not 0 < float(self.server_step_size) < math.inf:
            raise ValueError(f"server_step_size: must be a finite number > 0, got {self.server_step_size}")


@register_algorithm
class IsrlFedAvgM(IsrlLocalSGD):
    """ISRL-DP FedAvg with server momentum (FedAvgM, Hsu, Qi & Brown 2019, arXiv:1909.06335,
    Alg. 1): the silos' releases are Local SGD's; the server keeps a velocity
    ``v <- beta_s v + (w - avg)`` of the pseudo-gradients and steps ``w <- prox_t(w - eta_s v)``
    with the prox at the effective step ``t = eta_s eta / (1 - beta_s)`` (at a fixed point
    ``v = eta grad / (1 - beta_s)``, so the fixed points are those of proximal gradient at step t:
    the composite optimum; ``beta_s = 0``, ``eta_s = 1``: Local SGD). Post-processing, so the
    certificate is Local SGD's."""

    name = "isrl-fedavgm"
    Config = FedAvgMConfig

    def server_step(self, ctx: Context, w: torch.Tensor, local: torch.Tensor, weights: torch.Tensor,
                    state: dict) -> torch.Tensor:
        velocity = self.server_momentum * state.get("velocity", 0.0) + (w - self.average(local, weights))
        state["velocity"] = velocity
        step = self.server_step_size * ctx.eta / (1.0 - self.server_momentum)
        return ctx.prox(w - self.server_step_size * velocity, step)
