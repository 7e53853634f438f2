"""P_vec (Alg. 5) is unbiased, its variance matches the exact formula, and the fast path and
the message path agree in distribution."""

import numpy as np
import pytest
import torch
from scipy import stats

from silodp.algorithms.shuffle import BinomialParams, analyze, pvec_fast, pvec_messages, pvec_variance, randomize

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


def test_message_path_messages_are_unary_and_shuffled(inputs):
    est, bits = pvec_messages(inputs, BOUND, PARAMS, torch.Generator().manual_seed(3))
    assert bits.shape == (5, 3, PARAMS.g + PARAMS.b)
    assert set(bits.unique().tolist()) <= {0, 1}
    totals = bits.sum(dim=(0, 2))
    assert torch.allclose(est, analyze(totals, 5, BOUND, PARAMS))


def test_bad_parameters_raise():
    with pytest.raises(ValueError, match="params"):
        BinomialParams(g=0, b=1, p=0.1)
    with pytest.raises(ValueError, match="bound"):
        pvec_fast(torch.zeros(2, 2), 0.0, PARAMS, torch.Generator())
