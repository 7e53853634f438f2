"""Accountants: interpret an event (what each silo releases) as a certified (epsilon, delta).

The interface follows Opacus and dp-accounting: ``compose(event, count)``, ``get_epsilon(delta)``,
``get_delta(epsilon)``, ``supports(event)``, and a registry by name for ``--accountant NAME``.
Every accountant takes the neighbouring relation explicitly; silodp's default is ``REPLACE_ONE``
(ISRL-DP, paper Definition 4: one record of one silo replaced).

Which accountant certifies what (see docs/accounting.md):

* ``rdp`` -- Renyi DP (Mironov 2017; Mironov, Talwar & Zhang 2019 for Poisson subsampling, see
  :mod:`silodp.accounting.rdp`) with the improved RDP -> (eps, delta) conversion
  (Canonne-Kamath-Steinke 2020 / Balle et al. 2020); tested against dp-accounting's. Under
  replace-one, Poisson- and without-replacement-subsampled Gaussians are charged as the
  add/remove Poisson-subsampled Gaussian at sensitivity 2C, which dominates both (BBG18
  advanced joint convexity); with-replacement sampling by the labelled-multiplicity bound.
* ``pld`` -- privacy loss distributions (Koskela et al. 2020; Doroshenko et al. 2022, see
  :mod:`silodp.accounting.pld`), connect-the-dots pessimistic discretization: tight up to the
  discretization. Poisson under replace-one uses the exact replace-one pair; with-replacement
  sampling the labelled-multiplicity bound; tested against dp-accounting's PLD library.
* ``zcdp`` -- Gaussian steps without subsampling only (paper Prop D.2 + Lemma D.1), converted by
  Canonne-Kamath-Steinke 2020 (``conversion="paper"`` gives paper Prop D.1).
* ``advanced`` -- per-step (eps, delta) from the analytic Gaussian (Balle-Wang 2018) and BBG18
  subsampling (incl. *with replacement*, Thm 10), composed optimally (Kairouz-Oh-Viswanath 2015).
* ``dwork-roth`` -- the same per-step budgets composed by Dwork-Roth Thm 3.20 (paper Thm D.1).
"""

from __future__ import annotations

import abc
import math
from typing import Callable

import numpy as np

from silodp.accounting import composition, gaussian, pld as pld_lib, rdp as rdp_lib, subsampling, zcdp
from silodp.accounting import events as ev
from silodp.accounting._checks import check_count, check_delta, check_nonnegative, check_positive
from silodp.accounting._numerics import monotone_root
from silodp.accounting.blocks import Block, UnsupportedEventError, flatten

#: dp-accounting's default orders (1.1 ... 10.9 by 0.1, 11 ... 63, 128 ... 1024) and integer
#: orders up to 4096 (exact and fast).
RDP_ORDERS = tuple(sorted({round(1.0 + x / 10.0, 1) for x in range(1, 100)} | set(range(11, 64))
                          | {128, 256, 512, 1024}
                          | {int(x) for x in np.unique(np.geomspace(12, 4096, 40).astype(int))}))


