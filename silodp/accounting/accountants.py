"""Accountants: interpret an event (what each silo releases) as a certified (epsilon, delta).

The interface follows Opacus and dp-accounting: ``compose(event, count)``, ``get_epsilon(delta)``,
``get_delta(epsilon)``, ``supports(event)``, and a registry by name for ``--accountant NAME``.
Every accountant takes the neighbouring relation; the default is ``ADD_OR_REMOVE_ONE``, as in
dp-accounting, Opacus and Flower (:data:`DEFAULT_RELATION`). The papers' algorithms account under
``REPLACE_ONE`` (ISRL-DP, paper Definition 4: one record of one silo replaced) and say so.

Which accountant certifies what (see docs/accounting.md):

Units: every event's ``noise_multiplier`` is sigma / C, C the per-record contribution bound, under
every relation (as dp-accounting's PLD, Opacus and Flower); an accountant divides it by the
relation's sensitivity in units of C (:func:`silodp.accounting.events.sensitivity`: 1 for
add/remove, 2 for replace-one) before it meets a formula written for a unit shift.

Fail closed: each accountant lists the (mechanism, sampling) pairs it certifies (``CERTIFIES``);
``supports()`` is a dry run of ``compose()`` that answers False, never raises, for anything else.

* ``rdp`` -- Renyi DP (Mironov 2017; Mironov, Talwar & Zhang 2019 for Poisson subsampling, see
  :mod:`silodp.accounting.rdp`) with the improved RDP -> (eps, delta) conversion
  (Canonne-Kamath-Steinke 2020 / Balle et al. 2020); tested against dp-accounting's. Under
  replace-one, Poisson-subsampled Gaussians are charged as the add/remove Poisson-subsampled
  Gaussian at sensitivity 2C, which dominates them, and also by the replace-one pair itself
  (:mod:`silodp.accounting.rdp_replace`, 2-4x tighter in epsilon); without-replacement ones by
  the RDP of the symmetric pair (:func:`silodp.accounting.rdp.without_replacement_gaussian_rdp`,
  proved there, BBG18 advanced joint convexity); with-replacement sampling by the
  labelled-multiplicity bound (the record's multiplicity charged as released).
* ``pld`` -- privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022, see
  :mod:`silodp.accounting.pld`), connect-the-dots pessimistic discretization: tight up to the
  discretization. Poisson under replace-one uses the exact replace-one pair; sampling without
  replacement the symmetric pair of :func:`silodp.accounting.pld.from_without_replacement_gaussian`
  (either orientation per step); with-replacement sampling the multiplicity-hiding bound of
  :mod:`silodp.accounting.with_replacement`; tested against dp-accounting's PLD library. The only
  accountant of :class:`~silodp.accounting.events.LabelledMixtureDpEvent` (DP-SCAFFOLD's
  sampling patterns): its PLD is exactly the weighted sum of the components'.
* ``gdp`` -- un-subsampled Gaussian steps only, any mix of noise multipliers: *exact*. Gaussian
  with sigma / shift r is (1/r)-GDP exactly (Dong, Roth & Su 2022, arXiv:1905.02383, Thm 2.7),
  mu_i-GDP mechanisms compose to exactly sqrt(sum mu_i^2)-GDP (ibid., Cor 3.3), and mu-GDP is
  the Balle-Wang curve of a Gaussian with sigma / shift = 1 / mu (ibid., Cor 2.13).
* ``zcdp`` -- Gaussian steps without subsampling only (paper Prop D.2 + Lemma D.1), converted by
  Canonne-Kamath-Steinke 2020 (``conversion="paper"`` gives paper Prop D.1).
* ``advanced`` -- per-step (eps, delta) from the analytic Gaussian (Balle-Wang 2018) and BBG18
  subsampling (incl. *with replacement*, Thm 10), composed optimally (Kairouz-Oh-Viswanath 2015).
* ``dwork-roth`` -- the same per-step budgets composed by Dwork-Roth Thm 3.20 (paper Thm D.1).
* ``pvec`` -- the binomial shuffle protocol P_vec (paper Alg 4-5) only (:class:`~silodp.accounting.events.PvecDpEvent`):
  the better of the l2-aware Renyi moments and the exact per-coordinate discrete PLD of the whole
  transcript (:mod:`silodp.accounting.pvec`); ``pvec-pld`` the per-coordinate PLD alone.

Which of them certify by default (:func:`silodp.accounting.candidate_accountants`) is each class's
``candidacy``; the keyword settings a caller may give, its ``SETTINGS``: no caller switches on names.
"""

from __future__ import annotations

import abc
import dataclasses
import math
from typing import TYPE_CHECKING, Any, Callable, ClassVar

import numpy as np

from silodp.accounting import composition, gaussian, mechanisms, pld as pld_lib, rdp as rdp_lib, subsampling, zcdp
from silodp.accounting import events as ev
from silodp._registry import RegistryView, register
from silodp._validation import check_count, check_delta, check_nonnegative, check_positive
from silodp.accounting._numerics import monotone_root
from silodp.accounting.blocks import Block, Mechanism, Sampling, UnsupportedEventError, flatten

if TYPE_CHECKING:
    from silodp.accounting import pvec

