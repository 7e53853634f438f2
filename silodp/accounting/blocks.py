"""Flatten an event tree into *blocks*: the one traversal every accountant interprets.

Like dp-accounting's ``supports()``/``compose()`` pair, a single recursive walk both checks that
an event is understood and produces its content. A :class:`Block` is ``count`` identical steps of
one primitive mechanism. Parallel composition collapses here: disjoint releases cost one.

The walk is an allow-list: only the event classes named here (exactly, not subclasses) are
understood; anything else is an :class:`UnsupportedEventError` naming it. Each accountant then
allow-lists the (mechanism, sampling) pairs it certifies (``Accountant.certifies``).
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import math
import operator
import sys
from collections.abc import Callable
from typing import Any, cast

from silodp.accounting import events as ev


class UnsupportedEventError(ValueError):
    """An event (or sub-event) that an accountant cannot interpret; the message names it.

    Once dp-accounting is imported, each one raised is also an instance of dp-accounting's
    ``UnsupportedEventError`` (a code that can name that class has imported it), so one ``except``
    catches either library's refusal; silodp itself never imports dp-accounting (a slow import).
    """

    def __new__(cls, *args: Any, **kwargs: Any) -> "UnsupportedEventError":
        theirs = sys.modules.get("dp_accounting.privacy_accountant")
        if cls is UnsupportedEventError and theirs is not None:
            cls = _compatible(theirs.UnsupportedEventError)
        return super().__new__(cls, *args, **kwargs)


@functools.cache
def _compatible(theirs: type) -> type:
    """silodp's error as a subclass of dp-accounting's as well."""
    return type("UnsupportedEventError", (UnsupportedEventError, theirs), {"__module__": __name__})


class Mechanism(enum.Enum):
    """The primitive mechanisms a block can hold."""

    GAUSSIAN = "gaussian"
    EPSILON_DELTA = "epsilon-delta"
    ZCDP = "zcdp"
    NON_PRIVATE = "non-private"
    LAPLACE = "laplace"
    DISCRETE_LAPLACE = "discrete-laplace"
    RANDOMIZED_RESPONSE = "randomized-response"
    DISCRETE_GAUSSIAN = "discrete-gaussian"
    #: ``count`` balls-in-bins epochs of ``sample_size`` Gaussian steps (:mod:`silodp.accounting.allocation`)
    BALLS_IN_BINS = "balls-in-bins"
    #: ``count`` truncated Poisson-subsampled Gaussian steps (q, n, and the cap in ``sample_size``)
    TRUNCATED_POISSON = "truncated-poisson-gaussian"


class Sampling(enum.Enum):
    """How the records entering one Gaussian step were drawn."""

    NONE = "none"
    POISSON = "poisson"
    WITHOUT_REPLACEMENT = "without-replacement"
    WITH_REPLACEMENT = "with-replacement"
    #: a named sampling of :func:`silodp.accounting.releases.sampled_steps` (``--sampling``); its
    #: blocks are :attr:`Mechanism.BALLS_IN_BINS` epochs, never Gaussian steps
    BALLS_IN_BINS = "balls-in-bins"


#: Gaussian steps with more noise than this are certified as if they had this much: sound (less
#: noise certifies a larger epsilon), and their epsilon is at every accountant's floor anyway,
#: while the accountants' arithmetic (z^2, and the subsampled RDP series) breaks down beyond.
NOISE_CAP = 1e6
#: Gaussian steps with less noise than this are refused (epsilon > 1e8; 1/z^2 overflows).
NOISE_FLOOR = 1e-4


@dataclasses.dataclass(frozen=True)
class Block:
    """``count`` steps of one primitive mechanism.

    ``noise_multiplier`` is sigma / C (C the per-record contribution bound) under every relation;
    ``q`` the sampling probability (with replacement: that a given record is drawn at least once).
    """

    kind: Mechanism
    count: int
    noise_multiplier: float = math.inf
    sampling: Sampling = Sampling.NONE
    q: float = 1.0
    dataset_size: int = 0
    sample_size: int = 0
    epsilon: float = 0.0
    delta: float = 0.0
    rho: float = 0.0
    #: the parameters of the other mechanisms: (a, sensitivity) of a discrete Laplace, (sigma,
    #: sensitivity) of a discrete Gaussian, (p, k) of randomized response (:mod:`silodp.accounting.mechanisms`)
    params: tuple[Any, ...] = ()

    def __post_init__(self) -> None:
        if self.kind in (Mechanism.GAUSSIAN, Mechanism.BALLS_IN_BINS, Mechanism.TRUNCATED_POISSON):
            if not self.noise_multiplier >= NOISE_FLOOR:
                raise UnsupportedEventError(f"noise_multiplier: must be >= {NOISE_FLOOR:g} (epsilon would exceed "
                                            f"1e8), got {self.noise_multiplier:g}")
            object.__setattr__(self, "noise_multiplier", min(float(self.noise_multiplier), NOISE_CAP))

    @property
    def subsampled(self) -> bool:
        """Whether amplification by subsampling applies (a proper subsample, or with replacement)."""
        return self.sampling == Sampling.WITH_REPLACEMENT or (self.sampling != Sampling.NONE and self.q < 1)


def _effective_noise_multiplier(event: ev.DpEvent) -> float:
    """A release of several Gaussians at once equals one Gaussian with z = (sum z_i^-2)^-1/2."""
    if type(event) is ev.GaussianDpEvent:  # within [1e-150, NOISE_CAP]: z^-2 stays finite (the cap is sound)
        if event.noise_multiplier < 1e-150:
            raise UnsupportedEventError(f"noise_multiplier: must be >= {NOISE_FLOOR:g}, got {event.noise_multiplier:g}")
        return min(float(event.noise_multiplier), NOISE_CAP)
    if type(event) is ev.SelfComposedDpEvent:
        return _effective_noise_multiplier(event.event) / math.sqrt(event.count)
    if type(event) is ev.ComposedDpEvent and event.events:
        return sum(_effective_noise_multiplier(e) ** -2 for e in event.events) ** -0.5
    raise UnsupportedEventError(f"a subsampled event must contain only Gaussian events, found {event}")


def _sampled(event: ev.PoissonSampledDpEvent | ev.SampledWithoutReplacementDpEvent | ev.SampledWithReplacementDpEvent,
             sampling: Sampling, count: int) -> list[Block]:
    z = _effective_noise_multiplier(event.event)
    if isinstance(event, ev.PoissonSampledDpEvent):  # sampling POISSON
        return [Block(Mechanism.GAUSSIAN, count, z, sampling, q=float(event.sampling_probability))]
    n, m = int(event.source_dataset_size), int(event.sample_size)
    if sampling == Sampling.WITHOUT_REPLACEMENT:
        q = m / n
    else:  # probability that a given record is drawn at least once (multiplicities kept in m, n)
        q = -math.expm1(m * math.log1p(-1.0 / n)) if n > 1 else 1.0
    return [Block(Mechanism.GAUSSIAN, count, z, sampling, q=q, dataset_size=n, sample_size=m)]


Leaf = Callable[[ev.DpEvent, int], list[Any]]
#: The ``leaf`` functions whose items :func:`flatten` may keep (:func:`memoized_leaf`).
_MEMO_LEAVES: set[Leaf] = set()
#: Most (count, leaf) entries :func:`flatten` keeps per event object.
_MEMO_SIZE = 8


def memoized_leaf(leaf: Leaf) -> Leaf:
    """Decorator: ``leaf`` (a module-level function of the event and count alone) may have its
    items kept by :func:`flatten`, as the default leaf's are."""
    _MEMO_LEAVES.add(leaf)
    return leaf


