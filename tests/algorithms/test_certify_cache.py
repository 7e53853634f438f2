"""Explicit noise is certified once per (declaration, noise): a second run with the same noise
starts without re-certifying, also when its configuration differs only where the declaration
does not (the model)."""

import time

import torch

from silodp.algorithms import Federation, IsrlMBSGD, Problem, linear_model, mlp
from silodp.algorithms import privacy


def test_a_second_run_reuses_the_certificate_of_the_same_declaration():
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 40, 4, generator=gen, dtype=torch.float64)
    y = (torch.rand(3, 40, generator=gen) < 0.5).double()
    fed = Federation(x, y, torch.full((3,), 40))
    sigma = 0.7321 / 8  # a noise no other test certifies
    algo = IsrlMBSGD(rounds=3, batch_size=8, step_size=0.1, sigmas={"sigma": sigma}, metrics_every=0)
    # the scalar MLP's fused kernels compile on their first float64 call (numba, once per process):
    # a run at another noise (another declaration) pays that first, so only certification is timed
    IsrlMBSGD(rounds=1, batch_size=8, step_size=0.1, sigmas={"sigma": 2 * sigma}, metrics_every=0).run(
        Problem(mlp(4, [5]), "logistic", clip=1.0), fed, seed=2)
    privacy._certify.cache_clear()
    first = algo.run(Problem(linear_model(4), "logistic", clip=1.0), fed, seed=0)
    misses = privacy._certify.cache_info().misses
    t = time.process_time()
    second = algo.run(Problem(mlp(4, [5]), "logistic", clip=1.0), fed, seed=1)  # another model, same releases
    assert time.process_time() - t < 0.5
    assert privacy._certify.cache_info().misses == misses and privacy._certify.cache_info().hits >= 1
    assert first.epsilon == second.epsilon and first.ledger == second.ledger