_ALL_SAMPLING = frozenset(Sampling)
_REPLACE_ONE_ONLY = (Sampling.WITH_REPLACEMENT, Sampling.WITHOUT_REPLACEMENT)

#: dp-accounting's default orders (1.1 ... 10.9 by 0.1, 11 ... 63, 128 ... 1024) and integer
#: orders up to 4096 (exact and fast).
RDP_ORDERS = tuple(sorted({round(1.0 + x / 10.0, 1) for x in range(1, 100)} | set(range(11, 64))
                          | {128, 256, 512, 1024}
                          | {int(x) for x in np.unique(np.geomspace(12, 4096, 40).astype(int))}))


#: The neighbouring relation of generic mechanism accounting when none is named: add/remove one
#: record, as dp-accounting, Opacus and Flower. The papers' algorithms name REPLACE_ONE (ISRL-DP,
#: Lowy et al. Definition 4) wherever they account.
DEFAULT_RELATION = ev.ADD_OR_REMOVE_ONE


def neighbouring_arg(neighbouring: Any = None, neighboring_relation: Any = None) -> ev.NeighboringRelation:
    """The relation given under silodp's name (``neighbouring``) or dp-accounting's
    (``neighboring_relation``); :data:`DEFAULT_RELATION` when neither is given."""
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


#: every registered accountant class by its ``name`` (filled by :func:`register_accountant`)
ACCOUNTANTS: dict[str, Callable[..., "Accountant"]] = {}


def register_accountant(cls: type) -> type:
    """Class decorator: register the accountant class ``cls`` under ``cls.name`` (a name taken by
    another class is refused). Where it is defined is all it takes: ``--accountant`` of
    ``silodp epsilon``, the calibration and the conformance suite read this registry."""
    return register(ACCOUNTANTS, cls, "accountant")


def unregister_accountant(name: str) -> None:
    """Remove ``name`` (tests' toy accountants)."""
    ACCOUNTANTS.pop(name, None)


def accountant_choices(*extra: str) -> RegistryView:
    """The registered accountant names, read live, plus ``extra`` ones (the CLI's ``"all"``):
    ``--accountant``'s ``choices``."""
    return RegistryView(ACCOUNTANTS, *extra)


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
EXACT, TIGHT, FALLBACK = "exact", "tight", "fallback"


class Accountant(abc.ABC):
    """Base class: collects blocks; subclasses turn them into (epsilon, delta).

    dp-accounting's names are accepted too: ``neighboring_relation=``, ``get_epsilon(target_delta=)``,
    ``get_delta(target_epsilon=)``, and :attr:`ledger` (the event composed so far).
    """

    name: ClassVar[str] = ""
    #: the mechanisms this accountant certifies, and for Gaussian steps the samplings (allow-list)
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
        self._blocks: list[Block] = []
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

    def _flatten(self, event: ev.DpEvent, count: int = 1) -> list:
        """The items this accountant composes (blocks, :func:`~silodp.accounting.blocks.flatten`)."""
        return flatten(event, count)

    def unsupported_reason(self, event: ev.DpEvent) -> str | None:
        """Why ``event`` cannot be accounted here (``None`` if it can): a dry run of ``compose``.
        Never raises: a malformed or unknown event is a reason, not an exception."""
        try:
            for block in self._flatten(event):
                self._check_block(block)
        except (ValueError, TypeError, AttributeError, ArithmeticError) as exc:
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
                             settings: dict) -> "CalibrationSettings | None":
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


#: Measured over-estimate of a pessimistic PLD after T compositions: about PLD_BIAS * T * disc^2.
PLD_BIAS = 2.5


def pld_discretization(epsilon: float, steps: int) -> float:
    """The PLD grid for a target ``epsilon`` after ``steps`` compositions: a pessimistic PLD
    over-estimates epsilon by about ``PLD_BIAS * steps * disc^2`` (measured), so this keeps that
    below 0.2% of the target, within [1e-4, 2e-3]. Any grid certifies; this one is tight enough."""
    return min(2e-3, max(1e-4, math.sqrt(0.002 * epsilon / (PLD_BIAS * steps))))


@register_accountant
class GdpAccountant(Accountant):
    """Exact accountant for compositions of un-subsampled Gaussian steps (Gaussian DP).

    A Gaussian step with unit multiplier r = z / sensitivity is exactly (1/r)-GDP (Dong, Roth &
    Su 2022, arXiv:1905.02383, Thm 2.7); the composition is exactly mu-GDP with
    mu = sqrt(sum_i count_i / r_i^2) (ibid., Cor 3.3); and mu-GDP is exactly the privacy profile
    delta(eps) = Phi(-eps/mu + mu/2) - e^eps Phi(-eps/mu - mu/2) (ibid., Cor 2.13), the Balle-Wang
    curve of :mod:`silodp.accounting.gaussian` at sigma / sensitivity = 1/mu, inverted rounding up.
    """

    name = "gdp"
    candidacy, candidate_rank = EXACT, 0
    CERTIFIES = {Mechanism.GAUSSIAN: _ALL_SAMPLING, Mechanism.NON_PRIVATE: frozenset()}

    def _check(self, block: Block) -> None:
        if block.kind == Mechanism.GAUSSIAN and block.subsampled:
            raise UnsupportedEventError(
                f"gdp is exact only without subsampling ({block.sampling.value}); use 'pld' or 'rdp'")

    def mu(self) -> float:
        """mu of the composition (Cor 3.3)."""
        return math.sqrt(sum(b.count / self._unit_z(b) ** 2 for b in self._blocks))

    def _epsilon(self, delta: float) -> float:
        return gaussian.epsilon_for_delta(1.0 / self.mu(), delta)

    def _delta(self, epsilon: float) -> float:
        # log_ndtr is accurate to a few ulps; 1e-12 relative rounds the closed form up
        return min(1.0, float(np.exp(gaussian.analytic_log_delta(epsilon, 1.0 / self.mu()))) * (1.0 + 1e-12))


