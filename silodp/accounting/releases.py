"""What a silo may release (its declaration), turned into events, and what it did release (its
ledger), checked while it runs.

Vocabulary: a *declaration* is data, the list of releases an algorithm may send; the *ledger*
(:class:`ReleaseLedger`) is what it did send, one :class:`Sent` entry per message. A Gaussian
release is described by its ``noise_multiplier`` (sigma / C); ``sigma`` always names a standard
deviation.

An algorithm declares its messages as a list of releases (one per message *group*: "grad",
"diff", "full", ...): how many times the group is sent, how its records are drawn, and either the
Gaussian noise multiplier (sigma / C, C the per-record contribution bound: the clip norm over the
batch size) or, for shuffle-DP, the (epsilon, delta) certificate of one invocation of the shuffle
protocol. :func:`releases_event` is the event of the whole transcript, the one thing the
calibration, the certificate, the audit and the docs read (:func:`pvec_event`: the same for the
``pvec`` accountants). While the algorithm runs, each message it actually sends is recorded in
its :class:`ReleaseLedger`, which refuses (``ValueError`` naming
the release) any message the declaration does not cover: more messages of a group than declared,
less noise, another sampling or batch size, other shuffle parameters.

Batch samplings (how a record enters the messages of one group):

* ``FULL`` -- every record, every message: ``count`` Gaussian steps.
* ``WITH_REPLACEMENT`` -- K i.i.d. uniform indices per message (paper Alg 1, 3, 11): ``count``
  with-replacement-subsampled steps (the accountants' labelled-multiplicity or BBG18 Thm 10 bound).
* ``SUBSET`` -- a fresh uniform K-subset per message, independent across messages (DP-SCAFFOLD):
  ``count`` steps subsampled without replacement (BBG18 Thm 9).
* ``SHUFFLED`` -- disjoint batches walking through a random permutation, a fresh one per epoch of
  floor(n/K) batches (Alg 6's disjoint batches). Within an epoch a record is in at most one batch
  (parallel composition, McSherry 2009); batches of one epoch are *not* independent samples, so no
  amplification by subsampling is credited: a record is charged once per epoch,
  ceil(count / floor(n/K)) un-subsampled steps.
* ``POISSON`` -- each record enters each message independently with probability q = K / n (K the
  expected batch size; Opacus' ``DPDataLoader``): ``count`` Poisson-subsampled steps.
* ``BALLS_IN_BINS`` -- each epoch every record is put in one of t = floor(n/K) batches, chosen
  uniformly and independently (batches of random size, K on average): ceil(count / t) epochs
  of random allocation (:mod:`silodp.accounting.allocation`; Chua et al. 2025, Feldman &
  Shenfeld 2025). Within an epoch a record is in exactly one batch, so every charge of
  ``SHUFFLED`` holds too; the accountants that know the allocation (PLD) certify less.

Shuffle-DP releases are certified two ways. The tight certificate (:func:`pvec_groups` and
:mod:`silodp.accounting.pvec`) is the exact discrete PLD of the binomial protocol's counts with
the declared parameters (g, b, p, rotate), composed over coordinates, over the invocations a
record can enter (reuse across epochs) and, with replacement, over the record's multiplicity by a
labelled mixture. :func:`releases_event` gives the generic accountants a sound but looser event:
each invocation (epsilon, delta)-DP in one message, with replacement a record drawn k times
charged by group privacy at the (1 - tail) quantile k* of Bin(K, 1/n):
(k* eps, k* e^{(k*-1) eps} delta + tail) per invocation (Dwork & Roth 2014, Thm 2.2 style; the
draws are independent of the data).
"""

from __future__ import annotations

import dataclasses
import enum
import math
from typing import Any, Sequence

from silodp.accounting import _binomial
from silodp.accounting import events as ev
from silodp._validation import batch_from_rate, check_count, check_positive, check_probability
from silodp.accounting.blocks import Sampling


class BatchSampling(enum.Enum):
    """How the records of one message group are drawn (see the module docstring)."""

    FULL = "full"
    WITH_REPLACEMENT = "with-replacement"
    SUBSET = "subset"
    SHUFFLED = "shuffled"
    POISSON = "poisson"
    BALLS_IN_BINS = "balls-in-bins"


