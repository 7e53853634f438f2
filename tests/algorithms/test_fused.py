"""The scalar MLP's fused CPU pass (silodp.algorithms.fused, numba): the same sums as the torch path
(its reference and fallback) and the materializing reference, None exactly where the torch path
returns None (a record it cannot norm finitely: the general path then masks or log-norms it), the
torch path wherever the pass does not apply (numba missing, another loss, a GPU or non-contiguous
tensor, a per-record clip), and numba never imported on the light paths."""

import os
import subprocess
import sys

import pytest
import torch

from silodp.algorithms import Problem, fused, grads, mlp
from silodp.algorithms.grads import clipped_grad_sum

pytestmark = pytest.mark.skipif(fused.kernels() is None, reason="numba is not installed")

#: float32 sums of a few records against the float64 reference: a few ulps of float32 per term
TOL = {torch.float64: dict(atol=1e-12, rtol=1e-9), torch.float32: dict(atol=1e-6, rtol=1e-5)}


def _case(dtype, seed=0, n=4, k=7, d=6, hidden=9):
    gen = torch.Generator().manual_seed(seed)
    model = mlp(d, [hidden])
    x = torch.randn(n, k, d, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 2, (n, k), generator=gen).double()
    w = model.init(gen) + 0.3 * torch.randn(model.dim, generator=gen, dtype=torch.float64)
    weights = torch.rand(n, k, generator=gen, dtype=torch.float64)
    weights[0, :3] = 0.0  # padding rows
    weights[1, 2] = -0.5  # any value
    return model, x.to(dtype), y.to(dtype), w.to(dtype), weights.to(dtype), gen


def _torch_path(monkeypatch):
    """Make the pass unavailable, as without numba (restored at the test's end)."""
    monkeypatch.setitem(sys.modules, "numba", None)  # `import numba` raises ImportError
    monkeypatch.setattr(fused, "_KERNELS", None)
    assert fused.kernels() is None


def _count_calls(monkeypatch) -> list:
    calls: list = []
    real = fused.clipped_sum
    monkeypatch.setattr(fused, "clipped_sum", lambda *a, **k: (calls.append(1), real(*a, **k))[1])
    return calls


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("clip", [None, 0.05, 1.0, "per-silo"])
@pytest.mark.parametrize("iterate", ["shared", "per-silo"])
@pytest.mark.parametrize("size", ["small", "wide", "even"])  # rows shorter than a vector register, and several
def test_fused_sum_equals_the_torch_path_and_the_reference(monkeypatch, dtype, clip, iterate, size):
    """The sum pass against the torch path and the reference; its last loop takes records two at a time
    (``k`` 7 and 37: pairs and a last record alone; 6: pairs only)."""
    model, x, y, w, weights, gen = _case(dtype, **dict(small={}, wide=dict(k=37, d=50, hidden=64),
                                                       even=dict(k=6, d=50, hidden=64))[size])
    if clip == "per-silo":
        clip = torch.tensor([[0.01], [0.1], [1.0], [10.0]], dtype=dtype)
    if iterate == "per-silo":
        w = w + 0.1 * torch.randn(4, model.dim, generator=gen, dtype=torch.float64).to(dtype)
    problem = Problem(model, "logistic", clip=1.0)  # the kernels take the clip as their argument
    assert fused.applies(x, "logistic", clip)
    calls = _count_calls(monkeypatch)
    got = grads._scalar_mlp_sum(problem, grads._per_silo(w, x), x, y, weights, clip)
    whole = clipped_grad_sum(problem, w, x, y, weights, clip)
    assert len(calls) == 2 and got is not None
    assert torch.equal(got, whole)
    ref = clipped_grad_sum(problem, w.double(), x.double(), y.double(), weights.double(),
                           clip if not isinstance(clip, torch.Tensor) else clip.double(), "materialize")
    assert torch.allclose(got.double(), ref, **TOL[dtype])
    _torch_path(monkeypatch)
    slow = grads._scalar_mlp_sum(problem, grads._per_silo(w, x), x, y, weights, clip)
    assert len(calls) == 2  # the torch path ran
    assert torch.allclose(got, slow, **TOL[dtype])
    if clip is not None and not isinstance(clip, torch.Tensor):  # each silo's sum within clip * sum |weights|
        assert torch.all(got.double().norm(dim=1) <= clip * weights.double().abs().sum(1) * (1 + 1e-6))


