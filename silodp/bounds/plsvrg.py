"""Section 2.2 / Appendix E.3-E.4: Prox-PL-SVRG for proximal-PL federated ERM.

Theorem 2.2 (M = N) and its complete statement Theorem E.2 (M <= N, heterogeneity term) of
Lowy, Ghafelebashi & Razaviyayn (2023).  Rate forms: hidden constants 1; the O-tilde logs
(e.g. ln^2(d kappa/delta) of eq. 43) are dropped, ln(1/delta) is kept.  Prescriptions follow
Thm E.2: sigma_1, sigma_2, K, R = 12 kappa, S, eta (proof of E.2 part 1), and E = R/Q, Q = n/K;
variant "halving": R = 48 kappa and sigma_2 over the E Q messages sent (docs/paper-notes.md, 29-30).
"""

from __future__ import annotations

import sympy as sp

from silodp.accounting import papers
from silodp.bounds.core import LOWY_2023, Bound, Condition, Kind, Source, Term
from silodp.bounds.registry import register
from silodp.bounds.symbols import (
    LN_INV_DELTA, SILO_SAMPLING, Delta, E, K, L, M, N, R, S, beta, d, delta, eps, eta, kappa, mu, n,
    sigma1, sigma2, upsilon,
)

QUANTITY_ERM = r"\mathbb{E}\widehat{F}_{\mathbf{X}}(w_{\mathrm{priv}})-\widehat{F}_{\mathbf{X}}^{*}"
LN_2_DELTA = sp.log(2 / delta)

EPS_RANGE = Condition(
    "eps_range", sp.And(eps <= 15, eps <= 2 * LN_2_DELTA), "eps <= min{15, 2 ln(2/delta)}"
)
DELTA_RANGE = Condition("delta_range", delta < sp.Rational(1, 2), "delta in (0, 1/2)")
SDP_AVAILABILITY = Condition(
    "sdp_availability",
    M >= sp.Min(
        (eps * N * L) ** sp.Rational(3, 4) * (d * sp.log(d / delta) ** 3) ** sp.Rational(3, 8)
        / (n ** sp.Rational(1, 4) * (beta * Delta) ** sp.Rational(3, 8)),
        N,
    ),
    "M >= min{(eps N L)^(3/4) (d ln^3(d/delta))^(3/8) / (n^(1/4) (beta Delta)^(3/8)), N} (Thm E.2.2)",
)



def _prescription(silos: sp.Expr, restarts_scale: sp.Expr, sigma2_const: int, sigma2_log: sp.Expr,
                  rounds: sp.Expr = 12 * kappa, sent: bool = False):
    """Thm E.2's parameter choices; ``silos`` is M (or N when M = N). ``rounds``: R (12 kappa as
    printed); ``sent``: sigma_2 counts the E Q = E floor(n/K) >= R messages really sent (Alg 1 runs
    E = ceil(R/Q) whole epochs) instead of R (docs/paper-notes.md, notes 29-30)."""
    messages = E * sp.floor(n / K) if sent else R
    return {
        "R": rounds,
        "S": sp.Max(1, sp.ceiling(sp.log(restarts_scale, 2))),
        "K": sp.ceiling(sp.Max((n**2 / silos) ** sp.Rational(1, 3),
                               eps * n / (4 * sp.sqrt(2 * S * R * LN_2_DELTA)))),
        "E": sp.Max(1, sp.ceiling(R / sp.floor(n / K))),
        "eta": sp.Min(1, K ** sp.Rational(3, 2) * sp.sqrt(silos) / n) / (8 * beta),
        **dict(zip(("sigma1", "sigma2"), map(sp.sqrt, papers.e2_variances(
            eps, delta, L, n, E, messages, S, log=sp.log, sigma2_constant=sigma2_const,
            sigma2_log_argument=sigma2_log.subs(R, messages))))),
    }


_ISRL_SCALE = Delta * mu * M * eps**2 * n**2 / (kappa * d * L**2)
_SDP_SCALE = Delta * mu * eps**2 * N**2 * n**2 / (kappa * d * L**2)
_HALF = sp.Rational(5, 2)
# As stated in Thm E.2: sigma_2^2 = 1024 L^2 S R ln(2/delta) ln(2.5 R/delta) / (eps n)^2.
ISRL_PAPER = _prescription(M, _ISRL_SCALE, 1024, _HALF * R)
# Corrected: ln(5R/delta) as in the proof, and 4096 = 2 (4L)^2 * 128 for sensitivity 4L/K.
ISRL_CORRECTED = _prescription(M, _ISRL_SCALE, 4096, 5 * R)
# Halving: eq. (38) with the 8 of eta = min(1, K^(3/2) sqrt(M)/n)/(8 beta) kept gives 24 Delta kappa / R
# per restart (K >= (n^2/M)^(1/3) makes the min 1), so R = 48 kappa halves the gap; sigma_2 over the
# E Q messages really sent (the corrected constants).
ISRL_HALVING = _prescription(M, _ISRL_SCALE, 4096, 5 * R, rounds=48 * kappa, sent=True)
SDP_PAPER = {k: v for k, v in _prescription(M, _SDP_SCALE, 1024, _HALF * R).items()
             if k in ("R", "S", "K", "E", "eta")}


def _at_m_equals_n(recipe: dict[str, sp.Expr]) -> dict[str, sp.Expr]:
    return {k: v.subs(M, N) for k, v in recipe.items()}


_RATE = dict(problem="ERM", metric="excess empirical risk", form="rate")
_PRIVACY_ISRL = Term("privacy", kappa * L**2 * d * LN_INV_DELTA / (mu * eps**2 * n**2 * M))
_PRIVACY_SDP = Term("privacy", kappa * L**2 * d * LN_INV_DELTA / (mu * eps**2 * n**2 * N**2))

