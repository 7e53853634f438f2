"""zCDP: paper Prop D.1/D.2, Lemma D.1 and the Canonne-Kamath-Steinke conversion."""

import math

import pytest
from hypothesis import given, settings, strategies as st

from silodp.accounting import zcdp


def test_paper_conversion_formula():
    assert zcdp.epsilon_for_rho_paper(0.1, 1e-5) == pytest.approx(0.1 + 2 * math.sqrt(0.1 * math.log(1e5)))


def test_prop_d1_particular_case_is_feasible():
    eps, delta = 1.0, 1e-5  # eps <= 2 ln(1/delta)
    rho = eps ** 2 / (8 * math.log(1 / delta))
    assert zcdp.epsilon_for_rho_paper(rho, delta) <= eps
    assert zcdp.rho_for_budget_paper(eps, delta) >= rho


def test_cks_is_tighter_than_paper():
    for rho in (1e-4, 0.01, 0.5, 5.0):
        assert zcdp.epsilon_for_rho(rho, 1e-6) < zcdp.epsilon_for_rho_paper(rho, 1e-6)


def test_cks_matches_rdp_conversion_of_dp_accounting():
    """Independent reference: dp-accounting's RDP accountant on a ZCDpEvent uses the same conversion."""
    import dp_accounting as dpa
    acc = dpa.rdp.RdpAccountant(orders=[1 + x / 100 for x in range(1, 5000)])
    acc.compose(dpa.ZCDpEvent(0.05))
    assert zcdp.epsilon_for_rho(0.05, 1e-5) == pytest.approx(acc.get_epsilon(1e-5), rel=2e-3)
    assert zcdp.epsilon_for_rho(0.05, 1e-5) <= acc.get_epsilon(1e-5) + 1e-9


@settings(max_examples=60, deadline=None)
@given(st.floats(1e-4, 20), st.floats(1e-10, 0.1))
def test_inverse_roundtrip(eps, delta):
    rho = zcdp.rho_for_budget(eps, delta)
    assert zcdp.epsilon_for_rho(rho, delta) <= eps * (1 + 1e-9)
    assert zcdp.epsilon_for_rho(rho * 1.01, delta) > eps * 0.999


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 10), min_size=1, max_size=10))
def test_composition_is_additive(rhos):
    assert zcdp.compose(rhos) == pytest.approx(sum(rhos))


def test_delta_for_epsilon_inverts():
    eps = zcdp.epsilon_for_rho(0.2, 1e-6)
    assert zcdp.delta_for_epsilon(0.2, eps) == pytest.approx(1e-6, rel=1e-3)
