"""``gdp``: the exact accountant of un-subsampled Gaussian steps (Gaussian DP)."""

from __future__ import annotations

import math

import numpy as np

from silodp.accounting import gaussian
from silodp.accounting.accountants.base import _ALL_SAMPLING, EXACT, Accountant
from silodp.accounting.accountants.registry import register_accountant
from silodp.accounting.blocks import Block, Mechanism, UnsupportedEventError

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
