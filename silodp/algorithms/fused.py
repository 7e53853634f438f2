"""Fused CPU passes of the scalar MLP's ghost kernel (:func:`.grads._scalar_mlp_sum`), compiled by numba.

The scalar MLP ``Linear(d, H) - ReLU - Linear(H, 1)`` under the logistic loss has per-record
gradients whose clipped sum needs, after the forward product (the pre-activations ``[n, k, H]``),
only element-wise work and row reductions: the ReLU, the output ``z = h . w2 + b2``, the loss's
derivative ``g = softplus'(z) - y``, the ghost norm ``g^2 ((||x||^2 + 1) (m . w2^2) + ||h||^2 + 1)``
(Li et al. 2022, arXiv:2110.05679, Sec. 4; :func:`.grads._scalar_mlp_sum` derives it), the clip
factor, ``s = weight c g``, the output layer's and the hidden bias's sums, and the hidden layer's
weighted output gradients ``s m w2`` (``m = [h > 0]``), whose product with ``x`` is the hidden
weight's sum. In torch each of these is a pass over the ``[n k, H]`` activations; here one pass
over each silo's records does all of them while its rows are in cache (:func:`_sum_pass`), and
overwrites the pre-activations with ``s m w2``, so ``grad W1 = (s m w2)^T x`` is the one remaining
product. SVRG's and SPIDER's differences of clipped gradients (:func:`.grads._scalar_mlp_diff`)
have their own pass over both points' pre-activations (:func:`_diff_pass`).

The guarantee is the torch code's (:func:`.grads._scalar_mlp_sum`, :func:`.grads._scalar_mlp_diff`),
the same formula up to float reassociation (``fastmath`` limited to reassociation and signed zeros:
never ``nnan`` / ``ninf``, so a NaN or an infinity still propagates and is seen): a record whose
squared norm is not finite (a NaN or ``+inf`` pre-activation: the ReLU passes them on as torch's
does; an overflowing norm; an output weight whose square overflows, which makes the torch path's
``m @ w2^2`` NaN on every record; at either point, or the difference's) makes the pass return False,
exactly where the torch path returns None, and the caller takes the general path (which masks the
record or norms it in the log domain). The clip factor is the release primitive's
(:func:`.release.clip_factors`): ``min(1, C / max(||g||, 1e-30))``, 1 without a clip.

numba is imported on the first call only (``import silodp`` and the accounting paths never import
it); each pass compiles on its first call per dtype (float32, float64: about a second each, the
first of a process a few seconds with numba's import) and is cached in this package's
``__pycache__`` (``cache=True``; a later process imports numba and loads the cache in a few tenths
of a second), or not cached where that directory is read-only. Without numba :func:`kernels`
answers None and the torch path runs.
"""

from __future__ import annotations

import math
import os
import threading
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import torch

#: the fast-math flags of the passes (LLVM's): reassociation (vectorized reductions) and no signed
#: zeros; never ``nnan`` / ``ninf`` (a NaN or an infinity must still be seen), ``arcp`` (the clip
#: factor divides) nor ``contract`` (a fused ``a b - c d`` rounds its two sides differently: two
#: equal points' difference would not be exactly zero)
FASTMATH = frozenset({"reassoc", "nsz"})


def _squares(w, wsq):  # pragma: no cover  (compiled)
    """``wsq = w^2`` for one silo's output weights ``w [H]``; whether every square is finite. Where one
    is not (``|w| > sqrt(max)``, finite or not), the torch path's ``m @ w2^2`` is not finite on any
    record (an active unit's ``inf``, a masked unit's ``0 * inf``): every record's squared norm is not
    finite and the pass must return False as the torch path returns None, though the passes' select
    skips a unit masked on every record."""
    for u in range(w.shape[0]):
        wsq[u] = w[u] * w[u]
    for u in range(w.shape[0]):
        if not math.isfinite(wsq[u]):
            return False
    return True


