"""The Bound value type: validation, broadcasting, exponents, conditions, LaTeX, derivation."""

import math

import numpy as np
import pytest

from silodp.bounds import BOUNDS, Bound, Kind, Source, Term, get_bound, list_bounds, validate_params
from silodp.bounds.symbols import L, d, eps, n

SPIDER = dict(n=1000, N=10, eps=1.0, delta=1e-5, d=50, L=1.0, beta=1.0, Delta=1.0)


def test_required_ids_are_registered():
    required = {"thm2.1-isrl", "thm2.1-sdp", "eq20", "thm2.2-isrl", "thm3.1", "thm3.2", "eq45",
                "thm3.3-isrl", "thm3.3-sdp", "wang2019", "arora2022"}
    assert required <= set(BOUNDS)


def test_every_bound_is_well_formed():
    for b in list_bounds():
        assert b.terms and b.title and b.source.paper and b.source.theorem
        assert b.kind.direction in ("upper", "lower")
        assert b.kind.privacy in ("ISRL-DP", "SDP", "CDP", "non-private", "ISRL-DP+user-level")
        for s in b.expr.free_symbols:
            assert s.is_positive, (b.id, s)
        assert b.latex().startswith(b.quantity)


@pytest.mark.parametrize(
    "params, argument",
    [
        ({**SPIDER, "n": 0}, "'n'"),
        ({**SPIDER, "d": -3}, "'d'"),
        ({**SPIDER, "eps": float("nan")}, "'eps'"),
        ({**SPIDER, "L": float("inf")}, "'L'"),
        ({**SPIDER, "delta": 1.0}, "'delta'"),
        ({**SPIDER, "delta": 0.0}, "'delta'"),
        ({**SPIDER, "epsilon": 1.0}, "'epsilon'"),
        ({**SPIDER, "M": 11}, "'M'"),
        ({**SPIDER, "kappa": 3.0, "mu": 1.0}, "'kappa'"),
        ({k: v for k, v in SPIDER.items() if k != "Delta"}, "'Delta'"),
        ({**SPIDER, "n": "ten"}, "'n'"),
    ],
)
def test_invalid_parameters_raise_naming_the_argument(params, argument):
    with pytest.raises(ValueError, match=argument):
        get_bound("thm3.1").evaluate(params)


def test_array_with_one_bad_entry_is_rejected():
    with pytest.raises(ValueError, match="'n'"):
        get_bound("thm3.1").evaluate({**SPIDER, "n": np.array([10.0, -1.0])})


def test_scalar_in_scalar_out_and_broadcasting():
    b = get_bound("thm3.1")
    assert isinstance(b.evaluate(SPIDER), float)
    ns = np.array([100.0, 1000.0, 10000.0])
    eps_ = np.array([0.5, 1.0])[:, None]
    out = b.evaluate({**SPIDER, "n": ns, "eps": eps_})
    assert out.shape == (2, 3)
    assert out[1, 1] == pytest.approx(b.evaluate(SPIDER))
    assert np.all(np.diff(out, axis=1) < 0)  # decreasing in n


def test_constant_term_broadcasts():
    b = Bound("t", "t", Source("p", "t"), Kind("upper", "CDP", "ERM", "m"),
              terms=(Term("a", L / n), Term("c", L**0 * 3)))
    assert b.evaluate(L=np.ones(4), n=2.0).shape == (4,)


def test_grid_of_a_million_points_is_one_vectorized_call(monkeypatch):
    """A 1000 x 1000 grid is one call of the compiled expression on broadcast arrays (no Python
    loop over points: that is what makes it fast; the wall time itself is no unit test's to
    assert), and each of its points is the scalar evaluation there."""
    from silodp.bounds import core

    b = get_bound("thmF.1")
    grid = {**SPIDER, "M": 5, "n": np.logspace(2, 6, 1000)[:, None], "eps": np.logspace(-2, 1, 1000)}
    calls = []
    real = core._call
    monkeypatch.setattr(core, "_call", lambda *a: calls.append(a) or real(*a))
    out = b.evaluate(grid)
    assert out.shape == (1000, 1000) and len(calls) == 1
    for i, j in [(0, 0), (0, 999), (999, 0), (500, 321), (999, 999)]:
        point = {**grid, "n": float(grid["n"][i, 0]), "eps": float(grid["eps"][j])}
        assert out[i, j] == pytest.approx(b.evaluate(point), rel=1e-12)


