"""Mechanisms described as data: dp-accounting's ``DpEvent`` vocabulary, plus what it lacks.

The events carry dp-accounting's names and fields (``GaussianDpEvent(noise_multiplier)``,
``SelfComposedDpEvent(event, count)``, ``PoissonSampledDpEvent(sampling_probability, event)``, ...)
so that code written for dp-accounting reads the same here; they are defined in this module (plain
frozen dataclasses) so that describing and accounting a mechanism does not import dp-accounting,
whose package import pulls in most of scipy (about half a second, too slow for the CLI).
:func:`from_dp_accounting` and :func:`to_dp_accounting` convert whole event trees both ways, and
every silodp accountant also accepts dp-accounting's events directly.

Added for the two papers:

* :class:`SampledWithReplacementDpEvent` -- a minibatch of ``sample_size`` indices drawn uniformly
  *with replacement* from ``source_dataset_size`` records (paper Algorithms 1, 3, 11).
* :class:`ParallelComposedDpEvent` -- ``count`` releases on *disjoint* parts of the data
  (parallel composition, McSherry 2009; the privacy of Algorithm 6 in the proof of Thm E.1): a
  record touches at most one of them, so the whole is exactly as private as one.
* :class:`EpsilonDeltaDpEvent` -- a black-box mechanism known only to be (epsilon, delta)-DP, e.g.
  one invocation of the shuffle protocol P_vec under Cheu et al. (2021), paper Thm D.2.
* :class:`PvecDpEvent` -- one invocation of P_vec itself (its levels, trials, messages and
  coordinates), which the ``pvec`` accountants certify exactly.
* :class:`LabelledMixtureDpEvent` -- one of ``events`` run with probability ``weights[i]``, the
  choice independent of the data and released with it (DP-SCAFFOLD's sampling patterns); the
  ``pld`` accountant certifies it exactly (its PLD is the weighted sum), the others refuse it.

Units (as dp-accounting's PLD accountant, Opacus and Flower). A ``GaussianDpEvent(z)`` releases
a sum of per-record contributions, each of l2 norm at most C (the *contribution bound*: the clip
norm, or C/K for an average of K clipped gradients), with Gaussian noise of standard deviation
``z * C``: ``noise_multiplier = sigma / C`` under **every** neighbouring relation. The accountant
applies the relation's sensitivity: C under ``ADD_OR_REMOVE_ONE``, 2C under ``REPLACE_ONE``
(silodp's default: ISRL-DP, one record of one silo replaced). The same event therefore gives the
same epsilon here and in dp-accounting's ``PLDAccountant`` under both relations.

Fail closed. Every event validates its fields on construction (integer counts >= 1, rho >= 0,
probabilities in (0, 1], finite noise multipliers > 0, sizes 1 <= sample <= dataset): a malformed
event raises a ``ValueError`` naming the field and is never certified. "No noise" is the explicit
:class:`NonPrivateDpEvent`, never a multiplier of 0 or inf.
"""

from __future__ import annotations

import dataclasses
import enum
import math
import operator
from numbers import Integral, Real
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Sequence, TypeVar, dataclass_transform


class NeighboringRelation(enum.Enum):
    """Which datasets are neighbours (dp-accounting's names)."""

    ADD_OR_REMOVE_ONE = 1
    REPLACE_ONE = 2


#: ISRL-DP (paper Definition 4) is record-level DP within one silo under replacement.
REPLACE_ONE = NeighboringRelation.REPLACE_ONE
ADD_OR_REMOVE_ONE = NeighboringRelation.ADD_OR_REMOVE_ONE


def relation(value: Any) -> NeighboringRelation:
    """``value`` as a :class:`NeighboringRelation`; dp-accounting's enum is accepted by name."""
    name = getattr(value, "name", None)
    if isinstance(value, NeighboringRelation):
        return value
    if isinstance(name, str) and name in NeighboringRelation.__members__:
        return NeighboringRelation[name]
    raise ValueError(f"neighbouring: must be REPLACE_ONE or ADD_OR_REMOVE_ONE, got {value}")


