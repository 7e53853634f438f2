"""Flatten an event tree into *blocks*: the one traversal every accountant interprets.

Like dp-accounting's ``supports()``/``compose()`` pair, a single recursive walk both checks that
an event is understood and produces its content. A :class:`Block` is ``count`` identical steps of
one primitive mechanism. Parallel composition collapses here: disjoint releases cost one.
"""

from __future__ import annotations

import dataclasses
import math

from silodp.accounting import events as ev


class UnsupportedEventError(ValueError):
    """An event (or sub-event) that an accountant cannot interpret; the message names it."""


@dataclasses.dataclass(frozen=True)
class Block:
    """``count`` steps of one primitive mechanism.

    kind: ``"gaussian"`` (with ``sampling`` in none / poisson / without_replacement /
    with_replacement), ``"epsilon_delta"``, ``"zcdp"`` or ``"non_private"``.
    """

    kind: str
    count: int
    noise_multiplier: float = math.inf
    sampling: str = "none"
    q: float = 1.0
    dataset_size: int = 0
    sample_size: int = 0
    epsilon: float = 0.0
    delta: float = 0.0
    rho: float = 0.0


def _effective_noise_multiplier(event: ev.DpEvent) -> float:
    """A release of several Gaussians at once equals one Gaussian with z = (sum z_i^-2)^-1/2."""
    if isinstance(event, ev.GaussianDpEvent):
        return float(event.noise_multiplier)
    if isinstance(event, ev.SelfComposedDpEvent):
        return _effective_noise_multiplier(event.event) / math.sqrt(event.count)
    if isinstance(event, ev.ComposedDpEvent):
        inv = sum(_effective_noise_multiplier(e) ** -2 for e in event.events)
        return inv ** -0.5 if inv > 0 else math.inf
    raise UnsupportedEventError(f"a subsampled event must contain only Gaussian events, found {event}")


def flatten(event: ev.DpEvent, count: int = 1) -> list[Block]:
    """The blocks of ``event`` repeated ``count`` times (adaptive composition).

    dp-accounting's own events are accepted and read as the silodp events of the same name.
    """
    if ev.is_dp_accounting_event(event):
        try:
            event = ev.from_dp_accounting(event)
        except ValueError as exc:
            raise UnsupportedEventError(f"unsupported event: {event} ({exc})") from None
    if isinstance(event, ev.NoOpDpEvent):
        return []
    if isinstance(event, ev.NonPrivateDpEvent):
        return [Block("non_private", count)]
    if isinstance(event, ev.SelfComposedDpEvent):
        return flatten(event.event, count * event.count)
    if isinstance(event, ev.ComposedDpEvent):
        return [b for e in event.events for b in flatten(e, count)]
    if isinstance(event, ev.ParallelComposedDpEvent):
        return flatten(event.event, count)
    if isinstance(event, ev.GaussianDpEvent):
        return [Block("gaussian", count, noise_multiplier=float(event.noise_multiplier))]
    if isinstance(event, ev.PoissonSampledDpEvent):
        z = _effective_noise_multiplier(event.event)
        return [Block("gaussian", count, z, "poisson", q=float(event.sampling_probability))]
    if isinstance(event, ev.SampledWithoutReplacementDpEvent):
        z = _effective_noise_multiplier(event.event)
        n, m = int(event.source_dataset_size), int(event.sample_size)
        return [Block("gaussian", count, z, "without_replacement", q=m / n, dataset_size=n, sample_size=m)]
    if isinstance(event, ev.SampledWithReplacementDpEvent):
        z = _effective_noise_multiplier(event.event)
        n, m = int(event.source_dataset_size), int(event.sample_size)
        # q: probability that a given record is drawn at least once (multiplicities are kept in m, n)
        q = 1.0 - (1.0 - 1.0 / n) ** m if n > 1 else 1.0
        return [Block("gaussian", count, z, "with_replacement", q=q, dataset_size=n, sample_size=m)]
    if isinstance(event, ev.EpsilonDeltaDpEvent):
        return [Block("epsilon_delta", count, epsilon=float(event.epsilon), delta=float(event.delta))]
    if isinstance(event, ev.ZCDpEvent):
        if event.xi != 0:
            raise UnsupportedEventError(f"truncated zCDP (xi != 0) is not supported: {event}")
        return [Block("zcdp", count, rho=float(event.rho))]
    raise UnsupportedEventError(f"unsupported event: {event}")
