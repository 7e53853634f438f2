"""``compose(event, count)`` takes dp-accounting's own events and is atomic.

dp-accounting's events are read as the silodp events of the same name (checked here against
dp-accounting's own PLD accountant, an independent implementation); those silodp cannot certify
soundly are refused naming them; a refused ``compose`` leaves the accountant as it was (steps,
certificate, ledger). The same atomicity is a named conformance check run over every registered
accountant (``check_atomic_failure``, tests/verify/test_conformance.py)."""

import dp_accounting as dpa
import pytest
from dp_accounting import dp_event as dpe

from silodp.accounting import ADD_OR_REMOVE_ONE, REPLACE_ONE, PldAccountant, get_accountant
from silodp.accounting import events as ev
from silodp.accounting.blocks import UnsupportedEventError

DELTA = 1e-5


def test_a_dp_accounting_event_with_a_count_matches_dp_accounting():
    ours = PldAccountant(ADD_OR_REMOVE_ONE).compose(dpe.GaussianDpEvent(1.0), 10)
    theirs = dpa.pld.PLDAccountant(value_discretization_interval=1e-4).compose(dpe.GaussianDpEvent(1.0), 10)
    assert len(ours) == 10
    # both pessimistic on a 1e-4 grid: the same certificate up to the grids' rounding
    assert ours.get_epsilon(DELTA) == pytest.approx(theirs.get_epsilon(DELTA), rel=1e-3)
    assert ours.ledger == ev.ComposedDpEvent((ev.SelfComposedDpEvent(ev.GaussianDpEvent(1.0), 10),))
    again = PldAccountant(ADD_OR_REMOVE_ONE).compose(ours.ledger)
    assert again.get_epsilon(DELTA) == ours.get_epsilon(DELTA)


@pytest.mark.parametrize("name", ["pld", "rdp", "advanced"])
def test_dp_accounting_trees_certify_as_their_silodp_twins(name):
    theirs = dpe.ComposedDpEvent([dpe.PoissonSampledDpEvent(0.1, dpe.GaussianDpEvent(1.5)),
                                  dpe.SelfComposedDpEvent(dpe.GaussianDpEvent(8.0), 3)])
    twin = ev.ComposedDpEvent((ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.5)),
                               ev.SelfComposedDpEvent(ev.GaussianDpEvent(8.0), 3)))
    a = get_accountant(name, REPLACE_ONE).compose(theirs, 7)
    b = get_accountant(name, REPLACE_ONE).compose(twin, 7)
    assert len(a) == len(b) == 28
    assert a.get_epsilon(DELTA) == b.get_epsilon(DELTA)
    assert a.ledger == b.ledger


@pytest.mark.parametrize("event", [
    dpe.MixtureOfGaussiansDpEvent(1.0, [0.0, 1.0], [0.5, 0.5]),
    dpe.RepeatAndSelectDpEvent(dpe.GaussianDpEvent(1.0), 1.0, 1.0),
    dpe.SingleEpochTreeAggregationDpEvent(1.0, 8),
    dpe.UnsupportedDpEvent(),
    dpe.ComposedDpEvent([dpe.GaussianDpEvent(1.0), dpe.UnsupportedDpEvent()]),
], ids=lambda e: type(e).__name__)
def test_a_dp_accounting_event_without_a_sound_twin_is_refused_and_nothing_is_counted(event):
    acc = PldAccountant(ADD_OR_REMOVE_ONE).compose(dpe.GaussianDpEvent(2.0), 4)
    before = (len(acc), acc.get_epsilon(DELTA), acc.ledger)
    assert not acc.supports(event)
    with pytest.raises(UnsupportedEventError, match="not certified by silodp") as raised:
        acc.compose(event, 10)
    assert isinstance(raised.value, dpa.UnsupportedEventError)  # one except catches both libraries'
    assert type(event).__name__ in str(raised.value)
    assert (len(acc), acc.get_epsilon(DELTA), acc.ledger) == before


def test_a_refused_silodp_event_counts_nothing_either():
    """The failure comes after a supported part of the tree was walked: still nothing committed."""
    acc = get_accountant("gdp", REPLACE_ONE).compose(ev.GaussianDpEvent(3.0), 5)
    before = (len(acc), acc.get_epsilon(DELTA), acc.ledger)
    mixed = ev.ComposedDpEvent((ev.GaussianDpEvent(1.0), ev.PoissonSampledDpEvent(0.1, ev.GaussianDpEvent(1.0))))
    with pytest.raises(UnsupportedEventError, match="without subsampling"):
        acc.compose(mixed, 10)
    assert (len(acc), acc.get_epsilon(DELTA), acc.ledger) == before
    with pytest.raises(ValueError, match="count"):
        acc.compose(ev.GaussianDpEvent(1.0), 0)
    assert (len(acc), acc.get_epsilon(DELTA), acc.ledger) == before