def sensitivity(value: Any) -> float:
    """l2-sensitivity of a sum of contributions of norm <= C, in units of C: 1 under add/remove
    (one contribution appears or disappears), 2 under replace-one (one moves anywhere in the ball)."""
    return 2.0 if relation(value) == NeighboringRelation.REPLACE_ONE else 1.0


_T = TypeVar("_T")


@dataclass_transform(frozen_default=True)
def _event(cls: type[_T]) -> type[_T]:
    """A frozen dataclass (spelled so that type checkers see its fields) whose checks, run when it
    is made (``__post_init__``), leave the stamp that :func:`revalidate` reads: an event is checked
    when made and again only once a field has been set since."""
    out = dataclasses.dataclass(frozen=True)(cls)
    check = out.__dict__.get("__post_init__")
    if check is not None:
        def checked(self: Any) -> None:
            check(self)
            if type(self).__post_init__ is checked:  # the whole check ran (not a subclass's super() call)
                self.__dict__[_CHECKED] = _values(self)

        checked.__doc__, checked.__qualname__ = check.__doc__, check.__qualname__
        out.__post_init__ = checked  # type: ignore[attr-defined]
    return out


def _field(event: object, name: str) -> str:
    return f"{type(event).__name__}.{name}"


def _count(event: object, name: str, minimum: int = 1) -> None:
    value = getattr(event, name)
    if isinstance(value, bool) or not isinstance(value, Integral) or value < minimum:
        raise ValueError(f"{_field(event, name)}: must be an integer >= {minimum}, got {value!r}")
    object.__setattr__(event, name, int(value))


def _real(event: object, name: str, low: float, high: float, low_open: bool, high_open: bool) -> None:
    value = getattr(event, name)
    ok = not isinstance(value, bool) and isinstance(value, Real) and not math.isnan(float(value))
    if ok:
        x = float(value)
        ok = (x > low if low_open else x >= low) and (x < high if high_open else x <= high)
    if not ok:
        lo, hi = "(" if low_open else "[", ")" if high_open else "]"
        raise ValueError(f"{_field(event, name)}: must lie in {lo}{low:g}, {high:g}{hi}, got {value!r}")
    object.__setattr__(event, name, float(value))


def _child(event: object, name: str = "event") -> None:
    value = getattr(event, name)
    if not isinstance(value, DpEvent):
        raise ValueError(f"{_field(event, name)}: must be a silodp DpEvent, got {type(value).__name__}")


#: The private ``__dict__`` entry (never a field) holding the field values an event had when it was
#: last validated, the very objects (:func:`revalidate`, :func:`checked_signature`).
_CHECKED = "_silodp_checked"
#: The private ``__dict__`` entry of :func:`silodp.accounting.blocks.flatten`'s blocks of an event.
BLOCKS_MEMO = "_silodp_blocks"


@_event
class DpEvent:
    """Base class of every event."""

    def __getstate__(self) -> dict[str, Any]:
        """The fields (the validation stamp and the memo of blocks are caches: not pickled or copied)."""
        return {k: v for k, v in self.__dict__.items() if k not in (_CHECKED, BLOCKS_MEMO)}


_FIELD_NAMES: dict[type, tuple[str, ...]] = {}


def _values(event: DpEvent) -> tuple[Any, ...]:
    names = _FIELD_NAMES.get(type(event))
    if names is None:
        names = _FIELD_NAMES[type(event)] = tuple(f.name for f in dataclasses.fields(event))
    state = event.__dict__
    return tuple(state[name] for name in names)


def _stamp_holds(event: DpEvent) -> bool:
    stamp = event.__dict__.get(_CHECKED)
    if stamp is None:
        return False
    values = _values(event)
    return len(stamp) == len(values) and all(map(operator.is_, stamp, values))