@register_accountant
class RdpAccountant(Accountant):
    """Renyi-DP accountant (:mod:`silodp.accounting.rdp`) under the dominating relation."""

    name = "rdp"
    candidacy, candidate_rank, calibrates_as_fallback = TIGHT, 2, True
    CERTIFIES = {Mechanism.GAUSSIAN: _ALL_SAMPLING, Mechanism.ZCDP: frozenset(), Mechanism.NON_PRIVATE: frozenset()}

    def _block_rdp(self, block: Block) -> np.ndarray:
        """RDP curve of one block on RDP_ORDERS. A subsampled step is charged the smaller of its
        subsampled-Gaussian RDP (Mironov, Talwar & Zhang 2019; without replacement the proven
        symmetric pair of :func:`silodp.accounting.rdp.without_replacement_gaussian_rdp`) and the
        un-sampled Gaussian's alpha / (2 z^2): the step's output is a mixture over batches, with the
        same batch law under both datasets, of Gaussians at most one shift apart, and D_alpha is
        jointly quasi-convex (van Erven & Harremoes 2014, Thm 13), so the largest batch's bounds it;
        orders where the series did not converge fall back to the latter.
        With replacement: the labelled-multiplicity bound (:mod:`silodp.accounting.rdp`); a record
        drawn twice moves the sum by 4C, so the un-sampled Gaussian does not bound it."""
        orders = np.asarray(RDP_ORDERS)
        if block.kind == Mechanism.ZCDP:
            return block.count * block.rho * orders
        z = self._unit_z(block)
        if block.sampling == Sampling.WITH_REPLACEMENT:
            return block.count * rdp_lib.with_replacement_gaussian_rdp(z, block.sample_size, block.dataset_size, orders)
        full = rdp_lib.gaussian_rdp(z, orders)
        if block.subsampled:
            sub = (rdp_lib.without_replacement_gaussian_rdp if block.sampling == Sampling.WITHOUT_REPLACEMENT
                   else rdp_lib.poisson_subsampled_gaussian_rdp)
            full = np.minimum(sub(block.q, z, orders), full)
        if block.subsampled and block.sampling == Sampling.POISSON and self.neighbouring == ev.REPLACE_ONE:
            from silodp.accounting.rdp_replace import poisson_replace_one_gaussian_rdp  # the replace-one pair

            full = np.minimum(poisson_replace_one_gaussian_rdp(block.q, block.noise_multiplier, orders), full)
        return block.count * full

    def _rdp(self) -> np.ndarray:
        return np.sum([self._block_rdp(b) for b in self._blocks], axis=0)

    def _epsilon(self, delta: float) -> float:
        return rdp_lib.epsilon_from_rdp(RDP_ORDERS, self._rdp(), delta)

    def _delta(self, epsilon: float) -> float:
        return rdp_lib.delta_from_rdp(RDP_ORDERS, self._rdp(), epsilon)


