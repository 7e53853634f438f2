"""The accountant interface every registered accountant implements (:class:`Accountant`:
``compose(event, count)``, ``get_epsilon``, ``get_delta``, ``supports``), the neighbouring
relation it takes, and the settings hook of calibration (:class:`CalibrationSettings`)."""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import Any, ClassVar

from silodp.accounting import events as ev
from silodp._validation import check_count, check_delta, check_nonnegative
from silodp.accounting._numerics import monotone_root
from silodp.accounting.blocks import Block, Mechanism, Sampling, UnsupportedEventError, flatten

_ALL_SAMPLING = frozenset(Sampling)
_REPLACE_ONE_ONLY = (Sampling.WITH_REPLACEMENT, Sampling.WITHOUT_REPLACEMENT)

#: The neighbouring relation of generic mechanism accounting when none is named: add/remove one
#: record, as dp-accounting, Opacus and Flower. The papers' algorithms name REPLACE_ONE (ISRL-DP,
#: Lowy et al. Definition 4) wherever they account.
DEFAULT_RELATION = ev.ADD_OR_REMOVE_ONE


def neighbouring_arg(neighbouring: Any = None, neighboring_relation: Any = None) -> ev.NeighboringRelation:
    """The relation given under silodp's name (``neighbouring``) or dp-accounting's
    (``neighboring_relation``); :data:`DEFAULT_RELATION` when neither is given."""
    if neighboring_relation is None and type(neighbouring) is ev.NeighboringRelation:
        return neighbouring
    given = [ev.relation(v) for v in (neighbouring, neighboring_relation) if v is not None]
    if len(set(given)) > 1:
        raise ValueError(f"neighboring_relation: {given[1].name} contradicts neighbouring={given[0].name}")
    return given[0] if given else DEFAULT_RELATION


def _alias(name: str, value: Any, alias: str, other: Any) -> Any:
    """``value`` or its dp-accounting spelling ``other`` (one of them, required)."""
    if value is not None and other is not None and value != other:
        raise ValueError(f"{alias}: {other!r} contradicts {name}={value!r}")
    if value is None and other is None:
        raise ValueError(f"{name}: required (or dp-accounting's {alias})")
    return value if value is not None else other


def as_silodp_event(event: Any) -> ev.DpEvent:
    """``event`` itself, or the silodp event equal to a dp-accounting event tree
    (:func:`silodp.accounting.events.from_dp_accounting`); a dp-accounting event that silodp cannot
    certify soundly (no counterpart: ``MixtureOfGaussiansDpEvent``, ``RepeatAndSelectDpEvent``,
    ``SingleEpochTreeAggregationDpEvent``, ``UnsupportedDpEvent``...) is an
    :class:`UnsupportedEventError` naming it."""
    if not ev.is_dp_accounting_event(event):
        return event
    try:
        return ev.from_dp_accounting(event)
    except (ValueError, TypeError, AttributeError) as exc:
        raise UnsupportedEventError(f"event: dp-accounting's {type(event).__name__} is not certified by "
                                    f"silodp ({exc})") from None


#: :attr:`Accountant.candidacy` values
#: The exceptions by which walking or checking an event refuses it: :meth:`Accountant.unsupported_reason`
#: (and the candidate search, which asks the same question) turns them into a reason, never raises them.
REFUSALS = (ValueError, TypeError, AttributeError, ArithmeticError)

EXACT, TIGHT, FALLBACK = "exact", "tight", "fallback"