def _poison(kind: str, x: torch.Tensor, w: torch.Tensor) -> None:
    """One record (silo 1, record 2) the kernels cannot norm finitely, or (``"-inf pre-activation"``)
    one they can: a hidden unit's pre-activation overflows to -inf on finite features, which the
    ReLU zeroes on both paths."""
    big = torch.finfo(x.dtype).max
    x[..., 0].clamp_(-1.0, 1.0)  # no other record's unit 0 overflows below
    if kind == "nan":
        x[1, 2, 0] = float("nan")
    elif kind == "inf":
        x[1, 2, 3] = float("inf")
    elif kind == "-inf":
        x[1, 2, 3] = -float("inf")
    elif kind == "huge":  # finite features whose squared norm overflows
        x[1, 2] = big ** 0.5 * 4
    else:  # unit 0: W1[0, 0] = +-big / 2 and b1[0] = -big / 2, finite and <= 0 on |x_0| <= 1, +-inf at x_0 = 4
        hidden, d = 9, x.shape[-1]
        w[0], w[hidden * d] = (-big if kind.startswith("-") else big) / 2, -big / 2
        if kind == "nan pre-activation":  # and W1[0, 1] = -big / 2: inf - inf at x_0 = x_1 = 4
            x[..., :2].clamp_(-0.5, 0.5)  # x_0 - x_1 - 1 <= 0 on the other records
            w[1] = -big / 2
        x[1, 2] = 1.0
        x[1, 2, 0] = 4.0
        if kind == "nan pre-activation":
            x[1, 2, 1] = 4.0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["nan", "inf", "-inf", "huge", "+inf pre-activation", "-inf pre-activation",
                                  "nan pre-activation"])