@register_accountant
class PldAccountant(Accountant):
    """Privacy-loss-distribution accountant (:mod:`silodp.accounting.pld`, pessimistic)."""

    name = "pld"
    candidacy, candidate_rank = TIGHT, 1
    SETTINGS = ("value_discretization_interval", "log_mass_truncation_bound")

    @classmethod
    def calibration_settings(cls, event: ev.DpEvent, epsilon: float, delta: float,
                             settings: dict) -> CalibrationSettings | None:
        """The grid from the number of compositions (:func:`pld_discretization`: the pessimistic
        PLD's over-estimate stays below 0.2% of the target, rtol 0.3%), the discarded tails below
        1e-4 delta; a 4x coarser pre-search where the grid is fine (< 5e-4). None when the caller
        chose the grid."""
        if "value_discretization_interval" in settings:
            return None
        steps = sum(b.count for b in flatten(event))
        disc = pld_discretization(epsilon, steps)
        tuned = {"value_discretization_interval": disc,
                 "log_mass_truncation_bound": min(-20.0, math.log(1e-4 * delta / steps))}
        coarse = dict(tuned, value_discretization_interval=4 * disc) if disc < 5e-4 else None
        return CalibrationSettings(tuned, f"pld(value_discretization_interval={disc:.2g})", 0.003, coarse,
                                   PLD_BIAS * steps * ((4 * disc) ** 2 - disc ** 2))
    CERTIFIES = {Mechanism.GAUSSIAN: _ALL_SAMPLING, Mechanism.EPSILON_DELTA: frozenset(),
                 Mechanism.NON_PRIVATE: frozenset(), Mechanism.BALLS_IN_BINS: frozenset(),
                 Mechanism.TRUNCATED_POISSON: frozenset(),
                 **{k: frozenset() for k in mechanisms.KINDS}}

    def __init__(self, neighbouring: ev.NeighboringRelation | None = None,
                 value_discretization_interval: float = 1e-4,
                 log_mass_truncation_bound: float = pld_lib.LOG_TAIL_MASS, *,
                 neighboring_relation: ev.NeighboringRelation | None = None) -> None:
        """``log_mass_truncation_bound``: ln of the noise mass each step may discard; with the
        pessimistic estimate that mass is charged to delta (as infinite privacy loss), so a larger
        bound is faster and still certified, at a cost of about count * e^bound in delta."""
        super().__init__(neighbouring, neighboring_relation=neighboring_relation)
        self.value_discretization_interval = check_positive(
            "value_discretization_interval", value_discretization_interval)
        if not log_mass_truncation_bound < 0:
            raise ValueError(f"log_mass_truncation_bound: must be < 0, got {log_mass_truncation_bound}")
        self.log_mass_truncation_bound = float(log_mass_truncation_bound)

    def _flatten(self, event: ev.DpEvent, count: int = 1) -> list:
        """The blocks, and a :class:`MixtureBlock` for every labelled mixture (certified here only)."""
        return flatten(event, count, leaf=self._leaf)

    def _leaf(self, event: ev.DpEvent, count: int) -> list:
        if type(event) is not ev.LabelledMixtureDpEvent:
            return flatten(event, count)
        parts = tuple((w, tuple(self._flatten(e))) for w, e in zip(event.weights, event.events))
        return [MixtureBlock(count, parts)]

    def _check_block(self, block: Any) -> None:
        if type(block) is not MixtureBlock:
            return super()._check_block(block)
        for _, blocks in block.components:
            for b in blocks:
                if getattr(b, "kind", None) == Mechanism.NON_PRIVATE:
                    raise UnsupportedEventError("a labelled mixture's components must be private "
                                                "(a non-private one makes the whole non-private)")
                self._check_block(b)

    def _check(self, block: Block) -> None:
        if block.kind in mechanisms.KINDS:
            mechanisms.check(block, self.neighbouring, self.value_discretization_interval)
        if block.kind == Mechanism.EPSILON_DELTA and (
                block.epsilon > pld_lib.MAX_LOSS
                or 2 * block.epsilon / self.value_discretization_interval > pld_lib.MAX_POINTS):
            raise UnsupportedEventError(
                f"epsilon: {block.epsilon:g} of an (epsilon, delta) event is beyond the pld grid (losses up to "
                f"{pld_lib.MAX_LOSS:g}, {pld_lib.MAX_POINTS} points at discretization "
                f"{self.value_discretization_interval:g}); use 'advanced' or 'rdp'")
        if block.kind in (Mechanism.GAUSSIAN, Mechanism.BALLS_IN_BINS, Mechanism.TRUNCATED_POISSON):
            z = self._unit_z(block) / (2.0 if block.kind == Mechanism.TRUNCATED_POISSON else 1.0)
            span = 0.5 / z ** 2 + 20.0 / z  # privacy losses of one Gaussian step, tails included
            if span > pld_lib.MAX_LOSS or span / self.value_discretization_interval > pld_lib.MAX_POINTS:
                raise UnsupportedEventError(
                    f"noise_multiplier={block.noise_multiplier:g} is too small for the pld accountant at "
                    f"discretization {self.value_discretization_interval:g} (epsilon is huge); use 'rdp' "
                    "or a coarser grid")
        self._check_grid(block)

    def _check_grid(self, block: Block) -> None:
        """Refuse, before allocating, the with-replacement and balls-in-bins PLDs whose grids would not fit
        (:func:`silodp.accounting.with_replacement.check_grid`, :func:`silodp.accounting._allocation_rounded.check`)."""
        if block.kind == Mechanism.GAUSSIAN and block.sampling == Sampling.WITH_REPLACEMENT:
            from silodp.accounting import with_replacement

            with_replacement.check_grid(block.noise_multiplier, block.sample_size, block.dataset_size,
                                        self.value_discretization_interval, self.log_mass_truncation_bound)
        elif block.kind == Mechanism.BALLS_IN_BINS and ev.relation(self.neighbouring) != ev.REPLACE_ONE:
            from silodp.accounting import _allocation_rounded

            _allocation_rounded.check(block.noise_multiplier, block.sample_size)

    def _block_pld(self, block: Block, dtype: type = np.float64, direct_work: int = 0) -> pld_lib.PrivacyLossDistribution:
        disc, bound = self.value_discretization_interval, self.log_mass_truncation_bound
        if type(block) is MixtureBlock:  # the weighted sum of the components' PLDs (exact)
            mix = pld_lib.mixture([(w, self._compose(blocks, dtype, direct_work) or pld_lib.identity(disc, bound))
                                   for w, blocks in block.components])
            return mix.self_compose(block.count, direct_work) if block.count > 1 else mix
        lattice = block.kind in mechanisms.KINDS and self._alone(block)
        key = (type(self), dataclasses.replace(block, count=1), self.neighbouring, disc, bound, lattice)
        one = pld_lib.cached_step(key, lambda: self._step_pld(block, lattice))
        return one.astype(dtype).self_compose(block.count, direct_work)

    def _step_pld(self, block: Block, lattice: bool) -> pld_lib.PrivacyLossDistribution:
        """The PLD of one step of ``block`` (``lattice``: a discrete mechanism alone, on its own lattice)."""
        disc, bound = self.value_discretization_interval, self.log_mass_truncation_bound
        z = block.noise_multiplier
        if block.kind == Mechanism.EPSILON_DELTA:
            one = pld_lib.from_privacy_parameters(block.epsilon, block.delta, disc, bound)
        elif block.kind in mechanisms.KINDS:  # Laplace, discrete Laplace, randomized response
            # a composition of one discrete mechanism alone: on its own lattice (exact, few points)
            one = mechanisms.pld(block, self.neighbouring, disc, bound, lattice=lattice)
        elif block.kind == Mechanism.BALLS_IN_BINS:  # one epoch (silodp.accounting.allocation)
            from silodp.accounting import allocation

            one = allocation.block_pld(block, self.neighbouring, disc, bound)
        elif block.kind == Mechanism.TRUNCATED_POISSON:
            one = pld_lib.from_truncated_subsampled_gaussian(z, block.q, block.dataset_size, block.sample_size,
                                                             self.neighbouring, disc, bound)
        elif block.sampling == Sampling.WITH_REPLACEMENT:  # multiplicity hidden (the module's theorem)
            from silodp.accounting import with_replacement

            one = with_replacement.gaussian_pld(z, block.sample_size, block.dataset_size, disc, bound)
        elif block.sampling == Sampling.POISSON and block.subsampled:
            # under replace-one: the exact replace-one pair (contributions in the ball of radius C)
            one = pld_lib.from_gaussian_mechanism(z, block.q, self.neighbouring, disc, bound)
        elif block.subsampled:
            # without replacement (replace-one only): the symmetric pair with the "remove" curve of
            # the Poisson pair at shift 2C in both directions (BBG18 Thm 2; see the function)
            one = pld_lib.from_without_replacement_gaussian(z, block.q, disc, bound)
        else:
            one = pld_lib.from_gaussian_mechanism(z, 1.0, self.neighbouring, disc, bound)
        return one

    def _alone(self, block: Block) -> bool:
        """Whether every block of this accountant is ``block`` (up to its count)."""
        one = dataclasses.replace(block, count=1)
        return all(type(b) is type(block) and dataclasses.replace(b, count=1) == one for b in self._blocks)

    def _pld(self, dtype: type = np.float64, direct_work: int = 0) -> pld_lib.PrivacyLossDistribution:
        """The composition of every block, computed in ``dtype`` (float64, or :data:`pld.EXTENDED`);
        ``direct_work``: see :meth:`pld.PrivacyLossDistribution.self_compose`."""
        return self._compose(self._blocks, dtype, direct_work)

    def _compose(self, blocks, dtype: type, direct_work: int) -> pld_lib.PrivacyLossDistribution | None:
        """The composition of ``blocks`` (None when there are none): identical ones grouped, the
        rest merged in a balanced tree (:func:`silodp.accounting.pld_tree.compose_blocks`)."""
        from silodp.accounting.pld_tree import compose_blocks

        return compose_blocks(blocks, lambda block: self._block_pld(block, dtype, direct_work))

    #: Largest share of the requested delta the floating-point charge may take (else: refuse). The
    #: charge is spent from delta (the certificate is epsilon at delta - charge), so any share
    #: below 1 is sound; past one half the certificate would mostly pay for round-off.
    ROUNDOFF_SHARE = 0.5
    #: Above this share of delta the worst-case charge is replaced by the one by the magnitudes
    #: present (a second pass, :data:`pld.DIRECT_WORK`), so that it costs < 0.1% of delta.
    DIRECT_SHARE = 1e-3
    #: Largest composition (blocks x grid points of the composed PLD, both directions) whose second
    #: pass runs in extended precision (:data:`pld.EXTENDED`) rather than float64: the inverse FFT's
    #: own error, which the direct powers cannot remove (sqrt(n) 16u log2(n) ||masses||_2, about
    #: 2e-13 at a few thousand points), is then 2048 times smaller; the pass costs about 3 us a
    #: point (about 1.5 s here) against float64's 1 us.
    EXTENDED_POINTS = 1 << 19

    def _certifiable_pld(self, delta: float) -> pld_lib.PrivacyLossDistribution:
        """The composed PLD, or :class:`~silodp.accounting.pld.UncertifiableDeltaError` when its
        floating-point charge exceeds ``ROUNDOFF_SHARE * delta`` in every pass.

        First pass: float64 with the FFT's worst-case charge, skipped when that charge must exceed
        ``DIRECT_SHARE * delta`` (it is at least T times the FFT's error at frequency 0, >= 64u, for
        a block of T steps). Above it, a second pass charged by the magnitudes present
        (``direct_work``): in extended precision (u = 2^-64, where the platform has it) when the
        composition is at most ``EXTENDED_POINTS``, else in float64, and then in extended precision
        if float64's charge is still above ``DIRECT_SHARE * delta`` at that size, or above
        ``ROUNDOFF_SHARE * delta`` at any size. Every pass is a certificate on its own (its charge
        is spent from delta); the smallest charge is kept."""
        steps = max((b.count for b in self._blocks), default=1)
        total = None if steps * 32.0 * np.finfo(float).eps > self.DIRECT_SHARE * delta else self._pld()
        if total is not None and total.roundoff <= self.DIRECT_SHARE * delta:
            return total
        extended_here = pld_lib.HAS_EXTENDED

        def small(p: pld_lib.PrivacyLossDistribution) -> bool:
            return extended_here and len(self._blocks) * sum(len(d.masses) for d in p._directions()) <= self.EXTENDED_POINTS

        if total is None or not small(total):
            retry = self._pld(direct_work=pld_lib.DIRECT_WORK)
            total = retry if total is None or retry.roundoff < total.roundoff else total
            binding = self.DIRECT_SHARE if small(total) else self.ROUNDOFF_SHARE
            extend = extended_here and total.roundoff > binding * delta
        else:
            extend = True
        if extend:
            retry = self._pld(pld_lib.EXTENDED, direct_work=pld_lib.DIRECT_WORK)
            total = retry if retry.roundoff < total.roundoff else total
        if total.roundoff > self.ROUNDOFF_SHARE * delta:
            raise pld_lib.UncertifiableDeltaError(
                f"delta={delta:g} is below what the pld accountant can certify for {len(self)} compositions: "
                f"its floating-point charge is {total.roundoff:.2g} (more than {self.ROUNDOFF_SHARE:g} delta); "
                "use 'rdp', or 'gdp' for Gaussian steps without subsampling")
        return total

    def _epsilon(self, delta: float) -> float:
        eps = self._certifiable_pld(delta).get_epsilon_for_delta(delta)
        genuine = -math.expm1(sum(b.count * math.log1p(-b.delta) for b in self._blocks
                                  if b.kind == Mechanism.EPSILON_DELTA))
        if math.isinf(eps) and genuine <= delta:  # the grid's tails, not the mechanism, spend delta
            raise pld_lib.UncertifiableDeltaError(
                f"delta={delta:g} is below the tail mass the pld accountant charged to infinite loss at "
                f"log_mass_truncation_bound={self.log_mass_truncation_bound:g}; use a smaller bound or 'rdp'")
        return eps

    def _delta(self, epsilon: float) -> float:
        return float(min(1.0, self._pld().get_delta_for_epsilon(epsilon)))


