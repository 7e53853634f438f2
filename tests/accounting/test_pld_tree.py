"""Composing a ledger of many releases: identical releases grouped, distinct ones merged in a
balanced tree (silodp.accounting.pld_tree). The tree certifies what the sequential order does
(the same epsilon to the grid's resolution) and stays above dp-accounting's PLD of the same
releases (an independent reference), for distinct, repeated and mixed ledgers."""

import dp_accounting as dpa
import numpy as np
import pytest

from silodp.accounting import ADD_OR_REMOVE_ONE, ComposedDpEvent, GaussianDpEvent, PoissonSampledDpEvent
from silodp.accounting import pld as pld_lib
from silodp.accounting.accountants import get_accountant
from silodp.accounting.blocks import Block, Mechanism, Sampling
from silodp.accounting.pld_tree import compose_tree, grouped

DELTA = 1e-5


def _ledger(zs, q=0.02):
    return ComposedDpEvent([PoissonSampledDpEvent(q, GaussianDpEvent(z)) for z in zs])


def _dpa_epsilon(zs, q=0.02):
    acc = dpa.pld.PLDAccountant(value_discretization_interval=1e-4)
    for z in zs:
        acc.compose(dpa.PoissonSampledDpEvent(q, dpa.GaussianDpEvent(z)))
    return acc.get_epsilon(DELTA)


@pytest.mark.parametrize("zs", [[0.9 + 0.05 * i for i in range(12)],  # distinct
                                [1.1] * 5 + [0.8] * 3 + [1.1] * 4,     # repeated, interleaved
                                [1.3, 0.7]])
def test_tree_certifies_what_the_sequential_order_does(zs):
    acc = get_accountant("pld", ADD_OR_REMOVE_ONE).compose(_ledger(zs))
    tree = acc.get_epsilon(DELTA)
    blocks = acc._blocks
    sequential = None
    for b in blocks:
        p = acc._block_pld(b)
        sequential = p if sequential is None else sequential.compose(p)
    seq = sequential.get_epsilon_for_delta(DELTA)
    assert tree == pytest.approx(seq, rel=2e-3, abs=2e-4)
    reference = _dpa_epsilon(zs)
    assert tree >= reference * (1 - 1e-3)  # pessimistic, as dp-accounting's
    assert tree <= reference * 1.01 + 1e-3


def test_identical_releases_are_grouped_in_order_of_first_appearance():
    a = Block(Mechanism.GAUSSIAN, 3, 1.0, Sampling.POISSON, 0.1)
    b = Block(Mechanism.GAUSSIAN, 2, 2.0, Sampling.POISSON, 0.1)
    out = grouped([a, b, a, Block(Mechanism.GAUSSIAN, 4, 1.0, Sampling.POISSON, 0.1)])
    assert out == [Block(Mechanism.GAUSSIAN, 10, 1.0, Sampling.POISSON, 0.1), b]


def test_compose_tree_merges_every_pld_once():
    """Degenerate one-point PLDs: the tree's losses add up (offsets sum) whatever the order."""
    plds = [pld_lib.PrivacyLossDistribution(pld_lib.LossPmf(1e-2, i, np.array([1.0]), 0.0)) for i in range(7)]
    out = compose_tree(plds)
    assert out.remove.offset == sum(range(7)) and np.allclose(out.remove.masses, [1.0])
    assert compose_tree([]) is None
