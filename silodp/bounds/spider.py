"""Section 3 / Appendix F: FedProx-SPIDER for non-convex/non-smooth composite federated ERM.

Theorems 3.1 and 3.2 (the M = N statements, ids ``thm3.1``, ``thm3.2``), their complete forms
Theorem F.1 (eq. 44, ``thmF.1``) and Theorem F.2 (``thmF.2``), and the explicit intermediate bound
eq. (45) (``eq45``) with tau_1^2, tau_2^2 of the proof of Thm F.1.  The metric is the squared norm
of the proximal gradient mapping E||G_eta(w_priv, X)||^2.  Rate forms set the constants C, C' to 1
and keep only the logs the paper writes.

Prescriptions (proof of Thm F.1): eta = 1/(2 beta), K_1 = K_2 = n, sigma_1, sigma_2 (the noise
per unit ||w_r - w_{r-1}||), sigma2_hat, R and q.  The "paper" variant is as printed; the
"corrected" variant (docs/paper-notes.md) splits the zCDP budget between the two message types and
picks q so that A >= eta/8 in the proof of eq. (45).
"""

from __future__ import annotations

import sympy as sp

from silodp.accounting import papers
from silodp.bounds.core import LOWY_2023, Bound, Condition, Kind, Source, Term
from silodp.bounds.registry import register
from silodp.bounds.symbols import (
    LN_INV_DELTA, Delta, L, M, N, R, beta, d, delta, eps, eta, indicator_lt, n, q, sigma1,
    sigma2,
)

QUANTITY = r"\mathbb{E}\|\widehat{\mathcal{G}}_{\eta}(w_{\mathrm{priv}},\mathbf{X})\|^{2}"
FOUR_THIRDS = sp.Rational(4, 3)
PARTIAL = indicator_lt(M, N)  # 1{M < N}
LN3_DNN = sp.log(d * n * N / delta) ** 3

EPS_ISRL = Condition("eps_range", eps <= 2 * LN_INV_DELTA, "eps <= 2 ln(1/delta)")
EPS_SDP = Condition("eps_range", eps <= LN_INV_DELTA, "eps <= ln(1/delta)")
DELTA_HALF = Condition("delta_range", delta < sp.Rational(1, 2), "delta in (0, 1/2)")
SDP_AVAILABILITY = Condition(
    "sdp_availability",
    M >= (eps * N * d**2 / n**2) ** sp.Rational(1, 3) * (L / sp.sqrt(beta * Delta)) ** sp.Rational(1, 3)
    * (1 + (L / sp.sqrt(beta * Delta)) ** sp.Rational(1, 3)),
    "M >= (eps N d^2/n^2)^(1/3) (L/sqrt(beta Delta))^(1/3) [1 + (L/sqrt(beta Delta))^(1/3)] (Thm F.2)",
)


def _spider_terms(silos: sp.Expr, log_term: sp.Expr, noise_silos: sp.Expr) -> tuple[Term, ...]:
    """The two M = N terms of Thms 3.1/3.2/F.1/F.2; ``noise_silos`` is sqrt(M) or N."""
    return (
        Term("optimization", (sp.sqrt(L * beta * Delta * d * log_term) / (eps * n * noise_silos))
             ** FOUR_THIRDS),
        Term("privacy", L**2 * d * log_term / (eps**2 * n**2 * silos)),
    )


# ------------------------------------------------------------------ Thm F.1 prescriptions
_Y = eps * n * L * sp.sqrt(M) / sp.sqrt(d * LN_INV_DELTA * Delta * beta)


def _q_choice(scale: sp.Expr, cap: sp.Expr) -> sp.Expr:
    """q = floor(min{scale, cap if M < N}), clamped to >= 1 (the proof outputs w_0 if q < 1)."""
    inner = sp.Piecewise((sp.Min(scale, cap), sp.StrictLessThan(M, N)), (scale, True))
    return sp.Max(1, sp.floor(inner))


