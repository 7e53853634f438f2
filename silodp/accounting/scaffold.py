"""Privacy of DP-SCAFFOLD(-warm), DP-FedAvg and DP-FedSGD toward the server and toward a third party.

Noble, Bellet & Dieuleveut (2022), *Differentially Private Federated Learning on Heterogeneous
Data*, arXiv:2111.09278, Algorithm 1 and Theorem 4.1. (``sigma_g`` is the paper's parameter: noise
std over the replace-one sensitivity 2C/m; silodp's event noise multiplier, sigma / (C/m), is
2 sigma_g.) Each round every one of the M users is
sampled independently with probability ``l`` (Poisson user sampling); a sampled user takes K local
steps, each on a fresh uniform subset of ``m = ceil(s n)`` of its ``n`` records drawn without
replacement, and each step's released gradient is the mean of the per-record gradients clipped to
norm C plus N(0, (sigma_g 2C/m)^2 I). Under replace-one (record level, ISRL-DP) that mean has
sensitivity 2C/m, so ``sigma_g`` is the noise relative to the replace-one shift. Control variates, local
trajectories and the server step are post-processing of these noisy gradients (the paper's
Claim 4.1), so DP-SCAFFOLD, DP-FedAvg and DP-FedSGD share one accounting. DP-SCAFFOLD-warm adds
``warm_steps`` noisy gradients of every user before round 1 (its control-variate initialisation).
Each step is charged as BBG18's dominating pair for sampling without replacement (the add/remove
Gaussian at shift 2C, subsampled at q = m/n; see docs/accounting.md).

**Toward the honest-but-curious server** (sound; it knows who was sampled, so no amplification by
user sampling). ``participation="worst-case"`` (default): K T + warm steps, whatever the sampling
turned out to be, an ex-post guarantee for every user; a ``DpEvent`` calibrated by
:func:`silodp.accounting.calibrate`. ``participation="expected"``: the view includes the sampling
pattern, which does not depend on the data, so the hockey-stick divergence of the whole view is
the average over patterns, delta(eps) = E_J[delta_J(eps)], J ~ Bin(T, l). Per round that is the
*labelled* mixture "with probability 1 - l nothing (privacy loss 0), with probability l the K
steps", whose privacy loss distribution is exactly the mixture of the two PLDs; composed over T
rounds it is exact. An ex-ante guarantee: a user who happened to be sampled often is covered only
on average.

**Toward a third party** who sees only the global models. The usual amplification
log(1 + l(e^eps - 1)) by user sampling is *not* credited: it needs the output without user u to be
close to the output with u, a user-level property that record-level noise does not give (with one
user the two are a point mass and a Gaussian, and the true delta at eps' < eps is l delta_G(eps'),
above the amplified claim l delta_G(eps); tested). What is credited:

1. the participation mixture above (sound: the third party's view is post-processing of the
   server's labelled view);
2. the paper's aggregation model (Thm 4.1, proof B.4): in a round with |S| sampled users the
   server averages |S| independent messages, so each step's aggregate is a Gaussian mechanism
   with per-record sensitivity (2C/m)/|S| and noise std (sigma_g 2C/m)/sqrt(|S|), i.e. multiplier
   sigma_g sqrt(|S|). When u takes part, |S| = 1 + Bin(M-1, l), independent of the data, so the
   round is the labelled mixture over |S| as well; |S| is grouped into at most ``groups``
   log-spaced bins, each charged at its *smallest* size (a larger multiplier is a garbling of a
   smaller one), which over-estimates epsilon, never under-estimates it. The warm-start steps are
   charged at multiplier sigma_g (no aggregation credited).

*Exact or modelled.* For DP-FedSGD (K = 1, no control variates) each step's query depends only on
the public global model, and the aggregate is exactly that Gaussian mechanism: the third-party
bound is a certificate. For K > 1, and with control variates, each user's later local steps depend
on its own unreleased noise; like the paper we still treat every step's aggregate as a Gaussian
mechanism on public queries (``assumption`` in :func:`noise_report`). The server bound always
also bounds the third party.

:func:`paper_sigma_g` is the closed form in the authors' public code; the statement of Theorem 4.1
itself was not available to us (docs/scaffold.md).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any

import numpy as np

from silodp.accounting import events as ev
from silodp.accounting import _binomial
from silodp._validation import batch_from_rate, check_count, check_delta, check_positive, check_probability
from silodp.accounting._numerics import monotone_root
from silodp.accounting.accountants import ACCOUNTANTS, Accountant, get_accountant, pld_discretization
from silodp.accounting.calibration import calibrate

class Participation(enum.Enum):
    """How the server's count of rounds treats user sampling (module docstring)."""

    WORST_CASE = "worst-case"
    EXPECTED = "expected"


