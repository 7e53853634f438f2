"""P_vec (Alg. 5) is unbiased, its variance matches the exact formula, and the fast path and
the message path agree in distribution."""

import numpy as np
import pytest
import torch
from scipy import stats

from silodp.algorithms.shuffle import (BinomialParams, analyze, as_params, pvec_fast, pvec_messages, pvec_variance,
                                     randomize)

PARAMS = BinomialParams(g=6, b=12, p=0.25)
BOUND = 1.0


@pytest.fixture(scope="module")
def inputs():
    x = torch.randn(5, 3, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True).clamp(min=1.0) * 0.9


def test_unbiased_with_exact_variance(inputs):
    trials = 40000
    gen = torch.Generator().manual_seed(1)
    counts = randomize(inputs.expand(trials, -1, -1), BOUND, PARAMS, gen)
    est = analyze(counts.sum(1), inputs.shape[0], BOUND, PARAMS)  # [trials, d]
    err = est - inputs.sum(0)
    se = err.std(0) / trials ** 0.5
    assert torch.all(err.mean(0).abs() < 4.5 * se)
    mse = float((err ** 2).sum(1).mean())
    exact = pvec_variance(inputs, BOUND, PARAMS)
    assert mse == pytest.approx(exact, rel=0.03)


def test_variance_order_of_theorem_d2():
    binomial = pytest.importorskip("silodp.accounting.binomial")
    d, n, delta = 4, 50, 1e-5
    ratios = []
    for eps in (0.5, 1.0, 2.0):
        params = binomial.binomial_protocol_params(eps, delta, BOUND, d, n)
        var = binomial.binomial_protocol_variance(params, BOUND, d, n)
        ratios.append(var / (d * BOUND ** 2 * np.log(d / delta) ** 2 / eps ** 2))
    assert max(ratios) / min(ratios) < 20  # same order across epsilon: O(d L^2 log^2(d/delta) / eps^2)


def test_fast_path_matches_message_path_in_distribution(inputs):
    gen = torch.Generator().manual_seed(2)
    fast = np.array([pvec_fast(inputs, BOUND, PARAMS, gen).numpy() for _ in range(1500)])
    exact = np.array([pvec_messages(inputs, BOUND, PARAMS, gen)[0].numpy() for _ in range(1500)])
    for j in range(inputs.shape[1]):
        assert stats.ks_2samp(fast[:, j], exact[:, j]).pvalue > 1e-3
    assert stats.ks_2samp(fast.sum(1), exact.sum(1)).pvalue > 1e-3


def test_message_path_sends_labelled_bits_and_the_view_is_the_totals(inputs):
    """Every message is one bit labelled with its coordinate; the shuffled view, as a multiset, is
    exactly the one that the per-coordinate totals (and the public n, d, g + b) determine."""
    from silodp.algorithms.shuffle import tally

    n, d = inputs.shape
    width = PARAMS.g + PARAMS.b
    est, view = pvec_messages(inputs, BOUND, PARAMS, torch.Generator().manual_seed(3))
    assert view.shape == (n * d * width, 2)
    assert set(view[:, 1].unique().tolist()) <= {0, 1} and set(view[:, 0].unique().tolist()) == set(range(d))
    totals = tally(view, d)
    assert torch.allclose(est, analyze(totals, n, BOUND, PARAMS))
    canonical = torch.cat([torch.tensor([[j, int(k < totals[j])] for k in range(n * width)]) for j in range(d)])
    assert torch.equal(_sorted_rows(view), _sorted_rows(canonical))
    # the shuffle mixes messages of every silo and coordinate (not one block per report)
    assert (view[:width, 0] != view[0, 0]).any()


def _sorted_rows(rows: torch.Tensor) -> torch.Tensor:
    return rows[torch.argsort(rows[:, 0] * 2 + rows[:, 1], stable=True)]


def _hockey(P, Q, eps):
    return float(np.maximum(P - np.exp(eps) * Q, 0.0).sum())


