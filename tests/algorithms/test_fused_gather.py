"""The minibatch gather's numba pass (:func:`silodp.algorithms.fused.gather`, software prefetch):
the rows ``index_select`` copies, bit for bit (both dtypes, N 1 / 3 / 100, repeated indices, the
last row, a 1-record silo, NaN payloads and signed zeros); ``index_select`` where it does not run
(numba missing, a gradient, another dtype, a non-contiguous source, an index outside a silo); the
gather pool's rules unchanged; seeded MB-SGD and SPIDER runs release the same messages bit for bit
as through ``index_select`` (the gather before this pass)."""

import pytest
import torch

from silodp.algorithms import Federation, IsrlMBSGD, IsrlProxSVRG, IsrlSpider, Problem, fused, mlp

pytestmark = pytest.mark.skipif(fused.kernels() is None, reason="numba is not installed")


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as integers (NaN payloads and signed zeros compared too)."""
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int64)


def _index_select(fed: Federation, idx: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The gather before the numba pass: one ``index_select`` on the flattened records."""
    n_silos, n_max = fed.x.shape[:2]
    flat = (idx + torch.arange(n_silos).unsqueeze(1) * n_max).reshape(-1)
    x = fed.x.reshape(n_silos * n_max, *fed.x.shape[2:]).index_select(0, flat)
    return x.view(*idx.shape, *fed.x.shape[2:]), fed.y.reshape(-1).index_select(0, flat).view(idx.shape)


def _federation(n_silos: int, dtype, shape=(7,), seed=0) -> Federation:
    """Silos of 1 to 40 records (the first has one), with NaN, infinities and -0.0 among the rows."""
    gen = torch.Generator().manual_seed(seed)
    counts = [1] + [int(c) for c in torch.randint(2, 41, (n_silos - 1,), generator=gen)]
    xs = [torch.randn(c, *shape, generator=gen, dtype=torch.float64).to(dtype) for c in counts]
    xs[-1].view(-1)[:4] = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")], dtype=dtype)[:xs[-1].numel()]
    ys = [torch.randn(c, generator=gen, dtype=torch.float64).to(dtype) for c in counts]
    return Federation.from_silos(xs, ys)


def _draws(fed: Federation, k: int, seed=1) -> torch.Tensor:
    """``[N, k]`` indices, each silo's last record and a repeated one among them."""
    gen = torch.Generator().manual_seed(seed)
    idx = torch.stack([torch.randint(0, int(c), (k,), generator=gen) for c in fed.counts])
    idx[:, 0] = fed.counts - 1  # the last row of each silo
    idx[:, 1] = idx[:, 2]  # a repeated index
    return idx


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n_silos", [1, 3, 100])
@pytest.mark.parametrize("shape", [(7,), (50,), (1, 3, 3)])
def test_the_numba_gather_copies_the_rows_of_index_select_bit_for_bit(dtype, n_silos, shape):
    fed = _federation(n_silos, dtype, shape)
    idx = _draws(fed, 9)
    x, y = fed.gather(idx)
    ref_x, ref_y = _index_select(fed, idx)
    assert x.shape == ref_x.shape and y.shape == ref_y.shape and x.dtype == y.dtype == dtype
    assert torch.equal(_bits(x), _bits(ref_x)) and torch.equal(_bits(y), _bits(ref_y))
    out = torch.empty_like(ref_x.reshape(idx.numel(), -1))
    done = fused.gather(fed.x, fed.y, idx, out)  # the pass itself ran (not the fallback)
    assert done is not None and done[1] is None and torch.equal(_bits(out.view_as(ref_x)), _bits(ref_x))
    assert torch.equal(_bits(done[0].view_as(ref_y)), _bits(ref_y))


def test_without_numba_the_gather_is_index_select(monkeypatch):
    fed = _federation(3, torch.float32)
    idx = _draws(fed, 6)
    monkeypatch.setattr(fused, "kernels", lambda: None)
    assert fused.gather(fed.x, fed.y, idx, torch.empty(idx.numel(), 7)) is None
    x, y = fed.gather(idx)
    ref_x, ref_y = _index_select(fed, idx)
    assert torch.equal(_bits(x), _bits(ref_x)) and torch.equal(_bits(y), _bits(ref_y))