def revalidate(event: object) -> None:
    """Re-run ``event``'s own field checks (not its children's). Events are frozen, but
    ``object.__setattr__`` can still change a field after construction; accountants call this
    for every event they compose (:func:`silodp.accounting.blocks.flatten`), so a mutated event is
    refused (ValueError naming the field), never certified.

    The checks are skipped where every field still holds the very object it held after the last
    check that passed (the checks are pure functions of the fields, and leave them as they found
    them once normalized), so this is exactly as strict as checking again; any field set since,
    even to an equal value, is checked."""
    if not isinstance(event, DpEvent) or _stamp_holds(event):
        return
    check = getattr(type(event), "__post_init__", None)
    if check is not None:
        check(event)
    event.__dict__[_CHECKED] = _values(event)


def checked_signature(event: DpEvent) -> tuple[Any, ...] | None:
    """The stamps :func:`revalidate` left on ``event`` and every event below it (each a fresh
    object per check that passed), or None where any of them has had a field set since its check.
    Whatever was derived from an event after those checks (:func:`silodp.accounting.blocks.flatten`'s
    memo) still holds while its signature is the same objects: nothing below was set or re-checked."""
    if not _stamp_holds(event):
        return None
    stamp = event.__dict__[_CHECKED]
    out = [stamp]
    for value in stamp:
        for child in (value if type(value) is tuple else (value,)):
            if isinstance(child, DpEvent):
                below = checked_signature(child)
                if below is None:
                    return None
                out.extend(below)
    return tuple(out)


@_event
class NoOpDpEvent(DpEvent):
    """Nothing is released."""


@_event
class NonPrivateDpEvent(DpEvent):
    """Something is released with no privacy guarantee."""


