"""``rdp``: the Renyi-DP accountant (:mod:`silodp.accounting.rdp`) and its orders."""

from __future__ import annotations

import numpy as np

from silodp.accounting import events as ev, rdp as rdp_lib
from silodp.accounting.accountants.base import _ALL_SAMPLING, TIGHT, Accountant
from silodp.accounting.accountants.registry import register_accountant
from silodp.accounting.blocks import Block, Mechanism, Sampling

#: dp-accounting's default orders (1.1 ... 10.9 by 0.1, 11 ... 63, 128 ... 1024) and integer
#: orders up to 4096 (exact and fast).
RDP_ORDERS = tuple(sorted({round(1.0 + x / 10.0, 1) for x in range(1, 100)} | set(range(11, 64))
                          | {128, 256, 512, 1024}
                          | {int(x) for x in np.unique(np.geomspace(12, 4096, 40).astype(int))}))



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
        return rdp_lib.epsilon_from_rdp(np.asarray(RDP_ORDERS), self._rdp(), delta)

    def _delta(self, epsilon: float) -> float:
        return rdp_lib.delta_from_rdp(np.asarray(RDP_ORDERS), self._rdp(), epsilon)
