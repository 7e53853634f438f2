"""silodp's event vocabulary: dp-accounting's names and fields, convertible both ways."""

import subprocess
import sys

import dp_accounting as dpa
import pytest

from silodp.accounting import events as ev
from silodp.accounting import epsilon, get_accountant

TREE = ev.ComposedDpEvent([
    ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.01, ev.GaussianDpEvent(1.1)), 100),
    ev.SampledWithoutReplacementDpEvent(1000, 10, ev.GaussianDpEvent(2.0)),
    ev.SampledWithReplacementDpEvent(1000, 10, ev.GaussianDpEvent(2.0)),
    ev.ZCDpEvent(0.01),
    ev.NoOpDpEvent(),
])


def test_round_trip_through_dp_accounting():
    theirs = ev.to_dp_accounting(TREE)
    assert isinstance(theirs, dpa.ComposedDpEvent)
    assert isinstance(theirs.events[0].event, dpa.PoissonSampledDpEvent)
    assert ev.from_dp_accounting(theirs) == TREE


def test_events_without_counterpart_are_refused():
    with pytest.raises(ValueError, match="ParallelComposedDpEvent"):
        ev.to_dp_accounting(ev.ParallelComposedDpEvent(ev.GaussianDpEvent(1.0), 3))


@pytest.mark.parametrize("name", ["rdp", "pld", "advanced"])
def test_accountants_accept_dp_accounting_events_and_relations(name):
    ours = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(0.02, ev.GaussianDpEvent(1.0)), 50)
    theirs = ev.to_dp_accounting(ours)
    relation = dpa.NeighboringRelation.ADD_OR_REMOVE_ONE
    assert get_accountant(name, relation).compose(theirs).get_epsilon(1e-5) == \
        epsilon(ours, 1e-5, name, ev.ADD_OR_REMOVE_ONE)


def test_unsupported_dp_accounting_event_is_named():
    from silodp.accounting import UnsupportedEventError
    with pytest.raises(UnsupportedEventError, match="LaplaceDpEvent"):
        get_accountant("rdp").compose(dpa.LaplaceDpEvent(1.0))


def test_importing_the_accounting_layer_does_not_import_dp_accounting():
    code = "import sys, silodp.accounting; assert 'dp_accounting' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)
