"""Quick mode of the DP-SCAFFOLD headline (silodp.algorithms.scaffold_headline; its notebook is
executed by tests/test_notebooks.py). The quick grid (one seed, runs are reproducible bit for bit)
asserts the part of the headline that also held in every cell of the full grid (docs/scaffold.md):
DP-SCAFFOLD beats DP-FedAvg on heterogeneous data at every K, and there is no gap on i.i.d. data.
Whether the gap grows with K is measured by the full grid and reported there, not asserted: it did
not hold."""

import pytest
from test_scaffold import one_thread  # noqa: F401  (the module-wide single-thread fixture)

from silodp.algorithms.scaffold_headline import QUICK, headline_figure, noise, run_headline, summarize


@pytest.fixture(scope="module")
def quick_rows():
    return run_headline(QUICK)


def test_quick_headline(quick_rows):
    summary = {(e["setting"], e["local_steps"]): e for e in summarize(quick_rows)}
    assert set(summary) == {(s.label, k) for s in QUICK.settings for k in QUICK.local_steps}
    for k in QUICK.local_steps:
        assert summary["Synthetic(5,5)", k]["gap"] > 0.03
        assert abs(summary["iid", k]["gap"]) < 0.03
    # one noise multiplier for every K (K T fixed) and every algorithm, certified at the target
    assert len({r["sigma_g"] for r in quick_rows}) == 1
    z, std = noise(QUICK, 120)
    assert z == quick_rows[0]["sigma_g"] > 0 and std == pytest.approx(z * 2 * QUICK.clip / 24)


def test_figure_has_one_panel_per_setting(quick_rows):
    fig = headline_figure(summarize(quick_rows))
    assert len(fig.axes) == len(QUICK.settings)
    assert [ax.get_title() for ax in fig.axes] == [s.label for s in QUICK.settings]
