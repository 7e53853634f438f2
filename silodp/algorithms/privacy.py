"""Noise for an algorithm at a budget, and the certificate of its transcript, through its class.

Every algorithm class declares what one silo releases (its plan's
:meth:`~silodp.algorithms.plan.Plan.declaration`, next to the ``_run`` that sends those messages); this module only turns a declaration into a
calibration or a certificate with the accounting layer's generic machinery
(:func:`silodp.accounting.releases.releases_event`, :func:`silodp.accounting.calibrate`). A name is
resolved by the registry (:mod:`silodp.algorithms.registry`, a leaf module); the class hands itself
to the calibration, which never looks names up itself.

``method="paper"`` takes the paper's closed-form noise (the class's ``paper_noise``) and reports
what it really certifies; ``method="tight"`` scales the paper's noise *shape* (or, where the paper
gives none, the sensitivity shape) by the smallest factor the chosen accountant certifies.
Shuffle-DP algorithms are calibrated and certified by the exact P_vec certificates of their whole
transcript (:mod:`silodp.accounting.pvec` and :mod:`silodp.accounting.pvec_l2`; accountant ``"pvec"``).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any

from silodp._validation import check_count, check_delta, check_noise_map, check_positive
from silodp.accounting import CalibrationMethod
from silodp.accounting import REPLACE_ONE, candidate_accountants, get_accountant, tightest_epsilon
from silodp.accounting.events import DpEvent
from silodp.accounting.spec import AccountantSpec
from silodp.accounting.releases import pvec_event, releases_event

from .config import CALIBRATIONS
from .registry import algorithm_class



@dataclasses.dataclass(frozen=True)
class TranscriptConfig:
    """What every algorithm's transcript shares: the smallest silo's ``n``, the rounds, the batch
    size, the problem's clip, smoothness ``beta`` (inf: unknown) and dimension, the federation's
    silos and the batch sampling. A family's own transcript fields (SPIDER's ``period``, SVRG's
    ``inner_steps``, ...) are its ``Config``'s ``param(transcript=True)`` fields, which the class's
    derived transcript adds (:func:`silodp.algorithms.plan.derived_transcript`); build one with
    ``cls.plan.transcript(...)``, which refuses a field the class has not by name."""

    n: int
    rounds: int
    batch_size: int
    clip: float = 1.0
    #: the problem's smoothness (the papers' closed forms read it; inf: not known)
    beta: float = math.inf
    num_silos: int = 1
    silos_per_round: int | None = None
    dimension: int = 1
    replacement: bool = True
    #: minibatches by balls-in-bins (BatchSampling.BALLS_IN_BINS) instead of ``replacement``'s
    balls_in_bins: bool = False
    #: delta already spent outside the certificate: random availability's lower tail below the
    #: declared floor of silos summed (silos_per_round is then that floor; Plan.summed_floor)
    charged_delta: float = 0.0

    def __post_init__(self) -> None:
        for name in ("n", "rounds", "batch_size", "num_silos", "dimension"):
            check_count(name, getattr(self, name))
        check_positive("clip", self.clip)
        if self.batch_size > self.n:
            raise ValueError(f"batch_size: must be <= n, got {self.batch_size} > {self.n}")
        if self.silos_per_round is not None and not 1 <= self.silos_per_round <= self.num_silos:
            raise ValueError(f"silos_per_round: must lie in [1, num_silos], got {self.silos_per_round}")
        if not self.beta > 0:
            raise ValueError(f"beta: must be > 0, got {self.beta}")
        if not 0.0 <= self.charged_delta < 1.0:
            raise ValueError(f"charged_delta: must lie in [0, 1), got {self.charged_delta}")

    @property
    def m(self) -> int:
        return self.num_silos if self.silos_per_round is None else self.silos_per_round


#: transcript fields renamed since transcripts were first stored (results stores' calibration
#: requests): stored spelling -> current name (round 7: SPIDER's ``q`` is ``period``)
STORED_NAMES = {"q": "period"}
#: family fields every stored transcript carried before round 8 (the shared TranscriptConfig held
#: them, at these neutral values where the family had none); a class without the field ignored it
STORED_FAMILY_FIELDS = ("batch_size2", "period", "inner_steps", "restarts", "local_steps")


def keyed_transcript(data: dict) -> dict:
    """``data`` (``dataclasses.asdict`` of a transcript) as stores keyed it before round 8: a
    transcript of the shared fields (it has ``n``) with the family fields of
    :data:`STORED_FAMILY_FIELDS` it lacks at the values the shared class gave them (``batch_size2``
    the batch size, the others 1), so that a stored calibration keeps its key."""
    if "n" not in data:
        return dict(data)
    legacy = {name: data.get("batch_size") if name == "batch_size2" else 1 for name in STORED_FAMILY_FIELDS}
    return {**legacy, **data}


def stored_transcript(data: dict, transcript: type = TranscriptConfig) -> Any:
    """The ``transcript`` (an algorithm's :attr:`Transcript` class) a stored dict describes
    (``dataclasses.asdict`` of one), read through the one migration of :data:`STORED_NAMES`, the
    family fields of :data:`STORED_FAMILY_FIELDS` that ``transcript`` lacks dropped (its
    declaration never read them); users' keywords are never migrated (``q`` is refused by
    ``cls.plan.transcript``). Any other field it lacks is a ValueError naming it."""
    fields = {STORED_NAMES.get(k, k): v for k, v in data.items()}
    if len(fields) < len(data):
        raise ValueError(f"transcript: both a stored name and its current one in {sorted(data)}")
    names = {f.name for f in dataclasses.fields(transcript)}
    fields = {k: v for k, v in fields.items() if k in names or k not in STORED_FAMILY_FIELDS}
    unknown = sorted(set(fields) - names)
    if unknown:
        raise ValueError(f"{unknown[0]}: not a field of the stored transcript {transcript.__name__} "
                         f"(fields: {sorted(names)})")
    return transcript(**fields)


def _transcript_of(cls: Any, cfg: Any) -> Any:
    """``cfg`` if it holds every field of ``cls``'s transcript, else a ValueError naming the missing
    ones (a family's fields come with ``cls.plan.transcript``, not with the shared TranscriptConfig)."""
    given: type = type(cfg)
    missing = _missing_fields(cls.Transcript, given)
    if missing:
        raise ValueError(f"cfg: a transcript of {cls.__name__} needs {list(missing)}; "
                         f"build it with {cls.__name__}.plan.transcript(...)")
    return cfg


@functools.lru_cache(maxsize=256)
def _missing_fields(needed: type, given: type) -> tuple[str, ...]:
    have = {f.name for f in dataclasses.fields(given)} if dataclasses.is_dataclass(given) else set()
    return tuple(f.name for f in dataclasses.fields(needed) if f.name not in have)


@dataclasses.dataclass(frozen=True)
class NoiseCalibration:
    """Noise standard deviations of the per-silo messages (or shuffle parameters per message
    group) and what they certify."""

    algorithm: str
    sigmas: dict[str, float]
    epsilon: float
    delta: float
    accountant: str
    method: str
    shuffle: dict[str, dict] = dataclasses.field(default_factory=dict)
    #: family-specific facts (DP-SCAFFOLD: sigma_g and the guarantee toward each observer)
    details: dict = dataclasses.field(default_factory=dict)
    #: the registered accountant and settings that certified it (None: none, or not registered);
    #: certify again with this (:func:`certify` takes it), never by parsing ``accountant``
    spec: AccountantSpec | None = None


def privacy_event(algorithm: Any, cfg: TranscriptConfig, sigmas: dict[str, float]) -> DpEvent:
    """Event of one silo's whole transcript given noise std devs ``sigmas`` (shuffle-DP: the
    calibration's ``{"epsilon", "delta", "scale"}``)."""
    cls = algorithm_class(algorithm)
    return releases_event(cls.plan.declaration(_transcript_of(cls, cfg), check_noise_map("sigmas", sigmas)))


def certify(algorithm: Any, cfg: TranscriptConfig, sigmas: dict[str, float], delta: float,
            accountant: str | AccountantSpec | None = None) -> tuple[float, str]:
    """Certified epsilon (and the accountant used) of a transcript with noise ``sigmas``
    (cached once per (declaration, delta, accountant): the certificate is a function of what the
    silo may release, so runs whose configurations differ only where the declaration does not,
    e.g. the model's dimension, share one certificate); ``accountant``: a registry name, or a spec
    with its settings (a calibration's :attr:`NoiseCalibration.spec`)."""
    key = tuple(sorted(check_noise_map("sigmas", sigmas).items()))
    cls = algorithm_class(algorithm)
    declaration = tuple(cls.plan.declaration(_transcript_of(cls, cfg), dict(key)))
    return _certify(declaration, check_delta("delta", delta), accountant)


@functools.lru_cache(maxsize=256)
def _certify(declaration: tuple, delta: float, accountant: str | AccountantSpec | None) -> tuple[float, str]:
    event = releases_event(list(declaration))
    if isinstance(accountant, AccountantSpec):
        return accountant.make(REPLACE_ONE).compose(event).get_epsilon(delta), accountant.label
    if accountant is not None:
        return get_accountant(accountant, REPLACE_ONE).compose(event).get_epsilon(delta), accountant
    try:
        return tightest_epsilon(event, delta, REPLACE_ONE)
    except ValueError:  # some candidate cannot reach a huge epsilon (tiny explicit noise): the others
        results = []
        try:
            names = candidate_accountants(event, REPLACE_ONE)
        except ValueError:  # noise below every accountant's domain (epsilon > 1e8): no guarantee
            return math.inf, "none"
        for name in names:
            try:
                results.append((get_accountant(name, REPLACE_ONE).compose(event).get_epsilon(delta), name))
            except ValueError:
                continue
        return min(results) if results else (math.inf, "none")


def certify_shuffle(algorithm: Any, cfg: TranscriptConfig, params: dict[str, tuple], delta: float,
                    accountant: str | None = None, target: float | None = None) -> tuple[float, str]:
    """Certified epsilon (and the accountant) of a shuffle-DP transcript run with the protocol
    parameters ``params`` (per message group (g, b, p, rotate)): the exact P_vec certificates of
    the whole transcript (:func:`silodp.accounting.pvec.transcript_epsilon`), ``inf`` where some
    group is not the binomial protocol at p = 1/2 (the certificate covers no other). ``target``:
    the requested epsilon, which sets the certificate's grid (as the calibration does)."""
    from silodp.accounting import pvec

    cls, dl = algorithm_class(algorithm), check_delta("delta", delta)
    acc = _shuffle_accountant(accountant, pvec.default_interval(target or 1.0))
    releases = [r for r in cls.plan.shuffle_declaration(_transcript_of(cls, cfg), None, params) if r.count]
    if any(len(r.params) < 3 or float(r.params[2]) != 0.5 for r in releases):
        return math.inf, acc.name
    return acc.compose(pvec_event(releases)).get_epsilon(dl), acc.name


def _shuffle_accountant(accountant: str | None, interval: float):
    """The registered accountant ``accountant`` (default :data:`PVEC_ACCOUNTANT`) at the P_vec
    grid ``interval``; one that does not certify P_vec invocations is refused, naming those that do."""
    from silodp.accounting import ACCOUNTANTS, PvecDpEvent
    from silodp.accounting.calibration import settings_for

    name = accountant or PVEC_ACCOUNTANT
    acc = get_accountant(name, REPLACE_ONE, **settings_for(name, {"value_discretization_interval": interval}))
    probe = PvecDpEvent(4, 1, 1, 1)
    if not acc.supports(probe):
        able = sorted(n for n, c in ACCOUNTANTS.items() if c(REPLACE_ONE).supports(probe))
        raise ValueError(f"accountant: shuffle-DP transcripts are certified by {able}, not {name!r} "
                         f"({acc.unsupported_reason(probe)})")
    return acc


def _method(method: str) -> CalibrationMethod:
    try:
        return CalibrationMethod(method)
    except ValueError:
        raise ValueError(f"method: must be one of {CALIBRATIONS}, got {method!r}") from None


def calibrate_algorithm(algorithm: Any, cfg: TranscriptConfig, epsilon: float, delta: float,
                        method: str = "tight", accountant: str | None = None) -> NoiseCalibration:
    """Noise for ``algorithm`` at a target (epsilon, delta): the paper's formula or the tight scaling
    (Gaussian), the binomial protocol's parameters (shuffle-DP), by the class's plan
    (:meth:`silodp.algorithms.plan.Plan.calibrate_target`)."""
    cls = algorithm_class(algorithm)
    eps, dl = check_positive("epsilon", epsilon), check_delta("delta", delta)
    how = _method(method)
    return cls.plan.calibrate_target(_transcript_of(cls, cfg), eps, dl, how.value, accountant)


def _registered(name: str) -> AccountantSpec | None:
    """The spec of a registered accountant ``name`` (None: "none", no accountant)."""
    from silodp.accounting import ACCOUNTANTS

    return AccountantSpec(name) if name in ACCOUNTANTS else None


#: The default accountant of shuffle-DP transcripts (the better of the l2-aware Renyi moments of
#: :mod:`silodp.accounting.pvec_l2` and the per-coordinate PLD of :mod:`silodp.accounting.pvec`).
PVEC_ACCOUNTANT = "pvec"


def _calibrate_shuffle(cls, cfg, eps: float, dl: float, how: CalibrationMethod, accountant: str | None) -> NoiseCalibration:
    """Shuffle-DP (paper Alg 7-10 on P_vec, Alg 4-5): the binomial protocol's trials b of every
    message group from the exact P_vec certificates of the whole transcript
    (:func:`silodp.accounting.pvec.transcript_epsilon`: the l2-aware Renyi moments and the
    per-coordinate discrete PLD, reuse across epochs and with-replacement multiplicities
    composed), g = max(ceil(sqrt(messages)), 4), p = 1/2.

    ``tight``: the l2-aware protocol (random rotation); b_r = ceil(s w_r) with the paper's
    budget shape w_r = 4 g_r^2 / (messages_r eps~_r^2) (eps~_r the paper's per-invocation
    budget, Alg 7 line 7, Alg 8 line 1, Alg 10 lines 8 and 12) and s the smallest on a geometric
    grid whose certificate is <= ``eps``. ``paper``: Alg 5 as printed (no rotation), every
    invocation calibrated alone to the paper's (eps~, delta~); the certificate of the whole
    transcript is reported (it may exceed ``eps`` where the paper's budgets do not compose).
    ``accountant``: a registered accountant of P_vec invocations: None or "pvec" (the best of
    both certificates), or "pvec-pld" (the per-coordinate PLD alone, for comparison).
    """
    from silodp.accounting import pvec

    h = pvec.default_interval(eps)
    acc = _shuffle_accountant(accountant, h)

    def groups(releases) -> tuple:
        return acc.groups(pvec_event(releases))

    total, dl = dl, dl - cfg.charged_delta  # the certificates get what availability left
    if dl <= 0:
        raise ValueError(f"delta: {total:g} is spent by the availability tail ({cfg.charged_delta:g})")
    plan = [r for r in cls.plan.shuffle_declaration(cfg, {"epsilon": eps, "delta": dl}) if r.count]
    rotate = how == CalibrationMethod.TIGHT

    def structure(r, b: int = 1, uses: int | None = None) -> pvec.PvecGroup:
        params = (pvec.levels(r.messages), b, 0.5, rotate)
        (grp,) = groups([dataclasses.replace(r, params=params)])
        return grp if uses is None else dataclasses.replace(grp, uses=uses, with_replacement=False)

    def weight(r) -> float:
        return 4.0 * pvec.levels(r.messages) ** 2 / (r.messages * min(r.epsilon, 1e6) ** 2)

    if rotate:
        bs, _ = pvec.calibrate_noise(tuple(structure(r) for r in plan), tuple(weight(r) for r in plan), eps, dl, h)
    else:
        bs = tuple(pvec.calibrate_noise((structure(r, uses=1),), (weight(r),), r.epsilon, r.delta,
                                        pvec.default_interval(r.epsilon))[0][0] for r in plan)
    params = {r.group: (pvec.levels(r.messages), b, 0.5, rotate) for r, b in zip(plan, bs)}
    releases = cls.plan.shuffle_declaration(cfg, {"epsilon": eps, "delta": dl}, params)
    certified = acc.compose(pvec_event(releases)).get_epsilon(dl)
    shuffle = {r.group: dict(zip(("g", "b", "p", "rotate"), r.params), count=r.count, epsilon=r.epsilon,
                             delta=r.delta, messages=r.messages, bound=r.bound)
               for r in releases if r.count}
    return NoiseCalibration(cls.name, {}, certified, total, acc.name, how.value, shuffle)


def paper_vs_tight(algorithm: Any, cfg: TranscriptConfig, epsilon: float, delta: float,
                   accountant: str | None = None) -> dict:
    """The paper's noise, what it really certifies, and the tight noise for the same target."""
    paper = calibrate_algorithm(algorithm, cfg, epsilon, delta, "paper", accountant)
    tight = calibrate_algorithm(algorithm, cfg, epsilon, delta, "tight", accountant or paper.accountant)
    ratio = {k: tight.sigmas[k] / v for k, v in paper.sigmas.items() if v not in (0, math.inf)}
    return {"algorithm": paper.algorithm, "target_epsilon": epsilon, "delta": delta,
            "paper_sigmas": paper.sigmas, "paper_certified_epsilon": paper.epsilon,
            "tight_sigmas": tight.sigmas, "tight_certified_epsilon": tight.epsilon,
            "tight_over_paper": ratio, "accountant": tight.accountant}
