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
#: The largest order at which :meth:`RdpAccountant.epsilon_floor` quantizes the pair.
FLOOR_TOP = 64


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

    def _floor_rdp(self, block: Block, orders: np.ndarray) -> np.ndarray | None:
        """A lower bound on the true RDP of ``block`` at ``orders`` (<= what :meth:`_block_rdp`
        charges there, every charge being an upper bound on it), or None where none is known."""
        if block.kind == Mechanism.ZCDP:
            return block.count * block.rho * orders * (1.0 - 1e-12)
        if block.kind != Mechanism.GAUSSIAN or block.sampling not in (Sampling.NONE, Sampling.POISSON):
            return None
        z = self._unit_z(block)
        if not block.subsampled:
            return block.count * rdp_lib.gaussian_rdp(z, orders) * (1.0 - 1e-12)
        # a pair the mechanism attains: the record added (add/remove, shift C), or moved from -C to +C
        # (replace-one, in units of C: rdp_replace's pair)
        a, b, s = ((block.q, block.q, block.noise_multiplier) if self.neighbouring == ev.REPLACE_ONE
                   else (block.q, 0.0, z))
        return block.count * rdp_lib.gaussian_pair_rdp_lower(a, b, s, orders)

    def epsilon_floor(self, delta: float) -> float:
        """A lower bound on :meth:`get_epsilon` at ``delta``, about 10x cheaper, for Gaussian steps
        (plain or Poisson-subsampled) and zCDP blocks (0.0 otherwise): at the orders up to
        :data:`FLOOR_TOP`, the Renyi divergence of a pair each step attains, quantized
        (:func:`silodp.accounting.rdp.gaussian_pair_rdp_lower`: below the true RDP, which every
        charge of :meth:`_block_rdp` bounds from above); at the orders above, the value at
        ``FLOOR_TOP`` (the true D_alpha is nondecreasing in alpha: van Erven & Harremoes 2014,
        Thm 3); then the same conversion as the certificate, order by order, rounded down."""
        if self._non_private() or not self._blocks:
            return 0.0
        orders = np.asarray(RDP_ORDERS)
        low = orders[orders <= FLOOR_TOP]
        total = np.zeros(len(low))
        for block in self._blocks:
            part = self._floor_rdp(block, low)
            if part is None:
                return 0.0
            total += part
        full = np.concatenate([total, np.full(len(orders) - len(low), total[-1])])
        return max(0.0, rdp_lib.epsilon_from_rdp(orders, full, delta) * (1.0 - 1e-9) - 1e-12)
