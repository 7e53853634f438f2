"""Federated proximal SPIDER: ISRL-DP FedProx-SPIDER (paper Algorithm 3), SDP FedProx-SPIDER
(Algorithm 10) and the alternate ISRL-DP Fed-SPIDER (Algorithm 11, App. H.1)."""

from __future__ import annotations

import math

import torch

from .base import FederatedAlgorithm, _positive_int


def _smaller(a: float, b):
    return torch.clamp(b, max=a) if isinstance(b, torch.Tensor) else min(a, b)


def _larger(a, b: float):
    return torch.clamp(a, min=b) if isinstance(a, torch.Tensor) else max(a, b)


class IsrlSpider(FederatedAlgorithm):
    """ISRL-DP FedProx-SPIDER, paper Algorithm 3 (Thm 3.1 / F.1).

    Every ``q`` rounds the available silos send a noisy minibatch gradient (K1 = ``batch_size``
    samples, noise ``sigma1``, sensitivity 2L/K1); in between they send the SPIDER difference
    ``mean_K2[g(w_r) - g(w_{r-1})]`` (K2 = ``batch_size2``) with noise std
    ``min(sigma2 * ||w_r - w_{r-1}||, sigma2_hat)`` (Alg. 3 line 10). When the problem has a
    smoothness constant beta, each per-sample difference is clipped to
    ``min(2L, beta ||w_r - w_{r-1}||)`` so the smaller sensitivity ``2 beta ||w_r - w_{r-1}|| / K2``
    holds by construction. Server: ``h_r = h_{r-1} + H_r``, ``w_{r+1} = prox(w_r - eta h_r)``.
    Batches with replacement. Output: uniform over ``w_1..w_R`` (Alg. 3 line 17).
    """

    name = "isrl-spider"
    noise_keys = ("sigma1", "sigma2", "sigma2_hat")
    message_groups = ("grad", "diff")
    uniform_output = True

    def __init__(self, *, batch_size2: int | None = None, q: int = 2, **kwargs):
        super().__init__(**kwargs)
        self.batch_size2 = batch_size2
        self.q = q

    def _k2(self) -> int:
        return int(self.batch_size) if self.batch_size2 is None else _positive_int("batch_size2", self.batch_size2)

    def config_fields(self, problem, federation):
        return {**super().config_fields(problem, federation), "batch_size2": self._k2(), "q": int(self.q)}

    def _diff_noise(self, ctx, step):
        """min(sigma2 ||w_r - w_{r-1}||, sigma2_hat) (Alg 3 line 10); ``step`` a float, or one
        norm per stacked run (a tensor) in :mod:`silodp.verify.rate_trials`."""
        s2, s2_hat = ctx.sigmas.get("sigma2", 0.0), ctx.sigmas.get("sigma2_hat", 0.0)
        if isinstance(step, torch.Tensor):
            return torch.clamp(s2 * step, max=s2_hat) if math.isfinite(s2) else torch.full_like(step, s2_hat)
        return min(s2 * step if math.isfinite(s2) else math.inf, s2_hat)

    def _run(self, ctx, w):
        q = _positive_int("q", self.q)
        s1 = ctx.sigmas.get("sigma1", 0.0)
        clip, beta = ctx.problem.clip, ctx.problem.beta
        sample1, sample2 = ctx.sampler(int(self.batch_size)), ctx.sampler(self._k2())
        h = w_prev = None
        for r in range(int(self.rounds)):
            avail = ctx.available()
            if r % q == 0:
                data = ctx.batch(sample1)
                h, _ = ctx.send("grad", ctx.term(data, w), data, avail, std=s1, bound=clip)
            else:
                data = ctx.batch(sample2)
                step = (w - w_prev).norm(dim=-1)  # one norm per stacked run when w is [T, d]
                step = float(step) if step.dim() == 0 else step
                bound = None if clip is None else 2 * clip
                diff_clip = None
                if beta is not None:
                    diff_clip = beta * step if clip is None else _smaller(2 * clip, beta * step)
                    bound = _larger(diff_clip, 1e-12)
                diff = ctx.term(data, w, w_old=w_prev, diff_clip=diff_clip)
                big_h, _ = ctx.send("diff", diff, data, avail, std=self._diff_noise(ctx, step), bound=bound)
                h = h + big_h
            w_prev, w = w, ctx.prox(w - ctx.eta * h)
            ctx.end_round(w, keep_iterate=True)
        return w


class SdpSpider(IsrlSpider):
    """SDP FedProx-SPIDER, paper Algorithm 10 (Thm 3.2 / F.2): Algorithm 3 with both message
    types summed by P_vec (bounds L and min(2L, beta ||w_r - w_{r-1}||))."""

    name = "sdp-spider"
    shuffled = True
    noise_keys = ()


class IsrlFedSpider(FederatedAlgorithm):
    """ISRL-DP Fed-SPIDER, alternate implementation, paper Algorithm 11 (App. H.1).

    Start: silos send a noisy K2-sample gradient at ``w_0^2`` (``sigma2``). Each of the
    ``rounds`` - 1 rounds: ``w^0 = w^2``, ``w^1 = w^2 - eta v^2``; silos send
    ``mean_K1[g(w^1) - g(w^0)] + v^2 + N(0, sigma1^2)`` (sensitivity 4L/K1); ``w^2 = w^1 - eta v^1``;
    silos send a noisy K2-sample gradient at ``w^2`` (``sigma2``, sensitivity 2L/K2).
    ``batch_size`` is K1 and ``batch_size2`` K2. Output: uniform over ``{w_r^1, w_r^2}``.
    Deviation: Alg. 11 takes plain gradient steps; we apply ``prox_{eta f1}`` after each step so
    composite problems are handled (identical when f1 = 0).
    """

    name = "isrl-fed-spider"
    noise_keys = ("sigma1", "sigma2")
    message_groups = ("diff", "grad")
    uniform_output = True

    def __init__(self, *, batch_size2: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.batch_size2 = batch_size2

    def config_fields(self, problem, federation):
        k2 = int(self.batch_size) if self.batch_size2 is None else int(self.batch_size2)
        return {**super().config_fields(problem, federation), "batch_size2": k2}

    def _run(self, ctx, w2):
        k2 = int(self.batch_size) if self.batch_size2 is None else _positive_int("batch_size2", self.batch_size2)
        s1, s2 = ctx.sigmas.get("sigma1", 0.0), ctx.sigmas.get("sigma2", 0.0)
        clip = ctx.problem.clip
        sample1, sample2 = ctx.sampler(int(self.batch_size)), ctx.sampler(k2)
        avail = ctx.available()
        data = ctx.batch(sample2)
        v2, _ = ctx.send("grad", ctx.term(data, w2), data, avail, std=s2, bound=clip)
        ctx.end_round(w2)
        for _ in range(int(self.rounds) - 1):
            avail = ctx.available()
            w0, w1 = w2, ctx.prox(w2 - ctx.eta * v2)
            data = ctx.batch(sample1)
            v1, _ = ctx.send("diff", ctx.term(data, w1, w_old=w0), data, avail, std=s1,
                             bound=None if clip is None else 2 * clip, offset=v2)
            w2 = ctx.prox(w1 - ctx.eta * v1)
            data = ctx.batch(sample2)
            v2, _ = ctx.send("grad", ctx.term(data, w2), data, avail, std=s2, bound=clip)
            ctx.iterates += [w1.clone(), w2.clone()]
            ctx.end_round(w2)
        return w2
