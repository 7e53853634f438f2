"""Every upper and lower bound of Lowy, Ghafelebashi & Razaviyayn (2023) as a checkable value.

>>> from silodp.bounds import get_bound
>>> b = get_bound("thm3.1")
>>> round(b.evaluate(n=1000, N=10, eps=1, delta=1e-5, d=50, L=1, beta=1, Delta=1), 6)
0.001548

Modules, one per paper section: :mod:`~silodp.bounds.proxsgd` (Thm 2.1/E.1, eqs. 20, 22),
:mod:`~silodp.bounds.plsvrg` (Thm 2.2/E.2), :mod:`~silodp.bounds.spider` (Thms 3.1, 3.2, F.1, F.2,
eq. 45), :mod:`~silodp.bounds.lower` (Thm 3.3/F.3), :mod:`~silodp.bounds.hybrid` (Appendix G),
:mod:`~silodp.bounds.comparators` (prior work the paper cites) and :mod:`~silodp.bounds.scaffold`
(DP-SCAFFOLD).  See docs/bounds.md and docs/paper-notes.md.
"""

# Registration order is paper order, then prior work.
from silodp.bounds import proxsgd, plsvrg, spider, lower, comparators, scaffold, hybrid  # noqa: F401, I001
from silodp.bounds.compare import (
    Comparison, compare, grid, privacy_almost_free, regime_map, wang_improvement_region,
)
from silodp.bounds.core import Bound, Condition, Exponents, Kind, Source, Term, validate_params
from silodp.bounds.registry import BOUNDS, get_bound, list_bounds
from silodp.bounds.symbols import SYMBOLS

__all__ = [
    "BOUNDS", "Bound", "Comparison", "Condition", "Exponents", "Kind", "SYMBOLS", "Source", "Term",
    "compare", "get_bound", "grid", "list_bounds", "privacy_almost_free", "regime_map",
    "validate_params", "wang_improvement_region",
]

# A module of this package registers by being here (one new file, nothing else to edit).
from silodp._registry import discover as _discover  # noqa: E402

_discover(__name__, "silodp.bounds.registry import register")