class Accountant(abc.ABC):
    """Base class: collects blocks; subclasses turn them into (epsilon, delta)."""

    name: str = ""

    def __init__(self, neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE) -> None:
        self.neighbouring = ev.relation(neighbouring)
        self._blocks: list[Block] = []

    def __len__(self) -> int:
        return sum(b.count for b in self._blocks)

    def unsupported_reason(self, event: ev.DpEvent) -> str | None:
        """Why ``event`` cannot be accounted here (``None`` if it can): a dry run of ``compose``."""
        try:
            for block in flatten(event):
                self._check_block(block)
        except UnsupportedEventError as exc:
            return str(exc)
        return None

    def supports(self, event: ev.DpEvent) -> bool:
        return self.unsupported_reason(event) is None

    def compose(self, event: ev.DpEvent, count: int = 1) -> "Accountant":
        blocks = flatten(event, check_count("count", count))
        for block in blocks:
            self._check_block(block)
        self._blocks.extend(blocks)
        return self

    def _check_block(self, block: Block) -> None:
        if block.kind == "gaussian":
            check_positive("noise_multiplier", block.noise_multiplier)
        if block.kind == "gaussian" and block.sampling != "none":
            if not 0 < block.q <= 1:
                raise ValueError(f"sampling probability must lie in (0, 1], got {block.q}")
        self._check(block)

    @abc.abstractmethod
    def _check(self, block: Block) -> None:
        """Raise UnsupportedEventError if this accountant cannot interpret ``block``."""

    @abc.abstractmethod
    def _epsilon(self, delta: float) -> float: ...

    def get_epsilon(self, delta: float) -> float:
        """Certified epsilon at ``delta`` for everything composed so far (rounded up)."""
        dl = check_delta("delta", delta)
        if any(b.kind == "non_private" for b in self._blocks):
            return math.inf
        if not self._blocks:
            return 0.0
        return float(self._epsilon(dl))

    def get_delta(self, epsilon: float) -> float:
        """Certified delta at ``epsilon`` (rounded up); default: invert ``get_epsilon``."""
        eps = check_nonnegative("epsilon", epsilon)
        if any(b.kind == "non_private" for b in self._blocks):
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


class RdpAccountant(Accountant):
    """Renyi-DP accountant (:mod:`silodp.accounting.rdp`) under the dominating relation."""

    name = "rdp"

    def _check(self, block: Block) -> None:
        if block.kind == "epsilon_delta":
            raise UnsupportedEventError("rdp cannot use an (epsilon, delta)-only event; use 'advanced' or 'pld'")
        if block.sampling in ("with_replacement", "without_replacement") and self.neighbouring != ev.REPLACE_ONE:
            raise UnsupportedEventError(f"sampling {block.sampling.replace('_', ' ')} is defined for REPLACE_ONE only")

    def _block_rdp(self, block: Block) -> np.ndarray:
        """RDP curve of one block on RDP_ORDERS. A subsampled step is charged the smaller of its
        subsampled-Gaussian RDP (Mironov, Talwar & Zhang 2019) and the un-sampled Gaussian's
        alpha / (2 z^2): subsampling is post-processing of the full release (data processing),
        so both bound it, and orders where the series did not converge fall back to the latter.
        With replacement: the labelled-multiplicity bound (:mod:`silodp.accounting.rdp`); a record
        drawn twice moves the sum by 4C, so the un-sampled Gaussian does not bound it."""
        orders = np.asarray(RDP_ORDERS)
        if block.kind == "zcdp":
            return block.count * block.rho * orders
        if block.sampling == "with_replacement":
            return block.count * rdp_lib.with_replacement_gaussian_rdp(
                block.noise_multiplier, block.sample_size, block.dataset_size, orders)
        full = orders / (2.0 * block.noise_multiplier ** 2)
        if block.sampling in ("poisson", "without_replacement") and block.q < 1:
            full = np.minimum(rdp_lib.poisson_subsampled_gaussian_rdp(block.q, block.noise_multiplier, orders), full)
        return block.count * full

    def _rdp(self) -> np.ndarray:
        return np.sum([self._block_rdp(b) for b in self._blocks], axis=0)

    def _epsilon(self, delta: float) -> float:
        return rdp_lib.epsilon_from_rdp(RDP_ORDERS, self._rdp(), delta)

    def _delta(self, epsilon: float) -> float:
        return rdp_lib.delta_from_rdp(RDP_ORDERS, self._rdp(), epsilon)


