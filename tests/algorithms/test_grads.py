"""Per-sample clipped gradients: ghost clipping equals the materializing reference; clipping
bounds each per-sample gradient; vmap(grad) equals autograd sample by sample."""

import pytest
import torch

METHODS = ("ghost", "materialize")

from silodp.algorithms import Problem, lenet, linear_model, mlp
from silodp.algorithms.grads import clipped_diff_sum, clipped_grad_sum, clipped_per_sample, per_sample_grads

CASES = [
    (linear_model(4), (4,), "squared", 2),
    (linear_model(4, 3), (4,), "softmax", 3),
    (mlp(5, [7, 3]), (5,), "logistic", 2),
    (mlp(5, [7]), (5,), "logistic", 2),  # the scalar MLP's own kernels (grads._scalar_mlp_sum / _diff)
    (mlp(5, [7]), (5,), "squared", 2),
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
    """A tiny difference (w_old = w + 1e-4 noise) in float32: the ghost norm of each record's
    clipped difference is within 5% of the float64 one (float32's own error on a difference 1e-4 of
    the gradients is 0.02-2%), where the expanded form c1^2|G1|^2 + c0^2|G0|^2 - 2 c1 c0 <G1, G0>
    is off by orders of magnitude; so a binding diff_clip holds to that precision."""
    from silodp.algorithms import grads

    model = mlp(5, [7, 3])
    gen, x, y, w, _ = _case(model, (5,), 2, seed=3, n=4, k=6)
    w_old = w + 1e-4 * torch.randn(w.shape, generator=gen, dtype=torch.float64)
    problem = Problem(model, "logistic", clip=1.0)

    def log_norms(*args):
        _, t1, c1, _ = grads._point(problem, args[0], args[2], args[3], 1.0)
        _, t0, c0, _ = grads._point(problem, args[1], args[2], args[3], 1.0)
        ghost = torch.logsumexp(torch.stack([2 * a.diff_log_norm(b, c1, c0) for a, b in zip(t1, t0)]), 0) / 2
        expanded = (c1 * c1 * sum(t.sq for t in t1) + c0 * c0 * sum(t.sq for t in t0)
                    - 2 * c1 * c0 * sum(((a.a * b.a).sum(-1) + 1) * (a.g * b.g).sum(-1) for a, b in zip(t1, t0)))
        return ghost, 0.5 * torch.log(expanded.clamp(min=1e-45))

    ref, _ = log_norms(w, w_old, x, y)
    single, expanded = log_norms(w.float(), w_old.float(), x.float(), y.float())
    assert torch.all((single.double() - ref).abs() < 0.05)
    assert float((expanded.double() - ref).abs().max()) > 0.5  # the form it replaces
    dc = 0.25 * float(ref.exp().min())  # binds for every record
    eye = torch.eye(6, dtype=torch.float32)
    for j in range(6):  # one record at a time: its clipped difference's norm
        one = clipped_diff_sum(problem, w.float(), w_old.float(), x.float(), y.float(), eye[j].expand(4, 6), 1.0, dc)
        assert torch.all(one.norm(dim=1) <= dc * 1.05)


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


@pytest.mark.parametrize("diff_clip", [None, 0.05])
def test_differences_at_an_aimed_model_drop_the_non_finite_records(diff_clip):
    """The release primitive's semantics on differences: at issue 34's aimed model (weights
    ``+-MAX / 0.5``: logits ``inf - inf`` on the records it aims at) at either point, every record
    whose gradient is not finite at one of the points contributes exactly zero on both paths, the
    others as before, and the message stays finite."""
    MAX = torch.finfo(torch.float64).max
    problem = Problem(linear_model(4), "logistic", clip=1.0)
    gen = torch.Generator().manual_seed(0)
    x = torch.rand(1, 8, 4, generator=gen, dtype=torch.float64) * 0.8 - 0.4
    x[0, 3, :2] = 0.9
    y = torch.randint(0, 2, (1, 8), generator=gen).double()
    aimed = torch.zeros(5, dtype=torch.float64)
    aimed[0], aimed[1] = MAX / 0.5, -MAX / 0.5
    ordinary = 0.1 * torch.randn(5, generator=gen, dtype=torch.float64)
    weights = torch.full((1, 8), 1 / 8, dtype=torch.float64)
    for w, w_old in ((aimed, ordinary), (ordinary, aimed)):
        finite = torch.isfinite(per_sample_grads(problem, aimed.expand(1, -1), x, y)).all(-1)
        assert not bool(finite[0, 3]) and bool(finite.any())
        kept = weights * finite
        for m in ("ghost", "materialize"):
            out = clipped_diff_sum(problem, w, w_old, x, y, weights, 1.0, diff_clip, m)
            assert torch.isfinite(out).all()
            assert torch.equal(out, clipped_diff_sum(problem, w, w_old, x, y, kept, 1.0, diff_clip, m))
        ghost, ref = (clipped_diff_sum(problem, w, w_old, x, y, weights, 1.0, diff_clip, m) for m in METHODS)
        assert torch.allclose(ghost, ref, rtol=1e-9, atol=1e-12)


def test_a_zero_difference_at_a_zero_difference_clip_is_zero_not_nan():
    """SPIDER at convergence: w == w_old makes both the difference and its clip beta ||w - w_old||
    zero; the message is zero (the materializing path's min(1, 0 / max(0, 1e-30)) = 0), not NaN."""
    model = mlp(5, [7, 3])
    _, x, y, w, weights = _case(model, (5,), 2, seed=5)
    problem = Problem(model, "logistic", clip=1.0)
    for m in METHODS:
        out = clipped_diff_sum(problem, w, w.clone(), x, y, weights, 1.0, 0.0, m)
        assert torch.equal(out, torch.zeros_like(out))


def test_a_model_subclass_with_its_own_forward_keeps_the_autograd_path():
    """The written-out Linear/ReLU pass is Model's forward only: a subclass transforming its
    outputs (the rates' SigmoidLinear) is clipped through its own forward, equal to the reference."""
    from silodp.algorithms import grads
    from silodp.verify.rates.families import SigmoidLinear

    model = SigmoidLinear(4)
    assert not grads._is_mlp(model) and grads._is_mlp(linear_model(4))
    gen, x, y, w, weights = _case(model, (4,), 2, seed=6)
    problem = Problem(model, "squared", clip=0.3)
    w_old = w + 0.2 * torch.randn(w.shape, generator=gen, dtype=torch.float64)
    assert torch.allclose(clipped_grad_sum(problem, w, x, y, weights, 0.3),
                          clipped_grad_sum(problem, w, x, y, weights, 0.3, "materialize"), atol=1e-12, rtol=1e-9)
    assert torch.allclose(clipped_diff_sum(problem, w, w_old, x, y, weights, 0.3, 0.1),
                          clipped_diff_sum(problem, w, w_old, x, y, weights, 0.3, 0.1, "materialize"), atol=1e-12, rtol=1e-9)


@pytest.mark.parametrize("loss", ["logistic", "squared"])
@pytest.mark.parametrize("clip,diff_clip", [(None, None), (0.05, None), (1.0, 0.02), (1.0, "per-silo")])
def test_scalar_mlp_kernels_with_one_shared_iterate_equal_materialized(loss, clip, diff_clip):
    """The scalar-output MLP's kernels (one matrix product for all silos when they share the
    server's iterate, the clip factor folded into the output derivative, the hidden gradients never
    formed) equal the reference, sums and differences, and they ran (not the general fallback)."""
    from silodp.algorithms import grads

    model = mlp(6, [9])
    gen, x, y, _, weights = _case(model, (6,), 2, seed=3, n=4, k=7)
    w = model.init(gen) + 0.2 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    w_old = w + 0.1 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    if diff_clip == "per-silo":
        diff_clip = torch.tensor([[0.001], [0.01], [0.1], [5.0]], dtype=torch.float64)
    problem = Problem(model, loss, clip=clip)
    assert grads._scalar_mlp(model)
    shared = (w.expand(4, -1), w_old.expand(4, -1))
    assert grads._scalar_mlp_sum(problem, shared[0], x, y, weights, clip) is not None
    assert grads._scalar_mlp_diff(problem, *shared, x, y, weights, clip, diff_clip) is not None
    for args in ((w, w_old), (w.expand(4, -1).clone(), w_old.expand(4, -1).clone())):  # shared, and one per silo
        ghost = clipped_grad_sum(problem, args[0], x, y, weights, clip)
        ref = clipped_grad_sum(problem, args[0], x, y, weights, clip, "materialize")
        assert torch.allclose(ghost, ref, atol=1e-12, rtol=1e-9)
        ghost = clipped_diff_sum(problem, *args, x, y, weights, clip, diff_clip)
        ref = clipped_diff_sum(problem, *args, x, y, weights, clip, diff_clip, "materialize")
        assert torch.allclose(ghost, ref, atol=1e-12, rtol=1e-9)


def test_scalar_mlp_at_an_aimed_model_falls_back_and_drops_the_non_finite_records():
    """A record the scalar MLP's kernel cannot norm finitely (issue 34's aimed weights, here on the
    hidden layer) sends the chunk to the general path: the record contributes zero, sums and
    differences, as the reference."""
    from silodp.algorithms import grads

    MAX = torch.finfo(torch.float64).max
    model = mlp(4, [3])
    problem = Problem(model, "logistic", clip=1.0)
    gen, x, y, _, weights = _case(model, (4,), 2, seed=5, n=2, k=6)
    x[0, 2, :2] = 0.9
    w = 0.1 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    w[0], w[1] = MAX / 0.5, -MAX / 0.5  # hidden unit 0: inf - inf on records with x_0, x_1 > 0.5
    ordinary = 0.1 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    assert grads._scalar_mlp_sum(problem, w.expand(2, -1), x, y, weights, 1.0) is None
    for m in METHODS:
        out = clipped_grad_sum(problem, w, x, y, weights, 1.0, m)
        assert torch.isfinite(out).all()
        diff = clipped_diff_sum(problem, ordinary, w, x, y, weights, 1.0, 0.5, m)
        assert torch.isfinite(diff).all()
    for fn in (lambda wts: clipped_grad_sum(problem, w, x, y, wts, 1.0),
               lambda wts: clipped_diff_sum(problem, ordinary, w, x, y, wts, 1.0, 0.5)):
        finite = torch.isfinite(per_sample_grads(problem, w.expand(2, -1), x, y)).all(-1)
        assert not bool(finite[0, 2])
        assert torch.allclose(fn(weights), fn(weights * finite), rtol=1e-12, atol=0)


@pytest.mark.parametrize("model,loss,classes", [(mlp(5, [7, 3]), "logistic", 2), (mlp(5, [7], 3), "softmax", 3),
                                                (mlp(5, [7]), "logistic", 2)])
@pytest.mark.parametrize("form", ["vector", "broadcast", "equal rows"])
def test_a_shared_iterate_runs_one_matrix_product_per_layer(monkeypatch, model, loss, classes, form):
    """When every silo's iterate is the server's (a 1-d ``w``, a broadcast view, or a materialized
    ``[N, d]`` with equal rows, as the first local step of Local SGD), the MLP kernels run each
    Linear layer as one matrix product for every silo (no per-silo ``baddbmm`` / ``bmm`` in the
    forward and backward passes) and equal the reference; one differing row takes the per-silo path."""
    from silodp.algorithms import grads

    gen, x, y, _, weights = _case(model, (5,), classes, seed=5, n=4, k=6)
    w = model.init(gen) + 0.2 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    w_old = w + 0.05 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    shaped = {"vector": lambda v: v, "broadcast": lambda v: v.expand(4, -1),
              "equal rows": lambda v: v.expand(4, -1).clone()}[form]
    problem = Problem(model, loss, clip=0.5)
    ref = (clipped_grad_sum(problem, w, x, y, weights, 0.5, "materialize"),
           clipped_diff_sum(problem, w, w_old, x, y, weights, 0.5, 0.3, "materialize"))
    calls = []
    for name in ("baddbmm", "bmm"):  # the per-silo forward (baddbmm) and backward (bmm) products
        real = getattr(torch, name)
        monkeypatch.setattr(torch, name, lambda a, b, *r, _real=real, _name=name, **kw: (
            calls.append((_name, tuple(a.shape), tuple(b.shape))), _real(a, b, *r, **kw))[1])
    got = (clipped_grad_sum(problem, shaped(w), x, y, weights, 0.5),
           clipped_diff_sum(problem, shaped(w), shaped(w_old), x, y, weights, 0.5, 0.3))
    # the per-silo sums x_s^T G_s remain a bmm ([N, in, K] x [N, K, out]); no [N, K, in] x [N, in, out]
    assert not [c for c in calls if c[0] == "baddbmm" or c[1][1:] == (6, model.layers[0].in_features)
                or (c[0] == "bmm" and c[1][1] == 6 and c[2][1] != 6)], calls
    for a, b in zip(got, ref):
        assert torch.allclose(a, b, atol=1e-12, rtol=1e-9)
    calls.clear()
    apart = w.expand(4, -1).clone()
    apart[2] += 0.01
    assert torch.allclose(clipped_grad_sum(problem, apart, x, y, weights, 0.5),
                          clipped_grad_sum(problem, apart, x, y, weights, 0.5, "materialize"), atol=1e-12, rtol=1e-9)
    assert any(c[0] == "baddbmm" for c in calls)


def test_scalar_mlp_work_tensors_are_reused_and_never_returned(monkeypatch):
    """The scalar MLP's hidden activations and mask are written into per-thread work tensors that
    later calls reuse (no fresh page-faulting allocation per call): the same storage on a second
    call, a returned sum that a later call does not change, work tensors first made in inference
    mode usable outside it, and sums and differences bit for bit those of fresh allocations."""
    from silodp.algorithms import grads

    model = mlp(6, [9])
    problem = Problem(model, "logistic", clip=0.5)
    gen, x, y, _, weights = _case(model, (6,), 2, seed=7, n=4, k=7)
    w = model.init(gen) + 0.2 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    w_old = w + 0.1 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    grads._SCRATCH.__dict__.pop("store", None)
    with torch.inference_mode():  # work tensors made in inference mode stay writable outside it
        in_mode = clipped_grad_sum(problem, w, x, y, weights, 0.5)
    first = clipped_grad_sum(problem, w, x, y, weights, 0.5)
    assert torch.equal(first, in_mode)
    kept = first.clone()
    ptr = grads._scratch("point.h", (4, 7, 9), x).data_ptr()
    diff = clipped_diff_sum(problem, w, w_old, x, y, weights, 0.5, 0.3)
    second = clipped_grad_sum(problem, w, 2 * x, y, weights, 0.5)
    assert grads._scratch("point.h", (4, 7, 9), x).data_ptr() == ptr
    assert torch.equal(first, kept) and not torch.equal(first, second)
    monkeypatch.setattr(grads, "_scratch", lambda tag, shape, like: torch.empty(shape, dtype=like.dtype))
    assert torch.equal(clipped_grad_sum(problem, w, x, y, weights, 0.5), first)
    assert torch.equal(clipped_diff_sum(problem, w, w_old, x, y, weights, 0.5, 0.3), diff)
    assert torch.equal(clipped_grad_sum(problem, w, 2 * x, y, weights, 0.5), second)
    monkeypatch.undo()
    monkeypatch.setattr(grads, "CHUNK_BYTES", 4 * 7 * 9 * 8 - 1)  # one silo's [k, H] above a chunk: not kept
    grads._SCRATCH.store.clear()
    grads._scratch("point.h", (4, 7, 9), x)
    assert grads._SCRATCH.store == {}
    assert torch.allclose(clipped_grad_sum(problem, w, x, y, weights, 0.5), first, atol=1e-12, rtol=1e-9)