#: Tail mass charged to delta when a with-replacement shuffle-DP invocation is bounded by group privacy.
GROUP_TAIL = 1e-12


@dataclasses.dataclass(frozen=True)
class GaussianRelease:
    """``count`` messages of ``group``: a sum of per-record contributions of norm <= C over
    ``batch_size`` records drawn from ``dataset_size`` by ``sampling``, plus N(0, (z C)^2 I)
    (``z = 0``: no noise, not private; ``z = inf``: pure noise, free)."""

    group: str
    count: int
    noise_multiplier: float
    sampling: BatchSampling
    batch_size: int
    dataset_size: int

    def __post_init__(self) -> None:
        _check_common(self)
        if not self.noise_multiplier >= 0:
            raise ValueError(f"release {self.group!r}: noise_multiplier must be >= 0, got {self.noise_multiplier}")


@dataclasses.dataclass(frozen=True)
class ShuffleRelease:
    """``count`` invocations of a shuffle protocol for ``group`` with at least ``messages`` messages
    in all, each invocation (``epsilon``, ``delta``)-DP in one message of l2 norm <= ``bound`` in
    ``dimension`` coordinates (``epsilon = inf``: not certified); ``params`` are the protocol's
    parameters (g, b, p, rotate) (checked at run time); records drawn as for
    :class:`GaussianRelease`."""

    group: str
    count: int
    epsilon: float
    delta: float
    sampling: BatchSampling
    batch_size: int
    dataset_size: int
    messages: int = 1
    bound: float = 1.0
    params: tuple[Any, ...] = ()
    dimension: int = 1

    def __post_init__(self) -> None:
        _check_common(self)
        check_count("messages", self.messages)
        check_count("dimension", self.dimension)
        if not (self.epsilon > 0 and 0 <= self.delta < 1):
            raise ValueError(f"release {self.group!r}: need epsilon > 0 and delta in [0, 1), "
                             f"got {self.epsilon}, {self.delta}")


Release = GaussianRelease | ShuffleRelease


def _check_common(r: GaussianRelease | ShuffleRelease) -> None:
    if not isinstance(r.sampling, BatchSampling):
        raise ValueError(f"release {r.group!r}: sampling must be a BatchSampling, got {r.sampling!r}")
    check_count("count", r.count, minimum=0)
    check_count("dataset_size", r.dataset_size)
    check_count("batch_size", r.batch_size)
    if r.sampling != BatchSampling.WITH_REPLACEMENT and r.batch_size > r.dataset_size:
        raise ValueError(f"release {r.group!r}: batch_size {r.batch_size} > dataset_size {r.dataset_size}")