@pytest.mark.parametrize("case", ["grad", "float16", "labels", "strided", "int32 index", "silo's end", "negative"])
def test_the_pass_declines_and_index_select_answers(case):
    """A gradient, another dtype, labels of another dtype, a non-contiguous source or an int32
    index: the pass declines (None) and the gather is ``index_select``'s (with a gradient the pass
    only declines: ``index_select`` into the pool refuses it, as it did before); an index outside its silo
    (past its padding, or negative): declined too, and the gather does what ``index_select`` does
    (the next silo's row, or an error)."""
    fed = _federation(3, torch.float32)
    idx = _draws(fed, 5)
    if case == "grad":
        fed = Federation(fed.x.clone().requires_grad_(True), fed.y, fed.counts)
    elif case == "float16":
        fed = fed.to(torch.float16)
    elif case == "labels":
        fed = Federation(fed.x, fed.y.long(), fed.counts)
    elif case == "strided":
        fed = Federation(fed.x.transpose(0, 1).contiguous().transpose(0, 1), fed.y, fed.counts)
        assert not fed.x.is_contiguous()
    elif case == "int32 index":
        idx = idx.int()
    elif case == "silo's end":
        idx[0, 3] = fed.x.shape[1]  # the flattened row of the next silo's first record
    else:
        idx[0, 2] = -1  # before the first record
    out = torch.empty(idx.numel(), 7, dtype=fed.x.dtype)
    if case == "negative":
        with pytest.raises((IndexError, RuntimeError)):
            _index_select(fed, idx.long())
        assert fused.gather(fed.x, fed.y, idx, out) is None
        with pytest.raises((IndexError, RuntimeError)):
            fed.gather(idx)
        return
    assert fused.gather(fed.x, fed.y, idx, out) is None
    if case == "grad":  # index_select into the pooled buffer refuses a gradient (as before this pass)
        return
    x, y = fed.gather(idx)
    ref_x, ref_y = _index_select(fed, idx.long())
    assert torch.equal(x, ref_x) and torch.equal(y, ref_y)


def test_the_pass_declines_a_destination_of_another_size_or_labels_of_another_shape():
    """``out`` must hold exactly ``N K`` rows of ``x``'s width and ``y`` be ``[N, n]``: the pass
    never writes past a buffer (it runs without bounds checks)."""
    fed = _federation(3, torch.float32)
    idx = _draws(fed, 5)
    for out in (torch.empty(idx.numel(), 6), torch.empty(idx.numel() - 1, 7), torch.empty(idx.numel(), 8)):
        assert fused.gather(fed.x, fed.y, idx, out) is None
    assert fused.gather(fed.x, fed.y[:, :-1].contiguous(), idx, torch.empty(idx.numel(), 7)) is None
    assert fused.gather(fed.x, fed.y, idx, torch.empty(idx.numel(), 7)) is not None


def test_the_pool_never_hands_out_a_held_batch():
    """Through the numba pass: a batch (or a slice of it) still held keeps its rows; a free buffer
    is reused."""
    fed = _federation(4, torch.float32, (50,))
    draws = [_draws(fed, 8, seed=s) for s in range(4)]
    a, _ = fed.gather(draws[0])
    kept = a[2:]
    del a
    b, _ = fed.gather(draws[1])
    c, _ = fed.gather(draws[2])
    assert torch.equal(_bits(kept), _bits(_index_select(fed, draws[0])[0][2:]))
    assert torch.equal(_bits(b), _bits(_index_select(fed, draws[1])[0]))
    ptr = c.data_ptr()
    del c
    d, _ = fed.gather(draws[3])
    assert torch.equal(_bits(d), _bits(_index_select(fed, draws[3])[0]))
    from silodp.algorithms import federation

    if federation._use_count is not None:
        assert d.data_ptr() == ptr and len(fed.__dict__["_gather_pool"]) <= 2


