"""Log-log figures of rate experiments; each function returns a matplotlib Figure (saving is the
caller's choice). Figures are built without pyplot, so none accumulate in a session."""

from __future__ import annotations

from typing import Any

import numpy as np

from silodp.palette import label, legend_outside, style

#: the theory-slope line is drawn through this multiple of the fit at the grid's centre, so that
#: the two stay distinguishable when the slopes agree (only the slope of that line carries meaning)
THEORY_OFFSET = 0.5
LABELS = {"eps": r"$\epsilon$", "n": "n (records per silo)", "M": "M (silos per round)", "kappa": r"$\kappa = \beta/\mu$",
          "N": "N (silos, M = N)", "d": "d (dimension)"}


def _figure(ax, size=(8.5, 4.0)):
    if ax is not None:
        return ax.figure, ax
    from matplotlib.figure import Figure

    fig = Figure(figsize=size)
    return fig, fig.add_subplot()


def _grid_ticks(ax, x: np.ndarray) -> None:
    """Major ticks at the grid values with plain labels (log axes otherwise crowd minor labels)."""
    from matplotlib.ticker import FixedLocator, FuncFormatter, NullFormatter

    ax.xaxis.set_major_locator(FixedLocator(x))
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _fixed(setup) -> str:
    """The parameters a figure holds fixed (all but the varied one), epsilon and delta included."""
    follows = {"N": "M"}.get(setup.vary)  # varying N runs every silo each round (M = N, as the axis says)
    names = [k for k in ("n", "N", "M", "eps", "delta", "d", "rounds") if k not in (setup.vary, follows)]
    fixed = [f"{k}={getattr(setup, k):g}" for k in names if getattr(setup, k) is not None]
    if follows:
        fixed.insert(1, f"{follows}={setup.vary}")
    return ", ".join(fixed) + f", noise={setup.noise}, {setup.trials} trials"


