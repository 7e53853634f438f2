"""Consistency properties of the encoded bounds over random valid parameters (hypothesis).

- upper bounds are at least the matching lower bounds (Thm 3.1 >= Thm 3.3, ...);
- SDP bounds are at most their ISRL-DP counterparts (and where that fails for Thm 2.1, why);
- the paper's claimed improvement over Wang et al. 2019a holds in the regime it refers to;
- Remark 2.1's "privacy almost for free" region is exactly where eq. (5)'s statistical term
  dominates; the Appendix G derivation is Thm 2.1 at (eps/n, delta/(4n)).
"""

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from silodp.bounds import compare, get_bound, privacy_almost_free, wang_improvement_region

SETTINGS = settings(max_examples=80, deadline=None)


def logu(lo, hi):
    return st.floats(math.log(lo), math.log(hi)).map(math.exp)


@st.composite
def params(draw):
    big_n = draw(st.integers(1, 1000))
    kappa, mu = draw(logu(1, 1e4)), draw(logu(1e-3, 1e2))
    return dict(
        n=float(draw(st.integers(1, 10**7))),
        N=float(big_n),
        M=float(draw(st.integers(1, big_n))),
        d=float(draw(st.integers(1, 10**6))),
        eps=draw(logu(1e-3, 15)),
        delta=draw(logu(1e-30, 0.49)),
        L=draw(logu(1e-3, 1e3)),
        beta=kappa * mu,
        Delta=draw(logu(1e-3, 1e3)),
        kappa=kappa,
        mu=mu,
        upsilon=draw(logu(1e-3, 1e2)),
    )


def value(bound_id, p):
    b = get_bound(bound_id)
    return b.evaluate(b.split_params(p)[0])


@SETTINGS
@given(params())
def test_thm31_upper_is_at_least_thm33_lower(p):
    assert value("thm3.1", p) >= value("thm3.3-isrl", p) * (1 - 1e-12)
    assert value("thmF.1", {**p, "M": p["N"]}) >= value("thm3.3-isrl", p) * (1 - 1e-12)


@SETTINGS
@given(params())
def test_thm32_upper_is_at_least_thm33_sdp_lower(p):
    assert value("thm3.2", p) >= value("thm3.3-sdp", p) * (1 - 1e-12)


@SETTINGS
@given(params())
def test_strongly_convex_lower_bounds_are_below_the_pl_upper_bounds(p):
    assert value("thm2.1-isrl", p) >= value("lr2021b-sc-lower", p) * (1 - 1e-12)
    assert value("thm2.1-sdp", p) >= value("agarwal2012-lower", p) * (1 - 1e-12)
    assert value("thm2.2-sdp", p) >= value("bassily2014-sc-lower", p) * (1 - 1e-12) or (
        math.log(1 / p["delta"]) * p["kappa"] < 1)


@SETTINGS
@given(params())
def test_sdp_is_at_most_isrl(p):
    one = 1 + 1e-12
    assert value("thm3.2", p) <= value("thm3.1", p) * one
    assert value("thm2.2-sdp", p) <= value("thm2.2-isrl", p) * one
    assert value("thm3.3-sdp", p) <= value("thm3.3-isrl", p) * one
    assert value("thmE.2-sdp", p) <= value("thmE.2-isrl-corrected", p) * one


@SETTINGS
@given(params())
def test_thm21_sdp_at_most_isrl_exactly_when_the_log_squared_is_paid_for(p):
    """eq. (5) <= eq. (4) iff N^2 ln(1/delta) >= M ln^2(d/delta): the extra log of P_vec."""
    ok = p["N"] ** 2 * math.log(1 / p["delta"]) >= p["M"] * math.log(p["d"] / p["delta"]) ** 2
    sdp, isrl = value("thm2.1-sdp", p), value("thm2.1-isrl", p)
    assume(abs(sdp / isrl - 1) > 1e-9)
    assert (sdp <= isrl) == ok


def test_thm21_sdp_can_exceed_isrl_with_one_silo():
    p = dict(n=1e4, N=1, M=1, d=100, eps=1, delta=1e-6, L=1, kappa=10, mu=1)
    assert value("thm2.1-sdp", p) > value("thm2.1-isrl", p)


