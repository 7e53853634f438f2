"""Federated proximal SVRG: ISRL-DP FedProx-SVRG / PL-SVRG (paper Algorithms 1-2) and their
SDP versions (Algorithms 8-9)."""

from __future__ import annotations

import dataclasses
import math

import torch

from silodp._validation import check_count
from silodp.accounting import papers
from silodp.accounting.releases import BatchSampling, GaussianRelease, ShuffleRelease

from .base import FederatedAlgorithm
from .config import AlgorithmConfig, param
from .context import Context
from .plan import ShufflePlan, gaussian_messages
from .privacy import TranscriptConfig
from .registry import register_algorithm


@dataclasses.dataclass(frozen=True, kw_only=True)
class SvrgConfig(AlgorithmConfig):
    """Prox-SVRG (Alg 1, 8): the epoch length Q and the restarts S (PL-SVRG, Alg 2, 9)."""

    inner_steps: int | None = param(None, help="Q, inner steps per epoch (None: floor(n / K))", domain="count",
                                    transcript=True, noise_default=1)
    restarts: int = param(1, help="S, restarts (FedProx-PL-SVRG when > 1)", domain="count", transcript=True,
                          noise_default=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.inner_steps is not None:
            check_count("inner_steps", self.inner_steps)
        check_count("restarts", self.restarts)

    def transcript_fields(self, n: int) -> dict:
        q = max(1, n // int(self.batch_size)) if self.inner_steps is None else int(self.inner_steps)
        return {"inner_steps": q, "restarts": int(self.restarts)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class PlSvrgConfig(SvrgConfig):
    """PL-SVRG (Alg 2, 9): three restarts by default."""

    restarts: int = param(3, help="S, restarts", domain="count", transcript=True, noise_default=1)


@register_algorithm
class IsrlProxSVRG(FederatedAlgorithm):
    """ISRL-DP FedProx-SVRG, paper Algorithm 1 (Thm 2.2 / E.2).

    ``rounds`` is the number of epochs E; each epoch the available silos send a noisy full local
    gradient at the snapshot ``wbar`` (``sigma1``, sensitivity 2L/n), then ``inner_steps`` Q
    (default floor(n / K)) times a variance-reduced message ``mean_K[g(w_t) - g(wbar)] + g~_i +
    N(0, sigma2^2 I)`` (sensitivity 4L/K; batches with replacement) followed by a server prox
    step. ``restarts`` S > 1 gives FedProx-PL-SVRG (Algorithm 2). Output: uniform over the inner
    iterates of the (last) run (Alg. 1 line 15); with restarts each run starts at the previous
    run's output and ``w_priv = w_S`` (Alg. 2 line 5). One availability draw per epoch.

    Releases: S E messages "full" (all n records, multiplier sigma1 / (L / n)) and S E Q messages
    "diff" (a difference of two clipped gradients per record, multiplier sigma2 / (2L / K)).
    Paper noise: Thm E.2.
    """

    name = "isrl-prox-svrg"
    stacked_trials = True
    noise_keys = ("sigma1", "sigma2")
    message_groups = ("full", "diff")
    uniform_output = True
    Config = SvrgConfig
    paper_formula = staticmethod(lambda cfg, eps, delta: papers.thm_e2(eps, delta, cfg.clip, cfg.n, cfg.rounds,
                                                                     cfg.inner_steps, cfg.restarts))

    @classmethod
    def declare_gaussian(cls, cfg: TranscriptConfig, sigmas: dict[str, float]) -> list[GaussianRelease]:
        epochs = cfg.rounds * cfg.restarts
        return [gaussian_messages("full", epochs, sigmas["sigma1"], cfg.clip / cfg.n, cfg.n, cfg, BatchSampling.FULL),
                gaussian_messages("diff", epochs * cfg.inner_steps, sigmas["sigma2"], 2 * cfg.clip / cfg.batch_size,
                             cfg.batch_size, cfg)]

    def _q(self, federation) -> int:
        """Q: ``inner_steps``, default floor(n / K) (``federation``: anything with ``min_size``)."""
        return self.config.transcript_fields(federation.min_size)["inner_steps"]

    def _run(self, ctx: Context, w: torch.Tensor) -> torch.Tensor:
        restarts = check_count("restarts", self.restarts)
        q = self._q(ctx)
        sampler = ctx.sampler(int(self.batch_size))
        s1, s2 = ctx.sigmas.get("sigma1", 0.0), ctx.sigmas.get("sigma2", 0.0)
        for _ in range(restarts):
            ctx.iterates.clear()
            wbar = w
            for _ in range(int(self.rounds)):
                avail = ctx.available()
                full = ctx.full()
                g_snap, released = ctx.send("full", ctx.term(full, wbar), avail, std=s1)
                offset = released if released is not None else g_snap
                for _ in range(q):
                    ctx.iterates.append(w.clone())
                    data = ctx.batch(sampler)
                    diff = ctx.term(data, w, w_old=wbar)
                    v, _ = ctx.send("diff", diff, avail, std=s2, offset=offset)
                    del diff  # its term holds the batch (rows gathered whole, on the shuffle path): freed before the next gather
                    w = ctx.prox(w - ctx.eta * v)
                wbar = w
                ctx.end_round(w)
            if restarts > 1:
                w = ctx.uniform_iterate()
        if restarts > 1:
            ctx.iterates.clear()  # Alg. 2 outputs w_S itself
        return w


@register_algorithm
class IsrlPLSVRG(IsrlProxSVRG):
    """ISRL-DP FedProx-PL-SVRG, paper Algorithm 2: Algorithm 1 restarted ``restarts`` = S times
    (default 3), each from the previous run's output; ``w_priv = w_S``."""

    name = "isrl-pl-svrg"
    Config = PlSvrgConfig


@register_algorithm
class SdpProxSVRG(IsrlProxSVRG):
    """SDP Prox-SVRG, paper Algorithm 8: the snapshot gradient (all n per-sample gradients, bound
    L) and each inner difference (K per-sample differences, bound 2L) go through P_vec. Alg. 8
    line 10 refers to ``wbar_{r+1}``, not yet defined at that point; we use the current snapshot
    ``wbar_r`` as in Algorithm 1."""

    name = "sdp-prox-svrg"
    Plan = ShufflePlan
    noise_keys = ()

    @classmethod
    def declare_shuffle(cls, cfg: TranscriptConfig, epsilon: float | None, delta: float | None) -> list[ShuffleRelease]:
        """Alg 8 line 1's (eps~, delta~) for every invocation (Alg 9 runs Alg 8 S times at
        eps / (2 sqrt(2 S)), delta / (2 S)): S E snapshot invocations over all M n records (bound
        L) and S E Q difference invocations over M K (bound 2L)."""
        S, E, Q, n, K = cfg.restarts, cfg.rounds, cfg.inner_steps, cfg.n, cfg.batch_size
        b = {"epsilon": math.inf, "delta": 0.0}
        if epsilon:
            e, d = (epsilon / (2 * math.sqrt(2 * S)), delta / (2 * S)) if S > 1 else (epsilon, delta)
            b = papers.alg8_pvec(e, d, cfg.num_silos, cfg.m, n, K, E, Q)
        return [ShuffleRelease("full", S * E, b["epsilon"], b["delta"], BatchSampling.FULL, n, n, cfg.m * n, cfg.clip),
                ShuffleRelease("diff", S * E * Q, b["epsilon"], b["delta"], cls.plan.sampling(cfg), K, n, cfg.m * K,
                               2 * cfg.clip)]


@register_algorithm
class SdpPLSVRG(SdpProxSVRG):
    """SDP Prox-PL-SVRG, paper Algorithm 9: Algorithm 8 restarted S times (default 3)."""

    name = "sdp-pl-svrg"
    Config = PlSvrgConfig