def _row_sq(xr, zero):  # pragma: no cover  (compiled)
    """``||xr||^2``."""
    s = zero
    for e in range(xr.shape[0]):
        s += xr[e] * xr[e]
    return s


def _given_sq(xsq, x2, i, j, k, row_bytes):  # pragma: no cover  (compiled)
    """``||x||^2 + 1`` of record ``j`` of silo ``i`` as the gather computed it, ``xsq[i, j]``, with the
    record's row of ``x2 [n k, d]`` prefetched (a hint, no load): the caller's product ``x^T (s m w2)``
    reads ``x`` next, which the pass reading it for its norm kept in cache (without it, that product
    lost what the pass saved: ``bench_simulator.py --breakdown``)."""
    for off in range(0, row_bytes, GATHER_LINE):
        _prefetch(x2, i * k + j, off)
    return xsq[i, j]


def _logistic_grad(z, ez, y, one):  # pragma: no cover  (compiled)
    """The logistic loss's derivative at the output ``z`` (``ez = exp(z)``): ``softplus'(z) - y`` as
    torch's ``softplus_backward(1, z, beta 1, threshold 20)``. The exponential is the caller's, in a
    loop of its own: a loop with a call in it is not vectorized."""
    return (one if z > 20 else ez / (ez + one)) - y


def _clip_factor(sq, clip, tiny, one):  # pragma: no cover  (compiled)
    """:func:`.release.clip_factors` of one finite squared norm: ``min(1, C / max(sqrt(sq), 1e-30))``."""
    c = clip / max(math.sqrt(sq), tiny)
    return one if c > one else c


def _store(row, acc_w2, acc_b1, acc_b2, ob1, ow2, ob2):  # pragma: no cover  (compiled)
    """One silo's sums into its row of the result: the output weight's at ``ow2``, the hidden
    bias's at ``ob1``, the output bias's at ``ob2``."""
    row[ow2:ow2 + acc_w2.shape[0]] = acc_w2
    row[ob1:ob1 + acc_b1.shape[0]] = acc_b1
    row[ob2] = acc_b2


