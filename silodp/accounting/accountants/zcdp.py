"""``zcdp``: the zCDP accountant of un-sampled Gaussian steps (paper Prop D.2, Lemma D.1)."""

from __future__ import annotations

from silodp.accounting import events as ev, zcdp
from silodp.accounting.accountants.base import _ALL_SAMPLING, Accountant
from silodp.accounting.accountants.registry import register_accountant
from silodp.accounting.blocks import Block, Mechanism, UnsupportedEventError

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
