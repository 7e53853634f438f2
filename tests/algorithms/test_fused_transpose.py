"""The hidden weight's transposed store (:func:`silodp.algorithms.fused.store_transposed`): the bits
``copy_`` of the transposed view writes (both dtypes, NaN payloads, infinities and signed zeros), the
other columns untouched; ``False`` where it does not run; the kernel's sums unchanged through it."""

import pytest
import torch

from silodp.algorithms import Problem, fused, grads, mlp

pytestmark = pytest.mark.skipif(fused.kernels() is None, reason="numba is not installed")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int64)


def _src(n: int, d: int, hidden: int, dtype) -> torch.Tensor:
    src = torch.randn(n, d, hidden, generator=torch.Generator().manual_seed(n * d + hidden), dtype=torch.float64).to(dtype)
    special = torch.tensor([float("nan"), -0.0, float("inf"), -float("inf")], dtype=dtype)
    src.view(-1)[:4] = special[:src.numel()]
    return src


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("n, d, hidden, col", [(1, 1, 1, 0), (3, 50, 64, 0), (2, 7, 5, 3), (25, 50, 64, 0)])
def test_the_store_writes_the_bits_of_the_transposed_copy(dtype, n, d, hidden, col):
    src = _src(n, d, hidden, dtype)
    width = col + hidden * d + 4
    out = torch.full((n, width), 7.0, dtype=dtype)
    ref = out.clone()
    ref[:, col:col + hidden * d].view(n, hidden, d).copy_(src.transpose(1, 2))
    assert fused.store_transposed(src, out, col)
    assert torch.equal(_bits(out), _bits(ref))  # the block transposed, every other column as it was


def test_the_store_declines_where_it_does_not_run():
    src = _src(2, 3, 4, torch.float32)
    assert not fused.store_transposed(src, torch.empty(2, 11), 0)  # too narrow
    assert not fused.store_transposed(src, torch.empty(2, 12, dtype=torch.float64), 0)  # another dtype
    assert not fused.store_transposed(src.transpose(1, 2).contiguous().transpose(1, 2), torch.empty(2, 12), 0)
    assert not fused.store_transposed(src, torch.empty(12, 2).t(), 0)  # a non-contiguous destination
    assert not fused.store_transposed(src.to(torch.float16), torch.empty(2, 12, dtype=torch.float16), 0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_kernel_sums_are_the_same_with_the_store_and_with_copy(dtype, monkeypatch):
    gen = torch.Generator().manual_seed(3)
    problem = Problem(mlp(50, [64], 1), "logistic", clip=1.0)
    x = torch.randn(5, 40, 50, generator=gen, dtype=dtype)
    y = (torch.rand(5, 40, generator=gen) < 0.5).to(dtype)
    w = (torch.randn(problem.model.dim, generator=gen, dtype=torch.float64) * 0.1).to(dtype)
    weights = torch.full((5, 40), 1 / 40, dtype=dtype)
    fast = grads.clipped_grad_sum(problem, w, x, y, weights, 1.0)
    monkeypatch.setattr(fused, "store_transposed", lambda *a: False)  # the copy_ fallback
    assert torch.equal(_bits(fast), _bits(grads.clipped_grad_sum(problem, w, x, y, weights, 1.0)))