class Against(enum.Enum):
    """Whom the guarantee is toward: the curious server, a third party seeing only the models, both."""

    SERVER = "server"
    THIRD_PARTY = "third-party"
    BOTH = "both"


PARTICIPATION = tuple(p.value for p in Participation)
AGAINST = tuple(a.value for a in Against)
ASSUMPTION = ("exact for K = 1 without control variates (DP-FedSGD); for K > 1 or control variates "
              "the paper's model: each step's aggregate over the sampled users is a Gaussian mechanism")


@dataclasses.dataclass(frozen=True)
class ScaffoldConfig:
    """What determines a user's releases: M users with n records each, T rounds of K local steps,
    user sampling l, data sampling s (batch m = ceil(s n)), clip C, warm-start steps."""

    num_users: int
    records_per_user: int
    rounds: int
    local_steps: int
    user_sampling: float = 1.0
    data_sampling: float = 1.0
    clip: float = 1.0
    warm_steps: int = 0

    def __post_init__(self) -> None:
        for name in ("num_users", "records_per_user", "rounds", "local_steps"):
            check_count(name, getattr(self, name))
        check_count("warm_steps", self.warm_steps, minimum=0)
        check_probability("user_sampling", self.user_sampling)
        check_probability("data_sampling", self.data_sampling)
        check_positive("clip", self.clip)

    @property
    def batch_size(self) -> int:
        """m = ceil(s n) (rounded up, toward more privacy loss), in [1, n]."""
        return batch_from_rate("data_sampling", self.data_sampling, self.records_per_user)

    @property
    def steps(self) -> int:
        """Noisy gradients a user releases in the worst case: K T + warm steps."""
        return self.local_steps * self.rounds + self.warm_steps

    def noise_std(self, sigma_g: float) -> float:
        """Standard deviation sigma_g * 2C / m of the noise on each released clipped mean."""
        return sigma_g * 2.0 * self.clip / self.batch_size


@dataclasses.dataclass(frozen=True)
class ScaffoldCalibration:
    """sigma_g certified (``epsilon``, ``delta``) toward ``against`` by ``accountant``."""

    sigma_g: float
    epsilon: float
    delta: float
    against: str
    participation: str
    accountant: str


def _choice(name: str, value: str, allowed: tuple[str, ...]) -> str:
    if value not in allowed:
        raise ValueError(f"{name}: must be one of {allowed}, got {value!r}")
    return value


def _steps(cfg: ScaffoldConfig, sigma_g: float, count: int) -> ev.DpEvent:
    """``count`` steps at sigma_g: each step's noise std is sigma_g 2C/m over contributions of norm
    C/m (noise multiplier 2 sigma_g), on a batch drawn without replacement when m < n."""
    step: ev.DpEvent = ev.GaussianDpEvent(2.0 * sigma_g)
    if cfg.batch_size < cfg.records_per_user:
        step = ev.SampledWithoutReplacementDpEvent(cfg.records_per_user, cfg.batch_size, step)
    return ev.SelfComposedDpEvent(step, count)


def server_event(cfg: ScaffoldConfig, sigma_g: float) -> ev.DpEvent:
    """One user's whole transcript toward the server (worst case: every round) at sigma_g."""
    return _steps(cfg, check_positive("sigma_g", sigma_g), cfg.steps)


