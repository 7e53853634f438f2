"""``torch.randn`` and ``torch.rand`` on a CPU ``torch.Generator``, bit for bit, computed by numba.

The simulator draws every round all silos' Gaussian noise (``randn [N, d]``) and its minibatch
keys (``rand [N, n]``); torch spends most of that time in its mt19937 engine, called once per
value through a library call (``benchmarks/bench_draws.py`` times both). :func:`randn` and :func:`rand` return exactly what
``torch.randn(shape, generator=g, dtype=dtype)`` / ``torch.rand(...)`` return (every bit), and leave
``g`` in exactly the state torch leaves it (``g.get_state()`` equal byte for byte): they read the
engine from ``g.get_state()``, run it in compiled passes and write it back with ``g.set_state``.
What they replicate (PyTorch 2.13, ``aten/src/ATen``):

* the engine (``core/MT19937RNGEngine.h``): mt19937, its ``left`` / ``next`` counters and its
  state words as ``CPUGeneratorImpl::get_state`` lays them out (``CPUGeneratorImpl.cpp``); a float32
  uniform is one 32-bit output, a float64 one two (``random64``: the first output high);
* the uniform transform (``core/TransformationHelper.h``, ``uniform_real``): the low 24 (float32)
  or 53 (float64) bits times ``2**-24`` / ``2**-53``, a value of ``[0, 1)``;
* the normals (``native/cpu/DistributionTemplates.h``, ``normal_fill``): all the tensor's uniforms
  first, then Box-Muller over the pairs ``(j, j + 8)`` of each block of 16 (``u1 = 1 - u_j``,
  ``radius = sqrt(-2 log u1)``, ``theta = 2 pi u_{j+8}``, ``radius cos theta`` at ``j`` and
  ``radius sin theta`` at ``j + 8``), and where the size is not a multiple of 16 the last 16 values
  drawn again (16 more uniforms) and transformed again. float32 runs torch's AVX2 kernel on this
  build (``NormalFill16<float>``: ``log256_ps`` / ``sincos256_ps`` of ``native/cpu/avx_mathfun.h``,
  Cephes polynomials; also on AVX512 CPUs, where torch does not dispatch its normal kernel to
  AVX512): :func:`_box_muller32` repeats each of its operations in order, each multiply-add that
  the compiler fused into one rounding (read off the shipped binary's instructions) as LLVM's
  ``fma``, every other one rounded twice (the last, ``radius cos theta * std + mean`` with std 1 and
  mean 0, turns a zero radius's ``-0`` into ``+0``). float64 is the scalar ``normal_fill`` with the C
  library's ``log``, ``cos`` and ``sin`` (the same functions numba calls in this process).

**Fail closed.** Which CPU kernel torch dispatches to, and how its compiler rounded it, is not
visible from Python, so the first draw of each kind (``randn`` / ``rand``) and dtype (float32 /
float64) in a process first runs :func:`_self_check`: the compiled pass against torch itself on
private generators (several seeds, states part way through a block of 624 words, sizes 16, 17, 31,
32, 33, 1000, 83225, 2-D and 3-D shapes; and generators crafted so that the engine's next outputs
give the float32 kernel's edge uniforms, :func:`_edge_outputs`: every value's bits and the
generator's state bytes). Any difference (another CPU capability, another torch, another C library) switches that kind to
torch's own call for the rest of the process, as do numba missing, a generator off the CPU, a dtype
other than float32 / float64, a ``randn`` of fewer than 16 values (torch draws those one by one with
its cached Box-Muller pair) and an engine state torch would read past its words. The result is then
torch's, never a different one; :func:`status` says which kinds run compiled and why not. The
passes compile on their first use (numba imported then, cached like :mod:`.fused`'s in this
package's ``__pycache__`` where it is writable). The generator is read and written back around the
pass, so a draw is not atomic against another thread drawing from the same generator (torch's
lock is not held): a run owns its generators.

:func:`argsort_rows` is the without-replacement sampler's other step, its keys' order:
``keys.argsort(dim=1)`` every index (rows of distinct keys by a compiled radix sort, whose order is
then the only one; rows with equal keys by torch).
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    import torch

#: ``CPUGeneratorImplState``'s layout (``get_state()``, 5056 bytes): ``left`` (int32 at 8), ``next``
#: (uint64 at 16), the 624 state words (one uint64 each, from 24)
_STATE_BYTES = 5056
_LEFT, _NEXT, _WORDS = 8, 16, 24
_N = 624

#: the self-check's seeds, sizes and shapes (sizes either side of a block of 16, one of 1000, one
#: round's noise at N = 25, 2-D and 3-D shapes; for ``rand`` also the sizes ``randn`` leaves to torch)
_CHECK_SEEDS = (0, 1, 12345, 2**40 + 7)
_CHECK_SHAPES: tuple[tuple[int, ...], ...] = ((16,), (17,), (31,), (32,), (33,), (1000,), (83225,), (25, 37), (3, 5, 7))
_CHECK_RAND_ONLY: tuple[tuple[int, ...], ...] = ((1,), (15,), ())


def _f32(bits: int) -> np.float32:
    """The float32 whose bits are ``bits`` (the constants of ``avx_mathfun.h`` as this build holds them)."""
    return np.array([bits], dtype=np.uint32).view(np.float32)[0]


# log256_ps's constants (Cephes logf)
_ONE, _HALF, _MINUS_ONE, _MINUS_TWO = _f32(0x3F800000), _f32(0x3F000000), _f32(0xBF800000), _f32(0xC0000000)
_MIN_NORM = _f32(0x00800000)
_SQRTHF = _f32(0x3F3504F3)
_LOG_P = tuple(_f32(b) for b in (0x3D9021BB, 0xBDEBD1B8, 0x3DEF251A, 0xBDFE5D4F, 0x3E11E9BF, 0xBE2AAE50,
                                 0x3E4CCEAC, 0xBE7FFFFC, 0x3EAAAAAA))
_LOG_Q1, _LOG_Q2 = _f32(0xB95E8083), _f32(0x3F318000)
# sincos256_ps's constants (Cephes sinf / cosf) and normal_fill's 2 pi in float32
_TWO_PI32 = _f32(0x40C90FDB)
_FOPI = _f32(0x3FA2F983)
_DP1, _DP2, _DP3 = _f32(0xBF490000), _f32(0xB97DA000), _f32(0xB3222169)
_COS_P = (_f32(0x37CCF5CE), _f32(0xBAB6061A), _f32(0x3D2AAAA5))
_SIN_P = (_f32(0xB94CA1F9), _f32(0x3C08839E), _f32(0xBE2AAAA3))
_ZERO32 = np.float32(0.0)
_TWO_M24 = np.float32(2.0**-24)
_TWO_M53 = 2.0**-53
_TWO_PI64 = 2.0 * math.pi  # ``2.0f * c10::pi<double>``: exact


def _fma(a, b, c):  # pragma: no cover  (compiled: LLVM's fma, one rounding)
    """``a b + c`` rounded once."""


def _bits(x):  # pragma: no cover  (compiled: the float32's bits as an int64 in [0, 2**32))
    """The bits of the float32 ``x``."""


def _from_bits(i):  # pragma: no cover  (compiled: the float32 of the low 32 bits of ``i``)
    """The float32 whose bits are the low 32 bits of ``i``."""


def _register(numba) -> None:
    """:func:`_fma`, :func:`_bits`, :func:`_from_bits` in compiled code (``llvm.fma``, bitcasts), and
    :func:`_uniform`, :func:`_box_muller` chosen by the output's dtype."""
    from llvmlite import ir

    @numba.extending.intrinsic
    def fma(typingctx, a, b, c):
        if not (a == b == c and a in (numba.types.float32, numba.types.float64)):
            return None

        def codegen(context, builder, signature, args):
            kind = context.get_value_type(signature.return_type)
            fn = builder.module.declare_intrinsic("llvm.fma", [kind], ir.FunctionType(kind, [kind] * 3))
            return builder.call(fn, list(args))
        return a(a, b, c), codegen

    @numba.extending.intrinsic
    def bits(typingctx, x):
        if x != numba.types.float32:
            return None

        def codegen(context, builder, signature, args):
            return builder.zext(builder.bitcast(args[0], ir.IntType(32)), ir.IntType(64))
        return numba.types.int64(x), codegen

    @numba.extending.intrinsic
    def from_bits(typingctx, i):
        if i != numba.types.int64:
            return None

        def codegen(context, builder, signature, args):
            return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())
        return numba.types.float32(i), codegen

    @numba.extending.overload(_fma)
    def _fma_impl(a, b, c):
        return lambda a, b, c: fma(a, b, c)

    @numba.extending.overload(_bits)
    def _bits_impl(x):
        return lambda x: bits(x)

    @numba.extending.overload(_from_bits)
    def _from_bits_impl(i):
        return lambda i: from_bits(i)

    @numba.extending.overload(_uniform)
    def _uniform_impl(s, ctr, raw, out, start, m):
        if out.dtype == numba.types.float32:
            return lambda s, ctr, raw, out, start, m: _uniform32(s, ctr, out, start, m)
        return lambda s, ctr, raw, out, start, m: _uniform64(s, ctr, raw, out, start, m)

    @numba.extending.overload(_box_muller)
    def _box_muller_impl(out, start, blocks):
        if out.dtype == numba.types.float32:
            return lambda out, start, blocks: _box_muller32(out, start, blocks)
        return lambda out, start, blocks: _box_muller64(out, start, blocks)