@pytest.mark.parametrize("bound_id", ["thm3.1", "thmF.1", "eq20", "thm2.1-sdp", "thmE.2-isrl", "hu2021"])
def test_exponents_match_finite_differences(bound_id):
    b = get_bound(bound_id)
    point = dict(n=2000.0, N=10.0, M=4.0, d=30.0, eps=0.7, delta=1e-4, L=1.5, kappa=4.0, mu=0.3,
                 Delta=2.0, upsilon=0.5, R=40.0, K=20.0, T=300.0)
    full = validate_params(point)  # completes beta = kappa * mu
    point = {k: float(full[k]) for k in b.parameters}
    ex = b.exponents(point)
    h = 1e-6
    for name, value in ex.exponents.items():
        up = b.evaluate({**point, name: point[name] * math.exp(h)})
        down = b.evaluate({**point, name: point[name] * math.exp(-h)})
        assert value == pytest.approx((math.log(up) - math.log(down)) / (2 * h), abs=1e-5), name


def test_exponents_of_thm31_in_the_privacy_dominated_regime():
    # tiny n: the L^2 d ln/(eps n)^2 N term dominates, exponent of n -> -2, of d -> +1
    ex = get_bound("thm3.1").exponents({**SPIDER, "n": 1.0, "d": 1e4, "L": 100.0})
    assert ex.dominant_term == "privacy"
    assert ex.exponents["n"] == pytest.approx(-2, abs=0.05)
    ex = get_bound("thm3.1").exponents({**SPIDER, "n": 1e6})
    assert ex.dominant_term == "optimization"
    assert ex.exponents["n"] == pytest.approx(-4 / 3, abs=0.01)
    assert ex.exponents["N"] == pytest.approx(-2 / 3, abs=0.01)


def test_exponents_of_min_lower_bound_switch_off_when_saturated():
    b = get_bound("thm3.3-isrl")
    saturated = b.exponents(n=10, N=10, L=1, d=1e6, eps=1, delta=1e-3)
    assert saturated.value == 1.0 and saturated.exponents["d"] == 0.0
    live = b.exponents(n=1e4, N=10, L=1, d=10, eps=1, delta=1e-6)
    assert live.exponents["d"] == pytest.approx(1.0) and live.exponents["eps"] == pytest.approx(-2.0)


def test_exponents_need_a_single_point():
    with pytest.raises(ValueError, match="point"):
        get_bound("thm3.1").exponents({**SPIDER, "n": np.array([1.0, 2.0])})


def test_dominant_index_is_a_regime_map():
    b = get_bound("thm2.1-sdp")
    ns = np.logspace(1, 7, 7)
    idx = b.dominant_index(n=ns, N=10, M=10, d=100, eps=1, delta=1e-5, L=1, kappa=5, mu=1)
    names = [b.term_names[i] for i in idx]
    assert names[0] == "privacy" and names[-1] == "statistical"


def test_conditions_true_false_and_unknown():
    b = get_bound("thm2.1-isrl")
    base = dict(n=1000, M=5, N=5, d=10, eps=1, delta=1e-5, L=1, kappa=5, mu=1)
    assert b.conditions_hold(base) is True
    assert b.conditions_hold({k: v for k, v in base.items() if k != "N"}) is None  # full_participation
    assert b.check({**base, "eps": 20})["eps_range"] is False
    assert b.conditions_hold({**base, "n": 2}) is False  # n < kappa
    assert b.conditions_hold({k: v for k, v in base.items() if k not in ("kappa", "mu")}) is None
    arr = b.conditions_hold({**base, "eps": np.array([1.0, 20.0])})
    assert arr.tolist() == [True, False]