def _sum_pass(h, w2, b2, x, xsq, y, wt, clip, consts, out, ob1, ow2, ob2):  # pragma: no cover  (compiled)
    """The fused pass of :func:`clipped_sum` at one point: pre-activations ``h [n, k, H]``
    (overwritten with ``s m w2``), output weights ``w2 [1 or n, H]`` and biases ``b2 [1 or n]``,
    inputs ``x [n, k, d]`` and their ``||x||^2 + 1`` as the gather computed them, ``xsq [n, k]``
    (empty ``[0, 0]``: from ``x`` here, the same bits), labels ``y [n, k]``, weights ``wt [n, k]``, clip norms ``clip [n]``
    (empty: no clip), ``consts = (0, 1, 1e-30)`` in the dtype; the output layer's and the hidden
    bias's sums land in ``out [n, dim]`` at the columns ``ob1``, ``ow2``, ``ob2``. False at the first
    record whose squared norm is not finite (every record where a ``w2^2`` is not finite:
    :func:`_squares`). Per silo in four loops over its records: the row reductions; the
    exponentials (scalar calls); the per-record scalars, vectorized (no call and no exit inside: a
    non-finite record is counted and the pass returns False after the loop, before anything of that
    silo is written); the scaled rows and sums, two records a round, the output bias's sum in record
    order there."""
    n, k, hidden = h.shape
    zero, one, tiny = consts[0], consts[1], consts[2]
    per_silo = w2.shape[0] > 1
    clipped = clip.shape[0] > 0
    given = xsq.shape[0] > 0
    x2 = x.reshape(n * k, x.shape[2])  # the rows, for :func:`_given_sq`'s prefetch
    row_bytes = x.shape[2] * x.itemsize
    acc_w2, acc_b1 = np.empty((2, hidden), h.dtype)  # the silo's sums, local (stores into ``out`` alias ``h``)
    zs, qs, es = np.empty((3, k), h.dtype)
    wsq = np.empty(hidden, h.dtype)  # the silo's w2^2, once for its records
    for i in range(n):
        w = w2[i] if per_silo else w2[0]
        bias = b2[i] if per_silo else b2[0]
        if not _squares(w, wsq):
            return False
        for j in range(k):
            # the row's (relu(h) . w2, ||relu(h)||^2, m . w2^2), m = [h > 0], written out here (a helper
            # called per record took 0.31 ms at N 25 against 0.22): the ReLU as torch's (a NaN stays NaN
            # and reaches the squared norm); m . w2^2 a select (a masked unit adds 0, not 0 * w2^2), the
            # square loaded on every unit
            row = h[i, j]
            z = hs = hid = zero
            for u in range(hidden):
                v = row[u]
                q = wsq[u]
                r = zero if v <= zero else v
                z += r * w[u]
                hs += r * r
                hid += q if v > zero else zero
            zs[j] = z + bias
            xq = _given_sq(xsq, x2, i, j, k, row_bytes) if given else _row_sq(x[i, j], zero) + one
            qs[j] = xq * hid + hs + one
        for j in range(k):
            es[j] = math.exp(zs[j])
        bad = 0
        for j in range(k):
            g = _logistic_grad(zs[j], es[j], y[i, j], one)
            sq = g * g * qs[j]  # g^2 ((||x||^2 + 1) (m . w2^2) + ||h||^2 + 1)
            bad += 0 if math.isfinite(sq) else 1
            c = _clip_factor(sq, clip[i], tiny, one) if clipped else one
            zs[j] = c * wt[i, j] * g  # s
        if bad:
            return False
        acc_w2[:] = zero
        acc_b1[:] = zero
        acc_b2 = zero
        j = 0
        while j + 1 < k:  # two records a round: the sums loaded and stored once for both
            row = h[i, j]
            nxt = h[i, j + 1]
            s = zs[j]
            s1 = zs[j + 1]
            acc_b2 = (acc_b2 + s) + s1  # record order (a loop of its own would be vectorized: another sum)
            for u in range(hidden):
                v = row[u]
                v1 = nxt[u]
                r = v if v > zero else zero
                t = s * w[u] if v > zero else zero
                r1 = v1 if v1 > zero else zero
                t1 = s1 * w[u] if v1 > zero else zero
                acc_w2[u] = (acc_w2[u] + s * r) + s1 * r1
                acc_b1[u] = (acc_b1[u] + t) + t1
                row[u] = t
                nxt[u] = t1
            j += 2
        if j < k:
            row = h[i, j]
            s = zs[j]
            acc_b2 += s
            for u in range(hidden):
                v = row[u]
                r = v if v > zero else zero
                t = s * w[u] if v > zero else zero
                acc_w2[u] += s * r
                acc_b1[u] += t
                row[u] = t
        _store(out[i], acc_w2, acc_b1, acc_b2, ob1, ow2, ob2)
    return True


