"""Mechanisms described as data: dp-accounting's ``DpEvent`` vocabulary plus what it lacks.

silodp reuses dp-accounting's events (``GaussianDpEvent``, ``SelfComposedDpEvent``,
``ComposedDpEvent``, ``PoissonSampledDpEvent``, ``SampledWithoutReplacementDpEvent``, ...) and adds
the ones the two papers need:

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

import attr
from dp_accounting import dp_event
from dp_accounting.dp_event import (
    ComposedDpEvent,
    DpEvent,
    GaussianDpEvent,
    NonPrivateDpEvent,
    NoOpDpEvent,
    PoissonSampledDpEvent,
    SampledWithoutReplacementDpEvent,
    SelfComposedDpEvent,
    ZCDpEvent,
)
from dp_accounting.privacy_accountant import NeighboringRelation

#: ISRL-DP (paper Definition 4) is record-level DP within one silo under replacement.
REPLACE_ONE = NeighboringRelation.REPLACE_ONE
ADD_OR_REMOVE_ONE = NeighboringRelation.ADD_OR_REMOVE_ONE


@attr.define(frozen=True)
class SampledWithReplacementDpEvent(dp_event.DpEvent):
    """``event`` applied to ``sample_size`` indices drawn uniformly with replacement."""

    source_dataset_size: int
    sample_size: int
    event: DpEvent


@attr.define(frozen=True)
class ParallelComposedDpEvent(dp_event.DpEvent):
    """``count`` copies of ``event`` run on disjoint parts of the dataset (parallel composition)."""

    event: DpEvent
    count: int


@attr.define(frozen=True)
class EpsilonDeltaDpEvent(dp_event.DpEvent):
    """A mechanism certified only as (epsilon, delta)-DP under the accountant's relation."""

    epsilon: float
    delta: float


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
]
