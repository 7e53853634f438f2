"""Federated proximal SVRG: ISRL-DP FedProx-SVRG / PL-SVRG (paper Algorithms 1-2) and their
SDP versions (Algorithms 8-9)."""

from __future__ import annotations

import torch

from .base import FederatedAlgorithm, _positive_int


class IsrlProxSVRG(FederatedAlgorithm):
    """ISRL-DP FedProx-SVRG, paper Algorithm 1 (Thm 2.2 / E.2).

    ``rounds`` is the number of epochs E; each epoch the available silos send a noisy full local
    gradient at the snapshot ``wbar`` (``sigma1``, sensitivity 2L/n), then ``inner_steps`` Q
    (default floor(n / K)) times a variance-reduced message ``mean_K[g(w_t) - g(wbar)] + g~_i +
    N(0, sigma2^2 I)`` (sensitivity 4L/K; batches with replacement) followed by a server prox
    step. ``restarts`` S > 1 gives FedProx-PL-SVRG (Algorithm 2). Output: uniform over the inner
    iterates of the (last) run (Alg. 1 line 15); with restarts each run starts at the previous
    run's output and ``w_priv = w_S`` (Alg. 2 line 5). One availability draw per epoch.
    """

    name = "isrl-prox-svrg"
    noise_keys = ("sigma1", "sigma2")
    message_groups = ("full", "diff")
    uniform_output = True

    def __init__(self, *, inner_steps: int | None = None, restarts: int = 1, **kwargs):
        super().__init__(**kwargs)
        self.inner_steps = inner_steps
        self.restarts = restarts

    def _q(self, federation) -> int:
        if self.inner_steps is None:
            return max(1, federation.min_size // int(self.batch_size))
        return _positive_int("inner_steps", self.inner_steps)

    def config_fields(self, problem, federation):
        return {**super().config_fields(problem, federation), "inner_steps": self._q(federation),
                "restarts": int(self.restarts)}

    def _run(self, ctx, w):
        restarts = _positive_int("restarts", self.restarts)
        q = self._q(ctx.fed)
        sampler = ctx.sampler(int(self.batch_size))
        clip = ctx.problem.clip
        s1, s2 = ctx.sigmas.get("sigma1", 0.0), ctx.sigmas.get("sigma2", 0.0)
        for s in range(restarts):
            ctx.iterates.clear()
            wbar = w
            for _ in range(int(self.rounds)):
                avail = ctx.available()
                full = ctx.full()
                g_snap, released = ctx.send("full", ctx.term(full, wbar), full, avail, std=s1, bound=clip)
                offset = released if released is not None else g_snap
                for _ in range(q):
                    ctx.iterates.append(w.clone())
                    data = ctx.batch(sampler)
                    diff = ctx.term(data, w, w_old=wbar)
                    v, _ = ctx.send("diff", diff, data, avail, std=s2,
                                    bound=None if clip is None else 2 * clip, offset=offset)
                    w = ctx.prox(w - ctx.eta * v)
                wbar = w
                ctx.end_round(w)
            if restarts > 1:
                w = ctx.iterates[_pick(ctx)]
        if restarts > 1:
            ctx.iterates.clear()  # Alg. 2 outputs w_S itself
        return w


def _pick(ctx) -> int:
    return int(torch.randint(len(ctx.iterates), (1,), generator=ctx.gen))


class IsrlPLSVRG(IsrlProxSVRG):
    """ISRL-DP FedProx-PL-SVRG, paper Algorithm 2: Algorithm 1 restarted ``restarts`` = S times
    (default 3), each from the previous run's output; ``w_priv = w_S``."""

    name = "isrl-pl-svrg"

    def __init__(self, *, restarts: int = 3, **kwargs):
        super().__init__(restarts=restarts, **kwargs)


class SdpProxSVRG(IsrlProxSVRG):
    """SDP Prox-SVRG, paper Algorithm 8: the snapshot gradient (all n per-sample gradients, bound
    L) and each inner difference (K per-sample differences, bound 2L) go through P_vec. Alg. 8
    line 10 refers to ``wbar_{r+1}``, not yet defined at that point; we use the current snapshot
    ``wbar_r`` as in Algorithm 1."""

    name = "sdp-prox-svrg"
    shuffled = True
    noise_keys = ()


class SdpPLSVRG(SdpProxSVRG):
    """SDP Prox-PL-SVRG, paper Algorithm 9: Algorithm 8 restarted S times (default 3)."""

    name = "sdp-pl-svrg"

    def __init__(self, *, restarts: int = 3, **kwargs):
        super().__init__(restarts=restarts, **kwargs)
