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
  replacement the symmetric pair of :func:`silodp.accounting.pld_pairs.from_without_replacement_gaussian`
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

One module per accountant (as Opacus' ``opacus/accountants/``): :mod:`.base` (the interface),
:mod:`.registry` (the registry by name), :mod:`.gdp`, :mod:`.rdp`, :mod:`.pld`, :mod:`.zcdp`,
:mod:`.advanced` (``advanced``, ``dwork-roth``), :mod:`.pvec` (``pvec``, ``pvec-pld``). This package
re-exports their names; a new accountant is one new file (here or in ``silodp/accounting/``) whose
class is decorated ``@register_accountant``.
"""

from silodp.accounting.accountants.base import (  # noqa: F401 (re-exported)
    _ALL_SAMPLING, DEFAULT_RELATION, EXACT, FALLBACK, REFUSALS, TIGHT, Accountant, CalibrationSettings, as_silodp_event,
    neighbouring_arg)
from silodp.accounting.accountants.registry import (
    ACCOUNTANTS, accountant_choices, delta, epsilon, get_accountant, register_accountant, unregister_accountant)
from silodp.accounting.accountants.gdp import GdpAccountant
from silodp.accounting.accountants.rdp import RDP_ORDERS, RdpAccountant
from silodp.accounting.accountants.pld import (PLD_BIAS, PLD_BUILDERS, MixtureBlock, PldAccountant, pld_builder,
                                              pld_discretization)
from silodp.accounting.accountants.zcdp import ZcdpAccountant
from silodp.accounting.accountants.advanced import AdvancedAccountant, DworkRothAccountant, step_epsilon
from silodp.accounting.accountants.pvec import PvecAccountant, PvecPldAccountant, pvec_items

__all__ = ["ACCOUNTANTS", "DEFAULT_RELATION", "EXACT", "FALLBACK", "PLD_BIAS", "PLD_BUILDERS", "RDP_ORDERS", "TIGHT", "Accountant",
           "AdvancedAccountant", "CalibrationSettings", "DworkRothAccountant", "GdpAccountant", "MixtureBlock",
           "PldAccountant", "PvecAccountant", "PvecPldAccountant", "RdpAccountant", "ZcdpAccountant",
           "accountant_choices", "as_silodp_event", "delta", "epsilon", "get_accountant", "neighbouring_arg",
           "pld_builder", "pld_discretization", "pvec_items", "register_accountant", "step_epsilon", "unregister_accountant"]
