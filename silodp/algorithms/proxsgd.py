"""Noisy distributed proximal SGD: ISRL-DP (paper Algorithm 6) and SDP (Algorithm 7)."""

from __future__ import annotations

import math

import torch

from silodp.accounting import papers
from silodp.accounting.releases import GaussianRelease, ShuffleRelease

from .base import FederatedAlgorithm
from .context import Context
from .plan import ShufflePlan, gaussian_messages
from .privacy import TranscriptConfig
from .registry import register_algorithm


@register_algorithm
class IsrlProxSGD(FederatedAlgorithm):
    """ISRL-DP Noisy Distributed Proximal Gradient Method, paper Algorithm 6 (Thm 2.1 / E.1).

    Each round every available silo sends the mean of K per-sample clipped gradients plus
    N(0, sigma^2 I) (sensitivity 2L/K); the server averages and takes a prox step
    ``w <- prox_{eta f1}(w - eta g)`` (paper: eta = 1/(2 beta)). Minibatches are drawn without
    replacement by default (disjoint within an epoch, as the proof's parallel composition needs).
    Output: the last iterate ``w_R``.

    Releases: R messages "grad", noise multiplier sigma / (L / K); without replacement a record is
    in at most one batch per epoch of floor(n / K) rounds (parallel composition; Thm E.1's proof
    has R K <= n, one epoch). Paper noise: Thm E.1, sigma^2 = 8 L^2 ln(1/delta) / (eps^2 K^2).
    """

    name = "isrl-prox-sgd"
    stacked_trials = True
    default_replacement = False
    paper_formula = staticmethod(lambda cfg, eps, delta: papers.thm_e1(eps, delta, cfg.clip, cfg.batch_size))

    @classmethod
    def steps(cls, cfg: TranscriptConfig) -> int:
        """Messages "grad" per silo over the run."""
        return cfg.rounds

    @classmethod
    def declare_gaussian(cls, cfg: TranscriptConfig, sigmas: dict[str, float]) -> list[GaussianRelease]:
        return [gaussian_messages("grad", cls.steps(cfg), sigmas["sigma"], cfg.clip / cfg.batch_size, cfg.batch_size, cfg)]

    def _run(self, ctx: Context, w: torch.Tensor) -> torch.Tensor:
        sampler = ctx.sampler(int(self.batch_size))
        std = ctx.sigmas.get("sigma", 0.0)
        for _ in range(int(self.rounds)):
            avail = ctx.available()
            data = ctx.batch(sampler)
            g, _ = ctx.send("grad", ctx.term(data, w), avail, std=std)
            w = ctx.prox(w - ctx.eta * g)
            ctx.end_round(w)
        return w


@register_algorithm
class SdpProxSGD(IsrlProxSGD):
    """SDP Noisy Distributed Proximal Gradient Method, paper Algorithm 7 (Thm 2.1 part 2).

    As Algorithm 6, but each silo's K clipped per-sample gradients go through the binomial
    shuffle protocol P_vec (bound L) instead of Gaussian noise; the server divides the analyzer's
    output by M_r K. Deviation: Alg. 7 line 7 steps by 1/beta and proxes with 1/(2 beta); we use
    the single step size eta for both, as in Algorithm 6.
    """

    name = "sdp-prox-sgd"
    Plan = ShufflePlan
    noise_keys = ()

    @classmethod
    def declare_shuffle(cls, cfg: TranscriptConfig, epsilon: float | None, delta: float | None) -> list[ShuffleRelease]:
        """Alg 7: R invocations (one per round) at Alg 7 line 7's (N eps / (2 M), delta), each
        over the M K messages of the round's silos, bound L; reuse across epochs is composed."""
        b = papers.alg7_pvec(epsilon, delta, cfg.num_silos, cfg.m) if epsilon else {"epsilon": math.inf, "delta": 0.0}
        return [ShuffleRelease("grad", cfg.rounds, b["epsilon"], b["delta"], cls.plan.sampling(cfg), cfg.batch_size, cfg.n,
                               cfg.m * cfg.batch_size, cfg.clip)]