@_event
class GaussianDpEvent(DpEvent):
    """A sum of contributions of l2 norm <= C released with Gaussian noise of standard deviation
    sigma = ``noise_multiplier`` * C (under every relation; the accountant applies its sensitivity)."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        _real(self, "noise_multiplier", 0.0, math.inf, True, True)


@_event
class ZCDpEvent(DpEvent):
    """A (xi, rho)-zCDP mechanism: (alpha, xi + rho alpha)-RDP for every alpha > 1."""

    rho: float
    xi: float = 0.0

    def __post_init__(self) -> None:
        _real(self, "rho", 0.0, math.inf, False, True)
        _real(self, "xi", 0.0, math.inf, False, True)


@_event
class SelfComposedDpEvent(DpEvent):
    """``event`` run ``count`` times (adaptive composition)."""

    event: DpEvent
    count: int

    def __post_init__(self) -> None:
        _child(self)
        _count(self, "count")


@_event
class ComposedDpEvent(DpEvent):
    """Each of ``events`` run once, in order (adaptive composition)."""

    events: Sequence[DpEvent]

    def __post_init__(self) -> None:
        if isinstance(self.events, (str, bytes)) or not hasattr(self.events, "__iter__"):
            raise ValueError(f"ComposedDpEvent.events: must be a sequence of events, got {self.events!r}")
        object.__setattr__(self, "events", tuple(self.events))
        for e in self.events:
            if not isinstance(e, DpEvent):
                raise ValueError(f"ComposedDpEvent.events: must hold silodp DpEvents, got {type(e).__name__}")


@_event
class PoissonSampledDpEvent(DpEvent):
    """``event`` applied to a Poisson sample: each record kept independently w.p. ``sampling_probability``."""

    sampling_probability: float
    event: DpEvent

    def __post_init__(self) -> None:
        _real(self, "sampling_probability", 0.0, 1.0, True, False)
        _child(self)


@_event
class _FixedSizeSampledDpEvent(DpEvent):
    """``event`` applied to ``sample_size`` records drawn uniformly from ``source_dataset_size``
    (the fields and checks of dp-accounting's two fixed-size samplings, defined once; the
    subclass says how the records are drawn)."""

    source_dataset_size: int
    sample_size: int
    event: DpEvent
    #: whether an index may be drawn more than once
    replacement: ClassVar[bool] = False

    def __post_init__(self) -> None:
        _count(self, "source_dataset_size")
        _count(self, "sample_size")
        if not self.replacement and self.sample_size > self.source_dataset_size:
            raise ValueError(f"{_field(self, 'sample_size')}: must be <= source_dataset_size, "
                             f"got {self.sample_size} > {self.source_dataset_size}")
        _child(self)


@_event
class SampledWithoutReplacementDpEvent(_FixedSizeSampledDpEvent):
    """``event`` applied to ``sample_size`` distinct records drawn uniformly from ``source_dataset_size``."""


@_event
class SampledWithReplacementDpEvent(_FixedSizeSampledDpEvent):
    """``event`` applied to ``sample_size`` indices drawn uniformly with replacement."""

    replacement: ClassVar[bool] = True


@_event
class ParallelComposedDpEvent(DpEvent):
    """``count`` copies of ``event`` run on disjoint parts of the dataset (parallel composition)."""

    event: DpEvent
    count: int

    def __post_init__(self) -> None:
        _child(self)
        _count(self, "count")


@_event
class TruncatedSubsampledGaussianDpEvent(DpEvent):
    """A Gaussian sum (std ``noise_multiplier`` C) over a Poisson sample of ``dataset_size`` records
    at ``sampling_probability``, cut to a uniform subset of ``truncated_batch_size`` when larger
    (dp-accounting's event of the same name and fields; arXiv 2508.15089)."""

    dataset_size: int
    sampling_probability: float
    truncated_batch_size: int
    noise_multiplier: float

    def __post_init__(self) -> None:
        _count(self, "dataset_size")
        _real(self, "sampling_probability", 0.0, 1.0, True, False)
        _count(self, "truncated_batch_size")
        _real(self, "noise_multiplier", 0.0, math.inf, True, True)


@_event
class BallsInBinsDpEvent(DpEvent):
    """One epoch of ``batches`` steps of ``event`` (a Gaussian), each record in exactly one batch,
    chosen uniformly and independently of the other records (balls-in-bins / random allocation;
    :mod:`silodp.accounting.allocation`)."""

    batches: int
    event: DpEvent

    def __post_init__(self) -> None:
        _count(self, "batches")
        _child(self)


@_event
class EpsilonDeltaDpEvent(DpEvent):
    """A mechanism certified only as (epsilon, delta)-DP under the accountant's relation."""

    epsilon: float
    delta: float

    def __post_init__(self) -> None:
        _real(self, "epsilon", 0.0, math.inf, False, True)
        _real(self, "delta", 0.0, 1.0, False, True)


@_event
class LaplaceDpEvent(DpEvent):
    """A sum released with Laplace noise of scale ``noise_multiplier * C`` (C: the l1 bound of one
    record's contribution; as dp-accounting's ``LaplaceDpEvent``)."""

    noise_multiplier: float

    def __post_init__(self) -> None:
        _real(self, "noise_multiplier", 0.0, math.inf, True, True)


@_event
class DiscreteLaplaceDpEvent(DpEvent):
    """An integer sum released with discrete Laplace noise P(x) ~ e^{-a |x|}, a = ``noise_parameter``;
    ``sensitivity`` is the integer l1 bound of one record's contribution (as dp-accounting)."""

    noise_parameter: float
    sensitivity: int

    def __post_init__(self) -> None:
        _real(self, "noise_parameter", 0.0, math.inf, True, True)
        _count(self, "sensitivity")


@_event
class DiscreteGaussianDpEvent(DpEvent):
    """An integer sum released with discrete Gaussian noise P(x) ~ e^{-x^2 / (2 sigma^2)};
    ``sensitivity`` is the integer l2 bound of one record's contribution (as dp-accounting's
    ``from_discrete_gaussian_mechanism``; its dp_event module has no such event)."""

    sigma: float
    sensitivity: int

    def __post_init__(self) -> None:
        _real(self, "sigma", 0.0, math.inf, True, True)
        _count(self, "sensitivity")


@_event
class RandomizedResponseDpEvent(DpEvent):
    """k-ary randomized response: the true bucket w.p. 1 - p, else a uniform one of the
    ``num_buckets`` (p = ``noise_parameter``; as dp-accounting). Defined under replace-one."""

    noise_parameter: float
    num_buckets: int

    def __post_init__(self) -> None:
        _real(self, "noise_parameter", 0.0, 1.0, True, False)
        _count(self, "num_buckets", 2)


@_event
class PvecDpEvent(DpEvent):
    """One invocation of the binomial vector-summation protocol P_vec at p = 1/2 (paper Alg 4-5,
    Thm D.2; Cheu, Joseph, Mao & Peng 2021): per coordinate of ``dimension``, the sum of at least
    ``messages`` messages' levels in {0, ..., ``levels``} plus Bin(``messages`` * ``trials``, 1/2)
    noise. Replacing one record moves its message's levels by at most ``levels`` per coordinate
    and, when ``l2_shift`` is given, by at most ``l2_shift`` in l2 (None: no l2 bound). Certified
    by the ``pvec`` accountants only (:class:`silodp.accounting.accountants.PvecAccountant`);
    wrapped in :class:`SampledWithReplacementDpEvent` when a record may enter it several times."""

    levels: int
    trials: int
    messages: int
    dimension: int
    l2_shift: float | None = None

    def __post_init__(self) -> None:
        for name in ("levels", "trials", "messages", "dimension"):
            _count(self, name)
        if self.l2_shift is not None:
            _real(self, "l2_shift", 0.0, math.inf, True, True)



@_event
class LabelledMixtureDpEvent(DpEvent):
    """With probability ``weights[i]`` run ``events[i]``; which one ran is drawn independently of
    the data and is part of the release (a *labelled* mixture, e.g. a round of DP-SCAFFOLD whose
    user-sampling pattern the server knows). Its hockey-stick divergence is the ``weights``-average
    of the components' (the view is the label, then that component's output), so its privacy loss
    distribution is exactly the weighted sum of theirs (Noble et al. 2022, participation mixture;
    :func:`silodp.accounting.pld.mixture`). ``weights``: >= 0, summing to 1 (to 1e-9); a
    component that releases nothing is :class:`NoOpDpEvent`."""

    weights: Sequence[float]
    events: Sequence[DpEvent]

    def __post_init__(self) -> None:
        for name in ("weights", "events"):
            value = getattr(self, name)
            if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
                raise ValueError(f"{_field(self, name)}: must be a sequence, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        if not self.events or len(self.weights) != len(self.events):
            raise ValueError(f"{_field(self, 'weights')}: must give one weight to each of at least one event, "
                             f"got {len(self.weights)} weights for {len(self.events)} events")
        for e in self.events:
            if not isinstance(e, DpEvent):
                raise ValueError(f"{_field(self, 'events')}: must hold silodp DpEvents, got {type(e).__name__}")
        for w in self.weights:
            if isinstance(w, bool) or not isinstance(w, Real) or not 0.0 <= float(w) <= 1.0:
                raise ValueError(f"{_field(self, 'weights')}: each must lie in [0, 1], got {w!r}")
        object.__setattr__(self, "weights", tuple(float(w) for w in self.weights))
        if not math.isclose(math.fsum(self.weights), 1.0, rel_tol=1e-9):
            raise ValueError(f"{_field(self, 'weights')}: must sum to 1, got {math.fsum(self.weights)!r}")

#: Events whose class and fields are the same in dp-accounting (by name).
_SHARED = {
    cls.__name__: cls for cls in (
        NoOpDpEvent, NonPrivateDpEvent, GaussianDpEvent, ZCDpEvent, SelfComposedDpEvent, ComposedDpEvent,
        PoissonSampledDpEvent, SampledWithoutReplacementDpEvent, SampledWithReplacementDpEvent,
        LaplaceDpEvent, DiscreteLaplaceDpEvent, RandomizedResponseDpEvent, TruncatedSubsampledGaussianDpEvent,
    )
}


def _convert(event: Any, target: Mapping[str, type[Any]], origin: str,
             child: Callable[[Any], Any] | None = None) -> Any:
    name = type(event).__name__
    if name not in target:
        raise ValueError(f"event: {name} has no counterpart {origin}")
    child = child or (lambda e: _convert(e, target, origin))
    fields = {}
    for field in dataclasses.fields(_SHARED[name]):
        value = getattr(event, field.name)
        if field.name == "event":
            value = child(value)
        elif field.name == "events":
            value = [child(e) for e in value]
        fields[field.name] = value
    return target[name](**fields)


def from_dp_accounting(event: Any) -> DpEvent:
    """The silodp event equal to a dp-accounting event tree (its names and fields carry over).

    dp-accounting's conventions for degenerate values become explicit events: a Gaussian with
    noise multiplier 0 is :class:`NonPrivateDpEvent`, sampling with probability 0 (or a sample
    of size 0) releases nothing (:class:`NoOpDpEvent`). Anything else malformed is refused.
    """
    name = type(event).__name__
    if name in ("GaussianDpEvent", "LaplaceDpEvent") and getattr(event, "noise_multiplier", None) == 0:
        return NonPrivateDpEvent()
    if name in ("DiscreteLaplaceDpEvent", "RandomizedResponseDpEvent") and getattr(event, "noise_parameter", None) == 0:
        return NonPrivateDpEvent()
    if name == "RandomizedResponseDpEvent" and getattr(event, "num_buckets", None) == 1:
        return NoOpDpEvent()  # one bucket: the output says nothing
    if name == "PoissonSampledDpEvent" and getattr(event, "sampling_probability", None) == 0:
        return NoOpDpEvent()
    if name == "TruncatedSubsampledGaussianDpEvent":  # dp-accounting's degenerate values
        if 0 in (event.sampling_probability, event.truncated_batch_size, event.dataset_size):
            return NoOpDpEvent()
        if event.noise_multiplier == 0:
            return NonPrivateDpEvent()
    if name in ("SampledWithoutReplacementDpEvent", "SampledWithReplacementDpEvent") \
            and getattr(event, "sample_size", None) == 0:
        return NoOpDpEvent()
    if name in ("SelfComposedDpEvent", "ComposedDpEvent", "PoissonSampledDpEvent",
                "SampledWithoutReplacementDpEvent", "SampledWithReplacementDpEvent"):
        return _convert(event, _SHARED, "in silodp", from_dp_accounting)
    return _convert(event, _SHARED, "in silodp")


def to_dp_accounting(event: DpEvent) -> Any:
    """The dp-accounting event equal to ``event``, to cross-check silodp against dp-accounting.

    ``ParallelComposedDpEvent`` and ``EpsilonDeltaDpEvent`` have no dp-accounting counterpart.
    """
    from dp_accounting import dp_event  # imported here: dp-accounting's package import is slow

    return _convert(event, {name: getattr(dp_event, name) for name in _SHARED}, "in dp-accounting")


def is_dp_accounting_event(event: Any) -> bool:
    """Whether ``event`` is one of dp-accounting's own event objects."""
    return type(event).__module__.startswith("dp_accounting")


__all__ = [
    "ADD_OR_REMOVE_ONE",
    "BallsInBinsDpEvent",
    "ComposedDpEvent",
    "DiscreteGaussianDpEvent",
    "DiscreteLaplaceDpEvent",
    "DpEvent",
    "EpsilonDeltaDpEvent",
    "GaussianDpEvent",
    "LaplaceDpEvent",
    "NeighboringRelation",
    "NoOpDpEvent",
    "NonPrivateDpEvent",
    "ParallelComposedDpEvent",
    "PoissonSampledDpEvent",
    "PvecDpEvent",
    "LabelledMixtureDpEvent",
    "REPLACE_ONE",
    "RandomizedResponseDpEvent",
    "SampledWithReplacementDpEvent",
    "SampledWithoutReplacementDpEvent",
    "SelfComposedDpEvent",
    "TruncatedSubsampledGaussianDpEvent",
    "ZCDpEvent",
    "from_dp_accounting",
    "is_dp_accounting_event",
    "relation",
    "sensitivity",
    "to_dp_accounting",
]
