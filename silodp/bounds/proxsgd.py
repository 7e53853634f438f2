"""Section 2.1 / Appendix E.1-E.2: Noisy Prox-SGD for heterogeneous proximal-PL FL (SO).

Theorem 2.1 (restated as Theorem E.1) of Lowy, Ghafelebashi & Razaviyayn (2023).  Rate forms
(``thm2.1-isrl``, ``thm2.1-sdp``; eqs. 4-7) set the hidden constants to 1 and drop the O-tilde
factor ln^2(mu Delta / L^2 min{...}) of the last display of the proof; the logs the paper writes
explicitly (ln(1/delta), ln^2(d/delta)) are kept.  Explicit forms (``eq20``, ``eq22``) carry the
proof's constants and keep R and K as parameters (prescribed by Thm E.1 when not given).

M < N with heterogeneous silos. Eqs. (11)-(13) treat the per-sample gradient errors
``grad F(w_r) - grad f(w_r, x_ij)`` as zero-mean, but x_ij ~ D_i has mean ``grad F_i(w_r)``; over
the M silos drawn out of N the mean error carries the silo-sampling variance
``(N - M)/((N - 1) M) * (1/N) sum_i ||grad F_i - grad F||^2 <= SILO_SAMPLING * upsilon^2`` (the
term Thm E.2 carries; Lemma E.3).  The bounds as printed therefore state the condition
``full_participation`` (M >= N), false for M < N; the ``*-sampling`` bounds add the missing term
(rate form ``SILO_SAMPLING upsilon^2 / mu``; explicit form ``2 SILO_SAMPLING upsilon^2 / mu``: the
term enters eq. (18) doubled like (13)'s, then the geometric sum <= 2 beta / mu) and need the
parameter ``upsilon`` (docs/paper-notes.md, note 28).
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from silodp.accounting import papers
from silodp.bounds.core import LOWY_2023, Bound, Condition, Kind, Source, Term
from silodp.bounds.registry import register
from silodp.bounds.symbols import (
    LN_INV_DELTA, SILO_SAMPLING, Delta, K, L, M, N, R, d, delta, eps, kappa, mu, n, upsilon,
)

LN2_D_DELTA = sp.log(d / delta) ** 2
PREFACTOR = L**2 / mu
QUANTITY_SO = r"\mathbb{E}F(w_R)-F^{*}"

# Hypotheses of Theorem 2.1 / E.1 (as printed).
EPS_RANGE = Condition(
    "eps_range", sp.And(eps <= 8 * LN_INV_DELTA, eps <= 15), "eps <= min{8 ln(1/delta), 15}"
)
DELTA_RANGE = Condition("delta_range", delta < sp.Rational(1, 2), "delta in (0, 1/2)")
N_LARGE = Condition("n_large", n >= kappa, "n >= Omega-tilde(kappa), read as n >= kappa")
KAPPA_GE_1 = Condition("kappa_ge_1", kappa >= 1, "kappa = beta/mu >= 1 (PL: mu <= beta)")
SDP_AVAILABILITY = Condition(
    "sdp_availability", M >= N * sp.Min(eps / 2, 1), "M >= N min(eps/2, 1) (SDP part)"
)
K_FITS = Condition("K_fits", K * R <= n, "K <= n/R (disjoint batches, parallel composition)")
FULL_PARTICIPATION = Condition(
    "full_participation", M >= N,
    "M = N: eqs. (11)-(13) drop the silo-sampling variance (N-M)/((N-1)M) upsilon^2 when M < N "
    "(use the *-sampling bound)",
)


def _rounds(privacy_scale: sp.Expr) -> sp.Expr:
    """Thm E.1's R = ceil(2 kappa ln(mu Delta / L^2 min{Mn, privacy_scale})), clamped to >= 1."""
    return sp.Max(1, sp.ceiling(2 * kappa * sp.log(mu * Delta / L**2 * sp.Min(M * n, privacy_scale))))


_R_ISRL = _rounds(eps**2 * n**2 * M / (d * LN_INV_DELTA))
_R_SDP = _rounds(eps**2 * n**2 * N**2 / (d * LN_INV_DELTA))


def _batch(rounds: sp.Expr) -> sp.Expr:
    """K = floor(n / R), clamped to >= 1."""
    return sp.Max(1, sp.floor(n / rounds))


