"""The ISRL-DP ledger: per-silo events, the worst silo, and the Appendix B implications."""

import math

import pytest

from silodp.accounting import GaussianDpEvent, IsrlLedger, cdp_guarantee, user_level_guarantee


def test_ledger_worst_silo_and_appendix_b():
    led = IsrlLedger(3, "rdp")
    led.record(0, GaussianDpEvent(2.0), count=10)
    led.record(2, GaussianDpEvent(2.0), count=40)
    rep = led.report(1e-5, records_per_silo=10)
    assert rep["worst_silo"] == 2 and rep["per_silo_epsilon"][1] == 0.0
    assert rep["per_silo_epsilon"][2] > rep["per_silo_epsilon"][0]
    assert rep["cdp"] == (rep["epsilon"], 1e-5)
    assert user_level_guarantee(0.1, 1e-8, 10) == pytest.approx((1.0, 10 * math.exp(0.9) * 1e-8))
    assert cdp_guarantee(0.5, 1e-6) == (0.5, 1e-6)
    with pytest.raises(ValueError, match="silo"):
        led.record(3, GaussianDpEvent(1.0))
