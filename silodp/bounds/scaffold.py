"""DP-SCAFFOLD (Noble, Bellet & Dieuleveut 2022, arXiv:2111.09278) as far as shared/ states it.

The summary in ``shared/papers`` gives no formula, only qualitative claims about the privacy term
of the utility bound (Section 4): it grows with the number of iterations, decreases with the total
number of records, grows sublinearly with d and increases as 1/eps.  The 2023 paper (Appendix C)
says DP-SCAFFOLD attains bounds "similar" to Wang et al. 2019a for M < N, which we encode as
sqrt(d)/(eps n N); the tests check the summary's qualitative claims against its exponents.  The
ISRL-DP variant mentioned in the 2023 paper's Figure 3 is not recoverable from the text.
"""

from __future__ import annotations

import sympy as sp

from silodp.bounds.core import LOWY_2023, Bound, Kind, Source, Term
from silodp.bounds.registry import register
from silodp.bounds.symbols import N, d, eps, n

NOBLE2022 = Bound(
    id="noble2022",
    title="DP-SCAFFOLD (Noble et al. 2022): CDP non-convex rate, as characterized in Appendix C",
    source=Source("Noble, Bellet & Dieuleveut 2022", "Section 4 (summary) and as quoted in",
                  f"{LOWY_2023}, Appendix C"),
    kind=Kind("upper", "CDP", "ERM", "squared gradient norm", "rate"),
    terms=(Term("privacy", sp.sqrt(d) / (eps * n * N)),),
    quantity=r"\mathbb{E}\|\nabla\widehat{F}_{\mathbf{X}}(w_{\mathrm{priv}})\|^{2}",
    notes="Quoted as 'similar' to Wang et al. 2019a; the T-dependence of the summary is not encoded.",
)

register(NOBLE2022)
