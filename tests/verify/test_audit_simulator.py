"""Audits of the simulator's real runs: each mutation of ONE_RUN_MUTATIONS (silodp.verify.audit.simulator_audit),
switched on in the real algorithm's channel, is caught by ONE run with gradient canaries in silo 0 (verdict by the
scenario's estimator), and the same run with the switch off is not; each of FEW_RUN_MUTATIONS
(silodp.verify.audit.silo_canaries) by a few real runs whose silos hold one canary each. Quick mode audits the two
strongest one-run bugs at 400 canaries and every few-run bug at its CI size; ``--full`` every mutation at the
default budget.

False failures: every audit here is seeded (the coins, the data and the runs' generators), so each verdict is
deterministic on a given torch build. The sizes also leave margins that hold for other seeds: over seeds 0-5 (the
CI sizes, `FEW_RUN_CI`) the deciding bound of the mutated runs and of their counterparts stayed at the distances
from the claim stated next to `FEW_RUN_CI`."""

import numpy as np
import pytest
import torch

from silodp.algorithms import Problem, linear_model
from silodp.algorithms.grads import clipped_per_sample
from silodp.verify.audit.mutations import clip_median
from silodp.verify.audit.silo_canaries import FEW_RUN_MUTATIONS, audit_silos, stacked_worlds
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


def test_unknown_mutations_name_every_simulator_audit():
    with pytest.raises(ValueError, match="median-clip.*shared-seed"):
        audit_simulator("sdp-reuse-charged-once")
    with pytest.raises(ValueError, match="silos"):
        audit_silos("median-clip", silos=10)


#: silos (= canaries, = trials) of each few-run audit in CI (the defaults, for --full and docs/audit.md, are 2 to 5
#: times larger). Over seeds 0-5 the deciding bound of the mutated runs / of the counterparts was: median-clip (CP)
#: 3.62-3.79 / 0.00 at claim 2; per-layer-clip (fdp) 3.97-4.68 / 0.38-0.92 at claim 2; spider-sensitivity (fdp)
#: 4.95-6.13 / 2.23-3.20 at claim 4; with-replacement-as-disjoint (CP) 4.57-5.02 / 2.33-2.49 at claim 4.
FEW_RUN_CI = {"median-clip": 400, "per-layer-clip": 1000, "spider-sensitivity": 32_000,
              "with-replacement-as-disjoint": 200_000}


@pytest.mark.parametrize("name", sorted(FEW_RUN_MUTATIONS))
def test_few_runs_catch_the_bug_and_not_its_counterpart(name):
    bad = audit_simulator(name, canaries=FEW_RUN_CI[name])
    good = audit_simulator(name, canaries=FEW_RUN_CI[name], counterpart=True)
    assert bad.verdict == "violated" and bad.epsilon_lower[bad.estimator] > bad.claimed_epsilon
    assert good.verdict == "consistent" and good.claimed_epsilon == pytest.approx(bad.claimed_epsilon)
    assert bad.canaries == FEW_RUN_CI[name] and bad.runs == -(-FEW_RUN_CI[name] // 50_000)
    assert bad.estimator == FEW_RUN_MUTATIONS[name].verdict_by and bad.mutation == name and good.mutation is None


@pytest.mark.parametrize("name", ["per-layer-clip", "spider-sensitivity", "median-clip"])
def test_a_silos_messages_do_not_depend_on_the_other_silos(name):
    """The silos are independent runs: at the scenarios' fixed query points (the public start, or the
    steered server's replay) silo j's noiseless messages are the same in a run of 2 silos and of 5."""
    from silodp.algorithms import get_algorithm
    from silodp.verify.audit.mutations import get_mutation
    from silodp.verify.audit.silo_canaries import _messages, _steering

    sc = FEW_RUN_MUTATIONS[name].scenario
    problem, worlds, _ = sc.build()
    rows = []
    for inc in ([False, True], [True, True, False, False, True]):
        replay, w0 = _steering(sc, problem, len(inc))
        algo = get_algorithm(sc.algorithm, **sc.algorithm_params(), record_transcript=True, metrics_every=0, w0=w0,
                             sigmas={k: 0.0 for k in get_algorithm(sc.algorithm).noise_keys})
        rows.append(_messages(algo, get_mutation(name).context(), problem, stacked_worlds(worlds, np.array(inc)),
                              len(inc), replay)[0])
    same = dict(rtol=1e-12, atol=1e-15)  # batched float64 kernels may round differently by batch size
    assert np.allclose(rows[0][:, 0], rows[1][:, 2], **same) and np.allclose(rows[0][:, 1], rows[1][:, 4], **same)
    assert not np.allclose(rows[0][:, 0], rows[0][:, 1], rtol=1e-6)


def test_median_clip_takes_each_silos_own_median():
    raw = torch.tensor([[[1.0, 0.0], [0.0, 3.0], [4.0, 0.0]], [[0.0, 5.0], [6.0, 0.0], [7.0, 0.0]]],
                       dtype=torch.float64)
    out, threshold = clip_median(raw)
    assert threshold.tolist() == [3.0, 6.0] and clip_median(raw[1])[1] == 6.0
    assert torch.allclose(out.norm(dim=-1), torch.tensor([[1.0, 3.0, 3.0], [5.0, 6.0, 6.0]], dtype=torch.float64))


@pytest.fixture
def full(request):
    if not request.config.getoption("--full"):
        pytest.skip("larger audit: run with --full")


@pytest.mark.parametrize("name", sorted({*ONE_RUN_MUTATIONS, *FEW_RUN_MUTATIONS}))
def test_every_simulator_mutation_is_caught_at_the_default_budget(full, name):
    bad, good = audit_simulator(name), audit_simulator(name, counterpart=True)
    assert (bad.verdict, good.verdict) == ("violated", "consistent")


def test_cli_simulator_audit(capsys):
    """`silodp audit --simulator --mutation NAME --json`: the issue's keys; a missing or many-run-only
    mutation and --runs are refused (exit 2)."""
    import json

    from silodp.cli import main

    assert main(["audit", "--simulator", "--mutation", "shared-seed", "--canaries", "300", "--json"]) == 1  # violated
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "violated" and out["canaries"] == 300 and out["mutation"] == "shared-seed"
    assert set(out["epsilon_lower"]) == {"steinke", "fdp", "clopper-pearson", "gdp"}
    assert main(["audit", "--simulator"]) == 2
    assert main(["audit", "--simulator", "--mutation", "median-clip", "--canaries", "400", "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "violated" and out["canaries"] == 400 and out["runs"] == 1
    assert {"claimed_epsilon", "epsilon_lower", "confidence", "canaries", "verdict"} <= set(out)
    assert main(["audit", "--simulator", "--mutation", "median-clip", "--counterpart", "--canaries", "400"]) == 0
    assert main(["audit", "--simulator", "--mutation", "sdp-reuse-charged-once"]) == 2
    assert "simulator audits cover" in capsys.readouterr().err
    assert main(["audit", "--simulator", "--mutation", "missing-k", "--runs", "2"]) == 2
