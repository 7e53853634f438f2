"""The mutation suite (silodp.verify.audit.mutations): every deliberately broken mechanism is flagged by
the Clopper-Pearson lower bound at the trial budget of docs/audit.md (quick mode: two independent
audits each), while the correct mechanism in the same scenario is not."""

import math

import pytest
import torch

from silodp.algorithms import Problem, get_algorithm, mlp
from silodp.verify.audit import MUTATION_SCENARIOS, MUTATION_TRIALS, AlgorithmGame, judge
from silodp.verify.audit.mutations import MUTATIONS, clip_median, clip_per_layer, get_mutation

ISSUE_NAMES = {"halve-noise", "per-layer-clip", "median-clip", "missing-k", "spider-sensitivity", "shared-seed",
               "with-replacement-as-disjoint", "noise-on-average-not-sum"}


def test_the_suite_has_exactly_the_issue_s_mutations():
    assert set(MUTATIONS) == ISSUE_NAMES == set(MUTATION_SCENARIOS) == set(MUTATION_TRIALS)


@pytest.mark.parametrize("name", sorted(ISSUE_NAMES))
def test_mutation_is_detected(name):
    game = AlgorithmGame(MUTATION_SCENARIOS[name], epsilon=2.0, mutation=name).setup()
    assert game.claim.epsilon <= 2.0 + 1e-9  # the claim is the correct mechanism's certified epsilon
    for seed in (101, 202):
        res = judge(game.collect(MUTATION_TRIALS[name], seed), game.claim, name, seed=seed)
        assert res.violation and res.epsilon_lower > game.claim.epsilon, (name, seed, res.epsilon_lower)


@pytest.mark.parametrize("name", sorted(ISSUE_NAMES - {"median-clip", "shared-seed", "missing-k"}))
def test_correct_mechanism_in_the_same_scenario_is_not_flagged(name):
    """Same data, canary and trial budget without the bug: both estimators stay below the claim.
    (median-clip, shared-seed and missing-k share their scenarios with others listed here.)"""
    game = AlgorithmGame(MUTATION_SCENARIOS[name], epsilon=2.0).setup()
    res = judge(game.collect(MUTATION_TRIALS[name], 303), game.claim, name, seed=303)
    assert not res.violation
    assert res.bounds["gdp"].epsilon <= game.claim.epsilon


def test_per_layer_clip_bounds_each_tensor_not_the_whole_gradient():
    model = mlp(3, [4])
    raw = 10 * (1 + torch.rand(6, model.dim, dtype=torch.float64))  # every tensor above the clip
    out, threshold = clip_per_layer(model, 1.0)(raw)
    assert threshold == 1.0
    tensors = [s for pair in model.slices if pair for s in pair]
    assert len(tensors) == 4
    for sl in tensors:
        assert torch.all(out[:, sl].norm(dim=1) <= 1.0 + 1e-12)
    assert torch.allclose(out.norm(dim=1), torch.full((6,), 2.0, dtype=torch.float64))  # sqrt(4) L


def test_median_clip_threshold_is_the_batch_median():
    raw = torch.tensor([[1.0, 0.0], [0.0, 3.0], [4.0, 0.0]], dtype=torch.float64)
    out, threshold = clip_median(raw)
    assert threshold == 3.0
    assert torch.allclose(out.norm(dim=1), torch.tensor([1.0, 3.0, 3.0], dtype=torch.float64))


def test_noise_factors_as_documented():
    m = MUTATIONS
    assert m["halve-noise"].noise_factor("grad", 10, 4) == 0.5
    assert m["missing-k"].noise_factor("grad", 10, 4) == 0.1
    assert m["noise-on-average-not-sum"].noise_factor("grad", 10, 4) == pytest.approx(0.5)
    assert m["spider-sensitivity"].noise_factor("diff", 10, 4) == 0.5
    assert m["spider-sensitivity"].noise_factor("grad", 10, 4) == 1.0
    assert m["with-replacement-as-disjoint"].params == {"replacement": True}


def test_shared_seed_context_repeats_the_noise_in_a_real_run():
    """The broken context draws the same noise every release: with noise 10^6 times the clip, the
    released messages agree to 1e-5 relative (an independent draw would differ by ~100%)."""
    from silodp.algorithms import Federation, linear_model

    fed = Federation(torch.zeros(1, 6, 2, dtype=torch.float64), torch.zeros(1, 6, dtype=torch.float64),
                     torch.tensor([6]))
    algo = get_algorithm("isrl-prox-sgd", rounds=3, batch_size=2, step_size=0.1, sigmas={"sigma": 1e6},
                         record_transcript=True, metrics_every=0)
    res = algo.run(Problem(linear_model(2), "squared", clip=1.0), fed, seed=0, context=get_mutation("shared-seed").context())
    msgs = [e["messages"] for e in res.transcript]
    assert msgs[0].abs().min() > 1.0 and all(torch.allclose(msgs[0], m_, rtol=1e-5) for m_ in msgs[1:])


def test_inapplicable_mutations_are_refused():
    with pytest.raises(ValueError, match="mutation"):
        AlgorithmGame("isrl-prox-sgd", mutation="spider-sensitivity").setup()
    with pytest.raises(ValueError, match="mutation"):
        get_mutation("nope")
    with pytest.raises(ValueError, match="median-clip"):
        AlgorithmGame("isrl-mb-sgd", mutation="median-clip").setup()
    assert math.isclose(MUTATIONS["noise-on-average-not-sum"].noise_factor("g", 1, 9), 1 / 3)