@SETTINGS
@given(params())
def test_improvement_over_wang_where_the_paper_claims_it(p):
    p = {**p, "L": 1.0, "beta": 1.0, "Delta": 1.0, "kappa": 1.0, "mu": 1.0}
    if wang_improvement_region(p):
        assert value("thm3.2", p) <= value("wang2019", p)


def test_improvement_over_wang_fails_for_trivial_bounds():
    p = dict(n=1, N=1, d=100, eps=0.5, delta=1e-5, L=1, beta=1, Delta=1)
    assert not wang_improvement_region(p)
    assert value("thm3.2", p) > value("wang2019", p)


def test_improvement_over_wang_region_is_most_of_a_practical_grid():
    n = np.logspace(2, 6, 50)[:, None]
    big_n = np.logspace(0, 3, 40)
    grid = dict(n=n, N=big_n, d=100.0, eps=1.0, delta=1e-6, L=1.0, beta=1.0, Delta=1.0)
    c = compare("thm3.2", "wang2019", grid)
    assert c.fraction_a_wins > 0.9
    assert np.all(c.a_wins[wang_improvement_region(grid)])


@SETTINGS
@given(params())
def test_remark_21_privacy_for_free_is_where_statistical_term_dominates(p):
    pn = {**p, "M": p["N"]}
    free = privacy_almost_free(pn)
    for bound_id, key in (("thm2.1-sdp", "sdp"), ("thm2.1-isrl", "isrl")):
        terms = get_bound(bound_id).term_values(
            {k: v for k, v in pn.items() if k in ("n", "N", "M", "d", "eps", "delta", "L", "kappa", "mu")})
        assume(abs(terms["privacy"] / terms["statistical"] - 1) > 1e-9)
        assert bool(free[key]) == (terms["statistical"] >= terms["privacy"])


@SETTINGS
@given(params())
def test_appendix_g_derived_bound_is_thm21_at_eps_over_n(p):
    derived = value("appG-pl-derived", p)
    direct = value("thm2.1-isrl", {**p, "eps": p["eps"] / p["n"], "delta": p["delta"] / (4 * p["n"]),
                                   "M": p["N"]})
    assert derived == pytest.approx(direct, rel=1e-9)


@SETTINGS
@given(params(), st.floats(0.1, 10))
def test_privacy_bounds_depend_on_eps_times_n(p, c):
    """Scaling eps by c and n by 1/c leaves the (eps n)-only bounds unchanged."""
    for bound_id in ("thm3.2", "thm3.3-isrl", "thm2.2-isrl", "wang2019", "arora2022"):
        a = value(bound_id, p)
        b = value(bound_id, {**p, "eps": p["eps"] * c, "n": p["n"] / c})
        assert a == pytest.approx(b, rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(n=logu(1e5, 1e9), big_n=st.integers(1, 100), d=st.integers(1, 1000), eps=logu(0.1, 10))
def test_eq45_q_condition_fails_at_paper_q_and_holds_at_corrected_q(n, big_n, d, eps):
    p = dict(n=n, N=big_n, M=big_n, d=d, eps=eps, delta=1e-6, L=1.0, beta=1.0, Delta=1.0)
    paper, fixed = get_bound("eq45"), get_bound("eq45-corrected")
    q_paper = paper.prescribe(p)["q"]
    q_fixed = fixed.prescribe(p)["q"]
    if q_paper >= 2:  # not clamped: the printed q violates q eta^2 tau_2^2 <= 1
        assert paper.check(p)["q_small"] is False
    if q_fixed >= 2:  # not clamped: the corrected q satisfies the corrected condition
        assert fixed.check(p)["q_small"] is True
    assert paper.check({**p, "q": 1e-9})["q_small"] is True  # the check is not vacuous


def test_noble2022_has_the_qualitative_shape_of_the_summary():
    ex = get_bound("noble2022").exponents(n=100, N=10, d=50, eps=1)
    assert 0 < ex.exponents["d"] < 1  # grows sublinearly with d
    assert ex.exponents["eps"] == pytest.approx(-1)  # increases inversely with eps
    assert ex.exponents["n"] < 0 and ex.exponents["N"] < 0  # decreases with the number of records
