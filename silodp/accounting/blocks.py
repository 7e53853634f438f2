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
import sys

from silodp.accounting import events as ev


class UnsupportedEventError(ValueError):
    """An event (or sub-event) that an accountant cannot interpret; the message names it.

    Once dp-accounting is imported, each one raised is also an instance of dp-accounting's
    ``UnsupportedEventError`` (a code that can name that class has imported it), so one ``except``
    catches either library's refusal; silodp itself never imports dp-accounting (a slow import).
    """

    def __new__(cls, *args, **kwargs):
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


class Sampling(enum.Enum):
    """How the records entering one Gaussian step were drawn."""

    NONE = "none"
    POISSON = "poisson"
    WITHOUT_REPLACEMENT = "without-replacement"
    WITH_REPLACEMENT = "with-replacement"


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

    @property
    def subsampled(self) -> bool:
        """Whether amplification by subsampling applies (a proper subsample, or with replacement)."""
        return self.sampling == Sampling.WITH_REPLACEMENT or (self.sampling != Sampling.NONE and self.q < 1)


def _effective_noise_multiplier(event: ev.DpEvent) -> float:
    """A release of several Gaussians at once equals one Gaussian with z = (sum z_i^-2)^-1/2."""
    if type(event) is ev.GaussianDpEvent:
        return float(event.noise_multiplier)
    if type(event) is ev.SelfComposedDpEvent:
        return _effective_noise_multiplier(event.event) / math.sqrt(event.count)
    if type(event) is ev.ComposedDpEvent and event.events:
        return sum(_effective_noise_multiplier(e) ** -2 for e in event.events) ** -0.5
    raise UnsupportedEventError(f"a subsampled event must contain only Gaussian events, found {event}")


def _sampled(event, sampling: Sampling, count: int) -> list[Block]:
    z = _effective_noise_multiplier(event.event)
    if sampling == Sampling.POISSON:
        return [Block(Mechanism.GAUSSIAN, count, z, sampling, q=float(event.sampling_probability))]
    n, m = int(event.source_dataset_size), int(event.sample_size)
    if sampling == Sampling.WITHOUT_REPLACEMENT:
        q = m / n
    else:  # probability that a given record is drawn at least once (multiplicities kept in m, n)
        q = -math.expm1(m * math.log1p(-1.0 / n)) if n > 1 else 1.0
    return [Block(Mechanism.GAUSSIAN, count, z, sampling, q=q, dataset_size=n, sample_size=m)]


def flatten(event: ev.DpEvent, count: int = 1) -> list[Block]:
    """The blocks of ``event`` repeated ``count`` times (adaptive composition).

    dp-accounting's own events are accepted and read as the silodp events of the same name.
    """
    if ev.is_dp_accounting_event(event):
        try:
            event = ev.from_dp_accounting(event)
        except ValueError as exc:
            raise UnsupportedEventError(f"unsupported event: {event} ({exc})") from None
    kind = type(event)
    if kind is ev.NoOpDpEvent:
        return []
    if kind is ev.NonPrivateDpEvent:
        return [Block(Mechanism.NON_PRIVATE, count)]
    if kind is ev.SelfComposedDpEvent:
        return flatten(event.event, count * event.count)
    if kind is ev.ComposedDpEvent:
        return [b for e in event.events for b in flatten(e, count)]
    if kind is ev.ParallelComposedDpEvent:
        return flatten(event.event, count)
    if kind is ev.GaussianDpEvent:
        return [Block(Mechanism.GAUSSIAN, count, noise_multiplier=float(event.noise_multiplier))]
    if kind is ev.PoissonSampledDpEvent:
        return _sampled(event, Sampling.POISSON, count)
    if kind is ev.SampledWithoutReplacementDpEvent:
        return _sampled(event, Sampling.WITHOUT_REPLACEMENT, count)
    if kind is ev.SampledWithReplacementDpEvent:
        return _sampled(event, Sampling.WITH_REPLACEMENT, count)
    if kind is ev.EpsilonDeltaDpEvent:
        return [Block(Mechanism.EPSILON_DELTA, count, epsilon=float(event.epsilon), delta=float(event.delta))]
    if kind is ev.ZCDpEvent:
        if event.xi != 0:
            raise UnsupportedEventError(f"truncated zCDP (xi != 0) is not supported: {event}")
        return [Block(Mechanism.ZCDP, count, rho=float(event.rho))]
    raise UnsupportedEventError(f"unsupported event: {event}")
