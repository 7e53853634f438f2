"""silodp.verify.rates: ISRL-DP Prox-SGD (Thm 2.1) has the rates of its bound's privacy term.

Noise-dominated presets (``noise_dominated_setup``: the rate bound's privacy term dominates at every
grid point, and the output is the accumulated noise, worse than w0): the fitted log-log slope's 95%
bootstrap interval must contain the exponent of the bound's dominant term, -2 in eps, -2 in n, -1
in M, +1 in d; and the measured mean plus its interval must stay below the explicit bound
eq. (19)-(20) with the silo-sampling term (``eq20-sampling``) at the run's constants and noise.
The quick presets (where the output improves on w0) and the verdict: tests/verify/test_rates_verdict.py.
"""

import csv
import io
import json
import math

import numpy as np
import pytest

from silodp.verify import rates
from silodp.verify.rates.plots import plot_comparison, plot_rates

EXPECTED = {"eps": -2.0, "n": -2.0, "M": -1.0, "d": 1.0}


@pytest.fixture(scope="module")
def results():
    return {}


def _result(results, vary):
    if vary not in results:
        results[vary] = rates.run_rates(rates.noise_dominated_setup("isrl-prox-sgd", vary))
    return results[vary]


@pytest.mark.parametrize("vary", list(EXPECTED))
def test_prox_sgd_slope_matches_the_privacy_term(results, vary):
    r = _result(results, vary)
    assert r.privacy_dominated and r.dominant_term == "privacy"
    assert r.theory_exponent == pytest.approx(EXPECTED[vary], abs=1e-6)
    lo, hi = r.fit.slope_ci
    assert lo <= EXPECTED[vary] <= hi, (vary, r.fit)
    assert hi - lo < 0.3  # the interval is informative, not a licence


@pytest.mark.parametrize("vary", list(EXPECTED))
def test_prox_sgd_explicit_bound_holds(results, vary):
    r = _result(results, vary)
    assert r.explicit_bound_holds is True and r.explicit_conditions_hold is True
    for row in r.rows:
        assert row["ci_high"] <= row["explicit_bound"]
        assert row["ci_low"] <= row["mean"] <= row["ci_high"]