def uses_per_record(sampling: BatchSampling, count: int, batch_size: int, dataset_size: int) -> int:
    """How many of ``count`` messages a record can enter with ``SHUFFLED`` or ``BALLS_IN_BINS``
    batches (one per epoch)."""
    per_epoch = max(1, dataset_size // batch_size)
    return -(-count // per_epoch) if sampling in (BatchSampling.SHUFFLED, BatchSampling.BALLS_IN_BINS) else count


def gaussian_steps(count: int, noise_multiplier: float, sampling: BatchSampling, batch_size: int,
                   dataset_size: int) -> ev.DpEvent:
    """The event of ``count`` Gaussian messages of one group (sampling as in the module docstring)."""
    check_count("count", count)
    z = check_positive("noise_multiplier", noise_multiplier)
    n, k = check_count("dataset_size", dataset_size), check_count("batch_size", batch_size)
    step: ev.DpEvent = ev.GaussianDpEvent(z)
    if sampling == BatchSampling.WITH_REPLACEMENT:
        return ev.SelfComposedDpEvent(ev.SampledWithReplacementDpEvent(n, k, step), count)
    if sampling == BatchSampling.POISSON and k < n:
        return ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(k / n, step), count)
    if sampling == BatchSampling.SUBSET and k < n:
        return ev.SelfComposedDpEvent(ev.SampledWithoutReplacementDpEvent(n, k, step), count)
    if sampling == BatchSampling.SHUFFLED and k < n:
        per_epoch = min(count, n // k)
        epoch = ev.ParallelComposedDpEvent(step, per_epoch) if per_epoch > 1 else step
        return ev.SelfComposedDpEvent(epoch, uses_per_record(sampling, count, k, n))
    if sampling == BatchSampling.BALLS_IN_BINS and n // k > 1:  # a partial last epoch: post-processing
        return ev.SelfComposedDpEvent(ev.BallsInBinsDpEvent(n // k, step), uses_per_record(sampling, count, k, n))
    return ev.SelfComposedDpEvent(step, count)


def _group_size(r: ShuffleRelease) -> int:
    """Messages of one invocation a record can move: 1, or with replacement the (1 - GROUP_TAIL)
    quantile of its multiplicity Bin(K, 1/n)."""
    if r.sampling != BatchSampling.WITH_REPLACEMENT:
        return 1
    return max(1, min(r.batch_size, int(_binomial.isf(GROUP_TAIL, r.batch_size, 1.0 / r.dataset_size))))


def delta_weight(r: ShuffleRelease) -> float:
    """What one unit of per-invocation delta costs over the run: uses x group factor k e^{(k-1) eps}."""
    k = _group_size(r)
    uses = uses_per_record(r.sampling, r.count, r.batch_size, r.dataset_size)
    return uses * k * math.exp(min(700.0, (k - 1) * r.epsilon))


def sampled_steps(steps: int, noise_multiplier: float, sampling: Sampling | str = Sampling.NONE,
                  q: float | None = None, dataset_size: int | None = None) -> ev.DpEvent:
    """``steps`` Gaussian steps (noise multiplier sigma / C) on records drawn by ``sampling``: none
    (every record), Poisson with probability ``q``, balls-in-bins into floor(1 / ``q``) batches
    per epoch (rounded down, toward more privacy loss; ``steps`` / batches epochs, rounded up), or a batch of ceil(q n) of ``dataset_size``
    records without or with replacement (fresh each step; rounded up, toward more privacy loss:
    :func:`silodp._validation.batch_from_rate`). A parameter the sampling does not use is
    an error, not ignored (the library side of ``silodp epsilon|noise``)."""
    how = Sampling(sampling)
    steps = check_count("steps", steps)
    if how == Sampling.NONE:
        if q is not None and q != 1:
            raise ValueError("q: applies only with a sampling (poisson, without-replacement, with-replacement)")
        if dataset_size is not None:
            raise ValueError("dataset_size: applies only to sampling without or with replacement")
        return gaussian_steps(steps, noise_multiplier, BatchSampling.FULL, 1, 1)
    if q is None:
        raise ValueError(f"q: required with sampling {how.value}")
    q = check_probability("q", q)
    if how == Sampling.POISSON:
        if dataset_size is not None:
            raise ValueError("dataset_size: does not apply to Poisson sampling (only q does)")
        return ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(noise_multiplier)), steps)
    if how == Sampling.BALLS_IN_BINS:
        if dataset_size is not None:
            raise ValueError("dataset_size: does not apply to balls-in-bins sampling (only q = 1 / batches does)")
        batches = int(math.floor(1.0 / q * (1 + 1e-12)))
        return gaussian_steps(steps, noise_multiplier, BatchSampling.BALLS_IN_BINS, 1, batches)
    if dataset_size is None:
        raise ValueError(f"dataset_size: required with sampling {how.value} (batch = ceil(q n))")
    n = check_count("dataset_size", dataset_size)
    batch = BatchSampling.SUBSET if how == Sampling.WITHOUT_REPLACEMENT else BatchSampling.WITH_REPLACEMENT
    return gaussian_steps(steps, noise_multiplier, batch, batch_from_rate("q", q, n), n)


def _shuffle_event(r: ShuffleRelease) -> ev.DpEvent:
    eps, dl = r.epsilon, r.delta
    if math.isinf(eps):
        return ev.NonPrivateDpEvent()
    k = _group_size(r)
    if k > 1:  # group privacy over the k messages, the multiplicity tail charged to delta
        log_group = math.log(k) + (k - 1) * eps + (math.log(dl) if dl > 0 else -math.inf)
        eps, dl = k * eps, min(1.0 - 1e-16, (math.exp(log_group) if dl > 0 else 0.0) + GROUP_TAIL)
    uses = uses_per_record(r.sampling, r.count, r.batch_size, r.dataset_size)
    return ev.SelfComposedDpEvent(ev.EpsilonDeltaDpEvent(eps, dl), uses)


def pvec_event(releases: Sequence[Release]) -> ev.DpEvent:
    """The event of one silo's shuffle-DP transcript as the ``pvec`` accountants certify it: per
    message group, its uses (:func:`uses_per_record`) of one P_vec invocation
    (:class:`~silodp.accounting.events.PvecDpEvent` with the declared parameters (g, b, 1/2,
    rotate), in the certified d' coordinates with rotation, and the l2 shift of
    :func:`silodp.accounting.pvec_l2.shift_l2`), sampled with replacement where the batches are.
    A Gaussian release stays a Gaussian event (which the ``pvec`` accountants refuse)."""
    from silodp.accounting import pvec, pvec_l2

    parts = []
    for r in releases:
        if r.count == 0:
            continue
        if not isinstance(r, ShuffleRelease):
            parts.append(releases_event([r]))
            continue
        if len(r.params) < 3 or float(r.params[2]) != 0.5:
            raise ValueError(f"release {r.group!r}: the P_vec certificate needs params (g, b, 1/2[, rotate]), "
                             f"got {r.params}")
        rotate = bool(r.params[3]) if len(r.params) > 3 else False
        g = int(r.params[0])
        step: ev.DpEvent = ev.PvecDpEvent(g, int(r.params[1]), r.messages, pvec.certified_dimension(r.dimension, rotate),
                                          pvec_l2.shift_l2(g, r.dimension, rotate))
        if r.sampling == BatchSampling.WITH_REPLACEMENT:
            step = ev.SampledWithReplacementDpEvent(r.dataset_size, r.batch_size, step)
        parts.append(ev.SelfComposedDpEvent(step, uses_per_record(r.sampling, r.count, r.batch_size, r.dataset_size)))
    return ev.ComposedDpEvent(parts) if parts else ev.NoOpDpEvent()


def pvec_groups(releases: Sequence[Release]) -> tuple[Any, ...]:
    """The shuffle releases as the P_vec certificate sees them (:class:`silodp.accounting.pvec.PvecGroup`
    of :func:`pvec_event`); each must carry its parameters (g, b, 1/2, rotate)."""
    from silodp.accounting.accountants import pvec_items

    return tuple(pvec_items(pvec_event([r for r in releases if isinstance(r, ShuffleRelease)])))


def releases_event(releases: Sequence[Release]) -> ev.DpEvent:
    """The event of one silo's whole transcript: the adaptive composition of its message groups."""
    parts = []
    for r in releases:
        if r.count == 0:
            continue
        if isinstance(r, GaussianRelease):
            if math.isinf(r.noise_multiplier):
                continue  # pure noise
            parts.append(ev.NonPrivateDpEvent() if r.noise_multiplier == 0 else
                         gaussian_steps(r.count, r.noise_multiplier, r.sampling, r.batch_size, r.dataset_size))
        elif isinstance(r, ShuffleRelease):
            parts.append(_shuffle_event(r))
        else:
            raise ValueError(f"releases: unknown release {r!r}")
    return ev.ComposedDpEvent(parts) if parts else ev.NoOpDpEvent()


@dataclasses.dataclass(frozen=True)
class Sent:
    """One message group instance actually sent at run time (an entry of :class:`ReleaseLedger`).

    ``noise_multiplier``: sigma / C, the noise standard deviation over the contribution bound
    (smallest over silos and stacked runs); for shuffle messages ``params`` (the protocol's) and ``messages`` (how many messages
    the invocation summed: fewer than declared means less binomial noise) instead.
    """

    group: str
    sampling: BatchSampling
    batch_size: int
    dataset_size: int
    noise_multiplier: float = math.inf
    params: tuple[Any, ...] = ()
    messages: int = 0


class ReleaseLedger:
    """The ledger of a run: records every message an algorithm sends and refuses those its
    ``declaration`` (the algorithm's releases) does not cover (``None``: the algorithm declared
    itself non-private, nothing is checked but everything is recorded).
    """

    #: relative slack of the noise check: float32 batch weights (1/K) carry ~6e-8 rounding
    _RTOL = 1e-6

    def __init__(self, declaration: Sequence[Release] | None) -> None:
        #: the declared release of each message group (None: non-private, nothing checked)
        self.declaration = None if declaration is None else {r.group: r for r in declaration}
        if self.declaration is not None and declaration is not None and len(self.declaration) != len(declaration):
            raise ValueError("releases: each message group must be declared once")
        self.sent: list[Sent] = []
        self._counts: dict[str, int] = {}

    def record(self, sent: Sent) -> None:
        """Add ``sent``; ``ValueError`` naming the release when it is not covered."""
        self.sent.append(sent)
        count = self._counts[sent.group] = self._counts.get(sent.group, 0) + 1
        if self.declaration is None:
            return
        decl = self.declaration.get(sent.group)
        where = f"release {count} of group {sent.group!r}"
        if decl is None:
            raise ValueError(f"{where}: the algorithm declared no such message group ({sorted(self.declaration)})")
        if count > decl.count:
            raise ValueError(f"{where}: only {decl.count} were declared")
        if (sent.sampling, sent.batch_size) != (decl.sampling, decl.batch_size) or sent.dataset_size < decl.dataset_size:
            raise ValueError(f"{where}: sent as {sent.sampling.value} batches of {sent.batch_size} from "
                             f"{sent.dataset_size} records, declared {decl.sampling.value} batches of "
                             f"{decl.batch_size} from {decl.dataset_size}")
        if isinstance(decl, GaussianRelease):
            if not sent.noise_multiplier >= decl.noise_multiplier * (1 - self._RTOL):
                raise ValueError(f"{where}: noise multiplier {sent.noise_multiplier:.6g} is below the declared "
                                 f"{decl.noise_multiplier:.6g}")
        elif tuple(sent.params) != tuple(decl.params):
            raise ValueError(f"{where}: shuffle parameters {sent.params} differ from the declared {decl.params}")
        elif sent.messages < decl.messages:
            raise ValueError(f"{where}: {sent.messages} messages summed, declared at least {decl.messages}")

    def counts(self) -> dict[str, int]:
        """Messages sent per group so far."""
        return dict(self._counts)


def shuffle_invocations(plan: Sequence["ShuffleRelease"], dimension: int, delta: float | None,
                        params: dict[str, Any] | None = None) -> list[Any]:
    """A shuffle-DP algorithm's protocol invocations (``plan``: the paper's per-invocation budgets)
    in ``dimension`` coordinates. Where all the invocations a record can enter would spend more
    than the target ``delta`` (the paper's budgets assume each record is used once), their deltas
    are shrunk so that they spend half of it. With ``params`` (per group (g, b, p, rotate))
    attached, each invocation's epsilon is what those parameters certify at its delta for one
    message (:func:`silodp.accounting.pvec.invocation_epsilon`), so that the generic event of
    :func:`releases_event` stays sound."""
    from silodp.accounting import pvec

    plan = [dataclasses.replace(r, dimension=dimension) for r in plan]
    spent = sum(delta_weight(r) * r.delta for r in plan if r.count)
    if delta is not None and spent > delta:  # the paper's deltas assume one use per record
        shrink = delta / (2.0 * spent)
        plan = [dataclasses.replace(r, delta=r.delta * shrink) for r in plan]
    if params is None:
        return plan
    out = []
    for r in plan:
        key = tuple(params.get(r.group, ()))
        eps = math.inf
        if r.count and len(key) > 2 and float(key[2]) == 0.5 and r.delta > 0:
            eps = max(pvec.invocation_epsilon(int(key[0]), int(key[1]), r.messages, dimension,
                                              len(key) > 3 and bool(key[3]), r.delta), 1e-12)
        out.append(dataclasses.replace(r, params=key, epsilon=eps))
    return out