@dataclasses.dataclass(frozen=True)
class MixtureBlock:
    """``count`` independent copies of a :class:`~silodp.accounting.events.LabelledMixtureDpEvent`:
    its ``components`` as (weight, blocks) pairs (no blocks: nothing released)."""

    count: int
    components: tuple
    #: no primitive mechanism (the accountants that read ``kind`` find none here)
    kind: ClassVar[None] = None


@register_accountant
class ZcdpAccountant(Accountant):
    """zCDP accountant for un-sampled Gaussian steps (paper Prop D.2, Lemma D.1)."""

    name = "zcdp"
    CERTIFIES = {Mechanism.GAUSSIAN: _ALL_SAMPLING, Mechanism.ZCDP: frozenset(), Mechanism.NON_PRIVATE: frozenset()}

    def __init__(self, neighbouring: ev.NeighboringRelation | None = None, conversion: str = "tight", *,
                 neighboring_relation: ev.NeighboringRelation | None = None) -> None:
        super().__init__(neighbouring, neighboring_relation=neighboring_relation)
        if conversion not in ("tight", "paper"):
            raise ValueError(f"conversion: must be 'tight' or 'paper', got {conversion!r}")
        self.conversion = conversion

    def _check(self, block: Block) -> None:
        if block.kind == Mechanism.GAUSSIAN and block.subsampled:
            raise UnsupportedEventError(
                f"zcdp has no amplification by subsampling ({block.sampling.value}); use 'rdp', 'pld' or 'advanced'"
            )

    def rho(self) -> float:
        """Total rho of everything composed (Lemma D.1); a Gaussian step is 1 / (2 (z / s)^2)."""
        return zcdp.compose(
            b.count * (b.rho if b.kind == Mechanism.ZCDP else 0.5 / self._unit_z(b) ** 2) for b in self._blocks
        )

    def _epsilon(self, delta: float) -> float:
        if self.conversion == "paper":
            return zcdp.epsilon_for_rho_paper(self.rho(), delta)
        return zcdp.epsilon_for_rho(self.rho(), delta)

    def _delta(self, epsilon: float) -> float:
        if self.conversion == "paper":
            return super()._delta(epsilon)
        return zcdp.delta_for_epsilon(self.rho(), epsilon)


