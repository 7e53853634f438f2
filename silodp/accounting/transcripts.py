"""What one silo releases in each of the papers' algorithms, as an event; and noise calibration.

``privacy_event(name, config, sigmas)`` describes silo i's whole transcript (ISRL-DP, paper
Def 4) given the noise standard deviations of its messages; ``calibrate_algorithm`` turns a
target (epsilon, delta) into those standard deviations, either by the paper's closed form
(``method="paper"``, :mod:`silodp.accounting.papers`) or tightly (``method="tight"``: the paper's
noise *shape* scaled by the smallest factor the chosen accountant certifies).

Sensitivities (replace-one, per-sample clipping of the whole gradient to L): an average of K
gradients has sensitivity 2L/K; an SVRG/SPIDER difference of gradients at two points 4L/K (or
2 beta ||w_r - w_{r-1}|| / K, whichever is smaller). Availability (M of N silos per round) gives
no amplification toward the server, which knows who took part, so each silo is charged every round.

Shuffle-DP algorithms (Alg 7, 8, 10) release P_vec outputs; each invocation is an
(eps~, delta~)-DP event (Cheu et al. 2021 / paper Thm D.2) and ``shuffle`` holds the binomial
protocol parameters certified for it. No amplification by subsampling is credited to those events.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable

from silodp.accounting import events as ev
from silodp.accounting import papers
from silodp.accounting._checks import check_count, check_delta, check_positive
from silodp.accounting.accountants import get_accountant
from silodp.accounting.binomial import binomial_protocol_params
from silodp.accounting.blocks import flatten
from silodp.accounting.calibration import Calibration, calibrate

ISRL = ("isrl-prox-sgd", "isrl-mb-sgd", "isrl-local-sgd", "isrl-prox-svrg", "isrl-pl-svrg",
        "isrl-spider", "isrl-fed-spider")
SDP = ("sdp-prox-sgd", "sdp-prox-svrg", "sdp-pl-svrg", "sdp-spider")
NON_PRIVATE = ("mb-sgd", "local-sgd")
ALGORITHMS = ISRL + SDP + NON_PRIVATE
NOISE_KEYS = {
    "isrl-prox-sgd": ("sigma",), "isrl-mb-sgd": ("sigma",), "isrl-local-sgd": ("sigma",),
    "isrl-prox-svrg": ("sigma1", "sigma2"), "isrl-pl-svrg": ("sigma1", "sigma2"),
    "isrl-spider": ("sigma1", "sigma2", "sigma2_hat"), "isrl-fed-spider": ("sigma1", "sigma2"),
}


@dataclasses.dataclass(frozen=True)
class TranscriptConfig:
    """The algorithm parameters that determine what a silo releases."""

    n: int
    rounds: int
    batch_size: int
    clip: float = 1.0
    batch_size2: int | None = None
    q: int = 1
    inner_steps: int = 1
    restarts: int = 1
    local_steps: int = 1
    beta: float = math.inf
    num_silos: int = 1
    silos_per_round: int | None = None
    dimension: int = 1
    replacement: bool = True

    def __post_init__(self) -> None:
        for name in ("n", "rounds", "batch_size", "q", "inner_steps", "restarts", "local_steps", "num_silos", "dimension"):
            check_count(name, getattr(self, name))
        check_positive("clip", self.clip)
        if self.batch_size > self.n:
            raise ValueError(f"batch_size must be <= n, got {self.batch_size} > {self.n}")
        if self.batch_size2 is not None and not 1 <= self.batch_size2 <= self.n:
            raise ValueError(f"batch_size2 must lie in [1, n], got {self.batch_size2}")
        if self.silos_per_round is not None and not 1 <= self.silos_per_round <= self.num_silos:
            raise ValueError(f"silos_per_round must lie in [1, num_silos], got {self.silos_per_round}")
        if not self.beta > 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")

    @property
    def k2(self) -> int:
        return self.batch_size if self.batch_size2 is None else self.batch_size2

    @property
    def m(self) -> int:
        return self.num_silos if self.silos_per_round is None else self.silos_per_round


@dataclasses.dataclass(frozen=True)
class NoiseCalibration:
    """Noise standard deviations of the per-silo messages and what they certify."""

    algorithm: str
    sigmas: dict[str, float]
    epsilon: float
    delta: float
    accountant: str
    method: str
    shuffle: dict[str, dict] = dataclasses.field(default_factory=dict)


def _sampled(cfg: TranscriptConfig, batch: int, z: float) -> ev.DpEvent:
    """One step on ``batch`` records drawn from the silo's n (with or without replacement)."""
    step = ev.GaussianDpEvent(z)
    if batch >= cfg.n and not cfg.replacement:
        return step
    if cfg.replacement:
        return ev.SampledWithReplacementDpEvent(cfg.n, batch, step)
    return ev.SampledWithoutReplacementDpEvent(cfg.n, batch, step)


