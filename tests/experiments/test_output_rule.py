"""The output rule: ``FederatedAlgorithm(output=...)`` and ``silodp run --output random|last``.

"random" is the algorithm's own rule (Alg 3 line 17: a uniformly random iterate), "last" the last
iterate, post-processing of the same releases; the trajectory is the same under both rules.
"""

import json

import pytest
import torch

from silodp.algorithms import Problem, get_algorithm, linear_model, wbcd
from silodp.cli import main


def _spider(output):
    return get_algorithm("isrl-spider", rounds=6, batch_size=20, step_size=0.5, period=2, output=output,
                         sigmas={"sigma1": 0.05, "sigma2": 0.05, "sigma2_hat": 0.1}, metrics_every=0)


def test_last_output_is_the_last_iterate_of_the_same_trajectory():
    data = wbcd(seed=0)
    problem = Problem(linear_model(data.num_features), "logistic", clip=1.0)
    own = _spider(None).run(problem, data.train, seed=3)
    rand = _spider("random").run(problem, data.train, seed=3)
    last = _spider("last").run(problem, data.train, seed=3)
    assert torch.equal(own.w_last, last.w_last) and torch.equal(own.w_priv, rand.w_priv)
    assert torch.equal(last.w_priv, last.w_last)
    assert not torch.equal(own.w_priv, own.w_last)  # seed 3 picks an earlier iterate


def test_bad_output_names_the_argument():
    data = wbcd(seed=0)
    problem = Problem(linear_model(data.num_features), "logistic", clip=1.0)
    with pytest.raises(ValueError, match="output"):
        _spider("best").run(problem, data.train)


def test_rate_trials_respect_the_output_rule():
    from silodp.verify.rates import families
    from silodp.verify.rates.trials import run_trials

    fam = families.logistic_ridge(dim=3, num_silos=2, pool_size=64)
    algo = get_algorithm("isrl-spider", rounds=4, batch_size=8, period=2, output="last", metrics_every=0,
                         sigmas={"sigma1": 0.1, "sigma2": 0.1, "sigma2_hat": 0.1})
    out = run_trials(algo, fam.problem, lambda t, g: fam.sample(8, t, g), trials=6, seed=1)
    assert torch.equal(out.w_priv, out.w_last)


@pytest.mark.parametrize("rule", ["random", "last"])
def test_cli_reports_the_chosen_rule_and_both_errors(capsys, rule):
    code = main(["run", "--algorithm", "isrl-spider", "--dataset", "wbcd", "--epsilon", "3", "--rounds", "5",
                 "--seed", "3", "--output", rule, "--json"])
    out = json.loads(capsys.readouterr().out)
    assert code == 0 and out["output"] == rule
    assert out["test_error"] == out[f"test_error_{rule}"]
    assert 0 <= out["test_error_random"] <= 1 and 0 <= out["test_error_last"] <= 1


def test_cli_rejects_an_unknown_rule(capsys):
    code = main(["run", "--algorithm", "isrl-spider", "--dataset", "wbcd", "--epsilon", "3", "--output", "best"])
    err = capsys.readouterr().err
    assert code == 2 and "--output" in err and len(err.strip().splitlines()) == 1