def _diff_pass(h1, w2_1, b2_1, h0, w2_0, b2_0, x, xsq, y, wt, clip, dc, consts, out, ob1, ow2, ob2):  # pragma: no cover
    """The fused pass of :func:`clipped_sum` for differences (:func:`.grads._scalar_mlp_diff`'s
    formula): both points' pre-activations ``h1``, ``h0`` (``h1`` overwritten with ``e delta``), their
    output layers, difference clips ``dc [n]`` (empty: none), the rest (``xsq`` included) as :func:`_sum_pass`. Per
    silo: the rows' reductions at both points; ``u = c1 g1``, ``v = c0 g0``; the difference's
    squared norm ``||delta||^2 (||x||^2 + 1) + ||eps||^2 + (u - v)^2`` and ``e = weight * its clip
    factor``; the scaled rows and sums. False at the first record not finite at either point or
    whose difference's squared norm is not finite (every record where a ``w2^2`` of either point is
    not finite: :func:`_squares`)."""
    n, k, hidden = h1.shape
    zero, one, tiny = consts[0], consts[1], consts[2]
    per1 = w2_1.shape[0] > 1
    per0 = w2_0.shape[0] > 1
    clipped = clip.shape[0] > 0
    dclipped = dc.shape[0] > 0
    given = xsq.shape[0] > 0
    acc_w2, acc_b1 = np.empty((2, hidden), h1.dtype)
    us, vs, q1, q0, xs = np.empty((5, k), h1.dtype)
    asq = np.empty(hidden, h1.dtype)  # each point's w2^2, per silo
    bsq = np.empty(hidden, h1.dtype)
    for i in range(n):
        a = w2_1[i] if per1 else w2_1[0]
        b = w2_0[i] if per0 else w2_0[0]
        bias1 = b2_1[i] if per1 else b2_1[0]
        bias0 = b2_0[i] if per0 else b2_0[0]
        if not (_squares(a, asq) and _squares(b, bsq)):
            return False
        for j in range(k):
            row1 = h1[i, j]  # both points' row reductions, written out as in :func:`_sum_pass`
            row0 = h0[i, j]
            z1 = hs1 = hid1 = z0 = hs0 = hid0 = zero
            for t in range(hidden):
                p1 = row1[t]
                p0 = row0[t]
                q1t = asq[t]
                q0t = bsq[t]
                r1 = zero if p1 <= zero else p1
                r0 = zero if p0 <= zero else p0
                z1 += r1 * a[t]
                hs1 += r1 * r1
                hid1 += q1t if p1 > zero else zero
                z0 += r0 * b[t]
                hs0 += r0 * r0
                hid0 += q0t if p0 > zero else zero
            xq = xsq[i, j] if given else _row_sq(x[i, j], zero) + one
            us[j] = z1 + bias1
            vs[j] = z0 + bias0
            q1[j] = xq * hid1 + hs1 + one
            q0[j] = xq * hid0 + hs0 + one
            xs[j] = xq
        for j in range(k):
            g1 = _logistic_grad(us[j], math.exp(us[j]), y[i, j], one)
            g0 = _logistic_grad(vs[j], math.exp(vs[j]), y[i, j], one)
            sq1 = g1 * g1 * q1[j]
            sq0 = g0 * g0 * q0[j]
            if not (math.isfinite(sq1) and math.isfinite(sq0)):
                return False
            us[j] = (_clip_factor(sq1, clip[i], tiny, one) if clipped else one) * g1
            vs[j] = (_clip_factor(sq0, clip[i], tiny, one) if clipped else one) * g0
        for j in range(k):
            row1 = h1[i, j]
            row0 = h0[i, j]
            u = us[j]
            v = vs[j]
            dsq = zero
            esq = zero
            for t in range(hidden):
                p1 = row1[t]
                p0 = row0[t]
                dl = (u * a[t] if p1 > zero else zero) - (v * b[t] if p0 > zero else zero)
                ep = (p1 if p1 > zero else zero) * u - (p0 if p0 > zero else zero) * v
                dsq += dl * dl
                esq += ep * ep
            db = u - v
            sq = dsq * xs[j] + esq + db * db
            if not math.isfinite(sq):
                return False
            q1[j] = _clip_factor(sq, dc[i], tiny, one) * wt[i, j] if dclipped else wt[i, j]  # e
        acc_w2[:] = zero
        acc_b1[:] = zero
        acc_b2 = zero
        for j in range(k):
            row1 = h1[i, j]
            row0 = h0[i, j]
            u = us[j]
            v = vs[j]
            e = q1[j]
            for t in range(hidden):
                p1 = row1[t]
                p0 = row0[t]
                dl = (u * a[t] if p1 > zero else zero) - (v * b[t] if p0 > zero else zero)
                ep = (p1 if p1 > zero else zero) * u - (p0 if p0 > zero else zero) * v
                acc_w2[t] += ep * e
                acc_b1[t] += dl * e
                row1[t] = dl * e
            acc_b2 += (u - v) * e
        _store(out[i], acc_w2, acc_b1, acc_b2, ob1, ow2, ob2)
    return True