def _z(sigma: float, sensitivity: float) -> float:
    return math.inf if sigma == math.inf else sigma / sensitivity


def privacy_event(name: str, cfg: TranscriptConfig, sigmas: dict[str, float]) -> ev.DpEvent:
    """Event of one silo's whole transcript (ISRL algorithms) given noise std devs ``sigmas``."""
    if name in NON_PRIVATE:
        return ev.NonPrivateDpEvent()
    if name in SDP:
        return _sdp_event(name, cfg, sigmas)
    if name not in NOISE_KEYS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {name!r}")
    missing = [k for k in NOISE_KEYS[name] if k not in sigmas]
    if missing:
        raise ValueError(f"sigmas for {name} must contain {NOISE_KEYS[name]}, missing {missing}")
    for key, value in sigmas.items():
        if not value > 0:
            raise ValueError(f"sigmas[{key!r}] must be > 0, got {value}")
    L, K, R = cfg.clip, cfg.batch_size, cfg.rounds
    if name == "isrl-prox-sgd":
        z = _z(sigmas["sigma"], 2 * L / K)
        if R * K <= cfg.n and not cfg.replacement:  # Alg 6: disjoint batches -> parallel composition
            return ev.ParallelComposedDpEvent(ev.GaussianDpEvent(z), R)
        return ev.SelfComposedDpEvent(_sampled(cfg, K, z), R)
    if name in ("isrl-mb-sgd", "isrl-local-sgd"):
        steps = R * (cfg.local_steps if name == "isrl-local-sgd" else 1)
        return ev.SelfComposedDpEvent(_sampled(cfg, K, _z(sigmas["sigma"], 2 * L / K)), steps)
    if name in ("isrl-prox-svrg", "isrl-pl-svrg"):  # Alg 1 (and Alg 2: S restarts)
        full = ev.GaussianDpEvent(_z(sigmas["sigma1"], 2 * L / cfg.n))
        inner = _sampled(cfg, K, _z(sigmas["sigma2"], 4 * L / K))
        epoch = ev.ComposedDpEvent([full, ev.SelfComposedDpEvent(inner, cfg.inner_steps)])
        return ev.SelfComposedDpEvent(epoch, R * (cfg.restarts if name == "isrl-pl-svrg" else 1))
    if name == "isrl-spider":  # Alg 3 as IsrlSpider runs it: rounds r = 0..R-1, anchors where q | r
        anchors = _spider_anchors(cfg)
        K2 = cfg.k2
        z1 = _z(sigmas["sigma1"], 2 * L / K)
        # noise std min(sigma2 ||dw||, sigma2_hat) against sensitivity min(2 beta ||dw||, 4L)/K2
        z2 = min(_z(sigmas["sigma2"], 2 * cfg.beta / K2), _z(sigmas["sigma2_hat"], 4 * L / K2))
        parts = [ev.SelfComposedDpEvent(_sampled(cfg, K, z1), anchors)]
        if R - anchors > 0:
            parts.append(ev.SelfComposedDpEvent(_sampled(cfg, K2, z2), R - anchors))
        return ev.ComposedDpEvent(parts)
    # isrl-fed-spider, Alg 11 as IsrlFedSpider runs it: one initial gradient, then in each of the
    # other R - 1 rounds a difference and a gradient (2R - 1 releases).
    K2 = cfg.k2
    grad = _sampled(cfg, K2, _z(sigmas["sigma2"], 2 * L / K2))
    diff = _sampled(cfg, K, _z(sigmas["sigma1"], 4 * L / K))
    if R == 1:
        return grad
    return ev.ComposedDpEvent([grad, ev.SelfComposedDpEvent(ev.ComposedDpEvent([diff, grad]), R - 1)])


