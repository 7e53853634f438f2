"""The one verdict of a rate experiment (issue 36 item 4) and the quick presets' regime.

A slope that agrees with the theorem says nothing when the output is worse than the start w0 (the
quick preset used to measure 12.05 against 0.0117 at w0 and print ``slope_agrees: true``): the
verdict cannot be ``agrees`` unless the output improves on w0 at every point and no explicit bound
is exceeded. The quick presets sit where the output improves on w0.
"""

import itertools
import json

import pytest

from silodp.cli import main
from silodp.verify import rates
from silodp.verify.rates.stats import PowerLawFit
from silodp.verify.rates.theorems import get_theorem


@pytest.mark.parametrize("slope, improves, explicit", itertools.product((True, False), (True, False), (True, False, None)))
def test_agrees_only_with_an_improvement_and_no_bound_exceeded(slope, improves, explicit):
    verdict = rates.rate_verdict(slope, improves, explicit)
    assert verdict in rates.VERDICTS
    assert (verdict == "agrees") == (slope and improves and explicit is not False)
    if not improves and explicit is not False:
        assert verdict == "no-improvement"


def _result(ci_high: float, start: float, slope_ci=(-2.1, -1.9)) -> rates.RateResult:
    """A constructed result: two points with the given upper interval ends and start metric, and a
    fit whose interval contains the theory exponent -2 when ``slope_ci`` does."""
    rows = [{"value": v, "mean": ci_high * 0.9, "ci_low": ci_high * 0.8, "ci_high": ci_high, "start_metric": start,
             "explicit_holds": True, "explicit_conditions": {}, "dominant_term": "privacy", "noise": {"sigma": 1.0 / v}}
            for v in (0.1, 0.2)]
    fit = PowerLawFit(slope=-2.0, intercept=0.0, slope_ci=slope_ci, slope_se=0.05, confidence=0.95)
    return rates.RateResult(rates.RateSetup(values=(0.1, 0.2)), get_theorem("isrl-prox-sgd"), rows, fit, -2.0, "privacy")


def test_a_right_slope_worse_than_w0_is_not_agreement():
    """The issue's case: the slope agrees (-2 in its interval) but the output is worse than w0."""
    r = _result(ci_high=12.98, start=0.0117)
    assert r.slope_agrees and not r.improves_on_start
    assert r.verdict == "no-improvement"
    payload = r.to_dict()
    assert payload["verdict"] == "no-improvement"
    assert payload["slope_agrees"] is True and payload["improves_on_start"] is False  # kept for scripts
    better = _result(ci_high=0.005, start=0.0117)
    assert better.improves_on_start and better.verdict == "agrees"
    assert _result(ci_high=0.005, start=0.0117, slope_ci=(-1.5, -1.2)).verdict == "slope-disagrees"


@pytest.mark.slow
def test_the_quick_preset_improves_on_the_start_and_agrees(capsys):
    """``silodp rates --vary eps --quick``: every point's upper interval end below the metric at w0,
    the rate bound's privacy term dominant at the grid's centre, and the verdict ``agrees``."""
    assert main(["rates", "--vary", "eps", "--quick", "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["improves_on_start"] is True
    assert all(p["ci_high"] < p["start_metric"] for p in payload["points"])
    assert payload["dominant_term"] == "privacy" and payload["theory_exponent"] == pytest.approx(-2.0, abs=1e-6)
    assert payload["explicit_bound_holds"] is True
    assert payload["verdict"] == "agrees"


def test_the_noise_dominated_preset_is_what_the_quick_one_was():
    """The old quick grid is kept, named for what it is (its output is worse than w0)."""
    s = rates.noise_dominated_setup("isrl-prox-sgd", "eps")
    assert (s.n, s.eps, s.d, s.values) == (960, 0.2, 11, (0.05, 0.1, 0.2, 0.4))
    q = rates.quick_setup("isrl-prox-sgd", "eps")
    assert (q.n, q.d, q.values) == (8192, 3, (0.07, 0.14))
    with pytest.raises(ValueError, match="vary"):
        rates.noise_dominated_setup("isrl-spider", "eps")


def test_pl_svrg_quick_eps_preset_sits_where_the_output_improves_on_w0():
    """PL-SVRG's quick eps grid moved to n 1000, d 3, eps 4-15 (measured: 0.0113 down to 0.0016
    against 0.042 at w0, verdict ``slope-disagrees``, -1.47 [-1.74, -1.19] against -2; at n 500,
    d 11 it was worse than w0); its full grid, which feeds a recorded table, is unchanged."""
    q = rates.quick_setup("isrl-pl-svrg", "eps")
    assert (q.n, q.d, q.values, q.trials) == (1000, 3, (4.0, 8.0, 15.0), 32)
    f = rates.full_setup("isrl-pl-svrg", "eps")
    assert (f.n, f.d, f.values, f.trials) == (500, 11, (0.5, 1.0, 2.0, 4.0), 128)
    n = rates.quick_setup("isrl-pl-svrg", "n")  # quick_fixed is per variable: the n grid keeps n 500's d
    assert (n.d, n.values) == (11, (250.0, 500.0, 1000.0, 2000.0))