def step_epsilon(block: Block, delta: float, sensitivity: float) -> float:
    """Per-step epsilon of one step of ``block`` at per-step ``delta`` (rounded up); ``sensitivity``
    in units of the contribution bound (:func:`silodp.accounting.events.sensitivity`)."""
    if block.kind == Mechanism.EPSILON_DELTA:
        return block.epsilon if delta >= block.delta else math.inf
    z = block.noise_multiplier / sensitivity
    if not block.subsampled:
        return gaussian.epsilon_for_delta(z, delta)
    if block.sampling in (Sampling.POISSON, Sampling.WITHOUT_REPLACEMENT):
        base_delta = delta / block.q
        if base_delta >= 1:
            return 0.0
        return subsampling.amplify(gaussian.epsilon_for_delta(z, base_delta), 0.0, block.q)[0]
    # with replacement: invert BBG18 Thm 10's delta'(eps') (decreasing in eps').
    m, n = block.sample_size, block.dataset_size
    if subsampling.with_replacement_gaussian_delta(0.0, z, m, n) <= delta:
        return 0.0
    return monotone_root(
        lambda e: subsampling.with_replacement_gaussian_delta(e, z, m, n), delta, 1e-6, 1.0,
        increasing=False, safe="above", rtol=1e-7, name="epsilon",
    )