def test_exact_delta_of_the_message_level_view_meets_the_target():
    """The issue's case: 2 messages, b = 300, g = 16, d = 1, p = 1/2, epsilon certified at delta
    1e-5. One message moves from +L (g levels) to -L (0 levels), the other at either end. The
    view of labelled bits is a bijection of the total T = levels + Bin(2 b, 1/2): its exact delta
    (both directions) is at most the target. The old view (whole reports shuffled: the multiset
    of per-message counts), computed exactly, is 139x over it: the check can fail."""
    from silodp.accounting import pvec

    g, b, n, target = 16, 300, 2, 1e-5
    eps = pvec.invocation_epsilon(g, b, n, 1, False, target)
    noise = stats.binom.pmf(np.arange(n * b + 1), n * b, 0.5)
    per = stats.binom.pmf(np.arange(b + 1), b, 0.5)

    def totals(levels):
        out = np.zeros(n * b + n * g + 1)
        out[levels:levels + n * b + 1] = noise
        return out

    def report_multiset(l1, l2):
        joint = np.zeros((b + g + 1, b + g + 1))
        joint[l1:l1 + b + 1, l2:l2 + b + 1] = np.outer(per, per)
        return (np.triu(joint + joint.T, 1) + np.diag(np.diag(joint))).ravel()

    for other in (0, g):
        P, Q = totals(g + other), totals(other)
        assert max(_hockey(P, Q, eps), _hockey(Q, P, eps)) <= target * (1 + 1e-9)
        P, Q = report_multiset(g, other), report_multiset(0, other)
        assert max(_hockey(P, Q, eps), _hockey(Q, P, eps)) > 100 * target


def test_the_recorded_transcript_holds_only_the_totals():
    """record_transcript=True keeps, per shuffled release, the per-coordinate totals (the
    analyzer's view), never per-message counts."""
    from silodp.algorithms import Federation, Problem, get_algorithm, linear_model

    gen = torch.Generator().manual_seed(6)
    fed = Federation(torch.randn(2, 8, 3, generator=gen, dtype=torch.float64),
                     torch.randn(2, 8, generator=gen, dtype=torch.float64), torch.tensor([8, 8]))
    algo = get_algorithm("sdp-prox-sgd", rounds=2, batch_size=4, step_size=0.1, record_transcript=True,
                         metrics_every=0, shuffle_params={"g": 8, "b": 10, "p": 0.5})
    res = algo.run(Problem(linear_model(3), "squared", clip=1.0), fed, seed=0)
    assert res.transcript and all(e["messages"].dim() == 1 for e in res.transcript)
    for e in res.transcript:
        sent = int(e["batch"].numel())
        assert float(e["messages"].min()) >= 0 and float(e["messages"].max()) <= sent * 18


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="params"):
        BinomialParams(g=0, b=1, p=0.1)
    with pytest.raises(ValueError, match="bound"):
        pvec_fast(torch.zeros(2, 2), 0.0, PARAMS, torch.Generator())


def test_levels_never_exceed_g_at_the_bound():
    """x = +bound maps to exactly g levels (the certificate's shift bound), whatever the float
    round-off of (x + bound) * g / (2 bound)."""
    params = BinomialParams(g=7, b=0, p=0.5)
    x = torch.full((200, 3), 0.1, dtype=torch.float64)
    counts = randomize(x, 0.1, params, torch.Generator().manual_seed(4))
    assert int(counts.max()) == 7 and int(counts.min()) == 7


def test_rotated_protocol_is_unbiased():
    """Rotate, P_vec on the d' rotated coordinates with range gamma, rotate back: unbiased for the
    sum (4.5 standard errors over 3000 runs)."""
    from silodp.accounting.pvec import rotated_bound
    from silodp.algorithms.shuffle import rotate, rotation_signs, unrotate

    gen = torch.Generator().manual_seed(5)
    x = torch.randn(8, 5, generator=gen, dtype=torch.float64)
    x = x / x.norm(dim=1, keepdim=True) * 0.5
    params = BinomialParams(g=8, b=20, p=0.5, rotate=True)
    gamma = rotated_bound(1.0, 5, 1e-9)  # no clamping at this beta: the estimate is unbiased
    runs = []
    for _ in range(3000):
        s = rotation_signs(5, gen)
        runs.append(unrotate(pvec_fast(rotate(x, s), gamma, params, gen), s, 5))
    err = torch.stack(runs) - x.sum(0)
    assert torch.all(err.mean(0).abs() < 4.5 * err.std(0) / 3000 ** 0.5)