#: the gather's software prefetch (:func:`_gather_pass`): the row ``GATHER_AHEAD`` rows ahead is
#: requested, one cache line every ``GATHER_LINE`` bytes of it (``bench_simulator.py --breakdown``)
GATHER_AHEAD = 12
GATHER_LINE = 64


def _prefetch(src, row, offset):  # pragma: no cover  (compiled: LLVM's prefetch of that address)
    """A hint to load the cache line of ``src[row]`` at byte ``offset`` (no load, never faults)."""


def _gather_pass(src, ysrc, idx, n_max, dst, ydst, xsq, consts, ahead, line):  # pragma: no cover  (compiled)
    """``dst[i k + j] = src[i n_max + idx[i, j]]`` and ``ydst`` likewise from ``ysrc``: the rows
    :func:`torch.index_select` copies, with the row ``ahead`` rows later prefetched (the gather's
    time is random rows' latency); with a non-empty ``xsq [N K]`` each copied row's ``||x||^2 + 1``
    too, read back from ``dst`` while it is in cache by the passes' own :func:`_row_sq` under their
    fast-math flags (``consts`` as theirs): the bits :func:`_sum_pass` and :func:`_diff_pass` compute
    from ``x``. False at the first index outside ``[0, n_max)`` (the caller's ``index_select`` then
    raises or reads as it does)."""
    n, k = idx.shape
    width = src.shape[1]
    row_bytes = width * src.itemsize
    norms = xsq.shape[0] > 0
    zero, one = consts[0], consts[1]
    pi, pj = divmod(ahead, k)
    r = 0
    for i in range(n):
        base = i * n_max
        for j in range(k):
            if pi < n:
                for off in range(0, row_bytes, line):
                    _prefetch(src, pi * n_max + idx[pi, pj], off)
                pj += 1
                if pj == k:
                    pj = 0
                    pi += 1
            v = idx[i, j]
            if v < 0 or v >= n_max:
                return False
            s = base + v
            for e in range(width):
                dst[r, e] = src[s, e]
            ydst[r] = ysrc[s]
            if norms:
                xsq[r] = _row_sq(dst[r], zero) + one
            r += 1
    return True


def _transpose_pass(src, dst, col):  # pragma: no cover  (compiled)
    """``dst[i, col + u d + e] = src[i, e, u]`` for ``src [n, d, H]``: each silo's ``[d, H]`` product
    stored transposed, as ``[H, d]``, into its row of ``dst [n, dim]`` (a copy: the same bits)."""
    n, width, hidden = src.shape
    for i in range(n):
        row = dst[i]
        for e in range(width):
            s = src[i, e]
            for u in range(hidden):
                row[col + u * width + e] = s[u]


