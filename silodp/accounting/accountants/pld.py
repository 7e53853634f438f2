"""``pld``: the privacy-loss-distribution accountant (:mod:`silodp.accounting.pld`, pessimistic)."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any, Callable, ClassVar

import numpy as np

from silodp.accounting import events as ev, mechanisms, pld as pld_lib, pld_pairs
from silodp._validation import check_positive
from silodp.accounting.accountants.base import _ALL_SAMPLING, TIGHT, Accountant, CalibrationSettings
from silodp.accounting.accountants.registry import register_accountant
from silodp.accounting.blocks import Block, Mechanism, Sampling, UnsupportedEventError, flatten, memoized_leaf

#: Measured over-estimate of a pessimistic PLD after T compositions: about PLD_BIAS * T * disc^2.
PLD_BIAS = 2.5


def pld_discretization(epsilon: float, steps: int) -> float:
    """The PLD grid for a target ``epsilon`` after ``steps`` compositions: a pessimistic PLD
    over-estimates epsilon by about ``PLD_BIAS * steps * disc^2`` (measured), so this keeps that
    below 0.2% of the target, within [1e-4, 2e-3]. Any grid certifies; this one is tight enough."""
    return min(2e-3, max(1e-4, math.sqrt(0.002 * epsilon / (PLD_BIAS * steps))))


#: One step's PLD from its block: ``builder(block, neighbouring, value_discretization_interval,
#: log_mass_truncation_bound, lattice)`` (pessimistic, :mod:`silodp.accounting.pld`); ``lattice``:
#: the accountant holds this block alone (a discrete mechanism may then use its own lattice)
PldBuilder = Callable[[Block, ev.NeighboringRelation, float, float, bool], pld_lib.PrivacyLossDistribution]
#: The mechanisms that build their own PLD, keyed by the block's kind (a Gaussian step by its
#: kind and sampling): the pld accountant looks a block up here instead of switching on it, and
#: refuses one without an entry (``supports()`` is False). A mechanism registers with
#: :func:`pld_builder` where its PLD is defined.
PLD_BUILDERS: dict[Mechanism | tuple[Mechanism, Sampling], PldBuilder] = {}


def pld_builder(*keys: Mechanism | tuple[Mechanism, Sampling]) -> Callable[[PldBuilder], PldBuilder]:
    """Decorator: register a :data:`PldBuilder` under ``keys`` in :data:`PLD_BUILDERS`."""
    def add(fn: PldBuilder) -> PldBuilder:
        for key in keys:
            PLD_BUILDERS[key] = fn
        return fn
    return add


@pld_builder(Mechanism.EPSILON_DELTA)
def _epsilon_delta(block: Block, neighbouring: ev.NeighboringRelation, disc: float,
                   bound: float, lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    return pld_lib.from_privacy_parameters(block.epsilon, block.delta, disc, bound)


@pld_builder(*mechanisms.KINDS)
def _discrete(block: Block, neighbouring: ev.NeighboringRelation, disc: float,
              bound: float, lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    """Laplace, discrete Laplace, randomized response, discrete Gaussian (:mod:`silodp.accounting.mechanisms`);
    a composition of one discrete mechanism alone on its own lattice (exact, few points)."""
    return mechanisms.pld(block, neighbouring, disc, bound, lattice=lattice)


@pld_builder(Mechanism.BALLS_IN_BINS)
def _balls_in_bins(block: Block, neighbouring: ev.NeighboringRelation, disc: float,
                   bound: float, lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    """One epoch (:mod:`silodp.accounting.allocation`)."""
    from silodp.accounting import allocation

    return allocation.block_pld(block, neighbouring, disc, bound)


@pld_builder(Mechanism.TRUNCATED_POISSON)
def _truncated_poisson(block: Block, neighbouring: ev.NeighboringRelation, disc: float,
                       bound: float, lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    return pld_pairs.from_truncated_subsampled_gaussian(block.noise_multiplier, block.q, block.dataset_size,
                                                      block.sample_size, neighbouring, disc, bound)


@pld_builder((Mechanism.GAUSSIAN, Sampling.WITH_REPLACEMENT))
def _with_replacement(block: Block, neighbouring: ev.NeighboringRelation, disc: float,
                      bound: float, lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    """The multiplicity hidden (:mod:`silodp.accounting.with_replacement`'s theorem)."""
    from silodp.accounting import with_replacement

    return with_replacement.gaussian_pld(block.noise_multiplier, block.sample_size, block.dataset_size, disc, bound)


@pld_builder((Mechanism.GAUSSIAN, Sampling.NONE), (Mechanism.GAUSSIAN, Sampling.POISSON))
def _poisson(block: Block, neighbouring: ev.NeighboringRelation, disc: float,
             bound: float, lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    """Under replace-one, a subsampled step is the exact replace-one pair (contributions in the
    ball of radius C); a step that is not subsampled is the Gaussian itself. A step composed once
    (a distinct release of a ledger) is built on tail-strided dots, a self-composed one on the
    full grid (:func:`pld_pairs.from_gaussian_mechanism`'s ``strided``)."""
    q = block.q if block.subsampled else 1.0
    return pld_pairs.from_gaussian_mechanism(block.noise_multiplier, q, neighbouring, disc, bound,
                                             strided=block.count == 1)


@pld_builder((Mechanism.GAUSSIAN, Sampling.WITHOUT_REPLACEMENT))
def _without_replacement(block: Block, neighbouring: ev.NeighboringRelation, disc: float,
                         bound: float, lattice: bool = False) -> pld_lib.PrivacyLossDistribution:
    """(Replace-one only) the symmetric pair with the "remove" curve of the Poisson pair at shift
    2C in both directions (BBG18 Thm 2; see the function); not subsampled: the Gaussian itself."""
    if not block.subsampled:
        return _poisson(block, neighbouring, disc, bound, lattice)
    return pld_pairs.from_without_replacement_gaussian(block.noise_multiplier, block.q, disc, bound)


@register_accountant
class PldAccountant(Accountant):
    """Privacy-loss-distribution accountant (:mod:`silodp.accounting.pld`, pessimistic)."""

    name = "pld"
    candidacy, candidate_rank = TIGHT, 1
    SETTINGS = ("value_discretization_interval", "log_mass_truncation_bound")

    @classmethod
    def calibration_settings(cls, event: ev.DpEvent, epsilon: float, delta: float,
                             settings: dict[str, Any]) -> CalibrationSettings | None:
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

    def _flatten(self, event: ev.DpEvent, count: int = 1) -> list[Any]:
        """The blocks, and a :class:`MixtureBlock` for every labelled mixture (certified here only):
        the generic walk's blocks (kept on the event, shared with every accountant) where it
        accepts the event, which it does exactly when no labelled mixture is below (where it
        accepts, ``_mixture_leaf``'s items are its blocks); else the walk with mixtures."""
        try:
            return flatten(event, count)
        except UnsupportedEventError:
            return flatten(event, count, leaf=_mixture_leaf)

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
        if block.kind != Mechanism.NON_PRIVATE:  # never built: the certificate is infinite
            self.builder(block)
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
        elif (block.kind == Mechanism.BALLS_IN_BINS and ev.relation(self.neighbouring) != ev.REPLACE_ONE
              and block.sample_size > 1):  # one batch: the plain Gaussian step, no allocation grid
            from silodp.accounting import _allocation_rounded

            _allocation_rounded.check(block.noise_multiplier, block.sample_size)

    def _block_pld(self, block: Block | MixtureBlock, dtype: type = np.float64, direct_work: int = 0) -> pld_lib.PrivacyLossDistribution:
        disc, bound = self.value_discretization_interval, self.log_mass_truncation_bound
        if isinstance(block, MixtureBlock):  # the weighted sum of the components' PLDs (exact)
            mix = pld_lib.mixture([(w, self._compose(blocks, dtype, direct_work) or pld_lib.identity(disc, bound))
                                   for w, blocks in block.components])
            return mix.self_compose(block.count, direct_work) if block.count > 1 else mix
        return self._step(block).astype(dtype).self_compose(block.count, direct_work)

    def _step(self, block: Block) -> pld_lib.PrivacyLossDistribution:
        """One step of ``block``'s PLD (kept by :func:`pld.cached_step`)."""
        lattice = block.kind in mechanisms.KINDS and self._alone(block)
        key = (type(self), dataclasses.replace(block, count=1), self.neighbouring,
               self.value_discretization_interval, self.log_mass_truncation_bound, lattice, block.count == 1)
        return pld_lib.cached_step(key, lambda: self._step_pld(block, lattice))

    def _step_pld(self, block: Block, lattice: bool) -> pld_lib.PrivacyLossDistribution:
        """The PLD of one step of ``block`` by its builder (``lattice``: a discrete mechanism alone,
        on its own lattice)."""
        disc, bound = self.value_discretization_interval, self.log_mass_truncation_bound
        return self.builder(block)(block, self.neighbouring, disc, bound, lattice)

    def _alone(self, block: Block) -> bool:
        """Whether every block of this accountant is ``block`` (up to its count)."""
        if len(self._blocks) == 1 and self._blocks[0] == block:  # one block: no copies to compare
            return True
        one = dataclasses.replace(block, count=1)
        return all(type(b) is type(block) and dataclasses.replace(b, count=1) == one for b in self._blocks)

    @staticmethod
    def builder(block: Block) -> PldBuilder:
        """The builder of ``block``'s one-step PLD (:data:`PLD_BUILDERS`); an
        :class:`UnsupportedEventError` when none is registered for it (fail closed)."""
        key = (block.kind, block.sampling) if block.kind == Mechanism.GAUSSIAN else block.kind
        found = PLD_BUILDERS.get(key)
        if found is None:
            what = f"Gaussian steps with sampling {block.sampling.value}" if block.kind == Mechanism.GAUSSIAN \
                else f"{block.kind.value} mechanisms"
            raise UnsupportedEventError(f"pld has no privacy loss distribution for {what}")
        return found

    def _pld(self, dtype: type = np.float64, direct_work: int = 0) -> pld_lib.PrivacyLossDistribution:
        """The composition of every block, computed in ``dtype`` (float64, or :data:`pld.EXTENDED`);
        ``direct_work``: see :meth:`pld.PrivacyLossDistribution.self_compose`."""
        total = self._compose(self._blocks, dtype, direct_work)
        if total is None:
            raise ValueError("pld: nothing composed yet")
        return total

    def composed_pld(self) -> pld_lib.PrivacyLossDistribution:
        """The PLD of everything composed so far (float64, the certificate's first pass): the
        public handle of incremental composition. A caller that folds calls one at a time keeps
        the PLD of each call (a fresh accountant's ``composed_pld()`` after one ``compose``),
        composes them (:meth:`pld.PrivacyLossDistribution.compose`, in order) and asks
        :meth:`fast_epsilon` of the result, falling back to a fresh accountant of all the calls when
        that answers None; the certificate is then this accountant's, bit for bit (the Flower
        accountant, :class:`silodp.integrations.flower.SilodpAccountant`, does so). ValueError when
        nothing was composed."""
        return self._pld()

    @classmethod
    def fast_epsilon(cls, pld: pld_lib.PrivacyLossDistribution, delta: float) -> float | None:
        """Epsilon at ``delta`` certified by ``pld`` (a composition of PLDs this accountant built,
        on its grid or a coarser one) by the accountant's first path: None when its floating-point
        charge exceeds ``DIRECT_SHARE * delta`` or the answer is infinite, i.e. when only the
        accountant's slower passes (or its refusal) can answer: ask a fresh accountant then."""
        if pld.roundoff > cls.DIRECT_SHARE * delta:
            return None
        eps = pld.get_epsilon_for_delta(delta)
        return float(eps) if math.isfinite(eps) else None

    def _compose(self, blocks: Sequence[Any], dtype: type, direct_work: int) -> pld_lib.PrivacyLossDistribution | None:
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
        composition is at most ``EXTENDED_POINTS`` and float64 cannot reach ``DIRECT_SHARE * delta``
        (:meth:`_float64_floor`), else in float64, and then in extended precision
        if float64's charge is still above ``DIRECT_SHARE * delta`` at that size, or above
        ``ROUNDOFF_SHARE * delta`` at any size; a lone self-composed block tries the float64
        composition by exponential tilting first (:meth:`_tilted_pld`: a charge below
        ``DIRECT_SHARE * delta`` at a fraction of the extended pass's cost, where it applies). Every
        pass is a certificate on its own (its charge is spent from delta); the smallest charge is
        kept."""
        steps = max((b.count for b in self._blocks), default=1)
        total = None if steps * 32.0 * np.finfo(float).eps > self.DIRECT_SHARE * delta else self._pld()
        if total is not None and total.roundoff <= self.DIRECT_SHARE * delta:
            return total
        extended_here = pld_lib.HAS_EXTENDED
        if total is None and extended_here and self.DIRECT_SHARE * delta < self._float64_charge_at_least():
            tilted = self._tilted_pld(delta, None)  # no float64 pass can reach DIRECT_SHARE * delta here
            if tilted is not None:
                return tilted

        def small(p: pld_lib.PrivacyLossDistribution) -> bool:
            return extended_here and len(self._blocks) * sum(len(d.masses) for d in p._directions()) <= self.EXTENDED_POINTS

        if total is None or not small(total) or self._float64_floor(total) <= self.DIRECT_SHARE * delta:
            retry = self._pld(direct_work=pld_lib.DIRECT_WORK)
            total = retry if total is None or retry.roundoff < total.roundoff else total
            binding = self.DIRECT_SHARE if small(total) else self.ROUNDOFF_SHARE
            extend = extended_here and total.roundoff > binding * delta
        else:
            extend = True
        if extend:
            tilted = self._tilted_pld(delta, total)
            if tilted is not None:
                return tilted
            retry = self._pld(pld_lib.EXTENDED, direct_work=pld_lib.DIRECT_WORK)
            total = retry if retry.roundoff < total.roundoff else total
        if total.roundoff > self.ROUNDOFF_SHARE * delta:
            raise pld_lib.UncertifiableDeltaError(
                f"delta={delta:g} is below what the pld accountant can certify for {len(self)} compositions: "
                f"its floating-point charge is {total.roundoff:.2g} (more than {self.ROUNDOFF_SHARE:g} delta); "
                "use 'rdp', or 'gdp' for Gaussian steps without subsampling")
        return total

    #: :meth:`_float64_floor`'s margin: the direct powers' charges measured at 2e4-4e5 points
    #: stayed within 4x of the inverse FFT's own error.
    FLOAT64_FLOOR_MARGIN = 8.0

    @classmethod
    def _float64_floor(cls, total: pld_lib.PrivacyLossDistribution) -> float:
        """About the smallest charge a float64 pass with direct powers can reach for a composition
        like ``total``: the inverse FFT's own error on its masses (which the direct powers cannot
        remove), times :data:`FLOAT64_FLOOR_MARGIN`. Only picks which pass runs next (each pass
        is a certificate of its own): when it is below ``DIRECT_SHARE * delta`` the float64 pass
        with direct powers (about 3x cheaper) runs before the extended-precision one."""
        worst = 0.0
        for part in total._directions():
            size = pld_lib._next_fast_length(len(part.masses))
            worst = max(worst, math.sqrt(size) * pld_lib._fft_error(size, pld_lib._l2(part.masses)))
        return cls.FLOAT64_FLOOR_MARGIN * worst

    #: Expected worst-case charge of a float64 self-composition per step, in the tilted units
    #: of :func:`pld.tilted_self_compose` (measured: 6e-14 to 7e-14 per step).
    TILTED_CHARGE_PER_STEP = 1e-13

    def _tilted_pld(self, delta: float, estimate: pld_lib.PrivacyLossDistribution | None) -> pld_lib.PrivacyLossDistribution | None:
        """The composition of a lone self-composed block by exponential tilting
        (:func:`pld.tilted_self_compose`), or None where it does not certify better: before the
        extended-precision pass, whose job (a charge below ``DIRECT_SHARE * delta``) it does in
        float64 at a fraction of the cost where it applies. The tilt's point e_min is the sum's
        Chernoff point at a mass C small enough for the charge, and at most the epsilon that
        ``estimate`` (a pass already made, its charge ``R``; None: no such cap) certifies at
        delta + 2 R, direction by direction (below the epsilon wanted); accepted only when its charge is below
        ``DIRECT_SHARE * delta`` and the binding direction's epsilon is above its e_min (no
        direction that decides the answer loosened by the move of the mass below e_min)."""
        if len(self._blocks) != 1 or isinstance(self._blocks[0], MixtureBlock) or self._blocks[0].count < 2:
            return None
        block = self._blocks[0]
        one = self._step(block)
        count, bound = block.count, self.log_mass_truncation_bound
        log_target = math.log(min(1e-4, 0.1 * self.DIRECT_SHARE * delta / (count * self.TILTED_CHARGE_PER_STEP)))
        caps = ([math.inf] * len(one._directions()) if estimate is None else
                [p.epsilon(min(1.0, delta + 2.0 * estimate.roundoff)) for p in estimate._directions()])
        if len(caps) != len(one._directions()):
            return None
        tried = [pld_lib.tilted_self_compose(p, count, bound, log_target, cap) for p, cap in zip(one._directions(), caps)]
        parts = [p for p in tried if p is not None]
        if len(parts) != len(tried):
            return None
        out = pld_lib.PrivacyLossDistribution(parts[0], parts[1] if len(parts) > 1 else None, bound)
        if out.roundoff > self.DIRECT_SHARE * delta:
            return None
        eps = [p.epsilon(delta) for p in out._directions()]
        top = max(eps)
        if not math.isfinite(top) or any(e >= top and e <= (p.offset + 1) * p.interval for p, e in zip(out._directions(), eps)):
            return None
        return out

    #: :meth:`_tail_epsilon` tries a Poisson Gaussian block only where q T (the expected number of
    #: steps that sample a given record) is at least this: with fewer, the sum is a few rare jumps,
    #: the Chernoff floor guess lies above epsilon (measured at q T = 0.01-10 on the ``--sweep``
    #: grid: every such case fell back, after 2-20 ms) and the whole composition answers anyway.
    TAIL_MIN_SAMPLED = 20.0

    def _tail_epsilon(self, delta: float) -> float | None:
        """Epsilon at ``delta`` of a lone self-composed Laplace block, or of a lone self-composed
        Poisson-subsampled Gaussian block with q T >= ``TAIL_MIN_SAMPLED`` at a delta that no plain
        float64 pass certifies (below T 32u / ``DIRECT_SHARE``: the whole composition would need
        direct powers or extended precision), from the composition's upper part only
        (:func:`pld.tail_self_compose`: a window from :func:`pld.tail_floor` up, the mass below
        moved up to the floor; exact at every eps above the floor and pessimistic below it, so each
        direction's epsilon is an upper bound and the binding one's the whole composition's up to
        the charges; the least-charge tilt where the
        shorter circle's charge is above ``DIRECT_SHARE * delta``), or None: another event, a charge
        still above ``DIRECT_SHARE * delta``, an infinite answer, or a binding epsilon within a grid
        point of its floor (the guess was too high: the whole composition answers)."""
        block = self._blocks[0]
        gaussian = (block.kind == Mechanism.GAUSSIAN and block.sampling == Sampling.POISSON
                    and block.q * block.count >= self.TAIL_MIN_SAMPLED
                    and block.count * 32.0 * np.finfo(float).eps > self.DIRECT_SHARE * delta)
        if not (block.kind == Mechanism.LAPLACE or gaussian) or block.count < 2:
            return None
        eps = []
        for part in self._step(block)._directions():
            bins = pld_lib.tail_bins(part, block.count) if gaussian else pld_lib.TAIL_BINS
            floor = pld_lib.tail_floor(part, block.count, delta, bins)
            tail = pld_lib.tail_self_compose(part, block.count, self.log_mass_truncation_bound, floor, bins=bins)
            if tail is not None and tail.roundoff > self.DIRECT_SHARE * delta:  # the least charge instead
                tail = pld_lib.tail_self_compose(part, block.count, self.log_mass_truncation_bound, floor, False, bins)
            if tail is None or tail.roundoff > self.DIRECT_SHARE * delta:
                return None
            eps.append((tail.epsilon(delta), (tail.offset + 1) * tail.interval))
        top = max(e for e, _ in eps)
        if not math.isfinite(top) or any(e >= top and e <= at for e, at in eps):
            return None
        return top

    def _float64_charge_at_least(self) -> float:
        """About the least charge any float64 pass can have (only orders the passes): the inverse
        FFT's own error, at least 16u log2(n) times the composition's finite mass (>= 1/2 where
        epsilon is finite) over n >= the largest step's points (a sum spans at least one step)."""
        points = max((sum(len(d.masses) for d in self._step(b)._directions()) for b in self._blocks
                      if isinstance(b, Block) and b.kind != Mechanism.NON_PRIVATE), default=2)
        return 8.0 * pld_lib._U * math.log2(max(points, 2))

    def _epsilon(self, delta: float) -> float:
        if len(self._blocks) == 1 and isinstance(self._blocks[0], Block):
            # a lone block: randomized response exactly, Laplace by its pure bound, else its upper window
            lone = mechanisms.randomized_response_epsilon(self._blocks[0], self.neighbouring, delta)
            if lone is None:
                lone = mechanisms.laplace_pure_epsilon(self._blocks[0], self.neighbouring, delta)
            if lone is None:
                lone = self._tail_epsilon(delta)
            if lone is not None:
                return lone
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


@memoized_leaf
def _mixture_leaf(event: ev.DpEvent, count: int) -> list[Any]:
    """The pld accountant's items of a leaf event: its blocks, or one :class:`MixtureBlock` for a
    labelled mixture."""
    if type(event) is not ev.LabelledMixtureDpEvent:
        return flatten(event, count)
    parts = tuple((w, tuple(flatten(e, leaf=_mixture_leaf))) for w, e in zip(event.weights, event.events))
    return [MixtureBlock(count, parts)]


@dataclasses.dataclass(frozen=True)
class MixtureBlock:
    """``count`` independent copies of a :class:`~silodp.accounting.events.LabelledMixtureDpEvent`:
    its ``components`` as (weight, blocks) pairs (no blocks: nothing released)."""

    count: int
    components: tuple[tuple[float, tuple[Any, ...]], ...]
    #: no primitive mechanism (the accountants that read ``kind`` find none here)
    kind: ClassVar[None] = None
