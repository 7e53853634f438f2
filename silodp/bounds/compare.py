"""Comparing bounds over parameter grids: ratios, who wins where, regime maps.

- :func:`grid` builds a broadcastable grid from named axes;
- :func:`compare` evaluates two bounds on it and returns their ratio and the region where each
  is smaller ("wins", for upper bounds);
- :func:`regime_map` gives, at each grid point, which term of a bound dominates;
- :func:`privacy_almost_free` and :func:`wang_improvement_region` encode the regions the paper
  names in words (Remark 2.1; the remark after Thm 3.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

import numpy as np

from silodp.bounds.core import ArrayLike, Bound, validate_params
from silodp.bounds.registry import get_bound


def grid(**axes: ArrayLike) -> dict[str, np.ndarray]:
    """Open mesh over the named axes (``np.ix_`` style), e.g. ``grid(n=..., eps=...)``.

    Each axis gets its own dimension, in keyword order, so that evaluating a bound broadcasts
    to shape ``(len(axis_1), len(axis_2), ...)`` without materializing the full mesh.
    """
    arrays = [np.asarray(v, dtype=float).ravel() for v in axes.values()]
    return dict(zip(axes, np.ix_(*arrays)))


def _bound(b: Bound | str) -> Bound:
    return b if isinstance(b, Bound) else get_bound(b)


@dataclass(frozen=True)
class Comparison:
    """Two bounds on one grid: ``ratio = a / b``; ``a_wins`` where ``a < b``."""

    a: str
    b: str
    ratio: np.ndarray
    a_wins: np.ndarray
    b_wins: np.ndarray

    @property
    def fraction_a_wins(self) -> float:
        return float(np.mean(self.a_wins))


def compare(a: Bound | str, b: Bound | str, params: Mapping[str, ArrayLike]) -> Comparison:
    """Ratio of bound ``a`` to bound ``b`` at ``params`` (arrays broadcast, e.g. from :func:`grid`).

    Each bound ignores the parameters it does not use.
    """
    ba, bb = _bound(a), _bound(b)
    va = np.asarray(ba.evaluate(_used(ba, params)))
    vb = np.asarray(bb.evaluate(_used(bb, params)))
    va, vb = np.broadcast_arrays(va, vb)
    ratio = va / vb
    return Comparison(ba.id, bb.id, ratio, va < vb, vb < va)


def _used(b: Bound, params: Mapping[str, ArrayLike]) -> dict[str, ArrayLike]:
    """The parameters ``b`` can use (after checking all of them)."""
    return b.split_params(params)[0]


def regime_map(bound: Bound | str, params: Mapping[str, ArrayLike]) -> tuple[np.ndarray, tuple[str, ...]]:
    """Index of the dominant term at each point, and the term names it indexes."""
    b = _bound(bound)
    return np.asarray(b.dominant_index(_used(b, params))), b.term_names


def privacy_almost_free(params: Mapping[str, ArrayLike]) -> dict[str, np.ndarray]:
    """Remark 2.1's "privacy almost for free" regions (M = N).

    ``sdp``: kappa d ln^2(d/delta)/eps^2 <= nN, where eq. (5)'s privacy term is at most its
    non-private term (so eq. 5 matches Agarwal et al. 2012 up to kappa);
    ``isrl``: kappa d ln(1/delta)/eps^2 <= n, the same for eq. (4).
    Needs kappa (or beta and mu), d, delta, eps, n, N.
    """
    v = validate_params(params)
    kappa, d, delta, eps, n, big_n = (v[k] for k in ("kappa", "d", "delta", "eps", "n", "N"))
    return {
        "sdp": kappa * d * np.log(d / delta) ** 2 / eps**2 <= n * big_n,
        "isrl": kappa * d * np.log(1 / delta) / eps**2 <= n,
    }


def wang_improvement_region(params: Mapping[str, ArrayLike]) -> np.ndarray:
    """Where Thm 3.2 (SDP) provably beats Wang et al. 2019a's sqrt(d)/(eps n N) (L = beta = Delta = 1).

    With x = sqrt(d)/(eps n N) and l = max(ln(1/delta), 1), thm3.2 = l^(2/3) x^(4/3) + l x^2,
    which is <= x whenever l^2 x <= 1/8 (each term <= x/2).  This is the non-trivial-bound regime
    the paper's "improves over" refers to; for x >~ 0.4 (trivial bounds) the claim fails.
    """
    v = validate_params(params)
    x = np.sqrt(v["d"]) / (v["eps"] * v["n"] * v["N"])
    ell = np.maximum(np.log(1 / v["delta"]), 1.0)
    return ell**2 * x <= 1 / 8


__all__ = [
    "Comparison", "compare", "grid", "privacy_almost_free", "regime_map", "wang_improvement_region",
]
