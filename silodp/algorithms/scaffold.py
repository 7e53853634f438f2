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

import dataclasses
from typing import Any, ClassVar

import torch

from silodp._validation import batch_from_rate, check_count
from silodp.accounting.scaffold import AGAINST as PRIVACY_AGAINST
from silodp.accounting.scaffold import PARTICIPATION, ScaffoldConfig

from .context import Context
from .config import AlgorithmConfig, check_in, check_unit, param
from .fedavg import LocalUpdates
from .plan import ParticipationPlan
from .registry import register_algorithm


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpScaffoldConfig(AlgorithmConfig):
    """DP-SCAFFOLD / DP-FedAvg (Noble et al. 2022, Alg. 1); ``step_size`` is the local step eta_l."""

    local_steps: int = param(5, help="K, local steps per round", domain="count", transcript=True, noise_default=1)
    user_sampling: float = param(1.0, help="l: each user takes part w.p. l per round", domain="probability",
                                 transcript=True, noise_default=1.0)
    data_sampling: float | None = param(None, help="s: each local step uses ceil(s n) records (None: batch_size)",
                                        domain="probability", transcript=True, noise_default=0.1)
    global_step_size: float = param(1.0, help="eta_g, the server step", domain="positive")
    privacy_against: str = param("server", help="which guarantee a target epsilon calibrates",
                                 domain=PRIVACY_AGAINST)
    participation: str = param("worst-case", help="rounds charged toward the server", domain=PARTICIPATION)

    def __post_init__(self) -> None:
        super().__post_init__()
        check_count("local_steps", self.local_steps)
        check_unit("user_sampling", self.user_sampling)
        if self.data_sampling is not None:
            check_unit("data_sampling", self.data_sampling)
        if not 0 < float(self.global_step_size) < float("inf"):
            raise ValueError(f"global_step_size: must be a finite number > 0, got {self.global_step_size}")
        if self.replacement:
            raise ValueError("replacement: DP-SCAFFOLD draws every minibatch as a fresh subset without replacement")
        check_in("participation", self.participation, PARTICIPATION)
        check_in("privacy_against", self.privacy_against, PRIVACY_AGAINST)

    def warm(self) -> int:
        """Warm-start steps (none here)."""
        return 0


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpScaffoldWarmConfig(DpScaffoldConfig):
    """DP-SCAFFOLD-warm: the warm start's noisy steps."""

    warm_steps: int | None = param(None, help="noisy initialisation steps (None: local_steps)", domain="count",
                                   transcript=True, noise_default=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.warm_steps is not None:
            check_count("warm_steps", self.warm_steps)

    def warm(self) -> int:
        return int(self.local_steps if self.warm_steps is None else self.warm_steps)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DpFedSgdConfig(DpScaffoldConfig):
    """DP-FedSGD: exactly one local step."""

    local_steps: int = param(1, help="K = 1 (DP-FedSGD takes one local step)", domain="count", transcript=True,
                             noise_default=1)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.local_steps != 1:
            raise ValueError(f"local_steps: DP-FedSGD takes exactly one local step, got {self.local_steps}")


@register_algorithm
class DpScaffold(LocalUpdates):
    """DP-SCAFFOLD (Noble et al. 2022, Alg. 1).

    Parameters: :class:`DpScaffoldConfig` (``step_size`` is the local step eta_l; batch
    m = ceil(s n) with ``data_sampling`` s, else ``batch_size``). Explicit noise:
    ``sigmas={"sigma": sigma_g * 2C / m}``. A target ``epsilon`` is met toward ``privacy_against``
    (:func:`silodp.accounting.scaffold.scaffold_sigma_g`); ``RunResult.details`` holds sigma_g and
    the certified epsilon toward the server and toward a third party (None where not computed).
    """

    name = "dp-scaffold"
    Config = DpScaffoldConfig
    #: the transcript, declaration, calibration toward ``privacy_against`` and certificates
    Plan = ParticipationPlan
    noise_keys = ("sigma",)
    message_groups = ("grad", "warm")
    Transcript = ScaffoldConfig
    calibration_methods = ()
    default_replacement = False
    control_variates: ClassVar[bool] = True

    # -- configuration -------------------------------------------------------------------------
    def batch(self, federation: Any) -> int:
        """m: ceil(s n_min) with ``data_sampling`` s (rounded up, as the accounting), else ``batch_size``
        (``federation``: anything with ``min_size``)."""
        if self.data_sampling is None:
            return int(self.batch_size)
        return batch_from_rate("data_sampling", float(self.data_sampling), federation.min_size)

    def n_warm(self) -> int:
        config: Any = self.config  # a DpScaffoldConfig (or a subclass): its warm start
        return int(config.warm())

    # -- the algorithm: the FedAvg template's hooks (silodp.algorithms.fedavg) --------------------
    def local_sampler(self, ctx: Context) -> Any:
        """A fresh uniform subset of m records per local step."""
        return ctx.sampler(self.batch(ctx), subset=True)

    def start(self, ctx: Context, w: torch.Tensor, sampler: Any, std: float) -> dict:
        """Control variates c_i = 0 and c = 0; warm: c_i from the warm start, c = mean_i c_i."""
        ci = torch.zeros(ctx.num_silos, w.shape[0], dtype=w.dtype)
        c = torch.zeros(w.shape[0], dtype=w.dtype)
        if self.n_warm():
            ci = self._warm(ctx, w, sampler, std)
            c = ci.mean(0)
        return {"ci": ci, "c": c}

    def participants(self, ctx: Context) -> torch.Tensor:
        """Each user independently with probability ``user_sampling``."""
        return ctx.coin(ctx.num_silos, float(self.user_sampling))

    def local_step(self, ctx: Context, y: torch.Tensor, g: torch.Tensor, state: dict) -> torch.Tensor:
        """DP-SCAFFOLD: ``prox(y - eta_l (g~ - c_i + c))``; DP-FedAvg: ``y - eta_l g~``."""
        if self.control_variates:
            return ctx.prox(y - ctx.eta * (g - state["ci"] + state["c"]))
        return y - ctx.eta * g

    def server_step(self, ctx: Context, x: torch.Tensor, y: torch.Tensor, weights: torch.Tensor,
                    state: dict) -> torch.Tensor:
        """``x + eta_g mean_S(y_i - x)``; DP-FedAvg then proxes over the round's whole step, DP-SCAFFOLD
        updates its control variates (option II, sampled users only)."""
        steps, eta = int(self.local_steps), ctx.eta
        a = weights[:, None]
        eta_g = float(self.global_step_size)
        x_new = x + eta_g * ((y - x) * a).sum(0) / a.sum()
        if not self.control_variates:  # prox at the server, over the round's whole step
            return ctx.prox(x_new, eta_g * steps * eta)
        delta_c = ((x - y) / (steps * eta) - state["c"]) * a  # c_i+ - c_i
        state["ci"], state["c"] = state["ci"] + delta_c, state["c"] + delta_c.sum(0) / ctx.num_silos
        return x_new

    def _warm(self, ctx, w, sampler, std):
        """Every user's mean of ``warm_steps`` noisy clipped minibatch gradients at x_0."""
        everyone = torch.ones(ctx.num_silos, dtype=torch.bool)
        total = torch.zeros(ctx.num_silos, w.shape[0], dtype=w.dtype)
        for _ in range(self.n_warm()):
            data = ctx.batch(sampler)
            _, released = ctx.send("warm", ctx.term(data, w), everyone, std=std)
            total = total + released
        return total / self.n_warm()


@register_algorithm
class DpScaffoldWarm(DpScaffold):
    """DP-SCAFFOLD-warm: control variates initialised from ``warm_steps`` noisy gradients (accounted)."""

    name = "dp-scaffold-warm"
    Config = DpScaffoldWarmConfig


@register_algorithm
class DpFedAvg(DpScaffold):
    """DP-FedAvg: DP-SCAFFOLD without control variates (Noble et al. 2022, Appendix A)."""

    name = "dp-fedavg"
    control_variates = False


@register_algorithm
class DpFedSGD(DpFedAvg):
    """DP-FedSGD: DP-FedAvg with a single local step (K = 1)."""

    name = "dp-fedsgd"
    Config = DpFedSgdConfig


@register_algorithm
class Scaffold(DpScaffold):
    """SCAFFOLD without privacy (Karimireddy et al. 2020, Alg. 1, control variates option II):
    DP-SCAFFOLD's loop with no noise, the noiseless reference of Noble et al. (2022, Fig. 1).
    Every local step still takes a fresh uniform subset of m records, and clips each per-record
    gradient when the problem sets ``clip``; nothing is certified (epsilon ``inf``)."""

    name = "scaffold"
    private = False


@register_algorithm
class FedAvg(DpFedAvg):
    """FedAvg without privacy: DP-FedAvg's loop with no noise (fresh uniform subsets, the prox at
    the server), the noiseless reference of Noble et al. (2022, Fig. 1); epsilon ``inf``. It
    differs from ``local-sgd`` in its batches (a fresh subset of ceil(s n) records per step)."""

    name = "fedavg"
    private = False
