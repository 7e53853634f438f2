"""The ``Bound`` value type: one theorem's rate as a checkable, evaluable object.

A bound is a sum of named sympy terms over the positive symbols of :mod:`silodp.bounds.symbols`,
together with where it comes from (:class:`Source`), what it bounds (:class:`Kind`), the
conditions under which the paper states it (:class:`Condition`) and the algorithm parameters the
proof prescribes.  Everything numeric is derived from the expressions:

- :meth:`Bound.evaluate` lambdifies once (cached) and broadcasts over numpy arrays;
- :meth:`Bound.exponents` gives the local exponents ``d log B / d log p`` and the dominant term;
- :meth:`Bound.check` / :meth:`Bound.conditions_hold` evaluate the conditions at a point;
- :meth:`Bound.prescribe` evaluates the proof's choices of R, K, q, eta, sigmas;
- :meth:`Bound.latex` renders the formula.

Parameter handling (shared by all methods): names must be symbols of
:data:`~silodp.bounds.symbols.SYMBOLS`; values must be finite and positive, ``delta`` in (0, 1) and
``M <= N``; ``kappa``, ``beta`` and ``mu`` are completed from each other (kappa = beta / mu) when
two of the three are given; parameters a bound needs but the caller left out are taken from the
bound's ``"paper"`` prescription when the proof prescribes them (e.g. R and K of eq. 20).
Violations raise ``ValueError`` naming the argument.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Mapping

import numpy as np
import sympy as sp

from silodp.bounds.symbols import LATEX_NAMES, SYMBOLS

ArrayLike = float | int | np.ndarray | list

Direction = Literal["upper", "lower"]
Privacy = Literal["ISRL-DP", "SDP", "CDP", "non-private", "ISRL-DP+user-level"]
Problem = Literal["ERM", "SO"]
Form = Literal["rate", "explicit"]

LOWY_2023 = "Lowy, Ghafelebashi & Razaviyayn 2023, arXiv:2203.06735"


@dataclass(frozen=True)
class Source:
    """Where a formula is stated: paper, theorem, equation (and, optionally, a remark)."""

    paper: str
    theorem: str
    equation: str = ""

    def __str__(self) -> str:
        parts = [self.paper, self.theorem] + ([self.equation] if self.equation else [])
        return ", ".join(parts)


@dataclass(frozen=True)
class Kind:
    """What a bound bounds.

    ``metric`` is one of "excess risk", "excess empirical risk", "squared gradient norm",
    "squared proximal gradient mapping norm".  ``form`` is "rate" (hidden constants set to 1,
    O-tilde logs dropped) or "explicit" (the proof's constants).
    """

    direction: Direction
    privacy: Privacy
    problem: Problem
    metric: str
    form: Form = "rate"

    def __str__(self) -> str:
        return f"{self.direction} / {self.privacy} / {self.problem} / {self.metric} / {self.form}"


@dataclass(frozen=True)
class Term:
    """One named summand of a bound (e.g. "privacy", "statistical", "optimization")."""

    name: str
    expr: sp.Expr


@dataclass(frozen=True)
class Condition:
    """A hypothesis of the theorem, as a sympy relation evaluable at a point."""

    name: str
    relation: sp.Basic
    description: str = ""


@dataclass(frozen=True)
class Exponents:
    """Local exponents ``d log(bound) / d log(param)`` at one point, and the dominant term."""

    value: float
    exponents: dict[str, float]
    dominant_term: str
    term_values: dict[str, float]


@functools.lru_cache(maxsize=None)
def _compile(expr: sp.Basic) -> tuple[tuple[str, ...], Any]:
    """Lambdify ``expr`` over its free symbols (sorted by name) for numpy; cached per expression."""
    names = tuple(sorted(s.name for s in expr.free_symbols))
    fn = sp.lambdify([SYMBOLS[k] for k in names], expr, modules="numpy")
    return names, fn


def _call(expr: sp.Basic, values: Mapping[str, np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    names, fn = _compile(expr)
    with np.errstate(all="ignore"):
        out = fn(*(values[k] for k in names))
    return np.broadcast_to(np.asarray(out), shape)


def validate_params(params: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """Check names and values; return float arrays. Raises ``ValueError`` naming the argument."""
    out: dict[str, np.ndarray] = {}
    for name, raw in params.items():
        if name not in SYMBOLS:
            known = ", ".join(sorted(SYMBOLS))
            raise ValueError(f"unknown parameter {name!r} (known: {known})")
        try:
            value = np.asarray(raw, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"parameter {name!r} must be a number, got {raw!r}") from None
        if np.isnan(value).any():
            raise ValueError(f"parameter {name!r} must not be NaN")
        if not np.isfinite(value).all():
            raise ValueError(f"parameter {name!r} must be finite")
        if (value <= 0).any():
            raise ValueError(f"parameter {name!r} must be positive, got {raw!r}")
        if name == "delta" and (value >= 1).any():
            raise ValueError(f"parameter 'delta' must lie in (0, 1), got {raw!r}")
        out[name] = value
    if "M" in out and "N" in out and (out["M"] > out["N"]).any():
        raise ValueError("parameter 'M' must satisfy M <= N")
    _complete_condition_number(out)
    return out


def _complete_condition_number(values: dict[str, np.ndarray]) -> None:
    """Fill kappa, beta or mu from the other two (kappa = beta / mu); check consistency."""
    have = {k for k in ("kappa", "beta", "mu") if k in values}
    if have == {"beta", "mu"}:
        values["kappa"] = values["beta"] / values["mu"]
    elif have == {"kappa", "mu"}:
        values["beta"] = values["kappa"] * values["mu"]
    elif have == {"kappa", "beta"}:
        values["mu"] = values["beta"] / values["kappa"]
    elif len(have) == 3 and not np.allclose(values["kappa"], values["beta"] / values["mu"]):
        raise ValueError("parameter 'kappa' must equal beta / mu when all three are given")


@dataclass(frozen=True, eq=False)
class Bound:
    """A theorem's bound: ``sum(term.expr for term in terms)`` with metadata.

    ``prescriptions`` maps a variant name ("paper", and e.g. "corrected") to the algorithm
    parameters the proof sets, each a sympy expression of the problem parameters.
    """

    id: str
    title: str
    source: Source
    kind: Kind
    terms: tuple[Term, ...]
    conditions: tuple[Condition, ...] = ()
    prescriptions: Mapping[str, Mapping[str, sp.Expr]] = field(default_factory=dict)
    quantity: str = r"\mathrm{B}"
    notes: str = ""

    # ----------------------------------------------------------------- structure
    @functools.cached_property
    def expr(self) -> sp.Expr:
        """The whole bound, the sum of its terms."""
        return sp.Add(*(t.expr for t in self.terms))

    @functools.cached_property
    def parameters(self) -> tuple[str, ...]:
        """Names of the symbols the bound's value depends on, sorted."""
        return tuple(sorted(s.name for s in self.expr.free_symbols))

    @functools.cached_property
    def inputs(self) -> frozenset[str]:
        """Every parameter name this bound can use: its own, its conditions', its prescriptions'
        inputs, and kappa/beta/mu when one of them is used (they complete each other)."""
        names = set(self.parameters) | set(self._condition_names)
        for recipe in self.prescriptions.values():
            for expr in recipe.values():
                names |= {s.name for s in expr.free_symbols}
        if names & {"kappa", "beta", "mu"}:
            names |= {"kappa", "beta", "mu"}
        return frozenset(names)

    def split_params(self, params: Mapping[str, ArrayLike]) -> tuple[dict, list[str]]:
        """``(usable, unused)``: the parameters this bound can use, and the names it cannot.

        All parameters are validated first (unknown names and bad values raise ``ValueError``).
        """
        validate_params(params)
        usable = {k: v for k, v in params.items() if k in self.inputs}
        return usable, sorted(k for k in params if k not in self.inputs)

    @property
    def term_names(self) -> tuple[str, ...]:
        return tuple(t.name for t in self.terms)

    # ------------------------------------------------------------ evaluation core
    def _resolve(
        self, params: Mapping[str, ArrayLike], needed: tuple[str, ...], optional: tuple[str, ...] = ()
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], tuple[int, ...]]:
        """Validated values for ``needed`` (prescribing what the proof sets), filled names, shape.

        ``optional`` names are prescribed when possible but not required.
        """
        values = validate_params(params)
        filled: dict[str, np.ndarray] = {}
        shape = np.broadcast_shapes(*(v.shape for v in values.values())) if values else ()
        recipe = self.prescriptions.get("paper", {})
        wanted = {k for k in (*needed, *optional) if k not in values}
        for _ in range(len(recipe)):  # inputs of wanted prescriptions are wanted too
            wanted |= {s for k in wanted & set(recipe) for s in _compile(recipe[k])[0]}
        progress = True
        while progress:
            progress = False
            for name, expr in recipe.items():
                if name in values or name not in wanted:
                    continue
                names, _ = _compile(expr)
                if all(k in values for k in names):
                    values[name] = filled[name] = np.asarray(_call(expr, values, shape), dtype=float)
                    progress = True
        missing = [k for k in needed if k not in values]
        if missing:
            raise ValueError(
                f"bound {self.id!r}: missing parameter {missing[0]!r} "
                f"(needs {', '.join(self.parameters)})"
            )
        return values, filled, shape

    @staticmethod
    def _out(array: np.ndarray, shape: tuple[int, ...]) -> float | np.ndarray:
        return float(array) if shape == () else np.array(array, dtype=float)

    def _finite(self, array: np.ndarray) -> np.ndarray:
        if not np.isfinite(array).all():
            raise ValueError(
                f"bound {self.id!r} is not finite at these parameters "
                f"(check the conditions: {', '.join(c.name for c in self.conditions) or 'none'})"
            )
        return array

    def evaluate(self, params: Mapping[str, ArrayLike] | None = None, /, **kw: ArrayLike):
        """Value of the bound; numpy broadcasting over array parameters.

        Returns a float when every parameter is a scalar, else an array of the broadcast shape.
        """
        values, _, shape = self._resolve({**(params or {}), **kw}, self.parameters)
        return self._out(self._finite(_call(self.expr, values, shape).astype(float)), shape)

    __call__ = evaluate

    def term_values(self, params: Mapping[str, ArrayLike] | None = None, /, **kw: ArrayLike):
        """Each term's value, by name (broadcast like :meth:`evaluate`)."""
        values, _, shape = self._resolve({**(params or {}), **kw}, self.parameters)
        return {
            t.name: self._out(self._finite(_call(t.expr, values, shape).astype(float)), shape)
            for t in self.terms
        }

    def dominant_index(self, params: Mapping[str, ArrayLike] | None = None, /, **kw: ArrayLike):
        """Index (into :attr:`terms`) of the largest term, elementwise: a regime map."""
        vals = self.term_values(params, **kw)
        stacked = np.stack([np.asarray(vals[t]) for t in self.term_names])
        return np.argmax(stacked, axis=0)

    # --------------------------------------------------------------- exponents
    @functools.cached_property
    def _elasticities(self) -> dict[str, sp.Expr]:
        return {
            k: SYMBOLS[k] * sp.diff(self.expr, SYMBOLS[k]) / self.expr for k in self.parameters
        }

    def exponents(self, point: Mapping[str, float] | None = None, /, **kw: float) -> Exponents:
        """``d log(bound) / d log(p)`` for every parameter p of the bound, at one point.

        Other parameters are held fixed (so with both ``kappa`` and ``mu`` in a bound, the
        exponent of ``kappa`` is at fixed ``mu``); prescribed parameters filled in by the paper's
        prescription are treated as given.  Also reports the dominant term there.
        """
        params = {**(point or {}), **kw}
        values, _, shape = self._resolve(params, self.parameters)
        if shape != ():
            raise ValueError("point: exponents() takes scalar parameters (one point)")
        exps = {
            k: float(_call(e, values, shape)) + 0.0 for k, e in self._elasticities.items()
        }
        for k, v in exps.items():
            if not math.isfinite(v):
                raise ValueError(f"bound {self.id!r}: exponent of {k!r} is not finite here")
        terms = {t.name: float(_call(t.expr, values, shape)) for t in self.terms}
        dominant = max(terms, key=terms.__getitem__)
        value = float(self._finite(_call(self.expr, values, shape).astype(float)))
        return Exponents(value=value, exponents=exps, dominant_term=dominant, term_values=terms)

    # -------------------------------------------------------------- conditions
    @functools.cached_property
    def _condition_names(self) -> tuple[str, ...]:
        return tuple(sorted({s.name for c in self.conditions for s in c.relation.free_symbols}))

    def check(self, params: Mapping[str, ArrayLike] | None = None, /, **kw: ArrayLike):
        """Each condition at the point: True/False (or boolean arrays); None when not evaluable."""
        values, _, shape = self._resolve({**(params or {}), **kw}, (), self._condition_names)
        out: dict[str, Any] = {}
        for c in self.conditions:
            names, _ = _compile(c.relation)
            if not all(k in values for k in names):
                out[c.name] = None
                continue
            res = np.asarray(_call(c.relation, values, shape), dtype=bool)
            out[c.name] = bool(res) if shape == () else res
        return out

    def conditions_hold(self, params: Mapping[str, ArrayLike] | None = None, /, **kw: ArrayLike):
        """True if every condition holds, False if one fails, None if one cannot be evaluated.

        For array parameters, a boolean array (conditions that cannot be evaluated count as False).
        """
        results = self.check(params, **kw)
        arrays = [np.asarray(v) for v in results.values() if v is not None]
        held = np.logical_and.reduce(arrays) if arrays else np.asarray(True)
        if held.shape == ():
            if not bool(held):
                return False
            return None if any(v is None for v in results.values()) else True
        return held if all(v is not None for v in results.values()) else np.zeros_like(held)

    # ------------------------------------------------------------ prescriptions
    def prescribe(
        self, params: Mapping[str, ArrayLike] | None = None, /, variant: str = "paper",
        **kw: ArrayLike,
    ) -> dict[str, float | np.ndarray]:
        """The algorithm parameters the proof sets (R, K, q, eta, sigmas, ...) at ``params``.

        ``variant`` selects "paper" (as printed) or a corrected variant where one is recorded
        (see docs/paper-notes.md).  Raises ``ValueError`` naming a missing input.
        """
        if variant not in self.prescriptions:
            raise ValueError(
                f"variant: bound {self.id!r} has prescriptions {sorted(self.prescriptions)}, "
                f"not {variant!r}"
            )
        values = validate_params({**(params or {}), **kw})
        shape = np.broadcast_shapes(*(v.shape for v in values.values())) if values else ()
        recipe = self.prescriptions[variant]
        out: dict[str, float | np.ndarray] = {}
        pending = dict(recipe)
        while pending:
            ready = [k for k, e in pending.items() if all(s in values for s in _compile(e)[0])]
            if not ready:
                name, expr = next(iter(pending.items()))
                lacking = sorted(s for s in _compile(expr)[0] if s not in values)
                raise ValueError(
                    f"bound {self.id!r}: prescribing {name!r} needs parameter {lacking[0]!r}"
                )
            for k in ready:
                val = np.asarray(_call(pending.pop(k), values, shape), dtype=float)
                values[k] = val
                out[k] = self._out(val, shape)
        return out

    # ------------------------------------------------------------------ render
    def latex(self) -> str:
        """The bound as LaTeX, terms in the paper's order."""
        rel = {
            ("upper", "rate"): r"\lesssim",
            ("upper", "explicit"): r"\le",
            ("lower", "rate"): r"\gtrsim",
            ("lower", "explicit"): r"\ge",
        }[(self.kind.direction, self.kind.form)]
        body = " + ".join(sp.latex(t.expr, symbol_names=LATEX_NAMES, ln_notation=True) for t in self.terms)
        return f"{self.quantity} {rel} {body}"

    def describe(self) -> dict[str, Any]:
        """A JSON-ready description (id, title, source, kind, parameters, conditions, LaTeX)."""
        return {
            "id": self.id,
            "title": self.title,
            "source": str(self.source),
            "kind": {
                "direction": self.kind.direction,
                "privacy": self.kind.privacy,
                "problem": self.kind.problem,
                "metric": self.kind.metric,
                "form": self.kind.form,
            },
            "parameters": list(self.parameters),
            "terms": list(self.term_names),
            "conditions": {c.name: str(c.relation) for c in self.conditions},
            "prescriptions": {
                v: {k: str(e) for k, e in r.items()} for v, r in self.prescriptions.items()
            },
            "latex": self.latex(),
            "notes": self.notes,
        }

    # ---------------------------------------------------------------- deriving
    def substitute(self, mapping: Mapping[sp.Symbol, sp.Expr], **changes: Any) -> "Bound":
        """A derived bound with ``mapping`` substituted in terms and conditions.

        ``changes`` replace fields (id, title, source, kind, ...); used e.g. for Appendix G's
        ISRL-DP/user-level bounds (eps -> eps/n, delta -> delta/(4n)).
        """
        terms = tuple(Term(t.name, t.expr.subs(mapping)) for t in self.terms)
        conds = tuple(
            Condition(c.name, c.relation.subs(mapping), c.description) for c in self.conditions
        )
        fresh = {"terms": terms, "conditions": conds, "prescriptions": {}}
        return replace(self, **{**fresh, **changes})

    def __repr__(self) -> str:
        return f"Bound({self.id!r}: {self.title})"


__all__ = [
    "Bound", "Condition", "Exponents", "Kind", "Source", "Term", "LOWY_2023", "validate_params",
]