def flatten(event: ev.DpEvent, count: int = 1, leaf: Leaf | None = None) -> list[Any]:
    """The blocks of ``event`` repeated ``count`` times (adaptive composition).

    dp-accounting's own events are accepted and read as the silodp events of the same name.
    ``leaf(event, count)``: the items of every event that is not a composition (NoOp, non-private,
    self-, parallel or sequential composition), for an accountant of other primitives (the
    ``pvec`` ones); default: the blocks of the primitive mechanisms below.

    Kept: the items of a silodp event (frozen) are kept on the event object (default and
    :func:`memoized_leaf` leaves), each entry only after every event below was validated
    (:func:`~silodp.accounting.events.revalidate`), and reused only while all of them still carry
    the very stamps of those checks (:func:`~silodp.accounting.events.checked_signature`): an event
    with a field set since, anywhere below, is walked and checked again, so the walk stays exactly
    as strict; the candidate search and every accountant asked about one event walk it once.
    """
    if ev.is_dp_accounting_event(event):
        try:
            event = ev.from_dp_accounting(event)
        except ValueError as exc:
            raise UnsupportedEventError(f"unsupported event: {event} ({exc})") from None
    keep = isinstance(event, ev.DpEvent) and (leaf is None or leaf in _MEMO_LEAVES)
    if keep:
        memo = event.__dict__.get(ev.BLOCKS_MEMO)
        found = None if memo is None else memo.get((count, leaf))
        if found is not None:
            signature = ev.checked_signature(event)
            if signature is not None and len(signature) == len(found[0]) and all(map(operator.is_, signature, found[0])):
                return list(found[1])
    items = _walk(event, count, leaf)
    if keep:
        memo = event.__dict__.setdefault(ev.BLOCKS_MEMO, {})
        signature = ev.checked_signature(event)  # every event below was just checked: not None
        if signature is not None and (len(memo) < _MEMO_SIZE or (count, leaf) in memo):
            memo[(count, leaf)] = (signature, tuple(items))
    return items


