"""Markdown tables of summary rows (:func:`.report.summarize`), the bodies of the stamped blocks
of docs/ (:mod:`.stamp`), written by ``silodp report``.

``errors``: per experiment, one row per epsilon and one column per private algorithm and
calibration (test error mean ± standard deviation over trials at the validation-selected
hyperparameters; the best tight-accounting mean of a row in bold; a paper-calibration cell also
shows the epsilon its noise really certifies), then the non-private baselines.
``scaffold``: Noble et al.'s headline, test accuracy of DP-SCAFFOLD and DP-FedAvg (or of their
noiseless twins SCAFFOLD and FedAvg) per setting and K, with the gap and its 95% confidence interval (Student t over the per-trial gaps: both
algorithms run on the same data and seeds in each trial, so the gaps are paired).
``claims``: each claim :func:`.report.check_claims` can test on the rows, its verdict and the
scalar measurements behind it.
"""

from __future__ import annotations

import collections
import math
import statistics

KINDS = ("errors", "scaffold", "claims")


def _cell(mean: float, std: float) -> str:
    return f"{mean:.4f} ± {std:.4f}"


def _label(algorithm: str, calibration: str) -> str:
    from silodp.palette import label

    from .paper import ALG11

    name = "SPIDER, Alg 11 rule" if algorithm == ALG11 else label(algorithm)
    return name + (", paper's noise (certifies)" if calibration == "paper" else "")


def errors_table(rows: list[dict]) -> str:
    """The ``errors`` table of summary rows (several experiments: one table each, headed)."""
    from .report import _order

    by_exp = collections.defaultdict(list)
    for r in rows:
        by_exp[r["experiment"]].append(r)
    parts = []
    for exp, exp_rows in by_exp.items():
        private = [r for r in exp_rows if r["epsilon"] is not None]
        cols = sorted({(r["algorithm"], r["calibration"]) for r in private},
                      key=lambda c: (c[1] != "tight", _order(c[0]), c[0]))
        cells = {(r["algorithm"], r["calibration"], r["epsilon"]): r for r in private}
        lines = [f"**{exp}**", ""] if len(by_exp) > 1 else []
        lines += ["| epsilon | " + " | ".join(_label(*c) for c in cols) + " |", "|---" * (len(cols) + 1) + "|"]
        for eps in sorted({r["epsilon"] for r in private}):
            tight = [cells[(a, c, eps)]["mean_test_error"] for a, c in cols if c == "tight" and (a, c, eps) in cells]
            row = []
            for a, c in cols:
                r = cells.get((a, c, eps))
                if r is None:
                    row.append("-")
                    continue
                text = _cell(r["mean_test_error"], r["std_test_error"])
                if c == "tight" and tight and r["mean_test_error"] == min(tight):
                    text = f"**{text}**"
                if c == "paper" and r["certified_epsilon"] is not None:
                    text += f" ({math.ceil(r['certified_epsilon'] * 100) / 100:.2f})"
                row.append(text)
            lines.append(f"| {eps:g} | " + " | ".join(row) + " |")
        baselines = [r for r in exp_rows if r["epsilon"] is None]
        if baselines:
            lines += ["", "Non-private: " + ", ".join(
                f"{_label(r['algorithm'], 'none').replace(' (non-private)', '')} "
                f"{_cell(r['mean_test_error'], r['std_test_error'])}" for r in baselines) + "."]
        trials = sorted({r["trials"] for r in exp_rows})
        lines += ["", f"Trials per cell: {', '.join(map(str, trials))}."]
        parts.append("\n".join(lines))
    return "\n\n".join(parts)


def _t95(n: int) -> float:
    from scipy.stats import t

    return float(t.ppf(0.975, n - 1))




def scaffold_table(rows: list[dict], calibration: str = "tight") -> str:
    """The ``scaffold`` table: accuracy (1 - test error) per setting and K, gap = DP-SCAFFOLD
    minus DP-FedAvg (or, on a noiseless grid, SCAFFOLD minus FedAvg) with its paired 95%
    confidence interval; a column for every algorithm of :data:`.paper.SCAFFOLD_TITLES` the rows hold
    (DP-SCAFFOLD and DP-FedAvg always, unless the rows are noiseless)."""
    from .paper import SCAFFOLD_PAIRS, SCAFFOLD_TITLES
    from .report import scaffold_setting

    rows = [r for r in rows if r["algorithm"] in SCAFFOLD_TITLES
            and (r["calibration"] == calibration or r["epsilon"] is None)]
    present = {r["algorithm"] for r in rows}
    if present and present <= set(SCAFFOLD_PAIRS[1]):  # only the noiseless twins
        pair = SCAFFOLD_PAIRS[1]
    else:
        pair = SCAFFOLD_PAIRS[0]
        present |= set(pair)
    names = [n for n in SCAFFOLD_TITLES if n in present]
    cells = collections.defaultdict(dict)
    for r in rows:
        cells[(scaffold_setting(r), r["hyperparameters"].get("local_steps"), r["rounds"])][r["algorithm"]] = r
    head = ["setting", "K", "T", *(SCAFFOLD_TITLES[n] for n in names), "gap [95% CI]", "trials"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for (setting, k, t), algs in sorted(cells.items(), key=lambda kv: (kv[0][0], kv[0][1] or 0)):
        sc, fa = algs.get(pair[0]), algs.get(pair[1])
        acc = [f"{1 - algs[n]['mean_test_error']:.3f} ± {algs[n]['std_test_error']:.3f}" if n in algs else "-"
               for n in names]
        gap, n = "-", 0
        if sc and fa:
            diffs = [b - a for a, b in zip(sc["test_errors"], fa["test_errors"])]  # accuracy gap per trial
            n = len(diffs)
            mean = statistics.fmean(diffs)
            half = _t95(n) * statistics.stdev(diffs) / math.sqrt(n) if n > 1 else math.inf
            gap = f"{mean:+.3f} [{mean - half:+.3f}, {mean + half:+.3f}]"
        lines.append(f"| {setting} | {k} | {t} | {' | '.join(acc)} | {gap} | {n or '-'} |")
    return "\n".join(lines)


def _measured(value) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def claims_table(claims: list[dict]) -> str:
    """The ``claims`` table: only the claims the rows can test (verdict not None)."""
    lines = ["| claim (source) | verdict | measured |", "|---|---|---|"]
    for c in claims:
        if c["reproduced"] is None:
            continue
        items = [(k, v) for k, v in c["measured"].items() if isinstance(v, (int, float))]  # bools too
        items += [(f"{k} holds", v["holds"]) for k, v in c["measured"].items() if isinstance(v, dict) and "holds" in v]
        measured = "; ".join(f"{k.replace('_', ' ')} {_measured(v)}" for k, v in items)
        verdict = "reproduced" if c["reproduced"] else "**not reproduced**"
        lines.append(f"| {c['claim']} ({c['source']}) | {verdict} | {measured} |")
    return "\n".join(lines)


def render(kind: str, rows: list[dict], claims: list[dict] | None = None) -> str:
    if kind not in KINDS:
        raise ValueError(f"kind: must be one of {KINDS}, got {kind!r}")
    if kind == "claims":
        return claims_table(claims or [])
    return errors_table(rows) if kind == "errors" else scaffold_table(rows)
