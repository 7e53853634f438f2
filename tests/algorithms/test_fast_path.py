"""The simulator's fast path: the gather by one index_select equals advanced indexing (padded
silos, images, balls-in-bins padding) and reuses a buffer only when nothing holds it; a minibatch
gathered by the kernel a chunk of silos at a time gives the whole gather's sums bit for bit; the
federation keeps its bookkeeping on the CPU (the simulator on CUDA: test_cuda.py)."""

import pytest
import torch

from silodp.algorithms import Federation, IsrlMBSGD, Problem, grads, mlp
from silodp.algorithms.context import Context
from silodp.algorithms.federation import BatchSampler, Rows


@pytest.mark.parametrize("shape", [(3,), (1, 4, 4)])
def test_gather_equals_advanced_indexing(shape):
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, *shape, generator=gen) for n in (5, 9, 7)]
    ys = [torch.randint(0, 3, (n,), generator=gen).float() for n in (5, 9, 7)]
    fed = Federation.from_silos(xs, ys)
    idx = torch.stack([torch.randint(0, int(c), (11,), generator=gen) for c in fed.counts])
    x, y = fed.gather(idx)
    rows = torch.arange(3).unsqueeze(1)
    assert torch.equal(x, fed.x[rows, idx]) and torch.equal(y, fed.y[rows, idx])
    assert x.shape == (3, 11, *shape) and y.shape == (3, 11)


def test_gather_reuses_a_buffer_only_when_nothing_holds_it():
    """A later gather never overwrites rows that a batch, a view or a slice still holds; a buffer
    nothing holds is reused (no fresh pages per round); pickling leaves the pool behind."""
    import pickle

    from silodp.algorithms import federation as fedmod

    gen = torch.Generator().manual_seed(0)
    fed = Federation(torch.randn(3, 10, 4, generator=gen), torch.rand(3, 10, generator=gen), torch.full((3,), 10))
    draws = [torch.randint(0, 10, (3, 5), generator=gen) for _ in range(4)]
    rows = torch.arange(3).unsqueeze(1)
    a, _ = fed.gather(draws[0])
    kept = a[1:]  # a slice outlives its batch
    del a
    b, _ = fed.gather(draws[1])
    c, _ = fed.gather(draws[2])
    assert torch.equal(kept, fed.x[rows, draws[0]][1:])
    assert torch.equal(b, fed.x[rows, draws[1]]) and torch.equal(c, fed.x[rows, draws[2]])
    if fedmod._use_count is not None:
        ptr = c.data_ptr()
        del c
        d, _ = fed.gather(draws[3])
        assert d.data_ptr() == ptr and torch.equal(d, fed.x[rows, draws[3]])
        assert len(fed.__dict__["_gather_pool"]) <= 2
    assert "_gather_pool" not in pickle.loads(pickle.dumps(fed)).__dict__


def test_federation_keeps_its_bookkeeping_on_the_cpu_and_its_data_where_it_is():
    """Counts stay on the CPU (the samplers draw there from the run's generator); mask and weights
    follow the data."""
    fed = Federation(torch.zeros(2, 4, 3, dtype=torch.float64), torch.zeros(2, 4, dtype=torch.float64),
                     torch.tensor([4, 2]))
    assert fed.counts.device.type == "cpu" and fed.mask.device == fed.x.device
    assert torch.equal(fed.weights, torch.tensor([[0.25] * 4, [0.5, 0.5, 0, 0]], dtype=torch.float64))