def _register_prefetch(numba) -> None:
    """:func:`_prefetch` in compiled code: ``llvm.prefetch`` (read, locality 3, data cache)."""
    from llvmlite import ir
    from numba.core import cgutils

    @numba.extending.intrinsic
    def prefetch(typingctx, src, row, offset):
        def codegen(context, builder, signature, args):
            aryty = signature.args[0]
            ary = context.make_array(aryty)(context, builder, args[0])
            zero = context.get_constant(numba.types.intp, 0)
            ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1], zero])
            i8p = ir.IntType(8).as_pointer()
            i32 = ir.IntType(32)
            fn = builder.module.declare_intrinsic("llvm.prefetch", [i8p],
                                                  ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]))
            addr = builder.gep(builder.bitcast(ptr, i8p), [args[2]])
            builder.call(fn, [addr, i32(0), i32(3), i32(1)])
            return context.get_dummy_value()
        return numba.types.void(src, numba.types.intp, numba.types.intp), codegen

    @numba.extending.overload(_prefetch)
    def _prefetch_impl(src, row, offset):
        return lambda src, row, offset: prefetch(src, row, offset)


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
    """The compiled passes by name (``"sum"``, ``"diff"``, ``"gather"``, ``"transpose"``), or None where numba
    is not installed."""
    global _KERNELS
    if _KERNELS is None:
        with _LOCK:
            if _KERNELS is None:
                try:
                    import numba
                except ImportError:
                    _KERNELS = {}
                else:
                    for helper in (_squares, _row_sq, _given_sq, _logistic_grad, _clip_factor,
                                   _store):  # inlined into the passes
                        numba.extending.register_jitable(fastmath=set(FASTMATH))(helper)
                    _register_prefetch(numba)
                    cache = _cache_writable()
                    # the passes under numpy's error model: no ZeroDivisionError branch after each division
                    # (which kept their per-record loops scalar); none of theirs can divide by zero
                    # (``exp(z) + 1 >= 1`` or NaN, ``max(sqrt(sq), 1e-30) > 0``; the gather's row count k >= 1),
                    # so nothing else changes. The gather under the same flags: its squared norms are the
                    # passes' bits (a copy is exact under any flags)
                    passes = numba.njit(cache=cache, fastmath=set(FASTMATH), boundscheck=False, nogil=True,
                                        error_model="numpy")
                    _KERNELS = {"sum": passes(_sum_pass), "diff": passes(_diff_pass), "gather": passes(_gather_pass),
                                "transpose": numba.njit(cache=cache, boundscheck=False, nogil=True)(_transpose_pass)}  # a copy
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
    if t.dtype == dtype and not t.requires_grad and t.is_contiguous():  # a round's arrays: the view, four calls fewer
        return t.numpy()
    return t.detach().to(dtype).contiguous().numpy()


def _per_silo(v, n: int, dtype):
    """A clip norm (None, a number, or a tensor of one value or one per silo, e.g. ``[n, 1]``) as a
    contiguous ``[n]`` array, an empty one for None; None where it holds another shape (per record:
    the torch path)."""
    import torch

    kind = np.float32 if dtype == torch.float32 else np.float64
    if v is None:
        return np.empty(0, dtype=kind)
    if isinstance(v, (int, float)):
        return np.full(n, v, dtype=kind)
    t = torch.as_tensor(v, dtype=dtype).detach()
    if t.numel() not in (1, n):
        return None
    return t.reshape(-1).expand(n).contiguous().numpy()


#: :func:`_consts`'s arrays by dtype (read only by the passes)
_CONSTS: dict = {}


def _consts(dtype):
    """``(0, 1, 1e-30)`` in ``dtype``: the passes' constants (keeping float32 arithmetic float32)."""
    got = _CONSTS.get(dtype)
    if got is None:
        import torch

        got = _CONSTS[dtype] = np.array([0.0, 1.0, 1e-30], dtype=np.float32 if dtype == torch.float32 else np.float64)
    return got


def clipped_sum(points, x, y, weights, clip, diff_clip, out, columns: tuple[int, int, int], xsq=None) -> bool:
    """The fused pass of :func:`.grads._scalar_mlp_sum` (one point) or :func:`.grads._scalar_mlp_diff`
    (two, the difference ``w - w_old`` clipped to ``diff_clip``): ``points`` the ``(h, w2, b2)`` of each,
    ``h [n, k, H]`` its pre-activations (a contiguous work tensor; the first point's is overwritten
    with its weighted hidden output gradients, ``s m w2`` or ``e delta``), ``w2 [1 or n, H]``,
    ``b2 [1 or n, 1]``; ``clip`` and ``diff_clip`` None, a number or a tensor of one value or one per
    silo; the output layer's weight and bias sums and the hidden bias's land in ``out [n, dim]``
    (contiguous, ``x``'s dtype) at ``columns = (b1, w2, b2)`` (their first column); the hidden
    weight's sum is left to the caller (``x^T h`` per silo). ``xsq [n, k]``: each record's
    ``||x||^2 + 1`` from :func:`gather` (the bits the pass computes from ``x``, which it then does not
    read); None, or another shape than ``x``'s records: from ``x``. False where a record is not finite
    (the caller takes the general path). :func:`applies` tells where it runs."""
    dtype, n = x.dtype, x.shape[0]
    given = xsq is not None and tuple(xsq.shape) == tuple(x.shape[:2])
    norms = _array(xsq, dtype) if given else np.empty((0, 0), dtype=_consts(dtype).dtype)
    arrays = [a for h, w2, b2 in points for a in (h.numpy(), _array(w2, dtype), _array(b2.reshape(-1), dtype))]
    data = (_array(x, dtype), norms, _array(y, dtype), _array(weights, dtype), _per_silo(clip, n, dtype))
    clips = (_per_silo(diff_clip, n, dtype),) if len(points) == 2 else ()
    return bool(_kernel("sum" if len(points) == 1 else "diff")(*arrays, *data, *clips, _consts(dtype), out.numpy(),
                                                              *columns))


