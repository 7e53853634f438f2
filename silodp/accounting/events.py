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

Units. A ``GaussianDpEvent(noise_multiplier)`` releases a sum with noise of standard deviation
``noise_multiplier * sensitivity``, where *sensitivity* is the l2-sensitivity under the
accountant's neighbouring relation. silodp's default relation is ``REPLACE_ONE`` (ISRL-DP:
one record of one silo replaced), under which a sum of per-record contributions clipped to norm C
has sensitivity 2C (and an average of K of them 2C/K). For subsampled events the multiplier is
relative to the same replace-one sensitivity 2C.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any, Sequence


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
    if name in NeighboringRelation.__members__:
        return NeighboringRelation[name]
    raise ValueError(f"neighbouring must be REPLACE_ONE or ADD_OR_REMOVE_ONE, got {value}")


_event = dataclasses.dataclass(frozen=True)


@_event
class DpEvent:
    """Base class of every event."""


@_event
class NoOpDpEvent(DpEvent):
    """Nothing is released."""


@_event
class NonPrivateDpEvent(DpEvent):
    """Something is released with no privacy guarantee."""


@_event
class GaussianDpEvent(DpEvent):
    """A sum released with Gaussian noise of std ``noise_multiplier * sensitivity``."""

    noise_multiplier: float


@_event
class ZCDpEvent(DpEvent):
    """A (xi, rho)-zCDP mechanism: (alpha, xi + rho alpha)-RDP for every alpha > 1."""

    rho: float
    xi: float = 0.0


@_event
class SelfComposedDpEvent(DpEvent):
    """``event`` run ``count`` times (adaptive composition)."""

    event: DpEvent
    count: int


@_event
class ComposedDpEvent(DpEvent):
    """Each of ``events`` run once, in order (adaptive composition)."""

    events: Sequence[DpEvent]

    def __post_init__(self) -> None:
        object.__setattr__(self, "events", tuple(self.events))


@_event
class PoissonSampledDpEvent(DpEvent):
    """``event`` applied to a Poisson sample: each record kept independently w.p. ``sampling_probability``."""

    sampling_probability: float
    event: DpEvent


@_event
class SampledWithoutReplacementDpEvent(DpEvent):
    """``event`` applied to ``sample_size`` distinct records drawn uniformly from ``source_dataset_size``."""

    source_dataset_size: int
    sample_size: int
    event: DpEvent


@_event
class SampledWithReplacementDpEvent(DpEvent):
    """``event`` applied to ``sample_size`` indices drawn uniformly with replacement."""

    source_dataset_size: int
    sample_size: int
    event: DpEvent


@_event
class ParallelComposedDpEvent(DpEvent):
    """``count`` copies of ``event`` run on disjoint parts of the dataset (parallel composition)."""

    event: DpEvent
    count: int


@_event
class EpsilonDeltaDpEvent(DpEvent):
    """A mechanism certified only as (epsilon, delta)-DP under the accountant's relation."""

    epsilon: float
    delta: float


#: Events whose class and fields are the same in dp-accounting (by name).
_SHARED = {
    cls.__name__: cls for cls in (
        NoOpDpEvent, NonPrivateDpEvent, GaussianDpEvent, ZCDpEvent, SelfComposedDpEvent, ComposedDpEvent,
        PoissonSampledDpEvent, SampledWithoutReplacementDpEvent, SampledWithReplacementDpEvent,
    )
}


def _convert(event: Any, target: dict[str, type], origin: str) -> Any:
    name = type(event).__name__
    if name not in target:
        raise ValueError(f"event: {name} has no counterpart {origin}")
    fields = {}
    for field in dataclasses.fields(_SHARED[name]):
        value = getattr(event, field.name)
        if field.name == "event":
            value = _convert(value, target, origin)
        elif field.name == "events":
            value = [_convert(e, target, origin) for e in value]
        fields[field.name] = value
    return target[name](**fields)


def from_dp_accounting(event: Any) -> DpEvent:
    """The silodp event equal to a dp-accounting event tree (its names and fields carry over)."""
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
    "ComposedDpEvent",
    "DpEvent",
    "EpsilonDeltaDpEvent",
    "GaussianDpEvent",
    "NeighboringRelation",
    "NoOpDpEvent",
    "NonPrivateDpEvent",
    "ParallelComposedDpEvent",
    "PoissonSampledDpEvent",
    "REPLACE_ONE",
    "SampledWithReplacementDpEvent",
    "SampledWithoutReplacementDpEvent",
    "SelfComposedDpEvent",
    "ZCDpEvent",
    "from_dp_accounting",
    "is_dp_accounting_event",
    "relation",
    "to_dp_accounting",
]
