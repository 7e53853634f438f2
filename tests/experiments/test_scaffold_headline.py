"""The DP-SCAFFOLD headline (Noble et al. 2022, Fig 1) through the ``scaffold-synthetic`` preset,
quick mode (its notebook, notebooks/dp_scaffold.ipynb, is executed by tests/test_notebooks.py).
The quick grid (one trial, runs reproducible bit for bit) asserts the part of the headline that
also held in every cell of the full grid (docs/scaffold.md): DP-SCAFFOLD beats DP-FedAvg on
heterogeneous data at every K, and there is no gap on i.i.d. data. Whether the gap grows with K
is measured by the full grid and reported there, not asserted."""

import pytest
import torch

from silodp.experiments import preset, reproduce, scaffold_gaps, scaffold_headline


@pytest.fixture(scope="module")
def quick(tmp_path_factory):
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # thousands of tiny local steps: intra-op threads only add contention
    try:
        yield reproduce("scaffold-synthetic", quick=True, store=tmp_path_factory.mktemp("scaffold") / "r.db",
                        workers=1, progress=False)
    finally:
        torch.set_num_threads(threads)


def test_quick_headline(quick):
    assert quick["runs"]["stored"] == {"ok": 8, "failed": 0, "skipped": 0}
    gaps = {(e["setting"], e["local_steps"]): e for e in scaffold_gaps(quick["summary"])}
    assert set(gaps) == {(s, k) for s in ("Synthetic(5,5)", "iid") for k in (5, 50)}
    for k in (5, 50):
        assert gaps["Synthetic(5,5)", k]["gap"] > 0.03
        assert abs(gaps["iid", k]["gap"]) < 0.03
    # every run certified at the target toward the server (epsilon = 10)
    assert all(0 < r["certified_epsilon"] <= 10.0 for r in quick["summary"])
    claims = {c["id"]: c for c in quick["claims"]}
    assert claims["dp-scaffold-beats-dp-fedavg-on-heterogeneous-data"]["reproduced"] is True


def test_quick_preset_is_the_protocol():
    configs = preset("scaffold-synthetic", quick=True).expand()
    assert {(c.param("local_steps"), c.rounds) for c in configs} == {(5, 40), (50, 4)}  # K T = 200 for every K
    assert {c.step_size * c.param("local_steps") for c in configs} == {10.0}  # K eta_l fixed


def test_figure_has_one_panel_per_setting(quick):
    fig = scaffold_headline(quick["summary"])
    assert [ax.get_title() for ax in fig.axes] == ["Synthetic(5,5)", "iid"]
    assert [len(ax.lines) > 0 for ax in fig.axes] == [True, True]
    with pytest.raises(ValueError, match="rows"):
        scaffold_headline([])