def _f1_prescription(var_factor: int, q_expr: sp.Expr) -> dict[str, sp.Expr]:
    """Thm F.1's choices; the noise is :func:`silodp.accounting.papers.f1_variances` (one formula)."""
    return {
        "q": q_expr,
        "R": eps * n * sp.sqrt(M * q) * sp.sqrt(Delta * beta) / (L * sp.sqrt(d * LN_INV_DELTA)),
        "eta": 1 / (2 * beta),
        "K": n,
        **dict(zip(("sigma1", "sigma2", "sigma2_hat"), map(sp.sqrt, papers.f1_variances(
            eps, LN_INV_DELTA, L, beta, n, R, q, maximum=sp.Max, constant=var_factor)))),
    }


F1_PAPER = _f1_prescription(16, _q_choice(_Y ** sp.Rational(2, 3), n * M))
# Corrected: variances doubled (two halves of the zCDP budget), q with q eta^2 tau_2^2 <= 1/4.
F1_CORRECTED = _f1_prescription(32, _q_choice((_Y / 512) ** sp.Rational(2, 3), n * M / 16))


def _at_m_equals_n(recipe: dict[str, sp.Expr]) -> dict[str, sp.Expr]:
    return {k: v.subs(M, N) for k, v in recipe.items()}


# ------------------------------------------------------------------ Thm F.2 prescriptions
def _x_sdp(log3: sp.Expr) -> sp.Expr:
    return eps * n * N * L / sp.sqrt(Delta * beta * d * log3)


F2_PAPER = {
    "R": sp.ceiling(eps * n * N / L * sp.sqrt(Delta * beta / (d * LN3_DNN))
                    * sp.Piecewise((sp.Min(sp.sqrt(M * n), _x_sdp(LN3_DNN)), sp.StrictLessThan(M, N)),
                                   (_x_sdp(LN3_DNN), True))),
    "q": sp.floor(sp.Rational(1, 2) * sp.Piecewise(
        (sp.Min(M * n, _x_sdp(sp.log(R * d / delta) ** 3)), sp.StrictLessThan(M, N)),
        (_x_sdp(sp.log(R * d / delta) ** 3), True))),
    "eta": 1 / (2 * beta),
    "K": n,
}
# Corrected (M = N): q ~ x^(2/3) as in Thm F.1 (with q eta^2 tau_2^2 <= 1/4), R ~ sqrt(q).
F2_CORRECTED_M_EQ_N = {
    "q": sp.Max(1, sp.floor(_x_sdp(LN3_DNN) ** sp.Rational(2, 3) / 4)),
    "R": sp.ceiling(eps * n * N / L * sp.sqrt(Delta * beta * q / (d * LN3_DNN))),
    "eta": 1 / (2 * beta),
    "K": n,
}

_RATE = dict(problem="ERM", metric="squared proximal gradient mapping norm", form="rate")

THM31 = Bound(
    id="thm3.1",
    title="ISRL-DP FedProx-SPIDER, non-convex/non-smooth composite ERM (M = N)",
    source=Source(LOWY_2023, "Theorem 3.1", "Section 3"),
    kind=Kind("upper", "ISRL-DP", **_RATE),
    terms=_spider_terms(N, LN_INV_DELTA, sp.sqrt(N)),
    conditions=(EPS_ISRL,),
    prescriptions={"paper": _at_m_equals_n(F1_PAPER), "corrected": _at_m_equals_n(F1_CORRECTED)},
    quantity=QUANTITY,
    notes="Hidden constant C' = 1.",
)

THMF1 = Bound(
    id="thmF.1",
    title="ISRL-DP FedProx-SPIDER, M <= N silos per round",
    source=Source(LOWY_2023, "Theorem F.1", "eq. (44)"),
    kind=Kind("upper", "ISRL-DP", **_RATE),
    terms=_spider_terms(M, LN_INV_DELTA, sp.sqrt(M)) + (
        Term("sampling-optimization",
             PARTIAL * L * sp.sqrt(beta * Delta * d * LN_INV_DELTA) / (eps * n ** sp.Rational(3, 2) * M)),
        Term("sampling", PARTIAL * L**2 / (M * n)),
    ),
    conditions=(EPS_ISRL,),
    prescriptions={"paper": F1_PAPER, "corrected": F1_CORRECTED},
    quantity=QUANTITY,
    notes="Hidden constant C' = 1.",
)