@register_accountant
class AdvancedAccountant(Accountant):
    """Per-step (eps, delta) composed by an advanced composition theorem.

    The per-step delta is a free choice; the accountant splits the budget as
    ``per-step = eta * delta / steps`` (the rest is the composition slack) and minimizes the total
    epsilon over a grid of ``eta``. Any ``eta`` gives a valid certificate.
    """

    name = "advanced"
    candidacy, candidate_rank = FALLBACK, 3
    theorem = "kov"
    CERTIFIES = {Mechanism.GAUSSIAN: _ALL_SAMPLING, Mechanism.EPSILON_DELTA: frozenset(),
                 Mechanism.NON_PRIVATE: frozenset()}
    _ETAS = tuple(np.geomspace(1e-3, 0.9, 16))

    @classmethod
    def competes(cls, event: ev.DpEvent) -> bool:
        """With-replacement sampling: BBG18's amplification can beat rdp's labelled-multiplicity
        bound, and pld where its grid is coarse against a tiny epsilon (a rarely drawn record)."""
        return any(b.sampling == Sampling.WITH_REPLACEMENT for b in flatten(event))

    def _epsilon(self, delta: float) -> float:
        fixed = [b for b in self._blocks if b.kind == Mechanism.EPSILON_DELTA]
        flexible = [b for b in self._blocks if b.kind != Mechanism.EPSILON_DELTA]
        log_keep_fixed = sum(b.count * math.log1p(-b.delta) for b in fixed)
        remaining = 1.0 - (1.0 - delta) / math.exp(log_keep_fixed)
        if remaining < -1e-12 * delta:
            raise ValueError(
                f"delta={delta:g} is unreachable: the (epsilon, delta) events alone spend {-math.expm1(log_keep_fixed):.3g}"
            )
        if not flexible and remaining <= 1e-12 * delta:
            return sum(b.count * b.epsilon for b in fixed)  # no slack left: basic composition
        steps = sum(b.count for b in flexible)
        best = math.inf
        for eta in self._ETAS if flexible else (0.0,):
            per_delta = eta * remaining / steps if flexible else 0.0
            slack = remaining - per_delta * steps
            eps_steps = [step_epsilon(b, per_delta, self.sensitivity) for b in flexible] + [b.epsilon for b in fixed]
            dls = [per_delta] * len(flexible) + [b.delta for b in fixed]
            counts = [b.count for b in flexible + fixed]
            if any(math.isinf(e) for e in eps_steps):
                continue
            best = min(best, self._compose(eps_steps, dls, counts, slack, delta))
        if math.isinf(best):
            raise ValueError(f"delta={delta:g} is unreachable for this event with advanced composition")
        return best

    def _compose(self, eps: list[float], dls: list[float], counts: list[int], slack: float, delta: float) -> float:
        if len(set(zip(eps, dls))) == 1:
            return composition.kov(eps[0], dls[0], sum(counts), delta)
        return composition.heterogeneous_kov(eps, dls, counts, slack)[0]


@register_accountant
class DworkRothAccountant(AdvancedAccountant):
    """Advanced composition by Dwork-Roth Theorem 3.20 (paper Thm D.1); heterogeneous steps use
    the same form with sum eps_i^2 (Dwork, Rothblum & Vadhan 2010, Thm III.3)."""

    name = "dwork-roth"
    candidacy = None
    theorem = "dwork-roth"

    def _compose(self, eps: list[float], dls: list[float], counts: list[int], slack: float, delta: float) -> float:
        return composition.dwork_roth_epsilon(eps, counts, slack)




