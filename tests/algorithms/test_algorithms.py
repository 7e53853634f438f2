"""Algorithm API: parameter validation, results, metrics, transcripts, partial participation."""

import math

import pytest
import torch

from silodp.algorithms import ALGORITHMS, IsrlSpider, Problem, get_algorithm, linear_model, synthetic


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=4, n=30, d=3, seed=4)
    return data, Problem(linear_model(3), "logistic", clip=1.0)


@pytest.mark.parametrize("kwargs,arg", [
    ({"rounds": 0, "sigmas": {"sigma": 1.0}}, "rounds"),
    ({}, "epsilon"),
    ({"sigmas": {"s": 1.0}}, "sigmas"),
    ({"sigmas": {"sigma": 1.0}, "grad_method": "x"}, "grad_method"),
    ({"sigmas": {"sigma": 1.0}, "step_size": None}, "step_size"),
])
def test_bad_parameters_raise_naming_the_argument(setup, kwargs, arg):
    data, problem = setup
    kw = {"step_size": 0.1, **kwargs}
    with pytest.raises(ValueError, match=arg):
        get_algorithm("isrl-prox-sgd", **kw).run(problem, data.train)


def test_unknown_algorithm_raises():
    with pytest.raises(ValueError, match="algorithm"):
        get_algorithm("sgd-of-doom")


def test_result_metrics_and_transcript(setup):
    data, problem = setup
    fed = data.train.with_availability(2, "random")
    algo = IsrlSpider(rounds=6, batch_size=5, period=3, step_size=0.2, record_transcript=True,
                      sigmas={"sigma1": 0.1, "sigma2": 1.0, "sigma2_hat": 0.2})
    res = algo.run(problem, fed, seed=0)
    assert res.history["round"] == list(range(6))
    assert all(math.isfinite(v) for v in res.history["objective"] + res.history["grad_mapping_norm"])
    assert all(0 <= a <= 1 for a in res.history["accuracy"])
    assert [e["group"] for e in res.transcript] == ["grad", "diff", "diff"] * 2
    assert all(e["messages"].shape == (4, problem.dim) for e in res.transcript)
    # SPIDER difference noise: min(sigma2 * ||w_r - w_{r-1}||, sigma2_hat)
    assert all(e["std"] <= 0.2 + 1e-15 for e in res.transcript if e["group"] == "diff")
    assert res.sigmas == {"sigma1": 0.1, "sigma2": 1.0, "sigma2_hat": 0.2}


def test_nonprivate_reports_infinite_epsilon(setup):
    data, problem = setup
    res = ALGORITHMS["local-sgd"](rounds=2, batch_size=4, step_size=0.1).run(problem, data.train)
    assert res.epsilon == math.inf and res.sigmas == {"sigma": 0.0}


def test_privacy_event_is_the_declaration(setup):
    from silodp.accounting import releases_event
    from silodp.algorithms.privacy import privacy_event

    data, problem = setup
    algo = get_algorithm("isrl-prox-sgd", rounds=3, batch_size=4, step_size=0.1, sigmas={"sigma": 1.0})
    config = algo.plan.transcript_config(problem, data.train)
    assert privacy_event(type(algo), config, {"sigma": 1.0}) == privacy_event("isrl-prox-sgd", config, {"sigma": 1.0})
    assert privacy_event(type(algo), config, {"sigma": 1.0}) == releases_event(type(algo).plan.declaration(config, {"sigma": 1.0}))