_U1, _UMASK, _LMASK, _MATRIX_A = np.uint32(1), np.uint32(0x80000000), np.uint32(0x7FFFFFFF), np.uint32(0x9908B0DF)
_T11, _T7, _T15, _T18 = np.uint32(11), np.uint32(7), np.uint32(15), np.uint32(18)
_TB, _TC, _M24 = np.uint32(0x9D2C5680), np.uint32(0xEFC60000), np.uint32(0xFFFFFF)


def _mix(u, v):  # pragma: no cover  (compiled)
    """``mt19937_engine::twist(u, v)`` (uint32)."""
    return (((u & _UMASK) | (v & _LMASK)) >> _U1) ^ ((np.uint32(0) - (v & _U1)) & _MATRIX_A)


def _twist(s):  # pragma: no cover  (compiled)
    """mt19937's next 624 state words in place (``mt19937_engine::next_state``; ``s`` uint32)."""
    for k in range(227):
        s[k] = s[k + 397] ^ _mix(s[k], s[k + 1])
    for k in range(227, 623):
        s[k] = s[k - 227] ^ _mix(s[k], s[k + 1])
    s[623] = s[396] ^ _mix(s[623], s[0])


def _temper(y):  # pragma: no cover  (compiled)
    """mt19937's output function of the state word ``y`` (uint32)."""
    y ^= y >> _T11
    y ^= (y << _T7) & _TB
    y ^= (y << _T15) & _TC
    return y ^ (y >> _T18)


