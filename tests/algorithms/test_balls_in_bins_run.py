"""The simulator draws balls-in-bins batches when an algorithm asks (``balls_in_bins=True``):
the ledger records them as ``BatchSampling.BALLS_IN_BINS`` at the declared batch size, exactly
the declared counts and at least the declared noise, and the certificate is the allocation PLD's."""

import math

import pytest
import torch

from silodp.accounting import BatchSampling, accountants
from silodp.accounting.releases import releases_event
from silodp.algorithms import Problem, linear_model
from silodp.algorithms.context import Context
from silodp.algorithms.data import synthetic
from silodp.algorithms.proxsgd import IsrlProxSGD


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=3, n=40, d=3, seed=0)
    return data, Problem(linear_model(3), "logistic", clip=1.0, beta=1.0)


def test_ledger_and_declaration_match_under_balls_in_bins(setup):
    data, problem = setup
    algo = IsrlProxSGD(rounds=16, batch_size=5, step_size=0.1, sigmas={"sigma": 0.5}, balls_in_bins=True,
                       metrics_every=0)
    result = algo.run(problem, data.train)
    cfg = algo.plan.transcript_config(problem, data.train)
    (decl,) = IsrlProxSGD.plan.declaration(cfg, result.sigmas)
    assert decl.sampling is BatchSampling.BALLS_IN_BINS and decl.batch_size == 5
    assert [s.sampling for s in result.ledger] == [BatchSampling.BALLS_IN_BINS] * decl.count
    assert {s.batch_size for s in result.ledger} == {5}
    assert min(s.noise_multiplier for s in result.ledger) >= decl.noise_multiplier * (1 - 1e-9)
    # 16 steps, t = 40 // 5 = 8 batches per epoch: two balls-in-bins epochs, below the shuffled charge
    event = releases_event([decl])
    eps = accountants.epsilon(event, 1e-5)
    shuffled = releases_event([IsrlProxSGD.plan.declaration(cfg.__class__(**{**vars(cfg), "balls_in_bins": False,
                                                                         "replacement": False}), result.sigmas)[0]])
    assert math.isfinite(eps) and eps < accountants.epsilon(shuffled, 1e-5)


def test_a_balls_in_bins_batch_sums_its_members_over_the_expected_size(setup):
    """Each step's weights are the member mask over K (not over the bin's random size), and every
    record of a silo is in exactly one batch of each epoch."""
    data, problem = setup
    algo = IsrlProxSGD(rounds=8, batch_size=5, step_size=0.1, sigmas={"sigma": 0.5}, balls_in_bins=True)
    ctx = Context(algo, problem, data.train, 0, {"sigma": 0.5}, None, None)
    sampler = ctx.sampler(5)
    counts = data.train.counts
    assert sampler.batches == data.train.min_size // 5 > 1
    seen = torch.zeros(len(counts), int(counts.max()))
    for _ in range(sampler.batches):  # one epoch
        batch = ctx.batch(sampler)
        assert batch.sampling is BatchSampling.BALLS_IN_BINS and batch.size == 5
        weights, idx = batch._weights, batch._idx
        assert set(torch.unique(weights).tolist()) <= {0.0, 0.2}
        seen.scatter_add_(1, idx, (weights > 0).to(seen.dtype))
    real = torch.arange(seen.shape[1]).unsqueeze(0) < counts.unsqueeze(1)
    assert torch.equal(seen, real.to(seen.dtype))


def test_balls_in_bins_refuses_replacement():
    with pytest.raises(ValueError, match="balls_in_bins"):
        IsrlProxSGD(rounds=2, batch_size=5, balls_in_bins=True, replacement=True)