class PldAccountant(Accountant):
    """Privacy-loss-distribution accountant (:mod:`silodp.accounting.pld`, pessimistic)."""

    name = "pld"

    def __init__(self, neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE,
                 value_discretization_interval: float = 1e-4,
                 log_mass_truncation_bound: float = pld_lib.LOG_TAIL_MASS) -> None:
        """``log_mass_truncation_bound``: ln of the noise mass each step may discard; with the
        pessimistic estimate that mass is charged to delta (as infinite privacy loss), so a larger
        bound is faster and still certified, at a cost of about count * e^bound in delta."""
        super().__init__(neighbouring)
        self.value_discretization_interval = check_positive(
            "value_discretization_interval", value_discretization_interval)
        if not log_mass_truncation_bound < 0:
            raise ValueError(f"log_mass_truncation_bound must be < 0, got {log_mass_truncation_bound}")
        self.log_mass_truncation_bound = float(log_mass_truncation_bound)

    def _check(self, block: Block) -> None:
        if block.kind == "zcdp":
            raise UnsupportedEventError("pld cannot use a zCDP event; use 'rdp' or 'zcdp'")
        if block.kind == "gaussian":
            z = block.noise_multiplier
            span = 0.5 / z ** 2 + 20.0 / z  # privacy losses of one Gaussian step, tails included
            if span > pld_lib.MAX_LOSS or span / self.value_discretization_interval > pld_lib.MAX_POINTS:
                raise ValueError(
                    f"noise_multiplier={z:g} is too small for the pld accountant at discretization "
                    f"{self.value_discretization_interval:g} (epsilon is huge); use 'rdp' or a coarser grid")
        if block.sampling in ("with_replacement", "without_replacement") and self.neighbouring != ev.REPLACE_ONE:
            raise UnsupportedEventError(f"sampling {block.sampling.replace('_', ' ')} is defined for REPLACE_ONE only")

    def _block_pld(self, block: Block) -> pld_lib.PrivacyLossDistribution:
        disc, bound = self.value_discretization_interval, self.log_mass_truncation_bound
        if block.kind == "epsilon_delta":
            one = pld_lib.from_privacy_parameters(block.epsilon, block.delta, disc, bound)
        elif block.sampling == "with_replacement":  # labelled-multiplicity bound
            one = pld_lib.from_with_replacement_gaussian(block.noise_multiplier, block.sample_size,
                                                         block.dataset_size, disc, bound)
        elif block.sampling == "poisson" and block.q < 1:
            # under replace-one: the exact replace-one pair (contributions in the ball of radius C)
            one = pld_lib.from_gaussian_mechanism(block.noise_multiplier, block.q, self.neighbouring, disc, bound)
        else:
            # Un-sampled Gaussian (any relation), and without replacement under replace-one
            # (dominated by the add/remove Poisson pair at shift 2C, BBG18).
            q = block.q if block.sampling != "none" else 1.0
            one = pld_lib.from_gaussian_mechanism(block.noise_multiplier, q, ev.ADD_OR_REMOVE_ONE, disc, bound)
        return one.self_compose(block.count)

    def _pld(self) -> pld_lib.PrivacyLossDistribution:
        total = None
        for block in self._blocks:
            p = self._block_pld(block)
            total = p if total is None else total.compose(p)
        return total

    def _epsilon(self, delta: float) -> float:
        return self._pld().get_epsilon_for_delta(delta)

    def _delta(self, epsilon: float) -> float:
        return float(min(1.0, self._pld().get_delta_for_epsilon(epsilon)))


class ZcdpAccountant(Accountant):
    """zCDP accountant for un-sampled Gaussian steps (paper Prop D.2, Lemma D.1)."""

    name = "zcdp"

    def __init__(self, neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE, conversion: str = "tight") -> None:
        super().__init__(neighbouring)
        if conversion not in ("tight", "paper"):
            raise ValueError(f"conversion must be 'tight' or 'paper', got {conversion!r}")
        self.conversion = conversion

    def _check(self, block: Block) -> None:
        if block.kind == "epsilon_delta":
            raise UnsupportedEventError("zcdp cannot use an (epsilon, delta)-only event; use 'advanced'")
        if block.kind == "gaussian" and (block.sampling == "with_replacement"
                                         or (block.sampling != "none" and block.q < 1)):
            raise UnsupportedEventError(
                f"zcdp has no amplification by subsampling ({block.sampling}); use 'rdp', 'pld' or 'advanced'"
            )

    def rho(self) -> float:
        """Total rho of everything composed (Lemma D.1)."""
        return zcdp.compose(
            b.count * (b.rho if b.kind == "zcdp" else 0.5 / b.noise_multiplier ** 2) for b in self._blocks
        )

    def _epsilon(self, delta: float) -> float:
        if self.conversion == "paper":
            return zcdp.epsilon_for_rho_paper(self.rho(), delta)
        return zcdp.epsilon_for_rho(self.rho(), delta)

    def _delta(self, epsilon: float) -> float:
        if self.conversion == "paper":
            return super()._delta(epsilon)
        return zcdp.delta_for_epsilon(self.rho(), epsilon)


