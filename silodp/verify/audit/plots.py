"""Figures of audits: claims (upper bounds) against audited lower bounds. Each function takes
results and returns a matplotlib Figure; saving is the caller's choice."""

from __future__ import annotations


def plot_brackets(rows: list[dict], title: str = "", ax=None):
    """One row per audit: the claimed epsilon and the Clopper-Pearson / Gaussian-DP lower bounds.

    ``rows``: dicts with ``label``, ``epsilon_claimed``, ``epsilon_lower_clopper_pearson``,
    ``epsilon_lower_gdp``. A lower bound right of its claim (red) is a proven violation (CP) or
    an estimated one (GDP).
    """
    import matplotlib.pyplot as plt

    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(7.5, 0.42 * len(rows) + 1.8))
    ys = range(len(rows))[::-1]
    for y, r in zip(ys, rows):
        claim, cp, gdp = r["epsilon_claimed"], r["epsilon_lower_clopper_pearson"], r["epsilon_lower_gdp"]
        ax.plot([0, claim], [y, y], color="0.8", lw=6, solid_capstyle="butt")
        ax.plot(claim, y, "|", color="k", ms=16, mew=2)
        ax.plot(cp, y, "o", color="tab:red" if cp > claim else "tab:blue", ms=7)
        ax.plot(gdp, y, "s", mfc="none", color="tab:red" if gdp > claim else "tab:blue", ms=7)
    ax.set_yticks(list(ys), [r["label"] for r in rows])
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("epsilon (delta = 1e-5)")
    ax.plot([], [], "|", color="k", ms=10, mew=2, label="claimed (accountant)")
    ax.plot([], [], "o", color="tab:blue", label="audit, Clopper-Pearson")
    ax.plot([], [], "s", mfc="none", color="tab:blue", label="audit, Gaussian-DP")
    ax.plot([], [], "o", color="tab:red", label="above the claim")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=2, fontsize=7, frameon=False)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    if fig is not None:
        fig.tight_layout()
    return fig if fig is not None else ax.figure


def plot_gaussian_tightness(rows: list[dict]):
    """Audited lower bounds of one Gaussian release against its exact epsilon, by noise multiplier.

    ``rows``: dicts with ``noise_multiplier``, ``epsilon_claimed``, ``epsilon_lower_clopper_pearson``,
    ``epsilon_lower_gdp``, ``trials``.
    """
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5.2, 3.6))
    z = [r["noise_multiplier"] for r in rows]
    ax.plot(z, [r["epsilon_claimed"] for r in rows], "k-", label="exact (analytic Gaussian)")
    ax.plot(z, [r["epsilon_lower_gdp"] for r in rows], "s--", mfc="none", label="audit, Gaussian-DP")
    ax.plot(z, [r["epsilon_lower_clopper_pearson"] for r in rows], "o--", label="audit, Clopper-Pearson")
    ax.plot(z, [0.6 * r["epsilon_claimed"] for r in rows], ":", color="0.5", label="60% of exact")
    ax.set_xlabel("noise multiplier sigma / sensitivity")
    ax.set_ylabel("epsilon at delta = 1e-5")
    ax.set_yscale("log")
    ax.set_title(f"One Gaussian release, LR statistic, {rows[0]['trials']:,} trials per world", fontsize=9)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