@pytest.mark.parametrize("silos_per_round", [None, 2])
def test_a_round_releases_what_the_plain_formulas_give_bit_for_bit(silos_per_round):
    """Two MB-SGD rounds redone by hand from the run's seed with the formulas the channel's fast
    path replaced: indices ``clamp(floor(u n_i), n_i - 1)``, the kernel on the gathered batch,
    noise ``randn * std`` (float32, the run's generator), each message ``float32(float64(term) +
    float64(noise))`` and the aggregate ``(messages * a).sum(0) / a.sum()``: the transcript's
    messages, aggregates and iterates are equal bit for bit (every silo available, and 2 of 3)."""
    gen = torch.Generator().manual_seed(0)
    xs = [torch.randn(n, 4, generator=gen) for n in (9, 7, 8)]
    ys = [(torch.rand(n, generator=gen) < 0.5).float() for n in (9, 7, 8)]
    fed = Federation.from_silos(xs, ys).with_availability(silos_per_round)
    problem = Problem(mlp(4, [3], 1), "logistic", clip=1.0)
    std, k = 0.3, 5
    result = IsrlMBSGD(sigmas={"sigma": std}, rounds=2, batch_size=k, step_size=0.1, metrics_every=0,
                       record_transcript=True).run(problem, fed, seed=7)
    g = torch.Generator().manual_seed(7)
    w = problem.model.init(g, dtype=fed.x.dtype)
    rows = torch.arange(3).unsqueeze(1)
    for entry in result.transcript:
        if silos_per_round is None:
            a = torch.ones(3)
        else:
            a = torch.zeros(3)
            a[torch.rand(3, generator=g).argsort()[:silos_per_round]] = 1.0
        u = torch.rand(3, k, generator=g, dtype=torch.float64)
        idx = torch.clamp((u * fed.counts.unsqueeze(1)).long(), max=fed.counts.unsqueeze(1) - 1)
        term = grads.clipped_grad_sum(problem, w, fed.x[rows, idx], fed.y[rows, idx], torch.full((3, k), 1 / k), 1.0)
        noise = torch.randn(term.shape, generator=g, dtype=term.dtype) * std
        messages = (term.to(torch.float64) + noise.to(torch.float64)).to(torch.float32)
        agg = (messages * a[:, None]).sum(0) / a.sum()
        assert torch.equal(entry["batch"], idx) and torch.equal(entry["available"], a.bool())
        assert torch.equal(entry["messages"], messages) and torch.equal(entry["aggregate"], agg)
        w = w - 0.1 * agg
    assert torch.equal(result.w_last, w)
    weight = float(torch.full((3, k), 1 / k).max())  # the ledger's multiplier: std over clip times the weight
    z = float(torch.as_tensor(std, dtype=torch.float64) / (torch.as_tensor(1.0, dtype=torch.float64) * weight))
    assert [e.noise_multiplier for e in result.ledger] == [z, z]


def test_the_aggregate_of_every_silo_sums_the_rows_as_they_are():
    """``Context._aggregate`` skips the product by an all-ones ``a``: equal bit for bit to the
    masked sum, and the masked sum when a silo is left out."""
    gen = torch.Generator().manual_seed(0)
    released = torch.randn(5, 7, generator=gen) * 10.0 ** torch.randint(-30, 30, (5, 7), generator=gen)
    for a in (torch.ones(5), torch.tensor([1.0, 0.0, 1.0, 1.0, 0.0])):
        assert torch.equal(Context._aggregate(None, released, a), (released * a[:, None]).sum(0) / a.sum())


def test_with_replacement_indices_are_floor_u_n_at_most_n_minus_one():
    counts = torch.tensor([5, 9, 7])
    sampler, ref = BatchSampler(counts, 11, True, torch.Generator().manual_seed(3)), torch.Generator().manual_seed(3)
    for _ in range(3):
        u = torch.rand(3, 11, generator=ref, dtype=torch.float64)
        assert torch.equal(sampler.next(), torch.clamp((u * counts.unsqueeze(1)).long(), max=counts.unsqueeze(1) - 1))


