"""Section 3.1 / Appendix F.1: lower bounds for smooth convex federated ERM (Theorem 3.3 / F.3).

``thm3.3-isrl``: any compositional, symmetric (eps, delta)-ISRL-DP algorithm has
E||grad F_X(A(X))||^2 = Omega(L^2 min{1, d ln(1/delta)/(eps^2 n^2 N)}); ``thm3.3-sdp``: any SDP
(indeed CDP, via Arora et al. 2022 = Thm F.5) algorithm has the same with N^2.  Rate forms:
Omega constant 1.  Conditions are the informal statement's: eps <= 1 (read "eps <~ 1"),
2^(-nN) <= delta <= 1/(nN) (reading delta <= 1/(nN)^(1+Omega(1)) with the Omega(1) -> 0); the
formal Thm F.3 further needs per-round eps_0^r <~ 1/n, delta_0^r = o(1/(nNR)) and
N >= 16 ln(2/(delta_0^r n)), which concern the algorithm, not the point, and are not encoded.
"""

from __future__ import annotations

import sympy as sp

from silodp.bounds.core import LOWY_2023, Bound, Condition, Kind, Source, Term
from silodp.bounds.registry import register
from silodp.bounds.symbols import LN_INV_DELTA, L, N, d, delta, eps, n

QUANTITY = r"\mathbb{E}\|\nabla\widehat{F}_{\mathbf{X}}(\mathcal{A}(\mathbf{X}))\|^{2}"

LOWER_CONDITIONS = (
    Condition("eps_small", eps <= 1, "eps <~ 1, read as eps <= 1"),
    Condition("delta_range", sp.And(delta >= 2 ** (-n * N), delta <= 1 / (n * N)),
              "2^(-nN) <= delta <= 1/(nN)"),
)
_KIND = dict(problem="ERM", metric="squared gradient norm", form="rate")


def _lower(silo_power: int) -> Term:
    return Term("privacy", L**2 * sp.Min(1, d * LN_INV_DELTA / (eps**2 * n**2 * N**silo_power)))


THM33_ISRL = Bound(
    id="thm3.3-isrl",
    title="ISRL-DP lower bound, smooth convex federated ERM",
    source=Source(LOWY_2023, "Theorem 3.3 (informal) / Theorem F.3", "Section 3.1"),
    kind=Kind("lower", "ISRL-DP", **_KIND),
    terms=(_lower(1),),
    conditions=LOWER_CONDITIONS,
    quantity=QUANTITY,
    notes="Holds for compositional, symmetric algorithms (Definition 6).",
)
THM33_SDP = THM33_ISRL.substitute(
    {}, id="thm3.3-sdp", title="SDP (and CDP) lower bound, smooth convex federated ERM",
    source=Source(LOWY_2023, "Theorem 3.3 (informal) / Theorem F.5 (Arora et al. 2022)", "Section 3.1"),
    kind=Kind("lower", "SDP", **_KIND), terms=(_lower(2),), notes="",
)

register(THM33_ISRL, THM33_SDP)