@register_accountant
class PvecAccountant(Accountant):
    """The exact certificates of the binomial protocol P_vec (paper Alg 4-5, Thm D.2) over a
    whole transcript of :class:`~silodp.accounting.events.PvecDpEvent` invocations: the better of
    the l2-aware Renyi moments (:mod:`silodp.accounting.pvec_l2`) and the per-coordinate discrete
    PLD composed over coordinates, invocations and with-replacement multiplicities
    (:func:`silodp.accounting.pvec.transcript_epsilon`; both are sound, so is their minimum).

    Understands compositions (adaptive and parallel) of P_vec invocations, each alone or inside a
    :class:`~silodp.accounting.events.SampledWithReplacementDpEvent` (a record drawn k ~ Bin(K, 1/n)
    times moves k messages), and non-private releases; anything else (a Gaussian step) is refused.
    Defined under ``REPLACE_ONE`` only (one record's message replaced shifts the levels by at most
    g; removing it would also change the noise trials). ``value_discretization_interval``: the PLD
    grid (default :func:`silodp.accounting.pvec.default_interval` at epsilon 1).
    """

    name = "pvec"
    SETTINGS = ("value_discretization_interval",)
    #: whether the l2-aware certificate competes (False: the per-coordinate PLD alone)
    l2_aware: ClassVar[bool] = True

    def __init__(self, neighbouring: ev.NeighboringRelation | None = None,
                 value_discretization_interval: float | None = None, *,
                 neighboring_relation: ev.NeighboringRelation | None = None) -> None:
        from silodp.accounting import pvec

        super().__init__(neighbouring, neighboring_relation=neighboring_relation)
        self.value_discretization_interval = (pvec.default_interval(1.0) if value_discretization_interval is None
                                              else check_positive("value_discretization_interval",
                                                                  value_discretization_interval))

    def _flatten(self, event: ev.DpEvent, count: int = 1) -> list:
        items = pvec_items(event, count, self.l2_aware)
        if items and self.neighbouring != ev.REPLACE_ONE:
            raise UnsupportedEventError(f"{self.name} certifies P_vec under REPLACE_ONE only "
                                        "(pass neighbouring=REPLACE_ONE)")
        return items

    def _check_block(self, block: Any) -> None:
        """Nothing left to check: the walk (:func:`pvec_items`) validated every item."""

    def groups(self, event: ev.DpEvent | None = None) -> tuple:
        """The :class:`~silodp.accounting.pvec.PvecGroup` of every invocation composed so far (of
        ``event`` alone, when given), as this accountant certifies them."""
        items = self._blocks if event is None else self._flatten(event)
        return tuple(b for b in items if getattr(b, "kind", None) is None)

    def __len__(self) -> int:
        return sum(getattr(b, "count", getattr(b, "uses", 0)) for b in self._blocks)

    def _epsilon(self, delta: float) -> float:
        from silodp.accounting import pvec

        return float(pvec.transcript_epsilon(self.groups(), delta, self.value_discretization_interval))


@register_accountant
class PvecPldAccountant(PvecAccountant):
    """:class:`PvecAccountant`'s per-coordinate discrete PLD alone (no l2 bound): the certificate
    before the l2-aware one, for comparison (docs/shuffle.md)."""

    name = "pvec-pld"
    l2_aware = False


def pvec_items(event: ev.DpEvent, count: int = 1, l2: bool = True) -> list:
    """The P_vec groups (:class:`silodp.accounting.pvec.PvecGroup`, ``uses`` invocations each) and
    non-private blocks of ``event`` repeated ``count`` times; without ``l2`` the groups carry no l2
    bound. Fail closed: anything but compositions of P_vec invocations (alone or sampled with
    replacement) and non-private releases is an :class:`UnsupportedEventError` naming it."""
    return flatten(event, count, leaf=lambda one, uses: [_pvec_group(one, uses, l2)])


def _pvec_group(event: ev.DpEvent, uses: int, l2: bool) -> "pvec.PvecGroup":
    from silodp.accounting import pvec

    sampled = type(event) is ev.SampledWithReplacementDpEvent
    one = event.event if sampled else event
    if type(one) is not ev.PvecDpEvent:
        raise UnsupportedEventError(f"pvec certifies P_vec invocations only (PvecDpEvent), got {one}")
    ev.revalidate(one)
    extra = dict(with_replacement=True, batch_size=event.sample_size, dataset_size=event.source_dataset_size) \
        if sampled else {}
    return pvec.PvecGroup(uses, one.levels, one.trials, one.messages, one.dimension,
                          l2=one.l2_shift if l2 else None, **extra)


def get_accountant(name: Any, neighbouring: ev.NeighboringRelation | None = None, **kwargs: Any) -> Accountant:
    """A fresh accountant by registry name (``gdp``, ``rdp``, ``pld``, ``zcdp``, ``advanced``, ``dwork-roth``,
    ``pvec``, ``pvec-pld``, and any registered later) or by :class:`~silodp.accounting.spec.AccountantSpec`
    (its settings, then ``kwargs``); ``neighbouring`` (or ``neighboring_relation=``) defaults to
    :data:`DEFAULT_RELATION`."""
    if not isinstance(name, str) and hasattr(name, "settings"):  # an AccountantSpec (spec.py imports this module)
        name, kwargs = name.name, {**dict(name.settings), **kwargs}
    if name not in ACCOUNTANTS:
        raise ValueError(f"accountant: must be one of {sorted(ACCOUNTANTS)}, got {name!r}")
    return ACCOUNTANTS[name](neighbouring, **kwargs)


def epsilon(event: ev.DpEvent, delta: float | None = None, accountant: str = "pld",
            neighbouring: ev.NeighboringRelation | None = None, *, target_delta: float | None = None,
            **kwargs) -> float:
    """Certified epsilon of ``event`` at ``delta`` (or ``target_delta=``)."""
    return get_accountant(accountant, neighbouring, **kwargs).compose(event).get_epsilon(delta, target_delta=target_delta)


def delta(event: ev.DpEvent, epsilon: float | None = None, accountant: str = "pld",
          neighbouring: ev.NeighboringRelation | None = None, *, target_epsilon: float | None = None,
          **kwargs) -> float:
    """Certified delta of ``event`` at ``epsilon`` (or ``target_epsilon=``)."""
    return get_accountant(accountant, neighbouring, **kwargs).compose(event).get_delta(epsilon,
                                                                                        target_epsilon=target_epsilon)
