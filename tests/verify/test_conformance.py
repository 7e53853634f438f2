"""The conformance suites over every registered accountant and algorithm (no hard-coded names)."""

import pytest

from silodp.accounting.accountants import ACCOUNTANTS
from silodp.algorithms import ALGORITHMS, Problem, linear_model
from silodp.algorithms.data import synthetic
from silodp.verify.conformance import check_accountant, check_algorithm


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=3, n=40, d=3, seed=0)
    return data.train, Problem(linear_model(3), "logistic", clip=1.0, beta=1.0)


def small(cls) -> dict:
    params = dict(rounds=2, batch_size=5, step_size=0.1, metrics_every=0)
    if "inner_steps" in cls().get_params():
        params.update(inner_steps=2, rounds=1)
    return params


@pytest.mark.parametrize("name", sorted(ACCOUNTANTS))
def test_every_accountant_conforms(name):
    out = check_accountant(ACCOUNTANTS[name])
    assert out, f"{name} certified nothing of the battery"


@pytest.mark.parametrize("name", sorted(ALGORITHMS))
def test_every_algorithm_conforms(name, setup):
    fed, problem = setup
    cls = ALGORITHMS[name]
    check_algorithm(cls, problem, fed, small(cls))


def test_the_suite_catches_an_unsound_accountant():
    from silodp.accounting.accountants import GdpAccountant

    class Optimist(GdpAccountant):
        def _epsilon(self, delta):
            return 0.5 * super()._epsilon(delta)

    with pytest.raises(AssertionError, match="below the exact"):
        check_accountant(Optimist)


def test_the_suite_catches_a_sound_accountant_that_is_not_monotone():
    from silodp.accounting.accountants import GdpAccountant

    class Forgetful(GdpAccountant):  # above the exact value, but charges fewer steps more
        def _epsilon(self, delta):
            return super()._epsilon(delta) + 1000.0 / len(self)

    with pytest.raises(AssertionError, match="not monotone in steps"):
        check_accountant(Forgetful)