def _gathered_pointers(monkeypatch) -> tuple[Federation, list]:
    """A small federation, and the list into which every later gather appends its rows' address."""
    from silodp.algorithms import federation

    if federation._use_count is None:
        pytest.skip("this torch has no storage use count: no buffer is reused")
    real, seen = federation.Federation.gather, []

    def gather(self, idx, norms=False, **where):
        got = real(self, idx, norms, **where)
        seen.append(got[0].data_ptr())
        return got

    gen = torch.Generator().manual_seed(0)
    fed = Federation(torch.randn(4, 20, 5, generator=gen), (torch.rand(4, 20, generator=gen) < 0.5).float(),
                     torch.full((4,), 20))
    monkeypatch.setattr(federation.Federation, "gather", gather)
    return fed, seen


def test_mb_sgd_gathers_every_round_into_one_buffer(monkeypatch):
    """Each round's gather (the kernel's, a chunk of silos into its work tensor) reuses the previous
    round's buffer (one buffer in cache, not two alternating)."""
    gen = torch.Generator().manual_seed(0)
    # the passes compiled (or loaded) first, on another federation: a first call's compilation may keep
    # its arguments (the first round's buffer) alive for a while, which is no round's behaviour
    warm = Federation(torch.randn(4, 20, 5, generator=gen), (torch.rand(4, 20, generator=gen) < 0.5).float(),
                      torch.full((4,), 20))
    IsrlMBSGD(rounds=2, batch_size=3, step_size=0.1, sigmas={"sigma": 0.3}, metrics_every=0).run(
        Problem(mlp(5, [4], 1), "logistic", clip=1.0), warm, seed=1)
    fed, seen = _gathered_pointers(monkeypatch)
    IsrlMBSGD(rounds=5, batch_size=3, step_size=0.1, sigmas={"sigma": 0.3}, metrics_every=0).run(
        Problem(mlp(5, [4], 1), "logistic", clip=1.0), fed, seed=0)
    assert len(seen) == 5 and len(set(seen)) == 1


@pytest.mark.parametrize("name", ["isrl-spider", "isrl-prox-svrg", "isrl-fed-spider"])
def test_spider_and_svrg_gather_every_batch_into_one_buffer(monkeypatch, name):
    """SPIDER (with a smoothness constant: clipped differences), SVRG and FedSPIDER: every gather (the
    kernel's, a chunk of silos into its work tensor) reuses the previous one's buffer (one buffer in
    cache, not two alternating)."""
    from silodp.algorithms import registry

    problem = Problem(mlp(5, [4], 1), "logistic", clip=1.0, beta=4.0)
    cls = registry.ALGORITHMS[name]
    extra = {"isrl-prox-svrg": {"inner_steps": 3}, "isrl-spider": {"period": 3}}.get(name, {})
    algo = cls(rounds=5, batch_size=3, step_size=0.1, sigmas={k: 0.3 for k in cls.noise_keys}, metrics_every=0,
               **extra)
    gen = torch.Generator().manual_seed(1)
    warm = Federation(torch.randn(4, 20, 5, generator=gen), (torch.rand(4, 20, generator=gen) < 0.5).float(),
                      torch.full((4,), 20))
    algo.run(problem, warm, seed=1)  # the passes compiled first (as in the MB-SGD test)
    fed, seen = _gathered_pointers(monkeypatch)
    algo.run(problem, fed, seed=0)
    assert len(seen) >= 5 and len(set(seen)) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width,hidden", [(6, 5), (50, 64)])
