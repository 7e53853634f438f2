"""The simulator's fast path: the gather by one index_select equals advanced indexing (padded
silos, images, balls-in-bins padding); the simulator runs unchanged on CUDA where torch sees one."""

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
