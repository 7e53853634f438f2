"""silodp.experiments.figures: test error versus epsilon, tight and paper calibration side by side."""

import pytest
from matplotlib.figure import Figure

from silodp.experiments.figures import error_vs_epsilon


def _row(experiment, algorithm, epsilon, mean, calibration="tight"):
    return {"experiment": experiment, "algorithm": algorithm, "epsilon": epsilon, "calibration": calibration,
            "mean_test_error": mean, "std_test_error": 0.01}


ROWS = [_row("wbcd M=2 R=25", a, e, 0.1 / e + off) for e in (0.75, 3.0, 18.0)
        for a, off in (("isrl-spider", 0.0), ("isrl-mb-sgd", 0.01), ("isrl-local-sgd", 0.02))]
ROWS += [_row("wbcd M=2 R=25", "isrl-spider", e, 0.2 / e, "paper") for e in (0.75, 3.0, 18.0)]
ROWS += [_row("wbcd M=2 R=25", "mb-sgd", None, 0.03, "none")]


def test_side_by_side_panels_with_one_line_per_algorithm():
    fig = error_vs_epsilon(ROWS)
    assert isinstance(fig, Figure)
    tight, paper = fig.axes[:2]
    assert "tight" in tight.get_title() and "closed-form" in paper.get_title()
    labels = tight.get_legend_handles_labels()[1]
    assert {"ISRL-DP SPIDER", "ISRL-DP MB-SGD", "ISRL-DP Local SGD", "MB-SGD (non-private)"} <= set(labels)
    assert [round(t, 2) for t in tight.get_xticks()] == [0.75, 3.0, 18.0] and tight.get_xscale() == "log"
    spider = [line for line in paper.get_lines() if line.get_marker() == "o"][0]
    assert list(spider.get_ydata()) == pytest.approx([0.2 / e for e in (0.75, 3.0, 18.0)])
    assert any("no runs" in t.get_text() and "MB-SGD" in t.get_text() for t in paper.texts)


def test_one_row_per_experiment_and_chosen_columns():
    rows = ROWS + [dict(r, experiment="mnist M=25 R=25") for r in ROWS]
    fig = error_vs_epsilon(rows, calibrations=("tight",), title="t")
    assert [ax.get_title().split()[0] for ax in fig.axes] == ["mnist", "wbcd"]  # rows sorted by experiment


def test_nothing_to_plot():
    with pytest.raises(ValueError, match="rows"):
        error_vs_epsilon([])
