"""Appendix G: bounds for algorithms that are both ISRL-DP and user-level DP (cross-device FL).

With an (eps, delta) target and eps <= 1, run the ISRL-DP algorithm at eps_0 = eps/n and
delta_0 = delta/(4n) (Appendix B makes it (eps, delta) user-level DP).  ``appG-pl`` is eq. (49) as
printed; ``appG-pl-derived`` substitutes eps_0, delta_0 into Thm 2.1 (M = N), which eq. (49) does
not reproduce (docs/paper-notes.md).  ``appG-spider`` and ``appG-nonconvex-lower`` follow "a
similar procedure" for Thms 3.1 and 3.3; ``appG-lower`` is Lowy-Razaviyayn 2021b with n = 1.
"""

from __future__ import annotations

import sympy as sp

from silodp.bounds.comparators import LR2021B
from silodp.bounds.core import LOWY_2023, Bound, Condition, Kind, Source, Term
from silodp.bounds.lower import THM33_ISRL
from silodp.bounds.proxsgd import THM21_ISRL
from silodp.bounds.registry import register
from silodp.bounds.spider import THM31
from silodp.bounds.symbols import L, M, N, d, delta, eps, kappa, mu, n

LN_DELTA0 = sp.log(4 * n / delta)  # ln(1/delta_0), delta_0 = delta/(4n)
HYBRID = {eps: eps / n, delta: delta / (4 * n)}
EPS_LE_1 = Condition("eps_le_1", eps <= 1, "eps <= 1 (Appendix G)")


def _source(how: str) -> Source:
    return Source(LOWY_2023, "Appendix G", how)


def _derive(base: Bound, bound_id: str, title: str, how: str, subs: dict | None = None) -> Bound:
    kind = Kind(base.kind.direction, "ISRL-DP+user-level", base.kind.problem, base.kind.metric)
    return base.substitute(
        {**HYBRID, **(subs or {})}, id=bound_id, title=title, source=_source(how), kind=kind,
        conditions=(EPS_LE_1,), notes=f"Derived from {base.id} with eps -> eps/n, delta -> delta/(4n).",
    )


APPG_PL = Bound(
    id="appG-pl",
    title="ISRL-DP + user-level DP Prox-SGD, proximal-PL SO (as printed)",
    source=_source("eq. (49)"),
    kind=Kind("upper", "ISRL-DP+user-level", "SO", "excess risk"),
    terms=(
        Term("privacy", L**2 / mu * kappa**2 * sp.sqrt(d * LN_DELTA0) / (eps**2 * sp.sqrt(N))),
        Term("statistical", L**2 / mu * kappa / sp.sqrt(N * n)),
    ),
    conditions=(EPS_LE_1,),
    quantity=r"\mathbb{E}F(\widehat{w}_{R})-F(w^{*})",
    notes="As printed (square roots do not follow from Thm 2.1): see appG-pl-derived.",
)

APPG_PL_DERIVED = _derive(THM21_ISRL, "appG-pl-derived",
                          "ISRL-DP + user-level DP Prox-SGD: Thm 2.1 at eps/n, delta/(4n), M = N",
                          "Thm 2.1 with eps_0 = eps/n, delta_0 = delta/(4n)", {M: N})
APPG_SPIDER = _derive(THM31, "appG-spider",
                      "ISRL-DP + user-level DP FedProx-SPIDER: Thm 3.1 at eps/n, delta/(4n)",
                      "Thm 3.1 with eps_0 = eps/n, delta_0 = delta/(4n)")
APPG_NONCONVEX_LOWER = _derive(THM33_ISRL, "appG-nonconvex-lower",
                               "ISRL-DP + user-level DP lower bound: Thm 3.3 at eps/n, delta/(4n)",
                               "Thm 3.3 with eps_0 = eps/n, delta_0 = delta/(4n)")
APPG_LOWER = LR2021B.substitute(
    {n: 1}, id="appG-lower",
    title="ISRL-DP + user-level DP strongly convex lower bound (Lowy-Razaviyayn 2021b, n = 1)",
    source=_source("Lowy & Razaviyayn 2021b lower bound with n = 1"),
    kind=Kind("lower", "ISRL-DP+user-level", "SO", "excess risk"),
    conditions=(EPS_LE_1,),
    notes="Each silo's data set is one 'record'.",
)

register(APPG_PL, APPG_PL_DERIVED, APPG_SPIDER, APPG_NONCONVEX_LOWER, APPG_LOWER)
