"""Baselines of the paper's experiments (Sec. 4): minibatch SGD and Local SGD (FedAvg),
non-private and ISRL-DP (Lowy and Razaviyayn 2021, arXiv:2106.09779)."""

from __future__ import annotations

from silodp._validation import check_count

from .base import FederatedAlgorithm
from .registry import register_algorithm
from .proxsgd import IsrlProxSGD


@register_algorithm
class IsrlMBSGD(IsrlProxSGD):
    """ISRL-DP minibatch SGD: Algorithm 6's update with minibatches drawn *with* replacement
    (privacy by subsampled composition instead of disjoint batches). Prox step for f1."""

    name = "isrl-mb-sgd"
    default_replacement = True
    paper_noise = None  # Thm E.1 is Alg 6's (disjoint batches)


@register_algorithm
class MBSGD(IsrlMBSGD):
    """Non-private minibatch SGD (clipping still applied when the problem sets ``clip``)."""

    name = "mb-sgd"
    private = False


@register_algorithm
class IsrlLocalSGD(FederatedAlgorithm):
    """ISRL-DP Local SGD / FedAvg: each round, every available silo starts from the server model
    and takes ``local_steps`` noisy clipped-gradient steps; each step's noisy gradient
    (sensitivity 2L/K, noise ``sigma``) is what the silo releases; the server averages the local
    models and applies ``prox_{eta f1}`` (so one local step is exactly Algorithm 6's update).
    Output: the last server model."""

    name = "isrl-local-sgd"

    def __init__(self, *, local_steps: int = 5, **kwargs):
        super().__init__(**kwargs)
        self.local_steps = local_steps

    def config_fields(self, problem, federation):
        return {**super().config_fields(problem, federation), "local_steps": int(self.local_steps)}

    @classmethod
    def gaussian_releases(cls, cfg, sigmas):
        """R * local_steps noisy gradients "grad", noise multiplier sigma / (L / K)."""
        return [cls.gaussian("grad", cfg.rounds * cfg.local_steps, sigmas["sigma"], cfg.clip / cfg.batch_size,
                             cfg.batch_size, cfg)]

    def _run(self, ctx, w):
        steps = check_count("local_steps", self.local_steps)
        sampler = ctx.sampler(int(self.batch_size))
        std = ctx.sigmas.get("sigma", 0.0)
        n = ctx.num_silos
        for _ in range(int(self.rounds)):
            avail = ctx.available()
            local = w.expand(n, -1).clone()
            for _ in range(steps):
                data = ctx.batch(sampler)
                _, released = ctx.send("grad", ctx.term(data, local), avail, std=std)
                local = local - ctx.eta * released
            a = avail.to(w.dtype)
            w = ctx.prox((local * a[:, None]).sum(0) / a.sum())
            ctx.end_round(w)
        return w


@register_algorithm
class LocalSGD(IsrlLocalSGD):
    """Non-private Local SGD (FedAvg)."""

    name = "local-sgd"
    private = False