def gather(x: torch.Tensor, y: torch.Tensor, idx: torch.Tensor, out: torch.Tensor,
           norms: bool = False) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The rows ``idx [N, K]`` of every silo of ``x [N, n, ...]`` into ``out [N K, ...]`` and of
    ``y [N, n]`` into a new ``[N K]`` tensor (:func:`_gather_pass`: bit for bit the rows of
    ``index_select`` on the flattened records, each row's bytes copied); returns ``(y, xsq)``, ``xsq``
    with ``norms`` each gathered row's ``||x||^2 + 1`` as a new ``[N K]`` tensor (the bits the sum and
    difference passes compute from the row: :func:`clipped_sum` takes it instead of reading ``x``
    again), else None. None where it does not run (numba missing, a tensor off the CPU,
    non-contiguous or needing a gradient, a dtype other than float32 / float64, ``y`` of another
    dtype, ``out`` not ``N K`` rows of ``x``'s, an index not int64 or outside ``[0, n)``): the caller's
    ``index_select`` then."""
    import torch

    n_silos, n_max = x.shape[:2]
    rows = idx.numel()
    if not (all(t.device.type == "cpu" and t.is_contiguous() and not t.requires_grad for t in (x, y, out))
            and x.dtype in (torch.float32, torch.float64) and y.dtype == out.dtype == x.dtype
            and y.shape == x.shape[:2] and out.numel() == rows * math.prod(x.shape[2:])
            and idx.dtype == torch.int64 and idx.device.type == "cpu" and idx.dim() == 2
            and idx.shape[0] == n_silos and rows > 0 and kernels() is not None):
        return None
    y_out = torch.empty(rows, dtype=y.dtype)
    xsq = torch.empty(rows if norms else 0, dtype=x.dtype)
    done = _kernel("gather")(x.reshape(n_silos * n_max, -1).numpy(), y.reshape(-1).numpy(), idx.contiguous().numpy(),
                             n_max, out.view(rows, -1).numpy(), y_out.numpy(), xsq.numpy(), _consts(x.dtype),
                             GATHER_AHEAD, GATHER_LINE)
    return (y_out, xsq if norms else None) if done else None


def store_transposed(src: torch.Tensor, out: torch.Tensor, col: int) -> bool:
    """``src [n, d, H]`` (each silo's hidden-weight sum as the product ``x^T sm`` gives it) copied
    transposed into the columns ``col : col + H d`` of ``out [n, dim]``, as ``[H, d]`` (the weight's own
    layout), by :func:`_transpose_pass`: the bits ``copy_`` of the transposed view writes, 2-3x faster
    at the paper's shapes (torch's strided copy is element by element). False where it does not run
    (numba missing, a tensor off the CPU or non-contiguous, dtypes other than one float32 / float64,
    ``out`` too narrow): the caller copies then."""
    import torch

    n, width, hidden = src.shape
    if not (src.device.type == out.device.type == "cpu" and src.is_contiguous() and out.is_contiguous()
            and src.dtype == out.dtype and src.dtype in (torch.float32, torch.float64) and out.dim() == 2
            and out.shape[0] == n and 0 <= col and col + width * hidden <= out.shape[1]
            and not (src.requires_grad or out.requires_grad) and kernels() is not None):
        return False
    _kernel("transpose")(src.numpy(), out.numpy(), col)
    return True
