"""Per-sample clipped gradients: ghost clipping equals the materializing reference; clipping
bounds each per-sample gradient; vmap(grad) equals autograd sample by sample."""

import pytest
import torch

from silodp.algorithms import Problem, lenet, linear_model, mlp
from silodp.algorithms.grads import clipped_diff_sum, clipped_grad_sum, clipped_per_sample, per_sample_grads

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


def _case(model, shape, classes, seed=0, n=3, k=5, spread=0.3):
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n, k, *shape, generator=gen, dtype=torch.float64)
    y = torch.randint(0, classes, (n, k), generator=gen).double()
    w = model.init(gen) + spread * torch.randn(n, model.dim, generator=gen, dtype=torch.float64)
    weights = torch.rand(n, k, generator=gen, dtype=torch.float64)
    return gen, x, y, w, weights


@pytest.mark.parametrize("model,shape,loss,classes", CASES)
@pytest.mark.parametrize("clip,diff_clip", [(None, None), (1.0, None), (0.05, 0.02), (1.0, 0.3), (None, 0.1),
                                            (1.0, "per-silo")])
@pytest.mark.parametrize("gap", [1e-3, 0.5])
def test_ghost_differences_equal_materialized(model, shape, loss, classes, clip, diff_clip, gap):
    """SVRG's and SPIDER's clipped differences by ghost norms (both points' activations and
    output gradients) equal the materializing reference, for near and far points, a difference
    clip that binds, one per silo ([N, 1], stacked trials) or none."""
    gen, x, y, w, weights = _case(model, shape, classes)
    w_old = w + gap * torch.randn(w.shape, generator=gen, dtype=torch.float64)
    if diff_clip == "per-silo":
        diff_clip = torch.tensor([[0.01], [0.2], [5.0]], dtype=torch.float64)
    problem = Problem(model, loss, clip=clip)
    ghost = clipped_diff_sum(problem, w, w_old, x, y, weights, clip, diff_clip, "ghost")
    ref = clipped_diff_sum(problem, w, w_old, x, y, weights, clip, diff_clip, "materialize")
    assert torch.allclose(ghost, ref, atol=1e-12, rtol=1e-9)
    if diff_clip is not None:  # every record's difference within diff_clip
        bound = torch.as_tensor(diff_clip, dtype=torch.float64).reshape(-1)
        assert torch.all(ref.norm(dim=1) <= bound * weights.sum(1) + 1e-12)


def test_ghost_difference_norm_keeps_relative_precision_in_float32():
    """A tiny difference (w_old = w + 1e-4 noise) clipped by a binding diff_clip in float32: the
    ghost norm of the difference keeps its relative precision (no cancellation), so every
    record's clipped difference stays within diff_clip up to float32 round-off."""
    model = mlp(5, [7, 3])
    gen, x, y, w, _ = _case(model, (5,), 2, seed=3, n=4, k=6)
    x, w = x.float(), w.float()
    w_old = w + 1e-4 * torch.randn(w.shape, generator=gen).float()
    problem = Problem(model, "logistic", clip=1.0)
    eye = torch.eye(6, dtype=torch.float32)
    ref = clipped_diff_sum(problem, w.double(), w_old.double(), x.double(), y.double(),
                           torch.ones(4, 6, dtype=torch.float64), 1.0, None, "materialize")
    dc = 0.25 * float(ref.norm(dim=1).min()) / 6  # binds for (almost) every record
    for j in range(6):  # one record at a time: its clipped difference's norm
        one = clipped_diff_sum(problem, w, w_old, x, y.float(), eye[j].expand(4, 6), 1.0, dc, "ghost")
        assert torch.all(one.norm(dim=1) <= dc * (1 + 1e-4))
        ref_one = clipped_diff_sum(problem, w.double(), w_old.double(), x.double(), y.double(),
                                   eye[j].double().expand(4, 6), 1.0, dc, "materialize")
        assert torch.allclose(one.double(), ref_one, rtol=1e-3, atol=1e-3 * dc)


@pytest.mark.parametrize("model,shape,loss,classes", CASES)
@pytest.mark.parametrize("clip", [None, 0.05, 1.0])
def test_ghost_per_sample_equals_vmap(model, shape, loss, classes, clip):
    """The shuffle path's clipped per-record gradients from one batched backward equal vmap(grad)'s."""
    _, x, y, w, _ = _case(model, shape, classes, seed=2)
    problem = Problem(model, loss, clip=clip)
    ghost = clipped_per_sample(problem, w, x, y, clip, "ghost")
    ref = clipped_per_sample(problem, w, x, y, clip, "materialize")
    assert ghost.shape == ref.shape == (3, 5, model.dim)
    assert torch.allclose(ghost, ref, atol=1e-12, rtol=1e-9)


def test_difference_bad_method_raises():
    problem = Problem(linear_model(2), "squared")
    z = torch.zeros(1, 2, 2)
    with pytest.raises(ValueError, match="method"):
        clipped_diff_sum(problem, torch.zeros(3), torch.zeros(3), z, torch.zeros(1, 2), torch.ones(1, 2), 1.0, None, "nope")
    with pytest.raises(ValueError, match="method"):
        clipped_per_sample(problem, torch.zeros(3), z, torch.zeros(1, 2), 1.0, "nope")


@pytest.mark.parametrize("chunk_bytes", [1, 8000, 1 << 30])
def test_chunks_of_silos_give_the_same_sums(monkeypatch, chunk_bytes):
    """Silos processed in chunks (one silo at a time, a few, all at once) give the same clipped
    sums and clipped differences, per-silo difference clips included."""
    from silodp.algorithms import grads

    model = mlp(5, [7, 3])
    gen, x, y, w, weights = _case(model, (5,), 2, seed=4, n=7, k=6)
    w_old = w + 0.1 * torch.randn(w.shape, generator=gen, dtype=torch.float64)
    dc = torch.linspace(0.01, 1.0, 7, dtype=torch.float64).unsqueeze(-1)
    problem = Problem(model, "logistic", clip=0.5)
    ref = (clipped_grad_sum(problem, w, x, y, weights, 0.5, "materialize"),
           clipped_diff_sum(problem, w, w_old, x, y, weights, 0.5, dc, "materialize"))
    monkeypatch.setattr(grads, "CHUNK_BYTES", chunk_bytes)
    assert len(grads._chunks(problem, x)) == {1: 7, 8000: 4, 1 << 30: 1}[chunk_bytes]  # 3552 bytes a silo
    got = (clipped_grad_sum(problem, w, x, y, weights, 0.5), clipped_diff_sum(problem, w, w_old, x, y, weights, 0.5, dc))
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-9)