_ISRL_PRESCRIPTION = {
    "R": _R_ISRL,
    "K": _batch(R),
    # Proof of Thm E.1 (privacy): sigma^2 >= 8 L^2 ln(1/delta) / (eps^2 K^2).
    "sigma": sp.sqrt(papers.e1_variance(eps, LN_INV_DELTA, L, K)),
}
_ISRL_PRESCRIPTION_CORRECTED = {
    **_ISRL_PRESCRIPTION,
    # Prop D.2 with l2-sensitivity 2L/K: sigma^2 >= 4 (2L/K)^2 ln(1/delta) / eps^2.
    "sigma": sp.sqrt(papers.e1_variance(eps, LN_INV_DELTA, L, K, constant=16)),
}
_SDP_PRESCRIPTION = {"R": _R_SDP, "K": _batch(R)}

_KIND_RATE = dict(problem="SO", metric="excess risk", form="rate")
_KIND_EXPLICIT = dict(problem="SO", metric="excess risk", form="explicit")

THM21_ISRL = Bound(
    id="thm2.1-isrl",
    title="ISRL-DP Noisy Prox-SGD, heterogeneous proximal-PL FL",
    source=Source(LOWY_2023, "Theorem 2.1 part 1 / Theorem E.1 part 1", "eq. (4), (6)"),
    kind=Kind("upper", "ISRL-DP", **_KIND_RATE),
    terms=(
        Term("privacy", PREFACTOR * kappa**2 * d * LN_INV_DELTA / (eps**2 * n**2 * M)),
        Term("statistical", PREFACTOR * kappa / (M * n)),
    ),
    conditions=(EPS_RANGE, DELTA_RANGE, N_LARGE, KAPPA_GE_1, FULL_PARTICIPATION),
    prescriptions={"paper": _ISRL_PRESCRIPTION, "corrected": _ISRL_PRESCRIPTION_CORRECTED},
    quantity=QUANTITY_SO,
    notes="O-tilde: the factor ln^2(mu Delta/L^2 min{Mn, eps^2 n^2 M/d}) is dropped.",
)

THM21_SDP = replace(
    THM21_ISRL,
    id="thm2.1-sdp",
    title="SDP Noisy Prox-SGD, heterogeneous proximal-PL FL",
    source=Source(LOWY_2023, "Theorem 2.1 part 2 / Theorem E.1 part 2", "eq. (5), (7)"),
    kind=Kind("upper", "SDP", **_KIND_RATE),
    terms=(Term("privacy", PREFACTOR * kappa**2 * d * LN2_D_DELTA / (eps**2 * n**2 * N**2)),
           THM21_ISRL.terms[1]),
    conditions=(EPS_RANGE, DELTA_RANGE, N_LARGE, KAPPA_GE_1, SDP_AVAILABILITY, FULL_PARTICIPATION),
    prescriptions={"paper": _SDP_PRESCRIPTION},
    notes="O-tilde: the factor ln^2(mu Delta/L^2 min{Mn, eps^2 n^2 N^2/d}) is dropped.",
)

_OPTIMIZATION = Term("optimization", Delta * (1 - 1 / (2 * kappa)) ** R)


def _explicit(bound_id: str, title: str, part: str, eqn: str, privacy: sp.Expr, statistical: sp.Expr,
              sdp: bool, prescriptions: dict, notes: str) -> Bound:
    """An explicit Prox-SGD bound: Delta (1 - mu/2beta)^R + L^2/mu [privacy + statistical]."""
    conditions = (EPS_RANGE, DELTA_RANGE, KAPPA_GE_1, K_FITS, FULL_PARTICIPATION) + ((SDP_AVAILABILITY,) if sdp else ())
    return Bound(
        id=bound_id, title=title, source=Source(LOWY_2023, f"Proof of Theorem E.1 part {part}", eqn),
        kind=Kind("upper", "SDP" if sdp else "ISRL-DP", **_KIND_EXPLICIT),
        terms=(_OPTIMIZATION, Term("privacy", PREFACTOR * privacy),
               Term("statistical", PREFACTOR * statistical)),
        conditions=conditions, prescriptions=prescriptions, quantity=QUANTITY_SO, notes=notes,
    )