def aggregation_groups(cfg: ScaffoldConfig, groups: int = 16) -> dict[int, float]:
    """P[|S| in bin] for the number |S| = 1 + Bin(M-1, l) of users aggregated with a participating
    user, keyed by the smallest size in each bin (so charging a bin at that size over-estimates
    epsilon). Bins: one per size when M <= ``groups``; else cut at binomial quantiles, finely in
    the lower tail (1e-12 ... 0.05) and evenly in the bulk (0.1 ... 0.9)."""
    m, l = cfg.num_users, cfg.user_sampling
    sizes = np.arange(1, m + 1)
    weights = _binomial.pmf(sizes - 1, m - 1, l)
    if m <= check_count("groups", groups):
        edges = sizes
    else:
        tail, bulk = np.geomspace(1e-12, 0.05, groups // 2), np.linspace(0.1, 0.9, groups - groups // 2)
        qs = np.concatenate([[0.0], tail, bulk])
        edges = np.unique(np.clip(1 + np.array([_binomial.ppf(x, m - 1, l) for x in qs]), 1, m).astype(int))
    reps = edges[np.searchsorted(edges, sizes, side="right") - 1]
    out: dict[int, float] = {}
    for rep, w in zip(reps.tolist(), weights.tolist()):
        if w > 0:
            out[rep] = out.get(rep, 0.0) + w
    return out


def mixture_event(cfg: ScaffoldConfig, sigma_g: float, against: str, groups: int = 16) -> ev.DpEvent:
    """One user's whole run as labelled mixtures over the sampling pattern
    (:class:`~silodp.accounting.events.LabelledMixtureDpEvent`): per round, nothing with
    probability 1 - l, else K steps at multiplier sigma_g (server) or sigma_g sqrt(|S|) over the
    bins of |S| (third party); T rounds; then the warm-start steps. Certified by the accountants
    whose ``supports()`` accepts it (``pld``)."""
    z = check_positive("sigma_g", sigma_g)
    third = _choice("against", against, ("server", "third-party")) == "third-party"
    comps = aggregation_groups(cfg, groups) if third else {1: 1.0}
    parts = [(cfg.user_sampling * w, _steps(cfg, z * math.sqrt(size), cfg.local_steps))
             for size, w in sorted(comps.items())]
    total = sum(w for w, _ in parts)
    weights, events = zip(*(parts + ([(1.0 - total, ev.NoOpDpEvent())] if total < 1.0 else [])))
    run = ev.SelfComposedDpEvent(ev.LabelledMixtureDpEvent(weights, events), cfg.rounds)
    return ev.ComposedDpEvent((run, _steps(cfg, z, cfg.warm_steps))) if cfg.warm_steps else run


def _is_mixture(against: str, participation: str) -> bool:
    _choice("participation", participation, PARTICIPATION)
    return _choice("against", against, ("server", "third-party")) == "third-party" or participation == "expected"


def _accountant(name: str, event: ev.DpEvent, disc: float | None = None) -> Accountant:
    """The registered accountant ``name`` under replace-one with ``event`` composed; refused
    (ValueError naming ``accountant``) unless its ``supports()`` accepts the event. ``disc``: the
    grid of an accountant with the ``value_discretization_interval`` setting."""
    acc = get_accountant(name, ev.REPLACE_ONE)
    if disc is not None and "value_discretization_interval" in acc.SETTINGS:
        acc = get_accountant(name, ev.REPLACE_ONE, value_discretization_interval=disc)
    if not acc.supports(event):
        able = [n for n in ACCOUNTANTS if get_accountant(n, ev.REPLACE_ONE).supports(event)]
        raise ValueError(f"accountant: {name!r} does not certify this DP-SCAFFOLD transcript (those that do: "
                         f"{able}): {acc.unsupported_reason(event)}")
    return acc.compose(event)


def certified_epsilon(cfg: ScaffoldConfig, sigma_g: float, delta: float, against: str = "server",
                      participation: str = "worst-case", accountant: str = "pld",
                      value_discretization_interval: float = 1e-3) -> float:
    """Certified epsilon at ``delta`` of noise multiplier ``sigma_g`` toward ``against``: the
    server event (:func:`server_event`), or the mixtures (third party, or
    ``participation="expected"``: :func:`mixture_event`, certified by the accountants that support
    labelled mixtures) on the grid ``value_discretization_interval``."""
    dl = check_delta("delta", delta)
    if not _is_mixture(against, participation):
        return _accountant(accountant, server_event(cfg, sigma_g)).get_epsilon(dl)
    return float(_accountant(accountant, mixture_event(cfg, sigma_g, against),
                             value_discretization_interval).get_epsilon(dl))


def scaffold_sigma_g(cfg: ScaffoldConfig, epsilon: float, delta: float, against: str = "server",
                     participation: str = "worst-case", accountant: str = "pld",
                     rtol: float = 2e-3) -> ScaffoldCalibration:
    """Smallest sigma_g (rounded up) whose certified epsilon toward ``against`` is at most
    ``epsilon`` at ``delta``. The worst-case server event goes through
    :func:`silodp.accounting.calibrate`; the mixtures are inverted by a log-space bisection that
    keeps the private end of its bracket, starting from that calibration (which dominates them).
    ``against="both"`` returns the larger of the two."""
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    _choice("against", against, AGAINST)
    if against == "both":
        cals = [scaffold_sigma_g(cfg, eps, dl, a, participation, accountant, rtol) for a in ("server", "third-party")]
        return dataclasses.replace(max(cals, key=lambda c: c.sigma_g), against="both")
    mixture = _is_mixture(against, participation)
    if mixture:  # fail before the worst-case calibration if the accountant refuses the mixtures
        _accountant(accountant, mixture_event(cfg, 1.0, against))
    worst = calibrate(lambda z: server_event(cfg, z), eps, dl, accountant, ev.REPLACE_ONE)
    if not mixture:
        return ScaffoldCalibration(worst.noise_multiplier, worst.epsilon, dl, against, participation, worst.accountant)
    disc = pld_discretization(eps, cfg.steps)

    def eps_of(sigma: float, grid: float = 2e-3) -> float:
        return certified_epsilon(cfg, sigma, dl, against, participation, accountant, grid)

    # Start near the answer: the mixture composes about l T rounds (and averages sqrt(E|S|) users).
    mean_users = 1 + cfg.user_sampling * (cfg.num_users - 1) if against == "third-party" else 1
    guess = worst.noise_multiplier * math.sqrt(cfg.user_sampling / mean_users)
    sigma = monotone_root(eps_of, eps, guess / 1.5, guess * 1.5, increasing=False, safe="above",
                          rtol=rtol, name="sigma_g")  # on the coarse (pessimistic) grid
    certified = eps_of(sigma, disc)
    while certified > eps:  # the fine grid must certify too (rare: grids are both pessimistic)
        sigma *= 1 + rtol
        certified = eps_of(sigma, disc)
    return ScaffoldCalibration(sigma, certified, dl, against, participation,
                               f"{accountant}-mixture(value_discretization_interval={disc:.2g})")


def paper_sigma_g(cfg: ScaffoldConfig, epsilon: float, delta: float) -> float:
    """The closed form the authors' public code uses to set sigma_g from a target epsilon
    (``flearn/servers/server_base.py`` of Noble et al.'s repository):
    sigma_g = 4 l s sqrt(K T ln(2 T l / delta) ln(2 / delta)) / epsilon.

    Not verified against the statement of Theorem 4.1 (unavailable here). The code multiplies
    it by C/m (add/remove sensitivity); the paper's Algorithm 1 and silodp by 2C/m.
    """
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    T, K, l, s = cfg.rounds, cfg.local_steps, cfg.user_sampling, cfg.data_sampling
    log_a = math.log(2.0 * T * l / dl)
    if log_a <= 0:
        raise ValueError(f"delta: the paper's formula needs 2 T l / delta > 1, got delta={dl:g}")
    return 4.0 * l * s * math.sqrt(K * T * log_a * math.log(2.0 / dl)) / eps


def _finite(x: float) -> float | None:
    return x if math.isfinite(x) else None


def noise_report(epsilon: float, delta: float, num_users: int, records_per_user: int, rounds: int,
                 local_steps: int, user_sampling: float, data_sampling: float, clip: float = 1.0, *,
                 warm_steps: int = 0, participation: str = "worst-case", accountant: str = "pld") -> dict[str, Any]:
    """sigma_g toward the server and toward a third party (tight, from the accounting layer) beside
    the paper's closed form, and what each certifies. JSON-friendly; the library side of
    ``silodp noise --algorithm dp-scaffold`` (which adds the algorithm's name: the accounting layer knows
    mechanisms, never algorithm names). ``sigma_g`` (the larger one) meets both targets."""
    cfg = ScaffoldConfig(num_users, records_per_user, rounds, local_steps, user_sampling, data_sampling,
                         clip, warm_steps)
    server = scaffold_sigma_g(cfg, epsilon, delta, "server", participation, accountant)
    third = scaffold_sigma_g(cfg, epsilon, delta, "third-party", participation, accountant)
    paper = paper_sigma_g(cfg, epsilon, delta)
    sigma_g = max(server.sigma_g, third.sigma_g)

    def eps_at(sigma: float, against: str) -> float | None:
        return _finite(certified_epsilon(cfg, sigma, delta, against, participation, accountant))

    return {
        "target_epsilon": epsilon, "delta": delta,
        "sigma_g_server": server.sigma_g, "sigma_g_third_party": third.sigma_g, "sigma_g_paper": paper,
        "epsilon_server": server.epsilon, "epsilon_third_party": third.epsilon,
        "sigma_g": sigma_g, "noise_std": cfg.noise_std(sigma_g), "batch_size": cfg.batch_size,
        "epsilon_server_at_paper_sigma_g": eps_at(paper, "server"),
        "epsilon_third_party_at_paper_sigma_g": eps_at(paper, "third-party"),
        "epsilon_third_party_at_sigma_g_server": eps_at(server.sigma_g, "third-party"),
        "participation": participation,
        "accountant_server": server.accountant, "accountant_third_party": third.accountant,
        "assumption": ASSUMPTION,
    }
