"""One-run audits of the simulator's real runs (silodp.verify.audit.simulator_audit): each mutation of
ONE_RUN_MUTATIONS, switched on in the real algorithm's channel, is caught by ONE run with gradient canaries
in silo 0 (verdict by the scenario's estimator), and the same run with the switch off is not. Quick mode
audits the two strongest bugs at 400 canaries; ``--full`` every mutation at the default 4000."""

import numpy as np
import pytest
import torch

from silodp.algorithms import Problem, linear_model
from silodp.algorithms.grads import clipped_per_sample
from silodp.verify.audit.simulator_audit import ONE_RUN_MUTATIONS, audit_simulator, canary_federation


def test_canaries_own_free_coordinates_with_a_clipped_gradient_of_norm_l():
    inc = np.array([True, False, True])
    fed = canary_federation(2, 5, 2, inc, seed=1)
    assert fed.x.shape == (2, 8, 5) and torch.all(fed.x[:, :5, 2:] == 0) and torch.all(fed.x[1, :, 2:] == 0)
    problem = Problem(linear_model(5), "squared", clip=1.0)
    g = clipped_per_sample(problem, torch.zeros(problem.model.dim, dtype=torch.float64), fed.x[:1, 5:],
                           fed.y[:1, 5:], 1.0)[0]
    assert g.norm(dim=1).tolist() == pytest.approx([1.0, 1.0, 1.0])
    # included (label +Y): gradient -L e_{d+j} up to 1/A, so its score (minus the released sum) is positive
    assert torch.sign(g[:, 2:].diagonal()).tolist() == [-1.0, 1.0, -1.0]
    assert g[:, 2:].diagonal().abs().min() > 0.999


@pytest.mark.parametrize("name", ["missing-k", "shared-seed"])
def test_one_run_catches_the_bug_and_not_its_counterpart(name):
    bad = audit_simulator(name, canaries=400)
    good = audit_simulator(name, canaries=400, counterpart=True)
    assert bad.verdict == "violated" and bad.epsilon_lower[bad.estimator] > bad.claimed_epsilon
    assert good.verdict == "consistent" and good.claimed_epsilon == pytest.approx(bad.claimed_epsilon)
    assert bad.mutation == name and good.mutation is None


def test_unknown_mutations_name_the_many_run_game():
    with pytest.raises(ValueError, match="many-run game"):
        audit_simulator("median-clip")


@pytest.fixture
def full(request):
    if not request.config.getoption("--full"):
        pytest.skip("larger audit: run with --full")


@pytest.mark.parametrize("name", sorted(ONE_RUN_MUTATIONS))
def test_every_one_run_mutation_is_caught_at_the_default_budget(full, name):
    bad, good = audit_simulator(name), audit_simulator(name, counterpart=True)
    assert (bad.verdict, good.verdict) == ("violated", "consistent")


def test_cli_simulator_audit(capsys):
    """`silodp audit --simulator --mutation NAME --json`: the issue's keys; a missing or many-run-only
    mutation and --runs are refused (exit 2)."""
    import json

    from silodp.cli import main

    assert main(["audit", "--simulator", "--mutation", "shared-seed", "--canaries", "300", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "violated" and out["canaries"] == 300 and out["mutation"] == "shared-seed"
    assert set(out["epsilon_lower"]) == {"steinke", "fdp", "clopper-pearson", "gdp"}
    assert main(["audit", "--simulator"]) == 2
    assert main(["audit", "--simulator", "--mutation", "median-clip"]) == 2
    assert "many-run game" in capsys.readouterr().err
    assert main(["audit", "--simulator", "--mutation", "missing-k", "--runs", "2"]) == 2
