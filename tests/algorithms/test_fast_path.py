"""The simulator's fast path: the gather by one index_select equals advanced indexing (padded
silos, images, balls-in-bins padding) and reuses a buffer only when nothing holds it; the
federation keeps its bookkeeping on the CPU (the simulator on CUDA: test_cuda.py)."""

import pytest
import torch

from silodp.algorithms import Federation


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

