"""The papers' closed-form noise formulas, checked by hand against the printed expressions."""

import math

import pytest

from silodp.accounting import papers


def test_thm_e1_formula_by_hand():
    assert papers.thm_e1(1.0, 1e-5, 2.0, 10)["sigma"] == pytest.approx(math.sqrt(8 * 4 * math.log(1e5)) / 10)


def test_thm_f1_formula_by_hand():
    s = papers.thm_f1(2.0, 1e-6, 1.0, 3.0, 500, 40, 4)
    base = math.log(1e6) / (4.0 * 500 ** 2)
    assert s["sigma1"] ** 2 == pytest.approx(16 * base * 10)
    assert s["sigma2"] ** 2 == pytest.approx(16 * 9 * 40 * base)
    assert s["sigma2_hat"] ** 2 == pytest.approx(64 * 40 * base)