def test_seeded_runs_release_the_same_messages_as_through_index_select(dtype, width, hidden, monkeypatch):
    """MB-SGD, SPIDER (with a smoothness constant: clipped differences) and SVRG, 2 of 5 silos
    available at random: every released message, aggregate and iterate equal bit for bit with the
    numba gather (whose ``||x||^2 + 1`` the fused passes read) and with ``index_select`` (the pass
    declined: the passes read ``x``)."""
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, width, generator=gen, dtype=torch.float64).to(dtype) for n in (9, 4, 14, 7, 12)]
    ys = [(torch.rand(n, generator=gen) < 0.5).to(dtype) for n in (9, 4, 14, 7, 12)]
    fed = Federation.from_silos(xs, ys).with_availability(2, "random")
    problem = Problem(mlp(width, [hidden], 1), "logistic", clip=1.0, beta=4.0)
    algos = (IsrlMBSGD(rounds=4, batch_size=4, step_size=0.1, sigmas={"sigma": 0.3}, metrics_every=0,
                       record_transcript=True),
             IsrlSpider(rounds=4, batch_size=4, step_size=0.1, period=2, metrics_every=0, record_transcript=True,
                        sigmas={"sigma1": 0.3, "sigma2": 0.5, "sigma2_hat": 0.2}),
             IsrlProxSVRG(rounds=2, batch_size=4, step_size=0.1, inner_steps=3, metrics_every=0,
                          record_transcript=True, sigmas={"sigma1": 0.3, "sigma2": 0.5}))
    calls = []
    real = fused.gather
    monkeypatch.setattr(fused, "gather", lambda *a: calls.append(real(*a)) or calls[-1])
    runs = [algo.run(problem, fed, seed=5) for algo in algos]
    assert calls and all(c is not None for c in calls)  # the numba pass served every gather
    monkeypatch.setattr(fused, "gather", lambda *a: None)
    for algo, new in zip(algos, runs):
        old = algo.run(problem, fed, seed=5)
        assert len(new.transcript) == len(old.transcript) > 0
        for e1, e0 in zip(new.transcript, old.transcript):
            assert (e1["batch"] is e0["batch"] is None or torch.equal(e1["batch"], e0["batch"]))  # None: SVRG's full data
            assert torch.equal(e1["available"], e0["available"])
            assert torch.equal(_bits(e1["messages"]), _bits(e0["messages"]))
            assert torch.equal(_bits(e1["aggregate"]), _bits(e0["aggregate"]))
        assert torch.equal(_bits(new.w_last), _bits(old.w_last)) and torch.equal(_bits(new.w_priv), _bits(old.w_priv))
        assert new.ledger == old.ledger