def test_the_ledger_refuses_fewer_messages_or_another_rotation():
    from silodp.accounting.releases import BatchSampling, ReleaseLedger, Sent, ShuffleRelease

    decl = ShuffleRelease("grad", 2, 1.0, 1e-6, BatchSampling.FULL, 10, 10, 20, params=(5, 9, 0.5, True))
    ledger = ReleaseLedger([decl])
    ledger.record(Sent("grad", BatchSampling.FULL, 10, 10, params=(5, 9, 0.5, True), messages=20))
    with pytest.raises(ValueError, match="messages"):
        ledger.record(Sent("grad", BatchSampling.FULL, 10, 10, params=(5, 9, 0.5, True), messages=19))
    with pytest.raises(ValueError, match="shuffle parameters"):
        ReleaseLedger([decl]).record(Sent("grad", BatchSampling.FULL, 10, 10, params=(5, 9, 0.5, False),
                                          messages=20))


def test_the_calibrated_certificate_is_the_transcript_pld_of_the_declaration():
    """What calibrate_algorithm reports is the P_vec PLD of the releases the run declares (reuse
    and with-replacement multiplicity included), and it is within the target."""
    from silodp.accounting import pvec
    from silodp.accounting.releases import pvec_groups
    from silodp.algorithms.privacy import algorithm_class, calibrate_algorithm

    cfg = algorithm_class("sdp-prox-svrg").plan.transcript(n=60, rounds=4, batch_size=20, inner_steps=3, num_silos=2,
                                                           dimension=9, replacement=True)
    cal = calibrate_algorithm("sdp-prox-svrg", cfg, 3.0, 1e-5)
    params = {g: (v["g"], v["b"], v["p"], v["rotate"]) for g, v in cal.shuffle.items()}
    declared = algorithm_class("sdp-prox-svrg").plan.shuffle_declaration(cfg, None, params)
    groups = pvec_groups(declared)
    assert [g.uses for g in groups] == [4, 12] and groups[1].with_replacement
    assert cal.epsilon == pvec.transcript_epsilon(groups, 1e-5, pvec.default_interval(3.0)) <= 3.0


def test_shuffle_calibration_names_its_own_accountant():
    from silodp.algorithms.privacy import algorithm_class, calibrate_algorithm

    cfg = algorithm_class("sdp-prox-sgd").plan.transcript(n=40, rounds=2, batch_size=10, dimension=3)
    with pytest.raises(ValueError, match="accountant"):
        calibrate_algorithm("sdp-prox-sgd", cfg, 2.0, 1e-5, accountant="rdp")


def test_sdp_runs_under_random_availability_at_the_declared_floor():
    """Assumption 6 (M_r = max(1, Bin(N, M/N))): the declaration states the fewest silos summed,
    the largest k whose lower tail over the invocations, P[M_r < k] (exact binomial cdf), is at
    most 1% of delta; the calibration certifies the target with that tail charged; the run works
    and its ledger refuses a sum below the floor."""
    from scipy import stats

    from silodp.accounting.distributed import availability_floor
    from silodp.accounting.releases import ReleaseLedger, Sent
    from silodp.algorithms import Problem, get_algorithm, linear_model, synthetic

    fed = synthetic(num_silos=20, n=40, d=3, task="logistic", seed=1).train.with_availability(12, "random")
    problem = Problem(linear_model(3), "logistic", clip=1.0)
    algo = get_algorithm("sdp-prox-sgd", rounds=5, batch_size=10, step_size=0.1, epsilon=3.0, metrics_every=0)
    cfg = algo.plan.transcript_config(problem, fed)
    delta = 1.0 / fed.min_size ** 2
    floor = cfg.silos_per_round
    assert 5 * stats.binom.cdf(floor - 1, 20, 0.6) <= 0.01 * delta < 5 * stats.binom.cdf(floor, 20, 0.6)
    assert cfg.charged_delta == pytest.approx(5 * stats.binom.cdf(floor - 1, 20, 0.6), rel=1e-9)
    assert availability_floor(20, 12, 5, 0.01 * delta) == (floor, pytest.approx(cfg.charged_delta))
    res = algo.run(problem, fed, seed=0)
    assert res.epsilon <= 3.0 and res.delta == pytest.approx(delta)
    decl = [r for r in algo.plan.run_declaration(problem, fed, {}, {g: as_params(p) for g, p in res.shuffle.items()})]
    assert decl[0].messages == floor * 10
    sent = Sent("grad", decl[0].sampling, 10, fed.min_size, params=decl[0].params, messages=floor * 10 - 1)
    with pytest.raises(ValueError, match="messages"):
        ReleaseLedger(decl).record(sent)