def _shade(ax, xs: np.ndarray, mask: np.ndarray, label: str) -> None:
    """Shade the x-ranges where ``mask`` holds (edges half-way between grid points, in log)."""
    if not mask.any():
        return
    lx = np.log(xs)
    edges = np.exp(np.concatenate([[lx[0]], (lx[1:] + lx[:-1]) / 2, [lx[-1]]]))
    start = None
    for i, m in enumerate(list(mask) + [False]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            ax.axvspan(edges[start], edges[i], color="tab:orange", alpha=0.12, lw=0, label=label)
            label, start = None, None


def plot_rates(result, ax=None, title: str | None = None) -> Any:
    """Measured means with their intervals, the rate bound, the explicit bound, the fitted line,
    the theory slope through the centre point, and the regime where the bound's privacy term
    dominates (shaded)."""
    fig, ax = _figure(ax)
    rows, setup = result.rows, result.setup
    x = np.array([r["value"] for r in rows], dtype=float)
    mean = np.array([r["mean"] for r in rows])
    err = np.array([mean - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - mean])
    fit_mask = np.array([r.get("in_fit", True) for r in rows])
    curve = result.curve
    _shade(ax, np.array(curve["x"]), np.array(curve["privacy_dominates"]), "privacy term dominates (rate bound)")
    ax.errorbar(x[fit_mask], mean[fit_mask], yerr=err[:, fit_mask], fmt="o", color="tab:blue", capsize=3,
                label=f"measured mean ({int(100 * setup.confidence)}% CI, {setup.trials} trials)")
    if (~fit_mask).any():
        ax.errorbar(x[~fit_mask], mean[~fit_mask], yerr=err[:, ~fit_mask], fmt="o", mfc="none",
                    color="tab:blue", capsize=3, label="measured (not in fit)")
    floor = [r.get("nonprivate_mean") for r in rows]
    if all(f is not None and f > 0 for f in floor):
        ax.plot(x, floor, "s", color="0.5", ms=4, label="non-private floor (same R, K)")
    at_opt = [r.get("noise_only_mean") for r in rows]
    if all(f is not None and f > 0 for f in at_opt):
        ax.plot(x, at_opt, "x", color="tab:green", ms=6, label="started at w* (accumulated noise only)")
    ax.plot(x, [r["start_metric"] for r in rows], "_", color="k", ms=14, mew=1.5, label="at the start w0 = 0")
    ax.plot(curve["x"], curve["bound"], "-", color="tab:red", label=f"{result.theorem.bound} (constants 1)")
    explicit = [r["explicit_bound"] for r in rows]
    if all(e is not None for e in explicit):
        ax.plot(x, explicit, "^-", color="tab:purple", ms=4, label=f"{result.theorem.explicit} at run's noise")
    xs = np.geomspace(x[fit_mask].min(), x[fit_mask].max(), 32)
    fit = result.fit
    lo, hi = fit.slope_ci
    ax.plot(xs, fit.predict(xs), "--", color="tab:blue", lw=1.5,
            label=f"fit: slope {fit.slope:.2f} [{lo:.2f}, {hi:.2f}]")
    centre = np.exp(np.log(x[fit_mask]).mean())
    anchor = fit.predict(centre) * THEORY_OFFSET  # apart from the fit, which it would hide when they agree
    ax.plot(xs, anchor * (xs / centre) ** result.theory_exponent, ":", color="k", lw=2.0,
            label=f"theory slope {result.theory_exponent:.2f} ({result.dominant_term} term; "
                  f"drawn at {THEORY_OFFSET:g}x the fit)")
    ax.set(xscale="log", yscale="log", xlabel=LABELS.get(setup.vary, setup.vary),
           ylabel=result.theorem.metric,
           title=title or f"{label(setup.algorithm)} on {setup.family or result.theorem.family}: "
                          f"{result.theorem.theorem}\n{_fixed(setup)}")
    ax.title.set_fontsize(9)
    _grid_ticks(ax, x)
    legend_outside(ax, fontsize=7)
    fig.tight_layout()
    return fig


def plot_comparison(comparison, ax=None, title: str | None = None) -> Any:
    """Ratio of two algorithms' means on one grid, its fitted slope and the theory slope."""
    fig, ax = _figure(ax)
    rows = comparison.ratio
    x = np.array([r["value"] for r in rows], dtype=float)
    ratio = np.array([r["ratio"] for r in rows])
    err = np.array([ratio - [r["ci_low"] for r in rows], np.array([r["ci_high"] for r in rows]) - ratio])
    first, second = comparison.first.setup.algorithm, comparison.second.setup.algorithm
    ax.errorbar(x, ratio, yerr=err, fmt="o", capsize=3, color=style(second)[1],
                label=f"mean({label(second)}) / mean({label(first)})")
    fit = comparison.fit
    xs = np.geomspace(x.min(), x.max(), 32)
    lo, hi = fit.slope_ci
    ax.plot(xs, fit.predict(xs), "--", label=f"fit: slope {fit.slope:.2f} [{lo:.2f}, {hi:.2f}]")
    centre = np.exp(np.log(x).mean())
    ax.plot(xs, THEORY_OFFSET * fit.predict(centre) * (xs / centre) ** comparison.theory_exponent, ":", color="k",
            lw=2.0, label=f"privacy-term ratio of the bounds: slope {comparison.theory_exponent:.2f} "
                          f"(drawn at {THEORY_OFFSET:g}x the fit)")
    ax.axhline(1.0, color="0.6", lw=0.8)
    setup = comparison.first.setup
    ax.set(xscale="log", yscale="log", xlabel=LABELS.get(setup.vary, setup.vary), ylabel="ratio of excess risks",
           title=title or f"{label(second)} vs {label(first)}\n{_fixed(setup)}")
    ax.title.set_fontsize(9)
    _grid_ticks(ax, x)
    legend_outside(ax, fontsize=7)
    fig.tight_layout()
    return fig
