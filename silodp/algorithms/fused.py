"""Fused CPU passes of the scalar MLP's ghost kernel (:func:`.grads._scalar_mlp_sum`), compiled by numba.

The scalar MLP ``Linear(d, H) - ReLU - Linear(H, 1)`` under the logistic loss has per-record
gradients whose clipped sum needs, after the forward product (the pre-activations ``[n, k, H]``),
only element-wise work and row reductions: the ReLU, the output ``z = h . w2 + b2``, the loss's
derivative ``g = softplus'(z) - y``, the ghost norm ``g^2 ((||x||^2 + 1) (m . w2^2) + ||h||^2 + 1)``
(Li et al. 2022, arXiv:2110.05679, Sec. 4; :func:`.grads._scalar_mlp_sum` derives it), the clip
factor, ``s = weight c g``, the output layer's and the hidden bias's sums, and the hidden layer's
weighted output gradients ``s m w2`` (``m = [h > 0]``), whose product with ``x`` is the hidden
weight's sum. In torch each of these is a pass over the ``[n k, H]`` activations; here ONE pass per
record does all of them while its row is in L1 (:func:`_sum_pass`), and overwrites the
pre-activations with ``s m w2``, so ``grad W1 = (s m w2)^T x`` is the one remaining product.

The guarantee is :func:`.grads._scalar_mlp_sum`'s, the same formula up to float reassociation
(``fastmath`` limited to reassociation, contraction and signed zeros: never ``nnan`` / ``ninf``, so
a NaN or an infinity still propagates and is seen): a record whose squared norm is not finite (a
NaN or ``+inf`` pre-activation: the ReLU passes them on as torch's does; an overflowing norm) makes
the pass return False, exactly where the torch path returns None, and the caller takes the general
path (which masks the record or norms it in the log domain). The clip factor is the release
primitive's (:func:`.release.clip_factors`): ``min(1, C / max(||g||, 1e-30))``, 1 without a clip.

numba is imported on the first call only (``import silodp`` and the accounting paths never import
it); the kernels compile on their first call per dtype (float32, float64: about a second each) and
are cached in this package's ``__pycache__`` (``cache=True``), or not cached where that directory is
read-only. Without numba :func:`kernels` answers None and the torch path runs.
"""

from __future__ import annotations

import math
import os
import threading

import numpy as np

#: the fast-math flags of the passes (LLVM's): reassociation (vectorized reductions), contraction
#: (fused multiply-adds) and no signed zeros; never ``nnan`` / ``ninf`` (a NaN or an infinity must
#: still be seen) nor ``arcp`` (the clip factor divides exactly, as the torch path)
FASTMATH = frozenset({"reassoc", "contract", "nsz"})


def _sum_pass(h, x, y, w2, b2, wt, clip, consts, out, ob1, ow2, ob2):  # pragma: no cover  (compiled)
    """The fused pass of :func:`scalar_sum` over pre-activations ``h [n, k, H]`` (overwritten with
    ``s m w2``), inputs ``x [n, k, d]``, labels ``y [n, k]``, output weights ``w2 [1 or n, H]`` and
    biases ``b2 [1 or n]``, weights ``wt [n, k]``, clip norms ``clip [n]`` (empty: no clip),
    ``consts = (0, 1, 1e-30)`` in the dtype; the output layer's and the hidden bias's sums land in
    ``out [n, dim]`` at the columns ``ob1``, ``ow2``, ``ob2``. False at the first record whose
    squared norm is not finite."""
    n, k, hidden = h.shape
    d = x.shape[2]
    zero, one, tiny = consts[0], consts[1], consts[2]
    per_silo = w2.shape[0] > 1
    clipped = clip.shape[0] > 0
    acc_w2 = np.empty(hidden, h.dtype)  # the silo's sums, local (stores into ``out`` would alias ``h``'s row)
    acc_b1 = np.empty(hidden, h.dtype)
    for i in range(n):
        w = w2[i] if per_silo else w2[0]
        bias = b2[i] if per_silo else b2[0]
        acc_w2[:] = zero
        acc_b1[:] = zero
        acc_b2 = zero
        for j in range(k):
            row = h[i, j]
            xr = x[i, j]
            xsq = zero
            for e in range(d):
                xsq += xr[e] * xr[e]
            z = zero
            hs = zero
            hid = zero
            for u in range(hidden):
                v = row[u]
                r = zero if v <= zero else v  # torch's relu: a NaN stays NaN
                z += r * w[u]
                hs += r * r
                hid += w[u] * w[u] if v > zero else zero
            z += bias
            ez = math.exp(z)
            g = (one if z > 20 else ez / (ez + one)) - y[i, j]  # softplus_backward(1, z, beta 1, threshold 20)
            sq = g * g * ((xsq + one) * hid + hs + one)
            if not math.isfinite(sq):
                return False
            if clipped:
                c = clip[i] / max(math.sqrt(sq), tiny)
                c = one if c > one else c
            else:
                c = one
            s = c * wt[i, j] * g
            acc_b2 += s
            for u in range(hidden):
                v = row[u]
                r = v if v > zero else zero
                t = s * w[u] if v > zero else zero
                acc_w2[u] += s * r
                acc_b1[u] += t
                row[u] = t
        out[i, ow2:ow2 + hidden] = acc_w2
        out[i, ob1:ob1 + hidden] = acc_b1
        out[i, ob2] = acc_b2
    return True