def test_secure_aggregation_threshold_is_the_declared_floor():
    """Under SecAgg+ no sum of fewer than the reconstruction threshold t is revealed: the
    declaration states t silos summed (nothing charged), the calibration certifies at t (more
    noise per message than at all M), the run works, and the ledger refuses a sum of fewer."""
    import dataclasses

    from silodp.accounting.releases import ReleaseLedger, Sent
    from silodp.algorithms import Problem, get_algorithm, linear_model, synthetic
    from silodp.algorithms.privacy import calibrate_algorithm

    fed = synthetic(num_silos=6, n=40, d=3, task="logistic", seed=1).train
    secagg = dataclasses.replace(fed.with_availability(6), reconstruction_threshold=4)
    assert secagg.to(torch.float64).reconstruction_threshold == 4
    problem = Problem(linear_model(3), "logistic", clip=1.0)
    algo = get_algorithm("sdp-prox-sgd", rounds=3, batch_size=10, step_size=0.1, epsilon=3.0, metrics_every=0)
    cfg, full = algo.plan.transcript_config(problem, secagg), algo.plan.transcript_config(problem, fed)
    assert (cfg.silos_per_round, cfg.charged_delta, full.silos_per_round) == (4, 0.0, 6)
    res = algo.run(problem, secagg, seed=0)
    assert res.epsilon <= 3.0
    at_all = calibrate_algorithm("sdp-prox-sgd", full, 3.0, 1.0 / fed.min_size ** 2)
    assert res.shuffle["grad"]["b"] > at_all.shuffle["grad"]["b"]
    decl = algo.plan.run_declaration(problem, secagg, {}, {g: as_params(p) for g, p in res.shuffle.items()})
    assert decl[0].messages == 4 * 10
    sent = Sent("grad", decl[0].sampling, 10, fed.min_size, params=decl[0].params, messages=4 * 10 - 1)
    with pytest.raises(ValueError, match="messages"):
        ReleaseLedger(decl).record(sent)
    with pytest.raises(ValueError, match="reconstruction_threshold"):
        dataclasses.replace(fed.with_availability(3), reconstruction_threshold=4)


def test_rebuilt_federations_keep_the_declared_threshold():
    """Every copy of a federation with changed data (the audits' canary worlds, the Flower
    audit's canaried silos, a stacked run's one-run declaration, dtype and availability copies)
    keeps its availability and reconstruction threshold: a positional rebuild dropped it (fail
    closed, all silos summed, but the declaration lost)."""
    import dataclasses
    import types

    from silodp.verify.audit.canaries import free_coordinate_federation, gradient_canary, median_canary
    from silodp.verify.audit.flower_audit import canaried_federation
    from silodp.verify.instruments import TrialContext

    fed = dataclasses.replace(free_coordinate_federation(num_silos=3, n=21), reconstruction_threshold=2)
    seen = []
    stub = types.SimpleNamespace(silos=3, per_round=3)
    algo = types.SimpleNamespace(plan=types.SimpleNamespace(
        run_declaration=lambda problem, one, sigmas, shuffle: seen.append(one)))
    TrialContext._declaration(stub, algo, None, fed, {}, None)
    copies = [*gradient_canary(fed), *gradient_canary(fed, homogeneous=False), *median_canary(fed),
              canaried_federation(fed, 4, np.ones(4, bool)), fed.to(torch.float32), fed.with_availability(3), *seen]
    assert len(copies) == 10
    for copy in copies:
        assert (copy.reconstruction_threshold, copy.availability, copy.silos_per_round) == (2, "fixed", 3)
    assert not torch.equal(copies[0].y, fed.y) and copies[-4].x.shape[-1] == fed.x.shape[-1] + 4
