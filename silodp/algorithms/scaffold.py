"""DP-SCAFFOLD, DP-SCAFFOLD-warm, DP-FedAvg and DP-FedSGD (Noble, Bellet & Dieuleveut 2022,
arXiv:2111.09278, Algorithm 1), with every user's noise drawn independently.

Each round every user is sampled independently with probability ``user_sampling`` (l). A sampled
user i starts from the server model x and takes K local steps; step k draws a fresh uniform subset
of m = ceil(s n) of its records without replacement, releases the mean of the per-record
gradients clipped to C plus N(0, sigma^2 I) with sigma = sigma_g 2C/m (one ``randn`` for all
users, from the run's generator: no shared seeds), and moves

    y <- prox_{eta_l f1}(y - eta_l (g~ - c_i + c))          (DP-FedAvg: y <- y - eta_l g~)

Control variates, option II of SCAFFOLD (Karimireddy et al. 2020, Alg. 1 line 12):
c_i+ = c_i - c + (x - y_K) / (K eta_l), i.e. the mean of the K noisy gradients when f1 = 0.
Server: x <- x + eta_g mean_{i in S}(y_i - x), c <- c + (1/M) sum_{i in S}(c_i+ - c_i).
DP-SCAFFOLD-warm initialises c_i with the mean of ``warm_steps`` noisy gradients of every user at
x_0 (and c = mean_i c_i); those releases are accounted. DP-FedSGD is DP-FedAvg with K = 1.

Everything after the noisy gradients is post-processing, so one accounting serves all four
(:mod:`silodp.accounting.scaffold`). A regularizer f1 enters through its prox: DP-SCAFFOLD takes
it after every local step, which keeps the composite optimum x* a fixed point (with
c_i = grad f_i(x*) - grad F0(x*), c = 0, every user's corrected step is prox-stationary at x*);
DP-FedAvg, which has no correction, takes it at the server with step eta_g K eta_l, as silodp's
Local SGD does (so DP-FedSGD is proximal gradient descent when every gradient is exact).
Deviation from the authors' public code, which re-seeds numpy and torch with the same public seed
for every user before every step (identical noise across users), clips each parameter tensor at
its median per-sample norm (a data-dependent clip) and scales the noise by C/m: here the noise is
independent across users and steps, the whole gradient is clipped at the fixed C, and the noise
is sigma_g 2C/m (replace-one sensitivity).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from silodp._validation import batch_from_rate, check_count
from silodp.accounting.releases import BatchSampling, GaussianRelease
from silodp.accounting.scaffold import AGAINST as PRIVACY_AGAINST
from silodp.accounting.scaffold import PARTICIPATION

from .base import FederatedAlgorithm
from .registry import register_algorithm


@register_algorithm
class DpScaffold(FederatedAlgorithm):
    """DP-SCAFFOLD (Noble et al. 2022, Alg. 1).

    Parameters (besides :class:`FederatedAlgorithm`'s; ``step_size`` is the local step eta_l):
    ``local_steps`` (K), ``user_sampling`` (l), ``data_sampling`` (s; batch m = ceil(s n), else
    ``batch_size``), ``global_step_size`` (eta_g), ``privacy_against`` ("server" | "third-party" | "both": which
    guarantee a target ``epsilon`` calibrates), ``participation`` ("worst-case" | "expected", the
    server's count of rounds, see :mod:`silodp.accounting.scaffold`), ``warm_steps`` (warm start;
    default K). Explicit noise: ``sigmas={"sigma": sigma_g * 2C / m}``. After :meth:`run`,
    ``privacy_`` holds sigma_g and the certified epsilon toward the server and toward a third party
    (None where not computed).
    """

    name = "dp-scaffold"
    noise_keys = ("sigma",)
    message_groups = ("grad", "warm")
    self_calibrating = True
    default_replacement = False
    control_variates: ClassVar[bool] = True
    warm_start: ClassVar[bool] = False
    #: local steps the algorithm is defined with (DP-FedSGD: 1), None when it is a parameter
    fixed_local_steps: ClassVar[int | None] = None

    def __init__(self, *, local_steps: int = 5, user_sampling: float = 1.0, data_sampling: float | None = None,
                 global_step_size: float = 1.0, privacy_against: str = "server",
                 participation: str = "worst-case", warm_steps: int | None = None, **kwargs):
        super().__init__(**kwargs)
        self.local_steps = local_steps
        self.user_sampling = user_sampling
        self.data_sampling = data_sampling
        self.global_step_size = global_step_size
        self.privacy_against = privacy_against
        self.participation = participation
        self.warm_steps = warm_steps

    # -- configuration -------------------------------------------------------------------------
    def batch(self, federation) -> int:
        """m: ceil(s n_min) with ``data_sampling`` s (rounded up, as the accounting), else ``batch_size``
        (``federation``: anything with ``min_size``)."""
        if self.data_sampling is None:
            return int(self.batch_size)
        return batch_from_rate("data_sampling", float(self.data_sampling), federation.min_size)

    def n_warm(self) -> int:
        if not self.warm_start:
            return 0
        return int(self.local_steps if self.warm_steps is None else self.warm_steps)

    def transcript_config(self, problem, federation):
        from silodp.accounting.scaffold import ScaffoldConfig

        n = federation.min_size
        return ScaffoldConfig(federation.num_silos, n, int(self.rounds), int(self.local_steps),
                              float(self.user_sampling), self.batch(federation) / n, problem.clip, self.n_warm())

    @classmethod
    def gaussian_releases(cls, cfg, sigmas):
        """What one user releases toward the server in the worst case (sampled every round):
        K T noisy gradients "grad" (and the warm start's "warm"), each the mean of m records of a
        fresh subset, multiplier sigma / (C / m) = 2 sigma_g; the same event as
        :func:`silodp.accounting.scaffold.server_event`."""
        m, n = cfg.batch_size, cfg.records_per_user
        z = sigmas["sigma"] / (cfg.clip / m)
        out = [GaussianRelease("grad", cfg.local_steps * cfg.rounds, z, BatchSampling.SUBSET, m, n)]
        if cfg.warm_steps:
            out.append(GaussianRelease("warm", cfg.warm_steps, z, BatchSampling.SUBSET, m, n))
        return out

    def _validate(self, problem, federation) -> None:
        super()._validate(problem, federation)
        check_count("local_steps", self.local_steps)
        if self.warm_steps is not None:
            check_count("warm_steps", self.warm_steps)
            if not self.warm_start:
                raise ValueError(f"warm_steps: only {DpScaffoldWarm.name} has a warm start")
        if not 0 < float(self.user_sampling) <= 1:
            raise ValueError(f"user_sampling: must lie in (0, 1], got {self.user_sampling}")
        if self.data_sampling is not None and not 0 < float(self.data_sampling) <= 1:
            raise ValueError(f"data_sampling: must lie in (0, 1], got {self.data_sampling}")
        if not 0 < float(self.global_step_size) < math.inf:
            raise ValueError(f"global_step_size: must be a finite number > 0, got {self.global_step_size}")
        if self.replacement:
            raise ValueError("replacement: DP-SCAFFOLD draws every minibatch as a fresh subset without replacement")
        m = self.batch(federation)
        if m > federation.min_size:
            raise ValueError(f"batch_size: must be <= the smallest user size {federation.min_size}, got {m}")
        if federation.silos_per_round != federation.num_silos:
            raise ValueError("silos_per_round: DP-SCAFFOLD samples users itself (user_sampling); use all silos")
        if self.participation not in PARTICIPATION:
            raise ValueError(f"participation: must be one of {PARTICIPATION}, got {self.participation!r}")
        if self.privacy_against not in PRIVACY_AGAINST:
            raise ValueError(f"privacy_against: must be one of {PRIVACY_AGAINST}, got {self.privacy_against!r}")

    # -- noise ---------------------------------------------------------------------------------
    def resolve_noise(self, problem, federation):
        cfg = self.transcript_config(problem, federation)
        self.privacy_ = {"sigma_g": None, "epsilon_server": None, "epsilon_third_party": None}
        if self.sigmas is not None or self.epsilon is None:
            sigmas, eps, delta, shuffle = super().resolve_noise(problem, federation)
            self.privacy_["sigma_g"] = sigmas["sigma"] / cfg.noise_std(1.0)
            return sigmas, eps, delta, shuffle
        from silodp.accounting.scaffold import certified_epsilon, scaffold_sigma_g

        delta = float(self.delta) if self.delta is not None else 1.0 / federation.min_size ** 2
        cal = scaffold_sigma_g(cfg, float(self.epsilon), delta, self.privacy_against, self.participation,
                               self.accountant or "pld")
        eps = {a: certified_epsilon(cfg, cal.sigma_g, delta, a, self.participation)
               for a in ("server", "third-party")}
        self.privacy_ = {"sigma_g": cal.sigma_g, "epsilon_server": eps["server"],
                         "epsilon_third_party": eps["third-party"], "accountant": cal.accountant}
        return {"sigma": cfg.noise_std(cal.sigma_g)}, eps["server"], delta, None

    # -- the algorithm -------------------------------------------------------------------------
    def _run(self, ctx, w):
        n_users, dim = ctx.num_silos, w.shape[0]
        std = ctx.sigmas.get("sigma", 0.0)
        sampler = ctx.sampler(self.batch(ctx), subset=True)
        ci = torch.zeros(n_users, dim, dtype=w.dtype)
        c = torch.zeros(dim, dtype=w.dtype)
        if self.n_warm():
            ci = self._warm(ctx, w, sampler, std)
            c = ci.mean(0)
        for _ in range(int(self.rounds)):
            sampled = ctx.coin(n_users, float(self.user_sampling))
            if bool(sampled.any()):
                w, ci, c = self._round(ctx, w, ci, c, sampled, sampler, std)
            ctx.end_round(w)
        return w

    def _warm(self, ctx, w, sampler, std):
        """Every user's mean of ``warm_steps`` noisy clipped minibatch gradients at x_0."""
        everyone = torch.ones(ctx.num_silos, dtype=torch.bool)
        total = torch.zeros(ctx.num_silos, w.shape[0], dtype=w.dtype)
        for _ in range(self.n_warm()):
            data = ctx.batch(sampler)
            _, released = ctx.send("warm", ctx.term(data, w), everyone, std=std)
            total = total + released
        return total / self.n_warm()

    def _round(self, ctx, x, ci, c, sampled, sampler, std):
        steps, eta = int(self.local_steps), ctx.eta
        y = x.expand(ctx.num_silos, -1).clone()
        for _ in range(steps):
            data = ctx.batch(sampler)
            _, g = ctx.send("grad", ctx.term(data, y), sampled, std=std)
            y = ctx.prox(y - eta * (g - ci + c)) if self.control_variates else y - eta * g
        a = sampled.to(x.dtype)[:, None]
        eta_g = float(self.global_step_size)
        x_new = x + eta_g * ((y - x) * a).sum(0) / a.sum()
        if not self.control_variates:  # prox at the server, over the round's whole step
            return ctx.prox(x_new, eta_g * steps * eta), ci, c
        delta_c = ((x - y) / (steps * eta) - c) * a  # c_i+ - c_i (option II), sampled users only
        return x_new, ci + delta_c, c + delta_c.sum(0) / ctx.num_silos


@register_algorithm
class DpScaffoldWarm(DpScaffold):
    """DP-SCAFFOLD-warm: control variates initialised from ``warm_steps`` noisy gradients (accounted)."""

    name = "dp-scaffold-warm"
    warm_start = True


@register_algorithm
class DpFedAvg(DpScaffold):
    """DP-FedAvg: DP-SCAFFOLD without control variates (Noble et al. 2022, Appendix A)."""

    name = "dp-fedavg"
    control_variates = False


@register_algorithm
class DpFedSGD(DpFedAvg):
    """DP-FedSGD: DP-FedAvg with a single local step (K = 1)."""

    name = "dp-fedsgd"
    fixed_local_steps = 1

    def __init__(self, *, local_steps: int = 1, **kwargs):
        super().__init__(local_steps=local_steps, **kwargs)

    def _validate(self, problem, federation) -> None:
        super()._validate(problem, federation)
        if self.local_steps != 1:
            raise ValueError(f"local_steps: DP-FedSGD takes exactly one local step, got {self.local_steps}")
