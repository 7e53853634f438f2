"""The default neighbouring relation of generic accounting is add/remove, as dp-accounting's
(the independent reference here); dp-accounting's keyword names and ``ledger`` are accepted, and
silodp's refusals are dp-accounting's ``UnsupportedEventError`` too once it is imported."""

import dp_accounting as dpa
import pytest

from silodp.accounting import (
    ADD_OR_REMOVE_ONE,
    DEFAULT_RELATION,
    REPLACE_ONE,
    ComposedDpEvent,
    GaussianDpEvent,
    PoissonSampledDpEvent,
    SelfComposedDpEvent,
    UnsupportedEventError,
    calibrate,
    candidate_accountants,
    epsilon,
    get_accountant,
    tightest_calibration,
    tightest_epsilon,
    to_dp_accounting,
)

pytestmark = pytest.mark.ecosystem_default
EVENT = SelfComposedDpEvent(PoissonSampledDpEvent(0.02, GaussianDpEvent(1.2)), 300)


def _reference(relation=dpa.NeighboringRelation.ADD_OR_REMOVE_ONE) -> float:
    return dpa.pld.PLDAccountant(relation).compose(to_dp_accounting(EVENT)).get_epsilon(1e-6)


def test_default_is_add_remove_like_dp_accounting():
    assert DEFAULT_RELATION == ADD_OR_REMOVE_ONE
    ref = _reference()
    assert ref * (1 - 1e-6) <= epsilon(EVENT, 1e-6, "pld") <= ref * (1 + 1e-4)
    assert get_accountant("rdp").neighbouring == ADD_OR_REMOVE_ONE
    assert tightest_epsilon(EVENT, 1e-6)[0] == pytest.approx(
        min(epsilon(EVENT, 1e-6, n, ADD_OR_REMOVE_ONE) for n in candidate_accountants(EVENT, ADD_OR_REMOVE_ONE)))
    cal = tightest_calibration(lambda z: GaussianDpEvent(z), 1.0, 1e-5)
    assert cal.noise_multiplier == calibrate(lambda z: GaussianDpEvent(z), 1.0, 1e-5, "gdp",
                                             ADD_OR_REMOVE_ONE).noise_multiplier


def test_dp_accounting_keyword_names():
    ref = _reference(dpa.NeighboringRelation.REPLACE_ONE)
    acc = get_accountant("pld", neighboring_relation=dpa.NeighboringRelation.REPLACE_ONE).compose(EVENT)
    assert acc.neighboring_relation == REPLACE_ONE
    assert acc.get_epsilon(target_delta=1e-6) == acc.get_epsilon(1e-6) == pytest.approx(ref, rel=1e-4)
    assert acc.get_delta(target_epsilon=2.0) == acc.get_delta(2.0)
    assert epsilon(EVENT, target_delta=1e-6, accountant="pld", neighboring_relation=REPLACE_ONE) == acc.get_epsilon(1e-6)
    cal = calibrate(lambda z: GaussianDpEvent(z), target_epsilon=1.0, target_delta=1e-5, accountant="gdp",
                    neighboring_relation=REPLACE_ONE)
    assert cal.noise_multiplier == calibrate(lambda z: GaussianDpEvent(z), 1.0, 1e-5, "gdp", REPLACE_ONE).noise_multiplier
    with pytest.raises(ValueError, match="neighboring_relation"):
        get_accountant("rdp", REPLACE_ONE, neighboring_relation=ADD_OR_REMOVE_ONE)
    with pytest.raises(ValueError, match="target_delta"):
        acc.get_epsilon(1e-6, target_delta=1e-5)


def test_ledger_is_the_event_composed_so_far():
    acc = get_accountant("rdp").compose(GaussianDpEvent(2.0)).compose(EVENT, 2)
    assert acc.ledger == ComposedDpEvent((GaussianDpEvent(2.0), SelfComposedDpEvent(EVENT, 2)))
    again = get_accountant("rdp").compose(acc.ledger)
    assert again.get_epsilon(1e-5) == acc.get_epsilon(1e-5)


def test_unsupported_events_are_dp_accountings_error_too():
    with pytest.raises(dpa.UnsupportedEventError) as info:
        get_accountant("zcdp").compose(PoissonSampledDpEvent(0.1, GaussianDpEvent(1.0)))
    assert isinstance(info.value, UnsupportedEventError) and isinstance(info.value, ValueError)
    assert "zcdp" in str(info.value)