class Accountant(abc.ABC):
    """Base class: collects blocks; subclasses turn them into (epsilon, delta).

    dp-accounting's names are accepted too: ``neighboring_relation=``, ``get_epsilon(target_delta=)``,
    ``get_delta(target_epsilon=)``, and :attr:`ledger` (the event composed so far).
    """

    name: ClassVar[str] = ""
    #: the mechanisms this accountant certifies, and for Gaussian steps the samplings (allow-list: a
    #: block of a kind absent here is refused, and the candidate search does not ask about it)
    CERTIFIES: ClassVar[dict[Mechanism, frozenset[Sampling]]] = {}
    #: the keyword settings a caller may give it (the CLI's ``--value-discretization-interval``...)
    SETTINGS: ClassVar[tuple[str, ...]] = ()
    #: how the default certificate (:func:`silodp.accounting.candidate_accountants`) uses it:
    #: :data:`EXACT` (alone, whenever it supports the event), :data:`TIGHT` (tried whenever it
    #: supports it), :data:`FALLBACK` (tried when no tight one does, or when :meth:`competes`),
    #: None (only when named)
    candidacy: ClassVar[str | None] = None
    #: order among the candidates, tightest first
    candidate_rank: ClassVar[int] = 0
    #: a calibration skips it once a tighter candidate calibrated (its noise is never smaller)
    calibrates_as_fallback: ClassVar[bool] = False

    def __init__(self, neighbouring: ev.NeighboringRelation | None = None, *,
                 neighboring_relation: ev.NeighboringRelation | None = None) -> None:
        self.neighbouring = neighbouring_arg(neighbouring, neighboring_relation)
        self._blocks: list[Any] = []  # Blocks, or an accountant's own items (MixtureBlock, PvecGroup)
        self._events: list[ev.DpEvent] = []

    @property
    def neighboring_relation(self) -> ev.NeighboringRelation:
        """dp-accounting's name of :attr:`neighbouring`."""
        return self.neighbouring

    @property
    def ledger(self) -> ev.DpEvent:
        """Everything composed so far as one event, in order (dp-accounting's ``ledger``)."""
        return ev.ComposedDpEvent(tuple(self._events))

    @property
    def sensitivity(self) -> float:
        """l2-sensitivity of a sum in units of the contribution bound C under this relation."""
        return ev.sensitivity(self.neighbouring)

    def _unit_z(self, block: Block) -> float:
        """The noise multiplier relative to the relation's shift (sigma / (sensitivity C))."""
        return block.noise_multiplier / self.sensitivity

    def __len__(self) -> int:
        return sum(b.count for b in self._blocks)

    def settings(self) -> dict[str, Any]:
        """The settings (:attr:`SETTINGS`) a certificate of this accountant depends on."""
        return {k: getattr(self, k) for k in self.SETTINGS}

    @classmethod
    def competes(cls, event: ev.DpEvent) -> bool:
        """Whether a :data:`FALLBACK` candidate also competes with the tight ones for ``event``
        (called only when it supports ``event``)."""
        return False

    def _flatten(self, event: ev.DpEvent, count: int = 1) -> list[Any]:
        """The items this accountant composes (blocks, :func:`~silodp.accounting.blocks.flatten`)."""
        return flatten(event, count)

    def unsupported_reason(self, event: ev.DpEvent) -> str | None:
        """Why ``event`` cannot be accounted here (``None`` if it can): a dry run of ``compose``.
        Never raises: a malformed or unknown event is a reason, not an exception."""
        try:
            for block in self._flatten(event):
                self._check_block(block)
        except REFUSALS as exc:
            return str(exc) or type(exc).__name__
        return None

    def supports(self, event: ev.DpEvent) -> bool:
        """Whether this accountant certifies ``event`` (False, never an exception, otherwise)."""
        return self.unsupported_reason(event) is None

    def compose(self, event: ev.DpEvent, count: int = 1) -> "Accountant":
        """Compose ``count`` adaptive repetitions of ``event`` (silodp's, or dp-accounting's own
        event objects, read as the silodp events of the same name; one without a sound silodp
        counterpart is refused naming it). Atomic: everything is translated, walked and checked
        before anything is committed, so a refusal leaves the accountant (its steps, certificate
        and :attr:`ledger`) exactly as it was."""
        count = check_count("count", count)
        event = as_silodp_event(event)
        blocks = self._flatten(event, count)
        for block in blocks:
            self._check_block(block)
        entry = event if count == 1 else ev.SelfComposedDpEvent(event, count)
        self._blocks.extend(blocks)
        self._events.append(entry)
        return self

    def _check_block(self, block: Block) -> None:
        allowed = self.CERTIFIES.get(block.kind)
        if allowed is None:
            raise UnsupportedEventError(f"{self.name} does not certify {block.kind.value} mechanisms")
        if block.kind == Mechanism.GAUSSIAN:
            if block.sampling not in allowed:
                raise UnsupportedEventError(f"{self.name} does not certify Gaussian steps with sampling "
                                            f"{block.sampling.value}")
            if block.sampling in _REPLACE_ONE_ONLY and self.neighbouring != ev.REPLACE_ONE:
                raise UnsupportedEventError(f"sampling {block.sampling.value} is defined for REPLACE_ONE only "
                                            f"(a batch of fixed size; pass neighbouring=REPLACE_ONE)")
        self._check(block)

    def _check(self, block: Block) -> None:
        """Raise UnsupportedEventError for an allowed ``block`` that is out of this accountant's range."""

    def _non_private(self) -> bool:
        return any(getattr(b, "kind", None) == Mechanism.NON_PRIVATE for b in self._blocks)

    @classmethod
    def calibration_settings(cls, event: ev.DpEvent, epsilon: float, delta: float,
                             settings: dict[str, Any]) -> "CalibrationSettings | None":
        """The settings this accountant tunes to calibrate ``event`` to (``epsilon``, ``delta``)
        given the caller's ``settings`` (its keyword arguments); None: use them as given. The hook
        :func:`silodp.accounting.calibrate` asks instead of switching on names."""
        return None

    @abc.abstractmethod
    def _epsilon(self, delta: float) -> float: ...

    def get_epsilon(self, delta: float | None = None, *, target_delta: float | None = None) -> float:
        """Certified epsilon at ``delta`` for everything composed so far (rounded up)."""
        dl = check_delta("delta", _alias("delta", delta, "target_delta", target_delta))
        if self._non_private():
            return math.inf
        if not self._blocks:
            return 0.0
        return float(self._epsilon(dl))

    def epsilon_floor(self, delta: float) -> float:
        """A lower bound on :meth:`get_epsilon` at ``delta`` for what is composed, much cheaper
        than it (0.0: none known). :func:`silodp.accounting.tightest_epsilon` skips a candidate
        whose floor is above a certificate it already holds: the smaller of the two is then the
        one it holds, so the answer is the same, bit for bit."""
        return 0.0

    def get_delta(self, epsilon: float | None = None, *, target_epsilon: float | None = None) -> float:
        """Certified delta at ``epsilon`` (rounded up); default: invert ``get_epsilon``."""
        eps = check_nonnegative("epsilon", _alias("epsilon", epsilon, "target_epsilon", target_epsilon))
        if self._non_private():
            return 1.0
        if not self._blocks:
            return 0.0
        return self._delta(eps)

    def _delta(self, epsilon: float) -> float:
        """Smallest delta (rounded up) with get_epsilon(delta) <= epsilon, by bisection on -log delta."""
        if self._epsilon(0.5) > epsilon:
            return 1.0
        log_inv = monotone_root(
            lambda x: self._epsilon(math.exp(-x)), epsilon, math.log(2.0), 8.0,
            increasing=True, safe="below", rtol=1e-6, name="log(1/delta)",
        )
        return math.exp(-log_inv)


@dataclasses.dataclass(frozen=True)
class CalibrationSettings:
    """An accountant's own settings for one calibration (:meth:`Accountant.calibration_settings`):
    ``settings`` (keyword arguments), the ``label`` the calibration reports, the finest ``rtol``
    they support, and optionally ``coarse`` settings for a cheaper pre-search whose certificate
    over-estimates the fine one's by about ``coarse_gap``."""

    settings: dict[str, Any]
    label: str
    rtol: float
    coarse: dict[str, Any] | None = None
    coarse_gap: float = 0.0
