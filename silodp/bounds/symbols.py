"""The parameter symbols every bound is written in.

All symbols are positive reals (sympy ``positive=True``), so that simplification, logarithms and
derivatives behave; integrality (n, N, M, d, R, K, q, S) is not assumed, so that bounds can be
evaluated on continuous grids.  Names are the ones the CLI accepts (``--param NAME=VALUE``).

Notation follows Lowy, Ghafelebashi & Razaviyayn (2023), arXiv:2203.06735 ("the paper"):
``n`` records per silo, ``N`` silos, ``M`` silos available per round, ``d`` dimension,
``(eps, delta)`` the privacy budget, ``L`` Lipschitz, ``beta`` smoothness, ``mu`` (proximal) PL
parameter, ``kappa = beta / mu``, ``Delta`` the initial suboptimality (F(w0) - F* for SO,
hat Delta_X for ERM), ``upsilon`` the heterogeneity hat upsilon_X (Assumption 5).
"""

from __future__ import annotations

import sympy as sp

#: name -> (description, LaTeX)
_SPEC: dict[str, tuple[str, str]] = {
    "n": ("records per silo", "n"),
    "N": ("number of silos", "N"),
    "M": ("silos available per round (M <= N)", "M"),
    "d": ("model dimension", "d"),
    "eps": ("privacy parameter epsilon", r"\epsilon"),
    "delta": ("privacy parameter delta, in (0, 1)", r"\delta"),
    "L": ("Lipschitz constant of f^0", "L"),
    "beta": ("smoothness constant of f^0", r"\beta"),
    "mu": ("proximal-PL (or strong convexity) parameter", r"\mu"),
    "kappa": ("condition number beta / mu", r"\kappa"),
    "Delta": ("initial suboptimality F(w_0) - F^*", r"\Delta"),
    "upsilon": ("heterogeneity: sup_w sqrt((1/N) sum_i ||grad F_i(w) - grad F(w)||^2) (hat upsilon_X of Assumption 5 for ERM)",
                r"\hat{\upsilon}"),
    "R": ("communication rounds", "R"),
    "K": ("local minibatch size", "K"),
    "q": ("SPIDER phase length", "q"),
    "S": ("Prox-PL-SVRG restarts", "S"),
    "E": ("Prox-SVRG epochs", "E"),
    "T": ("total local iterations (Hu et al. 2021)", "T"),
    "eta": ("step size", r"\eta"),
    "sigma": ("Gaussian noise standard deviation", r"\sigma"),
    "sigma1": ("noise standard deviation of full-gradient messages", r"\sigma_{1}"),
    "sigma2": ("noise standard deviation of difference messages", r"\sigma_{2}"),
}

#: The symbols, by name.
SYMBOLS: dict[str, sp.Symbol] = {name: sp.Symbol(name, positive=True) for name in _SPEC}
#: LaTeX rendering of each symbol, for ``sympy.latex(..., symbol_names=LATEX_NAMES)``.
LATEX_NAMES: dict[sp.Symbol, str] = {SYMBOLS[k]: tex for k, (_, tex) in _SPEC.items()}
#: One-line description of each parameter.
DESCRIPTIONS: dict[str, str] = {k: desc for k, (desc, _) in _SPEC.items()}

# Parameters that must be integers in an algorithm, but may be real on a grid of the bound.
INTEGER_LIKE = frozenset({"n", "N", "M", "d", "R", "K", "q", "S", "E", "T"})

n, N, M, d = (SYMBOLS[k] for k in ("n", "N", "M", "d"))
eps, delta = SYMBOLS["eps"], SYMBOLS["delta"]
L, beta, mu, kappa = (SYMBOLS[k] for k in ("L", "beta", "mu", "kappa"))
Delta, upsilon = SYMBOLS["Delta"], SYMBOLS["upsilon"]
R, K, q, S, E, T = (SYMBOLS[k] for k in ("R", "K", "q", "S", "E", "T"))
eta, sigma, sigma1, sigma2 = (SYMBOLS[k] for k in ("eta", "sigma", "sigma1", "sigma2"))

#: ln(1/delta), written so that LaTeX shows it as the paper does.
LN_INV_DELTA = sp.log(1 / delta)


#: (N - M) / (M (N - 1)) 1{N > 1}: the variance factor of the mean of M silos drawn without
#: replacement out of N (Lemma E.3 / proof of Thm E.2); it multiplies the heterogeneity upsilon^2.
SILO_SAMPLING = sp.Piecewise(((N - M) / (M * (N - 1)), sp.StrictGreaterThan(N, 1)), (0, True))


def indicator_lt(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """The indicator 1{a < b} (e.g. 1{M < N} in eq. 44) as a sympy Piecewise."""
    return sp.Piecewise((1, sp.StrictLessThan(a, b)), (0, True))


def indicator_gt(a: sp.Expr, b: sp.Expr) -> sp.Expr:
    """The indicator 1{a > b} (e.g. 1{N > 1} in Thm E.2) as a sympy Piecewise."""
    return sp.Piecewise((1, sp.StrictGreaterThan(a, b)), (0, True))


__all__ = [
    "SYMBOLS", "LATEX_NAMES", "DESCRIPTIONS", "INTEGER_LIKE", "LN_INV_DELTA", "SILO_SAMPLING",
    "indicator_lt", "indicator_gt",
    "n", "N", "M", "d", "eps", "delta", "L", "beta", "mu", "kappa", "Delta", "upsilon",
    "R", "K", "q", "S", "E", "T", "eta", "sigma", "sigma1", "sigma2",
]