THM22_ISRL = Bound(
    id="thm2.2-isrl",
    title="ISRL-DP Prox-PL-SVRG, proximal-PL federated ERM (M = N)",
    source=Source(LOWY_2023, "Theorem 2.2 part 1", "Section 2.2"),
    kind=Kind("upper", "ISRL-DP", **_RATE),
    terms=(Term("privacy", _PRIVACY_ISRL.expr.subs(M, N)),),
    conditions=(EPS_RANGE, DELTA_RANGE),
    prescriptions={"paper": _at_m_equals_n(ISRL_PAPER), "corrected": _at_m_equals_n(ISRL_CORRECTED),
                   "halving": _at_m_equals_n(ISRL_HALVING)},
    quantity=QUANTITY_ERM,
    notes="O-tilde logs dropped except ln(1/delta); O-tilde(kappa) = S R rounds.",
)

THM22_SDP = Bound(
    id="thm2.2-sdp",
    title="SDP Prox-PL-SVRG, proximal-PL federated ERM (M = N)",
    source=Source(LOWY_2023, "Theorem 2.2 part 2", "Section 2.2"),
    kind=Kind("upper", "SDP", **_RATE),
    terms=(_PRIVACY_SDP,),
    conditions=(EPS_RANGE, DELTA_RANGE),
    prescriptions={"paper": _at_m_equals_n(SDP_PAPER)},
    quantity=QUANTITY_ERM,
    notes="O-tilde logs (ln^2(d kappa/delta) of eq. 43) dropped except ln(1/delta).",
)

THME2_ISRL = Bound(
    id="thmE.2-isrl",
    title="ISRL-DP Prox-PL-SVRG, M <= N with heterogeneity (as printed)",
    source=Source(LOWY_2023, "Theorem E.2 part 1", "Appendix E.4"),
    kind=Kind("upper", "ISRL-DP", **_RATE),
    terms=(_PRIVACY_ISRL, Term("heterogeneity", SILO_SAMPLING * upsilon**2)),
    conditions=(EPS_RANGE, DELTA_RANGE),
    prescriptions={"paper": ISRL_PAPER, "corrected": ISRL_CORRECTED, "halving": ISRL_HALVING},
    quantity=QUANTITY_ERM,
    notes="As printed the heterogeneity term has no 1/mu, unlike eq. (40): see thmE.2-isrl-corrected.",
)

THME2_ISRL_CORRECTED = Bound(
    id="thmE.2-isrl-corrected",
    title="ISRL-DP Prox-PL-SVRG, M <= N, heterogeneity term with 1/mu as in eq. (40)",
    source=Source(LOWY_2023, "Theorem E.2 part 1, proof", "eq. (40)"),
    kind=Kind("upper", "ISRL-DP", **_RATE),
    terms=(_PRIVACY_ISRL, Term("heterogeneity", SILO_SAMPLING * upsilon**2 / mu)),
    conditions=(EPS_RANGE, DELTA_RANGE),
    prescriptions={"paper": ISRL_CORRECTED},
    quantity=QUANTITY_ERM,
)

THME2_SDP = Bound(
    id="thmE.2-sdp",
    title="SDP Prox-PL-SVRG, M <= N with heterogeneity",
    source=Source(LOWY_2023, "Theorem E.2 part 2", "Appendix E.4, eq. (43)"),
    kind=Kind("upper", "SDP", **_RATE),
    terms=(_PRIVACY_SDP, Term("heterogeneity", SILO_SAMPLING * upsilon**2 / mu)),
    conditions=(EPS_RANGE, DELTA_RANGE, SDP_AVAILABILITY),
    prescriptions={"paper": SDP_PAPER},
    quantity=QUANTITY_ERM,
)

# ---------------------------------------------------------------- eq. (38) with the 8 kept, restarted
#: the per-restart contraction 3/(eta mu R) of the summed recursion of Thm E.2's proof (R = E Q inner
#: steps); 24 kappa/R at eta = 1/(8 beta) (docs/paper-notes.md, note 29)
RHO = 3 / (eta * mu * R)
EQ40_RESTARTS = Bound(
    id="eq40-restarts",
    title="ISRL-DP FedProx-PL-SVRG after S restarts: rho^S Delta + C/(1 - rho), rho = 3/(eta mu R)",
    source=Source(LOWY_2023, "Proof of Theorem E.2 part 1", "eqs. (37)-(38), 8 of eta kept"),
    kind=Kind("upper", "ISRL-DP", "ERM", "excess empirical risk", "explicit"),
    terms=(
        Term("optimization", RHO**S * Delta),
        Term("heterogeneity", 3 * SILO_SAMPLING * upsilon**2 / (mu * (1 - RHO))),
        Term("privacy", 3 * d * (sigma1**2 + sigma2**2) / (2 * mu * M * (1 - RHO))),
    ),
    conditions=(Condition("contracts", eta * mu * R >= 6, "rho = 3/(eta mu R) <= 1/2 (R >= 48 kappa at eta = 1/(8 beta))"),
                Condition("eta_small", eta * beta <= sp.Rational(1, 8) + sp.Rational(1, 10**9), "eta <= 1/(8 beta)")),
    prescriptions={"paper": ISRL_HALVING},
    quantity=QUANTITY_ERM,
    notes="Averaging the summed recursion over the R = E Q inner iterates of each restart (the uniform "
          "output of Alg 1) gives E[F(w_s) - F*] <= rho E[F(w_{s-1}) - F*] + C, C the last two terms x (1 - rho); "
          "sigma_1, sigma_2 are the declared noise of the run.",
)

register(THM22_ISRL, THM22_SDP, THME2_ISRL, THME2_ISRL_CORRECTED, THME2_SDP, EQ40_RESTARTS)