_ISRL_NOISE = d * LN_INV_DELTA / (eps**2 * K**2 * M)
_SDP_NOISE = d * LN2_D_DELTA / (eps**2 * K**2 * N**2)

EQ20 = _explicit(
    "eq20", "ISRL-DP Noisy Prox-SGD, explicit bound after R rounds (as printed)", "1", "eq. (20)",
    16 * _ISRL_NOISE, 1 / (M * K), False,
    {"paper": _ISRL_PRESCRIPTION, "corrected": _ISRL_PRESCRIPTION_CORRECTED},
    "Constants as printed; they do not follow from eq. (19): see eq20-corrected.",
)
# Re-derived: unroll eq. (19) (geometric sum <= 2 beta/mu) with 2 d sigma^2/(beta M) + 2 L^2/(beta M K)
# and Prop D.2's sigma^2 = 16 L^2 ln(1/delta) / (eps K)^2.
EQ20_CORRECTED = _explicit(
    "eq20-corrected", "ISRL-DP Noisy Prox-SGD, eq. (19) unrolled with Prop D.2's sigma", "1",
    "eq. (19) with Prop. D.2", 64 * _ISRL_NOISE, 4 / (M * K), False,
    {"paper": _ISRL_PRESCRIPTION_CORRECTED},
    "Re-derived from eq. (19) with sigma^2 = 16 L^2 ln(1/delta)/(eps K)^2.",
)
# The O(.) of eq. (22) with constant 1; as printed the bracket carries an extra L^2.
EQ22 = _explicit(
    "eq22", "SDP Noisy Prox-SGD, explicit bound after R rounds (as printed)", "2", "eq. (22)",
    L**2 * _SDP_NOISE, 1 / (M * K), True, {"paper": _SDP_PRESCRIPTION},
    "As printed, O(.) constant 1; the privacy term carries L^4/mu (see eq22-corrected).",
)
EQ22_CORRECTED = _explicit(
    "eq22-corrected", "SDP Noisy Prox-SGD, explicit bound, dimensionally consistent privacy term",
    "2", "eq. (22) without the extra L^2", _SDP_NOISE, 1 / (M * K), True, {"paper": _SDP_PRESCRIPTION},
    "O(.) constant 1; reproduces eq. (7) after R = O-tilde(kappa), K = n/R.",
)


def _with_sampling(bound: Bound, constant: int, title: str) -> Bound:
    """``bound`` plus the silo-sampling term ``constant * SILO_SAMPLING * upsilon^2 / mu`` it lacks
    for M < N (module docstring); ``full_participation`` dropped from its conditions."""
    term = Term("heterogeneity", constant * SILO_SAMPLING * upsilon**2 / mu)
    return replace(
        bound, id=f"{bound.id.removesuffix('-corrected')}-sampling", title=title,
        source=Source(bound.source.paper, bound.source.theorem,
                      f"{bound.source.equation} + the silo-sampling variance of Lemma E.3"),
        terms=bound.terms + (term,), conditions=tuple(c for c in bound.conditions if c is not FULL_PARTICIPATION),
        notes="upsilon^2 >= sup_w (1/N) sum_i ||grad F_i(w) - grad F(w)||^2 (population); the term vanishes at M = N.",
    )


THM21_ISRL_SAMPLING = _with_sampling(THM21_ISRL, 1, "ISRL-DP Noisy Prox-SGD, M <= N heterogeneous silos")
THM21_SDP_SAMPLING = _with_sampling(THM21_SDP, 1, "SDP Noisy Prox-SGD, M <= N heterogeneous silos")
EQ20_SAMPLING = _with_sampling(
    EQ20_CORRECTED, 2, "ISRL-DP Noisy Prox-SGD, eq. (19) unrolled with Prop D.2's sigma and the silo-sampling term")
EQ22_SAMPLING = _with_sampling(
    EQ22_CORRECTED, 2, "SDP Noisy Prox-SGD, explicit bound with the silo-sampling term")

register(THM21_ISRL, THM21_SDP, EQ20, EQ20_CORRECTED, EQ22, EQ22_CORRECTED,
         THM21_ISRL_SAMPLING, THM21_SDP_SAMPLING, EQ20_SAMPLING, EQ22_SAMPLING)
