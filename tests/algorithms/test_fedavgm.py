"""The FedAvg template: Local SGD and its server-momentum variant share one loop and differ only
in the server step (post-processing), so they release the same messages and certify the same."""

import json

import pytest
import torch

from silodp.algorithms import IsrlFedAvgM, IsrlLocalSGD, Problem, linear_model
from silodp.algorithms.data import synthetic


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=3, n=40, d=3, seed=0)
    return data.train, Problem(linear_model(3), "logistic", clip=1.0, beta=1.0)


KW = dict(rounds=3, batch_size=5, local_steps=2, step_size=0.1, sigmas={"sigma": 0.05}, metrics_every=0)


def test_no_momentum_is_local_sgd_exactly(setup):
    fed, problem = setup
    plain = IsrlLocalSGD(**KW).run(problem, fed, seed=1)
    fedavgm = IsrlFedAvgM(**KW, server_momentum=0.0).run(problem, fed, seed=1)
    assert torch.equal(plain.w_last, fedavgm.w_last) and plain.epsilon == fedavgm.epsilon


def test_momentum_moves_the_model_not_the_releases(setup):
    fed, problem = setup
    plain = IsrlLocalSGD(**KW).run(problem, fed, seed=1)
    fedavgm = IsrlFedAvgM(**KW, server_momentum=0.9).run(problem, fed, seed=1)
    assert not torch.equal(plain.w_last, fedavgm.w_last)
    assert fedavgm.ledger == plain.ledger and fedavgm.epsilon == plain.epsilon


@pytest.mark.parametrize("bad", [{"server_momentum": 1.0}, {"server_momentum": -0.1}, {"server_step_size": 0.0}])
def test_bad_server_parameters_are_named(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        IsrlFedAvgM(**KW, **bad)


def test_server_momentum_is_a_cli_flag(capsys):
    from silodp.cli import main

    code = main(["run", "--algorithm", "isrl-fedavgm", "--dataset", "synthetic", "--rounds", "2", "--epsilon", "2",
                 "--local-steps", "2", "--server-momentum", "0.5", "--json"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = json.loads(captured.out)
    assert out["server_momentum"] == 0.5 and out["local_steps"] == 2 and 0 < out["epsilon"] <= 2