THM32 = Bound(
    id="thm3.2",
    title="SDP FedProx-SPIDER, non-convex/non-smooth composite ERM (M = N)",
    source=Source(LOWY_2023, "Theorem 3.2", "Section 3"),
    kind=Kind("upper", "SDP", **_RATE),
    terms=_spider_terms(N**2, LN_INV_DELTA, N),
    conditions=(EPS_SDP, DELTA_HALF),
    prescriptions={"paper": _at_m_equals_n(F2_PAPER), "corrected": F2_CORRECTED_M_EQ_N},
    quantity=QUANTITY,
    notes="O-tilde: ln^3 factors of Thm F.2 dropped, ln(1/delta) kept.",
)

THMF2 = Bound(
    id="thmF.2",
    title="SDP FedProx-SPIDER, M <= N silos per round (logs as printed)",
    source=Source(LOWY_2023, "Theorem F.2", "Appendix F"),
    kind=Kind("upper", "SDP", **_RATE),
    terms=(
        Term("optimization", (sp.sqrt(L * beta * Delta * d * LN3_DNN) / (eps * n * N)) ** FOUR_THIRDS),
        Term("privacy", d * L**2 * sp.log(R * d / (q * delta)) ** 3 / (eps**2 * n**2 * N**2)),
        Term("sampling-optimization",
             PARTIAL * L * sp.sqrt(beta * Delta * d * LN3_DNN)
             / (eps * n ** sp.Rational(3, 2) * N * sp.sqrt(M))),
        Term("sampling", PARTIAL * L**2 / (M * n)),
    ),
    conditions=(EPS_SDP, DELTA_HALF, SDP_AVAILABILITY),
    prescriptions={"paper": F2_PAPER},
    quantity=QUANTITY,
    notes="The privacy term's ln^3(Rd/(q delta)) uses the prescribed R and q unless given.",
)

# ------------------------------------------------------------------ eq. (45)
TAU1_SQ = 2 * L**2 / (M * n) * PARTIAL + d * sigma1**2 / M
TAU2_SQ = 8 * (beta**2 / (M * n) * PARTIAL + d * sigma2**2 / M)
ETA_HALF_BETA = Condition(
    "eta_is_1_over_2beta", sp.Abs(2 * beta * eta - 1) <= sp.Rational(1, 10**9), "eta = 1/(2 beta)"
)


def _eq45(bound_id: str, constant: int, q_limit: sp.Expr, recipe: dict, title: str, eqn: str) -> Bound:
    return Bound(
        id=bound_id,
        title=title,
        source=Source(LOWY_2023, "Proof of Theorem F.1", eqn),
        kind=Kind("upper", "ISRL-DP", "ERM", "squared proximal gradient mapping norm", "explicit"),
        terms=(
            Term("optimization", constant * Delta / (eta * R)),
            Term("sampling", constant * 2 * L**2 / (M * n) * PARTIAL),
            Term("privacy", constant * d * sigma1**2 / M),
        ),
        conditions=(
            ETA_HALF_BETA,
            Condition("q_small", q * eta**2 * TAU2_SQ <= q_limit,
                      f"q eta^2 tau_2^2 <= {q_limit}, tau_2^2 = 8(beta^2/(Mn) 1{{M<N}} + d sigma_2^2/M)"),
        ),
        prescriptions={"paper": recipe},
        quantity=QUANTITY,
        notes="tau_1^2 = 2L^2/(Mn) 1{M<N} + d sigma_1^2/M; sigma_2 is per unit ||w_r - w_{r-1}||.",
    )


EQ45 = _eq45("eq45", 16, 1, F1_PAPER,
             "FedProx-SPIDER explicit bound 16(Delta/(eta R) + tau_1^2) (as printed)", "eq. (45)")
EQ45_CORRECTED = _eq45(
    "eq45-corrected", 20, sp.Rational(1, 4), F1_CORRECTED,
    "FedProx-SPIDER explicit bound with A >= eta/8: 20(Delta/(eta R) + tau_1^2)",
    "eq. (45) re-derived from (46)",
)

register(THM31, THMF1, THM32, THMF2, EQ45, EQ45_CORRECTED)
