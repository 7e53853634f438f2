"""Truncated Poisson subsampling (dp-accounting's TruncatedSubsampledGaussianDpEvent), certified by
the pld accountant: against dp-accounting's own PLD of the event, both relations; refused by the
others; its degenerate values as dp-accounting reads them."""

import pytest

from dp_accounting import dp_event as dpe
from dp_accounting.pld import PLDAccountant
from dp_accounting.privacy_accountant import NeighboringRelation as DpRelation

from silodp.accounting import accountants, events as ev
from silodp.accounting.blocks import UnsupportedEventError

AR, RO = (ev.ADD_OR_REMOVE_ONE, DpRelation.ADD_OR_REMOVE_ONE), (ev.REPLACE_ONE, DpRelation.REPLACE_ONE)
CASES = [  # (n, q, cap, z, steps, relation): cap far above, near and below the mean batch n q
    (1000, 0.01, 14, 1.0, 20, AR),
    (1000, 0.05, 52, 1.2, 10, RO),
    (500, 0.1, 40, 2.0, 10, AR),
]


@pytest.mark.parametrize("case", CASES)
def test_matches_dp_accounting_and_is_no_smaller(case):
    n, q, cap, z, steps, (relation, theirs) = case
    event = dpe.SelfComposedDpEvent(dpe.TruncatedSubsampledGaussianDpEvent(n, q, cap, z), steps)
    ref = PLDAccountant(theirs, value_discretization_interval=1e-3).compose(event).get_epsilon(1e-6)
    got = accountants.epsilon(event, 1e-6, neighbouring=relation, value_discretization_interval=1e-3)
    assert ref * (1 - 2e-3) <= got <= ref * 1.005  # same construction, both pessimistic grids
    poisson = accountants.epsilon(ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps),
                                  1e-6, neighbouring=relation)
    assert got >= poisson * (1 - 1e-3)  # truncation can only cost (a displaced record moves 2C)


def test_far_cap_is_plain_poisson_and_others_refuse():
    trunc = ev.TruncatedSubsampledGaussianDpEvent(100, 0.01, 100, 1.0)
    plain = ev.PoissonSampledDpEvent(0.01, ev.GaussianDpEvent(1.0))
    ar = ev.ADD_OR_REMOVE_ONE
    assert accountants.epsilon(trunc, 1e-6, neighbouring=ar) == pytest.approx(
        accountants.epsilon(plain, 1e-6, neighbouring=ar), rel=1e-9)
    for name in ("rdp", "gdp", "advanced"):
        with pytest.raises(UnsupportedEventError):
            accountants.epsilon(trunc, 1e-6, accountant=name, neighbouring=ar)


def test_degenerate_and_malformed_events():
    assert ev.from_dp_accounting(dpe.TruncatedSubsampledGaussianDpEvent(100, 0.0, 10, 1.0)) == ev.NoOpDpEvent()
    assert ev.from_dp_accounting(dpe.TruncatedSubsampledGaussianDpEvent(100, 0.1, 10, 0.0)) == ev.NonPrivateDpEvent()
    with pytest.raises(ValueError, match="truncated_batch_size"):
        ev.TruncatedSubsampledGaussianDpEvent(100, 0.1, 0, 1.0)
    with pytest.raises(ValueError, match="sampling_probability"):
        ev.TruncatedSubsampledGaussianDpEvent(100, 1.5, 10, 1.0)