def test_noise_is_the_accounting_layers_and_scales_as_in_the_bound(results):
    r = _result(results, "eps")
    sig = [row["noise"]["sigma"] for row in r.rows]
    # the paper's closed form of Thm E.1 (through silodp.accounting): sigma proportional to 1/eps
    assert np.allclose(np.array(sig) * np.array(r.setup.values), sig[0] * r.setup.values[0], rtol=1e-12)
    assert r.noise_slope == pytest.approx(-2.0, abs=1e-9)
    assert all(row["certified_epsilon"] is not None and row["certified_epsilon"] > 0 for row in r.rows)
    n = _result(results, "n")
    assert [row["plan"]["batch_size"] for row in n.rows] == [v // 15 for v in (240, 480, 960, 1920)]


def test_rows_record_the_constants_and_regime(results):
    r = _result(results, "d")
    for row in r.rows:
        assert row["kappa"] == pytest.approx(row["beta"] / row["mu"])
        assert row["terms"]["privacy"] > row["terms"]["statistical"]
        assert row["term_exponents"]["privacy"] == pytest.approx(1.0, abs=1e-6)
        assert row["explicit_conditions"]["K_fits"] is True
    assert len({round(row["L"], 12) for row in r.rows}) == 1  # varying d keeps L fixed
    assert all(r.curve["privacy_dominates"])


def test_json_and_csv_outputs(results):
    r = _result(results, "eps")
    payload = json.loads(json.dumps(r.to_dict()))
    for key in ("vary", "slope", "slope_ci", "theory_exponent", "explicit_bound_holds"):
        assert key in payload
    assert payload["vary"] == "eps" and len(payload["points"]) == 4
    table = list(csv.DictReader(io.StringIO(r.to_csv())))
    assert len(table) == 4 and float(table[0]["mean"]) == pytest.approx(r.rows[0]["mean"])
    assert "terms_privacy" in table[0]


def test_figure(results):
    from matplotlib.figure import Figure

    r = _result(results, "eps")
    fig = plot_rates(r)
    assert isinstance(fig, Figure)
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("fit: slope" in s for s in labels) and any("privacy term dominates" in s for s in labels)
    assert any("thm2.1-isrl" in s for s in labels) and any("eq20-sampling" in s for s in labels)
    assert "n=" in ax.get_title() and "delta=" in ax.get_title()  # the fixed parameters; eps is the x axis
    assert ax.get_legend().get_bbox_to_anchor().x0 > ax.get_window_extent().x1  # the legend is outside the data


def test_term_exponents_of_a_bound():
    p = dict(n=1000, N=8, M=4, d=10, eps=0.5, delta=1e-5, L=1.0, beta=1.0, mu=0.5)
    ex = rates.term_exponents("thm2.1-isrl", p, "n")
    assert ex == pytest.approx({"privacy": -2.0, "statistical": -1.0}, abs=1e-6)
    assert rates.term_exponents("thm2.1-isrl", {**p, "M": 8}, "M")["privacy"] == pytest.approx(-1.0, abs=1e-6)
    assert rates.term_exponents("thm2.1-sdp", {**p, "M": 8}, "N")["privacy"] == pytest.approx(-2.0, abs=1e-6)


def test_isrl_versus_sdp_as_n_grows():
    """SDP's privacy term decays as 1/N^2, ISRL-DP's as 1/M = 1/N: the ratio falls like 1/N."""
    setup = rates.noise_dominated_setup("isrl-prox-sgd", "N", values=(2, 8), trials=24)
    cmp = rates.compare(setup, "sdp-prox-sgd")
    assert cmp.theory_exponent == pytest.approx(-1.0, abs=1e-6)
    assert cmp.fit.slope < -0.5 and cmp.fit.contains(-1.0)
    assert cmp.ratio[0]["ratio"] > cmp.ratio[1]["ratio"]
    assert plot_comparison(cmp).axes[0].get_xscale() == "log"
    assert set(cmp.to_dict()) >= {"ratio_slope", "ratio_slope_ci", "theory_exponent"}


@pytest.mark.parametrize("kwargs, match", [
    (dict(vary="x"), "vary"),
    (dict(noise="loud"), "noise"),
    (dict(values=(1.0,)), "values"),
    (dict(vary="n", values=(10.5, 20)), "values"),
    (dict(vary="M", values=(2, 8), N=4), "M"),
    (dict(trials=1), "trials"),
])
def test_bad_setup_raises(kwargs, match):
    with pytest.raises(ValueError, match=match):
        rates.RateSetup(**kwargs)


def test_unknown_algorithm_and_unrunnable_grid_raise():
    with pytest.raises(ValueError, match="algorithm"):
        rates.quick_setup("mb-sgd", "eps")
    with pytest.raises(ValueError, match="vary"):
        rates.quick_setup("isrl-spider", "M")
    with pytest.raises(ValueError, match="n"):
        rates.run_rates(rates.quick_setup("isrl-prox-sgd", "n", values=(4, 8), trials=2))


def test_full_setup_fits_on_privacy_dominated_points():
    s = rates.full_setup("isrl-prox-sgd", "eps")
    assert s.fit_privacy_only and s.baseline and s.trials >= 128 and len(s.values) >= 6
    assert math.isclose(min(s.values), 0.025)


def test_figure_subtitle_says_m_follows_n_when_n_varies():
    """Issue 36: varying N runs M = N; the subtitle must not print the setup's unused M (it said
    M = 4 while the axis said M = N)."""
    from types import SimpleNamespace

    from silodp.verify.rates.plots import _fixed

    setup = SimpleNamespace(vary="N", n=100, N=8, M=4, eps=1.0, delta=1e-5, d=5, rounds=10, noise="gaussian", trials=3)
    text = _fixed(setup)
    assert "M=N" in text and "M=4" not in text and "N=8" not in text
    assert "M=4" in _fixed(SimpleNamespace(**{**vars(setup), "vary": "n"}))