def test_the_aggregate_sums_the_rows_as_they_are_only_when_every_weight_is_one():
    """The all-ones test reads the smallest and the largest entry of ``a``: ones and twos (smallest
    1), one value below 1, or a NaN among ones go through the product, bit for bit the masked sum."""
    gen = torch.Generator().manual_seed(1)
    released = torch.randn(4, 9, generator=gen)
    for a in (torch.tensor([1.0, 2.0, 1.0, 1.0]), torch.full((4,), 0.5), torch.tensor([1.0, 1.0, float("nan"), 1.0])):
        torch.testing.assert_close(Context._aggregate(None, released, a), (released * a[:, None]).sum(0) / a.sum(),
                                   rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize("seed", range(3))
def test_the_ledger_multiplier_of_float_noise_is_the_float64_tensor_formula(seed):
    """``GaussianChannel.sent`` with a float std and a float bound (Python's float64 product and
    quotient) records the multiplier of its tensor formula bit for bit, a zero contribution
    included (infinite: no record moves the message)."""
    import math
    from types import SimpleNamespace

    from silodp.accounting.releases import BatchSampling
    from silodp.algorithms.plan import GaussianChannel

    gen = torch.Generator().manual_seed(seed)
    ctx = SimpleNamespace(_ledger=SimpleNamespace(declaration={}), _fed=SimpleNamespace(min_size=50))
    for _ in range(200):
        k = int(torch.randint(1, 700, (1,), generator=gen))
        weights = torch.full((3, k), 1.0 / k)
        data = SimpleNamespace(_weights=weights, sampling=BatchSampling.WITH_REPLACEMENT, size=k)
        std = float(torch.rand(1, generator=gen, dtype=torch.float64)) * 10.0 ** int(torch.randint(-4, 4, (1,), generator=gen))
        for bound in (float(torch.rand(1, generator=gen, dtype=torch.float64)) * 4, 0.0):
            weight = float(weights.max())
            contribution = torch.as_tensor(bound, dtype=torch.float64) * weight
            ratio = torch.as_tensor(std, dtype=torch.float64) / contribution
            z = float(torch.where(contribution > 0, ratio, torch.full_like(ratio, math.inf)).min())
            for s, b in ((std, bound), (torch.tensor(std, dtype=torch.float64), torch.tensor(bound, dtype=torch.float64))):
                assert GaussianChannel().sent(ctx, "grad", data, s, b, 0).noise_multiplier == z


def test_the_sampler_draws_from_its_own_copy_of_the_counts():
    """A sampler derives its float sizes and last indices once, from a copy of the counts it was
    given: changing the caller's tensor afterwards changes none of its draws."""
    counts = torch.tensor([5, 9, 7])
    mine, ref = BatchSampler(counts, 4, True, torch.Generator().manual_seed(0)), torch.Generator().manual_seed(0)
    counts.fill_(1000)
    fixed = torch.tensor([5, 9, 7]).unsqueeze(1)
    for _ in range(3):
        u = torch.rand(3, 4, generator=ref, dtype=torch.float64)
        assert torch.equal(mine.next(), torch.clamp((u * fixed).long(), max=fixed - 1))
    shuffled = BatchSampler(counts[:1].clone().fill_(6), 3, False, torch.Generator().manual_seed(0))
    assert sorted(torch.cat([shuffled.next(), shuffled.next()], 1)[0].tolist()) == list(range(6))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("hidden", [[6], [6, 5]])  # the scalar MLP's fused kernel; the general path
@pytest.mark.parametrize("numba", [True, False])
def test_rows_gathered_by_chunks_give_the_whole_gathers_sums_bit_for_bit(monkeypatch, dtype, hidden, numba):
    """The ghost kernel gathers a :class:`Rows` minibatch one chunk of silos at a time (here 3 chunks
    of at most 2 silos of 5, padded silos, with and without numba's gather): the clipped sums and
    differences equal, bit for bit, those of the batch gathered whole first (the same chunks), and those of the
    ``vmap`` reference to float tolerance; a record with a non-finite feature still contributes zero;
    the kernel gathered each chunk once and never the whole batch."""
    from silodp.algorithms import federation, fused

    gen = torch.Generator().manual_seed(3)
    sizes = (9, 4, 14, 7, 12)
    xs = [torch.randn(n, 5, generator=gen, dtype=torch.float64).to(dtype) for n in sizes]
    ys = [(torch.rand(n, generator=gen) < 0.5).to(dtype) for n in sizes]
    xs[2][1, 3] = float("nan")
    fed = Federation.from_silos(xs, ys)
    idx = torch.stack([torch.randperm(int(c), generator=gen)[:4] for c in fed.counts])
    idx[2, 0] = 1  # the record with the NaN feature is in the batch
    problem = Problem(mlp(5, hidden, 1), "logistic", clip=1.0)
    w = problem.model.init(gen, dtype=dtype)
    w_old = w + 0.1 * torch.randn(w.shape, generator=gen, dtype=dtype)
    weights = torch.full(idx.shape, 0.25, dtype=dtype)
    if not numba:
        monkeypatch.setattr(fused, "gather", lambda *a, **k: None)
    widths = sum(layer.in_features + 2 * layer.out_features for layer in problem.model.layers if hasattr(layer, "in_features"))
    monkeypatch.setattr(grads, "CHUNK_BYTES", 2 * 2 * 4 * widths * fed.x.element_size())  # two silos a chunk
    x, y, xsq = fed.gather(idx, norms=True)
    whole = (grads.clipped_grad_sum(problem, w, x, y, weights, 1.0, xsq=xsq),
             grads.clipped_diff_sum(problem, w, w_old, x, y, weights, 1.0, 0.5, xsq=xsq))
    calls = []
    real = federation.Federation.gather
    monkeypatch.setattr(federation.Federation, "gather",
                        lambda self, i, *a, **k: calls.append(i.shape[0]) or real(self, i, *a, **k))
    chunked = (grads.clipped_grad_sum(problem, w, Rows(fed, idx), None, weights, 1.0),
               grads.clipped_diff_sum(problem, w, w_old, Rows(fed, idx), None, weights, 1.0, 0.5))
    assert calls == [2, 2, 1, 2, 2, 1]  # each chunk gathered once, for the sum and for the differences
    for a, b in zip(whole, chunked):
        assert torch.isfinite(b).all() and torch.equal(a, b)
    assert not torch.equal(chunked[0][2], whole[0][2] * 0)  # the NaN record's silo still sums its others
    reference = (grads.clipped_grad_sum(problem, w, Rows(fed, idx), None, weights, 1.0, "materialize"),
                 grads.clipped_diff_sum(problem, w, w_old, Rows(fed, idx), None, weights, 1.0, 0.5, "materialize"))
    tol = 1e-5 if dtype == torch.float32 else 1e-12
    for a, b in zip(reference, chunked):
        torch.testing.assert_close(b, a, rtol=tol, atol=tol)