def _walk(event: ev.DpEvent, count: int, leaf: Leaf | None) -> list[Any]:
    """:func:`flatten`'s walk: validate ``event`` and every event below it (silodp events: their own
    checks refuse anything else) and read their items."""
    ev.revalidate(event)
    if type(event) is ev.NoOpDpEvent:
        return []
    if type(event) is ev.NonPrivateDpEvent:
        return [Block(Mechanism.NON_PRIVATE, count)]
    if type(event) is ev.SelfComposedDpEvent:
        return _walk(event.event, count * event.count, leaf)
    if type(event) is ev.ComposedDpEvent:
        return [b for e in event.events for b in _walk(e, count, leaf)]
    if type(event) is ev.ParallelComposedDpEvent:
        return _walk(event.event, count, leaf)
    if leaf is not None:
        return leaf(event, count)
    if type(event) is ev.GaussianDpEvent:
        return [Block(Mechanism.GAUSSIAN, count, noise_multiplier=float(event.noise_multiplier))]
    if type(event) is ev.PoissonSampledDpEvent:
        return _sampled(event, Sampling.POISSON, count)
    if type(event) is ev.SampledWithoutReplacementDpEvent:
        return _sampled(event, Sampling.WITHOUT_REPLACEMENT, count)
    if type(event) is ev.SampledWithReplacementDpEvent:
        return _sampled(event, Sampling.WITH_REPLACEMENT, count)
    if type(event) is ev.BallsInBinsDpEvent:
        return [Block(Mechanism.BALLS_IN_BINS, count, _effective_noise_multiplier(event.event),
                      sample_size=int(event.batches))]
    if type(event) is ev.TruncatedSubsampledGaussianDpEvent:
        return [Block(Mechanism.TRUNCATED_POISSON, count, float(event.noise_multiplier),
                      q=float(event.sampling_probability), dataset_size=int(event.dataset_size),
                      sample_size=int(event.truncated_batch_size))]
    if type(event) is ev.EpsilonDeltaDpEvent:
        return [Block(Mechanism.EPSILON_DELTA, count, epsilon=float(event.epsilon), delta=float(event.delta))]
    if type(event) is ev.LaplaceDpEvent:
        return [Block(Mechanism.LAPLACE, count, noise_multiplier=float(event.noise_multiplier))]
    if type(event) is ev.DiscreteLaplaceDpEvent:
        return [Block(Mechanism.DISCRETE_LAPLACE, count, params=(float(event.noise_parameter), int(event.sensitivity)))]
    if type(event) is ev.DiscreteGaussianDpEvent:
        return [Block(Mechanism.DISCRETE_GAUSSIAN, count, params=(float(event.sigma), int(event.sensitivity)))]
    if type(event) is ev.RandomizedResponseDpEvent:
        return [Block(Mechanism.RANDOMIZED_RESPONSE, count,
                      params=(float(event.noise_parameter), int(event.num_buckets)))]
    if type(event) is ev.ZCDpEvent:
        if event.xi != 0:
            raise UnsupportedEventError(f"truncated zCDP (xi != 0) is not supported: {event}")
        return [Block(Mechanism.ZCDP, count, rho=float(event.rho))]
    from silodp.accounting import distributed  # distributed sums (Skellam, discrete Gaussian) are zCDP

    if type(event) in distributed.EVENTS:
        return flatten(cast(distributed.DistributedSumEvent, event).zcdp_event(), count)
    raise UnsupportedEventError(f"unsupported event: {event}")
