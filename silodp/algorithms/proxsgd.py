"""Noisy distributed proximal SGD: ISRL-DP (paper Algorithm 6) and SDP (Algorithm 7)."""

from __future__ import annotations

from .base import FederatedAlgorithm


class IsrlProxSGD(FederatedAlgorithm):
    """ISRL-DP Noisy Distributed Proximal Gradient Method, paper Algorithm 6 (Thm 2.1 / E.1).

    Each round every available silo sends the mean of K per-sample clipped gradients plus
    N(0, sigma^2 I) (sensitivity 2L/K); the server averages and takes a prox step
    ``w <- prox_{eta f1}(w - eta g)`` (paper: eta = 1/(2 beta)). Minibatches are drawn without
    replacement by default (disjoint within an epoch, as the proof's parallel composition needs).
    Output: the last iterate ``w_R``.
    """

    name = "isrl-prox-sgd"
    default_replacement = False

    def _run(self, ctx, w):
        sampler = ctx.sampler(int(self.batch_size))
        std = ctx.sigmas.get("sigma", 0.0)
        for _ in range(int(self.rounds)):
            avail = ctx.available()
            data = ctx.batch(sampler)
            g, _ = ctx.send("grad", ctx.term(data, w), data, avail, std=std, bound=ctx.problem.clip)
            w = ctx.prox(w - ctx.eta * g)
            ctx.end_round(w)
        return w


class SdpProxSGD(IsrlProxSGD):
    """SDP Noisy Distributed Proximal Gradient Method, paper Algorithm 7 (Thm 2.1 part 2).

    As Algorithm 6, but each silo's K clipped per-sample gradients go through the binomial
    shuffle protocol P_vec (bound L) instead of Gaussian noise; the server divides the analyzer's
    output by M_r K. Deviation: Alg. 7 line 7 steps by 1/beta and proxes with 1/(2 beta); we use
    the single step size eta for both, as in Algorithm 6.
    """

    name = "sdp-prox-sgd"
    shuffled = True
    noise_keys = ()