def _rows(n_silos: int, k: int, width: int, dtype, seed=0) -> torch.Tensor:
    """``[n_silos, k, width]`` random rows at several scales, with a NaN row, a +inf and a -inf row,
    a row whose squared norm overflows, a zero row and a row of -0.0."""
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(n_silos, k, width, generator=gen, dtype=torch.float64)
    x *= torch.exp(4 * torch.randn(n_silos, k, 1, generator=gen, dtype=torch.float64))
    x = x.to(dtype)
    big = torch.finfo(dtype).max
    x[0, 0, width // 2] = float("nan")
    x[0, 1, 0] = float("inf")
    x[0, 2, width - 1] = -float("inf")
    x[0, 3] = big ** 0.5 * 4
    x[0, 4] = 0.0
    x[0, 5] = -0.0
    return x


def _pass_norms(x: torch.Tensor) -> torch.Tensor:
    """``||x||^2 + 1`` of each row of ``x [n, k, d]`` by the passes' helper (:func:`fused._row_sq` on
    ``x[i, j]``, under the passes' fast-math flags), compiled here."""
    import numba

    @numba.njit(fastmath=set(fused.FASTMATH))
    def norms(x3, consts, out):  # pragma: no cover  (compiled)
        for i in range(x3.shape[0]):
            for j in range(x3.shape[1]):
                out[i, j] = fused._row_sq(x3[i, j], consts[0]) + consts[1]

    out = torch.empty(x.shape[:2], dtype=x.dtype)
    norms(x.numpy(), fused._consts(x.dtype), out.numpy())
    return out


def _identity_gather(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Every silo's records in order through :func:`fused.gather` with norms: (the copy, ``xsq``)."""
    n, k = x.shape[:2]
    idx = torch.arange(k).expand(n, k).contiguous()
    out = torch.empty_like(x)
    done = fused.gather(x, y, idx, out.view(n * k, -1), norms=True)
    assert done is not None and done[1] is not None
    return out, done[1].view(n, k)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("width", [1, 3, 7, 16, 17, 50, 64, 100])
def test_the_gathers_squared_norms_are_the_passes_bits(dtype, width):
    """``fused.gather(..., norms=True)``'s ``||x||^2 + 1`` of each gathered row: as integers the bits of
    the passes' helper on that row (NaN rows NaN, inf rows and overflowing ones +inf, zero rows 1),
    and within float rounding of float64's sum of squares; ``Federation.gather(idx, norms=True)`` the
    same for the rows it draws."""
    x = _rows(3, 12, width, dtype)
    y = torch.zeros(3, 12, dtype=dtype)
    copy, xsq = _identity_gather(x, y)
    assert torch.equal(_bits(copy), _bits(x))
    assert torch.equal(_bits(xsq), _bits(_pass_norms(x)))
    assert torch.isnan(xsq[0, 0]) and xsq[0, 1] == xsq[0, 2] == xsq[0, 3] == float("inf")
    assert xsq[0, 4] == xsq[0, 5] == 1.0
    ref = x.double().square().sum(-1) + 1.0
    finite = torch.isfinite(ref)
    finite[0, 3] = False  # its square overflows in the dtype only
    eps = torch.finfo(dtype).eps
    assert torch.allclose(xsq[finite].double(), ref[finite], rtol=4 * width * eps, atol=0)
    fed = Federation(x, y, torch.full((3,), 12))
    idx = _draws(fed, 9)
    got_x, got_y, got_sq = fed.gather(idx, norms=True)
    assert got_sq.shape == idx.shape and torch.equal(_bits(got_sq), _bits(_pass_norms(got_x)))


def test_without_the_pass_the_gather_has_no_norms(monkeypatch):
    """Where the numba pass does not run the gather's norms are None (the passes then read ``x``);
    without ``norms`` it returns ``(x, y)`` as before."""
    fed = _federation(3, torch.float32)
    idx = _draws(fed, 6)
    assert len(fed.gather(idx)) == 2
    assert fed.gather(idx, norms=True)[2] is not None
    monkeypatch.setattr(fused, "kernels", lambda: None)
    x, y, xsq = fed.gather(idx, norms=True)
    assert xsq is None and torch.equal(_bits(x), _bits(_index_select(fed, idx)[0]))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("shape", [(4, 7, 6, 9), (3, 37, 50, 64), (2, 6, 17, 33)])
@pytest.mark.parametrize("poison", [None, "nan", "inf", "huge"])
def test_the_passes_release_the_same_bits_with_the_gathers_norms(dtype, shape, poison):
    """The sum and difference passes given the gather's ``||x||^2 + 1`` (and not reading ``x`` for it)
    against the same passes reading ``x``: the same sums as integers and the same pre-activation
    work tensor, clipped and not, or None both (a NaN / inf / overflowing record)."""
    from silodp.algorithms import grads

    n, k, d, hidden = shape
    gen = torch.Generator().manual_seed(k)
    model = mlp(d, [hidden], 1)
    x = torch.randn(n, k, d, generator=gen, dtype=torch.float64).to(dtype)
    y = torch.randint(0, 2, (n, k), generator=gen).to(dtype)
    w = (model.init(gen) + 0.3 * torch.randn(model.dim, generator=gen, dtype=torch.float64)).to(dtype)
    w_old = w + (0.05 * torch.randn(model.dim, generator=gen, dtype=torch.float64)).to(dtype)
    weights = torch.rand(n, k, generator=gen, dtype=torch.float64).to(dtype)
    if poison is not None:
        x[n - 1, 2] = {"nan": float("nan"), "inf": float("inf"), "huge": torch.finfo(dtype).max ** 0.5 * 4}[poison]
    _, xsq = _identity_gather(x, y)
    problem = Problem(model, "logistic", clip=1.0)
    ws, wo = grads._per_silo(w, x), grads._per_silo(w_old, x)
    for clip, dc in ((None, None), (0.05, None), (1.0, 0.02)):
        calls = (lambda s: grads._scalar_mlp_sum(problem, ws, x, y, weights, clip, xsq=s),
                 lambda s: grads._scalar_mlp_diff(problem, ws, wo, x, y, weights, clip, dc, xsq=s))
        for call, tag in zip(calls, ("point.h", "point1.h")):
            got = call(xsq)
            work = grads._scratch(tag, (n, k, hidden), x).clone()
            ref = call(None)
            assert (got is None) == (ref is None) == (poison is not None)
            if got is not None:
                assert torch.equal(_bits(got), _bits(ref))
                assert torch.equal(_bits(work), _bits(grads._scratch(tag, (n, k, hidden), x)))
