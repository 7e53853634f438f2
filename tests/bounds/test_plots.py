"""Every bounds figure states what it holds fixed, and its legend lies outside the data."""

import matplotlib
import numpy as np
import pytest

matplotlib.use("Agg")

from silodp.bounds.plots import ratio_figure, regime_map_figure  # noqa: E402

FIXED = dict(N=10, M=10, d=100, delta=1e-6, L=1, kappa=10, mu=1)


@pytest.fixture(scope="module")
def regime():
    return regime_map_figure("thm2.1-sdp", ("n", np.logspace(1, 7, 20)), ("eps", np.logspace(-2, 1, 15)), FIXED)


def test_regime_map_title_states_every_fixed_parameter(regime):
    title = regime.axes[0].get_title()
    for name, value in FIXED.items():
        assert f"{name}={value:g}" in title


def test_regime_map_legend_is_outside_the_axes(regime):
    regime.canvas.draw()
    ax = regime.axes[0]
    legend = ax.get_legend().get_window_extent()
    assert legend.x0 >= ax.get_window_extent().x1


def test_ratio_figure_title_states_epsilon():
    fixed = dict(n=1e4, M=1, eps=1, delta=1e-6, L=1, kappa=10, mu=1)
    fig = ratio_figure("thm2.1-sdp", "thm2.1-isrl", ("N", np.logspace(0, 3, 10)), ("d", np.logspace(0, 6, 10)),
                       fixed)
    assert "eps=1" in fig.axes[0].get_title() and "delta=1e-06" in fig.axes[0].get_title()