def _run(s, ctr, want):  # pragma: no cover  (compiled)
    """``(next, c)``: the next ``c = min(want, left - 1)`` outputs are the state words ``next:next + c``
    (twisted first where ``left`` has run out: ``mt19937_engine::operator()``'s ``--left == 0``);
    ``ctr = [left, next]`` advanced past them."""
    if ctr[0] == 1:
        _twist(s)
        ctr[0] = _N + 1
        ctr[1] = 0
    c = min(ctr[0] - 1, want)
    nxt = ctr[1]
    ctr[0] -= c
    ctr[1] = nxt + c
    return nxt, c


def _words(s, ctr, out, start, m):  # pragma: no cover  (compiled)
    """The engine's next ``m`` 32-bit outputs into ``out[start:start + m]`` (uint32)."""
    i = 0
    while i < m:
        nxt, c = _run(s, ctr, m - i)
        src = s[nxt:nxt + c]  # slices: indices numba knows are not negative (no wraparound)
        dst = out[start + i:start + i + c]
        for t in range(c):
            dst[t] = _temper(src[t])
        i += c


def _open(state):  # pragma: no cover  (compiled)
    """``(ok, s, ctr)`` from the state bytes: the 624 words as a uint32 work array, ``ctr = [left,
    next]``, ``ok`` False where torch's engine would read past its words (``left`` not in ``(0, 624]``,
    ``next`` beyond the words still to read)."""
    v32 = state.view(np.int32)
    v64 = state.view(np.int64)
    left, nxt = np.int64(v32[_LEFT // 4]), v64[_NEXT // 8]
    ctr = np.empty(2, dtype=np.int64)
    ctr[0], ctr[1] = left, nxt
    s = np.empty(_N, dtype=np.uint32)
    for k in range(_N):
        s[k] = v64[_WORDS // 8 + k]
    return 0 < left <= _N and 0 <= nxt <= _N and (left == 1 or nxt + left - 1 <= _N), s, ctr


def _close(state, s, ctr):  # pragma: no cover  (compiled)
    """The engine back into the state bytes (``left``, ``next``, the words)."""
    v64 = state.view(np.int64)
    state.view(np.int32)[_LEFT // 4] = ctr[0]
    v64[_NEXT // 8] = ctr[1]
    for k in range(_N):
        v64[_WORDS // 8 + k] = s[k]


def _u32(w):  # pragma: no cover  (compiled)
    """``uniform_real<float>`` of the output ``w``: its low 24 bits times ``2**-24``."""
    return np.float32(np.int32(w & _M24)) * _TWO_M24


def _uniform32(s, ctr, out, start, m):  # pragma: no cover  (compiled)
    """``m`` float32 uniforms into ``out[start:start + m]``."""
    i = 0
    while i < m:
        nxt, c = _run(s, ctr, m - i)
        src = s[nxt:nxt + c]
        dst = out[start + i:start + i + c]
        for t in range(c):
            dst[t] = _u32(_temper(src[t]))
        i += c


def _uniform64(s, ctr, raw, out, start, m):  # pragma: no cover  (compiled)
    """``m`` float64 uniforms into ``out[start:start + m]`` (``random64``: the first output high; the low 53 bits)."""
    _words(s, ctr, raw, 0, 2 * m)
    dst = out[start:start + m]
    for t in range(m):
        dst[t] = np.float64(((raw[2 * t] & 0x1FFFFF) << 32) | raw[2 * t + 1]) * _TWO_M53


def _box_muller32(data, start, blocks):  # pragma: no cover  (compiled)
    """torch's AVX2 ``NormalFill16<float>`` (mean 0, std 1) in place on the ``blocks`` blocks of 16 uniforms
    from ``data[start]``, one lane at a time: ``log256_ps(1 - u[j])``, ``sincos256_ps(2 pi u[j + 8])``,
    operation for operation, the fused multiply-adds where the shipped kernel has them."""
    for b in range(blocks):
        d = data[start + 16 * b:start + 16 * b + 16]
        for j in range(8):
            # log256_ps(u1), u1 = 1 - u in (0, 1]
            u1 = _ONE - d[j]
            invalid = 0xFFFFFFFF if u1 <= _ZERO32 else 0
            x = u1 if u1 > _MIN_NORM else _MIN_NORM
            xb = _bits(x)
            e = np.float32(np.int32((xb >> 23) - 127)) + _ONE
            x = _from_bits((xb & 0x807FFFFF) | 0x3F000000)
            lt = x < _SQRTHF
            tmp = x if lt else _ZERO32
            e = e - (_ONE if lt else _ZERO32)
            x = x + _MINUS_ONE
            x = x + tmp
            z = x * x
            y = _fma(_LOG_P[0], x, _LOG_P[1])
            y = _fma(y, x, _LOG_P[2])
            y = _fma(y, x, _LOG_P[3])
            y = _fma(y, x, _LOG_P[4])
            y = _fma(y, x, _LOG_P[5])
            y = _fma(y, x, _LOG_P[6])
            y = _fma(y, x, _LOG_P[7])
            y = _fma(y, x, _LOG_P[8])
            q1 = e * _LOG_Q1
            y = x * y
            y = _fma(y, z, q1)
            y = _fma(-z, _HALF, y)
            x = x + y
            lg = _from_bits(_bits(_fma(e, _LOG_Q2, x)) | invalid)
            radius = math.sqrt(lg * _MINUS_TWO)
            # sincos256_ps(theta), theta = 2 pi u2
            theta = _TWO_PI32 * d[j + 8]
            tb = _bits(theta)
            ax = _from_bits(tb & 0x7FFFFFFF)
            q = (np.int32(ax * _FOPI) + 1) & ~1  # cvttps2dq: truncation
            yq = np.float32(np.int32(q))
            sign_sin = (tb & 0x80000000) ^ ((q & 4) << 29)
            sign_cos = ((~(q - 2)) & 4) << 29
            poly = 0xFFFFFFFF if q & 2 == 0 else 0
            r = _fma(yq, _DP1, ax)
            r = _fma(_DP2, yq, r)
            r = _fma(yq, _DP3, r)
            z = r * r
            half = z * _HALF
            yc = _fma(_COS_P[0], z, _COS_P[1])
            yc = _fma(yc, z, _COS_P[2])
            yc = z * yc
            yc = _fma(z, yc, -half)
            yc = yc + _ONE
            ys = _fma(_SIN_P[0], z, _SIN_P[1])
            ys = _fma(ys, z, _SIN_P[2])
            ys = z * ys
            ys = _fma(r, ys, r)
            sin2 = _from_bits(_bits(ys) & poly)
            sin1 = _from_bits(_bits(yc) & (poly ^ 0xFFFFFFFF))
            ys = ys - sin2
            yc = yc - sin1
            sin = _from_bits((_bits(sin2 + sin1) ^ sign_sin) & 0xFFFFFFFF)
            cos = _from_bits((_bits(ys + yc) ^ sign_cos) & 0xFFFFFFFF)
            d[j] = _fma(radius * cos, _ONE, _ZERO32)
            d[j + 8] = _fma(radius * sin, _ONE, _ZERO32)


def _box_muller64(data, start, blocks):  # pragma: no cover  (compiled)
    """torch's scalar ``NormalFill16<double>`` on the ``blocks`` blocks of 16 from ``data[start]`` in
    place (mean 0, std 1)."""
    for b in range(blocks):
        d = data[start + 16 * b:start + 16 * b + 16]
        for j in range(8):
            u1 = 1.0 - d[j]
            radius = math.sqrt(-2.0 * math.log(u1))
            theta = _TWO_PI64 * d[j + 8]
            d[j] = _fma(radius * math.cos(theta), 1.0, 0.0)
            d[j + 8] = _fma(radius * math.sin(theta), 1.0, 0.0)


def _uniform(s, ctr, raw, out, start, m):  # pragma: no cover  (compiled: _uniform32 or _uniform64 by out's dtype)
    """``m`` uniforms of ``out``'s dtype into ``out[start:start + m]``."""


def _box_muller(out, start, blocks):  # pragma: no cover  (compiled: _box_muller32 or _box_muller64 by out's dtype)
    """``NormalFill16`` of ``out``'s dtype on ``blocks`` blocks of 16 from ``out[start]``."""


def _raw(out):  # pragma: no cover  (compiled)
    """The 32-bit outputs' buffer of a float64 draw (two a value); float32 uniforms need none."""
    return np.empty(2 * out.size if out.itemsize == 8 else 0, dtype=np.uint32)


def _rand(state, out):  # pragma: no cover  (compiled)
    """``torch.rand``'s values into ``out`` (flat, float32 or float64) from the state bytes, updated;
    False where the state is one torch would read past (nothing drawn)."""
    ok, s, ctr = _open(state)
    if ok:
        _uniform(s, ctr, _raw(out), out, 0, out.size)
        _close(state, s, ctr)
    return ok


def _randn(state, out):  # pragma: no cover  (compiled)
    """``torch.randn``'s values into ``out`` (at least 16; as :func:`_rand`): ``normal_fill``."""
    ok, s, ctr = _open(state)
    if ok:
        m = out.size
        raw = _raw(out)
        _uniform(s, ctr, raw, out, 0, m)
        _box_muller(out, 0, m // 16)
        if m % 16:  # the last 16 drawn again
            _uniform(s, ctr, raw, out, m - 16, 16)
            _box_muller(out, m - 16, 1)
        _close(state, s, ctr)
    return ok


def _order_rows(bits, out, ties):  # pragma: no cover  (compiled)
    """Per row of ``bits`` (float32 keys' bits, ``[rows, n]``): its keys' ascending order into ``out``
    (int64) by an LSD radix sort of the bits, 8 at a time (a non-negative finite float's bits order
    as it does), and ``ties[r]`` True where two keys of row ``r`` are equal. False (nothing
    meaningful written) at a key that is negative (its sign bit set), infinite or NaN."""
    rows, n = bits.shape
    key, idx = np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.int64)
    key2, idx2 = np.empty(n, dtype=np.uint32), np.empty(n, dtype=np.int64)
    count = np.empty(257, dtype=np.int64)
    for r in range(rows):
        row = bits[r]
        for i in range(n):
            if row[i] >= np.uint32(0x7F800000):
                return False
            key[i] = row[i]
            idx[i] = i
        for shift in range(0, 32, 8):
            count[:] = 0
            for i in range(n):
                count[((key[i] >> shift) & 255) + 1] += 1
            if count.max() == n:  # one digit: the pass would keep the order
                continue
            for d in range(256):
                count[d + 1] += count[d]
            for i in range(n):
                d = (key[i] >> shift) & 255
                p = count[d]
                count[d] = p + 1
                key2[p] = key[i]
                idx2[p] = idx[i]
            key, key2 = key2, key
            idx, idx2 = idx2, idx
        tie = False
        for i in range(n - 1):
            tie |= key[i] == key[i + 1]
        ties[r] = tie
        out[r] = idx
    return True


_PASSES: dict | None = None
_LOCK = threading.Lock()
_CHECK_LOCK = threading.Lock()
#: per ``(kind, dtype)``: "numba" or "torch: <why>", set by the first draw of that kind and dtype
_STATUS: dict = {}
_FORCE_TORCH = False
#: the fewest values each kind runs compiled (``randn``: torch draws fewer one by one, with its cached pair)
_SMALLEST = {"randn": 16, "rand": 1}


def _passes() -> dict:
    """The compiled passes by ``(kind, dtype)``, an empty dict without numba."""
    global _PASSES
    if _PASSES is None:
        with _LOCK:
            if _PASSES is None:
                try:
                    import numba
                except ImportError:
                    _PASSES = {}
                else:
                    import torch

                    from silodp.algorithms.fused import _cache_writable

                    _register(numba)
                    for helper in (_mix, _twist, _temper, _run, _words, _open, _close, _raw, _u32, _uniform32,
                                   _uniform64, _box_muller32, _box_muller64):
                        numba.extending.register_jitable(helper)
                    jit = numba.njit(cache=_cache_writable(), boundscheck=False, nogil=True, error_model="numpy")
                    compiled = {"rand": jit(_rand), "randn": jit(_randn)}  # each compiled per dtype
                    _PASSES = {(kind, dtype): compiled[kind] for kind in compiled
                               for dtype in (torch.float32, torch.float64)}
                    _PASSES["order"] = jit(_order_rows)
    return _PASSES


def _torch_draw(kind: str, shape: tuple[int, ...], generator, dtype) -> torch.Tensor:
    import torch

    fn = torch.randn if kind == "randn" else torch.rand
    return fn(shape, generator=generator, dtype=dtype)


def _numba_draw(compiled, shape: tuple[int, ...], generator, dtype) -> torch.Tensor | None:
    """The compiled pass's draw, the generator's state written back; None (nothing drawn) where its
    state is not the layout read here or one torch's engine would read past, or where torch's
    default device is not the CPU (torch's call then draws, or refuses, there)."""
    import torch

    state = generator.get_state()
    out = torch.empty(shape, dtype=dtype)
    if (state.numel() != _STATE_BYTES or out.device.type != "cpu"
            or not compiled(state.numpy(), out.numpy().reshape(-1))):
        return None
    generator.set_state(state)
    return out


def _untemper(y: int) -> int:
    """The state word whose mt19937 output is ``y`` (the tempering inverted)."""
    y ^= y >> 18
    y ^= (y << 15) & 0xEFC60000
    x = y
    for _ in range(5):
        x = y ^ ((x << 7) & 0x9D2C5680)
    y = x
    for _ in range(2):
        x = y ^ (x >> 11)
    return x & 0xFFFFFFFF


def _generator_with(outputs: Sequence[int]) -> torch.Generator:
    """A generator whose next 32-bit outputs are ``outputs`` (at most 623: the state words from 1,
    ``left`` 624 and ``next`` 1, which torch's engine reads before it twists)."""
    import torch

    g = torch.Generator()
    state = g.get_state()
    raw = state.numpy()
    raw[_LEFT:_LEFT + 4].view(np.int32)[0] = _N
    raw[_NEXT:_NEXT + 8].view(np.uint64)[0] = 1
    raw[_WORDS + 8:_WORDS + 8 * (1 + len(outputs))].view(np.uint64)[:] = [_untemper(v) for v in outputs]
    g.set_state(state)
    return g


def _edge_uniforms() -> list[int]:
    """24-bit uniforms (``u = n 2**-24``) at the edges of the float32 kernel's branches: 0 and 1 -
    2**-24 (``u1 = 1``: a zero radius, of sign ``-0``; the smallest ``u1``), ``u1`` at and either side of
    powers of two and of sqrt(1/2) (log256_ps's mantissa test), and ``2 pi u`` either side of each
    multiple of pi / 4 (sincos256_ps's octant)."""
    one = 1 << 24
    n = [0, 1, 2, one - 1, one - 2]
    n += [one - (one >> k) + d for k in range(1, 24) for d in (-1, 0, 1)]
    n += [round(one * (1 - 2**-0.5)) + d for d in range(-3, 4)]
    n += [k * (one // 8) + d for k in range(9) for d in (-2, -1, 0, 1, 2)]
    return sorted({v for v in n if 0 <= v < one})


def _edge_outputs(dtype) -> list[list[int]]:
    """Sequences of 32-bit outputs whose uniforms pair every edge uniform with every seventh other as
    ``(u1, u2)`` of a block of 16 (float32: the edge in the low 24 bits; float64: in the top 24 of the 53,
    two outputs a value), blocks filled up and high bits set by a fixed generator; each sequence short
    enough for :func:`_generator_with`."""
    import torch

    edges, fill = _edge_uniforms(), np.random.default_rng(20261207)
    blocks = []
    for shift in range(0, len(edges), 7):
        pairs = [(edges[i], edges[(i + shift) % len(edges)]) for i in range(len(edges))]
        for start in range(0, len(pairs), 8):
            chunk = pairs[start:start + 8]
            chunk += [(int(a), int(b)) for a, b in fill.integers(0, 1 << 24, (8 - len(chunk), 2))]
            values = [a for a, _ in chunk] + [b for _, b in chunk]
            if dtype == torch.float32:
                blocks.append([v | int(fill.integers(0, 256)) << 24 for v in values])
            else:
                blocks.append([w for v in values for w in (int(fill.integers(0, 2048)) << 21 | v >> 3, (v & 7) << 29)])
    per = 623 // len(blocks[0])
    return [sum(blocks[i:i + per], []) for i in range(0, len(blocks), per)]


def _self_check(kind: str, dtype) -> str:
    """"numba" where the compiled ``kind`` matches torch on every checked seed, state and shape and
    on the edge uniforms (values' bits and the generator's state bytes), else "torch: <the first
    difference>"."""
    import torch

    compiled = _passes()[(kind, dtype)]
    shapes = _CHECK_SHAPES + (_CHECK_RAND_ONLY if kind == "rand" else ())
    cases: list[tuple[str, Any, int, Sequence[tuple[int, ...]]]]
    cases = [(f"seed {seed}, {skip} drawn", seed, skip, shapes) for seed in _CHECK_SEEDS for skip in (0, 1, 623, 1000)]
    cases += [(f"edge uniforms {i}", outputs, 0, [(len(outputs) // (1 if dtype == torch.float32 else 2),)])
              for i, outputs in enumerate(_edge_outputs(dtype))]
    for what, source, skip, sizes in cases:
        if isinstance(source, int):
            ours, theirs = torch.Generator().manual_seed(source), torch.Generator().manual_seed(source)
        else:
            ours, theirs = _generator_with(source), _generator_with(source)
        if skip:  # part way through a block of 624 words (and past the first)
            torch.rand(skip, generator=ours)
            torch.rand(skip, generator=theirs)
        for shape in sizes:
            got = _numba_draw(compiled, shape, ours, dtype)
            want = _torch_draw(kind, shape, theirs, dtype)
            if got is None or got.shape != want.shape or not np.array_equal(_as_bits(got), _as_bits(want)):
                return f"torch: {kind} {dtype} differs from torch's ({what}, shape {shape})"
            if not torch.equal(ours.get_state(), theirs.get_state()):
                return f"torch: the generator's state after {kind} {dtype} differs ({what}, shape {shape})"
    return "numba"


def _as_bits(t: torch.Tensor) -> np.ndarray:
    a = t.contiguous().view(-1).numpy()
    return a.view(np.uint32 if a.dtype == np.float32 else np.uint64)


def _compiled(kind: str, dtype):
    """The compiled pass of ``kind`` in ``dtype`` where it passed its self-check in this process (run
    on the first ask), else None."""
    key = (kind, dtype)
    if key not in _STATUS:
        with _CHECK_LOCK:
            if key not in _STATUS:
                passes = _passes()
                _STATUS[key] = ("torch: numba is not installed" if not passes else
                                "torch: a dtype other than float32 / float64" if key not in passes else
                                _self_check(kind, dtype))
    return _passes()[key] if _STATUS[key] == "numba" else None


def _draw(kind: str, shape: Sequence[int] | int, generator, dtype) -> torch.Tensor:
    dims = (int(shape),) if isinstance(shape, int) else tuple(int(s) for s in shape)
    if (not _FORCE_TORCH and generator is not None and generator.device.type == "cpu"
            and math.prod(dims) >= _SMALLEST[kind]):
        compiled = _compiled(kind, dtype)
        if compiled is not None:
            out = _numba_draw(compiled, dims, generator, dtype)
            if out is not None:
                return out
    return _torch_draw(kind, dims, generator, dtype)


def randn(shape: Sequence[int] | int, generator: torch.Generator | None, dtype: torch.dtype) -> torch.Tensor:
    """``torch.randn(shape, generator=generator, dtype=dtype)``, every bit of it and of the generator's
    state after it (the module's docstring: what is replicated, the self-check, the fallback)."""
    return _draw("randn", shape, generator, dtype)


def rand(shape: Sequence[int] | int, generator: torch.Generator | None, dtype: torch.dtype) -> torch.Tensor:
    """``torch.rand(shape, generator=generator, dtype=dtype)``, every bit of it and of the generator's
    state after it (the module's docstring)."""
    return _draw("rand", shape, generator, dtype)


def argsort_rows(keys: torch.Tensor) -> torch.Tensor:
    """``keys.argsort(dim=1)`` of a 2-D CPU tensor, every index torch's: a row whose keys are all
    different has one ascending order, which a compiled radix sort of its float32 bits finds (torch's
    ``std::sort`` finds the same); a row with two equal keys (where an unstable sort's order of
    them is its own) is torch's argsort of that row (each row is sorted on its own there too).
    Torch's call for the whole tensor where the compiled pass does not apply: numba missing,
    another dtype than float32, not 2-D and contiguous, a key negative, infinite or NaN, the
    compiled draws switched off (:func:`torch_draws`)."""
    import torch

    compiled = None if _FORCE_TORCH else _passes().get("order")
    if (compiled is None or keys.dtype != torch.float32 or keys.dim() != 2 or keys.device.type != "cpu"
            or not keys.is_contiguous() or keys.requires_grad or keys.numel() == 0):
        return keys.argsort(dim=1)
    out = torch.empty(keys.shape, dtype=torch.int64)
    ties = np.zeros(keys.shape[0], dtype=np.bool_)
    if not compiled(keys.numpy().view(np.uint32), out.numpy(), ties):
        return keys.argsort(dim=1)
    for r in np.flatnonzero(ties).tolist():
        out[r] = keys[r].argsort()
    return out


def status() -> dict[str, str]:
    """Per kind and dtype (``"randn float32"``, ...): "numba" where the compiled draw runs, "torch:
    <why>" where torch's own call does, "unchecked" before its first draw in this process."""
    import torch

    keys = [(k, d) for k in ("randn", "rand") for d in (torch.float32, torch.float64)]
    keys += [key for key in _STATUS if key not in keys]
    return {f"{kind} {str(dtype).replace('torch.', '')}": "torch: switched off" if _FORCE_TORCH
            else _STATUS.get((kind, dtype), "unchecked") for kind, dtype in keys}


@contextlib.contextmanager
def torch_draws() -> Iterator[None]:
    """A test hook: inside the block every draw is torch's own call (the compiled path switched off)."""
    global _FORCE_TORCH
    before, _FORCE_TORCH = _FORCE_TORCH, True
    try:
        yield
    finally:
        _FORCE_TORCH = before
