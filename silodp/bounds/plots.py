"""Figures from bounds: each function returns a matplotlib Figure; saving is the caller's choice.

matplotlib is imported inside the functions (the bounds package itself needs only sympy/numpy).
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from silodp.bounds.compare import compare, grid, regime_map


def _fixed_label(fixed: Mapping[str, float]) -> str:
    """The parameters held fixed, for a figure's title (every figure states them)."""
    return ", ".join(f"{k}={v:g}" for k, v in fixed.items())


def regime_map_figure(bound_id: str, x: tuple[str, np.ndarray], y: tuple[str, np.ndarray],
                      fixed: Mapping[str, float]) -> Any:
    """Which term of ``bound_id`` dominates over a log-log grid of two parameters."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    (xn, xs), (yn, ys) = x, y
    idx, names = regime_map(bound_id, {**grid(**{yn: ys, xn: xs}), **fixed})
    fig, ax = plt.subplots(figsize=(6.5, 4))
    cmap = ListedColormap(plt.cm.tab10.colors[: len(names)])
    ax.pcolormesh(xs, ys, idx, cmap=cmap, vmin=-0.5, vmax=len(names) - 0.5, shading="nearest")
    ax.set(xscale="log", yscale="log", xlabel=xn, ylabel=yn)
    ax.set_title(f"{bound_id}: dominant term\n{_fixed_label(fixed)}", fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=cmap(i)) for i in range(len(names))]
    ax.legend(handles, names, loc="upper left", bbox_to_anchor=(1.02, 1.0), fontsize=8,
              title="term", borderaxespad=0.0)
    fig.tight_layout()
    return fig


def ratio_figure(a: str, b: str, x: tuple[str, np.ndarray], y: tuple[str, np.ndarray],
                 fixed: Mapping[str, float]) -> Any:
    """log10 of bound ``a`` / bound ``b`` over a log-log grid, with the a = b contour."""
    import matplotlib.pyplot as plt

    (xn, xs), (yn, ys) = x, y
    c = compare(a, b, {**grid(**{yn: ys, xn: xs}), **fixed})
    fig, ax = plt.subplots(figsize=(5, 4))
    mesh = ax.pcolormesh(xs, ys, np.log10(c.ratio), cmap="RdBu_r", shading="nearest",
                         vmin=-3, vmax=3)
    ax.contour(xs, ys, np.log10(c.ratio), levels=[0.0], colors="k")
    ax.set(xscale="log", yscale="log", xlabel=xn, ylabel=yn)
    ax.set_title(f"log10({a} / {b})\n{_fixed_label(fixed)}", fontsize=9)
    fig.colorbar(mesh, ax=ax)
    fig.tight_layout()
    return fig
