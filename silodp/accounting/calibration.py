"""Noise calibration: the smallest noise multiplier whose *certified* epsilon meets a target.

``calibrate(event_fn, epsilon, delta, accountant)`` needs only a function from a noise multiplier
to an event (as dp-accounting's ``mechanism_calibration``). It starts from the Gaussian-DP (CLT)
approximation of the answer, then takes secant steps on (log z, log eps) safeguarded by the
bracket found so far, and returns only a point that the accountant certified with
target * (1 - rtol) <= epsilon <= target: the noise is rounded toward *more* privacy by
construction, never past the target. When the certified epsilon jumps across the tolerance band
(a certificate need not be continuous in the noise), the best certified point is returned with a
``note`` saying so.

Each accountant may tune its own settings through its ``calibration_settings`` hook: the PLD's
discretization is chosen from the number of compositions so that its (pessimistic, hence still
certified) over-estimate stays below 0.2% of the target, and ``rtol`` is tightened to 0.3%;
typically two or three PLD evaluations suffice.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
from typing import Any, Callable

from silodp.accounting import events as ev
from silodp._validation import check_delta, check_positive
from silodp.accounting._numerics import monotone_root
from silodp.accounting.accountants import ACCOUNTANTS, Accountant, get_accountant, neighbouring_arg, pld_discretization  # noqa: F401 (re-export)
from silodp.accounting.accountants import EXACT, FALLBACK, REFUSALS, TIGHT
from silodp.accounting.spec import AccountantSpec
from silodp.accounting.pld import UncertifiableDeltaError
from silodp.accounting.blocks import Mechanism, flatten
from silodp.accounting.gaussian import epsilon_for_delta

EventFn = Callable[[float], ev.DpEvent]
#: ``(neighbouring, **settings) -> Accountant``: an accountant class, or any factory of one
AccountantFactory = Callable[..., Accountant]


class CalibrationMethod(enum.Enum):
    """How an algorithm's noise for a target budget is chosen: the paper's closed form
    (``paper``, reported with what it really certifies) or the smallest scaling of the noise shape
    an accountant certifies (``tight``)."""

    TIGHT = "tight"
    PAPER = "paper"

#: Calibration searches noise multipliers up to this; a target that needs more is refused at once.
MAX_NOISE_MULTIPLIER = 1e7
@dataclasses.dataclass(frozen=True)
class Calibration:
    """Result of :func:`calibrate`: ``noise_multiplier`` certified (``epsilon``, ``delta``)-DP."""

    noise_multiplier: float
    epsilon: float
    delta: float
    target_epsilon: float
    accountant: str
    #: the accountant settings the certificate depends on (the PLD discretization)
    settings: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: empty when target * (1 - rtol) <= epsilon <= target; otherwise why not
    note: str = ""
    #: the registered accountant and settings that certified it (None: an unregistered factory);
    #: account again from this, never from the ``accountant`` label
    spec: AccountantSpec | None = None


def _check_reachable(event_fn: EventFn, epsilon: float, delta: float, accountant: AccountantFactory,
                     neighbouring: ev.NeighboringRelation, kwargs: dict[str, Any]) -> None:
    """ValueError at once (not after a long search) when even the largest noise multiplier the
    search tries does not certify ``epsilon``."""
    floor = _certifier(event_fn, delta, accountant, neighbouring, **kwargs)(MAX_NOISE_MULTIPLIER)
    if floor > epsilon:
        raise ValueError(f"epsilon: {epsilon:g} is unreachable with {_name(accountant)}: even noise_multiplier="
                         f"{MAX_NOISE_MULTIPLIER:g} certifies {floor:.3g} at delta={delta:g}")


def _certifier(event_fn: EventFn, delta: float, make_accountant: AccountantFactory, neighbouring: ev.NeighboringRelation,
               **kwargs: Any) -> Callable[[float], float]:
    def eps_of(z: float) -> float:
        return make_accountant(neighbouring, **kwargs).compose(event_fn(z)).get_epsilon(delta)
    return eps_of


def _maker(accountant: str | AccountantFactory) -> AccountantFactory:
    """An accountant factory ``(neighbouring, **settings) -> Accountant``: itself, or by registry name."""
    if isinstance(accountant, str):
        if accountant not in ACCOUNTANTS:
            raise ValueError(f"accountant: must be one of {sorted(ACCOUNTANTS)}, got {accountant!r}")
        return ACCOUNTANTS[accountant]
    if not callable(accountant):
        raise ValueError(f"accountant: must be a registry name or an accountant factory, got {accountant!r}")
    return accountant


def _name(accountant: str | AccountantFactory) -> str:
    return accountant if isinstance(accountant, str) else getattr(accountant, "name", "") or repr(accountant)


def _gdp_guess(event_fn: EventFn, epsilon: float, delta: float,
               neighbouring: ev.NeighboringRelation) -> tuple[float, float]:
    """Starting point and log-log slope from the Gaussian-DP (CLT) approximation.

    Each subsampled Gaussian step contributes mu^2 = q^2 (e^{1/z^2} - 1) (Dong, Roth & Su 2022,
    Thm 6 / Bu et al. 2020), a full-batch step 1/z^2; mu-GDP is the Gaussian mechanism with
    sigma/sensitivity = 1/mu. Only a guess: the certificate comes from the accountant. Returns
    (1.0, -1.0) when the event has no such structure.
    """
    shift = ev.sensitivity(neighbouring)

    def mu(z: float) -> float:
        total = 0.0
        for b in flatten(event_fn(z)):
            if b.kind == Mechanism.BALLS_IN_BINS:  # guessed as its t steps at Poisson rate 1/t
                total += b.count * math.expm1(min((shift / b.noise_multiplier) ** 2, 700.0)) / b.sample_size
                continue
            if b.kind != Mechanism.GAUSSIAN:
                raise ValueError("not a Gaussian event")
            inv = (shift / b.noise_multiplier) ** 2
            total += b.count * (b.q ** 2 * math.expm1(min(inv, 700.0)) if b.subsampled else inv)
        return math.sqrt(total)

    def gdp_epsilon(z: float) -> float:
        try:
            return epsilon_for_delta(1.0 / mu(z), delta)
        except ValueError:  # beyond the analytic inverse's range: effectively no privacy
            return math.inf

    try:
        z0 = monotone_root(gdp_epsilon, epsilon, 0.3, 3.0, increasing=False, safe="above", rtol=1e-6,
                           name="noise multiplier")
        slope = (math.log(gdp_epsilon(z0 * 1.01)) - math.log(gdp_epsilon(z0))) / math.log(1.01)
        return z0, slope if math.isfinite(slope) and slope < -1e-3 else -1.0
    except (ValueError, ZeroDivisionError, OverflowError):
        return 1.0, -1.0


def _search(eps_of: Callable[[float], float], target: float, rtol: float, start: float = 1.0,
            slope0: float = -1.0) -> tuple[float, float, float]:
    """Secant iteration on (log z, log eps), safeguarded by the bracket found so far.

    Returns (z, eps(z), last log-log slope) with target * (1 - rtol) <= eps(z) <= target; if even
    z = 1e-4 meets the budget, or the bracket closes on a jump of the certificate, the smallest
    certified z seen (the caller checks the tolerance). Every returned z has been certified by
    ``eps_of``.
    """
    goal = math.log(target * (1.0 - rtol / 2.0))
    lo = hi = None  # log z with eps > target (too little noise) / eps <= target
    best: tuple[float, float] | None = None
    slope = slope0
    prev: tuple[float, float] | None = None
    x = math.log(start)
    for _ in range(100):
        z = math.exp(x)
        if z > MAX_NOISE_MULTIPLIER:
            raise ValueError(f"epsilon={target:g} is unreachable: a noise multiplier above "
                             f"{MAX_NOISE_MULTIPLIER:g} would be needed")
        e = eps_of(z)
        if e <= target:
            if target * (1.0 - rtol) <= e:
                return z, e, slope
            hi = x if hi is None else min(hi, x)
            if best is None or z < best[0]:
                best = (z, e)
            if z < 1e-4:
                return (*best, slope)  # even tiny noise meets the budget (e.g. a huge epsilon)
        else:
            lo = x if lo is None else max(lo, x)
        if lo is not None and hi is not None and hi - lo < 1e-9 and best is not None:  # (hi set: best is)
            return (*best, slope)
        le = math.log(e) if 0 < e < math.inf else (-700.0 if e == 0 else 700.0)
        if prev is not None and x != prev[0]:
            s = (le - prev[1]) / (x - prev[0])
            if math.isfinite(s) and s < -1e-3:
                slope = s
        prev = (x, le)
        step = max(-math.log(4.0), min(math.log(4.0), (goal - le) / slope))
        xn = x + step
        if lo is not None and hi is not None and not lo < xn < hi:
            xn = 0.5 * (lo + hi)
        x = xn
    if best is None:
        raise ValueError(f"epsilon={target:g}: calibration did not converge")
    return (*best, slope)


def calibrate(
    event_fn: EventFn,
    epsilon: float | None = None,
    delta: float | None = None,
    accountant: str | AccountantSpec | AccountantFactory = "pld",
    neighbouring: ev.NeighboringRelation | None = None,
    rtol: float = 0.01,
    **accountant_kwargs: Any,
) -> Calibration:
    """Smallest noise multiplier z (within ``rtol``) with certified epsilon(event_fn(z), delta) <= epsilon.

    ``accountant``: a factory ``(neighbouring, **accountant_kwargs) -> Accountant`` (an accountant
    class), its registry name, or an :class:`~silodp.accounting.spec.AccountantSpec` (its settings
    are the keyword settings, as if given). No accountant is special-cased: the factory's
    ``calibration_settings`` hook (:meth:`~silodp.accounting.accountants.Accountant.calibration_settings`)
    may tune its settings (the PLD chooses its grid there).

    ``neighbouring`` (or dp-accounting's ``neighboring_relation=``, and ``target_epsilon=`` /
    ``target_delta=`` for the budget) defaults to ``ADD_OR_REMOVE_ONE`` (:data:`DEFAULT_RELATION`).

    Raises ``ValueError`` naming the argument when the budget cannot be met (e.g. a delta that
    the (epsilon, delta) events alone already exceed, or a target needing z > 1e7).
    """
    neighbouring = neighbouring_arg(neighbouring, accountant_kwargs.pop("neighboring_relation", None))
    epsilon = accountant_kwargs.pop("target_epsilon", None) if epsilon is None else epsilon
    delta = accountant_kwargs.pop("target_delta", None) if delta is None else delta
    eps = check_positive("epsilon", epsilon)
    dl = check_delta("delta", delta)
    if not 0 < rtol < 0.5:
        raise ValueError(f"rtol: must lie in (0, 0.5), got {rtol}")
    if isinstance(accountant, AccountantSpec):
        accountant_kwargs = {**dict(accountant.settings), **accountant_kwargs}
        accountant = accountant.name
    make = _maker(accountant)
    reason = make(neighbouring, **accountant_kwargs).unsupported_reason(event_fn(1.0))
    if reason:
        raise ValueError(f"accountant {_name(accountant)!r} cannot certify this mechanism: {reason}")
    name = _name(accountant)
    start, slope = _gdp_guess(event_fn, eps, dl, neighbouring)
    hook = getattr(make, "calibration_settings", None)
    tuned = hook(event_fn(1.0), eps, dl, dict(accountant_kwargs)) if hook is not None else None
    if tuned is not None:  # the accountant's own settings (the PLD's grid) and their tolerance
        accountant_kwargs, name, rtol = dict(tuned.settings), tuned.label, min(rtol, tuned.rtol)
    _check_reachable(event_fn, eps, dl, make, neighbouring, accountant_kwargs)
    if tuned is not None and tuned.coarse is not None:  # locate the answer with the cheaper settings first
        z_c, e_c, slope = _search(_certifier(event_fn, dl, make, neighbouring, **tuned.coarse), eps, 0.03, start, slope)
        e_f = max(0.5 * e_c, e_c - tuned.coarse_gap)  # the fine epsilon at z_c, predicted
        if 0 < e_f < math.inf:
            start = z_c * math.exp((math.log(eps * (1 - rtol / 2)) - math.log(e_f)) / slope)
    eps_of = _certifier(event_fn, dl, make, neighbouring, **accountant_kwargs)
    z, certified, _ = _search(eps_of, eps, rtol, start, slope)
    note = "" if certified >= eps * (1.0 - rtol) or z < 1e-4 else (
        f"certified epsilon {certified:.6g} is more than rtol={rtol:g} below the target: the certificate "
        f"of {name} jumps across the band [{eps * (1 - rtol):.6g}, {eps:g}] as the noise varies")
    return Calibration(z, certified, dl, eps, name, dict(accountant_kwargs), note, _spec(make, accountant_kwargs))


def _spec(make: AccountantFactory, settings: dict[str, Any]) -> AccountantSpec | None:
    """The spec of the registered class ``make`` with ``settings`` (None: not a registered class,
    or settings its spec does not carry)."""
    name = getattr(make, "name", None)
    if not name or ACCOUNTANTS.get(name) is not make:
        return None
    try:
        return AccountantSpec(name, tuple(settings.items()))
    except ValueError:
        return None


def _candidates() -> list[type[Accountant]]:
    """The registered accountants that compete for the default certificate, tightest first
    (their :attr:`~silodp.accounting.accountants.Accountant.candidacy` and ``candidate_rank``)."""
    return sorted((cls for cls in ACCOUNTANTS.values() if cls.candidacy),
                  key=lambda cls: cls.candidate_rank)


def candidate_accountants(event: ev.DpEvent, neighbouring: ev.NeighboringRelation | None = None) -> list[str]:
    """Accountants worth trying for ``event``, tightest first, by each registered class's
    ``candidacy``: an ``exact`` one alone when it supports the event (``gdp``); otherwise every
    ``tight`` one that supports it (``pld`` and ``rdp``: ``pld`` is tighter but refuses deltas
    below its floating-point charge, and the smaller of two certificates is one), or else the
    first ``fallback`` (``advanced``); a ``fallback`` also joins where it ``competes`` (``advanced``
    for with-replacement sampling: its BBG18 amplification can beat rdp's labelled-multiplicity
    bound, and pld's on a coarse grid, when a record is rarely drawn)."""
    neighbouring = neighbouring_arg(neighbouring)
    pool = tuple(_candidates())
    try:
        return list(_cached_candidates(event, neighbouring, pool))
    except TypeError:  # an unhashable event (one holding a list): no cache
        return _candidate_names(event, neighbouring, pool)


@functools.lru_cache(maxsize=256)
def _cached_candidates(event: ev.DpEvent, neighbouring: ev.NeighboringRelation,
                       pool: tuple[type[Accountant], ...]) -> tuple[str, ...]:
    """:func:`_candidate_names` of a hashable (frozen) event, kept: the answer depends only on the
    event, the relation and the registered ``pool``, all in the key."""
    return tuple(_candidate_names(event, neighbouring, pool))


def _kinds(event: ev.DpEvent) -> set[Any] | None:
    """The mechanisms of ``event``'s blocks, from one walk (None where the generic walk refuses it:
    each accountant's own walk then says why)."""
    try:
        return {getattr(b, "kind", None) for b in flatten(event)}
    except REFUSALS:
        return None


def _may_support(cls: type[Accountant], kinds: set[Any] | None) -> bool:
    """False when ``cls``'s allow-list (``CERTIFIES``) lacks one of ``kinds``: it would refuse the event."""
    return kinds is None or kinds <= cls.CERTIFIES.keys()


def _candidate_names(event: ev.DpEvent, neighbouring: ev.NeighboringRelation,
                     pool: tuple[type[Accountant], ...]) -> list[str]:
    kinds = _kinds(event)
    names = [cls for cls in pool if _may_support(cls, kinds) and cls(neighbouring).supports(event)]
    if not names:
        reasons = "; ".join(f"{c.name}: {c(neighbouring).unsupported_reason(event)}" for c in pool)
        raise ValueError(f"event: no accountant certifies it ({reasons})")
    return [c.name for c in _choose(names, event)]


def _choose(names: list[type[Accountant]], event: ev.DpEvent) -> list[type[Accountant]]:
    """The candidates among the classes ``names`` that support ``event`` (pool order):
    :func:`candidate_accountants`' rule."""
    exact = [c for c in names if c.candidacy == EXACT]
    if exact:
        return [exact[0]]
    tight = [c for c in names if c.candidacy == TIGHT] or names[:1]
    extra = [c for c in names if c.candidacy == FALLBACK and c not in tight and c.competes(event)]
    return tight + extra


def _composed_candidates(event: ev.DpEvent, neighbouring: ev.NeighboringRelation) -> list[Accountant]:
    """The :func:`candidate_accountants` of ``event``, each with its default settings and ``event``
    composed: asking a class whether it supports the event is composing it (``supports`` is the dry
    run of ``compose``, the same walk and checks), so each is walked and checked once."""
    kinds = _kinds(event)
    composed: dict[type[Accountant], Accountant] = {}
    pool = tuple(_candidates())
    for cls in pool:
        if _may_support(cls, kinds):
            try:
                composed[cls] = cls(neighbouring).compose(event)
            except REFUSALS:  # as ``unsupported_reason``
                continue
            if cls.candidacy == EXACT:  # alone (``_choose``): no other is asked
                return [composed[cls]]
    if not composed:
        _candidate_names(event, neighbouring, pool)  # raises, naming every candidate's reason
    return [composed[c] for c in _choose(list(composed), event)]


def settings_for(name: str, settings: dict[str, Any] | None) -> dict[str, Any]:
    """The entries of ``settings`` that the accountant ``name`` takes (its ``SETTINGS``)."""
    taken = getattr(_maker(name), "SETTINGS", ())
    return {k: v for k, v in (settings or {}).items() if k in taken}


def _check_settings(settings: dict[str, Any] | None) -> None:
    if not settings:
        return
    known = {k for cls in ACCOUNTANTS.values() for k in getattr(cls, "SETTINGS", ())}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise ValueError(f"settings: {unknown} are no registered accountant's settings ({sorted(known)})")


def tightest_epsilon(event: ev.DpEvent, delta: float, neighbouring: ev.NeighboringRelation | None = None,
                     pld_settings: dict[str, Any] | None = None) -> tuple[float, str]:
    """The smallest certified epsilon of ``event`` at ``delta`` among
    :func:`candidate_accountants` (each given the entries of ``pld_settings`` it takes, its
    ``SETTINGS``: the ``pld`` grid), and the accountant that certifies it. A candidate that cannot
    certify at this delta (``pld`` below its floating-point charge) is skipped; if none can, the
    last one's error is raised. A candidate whose cheap lower bound on its own certificate
    (:meth:`~silodp.accounting.accountants.Accountant.epsilon_floor`: ``rdp``'s) is above a
    certificate already in hand is not computed: it could not be the smaller."""
    dl = check_delta("delta", delta)
    neighbouring = neighbouring_arg(neighbouring)
    _check_settings(pld_settings)
    results: list[tuple[float, str]] = []
    error: UncertifiableDeltaError | None = None
    if pld_settings:
        accountants = [get_accountant(name, neighbouring, **settings_for(name, pld_settings)).compose(event)
                       for name in candidate_accountants(event, neighbouring)]
    else:
        accountants = _composed_candidates(event, neighbouring)
    for accountant in accountants:
        name = accountant.name
        if results and accountant.epsilon_floor(dl) > min(results)[0]:
            continue
        try:
            results.append((accountant.get_epsilon(dl), name))
        except UncertifiableDeltaError as exc:
            error = exc
    if not results:
        assert error is not None  # every candidate failed: the last one's error
        raise error
    return min(results)


def tightest_calibration(event_fn: EventFn, epsilon: float, delta: float, accountant: str | None = None,
                         neighbouring: ev.NeighboringRelation | None = None,
                         pld_settings: dict[str, Any] | None = None) -> Calibration:
    """``calibrate`` with ``accountant``, or with each candidate accountant, keeping the smallest
    certified noise multiplier (each candidate's result is a certificate on its own); one that
    ``calibrates_as_fallback`` (``rdp``) is only tried when no tighter candidate could calibrate
    (a ``pld`` that cannot certify at ``delta``): its noise is not smaller.
    ``pld_settings``: accountants' keyword settings, each given to those that take it (default:
    chosen by ``calibrate``)."""
    neighbouring = neighbouring_arg(neighbouring)
    _check_settings(pld_settings)
    names = [accountant] if accountant else candidate_accountants(event_fn(1.0), neighbouring)
    results: list[Calibration] = []
    error: UncertifiableDeltaError | None = None
    for name in names:
        if results and getattr(_maker(name), "calibrates_as_fallback", False):
            continue
        try:
            results.append(calibrate(event_fn, epsilon, delta, name, neighbouring, **settings_for(name, pld_settings)))
        except UncertifiableDeltaError as exc:
            if accountant:
                raise
            error = exc
    if not results:
        assert error is not None  # every candidate failed: the last one's error
        raise error
    return min(results, key=lambda c: c.noise_multiplier)