def test_conditions_use_prescribed_parameters():
    # eq20's K*R <= n is checked at the prescribed R, K when not given.
    b = get_bound("eq20")
    p = dict(n=20000, M=10, N=10, d=20, eps=1.0, delta=1e-6, L=1.0, kappa=20, mu=0.1, Delta=5.0)
    assert b.check(p)["K_fits"] is True
    assert b.check({**p, "R": 300, "K": 100})["K_fits"] is False


def test_prescribe_errors():
    b = get_bound("thm3.1")
    with pytest.raises(ValueError, match="variant"):
        b.prescribe(SPIDER, variant="nope")
    with pytest.raises(ValueError, match="'Delta'"):
        b.prescribe({k: v for k, v in SPIDER.items() if k != "Delta"})


def test_non_finite_value_is_an_error_not_a_nan():
    with pytest.raises(ValueError, match="eq20"):
        get_bound("eq20").evaluate(n=10, M=1, d=1, eps=1, delta=0.1, L=1, kappa=0.25, mu=1,
                                    Delta=1, R=2.5, K=1)


def test_latex_renders_symbols_as_the_paper():
    tex = get_bound("thm3.1").latex()
    assert r"\epsilon" in tex and r"\beta" in tex and r"\ln" in tex and r"\lesssim" in tex
    assert r"\gtrsim" in get_bound("thm3.3-isrl").latex()
    assert r"\le " in get_bound("eq45").latex()


def test_substitute_derives_a_new_bound():
    b = Bound("base", "base", Source("p", "t"), Kind("upper", "CDP", "ERM", "m"),
              terms=(Term("x", d / (eps * n)),))
    derived = b.substitute({eps: eps / n}, id="derived")
    assert derived.id == "derived" and b.id == "base"
    assert derived.evaluate(d=4, eps=2, n=2) == pytest.approx(4 / (2 / 2 * 2))


def test_describe_is_json_ready():
    import json

    info = get_bound("eq45").describe()
    json.dumps(info)
    assert info["id"] == "eq45" and "q_small" in info["conditions"]
    assert set(info["prescriptions"]) == {"paper"}


def test_split_params_reports_unused():
    usable, unused = get_bound("wang2019").split_params({**SPIDER, "M": 3})
    assert set(usable) == {"n", "N", "eps", "d"}
    assert unused == sorted(["delta", "L", "beta", "Delta", "M"])


@pytest.mark.parametrize("bound_id", ["thm2.1-isrl", "thm2.1-sdp", "eq20", "eq20-corrected", "eq22", "eq22-corrected"])
def test_thm21_as_printed_does_not_hold_for_partial_participation(bound_id):
    """Eqs. (11)-(13) drop the silo-sampling variance: the printed bounds claim nothing for M < N."""
    b = get_bound(bound_id)
    p = dict(n=1e6, N=2, M=1, d=1, eps=1, delta=1e-5, L=11, beta=1, mu=1, Delta=50)
    assert b.check(p)["full_participation"] is False and b.conditions_hold(p) is False
    assert b.check({**p, "M": 2})["full_participation"] is True


@pytest.mark.parametrize("bound_id,printed", [("thm2.1-isrl-sampling", "thm2.1-isrl"), ("thm2.1-sdp-sampling", "thm2.1-sdp"),
                                              ("eq20-sampling", "eq20-corrected"), ("eq22-sampling", "eq22-corrected")])
def test_sampling_bounds_add_the_heterogeneity_term(bound_id, printed):
    b, base = get_bound(bound_id), get_bound(printed)
    p = dict(n=1e6, N=2, M=1, d=1, eps=1, delta=1e-5, L=11, beta=1, mu=1, Delta=50, upsilon=1.0)
    assert "full_participation" not in b.check(p)
    assert b.term_values(p)["heterogeneity"] == pytest.approx((1 if "thm" in bound_id else 2) * 1.0)
    assert b.evaluate({**p, "M": 2}) == pytest.approx(base.evaluate({**p, "M": 2}))  # M = N: no extra term
    with pytest.raises(ValueError, match="upsilon"):
        b.evaluate({k: v for k, v in p.items() if k != "upsilon"})