def _spider_anchors(cfg: TranscriptConfig) -> int:
    """Rounds r = 0..R-1 of Alg 3 / Alg 10 with q | r (fresh minibatch gradients): ceil(R / q)."""
    return -(-cfg.rounds // cfg.q)


def _sdp_budgets(name: str, cfg: TranscriptConfig, epsilon: float, delta: float) -> list[tuple[int, float, float, int]]:
    """(invocations, eps~, delta~, messages per invocation) of P_vec, per the paper's algorithm."""
    N, M, n, K = cfg.num_silos, cfg.m, cfg.n, cfg.batch_size
    if name == "sdp-prox-sgd":  # Alg 7: disjoint batches -> parallel composition: one invocation
        b = papers.alg7_pvec(epsilon, delta, N, M)
        return [(1, b["epsilon"], b["delta"], M * K)]
    if name in ("sdp-prox-svrg", "sdp-pl-svrg"):  # Alg 8 (Alg 9 runs it S times at eps/(2 sqrt(2S)), delta/(2S))
        S = cfg.restarts if name == "sdp-pl-svrg" else 1
        e, d = (epsilon / (2 * math.sqrt(2 * S)), delta / (2 * S)) if S > 1 else (epsilon, delta)
        b = papers.alg8_pvec(e, d, N, M, n, K, cfg.rounds, cfg.inner_steps)
        return [(S * cfg.rounds, b["epsilon"], b["delta"], M * n),
                (S * cfg.rounds * cfg.inner_steps, b["epsilon"], b["delta"], M * K)]
    b = papers.alg10_pvec(epsilon, delta, N, M, n, K, cfg.k2, cfg.rounds, cfg.q)  # Alg 10
    anchors = _spider_anchors(cfg)
    return [(anchors, b["epsilon1"], b["delta1"], M * K), (cfg.rounds - anchors, b["epsilon2"], b["delta2"], M * cfg.k2)]


def _sdp_event(name: str, cfg: TranscriptConfig, budgets: dict[str, float]) -> ev.DpEvent:
    """SDP transcript: P_vec invocations as (eps~ / scale, delta~) events; ``budgets`` holds the
    target ``epsilon``, ``delta`` and a ``scale`` >= 1 that divides every eps~."""
    scale = budgets.get("scale", 1.0)
    parts = [ev.SelfComposedDpEvent(ev.EpsilonDeltaDpEvent(e / scale, d), count)
             for count, e, d, _ in _sdp_budgets(name, cfg, budgets["epsilon"], budgets["delta"]) if count > 0]
    return ev.ComposedDpEvent(parts)


def paper_sigmas(name: str, cfg: TranscriptConfig, epsilon: float, delta: float) -> dict[str, float]:
    """The paper's closed-form noise for ``name`` (ValueError where the paper gives none)."""
    L, n, R = cfg.clip, cfg.n, cfg.rounds
    if name == "isrl-prox-sgd":
        return papers.thm_e1(epsilon, delta, L, cfg.batch_size)
    if name in ("isrl-prox-svrg", "isrl-pl-svrg"):
        s = papers.thm_e2(epsilon, delta, L, n, R, cfg.inner_steps, cfg.restarts if name == "isrl-pl-svrg" else 1)
        return {"sigma1": s["sigma1"], "sigma2": s["sigma2"]}
    if name == "isrl-spider":
        if math.isinf(cfg.beta):
            return papers.h2_spider(epsilon, delta, L, n, R, cfg.q)
        return papers.thm_f1(epsilon, delta, L, cfg.beta, n, R, cfg.q)
    if name == "isrl-fed-spider":
        s = papers.h2_fed_spider(epsilon, delta, L, n, R)
        return {"sigma1": s["sigma1"], "sigma2": s["sigma2"]}
    raise ValueError(f"the paper gives no closed-form noise for {name!r}; use method='tight'")


def _reference_sigmas(name: str, cfg: TranscriptConfig, epsilon: float, delta: float) -> dict[str, float]:
    """Noise shape to scale: the paper's if it has one, else sigma = sensitivity (z = 1)."""
    try:
        return paper_sigmas(name, cfg, epsilon, delta)
    except ValueError:
        return {"sigma": 2 * cfg.clip / cfg.batch_size}


def candidate_accountants(event: ev.DpEvent, neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE) -> list[str]:
    """Accountants worth trying for ``event``, tightest first: the first of pld, rdp, advanced that
    supports it; for with-replacement sampling also ``advanced`` (its BBG18 amplification can beat
    the labelled-multiplicity bound of pld/rdp when a record is rarely drawn)."""
    names = [name for name in ("pld", "rdp", "advanced") if get_accountant(name, neighbouring).supports(event)]
    if not names:
        raise ValueError(f"no accountant supports {event}")
    with_replacement = any(b.sampling == "with_replacement" for b in flatten(event))
    return [names[0], "advanced"] if with_replacement and names[0] != "advanced" else names[:1]


def tightest_epsilon(event: ev.DpEvent, delta: float,
                     neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE) -> tuple[float, str]:
    """The smallest certified epsilon of ``event`` at ``delta`` among
    :func:`candidate_accountants`, and the accountant that certifies it."""
    dl = check_delta("delta", delta)
    return min((get_accountant(name, neighbouring).compose(event).get_epsilon(dl), name)
               for name in candidate_accountants(event, neighbouring))


def tightest_calibration(event_fn: Callable[[float], ev.DpEvent], epsilon: float, delta: float,
                         accountant: str | None = None,
                         neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE) -> Calibration:
    """``calibrate`` with ``accountant``, or with each candidate accountant, keeping the smallest
    certified noise multiplier (each candidate's result is a certificate on its own)."""
    names = [accountant] if accountant else candidate_accountants(event_fn(1.0), neighbouring)
    return min((calibrate(event_fn, epsilon, delta, name, neighbouring) for name in names),
               key=lambda c: c.noise_multiplier)


def certify(name: str, cfg: TranscriptConfig, sigmas: dict[str, float], delta: float,
            accountant: str | None = None) -> tuple[float, str]:
    """Certified epsilon (and the accountant used) of a transcript with noise ``sigmas``."""
    event = privacy_event(name, cfg, sigmas)
    if accountant is None:
        return tightest_epsilon(event, delta)
    return get_accountant(accountant).compose(event).get_epsilon(check_delta("delta", delta)), accountant


def calibrate_algorithm(name: str, cfg: TranscriptConfig, epsilon: float, delta: float,
                        method: str = "tight", accountant: str | None = None) -> NoiseCalibration:
    """Noise for ``name`` at a target (epsilon, delta): the paper's formula or the tight scaling."""
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    if method not in ("tight", "paper"):
        raise ValueError(f"method must be 'tight' or 'paper', got {method!r}")
    if name not in ALGORITHMS:
        raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {name!r}")
    if name in NON_PRIVATE:
        return NoiseCalibration(name, {}, math.inf, dl, "none", method)
    if name in SDP:
        return _calibrate_sdp(name, cfg, eps, dl, method, accountant)
    if method == "paper":
        sig = paper_sigmas(name, cfg, eps, dl)
        certified, acc = certify(name, cfg, sig, dl, accountant)
        return NoiseCalibration(name, sig, certified, dl, acc, "paper")
    ref = _reference_sigmas(name, cfg, eps, dl)

    def scaled(c: float) -> dict[str, float]:
        return {k: v * c for k, v in ref.items()}

    cal = tightest_calibration(lambda c: privacy_event(name, cfg, scaled(c)), eps, dl, accountant)
    return NoiseCalibration(name, scaled(cal.noise_multiplier), cal.epsilon, dl, cal.accountant, "tight")


def _calibrate_sdp(name: str, cfg: TranscriptConfig, eps: float, dl: float, method: str,
                   accountant: str | None) -> NoiseCalibration:
    acc = accountant or "advanced"
    scale = 1.0
    if method == "tight":
        scale = calibrate(lambda s: _sdp_event(name, cfg, {"epsilon": eps, "delta": dl, "scale": s}), eps, dl, acc).noise_multiplier
    certified = get_accountant(acc).compose(_sdp_event(name, cfg, {"epsilon": eps, "delta": dl, "scale": scale})).get_epsilon(dl)
    shuffle = {}
    for i, (count, e, d, msgs) in enumerate(_sdp_budgets(name, cfg, eps, dl)):
        if count == 0:
            continue
        bound = cfg.clip if i == 0 or name == "sdp-prox-sgd" else 2 * cfg.clip
        p = binomial_protocol_params(e / scale, d, bound, cfg.dimension, msgs)
        shuffle[f"invocation{i + 1}"] = {"count": count, "epsilon": e / scale, "delta": d, "messages": msgs,
                                         "bound": bound, "g": p.g, "b": p.b, "p": p.p}
    return NoiseCalibration(name, {}, certified, dl, acc, method, shuffle)


def paper_vs_tight(name: str, cfg: TranscriptConfig, epsilon: float, delta: float,
                   accountant: str | None = None) -> dict:
    """The paper's noise, what it really certifies, and the tight noise for the same target."""
    paper = calibrate_algorithm(name, cfg, epsilon, delta, "paper", accountant)
    tight = calibrate_algorithm(name, cfg, epsilon, delta, "tight", accountant or paper.accountant)
    ratio = {k: tight.sigmas[k] / v for k, v in paper.sigmas.items() if v not in (0, math.inf)}
    return {"algorithm": name, "target_epsilon": epsilon, "delta": delta,
            "paper_sigmas": paper.sigmas, "paper_certified_epsilon": paper.epsilon,
            "tight_sigmas": tight.sigmas, "tight_certified_epsilon": tight.epsilon,
            "tight_over_paper": ratio, "accountant": tight.accountant}
