"""compare(), grid(), regime_map(): ratios and who wins where."""

import numpy as np
import pytest

from silodp.bounds import compare, get_bound, grid, privacy_almost_free, regime_map


def test_grid_is_an_open_mesh_in_keyword_order():
    g = grid(n=[1, 2, 3], eps=[0.5, 1.0])
    assert g["n"].shape == (3, 1) and g["eps"].shape == (1, 2)
    assert get_bound("wang2019").evaluate(**g, N=1, d=4).shape == (3, 2)


def test_compare_sdp_vs_isrl_spider_ratio_is_n_to_the_minus_two_thirds():
    # thm3.2 / thm3.1 -> N^(-2/3) where the 4/3 terms dominate.
    g = dict(n=1e6, N=np.array([1.0, 8.0, 64.0]), eps=1.0, delta=1e-5, d=10, L=1, beta=1, Delta=1)
    c = compare("thm3.2", "thm3.1", g)
    assert c.ratio[0] == pytest.approx(1.0)
    assert c.ratio[1] == pytest.approx(8 ** (-2 / 3), rel=1e-2)
    assert c.a_wins.tolist() == [False, True, True] and not c.b_wins.any()


def test_compare_ignores_parameters_a_bound_does_not_use():
    c = compare("wang2019", get_bound("arora2022-pooled"),
                dict(n=1e3, N=10.0, d=10.0, eps=1.0, delta=1e-5, L=1.0, kappa=2.0, mu=1.0))
    assert np.shape(c.ratio) == ()


def test_compare_rejects_unknown_names_and_ids():
    with pytest.raises(ValueError, match="'foo'"):
        compare("wang2019", "thm3.2", dict(n=1, N=1, d=1, eps=1, foo=2))
    with pytest.raises(ValueError, match="'nope'"):
        compare("nope", "thm3.2", dict(n=1))


def test_regime_map_of_thm21_isrl_matches_remark_21():
    g = grid(n=np.logspace(1, 8, 60), eps=np.logspace(-2, 1, 50))
    fixed = dict(N=10.0, M=10.0, d=100.0, delta=1e-6, L=1.0, kappa=5.0, mu=1.0)
    idx, names = regime_map("thm2.1-isrl", {**g, **fixed})
    assert names == ("privacy", "statistical")
    free = privacy_almost_free({**g, **fixed})["isrl"]
    assert np.array_equal(idx == names.index("statistical"), np.broadcast_to(free, idx.shape))
    assert 0 < free.mean() < 1  # both regimes occur on this grid
