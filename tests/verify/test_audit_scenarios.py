"""Every registered Gaussian ISRL-DP algorithm has an audit scenario: its tuned one, or one derived
from its config (no per-algorithm scenario to write), and the audit runs on it."""

import pytest

from silodp.algorithms import ALGORITHMS
from silodp.verify.audit import SCENARIOS, audit_algorithm, scenario_for

GAUSSIAN = sorted(n for n, c in ALGORITHMS.items() if c.plan.releases_gaussian_messages())


@pytest.mark.parametrize("name", GAUSSIAN)
def test_every_gaussian_algorithm_has_a_scenario(name):
    sc = scenario_for(name)
    assert sc.algorithm == name
    if name not in SCENARIOS:  # derived: small, every integer parameter capped
        params = ALGORITHMS[name]().get_params()
        assert sc.params["rounds"] == 2 and sc.params["batch_size"] == 5
        assert all(v <= 2 for k, v in sc.params.items() if type(params.get(k)) is int and k != "batch_size")


def test_a_derived_scenario_is_audited():
    derived = [n for n in GAUSSIAN if n not in SCENARIOS]
    assert derived  # isrl-fedavgm today
    res = audit_algorithm(derived[0], trials=4000, seed=1)
    assert not res.violation and 0 <= res.epsilon_lower <= res.epsilon_claimed <= 2.0


@pytest.mark.parametrize("name", ["nope", *sorted(n for n, c in ALGORITHMS.items() if not c.plan.releases_gaussian_messages())])
def test_no_scenario_for_what_the_game_does_not_cover(name):
    with pytest.raises(ValueError, match="algorithm"):
        scenario_for(name)
