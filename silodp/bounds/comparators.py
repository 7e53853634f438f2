"""The prior bounds the paper compares against, as the paper states them.

Each is encoded in the form the 2023 paper quotes it (its Remarks 2.1/2.2, Section 3 and
Appendix C); the original papers are not in ``shared/`` and constants/logs they carry but the
quotation drops are dropped too (stated per bound).  Records are pooled where the comparison
is federated: a centralized bound with n records becomes one with nN records.
"""

from __future__ import annotations

from dataclasses import replace

import sympy as sp

from silodp.bounds.core import LOWY_2023, Bound, Kind, Source, Term
from silodp.bounds.registry import register
from silodp.bounds.symbols import LN_INV_DELTA, K, L, N, T, d, eps, mu, n

GRAD = r"\mathbb{E}\|\nabla\widehat{F}_{\mathbf{X}}(w_{\mathrm{priv}})\|^{2}"
RISK = r"\mathbb{E}F(w)-F^{*}"
ERM_RISK = r"\mathbb{E}\widehat{F}_{\mathbf{X}}(w)-\widehat{F}_{\mathbf{X}}^{*}"
_GRAD_KIND = dict(problem="ERM", metric="squared gradient norm", form="rate")


def _quoted(where: str) -> str:
    return f"{LOWY_2023}, {where}"


WANG2019 = Bound(
    id="wang2019",
    title="Wang et al. 2019a: CDP smooth non-convex distributed ERM (trusted server)",
    source=Source("Wang, Ji & Wang 2019a", "as quoted in", _quoted("Appendix C and after Thm 3.2")),
    kind=Kind("upper", "CDP", **_GRAD_KIND),
    terms=(Term("privacy", sp.sqrt(d) / (eps * n * N)),),
    quantity=GRAD,
    notes="As quoted: O(sqrt(d)/(eps n N)); L, beta, Delta and ln(1/delta) are not shown.",
)

ARORA2022 = Bound(
    id="arora2022",
    title="Arora et al. 2022: CDP smooth non-convex ERM, one silo (N = 1)",
    source=Source("Arora, Bassily, Guzman, Menart & Ullah 2022", "as quoted in", _quoted("Appendix C")),
    kind=Kind("upper", "CDP", **_GRAD_KIND),
    terms=(Term("privacy", (sp.sqrt(d * LN_INV_DELTA) / (eps * n)) ** sp.Rational(4, 3)),),
    quantity=GRAD,
    notes="Centralized: n is the number of records. L, beta, Delta are not shown in the quotation.",
)

ARORA2022_POOLED = Bound(
    id="arora2022-pooled",
    title="Arora et al. 2022 with the nN pooled records (the rate Thm 3.2 matches when M = N)",
    source=Source("Arora et al. 2022", "pooled n -> nN", _quoted("Appendix C, Section 3.1")),
    kind=Kind("upper", "CDP", **_GRAD_KIND),
    terms=(Term("privacy", (sp.sqrt(d * LN_INV_DELTA) / (eps * n * N)) ** sp.Rational(4, 3)),),
    quantity=GRAD,
)

_SC = dict(problem="SO", metric="excess risk", form="rate")

LR2021B = Bound(
    id="lr2021b-sc-lower",
    title="Lowy & Razaviyayn 2021b: ISRL-DP strongly convex i.i.d. lower bound",
    source=Source("Lowy & Razaviyayn 2021b", "as referenced in", _quoted("Remark 2.1, Appendix G")),
    kind=Kind("lower", "ISRL-DP", **_SC),
    terms=(
        Term("privacy", L**2 / mu * d * LN_INV_DELTA / (eps**2 * n**2 * N)),
        Term("statistical", L**2 / mu / (n * N)),
    ),
    quantity=RISK,
    notes="Not stated in the 2023 paper; form of Lowy & Razaviyayn 2021b (M = N).",
)

BASSILY2019 = replace(
    LR2021B,
    id="bassily2019-sc-lower",
    title="Bassily et al. 2019: CDP strongly convex i.i.d. (SCO) lower bound, nN records",
    source=Source("Bassily, Feldman, Talwar & Thakurta 2019", "as referenced in", _quoted("Remark 2.1")),
    kind=Kind("lower", "CDP", **_SC),
    terms=(Term("privacy", L**2 / mu * d / (eps**2 * n**2 * N**2)), LR2021B.terms[1]),
    notes="No ln(1/delta) factor (the original's lower bound carries none).",
)

BASSILY2014 = Bound(
    id="bassily2014-sc-lower",
    title="Bassily et al. 2014: CDP strongly convex ERM lower bound, nN records",
    source=Source("Bassily, Smith & Thakurta 2014", "as referenced in", _quoted("Remark 2.2")),
    kind=Kind("lower", "CDP", "ERM", "excess empirical risk", "rate"),
    terms=(Term("privacy", L**2 / mu * d / (eps**2 * n**2 * N**2)),),
    quantity=ERM_RISK,
    notes="For f^1 = indicator of W; no ln(1/delta) factor.",
)

AGARWAL2012 = Bound(
    id="agarwal2012-lower",
    title="Agarwal et al. 2012: non-private strongly convex i.i.d. lower bound, nN samples",
    source=Source("Agarwal, Bartlett, Ravikumar & Wainwright 2012", "as referenced in",
                  _quoted("Remark 2.1")),
    kind=Kind("lower", "non-private", **_SC),
    terms=(Term("statistical", L**2 / (mu * n * N)),),
    quantity=RISK,
)

HU2021 = Bound(
    id="hu2021",
    title="Hu et al. 2021 noisy FedAvg rate with eta = sqrt(N/T) (grows with T)",
    source=Source("Hu et al. 2021, Theorem 2", "as computed in", _quoted("Appendix C")),
    kind=Kind("upper", "ISRL-DP", **_GRAD_KIND),
    terms=(
        Term("privacy", d * sp.sqrt(N * T) * K / (eps**2 * n * N)),
        Term("drift", N * K**2 / T),
        Term("optimization", sp.sqrt(N) / sp.sqrt(T)),
        Term("local-privacy", d * K**2 / (eps**2 * n)),
    ),
    quantity=GRAD,
    notes="T = RK total iterations; the paper notes it is not ISRL-DP for N > n.",
)

register(WANG2019, ARORA2022, ARORA2022_POOLED, LR2021B, BASSILY2019, BASSILY2014, AGARWAL2012, HU2021)