def step_epsilon(block: Block, delta: float) -> float:
    """Per-step epsilon of one step of ``block`` at per-step ``delta`` (rounded up)."""
    if block.kind == "epsilon_delta":
        return block.epsilon if delta >= block.delta else math.inf
    z = block.noise_multiplier
    if block.sampling == "none" or (block.sampling != "with_replacement" and block.q >= 1):
        return gaussian.epsilon_for_delta(z, delta)
    if block.sampling in ("poisson", "without_replacement"):
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


class AdvancedAccountant(Accountant):
    """Per-step (eps, delta) composed by an advanced composition theorem.

    The per-step delta is a free choice; the accountant splits the budget as
    ``per-step = eta * delta / steps`` (the rest is the composition slack) and minimizes the total
    epsilon over a grid of ``eta``. Any ``eta`` gives a valid certificate.
    """

    name = "advanced"
    theorem = "kov"
    _ETAS = tuple(np.geomspace(1e-3, 0.9, 16))

    def _check(self, block: Block) -> None:
        if block.kind == "zcdp":
            raise UnsupportedEventError("advanced composition cannot use a zCDP event; use 'zcdp' or 'rdp'")
        if block.sampling == "without_replacement" and self.neighbouring != ev.REPLACE_ONE:
            raise UnsupportedEventError("sampling without replacement is defined for REPLACE_ONE only")

    def _epsilon(self, delta: float) -> float:
        fixed = [b for b in self._blocks if b.kind == "epsilon_delta"]
        flexible = [b for b in self._blocks if b.kind != "epsilon_delta"]
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
            eps_steps = [step_epsilon(b, per_delta) for b in flexible] + [b.epsilon for b in fixed]
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


class DworkRothAccountant(AdvancedAccountant):
    """Advanced composition by Dwork-Roth Theorem 3.20 (paper Thm D.1); heterogeneous steps use
    the same form with sum eps_i^2 (Dwork, Rothblum & Vadhan 2010, Thm III.3)."""

    name = "dwork-roth"
    theorem = "dwork-roth"

    def _compose(self, eps: list[float], dls: list[float], counts: list[int], slack: float, delta: float) -> float:
        e = np.asarray(eps)
        c = np.asarray(counts, dtype=float)
        return float(math.sqrt(2.0 * np.sum(c * e * e) * math.log(1.0 / slack)) + np.sum(c * e * np.expm1(e)))


ACCOUNTANTS: dict[str, Callable[..., Accountant]] = {
    "rdp": RdpAccountant,
    "pld": PldAccountant,
    "zcdp": ZcdpAccountant,
    "advanced": AdvancedAccountant,
    "dwork-roth": DworkRothAccountant,
}


def get_accountant(name: str, neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE, **kwargs) -> Accountant:
    """A fresh accountant by registry name (``rdp``, ``pld``, ``zcdp``, ``advanced``, ``dwork-roth``)."""
    if name not in ACCOUNTANTS:
        raise ValueError(f"accountant must be one of {sorted(ACCOUNTANTS)}, got {name!r}")
    return ACCOUNTANTS[name](neighbouring, **kwargs)


def epsilon(event: ev.DpEvent, delta: float, accountant: str = "pld",
            neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE, **kwargs) -> float:
    """Certified epsilon of ``event`` at ``delta``."""
    return get_accountant(accountant, neighbouring, **kwargs).compose(event).get_epsilon(delta)


def delta(event: ev.DpEvent, epsilon: float, accountant: str = "pld",
          neighbouring: ev.NeighboringRelation = ev.REPLACE_ONE, **kwargs) -> float:
    """Certified delta of ``event`` at ``epsilon``."""
    return get_accountant(accountant, neighbouring, **kwargs).compose(event).get_delta(epsilon)
