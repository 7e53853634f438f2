"""silodp.verify.rates.mutations: each utility mutation does exactly its bug, the rates presets catch
them, and ``silodp rates --mutations --json`` prints the contract.

References: a mutated run equals, bit for bit, the correct algorithm constructed with the bug as a
parameter (3 eta, 10 sigma, period = R + 1, ...); the quick suite's Prox-SGD preset passes correct and
fails under the mutations (the full table, every preset: docs/rates.md).
"""

import json

import pytest
import torch

from silodp.algorithms import get_algorithm
from silodp.cli import main
from silodp.verify.rates import mutations as mu
from silodp.verify.rates.families import logistic_ridge
from silodp.verify.rates.trials import TrialContext, run_trials


@pytest.fixture(scope="module")
def family():
    return logistic_ridge(dim=4, num_silos=3, heterogeneity=1.0, pool_size=256, seed=1)


def _run(family, algo, mutation=None, trials=3):
    x, y = family.sample(24, trials, torch.Generator().manual_seed(5))
    hook = {} if mutation is None else {"context": mutation.context(TrialContext)}
    algo = algo if mutation is None else mutation.algorithm(algo)
    return run_trials(algo, family.problem, lambda t, g: (x[:t], y[:t]), trials, seed=3, **hook)


@pytest.mark.parametrize("name, extra, mutation, equivalent", [
    ("isrl-prox-sgd", dict(rounds=5, batch_size=6), "step-x3", dict(step_size=1.5)),
    ("isrl-prox-sgd", dict(rounds=5, batch_size=6), "noise-x10", dict(sigmas={"sigma": 3.0})),
    ("isrl-spider", dict(rounds=6, batch_size=6, period=2), "wrong-snapshot", dict(period=7)),
    ("isrl-prox-svrg", dict(rounds=3, batch_size=6, inner_steps=2), "wrong-snapshot",
     dict(rounds=1, inner_steps=6)),
])
def test_a_mutation_is_the_algorithm_with_the_bug_as_a_parameter(family, name, extra, mutation, equivalent):
    sigmas = {k: 0.3 for k in get_algorithm(name).noise_keys}
    params = dict(sigmas=sigmas, metrics_every=0, step_size=0.5, **extra)
    mutated = _run(family, get_algorithm(name, **params), mu.MUTATIONS[mutation])
    reference = _run(family, get_algorithm(name, **{**params, **equivalent}), mu.CORRECT)
    assert torch.equal(mutated.w_last, reference.w_last)
    assert mutated.sigmas == sigmas  # the declaration stays the correct run's


def test_no_prox_and_wrong_output_change_only_their_rule(family):
    algo = get_algorithm("isrl-prox-sgd", rounds=4, batch_size=6, sigmas={"sigma": 0.0}, metrics_every=0)
    correct, no_prox = _run(family, algo), _run(family, algo, mu.MUTATIONS["no-prox"])
    assert not torch.allclose(correct.w_last, no_prox.w_last)  # the ridge's prox shrinks w
    first = _run(family, get_algorithm("isrl-prox-sgd", rounds=1, batch_size=6, sigmas={"sigma": 0.0},
                                       metrics_every=0))
    wrong = _run(family, algo, mu.MUTATIONS["wrong-output"])
    assert torch.equal(wrong.w_priv, first.w_last)  # the first round's iterate, not the last
    assert not torch.allclose(correct.w_priv, first.w_last)


def test_the_sent_certificate_follows_the_noise_really_sent(family):
    from silodp.verify.rates import mutations

    algo = get_algorithm("isrl-prox-sgd", rounds=4, batch_size=6, epsilon=1.0, delta=1e-5, metrics_every=0)
    sent = {}
    for m in (mu.CORRECT, mu.MUTATIONS["noise-x0.1"], mu.MUTATIONS["noise-x10"]):
        mutations._CONTEXTS.clear()
        out = _run(family, algo, m)
        sent[m.name] = mu.sent_epsilon(mutations._CONTEXTS[0])
    assert sent["correct"] <= 1.0 + 1e-9 and sent["correct"] == pytest.approx(out.epsilon, rel=1e-6)
    assert sent["noise-x0.1"] > 10 * sent["correct"] and sent["noise-x10"] < sent["correct"] / 5


def test_quick_suite_passes_correct_and_catches_mutations():
    seen = []  # on_run: after every run, the details so far (what rates_mutations.py saves)
    table = mu.run_suite(quick=True, mutations=("noise-x0.1", "wrong-output"), on_run=lambda d: seen.append(list(d)))
    assert table == {"mutations": {"noise-x0.1": ["prox-sgd-n-prescribed"],
                                   "wrong-output": ["prox-sgd-n-prescribed"]}, "correct_pass": True}
    p = "prox-sgd-n-prescribed"
    assert seen == [[(p, "correct")], [(p, "correct"), (p, "noise-x0.1")],
                    [(p, "correct"), (p, "noise-x0.1"), (p, "wrong-output")]]


def test_cli_prints_exactly_the_contract(monkeypatch, capsys):
    seen = {}
    table = {"mutations": {"step-x3": ["prox-sgd-n-prescribed"], "no-prox": []}, "correct_pass": True}

    def fake(quick=False, **kw):
        seen["quick"] = quick
        return table

    monkeypatch.setattr(mu, "run_suite", fake)
    assert main(["rates", "--mutations", "--quick", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == table and seen["quick"] is True
    assert main(["rates", "--mutations"]) == 0
    out = capsys.readouterr().out
    assert "step-x3" in out and "(none)" in out and "every correct run passes: True" in out


@pytest.mark.parametrize("quick", [True, False])
def test_the_progress_total_is_the_number_of_runs(monkeypatch, quick):
    """The CLI's progress count (and so its ETA) is over suite_size runs: exactly what run_suite makes."""
    calls = []
    monkeypatch.setattr(mu, "run_preset", lambda preset, mutation, quick: {"passes": True})
    details: dict = {}
    mu.run_suite(quick=quick, details=details, on_run=lambda d: calls.append(1))
    presets = mu.QUICK_PRESETS if quick else tuple(mu.PRESETS)
    # every preset's correct run and its mutations: more runs than presets, at most 1 + mutations each
    assert len(calls) == len(details) == mu.suite_size(quick)
    assert len(presets) < mu.suite_size(quick) <= len(presets) * (1 + len(mu.MUTATIONS))


def test_vary_is_required_without_mutations(capsys):
    assert main(["rates", "--quick"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--vary" in err


def test_every_preset_states_known_criteria():
    for preset in mu.PRESETS.values():
        assert preset.criteria and set(preset.criteria) <= set(mu.CRITERIA)
        assert set(preset.skip) <= set(mu.MUTATIONS)
    assert set(mu.QUICK_PRESETS) <= set(mu.PRESETS)
