"""Figures: test error versus epsilon per algorithm (as the paper's Figures 4-10), one row per
experiment, with tight accounting and the paper's closed-form calibration side by side; and the
DP-SCAFFOLD headline (Noble et al. 2022, Fig 1): test accuracy against the number of local steps.

Functions take summary rows (:func:`silodp.experiments.report.summarize`) and return a
:class:`matplotlib.figure.Figure`; saving is the caller's choice. No pyplot state is touched.
"""

from __future__ import annotations

import collections

from silodp.palette import label, legend_outside, style

from .paper import SCAFFOLD_TITLES

CALIBRATION_TITLES = {"tight": "tight accounting (silodp)", "paper": "paper's closed-form noise (App H.2)"}


def _style(algorithm: str, index: int):
    """(colour, marker) of ``algorithm``: :mod:`silodp.palette`, the same in every panel."""
    return style(algorithm)[1:]


def _by_algorithm(rows: list[dict], calibration: str) -> dict:
    out = collections.defaultdict(list)
    for r in sorted(rows, key=lambda r: r["epsilon"] or 0.0):
        if r["epsilon"] is not None and r["calibration"] == calibration:
            out[r["algorithm"]].append(r)
    return out


def plot_error_vs_epsilon(rows: list[dict], ax, calibration: str) -> None:
    """Draw one panel: private algorithms as mean +- std over trials against epsilon (log axis);
    non-private baselines (epsilon-independent) as horizontal lines with a +- std band. A panel
    other than "tight" also shows, faint and dashed, the tight-accounting curve of each of its
    algorithms (the utility the accounting buys)."""
    private = _by_algorithm(rows, calibration)
    if calibration != "tight":
        tight = _by_algorithm(rows, "tight")
        for i, alg in enumerate(sorted(set(private) & set(tight))):
            color, _ = _style(alg, i)
            ax.plot([r["epsilon"] for r in tight[alg]], [r["mean_test_error"] for r in tight[alg]], color=color,
                    linestyle=":", alpha=0.6, label=f"{label(alg)}, tight accounting")
    epsilons = sorted({r["epsilon"] for rs in private.values() for r in rs})
    for i, (alg, rs) in enumerate(sorted(private.items())):
        color, marker = _style(alg, i)
        ax.errorbar([r["epsilon"] for r in rs], [r["mean_test_error"] for r in rs],
                    yerr=[r["std_test_error"] for r in rs], color=color, marker=marker, capsize=3,
                    label=label(alg))
    for i, r in enumerate(r for r in rows if r["epsilon"] is None):
        color, _ = _style(r["algorithm"], i)
        m, s = r["mean_test_error"], r["std_test_error"]
        ax.axhline(m, color=color, linestyle="--", linewidth=1, label=label(r["algorithm"]))
        ax.axhspan(m - s, m + s, color=color, alpha=0.08)
    if epsilons:
        ax.set_xscale("log")
        ax.set_xticks(epsilons)
        ax.set_xticklabels([f"{e:g}" for e in epsilons])
        ax.minorticks_off()
    else:
        ax.text(0.5, 0.5, "no private runs", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel("epsilon")
    ax.set_ylabel("test error")
    ax.grid(True, alpha=0.3)


def error_vs_epsilon(rows: list[dict], calibrations: tuple[str, ...] | None = None, title: str | None = None):
    """Figure with one row per experiment and one column per calibration (tight, paper)."""
    from matplotlib.figure import Figure

    if not rows:
        raise ValueError("rows: nothing to plot (no finished runs)")
    experiments = sorted({r["experiment"] for r in rows})
    present = [c for c in ("tight", "paper") if any(r["calibration"] == c for r in rows)] or ["tight"]
    cals = list(calibrations or present)
    fig = Figure(figsize=(5.2 * len(cals), 3.8 * len(experiments)), layout="constrained")
    axes = fig.subplots(len(experiments), len(cals), squeeze=False, sharey="row")
    for i, exp in enumerate(experiments):
        mine = [r for r in rows if r["experiment"] == exp]
        for j, cal in enumerate(cals):
            ax = axes[i][j]
            plot_error_vs_epsilon(mine, ax, cal)
            ax.set_title(f"{exp}: {CALIBRATION_TITLES.get(cal, cal)}", fontsize=9)
            missing = sorted({r["algorithm"] for r in mine if r["epsilon"] is not None}
                             - {r["algorithm"] for r in mine if r["calibration"] == cal and r["epsilon"] is not None})
            if missing:
                ax.text(0.02, 0.02, "no runs: " + ", ".join(label(a) for a in missing), fontsize=7,
                        transform=ax.transAxes, va="bottom", color="0.4")
        for ax in axes[i]:
            legend_outside(ax, fontsize=7)
    if title:
        fig.suptitle(title)
    return fig


#: the headline's algorithms, in the ``scaffold`` table's column order (:mod:`.paper`)
SCAFFOLD_NAMES = tuple(SCAFFOLD_TITLES)


def scaffold_headline(rows: list[dict]):
    """Test accuracy against K (local steps, K T fixed), one panel per dataset setting, from
    summary rows of the ``scaffold-synthetic`` grid (:func:`.report.scaffold_gaps`)."""
    from matplotlib.figure import Figure

    from .report import scaffold_gaps

    table = scaffold_gaps(rows)
    if not table:
        raise ValueError("rows: no DP-SCAFFOLD / DP-FedAvg runs to plot")
    settings = list(dict.fromkeys(e["setting"] for e in sorted(table, key=lambda e: e["setting"] == "iid")))
    fig = Figure(figsize=(4.2 * len(settings), 3.4), layout="constrained")
    axes = fig.subplots(1, len(settings), sharey=True, squeeze=False)[0]
    for ax, setting in zip(axes, settings):
        part = [e for e in table if e["setting"] == setting]
        ks = [e["local_steps"] for e in part]
        for name in SCAFFOLD_NAMES:
            if all(name in e for e in part):
                _, color, marker = style(name)
                ax.errorbar(ks, [e[name] for e in part], yerr=[e[f"{name}_std"] for e in part], marker=marker,
                            color=color, capsize=3, label=label(name))
        ax.set_xscale("log")
        ax.set_xticks(ks, [str(k) for k in ks])
        ax.minorticks_off()
        ax.set_title(setting)
        ax.set_xlabel("local steps K (K T fixed)")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("test accuracy")
    legend_outside(axes[-1], fontsize=8)
    fig.suptitle(_scaffold_fixed(rows), fontsize=9)
    return fig


def _scaffold_fixed(rows: list[dict]) -> str:
    """What the headline holds fixed (every figure states its epsilon and fixed parameters): the
    target epsilon (or "no noise"), users x records (MNIST: users and label similarity),
    dimension, K T and the sampling rates, each once if constant."""
    dp = [r for r in rows if r["algorithm"] in SCAFFOLD_NAMES]

    def values(get, among=dp) -> str:
        return "/".join(f"{v:g}" for v in sorted({get(r) for r in among}))

    def hp(r: dict) -> dict:
        return dict(r["hyperparameters"].get("params", ()))

    private = [r for r in dp if r["epsilon"] is not None]
    eps = f"target \u03b5 = {values(lambda r: r['epsilon'], private)}" if private else "no noise"
    if all(r.get("dataset") == "mnist_label_skew" for r in dp):
        data = (f"MNIST, M = {values(lambda r: r['data'].get('num_users', 20))} users, "
                f"similarity {values(lambda r: r['data'].get('similarity', 0.1))}")
    else:
        data = (f"M = {values(lambda r: r['data']['num_users'])} users x "
                f"{values(lambda r: r['data']['samples_per_user'])} records, "
                f"d = {values(lambda r: r['data']['dim'])}")
    return (f"{eps}, {data}, "
            f"K T = {values(lambda r: r['rounds'] * r['hyperparameters']['local_steps'])}, "
            f"data sampling {values(lambda r: hp(r)['data_sampling'])}, "
            f"user sampling {values(lambda r: hp(r)['user_sampling'])}")
