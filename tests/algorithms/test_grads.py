"""Per-sample clipped gradients: ghost clipping equals the materializing reference; clipping
bounds each per-sample gradient; vmap(grad) equals autograd sample by sample."""

import pytest
import torch

from silodp.algorithms import Problem, lenet, linear_model, mlp
from silodp.algorithms.grads import clipped_grad_sum, per_sample_grads

CASES = [
    (linear_model(4), (4,), "squared", 2),
    (linear_model(4, 3), (4,), "softmax", 3),
    (mlp(5, [7, 3]), (5,), "logistic", 2),
    (lenet(1, 16, 4), (1, 16, 16), "softmax", 4),
]


@pytest.mark.parametrize("model,shape,loss,classes", CASES)
@pytest.mark.parametrize("clip", [None, 0.05, 1.0])
def test_ghost_equals_materialized(model, shape, loss, classes, clip):
    gen = torch.Generator().manual_seed(0)
    n, k = 3, 5
    x = torch.randn(n, k, *shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (n, k), generator=gen).double()
    w = model.init(gen) + 0.3 * torch.randn(n, model.dim, generator=gen, dtype=torch.float64)
    weights = torch.rand(n, k, generator=gen, dtype=torch.float64)
    problem = Problem(model, loss, clip=clip)
    ghost = clipped_grad_sum(problem, w, x, y, weights, clip, "ghost")
    ref = clipped_grad_sum(problem, w, x, y, weights, clip, "materialize")
    assert torch.allclose(ghost, ref, atol=1e-12, rtol=1e-9)
    if clip is not None:  # each silo's weighted sum is within clip * sum(weights)
        assert torch.all(ref.norm(dim=1) <= clip * weights.sum(1) + 1e-12)


def test_per_sample_grads_match_autograd_loop():
    model = mlp(3, [4])
    problem = Problem(model, "logistic")
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(2, 3, 3, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 2, (2, 3), generator=gen).double()
    w = model.init(gen).expand(2, -1)
    got = per_sample_grads(problem, w, x, y)
    for i in range(2):
        for j in range(3):
            wi = w[i].clone().requires_grad_(True)
            (g,) = torch.autograd.grad(problem.sample_loss(wi, x[i, j], y[i, j]), wi)
            assert torch.allclose(got[i, j], g)


def test_bad_method_raises():
    problem = Problem(linear_model(2), "squared")
    with pytest.raises(ValueError, match="method"):
        clipped_grad_sum(problem, torch.zeros(3), torch.zeros(1, 2, 2), torch.zeros(1, 2), torch.ones(1, 2), 1.0, "nope")


def test_forward_takes_any_leading_shape_for_convolutional_models():
    """``Model.forward`` on [N, K, C, H, W] equals the per-silo batched forward with shared w, so
    ``Problem.accuracy`` and ``Problem.objective`` evaluate LeNet directly."""
    torch.manual_seed(0)
    model = lenet(1, 16, 4)
    w = model.init(torch.Generator().manual_seed(1))
    x = torch.randn(3, 5, 1, 16, 16, dtype=torch.float64)
    shared = model.forward(w, x)
    batched = model.forward_batched(w.expand(3, -1).contiguous(), x)
    assert shared.shape == (3, 5, 4)
    torch.testing.assert_close(shared, batched)
    torch.testing.assert_close(model.forward(w, x[1, 2]), shared[1, 2])  # one unbatched sample