#: the compiled passes by name; None before the first call, an empty dict without numba
_KERNELS: dict | None = None
_LOCK = threading.Lock()


def _cache_writable() -> bool:
    """Whether numba may cache the compiled kernels in this package's ``__pycache__`` (made if
    missing); False where the installation is read-only (then they compile once per process)."""
    folder = os.path.join(os.path.dirname(os.path.abspath(__file__)), "__pycache__")
    try:
        os.makedirs(folder, exist_ok=True)
    except OSError:
        return False
    return os.access(folder, os.W_OK)


def kernels() -> dict | None:
    """The compiled passes by name (``"sum"``), or None where numba is not installed."""
    global _KERNELS
    if _KERNELS is None:
        with _LOCK:
            if _KERNELS is None:
                try:
                    import numba
                except ImportError:
                    _KERNELS = {}
                else:
                    jit = numba.njit(cache=_cache_writable(), fastmath=set(FASTMATH), boundscheck=False, nogil=True)
                    _KERNELS = {"sum": jit(_sum_pass)}
    return _KERNELS or None


def _kernel(name: str):
    """The compiled pass ``name`` (numba installed: :func:`applies` said so)."""
    compiled = kernels()
    if compiled is None:
        raise RuntimeError("the fused passes need numba, which is not installed (fused.applies is False)")
    return compiled[name]


def applies(x, loss: str, *clips) -> bool:
    """Whether the fused passes can run on ``x``: the logistic loss, numba installed, ``x`` a
    contiguous CPU float32 / float64 tensor and each clip norm in ``clips`` None, a number or one per
    silo (anything else, a GPU tensor or a per-record clip included: the torch path)."""
    import torch

    return (loss == "logistic" and x.device.type == "cpu" and x.dtype in (torch.float32, torch.float64)
            and x.is_contiguous() and all(_per_silo(c, x.shape[0], x.dtype) is not None for c in clips)
            and kernels() is not None)


def _array(t, dtype):
    """A contiguous numpy view (a copy only where ``t`` is of another dtype or not contiguous)."""
    return t.detach().to(dtype).contiguous().numpy()


def _per_silo(v, n: int, dtype):
    """A clip norm (None, a number, or a tensor of one value or one per silo, e.g. ``[n, 1]``) as a
    contiguous ``[n]`` array, an empty one for None; None where it holds another shape (per record:
    the torch path)."""
    import torch

    if v is None:
        return torch.empty(0, dtype=dtype).numpy()
    t = torch.as_tensor(v, dtype=dtype)
    if t.numel() not in (1, n):
        return None
    return t.reshape(-1).expand(n).contiguous().numpy()


def _consts(dtype):
    """``(0, 1, 1e-30)`` in ``dtype``: the passes' constants (keeping float32 arithmetic float32)."""
    import torch

    return np.array([0.0, 1.0, 1e-30], dtype=np.float32 if dtype == torch.float32 else np.float64)


def scalar_sum(h, x, y, w2, b2, weights, clip, out, columns: tuple[int, int, int]) -> bool:
    """The fused pass of :func:`.grads._scalar_mlp_sum` (see the module docstring): ``h [n, k, H]``
    the pre-activations (a contiguous work tensor, overwritten with ``s m w2``), ``w2 [1 or n, H]``,
    ``b2 [1 or n, 1]``, ``clip`` None, a number or a tensor of one value or one per silo; the output
    layer's weight and bias sums and the hidden bias's land in ``out [n, dim]`` (contiguous, ``x``'s
    dtype) at ``columns = (b1, w2, b2)`` (their first column); the hidden weight's sum is left to
    the caller (``h^T x`` per silo). False where a record's squared norm is not finite (the caller
    takes the general path). :func:`applies` tells where it runs."""
    dtype = x.dtype
    clips = _per_silo(clip, x.shape[0], dtype)
    return bool(_kernel("sum")(h.numpy(), x.numpy(), _array(y, dtype), _array(w2, dtype), _array(b2.reshape(-1), dtype),
                                 _array(weights, dtype), clips, _consts(dtype), out.numpy(), *columns))
