"""The simulator on CUDA (issue 37 item 5): where torch sees a device, a federation moved there runs
unchanged -- the same draws (the run's generator is on the CPU; counts, availability, batch indices
and noise are drawn there and moved to the data), the same ledger and certificate, and the same
iterates as on the CPU within a stated tolerance (float64: 1e-9 relative, the kernels' sums differ by
reassociation only; float32: 1e-4 absolute on iterates of size ~1, a few float32 ulps per step over a
few steps). The GPU tests are skipped without a device; the source check runs everywhere."""

import inspect
import re

import pytest
import torch

from silodp.algorithms import Federation, IsrlMBSGD, IsrlSpider, Problem, lenet, mlp

CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="torch sees no CUDA device")

#: (rtol, atol) of a CUDA run's iterates against the CPU run's, per data dtype (see the docstring)
TOLERANCE = {torch.float64: (1e-9, 1e-12), torch.float32: (0.0, 1e-4)}


def _federation(dtype, device):
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(4, 30, 5, generator=gen, dtype=torch.float64)
    y = (torch.rand(4, 30, generator=gen) < 0.5).double()
    return Federation(x.to(device, dtype), y.to(device, dtype), torch.full((4,), 30))


def _algorithms(metrics_every):
    return (IsrlMBSGD(rounds=4, batch_size=8, step_size=0.1, sigmas={"sigma": 0.05}, metrics_every=metrics_every),
            IsrlSpider(rounds=4, batch_size=8, step_size=0.1, period=2, metrics_every=metrics_every,
                       sigmas={"sigma1": 0.05, "sigma2": 0.05, "sigma2_hat": 0.05}))


@CUDA
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
@pytest.mark.parametrize("beta", [None, 5.0])
def test_mb_sgd_and_spider_on_cuda_equal_the_cpu_run(dtype, beta):
    """A short MB-SGD and SPIDER run (with beta: ghost norms of differences) on a federation moved to
    CUDA: the iterates stay on the device and equal the CPU run's within :data:`TOLERANCE`; the
    ledger and the certificate are the CPU run's exactly; the metrics are computed on the device."""
    cpu, gpu = _federation(dtype, "cpu"), _federation(dtype, "cuda")
    problem = Problem(mlp(5, [6], 1), "logistic", clip=1.0, beta=beta)
    rtol, atol = TOLERANCE[dtype]
    for algo in _algorithms(metrics_every=2):
        a, b = algo.run(problem, cpu, seed=3), algo.run(problem, gpu, seed=3)
        assert b.w_last.device.type == "cuda" and b.w_last.dtype == dtype
        torch.testing.assert_close(b.w_last.cpu(), a.w_last, rtol=rtol, atol=atol)
        torch.testing.assert_close(b.w_priv.cpu(), a.w_priv, rtol=rtol, atol=atol)
        assert a.epsilon == b.epsilon and a.ledger == b.ledger


@CUDA
def test_the_local_update_family_on_cuda_equals_the_cpu_run():
    """Local SGD, FedAvgM and DP-SCAFFOLD-warm (user sampling: participants drawn on the CPU,
    control variates on the device) on CUDA equal the CPU run, float64, 1e-9 relative."""
    from silodp.algorithms import DpScaffoldWarm, IsrlFedAvgM, IsrlLocalSGD

    cpu, gpu = _federation(torch.float64, "cpu"), _federation(torch.float64, "cuda")
    problem = Problem(mlp(5, [6], 1), "logistic", clip=1.0)
    common = dict(rounds=3, batch_size=8, step_size=0.1, local_steps=2, sigmas={"sigma": 0.05}, metrics_every=0)
    for algo in (IsrlLocalSGD(**common), IsrlFedAvgM(**common),
                 DpScaffoldWarm(user_sampling=0.5, warm_steps=1, **common)):
        a, b = algo.run(problem, cpu, seed=2), algo.run(problem, gpu, seed=2)
        assert b.w_last.device.type == "cuda"
        torch.testing.assert_close(b.w_last.cpu(), a.w_last, rtol=1e-9, atol=1e-12)
        assert a.epsilon == b.epsilon and a.ledger == b.ledger


@CUDA
@pytest.mark.parametrize("model,shape,classes", [(mlp(5, [7], 1), (5,), 2), (mlp(5, [7, 3], 1), (5,), 2),
                                                 (lenet(1, 16, 4), (1, 16, 16), 4)])
@pytest.mark.parametrize("shared", [True, False])
def test_the_ghost_kernels_on_cuda_equal_the_cpu_ones(model, shape, classes, shared):
    """Each kernel (the scalar MLP's, the general MLP pass, the convolutional autograd path; one
    iterate for every silo or one per silo) gives the CPU's sums on CUDA, float64, 1e-9 relative."""
    from silodp.algorithms.grads import clipped_diff_sum, clipped_grad_sum

    gen = torch.Generator().manual_seed(1)
    n, k = 3, 6
    x = torch.randn(n, k, *shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (n, k), generator=gen).double()
    w0 = model.init(gen)
    w = w0.expand(n, -1) if shared else w0 + 0.3 * torch.randn(n, model.dim, generator=gen, dtype=torch.float64)
    w_old = w + 0.01 * torch.randn(n, model.dim, generator=gen, dtype=torch.float64)
    weights = torch.full((n, k), 1.0 / k, dtype=torch.float64)
    problem = Problem(model, "softmax" if classes > 2 else "logistic", clip=0.5)
    dev = [t.cuda() for t in (w, w_old, x, y, weights)]
    for f, args in ((clipped_grad_sum, (0.5,)), (clipped_diff_sum, (0.5, 0.3))):
        on_cpu = f(problem, *((w, x, y, weights) if f is clipped_grad_sum else (w, w_old, x, y, weights)), *args)
        gw, gwo, gx, gy, gwt = dev
        on_gpu = f(problem, *((gw, gx, gy, gwt) if f is clipped_grad_sum else (gw, gwo, gx, gy, gwt)), *args)
        assert on_gpu.device.type == "cuda"
        torch.testing.assert_close(on_gpu.cpu(), on_cpu, rtol=1e-9, atol=1e-12)


def test_the_kernels_hard_code_no_device():
    """The channel, the kernels and the release primitive create every tensor where their inputs
    live (``device=`` of an input, ``*_like``, ``new_*``): none of them names the CPU (the
    federation keeps only its counts there, for the samplers, and moves each draw to the data)."""
    from silodp.algorithms import context, grads, models, plan, release

    for module in (context, grads, models, plan, release):
        source = inspect.getsource(module)
        assert not re.search(r"""\.cpu\(\)|["']cpu["']|device\s*=\s*None""", source), module.__name__
