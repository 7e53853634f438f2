"""``advanced`` and ``dwork-roth``: per-step (epsilon, delta) composed by an advanced composition theorem."""

from __future__ import annotations

import math
from typing import ClassVar

import numpy as np

from silodp.accounting import composition, events as ev, gaussian, subsampling
from silodp.accounting._numerics import monotone_root
from silodp.accounting.accountants.base import _ALL_SAMPLING, FALLBACK, Accountant
from silodp.accounting.accountants.registry import register_accountant
from silodp.accounting.blocks import Block, Mechanism, Sampling, flatten

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
    candidacy: ClassVar[str | None] = FALLBACK
    candidate_rank = 3
    theorem: ClassVar[str] = "kov"
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
    theorem: ClassVar[str] = "dwork-roth"

    def _compose(self, eps: list[float], dls: list[float], counts: list[int], slack: float, delta: float) -> float:
        return composition.dwork_roth_epsilon(eps, counts, slack)