@pytest.mark.parametrize("clip", [None, 0.5])
def test_non_finite_records_give_none_where_the_torch_path_does(monkeypatch, dtype, kind, clip):
    """A NaN / inf / huge (overflowing squared norm) feature or a +inf / NaN pre-activation: the fused pass
    returns None, as the torch path, and the chunk's sum is the general path's (the record masked or
    log-normed), equal to the reference; a -inf pre-activation (the ReLU's zero): both kernels run and
    agree."""
    model, x, y, w, weights, _ = _case(dtype, seed=3)
    _poison(kind, x, w)
    problem = Problem(model, "logistic", clip=clip)
    ws = grads._per_silo(w, x)
    got = grads._scalar_mlp_sum(problem, ws, x, y, weights, clip)
    whole = clipped_grad_sum(problem, w, x, y, weights, clip)
    _torch_path(monkeypatch)
    slow = grads._scalar_mlp_sum(problem, ws, x, y, weights, clip)
    assert (got is None) == (slow is None) == (kind != "-inf pre-activation")
    slow_whole = clipped_grad_sum(problem, w, x, y, weights, clip)
    if got is None:
        assert torch.equal(whole, slow_whole)  # the general path, both
    else:
        assert torch.allclose(got, slow, **TOL[dtype]) and torch.equal(got, whole)
        assert torch.allclose(whole, slow_whole, **TOL[dtype])
    ref = clipped_grad_sum(problem, w, x, y, weights, clip, "materialize")
    assert torch.allclose(whole, ref, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("clip,diff_clip", [(None, None), (0.05, None), (1.0, 0.02), (None, 0.1), (1.0, "per-silo"),
                                            (0.5, 0.0)])
@pytest.mark.parametrize("iterate", ["shared", "per-silo", "equal points"])
@pytest.mark.parametrize("size", ["small", "wide"])
def test_fused_differences_equal_the_torch_path_and_the_reference(monkeypatch, dtype, clip, diff_clip, iterate, size):
    """SVRG / SPIDER's differences of clipped gradients, each clipped again (``diff_clip``: None, a
    number, one per silo, 0 at a zero difference): the fused pass equals the torch path and the
    materializing reference."""
    model, x, y, w, weights, gen = _case(dtype, seed=1, **({} if size == "small" else dict(k=37, d=50, hidden=64)))
    if diff_clip == "per-silo":
        diff_clip = torch.tensor([[0.001], [0.01], [0.1], [5.0]], dtype=dtype)
    w_old = w + 0.1 * torch.randn(model.dim, generator=gen, dtype=torch.float64).to(dtype)
    if iterate == "per-silo":
        w_old = w_old + 0.1 * torch.randn(4, model.dim, generator=gen, dtype=torch.float64).to(dtype)
    elif iterate == "equal points":
        w_old = w.clone()
    problem = Problem(model, "logistic", clip=clip)
    assert fused.applies(x, "logistic", clip, diff_clip)
    calls = _count_calls(monkeypatch)
    ws = (grads._per_silo(w, x), grads._per_silo(w_old, x))
    got = grads._scalar_mlp_diff(problem, *ws, x, y, weights, clip, diff_clip)
    assert len(calls) == 1 and got is not None
    assert torch.equal(got, grads.clipped_diff_sum(problem, w, w_old, x, y, weights, clip, diff_clip))
    ref = grads.clipped_diff_sum(problem, w.double(), w_old.double(), x.double(), y.double(), weights.double(), clip,
                                 diff_clip if not isinstance(diff_clip, torch.Tensor) else diff_clip.double(),
                                 "materialize")
    assert torch.allclose(got.double(), ref, **TOL[dtype])
    if iterate == "equal points":
        assert torch.equal(got, torch.zeros_like(got))
    _torch_path(monkeypatch)
    slow = grads._scalar_mlp_diff(problem, *ws, x, y, weights, clip, diff_clip)
    assert len(calls) == 2 and torch.allclose(got, slow, **TOL[dtype])


def test_a_tiny_difference_in_float32_is_clipped_to_its_bound():
    """The difference's norm is formed from the difference itself, in float32 too: at ``w_old = w +
    1e-4`` noise and a difference clip binding for every record, each record's clipped difference
    (alone in the sum) has norm at most the clip within 5% (test_grads' bound for the general path)."""
    model, x, y, w, _, gen = _case(torch.float64, seed=3, k=6, d=50, hidden=64)
    w_old = w + 1e-4 * torch.randn(w.shape, generator=gen, dtype=torch.float64)
    problem = Problem(model, "logistic", clip=1.0)
    g1, g0 = (grads.clip_rows(grads.per_sample_grads(problem, p.expand(4, -1), x, y), 1.0) for p in (w, w_old))
    dc = 0.25 * float((g1 - g0).norm(dim=-1).min())
    ws = (w.float().expand(4, -1), w_old.float().expand(4, -1))
    eye = torch.eye(6, dtype=torch.float32)
    for j in range(6):
        one = grads._scalar_mlp_diff(problem, *ws, x.float(), y.float(), eye[j].expand(4, 6), 1.0, dc)
        assert one is not None and torch.all(one.norm(dim=1) <= dc * 1.05)
        assert torch.all(one.double().norm(dim=1) >= dc * 0.95)  # it binds: the norm is the clip's


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("kind", ["nan", "huge", "+inf pre-activation", "-inf pre-activation", "nan pre-activation"])
@pytest.mark.parametrize("at", ["w", "w_old"])
def test_non_finite_differences_give_none_where_the_torch_path_does(monkeypatch, dtype, kind, at):
    """A record not finite at either point: the fused difference returns None as the torch path, and
    the general path's sum (the record's whole difference zero) equals the reference."""
    model, x, y, w, weights, gen = _case(dtype, seed=2)
    other = w + 0.1 * torch.randn(model.dim, generator=gen, dtype=torch.float64).to(dtype)
    _poison(kind, x, w)
    w, w_old = (w, other) if at == "w" else (other, w)
    problem = Problem(model, "logistic", clip=0.5)
    ws = (grads._per_silo(w, x), grads._per_silo(w_old, x))
    got = grads._scalar_mlp_diff(problem, *ws, x, y, weights, 0.5, 0.1)
    whole = grads.clipped_diff_sum(problem, w, w_old, x, y, weights, 0.5, 0.1)
    _torch_path(monkeypatch)
    slow = grads._scalar_mlp_diff(problem, *ws, x, y, weights, 0.5, 0.1)
    assert (got is None) == (slow is None) == (kind != "-inf pre-activation")
    if got is not None:
        assert torch.allclose(got, slow, **TOL[dtype]) and torch.equal(got, whole)
    ref = grads.clipped_diff_sum(problem, w, w_old, x, y, weights, 0.5, 0.1, "materialize")
    assert torch.allclose(whole, ref, **TOL[dtype])


def test_the_torch_path_runs_where_the_pass_does_not_apply(monkeypatch):
    """Another loss, a per-record clip, a non-contiguous or float16 input, a tensor off the CPU: no
    fused call, and the same sums as the reference."""
    model, x, y, w, weights, _ = _case(torch.float64)
    calls = _count_calls(monkeypatch)
    per_record = torch.full((4, 7), 0.5, dtype=torch.float64)
    assert not fused.applies(x, "squared") and not fused.applies(x, "logistic", per_record)
    assert not fused.applies(x.transpose(0, 1), "logistic") and not fused.applies(x.half(), "logistic")
    assert not fused.applies(torch.empty(4, 7, 6, device="meta"), "logistic")
    for loss, clip in (("squared", 0.5), ("logistic", per_record)):
        problem = Problem(model, loss, clip=0.5)
        got = clipped_grad_sum(problem, w, x, y, weights, clip)
        assert torch.allclose(got, clipped_grad_sum(problem, w, x, y, weights, clip, "materialize"), **TOL[x.dtype])
    assert not calls


def test_without_numba_the_torch_path_gives_the_same_sums(monkeypatch):
    model, x, y, w, weights, _ = _case(torch.float64)
    problem = Problem(model, "logistic", clip=0.3)
    fast = clipped_grad_sum(problem, w, x, y, weights, 0.3)
    calls = _count_calls(monkeypatch)
    _torch_path(monkeypatch)
    assert not fused.applies(x, "logistic", 0.3)
    assert torch.allclose(clipped_grad_sum(problem, w, x, y, weights, 0.3), fast, **TOL[x.dtype])
    assert not calls


def test_the_cache_falls_back_to_none_on_a_read_only_package(monkeypatch, tmp_path):
    """numba caches the kernels in the package's ``__pycache__`` where it can write there; not at
    all (never elsewhere) where it cannot."""
    assert fused._cache_writable()
    monkeypatch.setattr(fused.os, "access", lambda path, mode: False)
    assert not fused._cache_writable()
    monkeypatch.setattr(fused.os, "makedirs", lambda *a, **k: (_ for _ in ()).throw(PermissionError()))
    assert not fused._cache_writable()


def test_light_paths_never_import_numba():
    code = ("import sys, silodp, silodp.accounting, silodp.algorithms; "
            "assert 'numba' not in sys.modules, 'numba imported'")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("value", ["huge", "inf"])
@pytest.mark.parametrize("kind", ["sum", "diff"])
@pytest.mark.parametrize("iterate", ["shared", "per-silo"])
def test_an_output_weight_whose_square_overflows_gives_none_as_the_torch_path(monkeypatch, dtype, value, kind,
                                                                              iterate):
    """An output weight ``w2_u`` whose square is not finite (``|w2_u| > sqrt(max)``, finite, or inf) on a
    hidden unit masked on every record (every silo's, or one silo's iterate): the torch path's
    ``m @ w2^2`` is ``0 * inf = NaN`` on every record of that silo (None: the general path), and so is
    the fused pass, whose select alone would skip the masked unit and release a sum (the former pass
    did, for the finite weight); the general path's sum then equals the reference."""
    model, x, y, w, weights, gen = _case(dtype, seed=4)
    hidden, d = 9, x.shape[-1]
    (sw1, sb1), (sw2, _) = model.slices[0], model.slices[2]
    w[sw1].view(hidden, d)[0] = 0.0  # unit 0: pre-activation -1 on every record, masked
    w[sb1][0] = -1.0
    big = torch.finfo(dtype).max ** 0.5 * 4 if value == "huge" else float("inf")
    w_old = w + 0.1 * torch.randn(model.dim, generator=gen, dtype=torch.float64).to(dtype)  # (diff) finite
    w = w.expand(4, -1).clone()
    w[2 if iterate == "per-silo" else slice(None), sw2.start] = big
    if iterate == "per-silo":  # the other silos' iterates differ too
        w[[0, 1, 3]] += 0.01 * torch.randn(3, model.dim, generator=gen, dtype=torch.float64).to(dtype)
    assert not torch.isfinite(w[2, sw2.start].square())
    problem = Problem(model, "logistic", clip=0.5)
    if kind == "sum":
        run = lambda: grads._scalar_mlp_sum(problem, w, x, y, weights, 0.5)  # noqa: E731
    else:
        run = lambda: grads._scalar_mlp_diff(problem, w, grads._per_silo(w_old, x), x, y, weights, 0.5, 0.1)  # noqa: E731
    calls = _count_calls(monkeypatch)
    assert run() is None and len(calls) == 1
    _torch_path(monkeypatch)
    assert run() is None and len(calls) == 1  # the torch path ran: None too
    if kind == "sum" and value == "huge":  # the general path's sum: the masked unit contributes nothing
        whole = clipped_grad_sum(problem, w, x, y, weights, 0.5)
        ref = clipped_grad_sum(problem, w, x, y, weights, 0.5, "materialize")
        assert torch.isfinite(whole).all() and torch.allclose(whole, ref, **TOL[dtype])


_REPRODUCE = """
import hashlib, torch
from silodp.algorithms import Federation, Problem, fused, grads, mlp
torch.set_num_threads(1)
digest = hashlib.sha256()
for dtype in (torch.float32, torch.float64):
    gen = torch.Generator().manual_seed(1)
    model = mlp(50, [64])
    x = torch.randn(25, 600, 50, generator=gen).to(dtype)
    y = torch.randint(0, 2, (25, 600), generator=gen).to(dtype)
    w = (model.init(gen) + 0.3 * torch.randn(model.dim, generator=gen, dtype=torch.float64)).to(dtype)
    weights = torch.full((25, 600), 1 / 600, dtype=dtype)
    problem, wp = Problem(model, "logistic", clip=1.0), grads._per_silo(w, x)
    assert fused.applies(x, "logistic", 1.0, 0.5)
    # the gather's ||x||^2 + 1 (every silo's rows in order), which the passes read instead of x
    _, _, xsq = Federation(x, y, torch.full((25,), 600)).gather(torch.arange(600).expand(25, -1), norms=True)
    assert xsq is not None
    for norms in (None, xsq):
        for clip, dc in ((1.0, 0.5), (0.05, None), (None, None)):
            out = torch.cat([grads._scalar_mlp_sum(problem, wp, x, y, weights, clip, xsq=norms),
                             grads._scalar_mlp_diff(problem, wp, 0.9 * wp, x, y, weights, clip, dc, xsq=norms)])
            digest.update(out.numpy().tobytes())
print(digest.hexdigest())
"""


def test_the_passes_give_the_same_bits_compiled_and_loaded_from_the_cache(tmp_path):
    """A seeded run is reproducible bit for bit whether its process compiled the passes or loaded them
    from numba's cache (float32 compiled first, the vectorized reductions' order included): round 10's
    passes gave other float32 sums in the compiling process than in the later ones (h39f). Both dtypes,
    the sum and difference passes reading ``x`` or the gather's norms, clipped or not: a difference pass
    with its per-record scalars split into vectorized loops gave other float64 differences in the
    compiling process (h40k; not kept)."""
    env = {**os.environ, "NUMBA_CACHE_DIR": str(tmp_path)}
    runs = [subprocess.run([sys.executable, "-c", _REPRODUCE], capture_output=True, text=True, timeout=300, env=env)
            for _ in range(2)]
    assert all(r.returncode == 0 for r in runs), [r.stderr for r in runs]
    assert any(tmp_path.rglob("*.nbi")), "the first process wrote no cache"
    assert runs[0].stdout == runs[1].stdout
