"""Federated proximal SPIDER: ISRL-DP FedProx-SPIDER (paper Algorithm 3), SDP FedProx-SPIDER
(Algorithm 10) and the alternate ISRL-DP Fed-SPIDER (Algorithm 11, App. H.1)."""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from silodp._validation import check_count, refuse_renamed
from silodp.accounting import papers
from silodp.accounting.releases import GaussianRelease, ShuffleRelease

from .base import FederatedAlgorithm
from .config import AlgorithmConfig, param
from .context import Context
from .plan import ShufflePlan, gaussian_messages
from .privacy import TranscriptConfig
from .registry import register_algorithm


@dataclasses.dataclass(frozen=True, kw_only=True)
class FedSpiderConfig(AlgorithmConfig):
    """Fed-SPIDER (Alg 11): the second batch size K2."""

    batch_size2: int | None = param(None, help="K2, the second batch size (None: K)", domain="count",
                                    transcript=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.batch_size2 is not None:
            check_count("batch_size2", self.batch_size2)

    def transcript_fields(self, n: int) -> dict:
        return {"batch_size2": int(self.batch_size if self.batch_size2 is None else self.batch_size2)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class SpiderConfig(FedSpiderConfig):
    """FedProx-SPIDER (Alg 3, 10): K2 and the ``period`` (the paper's q) of fresh minibatch
    gradients. ``q`` is refused with the new name: in silodp ``q`` is a sampling rate."""

    period: int = param(2, help="the period of fresh minibatch gradients (the paper's q)", domain="count",
                        flag="--spider-period", transcript=True, noise_default=1)
    #: the old spelling of ``period`` (renamed in round 7), refused
    q: dataclasses.InitVar[object] = None

    def __post_init__(self, q: object = None) -> None:  # type: ignore[override]
        if q is not None:
            refuse_renamed(["q"])
        super().__post_init__()
        check_count("period", self.period)

    def transcript_fields(self, n: int) -> dict:
        return {**super().transcript_fields(n), "period": int(self.period)}


def second_batch(cfg: Any) -> int:
    """K2 of a SPIDER transcript (``batch_size2``; None: K), at most n."""
    k2 = int(cfg.batch_size if cfg.batch_size2 is None else cfg.batch_size2)
    if k2 > cfg.n:
        raise ValueError(f"batch_size2: must lie in [1, n], got {k2} > {cfg.n}")
    return k2


def anchors(cfg: TranscriptConfig) -> int:
    """Rounds r = 0..R-1 of Alg 3 / Alg 10 with q | r (q = ``period``, fresh minibatch gradients):
    ceil(R / q)."""
    return -(-cfg.rounds // cfg.period)


def _spider_paper(cfg, eps, delta):
    if math.isinf(cfg.beta):
        return papers.h2_spider(eps, delta, cfg.clip, cfg.n, cfg.rounds, cfg.period)
    return papers.thm_f1(eps, delta, cfg.clip, cfg.beta, cfg.n, cfg.rounds, cfg.period)


def _smaller(a: float, b):
    return torch.clamp(b, max=a) if isinstance(b, torch.Tensor) else min(a, b)


@register_algorithm
class IsrlSpider(FederatedAlgorithm):
    """ISRL-DP FedProx-SPIDER, paper Algorithm 3 (Thm 3.1 / F.1).

    Every ``period`` rounds (the paper's q) the available silos send a noisy minibatch gradient
    (K1 = ``batch_size`` samples, noise ``sigma1``, sensitivity 2L/K1); in between they send the SPIDER difference
    ``mean_K2[g(w_r) - g(w_{r-1})]`` (K2 = ``batch_size2``) with noise std
    ``min(sigma2 * ||w_r - w_{r-1}||, sigma2_hat)`` (Alg. 3 line 10). When the problem has a
    smoothness constant beta, each per-sample difference is clipped to
    ``min(2L, beta ||w_r - w_{r-1}||)`` so the smaller sensitivity ``2 beta ||w_r - w_{r-1}|| / K2``
    holds by construction. Server: ``h_r = h_{r-1} + H_r``, ``w_{r+1} = prox(w_r - eta h_r)``.
    Batches with replacement. Output: uniform over ``w_1..w_R`` (Alg. 3 line 17).

    Releases: ceil(R / q) messages "grad" (multiplier sigma1 / (L / K1)) and R - ceil(R / q)
    messages "diff" with noise min(sigma2 ||dw||, sigma2_hat) over contributions of norm
    min(beta ||dw||, 2L) / K2, so multiplier >= min(sigma2 K2 / beta, sigma2_hat K2 / (2L)) at
    every step size. Paper noise: Thm F.1 (App H.2's sigma2 = inf when the problem has no beta).
    """

    name = "isrl-spider"
    stacked_trials = True

    def __init__(self, **params) -> None:
        refuse_renamed(params)  # ``q`` -> ``period``, named before the generic "not a parameter"
        super().__init__(**params)

    noise_keys = ("sigma1", "sigma2", "sigma2_hat")
    message_groups = ("grad", "diff")
    #: what a silo service computes (:mod:`silodp.service`): kind -> the noise key of its std, or
    #: the method giving it from (sigmas, ||w_r - w_{r-1}||) (Alg 3 line 10's difference noise)
    silo_noise = {"grad": "sigma1", "diff": "diff_noise"}
    uniform_output = True
    Config = SpiderConfig
    paper_formula = staticmethod(_spider_paper)

    @classmethod
    def declare_gaussian(cls, cfg: TranscriptConfig, sigmas: dict[str, float]) -> list[GaussianRelease]:
        k1, k2, a = cfg.batch_size, second_batch(cfg), anchors(cfg)
        s2 = sigmas["sigma2"]
        z_step = math.inf if math.isinf(s2) else s2 * k2 / cfg.beta
        z2 = min(z_step, sigmas["sigma2_hat"] * k2 / (2 * cfg.clip))
        return [gaussian_messages("grad", a, sigmas["sigma1"], cfg.clip / k1, k1, cfg),
                GaussianRelease("diff", cfg.rounds - a, z2, cls.plan.sampling(cfg), k2, cfg.n)]

    def _k2(self) -> int:
        return int(self.batch_size) if self.batch_size2 is None else check_count("batch_size2", self.batch_size2)

    @staticmethod
    def diff_noise(sigmas: dict, step: float | torch.Tensor) -> float | torch.Tensor:
        """Noise std of a SPIDER difference, min(sigma2 ||w_r - w_{r-1}||, sigma2_hat) (Alg 3
        line 10); ``step`` a float, or one norm per stacked run (a tensor, as in
        :mod:`silodp.verify.rates.trials`)."""
        s2, s2_hat = sigmas.get("sigma2", 0.0), sigmas.get("sigma2_hat", 0.0)
        if isinstance(step, torch.Tensor):
            return torch.clamp(s2 * step, max=s2_hat) if math.isfinite(s2) else torch.full_like(step, s2_hat)
        return min(s2 * step if math.isfinite(s2) else math.inf, s2_hat)

    def _run(self, ctx: Context, w: torch.Tensor) -> torch.Tensor:
        q = check_count("period", self.period)
        s1 = ctx.sigmas.get("sigma1", 0.0)
        clip, beta = ctx.clip, ctx.beta
        sample1, sample2 = ctx.sampler(int(self.batch_size)), ctx.sampler(self._k2())
        h = w_prev = None
        for r in range(int(self.rounds)):
            avail = ctx.available()
            if r % q == 0:
                data = ctx.batch(sample1)
                h, _ = ctx.send("grad", ctx.term(data, w), avail, std=s1)
            else:
                data = ctx.batch(sample2)
                step = (w - w_prev).norm(dim=-1)  # one norm per stacked run when w is [T, d]
                step = float(step) if step.dim() == 0 else step
                diff_clip = None
                if beta is not None:
                    diff_clip = beta * step if clip is None else _smaller(2 * clip, beta * step)
                diff = ctx.term(data, w, w_old=w_prev, diff_clip=diff_clip)
                big_h, _ = ctx.send("diff", diff, avail, std=self.diff_noise(ctx.sigmas, step))
                del diff  # its term holds the batch (rows gathered whole, on the shuffle path): freed before the next gather
                h = h + big_h
            w_prev, w = w, ctx.prox(w - ctx.eta * h)
            ctx.end_round(w, keep_iterate=True)
        return w


@register_algorithm
class SdpSpider(IsrlSpider):
    """SDP FedProx-SPIDER, paper Algorithm 10 (Thm 3.2 / F.2): Algorithm 3 with both message
    types summed by P_vec (bounds L and min(2L, beta ||w_r - w_{r-1}||))."""

    name = "sdp-spider"
    Plan = ShufflePlan
    noise_keys = ()
    #: the budget split of lines 8 and 12 (:data:`silodp.accounting.papers.ALG10_SPLITS`): "printed"
    #: (Alg 10 as printed, the default) or "proof" (Thm F.2's proof; docs/paper-notes.md)
    alg10_split = "printed"

    @classmethod
    def with_split(cls, split: str) -> type:
        """This class with the Alg 10 budget split ``split`` ("printed" | "proof"); the same class
        for the current split, else a subclass (one per split, cached)."""
        if split not in papers.ALG10_SPLITS:
            raise ValueError(f"split: must be one of {papers.ALG10_SPLITS}, got {split!r}")
        if split == cls.alg10_split:
            return cls
        return _SPLITS.setdefault((cls, split), type(f"{cls.__name__}_{split}", (cls,), {"alg10_split": split}))

    @classmethod
    def declare_shuffle(cls, cfg: TranscriptConfig, epsilon: float | None, delta: float | None) -> list[ShuffleRelease]:
        """Alg 10 lines 8 and 12: ceil(R / q) gradient invocations over M K1 messages (bound L) and
        R - ceil(R / q) difference invocations over M K2 (bound 2L), each at its budget."""
        a, k1, k2 = anchors(cfg), cfg.batch_size, second_batch(cfg)
        b = {"epsilon1": math.inf, "delta1": 0.0, "epsilon2": math.inf, "delta2": 0.0}
        if epsilon:
            b = papers.alg10_pvec(epsilon, delta, cfg.num_silos, cfg.m, cfg.n, k1, k2, cfg.rounds, cfg.period,
                                  cls.alg10_split)
        how = cls.plan.sampling(cfg)
        return [ShuffleRelease("grad", a, b["epsilon1"], b["delta1"], how, k1, cfg.n, cfg.m * k1, cfg.clip),
                ShuffleRelease("diff", cfg.rounds - a, b["epsilon2"], b["delta2"], how, k2, cfg.n, cfg.m * k2,
                               2 * cfg.clip)]


_SPLITS: dict = {}


@register_algorithm
class IsrlFedSpider(FederatedAlgorithm):
    """ISRL-DP Fed-SPIDER, alternate implementation, paper Algorithm 11 (App. H.1).

    Start: silos send a noisy K2-sample gradient at ``w_0^2`` (``sigma2``). Each of the
    ``rounds`` - 1 rounds: ``w^0 = w^2``, ``w^1 = w^2 - eta v^2``; silos send
    ``mean_K1[g(w^1) - g(w^0)] + v^2 + N(0, sigma1^2)`` (sensitivity 4L/K1); ``w^2 = w^1 - eta v^1``;
    silos send a noisy K2-sample gradient at ``w^2`` (``sigma2``, sensitivity 2L/K2).
    ``batch_size`` is K1 and ``batch_size2`` K2. Output: uniform over ``{w_r^1, w_r^2}``.
    Deviation: Alg. 11 takes plain gradient steps; we apply ``prox_{eta f1}`` after each step so
    composite problems are handled (identical when f1 = 0).

    Releases: R gradients "grad" (multiplier sigma2 / (L / K2)) and R - 1 differences "diff"
    (sigma1 / (2L / K1)), 2R - 1 in all. Paper noise: App H.2.
    """

    name = "isrl-fed-spider"
    stacked_trials = True
    noise_keys = ("sigma1", "sigma2")
    message_groups = ("diff", "grad")
    uniform_output = True
    Config = FedSpiderConfig
    paper_formula = staticmethod(lambda cfg, eps, delta: papers.h2_fed_spider(eps, delta, cfg.clip, cfg.n, cfg.rounds))

    @classmethod
    def declare_gaussian(cls, cfg: TranscriptConfig, sigmas: dict[str, float]) -> list[GaussianRelease]:
        k1, k2, R = cfg.batch_size, second_batch(cfg), cfg.rounds
        return [gaussian_messages("grad", R, sigmas["sigma2"], cfg.clip / k2, k2, cfg),
                gaussian_messages("diff", R - 1, sigmas["sigma1"], 2 * cfg.clip / k1, k1, cfg)]

    def _run(self, ctx: Context, w2: torch.Tensor) -> torch.Tensor:
        k2 = int(self.batch_size) if self.batch_size2 is None else check_count("batch_size2", self.batch_size2)
        s1, s2 = ctx.sigmas.get("sigma1", 0.0), ctx.sigmas.get("sigma2", 0.0)
        sample1, sample2 = ctx.sampler(int(self.batch_size)), ctx.sampler(k2)
        avail = ctx.available()
        data = ctx.batch(sample2)
        v2, _ = ctx.send("grad", ctx.term(data, w2), avail, std=s2)
        ctx.end_round(w2)
        for _ in range(int(self.rounds) - 1):
            avail = ctx.available()
            w0, w1 = w2, ctx.prox(w2 - ctx.eta * v2)
            data = ctx.batch(sample1)
            v1, _ = ctx.send("diff", ctx.term(data, w1, w_old=w0), avail, std=s1, offset=v2)
            w2 = ctx.prox(w1 - ctx.eta * v1)
            data = ctx.batch(sample2)
            v2, _ = ctx.send("grad", ctx.term(data, w2), avail, std=s2)
            ctx.iterates += [w1.clone(), w2.clone()]
            ctx.end_round(w2)
        return w2
