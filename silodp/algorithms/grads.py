"""Per-sample gradients of f0, clipped as a whole to l2 norm ``clip`` and summed per silo.

Two paths compute the same quantity ``sum_k weight[n, k] * clip(grad f0(w_n, x_nk))``:

* ``"materialize"`` -- the reference: ``vmap(vmap(grad))`` builds every per-sample gradient
  ``[N, K, d]``, clips rows, sums. Works for any model.
* ``"ghost"`` -- ghost clipping (Goodfellow 2015; Li et al. 2022, arXiv:2110.05679): one batched
  forward/backward gives each parametric layer's input ``a`` and output gradient ``g`` per sample;
  for a Linear layer the per-sample weight-gradient norm is ``||a|| * ||g||`` and the clipped sum
  is ``sum_k c_k g_k a_k^T``, so no ``[N, K, d]`` tensor is formed. Convolutions use the per-layer
  unfolded product (small for LeNet). Tested against the reference.

Both keep the release primitive's semantics (:mod:`.release`): a record whose gradient or norm is
not finite contributes exactly zero (its rows of activations and output gradients are masked
before any product, never a NaN factor), and a record whose squared norm overflows is normed
again in the log domain (:func:`.release.log_norms`), so its clip factor is exact. Differences
(SVRG, SPIDER): :func:`clipped_diff_sum`, their norms scaled per record (never overflow). Silos
are processed in cache-sized chunks (:data:`CHUNK_BYTES`), and Linear / ReLU models run a
written-out backward pass (:func:`_mlp_pass`). The scalar-output one-hidden-layer MLP has its own
kernels (:func:`_scalar_mlp_sum`, :func:`_scalar_mlp_diff`); on the CPU with numba, everything
between their matrix products is one fused pass (:mod:`.fused`), the torch code its reference and
fallback.
"""

from __future__ import annotations

import math
import threading

import torch
from torch.func import grad, vmap

from . import fused as _fused
from . import release as _release
from .config import GRAD_METHODS
from .federation import Rows
from .models import Conv2d, Linear, Model, ReLU
from .release import clip_factors, clip_rows  # noqa: F401  (the primitive's; re-exported)

METHODS = GRAD_METHODS


def per_sample_grads(problem, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Unclipped per-sample gradients ``[N, K, d]``; ``w: [N, d]``, ``x: [N, K, ...]``."""
    g = grad(problem.sample_loss)
    return vmap(vmap(g, in_dims=(None, 0, 0)), in_dims=(0, 0, 0))(w, x, y)


class _LayerTerms:
    """One parametric layer's per-record gradient at one point, kept as its factors: a Linear
    layer's input activations ``a [N, K, in]`` and output gradients ``g [N, K, out]`` (the
    per-record weight gradient is ``g a^T``, never formed); a convolution's per-layer per-record
    weight and bias gradients (small for LeNet)."""

    __slots__ = ("linear", "a", "g", "gw", "gb", "sq")

    def __init__(self, layer, a: torch.Tensor, g: torch.Tensor):
        self.linear = isinstance(layer, Linear)
        if self.linear:
            self.a, self.g = a, g
            self.sq = (_sqnorm(a) + 1.0) * _sqnorm(g)
            return
        n, k = a.shape[:2]
        cols = torch.nn.functional.unfold(a.reshape(n * k, *a.shape[2:]), layer.kernel_size)  # [nk, cin*ks*ks, P]
        gg = g.reshape(n * k, layer.out_channels, -1)  # [nk, cout, P]
        self.gw = torch.bmm(gg, cols.transpose(1, 2)).reshape(n, k, -1)
        self.gb = gg.sum(-1).reshape(n, k, -1)
        self.sq = (self.gw * self.gw).sum(-1) + (self.gb * self.gb).sum(-1)

    def log_norm(self) -> torch.Tensor:
        """Per-record ``log ||G||`` of this layer without overflow (NaN for a non-finite record):
        for a Linear layer ``||(a, 1)|| ||g||``."""
        if self.linear:
            ones = torch.ones_like(self.a[..., :1])
            return _release.log_norms(torch.cat([self.a, ones], -1)) + _release.log_norms(self.g)
        return _release.log_norms(torch.cat([self.gw, self.gb], -1))

    def masked(self, keep: torch.Tensor | None) -> "_LayerTerms":
        """This layer with the records ``keep`` rejects set to zero (no ``0 * inf`` products)."""
        if keep is None:
            return self
        out = object.__new__(_LayerTerms)
        out.linear, out.sq = self.linear, self.sq
        if self.linear:
            out.a, out.g = _release.mask_rows(self.a, keep), _release.mask_rows(self.g, keep)
        else:
            out.gw, out.gb = _release.mask_rows(self.gw, keep), _release.mask_rows(self.gb, keep)
        return out

    def diff_log_norm(self, other: "_LayerTerms", c1: torch.Tensor, c0: torch.Tensor) -> torch.Tensor:
        """Per-record ``log ||c1 G1 - c0 G0||`` of this layer (``G1`` its gradient, ``G0`` the same
        layer's at another point, ``other``; both finite), without overflow and without
        cancellation: for a Linear layer with ``u = c1 g1``, ``v = c0 g0`` and the activations
        ``a = (a, 1)`` with their bias entry, ``D = u a1^T - v a0^T = (u - v) a1^T + v (a1 - a0)^T``,
        so ``||D||^2 = ||u - v||^2 ||a1||^2 + ||v||^2 ||a1 - a0||^2 + 2 ((u - v).v) (a1.(a1 - a0))``:
        every term is of the difference's own size, so a small difference keeps its relative
        precision (the expanded ``c1^2||G1||^2 + c0^2||G0||^2 - 2 c1 c0 <G1, G0>`` would lose it);
        ``u, v`` are scaled by their largest entry and the activations by theirs (at least 1),
        so no product overflows. -inf for a zero difference."""
        if not self.linear:
            c1, c0 = c1.unsqueeze(-1), c0.unsqueeze(-1)
            return _release.log_norms(torch.cat([self.gw * c1 - other.gw * c0, self.gb * c1 - other.gb * c0], -1))
        u, v = self.g * c1.unsqueeze(-1), other.g * c0.unsqueeze(-1)
        s_g = torch.maximum(u.abs().amax(-1), v.abs().amax(-1))
        s_a = torch.clamp(torch.maximum(self.a.abs().amax(-1), other.a.abs().amax(-1)), min=1.0)
        s_g1 = torch.where(s_g > 0, s_g, torch.ones_like(s_g)).unsqueeze(-1)
        u, v = u / s_g1, v / s_g1
        a1, a0 = self.a / s_a.unsqueeze(-1), other.a / s_a.unsqueeze(-1)
        dg, da = u - v, a1 - a0
        sq = (_sqnorm(dg) * (_sqnorm(a1) + s_a.reciprocal().square()) + _sqnorm(v) * _sqnorm(da)
              + 2.0 * (dg * v).sum(-1) * (a1 * da).sum(-1))
        out = torch.log(s_g) + torch.log(s_a) + 0.5 * torch.log(torch.clamp(sq, min=0.0))
        return torch.where(s_g > 0, out, torch.full_like(out, -math.inf))

    def summed(self, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``sum_k c[n, k] * grad_k`` of the layer's weight ``[N, ...]`` and bias ``[N, out]``."""
        if self.linear:
            gc = self.g * c.unsqueeze(-1)
            return torch.bmm(gc.transpose(1, 2), self.a), gc.sum(1)
        return (self.gw * c.unsqueeze(-1)).sum(1), (self.gb * c.unsqueeze(-1)).sum(1)

    def per_record(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The per-record weight ``[N, K, ...]`` and bias ``[N, K, out]`` gradients (unclipped)."""
        if self.linear:
            return self.g.unsqueeze(-1) * self.a.unsqueeze(-2), self.g
        return self.gw, self.gb


def _sqnorm(v: torch.Tensor) -> torch.Tensor:
    """Squared l2 norm over the last dimension (one fused reduction, no temporary)."""
    return torch.linalg.vector_norm(v, dim=-1).square()


def _shared(w: torch.Tensor) -> bool:
    """Whether every silo's iterate is the same (``w [n, d]`` one row, a broadcast view, or equal
    rows: an MB-SGD round, a SPIDER or SVRG anchor and the first local step of Local SGD all start
    every silo from the server's iterate): then each Linear layer's forward and backward pass is one
    matrix product ``[n K, in] x [in, out]`` for every silo instead of n small ones."""
    if w.shape[0] == 1 or w.stride(0) == 0:
        return True
    return bool((w == w[:1]).all())


def _is_mlp(model) -> bool:
    """Whether the written-out pass applies: Linear and ReLU layers only, and the model's own
    forward is :class:`.models.Model`'s (a subclass may transform its outputs, as the rates'
    ``SigmoidLinear``: it keeps the autograd path)."""
    own = type(model).forward_batched is Model.forward_batched and type(model).forward is Model.forward
    return own and all(isinstance(layer, (Linear, ReLU)) for layer in model.layers)


def _mlp_pass(problem, w, x, y):
    """The Linear / ReLU fast path of :func:`_layer_terms`: the forward pass keeps each Linear
    layer's input, the backward pass is written out (``g_in = g_out W``, an outer product when
    ``g_out`` has one column; ReLU: ``g`` where the output is positive), only the loss's own
    derivative by autograd: the same per-record activations and output gradients without an
    autograd graph over the model."""
    model = problem.model
    n, k = x.shape[:2]
    shared = _shared(w)  # one iterate for every silo: one matrix product per layer and direction
    h, inputs, weights, relus = x, [], [], []
    for i, layer in enumerate(model.layers):
        if isinstance(layer, Linear):
            W, b = model.params(w[:1] if shared else w, i)
            inputs.append(h)
            weights.append(W)
            if shared:
                h = torch.addmm(b[0], h.reshape(n * k, -1), W[0].t()).view(n, k, -1)
            else:
                h = torch.baddbmm(b.unsqueeze(1), h, W.transpose(1, 2))
        else:
            h = torch.relu_(h) if h is not x else torch.relu(h)  # in place on this pass's own outputs only
        relus.append(h if isinstance(layer, ReLU) else None)
    out = h.detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(_loss(problem, out, y).sum(), out)
    grads = [None] * len(inputs)
    j = len(inputs)
    for i in range(len(model.layers) - 1, -1, -1):
        if relus[i] is not None:
            g = torch.ops.aten.threshold_backward(g, relus[i], 0)
            continue
        j -= 1
        grads[j] = g
        if j > 0:
            W = weights[j]
            if W.shape[1] == 1:
                g = g * W[:, 0].unsqueeze(1)
            elif shared:
                g = torch.mm(g.reshape(n * k, -1), W[0]).view(n, k, -1)
            else:
                g = torch.bmm(g, W)
    return inputs, grads


def _layer_terms(problem, w, x, y) -> tuple[list[int], list[_LayerTerms], torch.Tensor]:
    """One batched forward/backward at ``w [N, d]``: the parametric layers' indices, their
    :class:`_LayerTerms` and the per-record squared gradient norm ``[N, K]`` (sum over layers)."""
    model = problem.model
    w = w.detach()
    if _is_mlp(model):
        with torch.no_grad():
            inputs, grads_out = _mlp_pass(problem, w, x, y)
    else:
        wg = w.requires_grad_(True)
        with torch.enable_grad():
            out, inputs, outputs = model.forward_batched(wg, x, record=True)
            grads_out = torch.autograd.grad(_loss(problem, out, y).sum(), outputs)
    index = [i for i, layer in enumerate(model.layers) if isinstance(layer, (Linear, Conv2d))]
    terms = [_LayerTerms(model.layers[i], a.detach(), g.detach()) for i, a, g in zip(index, inputs, grads_out)]
    return index, terms, sum(t.sq for t in terms)


def _factors(terms, sq: torch.Tensor, clip):
    """``(clip factors, keep)`` of one point's records: :func:`.release.clip_factors` of the
    squared norms; where one is not finite (overflow, or a non-finite record), the factor from the
    log-domain norm, and ``keep`` (None: every record) rejects the records whose norm is NaN."""
    c = clip_factors(sq, clip)
    if bool(torch.isfinite(sq).all()):
        return c, None
    log_norm = torch.logsumexp(torch.stack([2 * t.log_norm() for t in terms]), 0) / 2
    return torch.where(torch.isfinite(sq), c, _release.factors_from_log_norms(log_norm, clip)), ~torch.isnan(log_norm)


def _point(problem, w, x, y, clip):
    """One point's layer terms (non-finite records masked), clip factors (0 for those) and keep."""
    index, terms, sq = _layer_terms(problem, w, x, y)
    c, keep = _factors(terms, sq, clip)
    return index, [t.masked(keep) for t in terms], c, keep


def _assemble(problem, n: int, like: torch.Tensor, index, parts) -> torch.Tensor:
    """The flat ``[N, d]`` vector from each layer's (weight, bias) sums."""
    result = torch.zeros(n, problem.model.dim, dtype=like.dtype, device=like.device)
    for i, (gw, gb) in zip(index, parts):
        sw, sb = problem.model.slices[i]
        result[:, sw] = gw.reshape(n, -1)
        result[:, sb] = gb
    return result


#: bytes of per-record intermediates one chunk of silos may hold (silos are processed in chunks
#: so that a chunk's activations and output gradients stay in the last-level cache; any size
#: gives the same sums: the per-silo cost no longer grows with N). An estimate (twice the layers'
#: widths a record): the scalar MLP keeps about 40% of it live (x, h and its mask), so 32 MiB is
#: 28 silos of the benchmark's MLP in ~12 MB; with reused work tensors larger chunks are faster
#: (fewer small operators), smaller ones slower (``bench_simulator.py --breakdown`` lists them)
CHUNK_BYTES = 32 << 20


def _chunks(problem, x: torch.Tensor):
    """Slices of silos whose per-record intermediates fit :data:`CHUNK_BYTES`."""
    n, k = x.shape[:2]
    widths = sum(layer.in_features + 2 * layer.out_features for layer in problem.model.layers
                 if isinstance(layer, Linear)) or 1
    per_silo = 2 * k * widths * x.element_size()
    size = n if not _is_mlp(problem.model) else max(1, min(n, CHUNK_BYTES // per_silo))
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def _silos(x, y, xsq, sl: slice) -> tuple:
    """``(x, y, xsq)`` of the silos ``sl`` of one chunk: slices of the tensors, or a :class:`.Rows`
    minibatch's rows gathered now into this thread's work tensor (:func:`_scratch`), so that the
    chunk's records are still in the cache when its products read them (a whole minibatch gathered
    first is not, once it outgrows the cache: at N 100 about 5% of the round)."""
    if isinstance(x, Rows):
        return x.take(sl, _scratch("rows", (sl.stop - sl.start, *x.shape[1:]), x.fed.x))
    return x[sl], y[sl], None if xsq is None else xsq[sl]


def _whole(x, y, xsq) -> tuple:
    """``(x, y, xsq)`` as tensors: a :class:`.Rows` minibatch gathered whole (the paths that do not chunk)."""
    return x.whole() if isinstance(x, Rows) else (x, y, xsq)


def _scalar_mlp(model) -> bool:
    """Whether :func:`_scalar_mlp_sum` applies: ``Linear(d, H) - ReLU - Linear(H, 1)`` (a one-hidden-
    layer MLP with one output, e.g. the paper's logistic MLP) through the model's own forward."""
    layers = model.layers
    return (_is_mlp(model) and len(layers) == 3 and isinstance(layers[0], Linear) and isinstance(layers[1], ReLU)
            and isinstance(layers[2], Linear) and layers[2].out_features == 1)


def _output_grad(problem, z: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``d loss / d z`` of each record for one output ``z [n, k, 1]`` -> ``[n, k]``: the logistic
    loss's written out (``softplus'(z) - y``, the same operations autograd runs, bit for bit), any
    other loss by autograd."""
    if problem.loss == "logistic":
        z = z[..., 0]
        return torch.ops.aten.softplus_backward(torch.ones_like(z), z, 1, 20) - y
    z = z.detach().requires_grad_(True)
    with torch.enable_grad():
        (g,) = torch.autograd.grad(_loss(problem, z, y).sum(), z)
    return g[..., 0]


_SCRATCH = threading.local()


def _scratch(tag: str, shape: tuple[int, ...], like: torch.Tensor) -> torch.Tensor:
    """A reusable ``[*shape]`` work tensor of ``like``'s dtype (uninitialised), one per ``tag`` and
    thread, grown as needed: the scalar MLP's ``[n, k, H]`` intermediates (a chunk's hidden
    activations and their mask, a few MB at the paper's sizes) are written into it instead of fresh
    allocations. A fresh tensor of that size comes from ``mmap`` (glibc returns it to the system when
    freed), so every call paid a page fault per 4 KiB touched: about 1,000 a kernel call at N 25, a
    quarter of its time or more (``benchmarks/bench_simulator.py --breakdown`` counts them: none
    now). The values are the same; nothing returned by a kernel is a view of it. Off the CPU (a caching allocator), and above
    :data:`CHUNK_BYTES` (a single silo larger than a chunk: not kept for the thread's lifetime), it is
    a fresh tensor."""
    numel = math.prod(shape)
    if not like.is_cpu or numel * like.element_size() > CHUNK_BYTES:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    store = _SCRATCH.__dict__.setdefault("store", {})
    buf = store.get((tag, like.dtype))
    if buf is None or buf.numel() < numel:
        with torch.inference_mode(False):  # a normal tensor: writable in and out of inference mode
            buf = store[(tag, like.dtype)] = torch.empty(numel, dtype=like.dtype)
    return buf[:numel].view(shape)


@torch.no_grad()  # its products write into work tensors (out=), which autograd refuses; nothing here needs a graph
def _scalar_forward(problem, w, x, tag: str):
    """The scalar MLP's forward product at ``w``: ``(h, W2, b2, shared)``, the hidden pre-activations
    ``h = x W1^T + b1 [n, k, H]`` in the work tensor ``tag`` (:func:`_scratch`), the output layer's
    parameters ``W2 [1 or n, 1, H]``, ``b2 [1 or n, 1]`` and whether the silos share one iterate
    (then one matrix product for every silo)."""
    model = problem.model
    n, k, d = x.shape
    hidden = model.layers[0].out_features
    shared = _shared(w)  # one iterate for every silo: one matrix product
    W1, b1 = model.params(w[:1] if shared else w, 0)
    W2, b2 = model.params(w[:1] if shared else w, 2)
    h = _scratch(tag + ".h", (n, k, hidden), x)
    if shared:
        torch.addmm(b1[0], x.reshape(n * k, d), W1[0].t(), out=h.view(n * k, hidden))
    else:
        torch.baddbmm(b1.unsqueeze(1), x, W1.transpose(1, 2), out=h)
    return h, W2, b2, shared


@torch.no_grad()
def _scalar_point(problem, w, x, y, tag: str = "point"):
    """One point of :func:`_scalar_mlp_sum`: ``(h, m, g, w2, sq)``, the hidden activations
    ``h [n, k, H]``, their ReLU mask ``m`` (0 / 1), the loss's derivative ``g [n, k]`` at the output,
    the output weights ``w2 [1 or n, H]`` and the per-record squared gradient norm ``sq [n, k]``
    (``||x||^2`` from ``xsq``); one matrix product for every silo when they share one iterate."""
    n, k, _ = x.shape
    h, W2, b2, shared = _scalar_forward(problem, w, x, tag)
    hidden = h.shape[-1]
    w2 = W2[:, 0]  # [1 or n, H]
    if shared:
        z = torch.addmv(b2[0], h.relu_().view(n * k, hidden), w2[0]).view(n, k, 1)
    else:
        z = torch.baddbmm(b2.unsqueeze(1), h.relu_(), W2.transpose(1, 2))
    g = _output_grad(problem, z, y)
    # [h > 0] as 0 / 1 in one pass: h is a ReLU output (>= 0), so its sign is the mask (twice as fast as
    # threshold_backward on an expanded grad); a NaN record's NaN makes its squared norm NaN (general path)
    m = torch.sign(h, out=_scratch(tag + ".m", h.shape, h))
    hid_sq = (m.view(n * k, hidden) @ w2[0].square()).view(n, k) if shared else \
        torch.bmm(m, w2.square().unsqueeze(-1))[..., 0]
    return h, m, g, w2, hid_sq


def _scalar_sq(g: torch.Tensor, xsq: torch.Tensor, hid_sq: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
    """A record's squared gradient norm in the scalar MLP (:func:`_scalar_mlp_sum`'s formula):
    ``g^2 ((||x||^2 + 1) (m . w2^2) + ||h||^2 + 1)``, ``xsq = ||x||^2 + 1``."""
    return g.square() * (xsq * hid_sq + _sqnorm(h) + 1.0)


def _scalar_mlp_sum(problem, w, x, y, weights, clip, out=None, xsq=None) -> torch.Tensor | None:
    """The clipped sum of a scalar-output one-hidden-layer MLP (:func:`_scalar_mlp`), by the
    structure of its gradient, in one forward pass and two matrix products per silo; None where a
    record's squared norm is not finite (the caller then takes the general path, which masks the
    record or norms it in the log domain).

    With ``h = relu(x W1^T + b1)``, ``z = h . w2 + b2`` and ``g = dloss/dz`` (a scalar per record),
    the hidden layer's output gradient is ``g (w2 * m)``, ``m = [h > 0]``, so (ghost clipping, Li et
    al. 2022, arXiv:2110.05679, Sec. 4, per layer ``||a|| ||g||``) the record's squared gradient norm
    is ``g^2 ((||x||^2 + 1) (m . w2^2) + ||h||^2 + 1)`` without forming the hidden gradients, and
    with ``s = weight * c * g`` (``c`` the clip factor folded into the scalar) the sums are
    ``grad W1 = w2 * (x^T (s m))``, ``grad b1 = w2 * sum s m``, ``grad w2 = sum s h``,
    ``grad b2 = sum s``: the same quantity as :func:`_ghost`'s (tested against the reference).
    On the CPU with numba (the logistic loss, float32 / float64) everything after the forward
    product is one fused pass per record (:func:`.fused.clipped_sum`: the same formula, the same
    None; ``xsq`` the records' ``||x||^2 + 1`` from the gather, or None), then one product
    ``(s m w2)^T x`` per silo."""
    if _fused.applies(x, problem.loss, clip) and w.dtype == x.dtype:
        return _scalar_fused(problem, (w,), x, y, weights, clip, out=out, xsq=xsq)
    h, m, g, w2, hid_sq = _scalar_point(problem, w, x, y)
    sq = _scalar_sq(g, _sqnorm(x) + 1.0, hid_sq, h)
    if not _release.all_finite(sq):
        return None
    s = clip_factors(sq, clip) * weights * g  # [n, k]
    sm = m.mul_(s.unsqueeze(-1))  # s m, in place of the mask
    return _scalar_assemble(problem, w, x, torch.bmm(s.unsqueeze(1), h)[:, 0], s.sum(1, keepdim=True), sm, w2,
                            out=out)


@torch.no_grad()
def _scalar_fused(problem, points, x, y, weights, clip, diff_clip=None, out=None, xsq=None) -> torch.Tensor | None:
    """:func:`_scalar_mlp_sum` (``points = (w,)``) or :func:`_scalar_mlp_diff` (``(w, w_old)``) by
    :func:`.fused.clipped_sum` after each point's forward product (``xsq``: the records' ``||x||^2 + 1``
    from the gather, or None), then the hidden weight's sum."""
    model = problem.model
    n = x.shape[0]
    tags = ("point",) if len(points) == 1 else ("point1", "point0")
    forward = [_scalar_forward(problem, w, x, tag) for w, tag in zip(points, tags)]
    if out is None or not out.is_contiguous():
        out = torch.empty(n, model.dim, dtype=x.dtype)
    (sw1, sb1), (sw2, sb2) = model.slices[0], model.slices[2]
    if not _fused.clipped_sum([(h, W2[:, 0], b2) for h, W2, b2, _ in forward], x, y, weights, clip, diff_clip, out,
                              (sb1.start, sw2.start, sb2.start), xsq=xsq):
        return None
    _hidden_weight_sum(x, forward[0][0], out, sw1.start)
    return out


def _hidden_weight_sum(x: torch.Tensor, sm: torch.Tensor, out: torch.Tensor, col: int) -> None:
    """The columns ``col : col + H d`` of ``out [n, dim]`` = ``sm^T x [n, H, d]`` per silo (``sm [n, k, H]``,
    ``x [n, k, d]``), as ``x^T sm [n, d, H]`` (``x`` the transposed operand) into a work tensor, then
    stored transposed (:func:`.fused.store_transposed`, else ``copy_``): faster than the ``[n, H, d]``
    product itself at the paper's shapes (``bench_simulator.py --breakdown``)."""
    n, k, d = x.shape
    hidden = sm.shape[-1]
    tmp = _scratch("point.xsm", (n, d, hidden), x)
    torch.bmm(x.transpose(1, 2), sm, out=tmp)
    if not _fused.store_transposed(tmp, out, col):
        out[:, col:col + hidden * d].view(n, hidden, d).copy_(tmp.transpose(1, 2))


def _scalar_assemble(problem, w, x, gw2, gb2, sm, w2=None, out=None) -> torch.Tensor:
    """The flat ``[n, d]`` sums of the scalar MLP: the output layer's ``(gw2, gb2)`` and the hidden
    layer's from ``sm [n, k, H]`` (its per-record output gradients, weighted; times ``w2`` per
    hidden unit when given): ``grad W1 = x^T sm``, ``grad b1 = sum sm``; written into ``out``
    (rows of the caller's ``[N, d]``) when given."""
    model = problem.model
    n = x.shape[0]
    if out is None:
        out = torch.empty(n, model.dim, dtype=w.dtype, device=w.device)
    (sw1, sb1), (sw2, sb2) = model.slices[0], model.slices[2]
    out[:, sw2], out[:, sb2] = gw2, gb2
    # [n, H, d]: W1's own layout, so the scaling below reads and writes contiguous rows (the
    # transposed product [n, d, H] made it a strided gather, 4x slower; the same product's speed)
    gb1, gw1 = sm.sum(1), torch.bmm(sm.transpose(1, 2), x)
    dst = out[:, sw1].view(gw1.shape)  # the product lands in place, one pass
    if w2 is not None:
        torch.mul(gb1, w2, out=out[:, sb1])
        torch.mul(gw1, w2.unsqueeze(-1), out=dst)
    else:
        out[:, sb1] = gb1
        dst.copy_(gw1)
    return out


def _scalar_mlp_diff(problem, w, w_old, x, y, weights, clip, dc, xsq=None) -> torch.Tensor | None:
    """:func:`_ghost_diff` for the scalar MLP of :func:`_scalar_mlp`; None where a record is not
    finite at either point (the general path then drops it). Both points see the same records, so
    with ``u = c1 g1``, ``v = c0 g0`` (clip factor times the output derivative, per point) a record's
    difference of clipped gradients is, in the hidden layer, ``delta x~^T`` with
    ``delta = u (w2_1 * m1) - v (w2_0 * m0)`` and ``x~ = (x, 1)``, and in the output layer
    ``(eps, u - v)`` with ``eps = u h1 - v h0``: its squared norm is
    ``||delta||^2 (||x||^2 + 1) + ||eps||^2 + (u - v)^2``, each term formed from the difference
    itself (no cancellation of two large norms), and the clipped sum is one matrix product per
    silo, ``x^T (e delta)``, ``e`` the weight times the difference's clip factor. On the CPU with
    numba, as :func:`_scalar_mlp_sum`, one fused pass after the two forward products."""
    if _fused.applies(x, problem.loss, clip, dc) and w.dtype == x.dtype == w_old.dtype:
        return _scalar_fused(problem, (w, w_old), x, y, weights, clip, dc, xsq=xsq)
    h1, m1, g1, w2_1, hid1 = _scalar_point(problem, w, x, y, "point1")
    h0, m0, g0, w2_0, hid0 = _scalar_point(problem, w_old, x, y, "point0")
    xsq = _sqnorm(x) + 1.0
    sq1, sq0 = _scalar_sq(g1, xsq, hid1, h1), _scalar_sq(g0, xsq, hid0, h0)
    u, v = clip_factors(sq1, clip) * g1, clip_factors(sq0, clip) * g0
    delta = m1.mul_((u.unsqueeze(-1) * w2_1.unsqueeze(1))).sub_(m0.mul_(v.unsqueeze(-1) * w2_0.unsqueeze(1)))
    eps = h1.mul_(u.unsqueeze(-1)).sub_(h0.mul_(v.unsqueeze(-1)))
    db = u - v
    sq = _sqnorm(delta) * xsq + _sqnorm(eps) + db.square()
    if not (_release.all_finite(sq1) and _release.all_finite(sq0) and _release.all_finite(sq)):
        return None
    e = weights if dc is None else clip_factors(sq, dc) * weights
    e3 = e.unsqueeze(-1)
    return _scalar_assemble(problem, w, x, (eps * e3).sum(1), (db * e).sum(1, keepdim=True), delta.mul_(e3))


def _ghost(problem, w, x, y, weights, clip, xsq=None):
    parts = []
    scalar = _scalar_mlp(problem.model)
    chunks = _chunks(problem, x)
    # the scalar MLP's chunks write their rows of one [N, d] result (no concatenation)
    whole = torch.empty(x.shape[0], problem.model.dim, dtype=w.dtype, device=w.device) if scalar else None
    for sl in chunks:
        xs, ys, sqs = _silos(x, y, xsq, sl)
        if whole is not None:
            part = _scalar_mlp_sum(problem, w[sl], xs, ys, weights[sl], clip, out=whole[sl], xsq=sqs)
            if part is not None:
                parts.append(part)
                continue
        index, terms, c, _ = _point(problem, w[sl], xs, ys, clip)
        c = c * weights[sl]
        parts.append(_assemble(problem, c.shape[0], w, index, [t.summed(c) for t in terms]))
    if whole is not None and all(p.data_ptr() == whole[sl].data_ptr() for p, sl in zip(parts, chunks)):
        return whole
    return parts[0] if len(parts) == 1 else torch.cat(parts)


def _ghost_diff(problem, w, w_old, x, y, weights, clip, diff_clip, xsq=None):
    """Ghost clipping of differences: with ``c1, c0`` the clip factors of the gradients at ``w``
    and ``w_old`` and ``G1, G0`` the per-record gradients, the norm of ``D = c1 G1 - c0 G0`` comes
    per layer from the activations and output gradients at both points
    (:meth:`_LayerTerms.diff_log_norm`); with ``e`` the difference's clip factor, the sum is
    ``sum_k (weight e c1) G1 - sum_k (weight e c0) G0``: no ``[N, K, d]`` tensor is formed."""
    out = []
    scalar = _scalar_mlp(problem.model)
    per_silo = isinstance(diff_clip, torch.Tensor) and diff_clip.dim() > 0 and diff_clip.shape[0] == x.shape[0]
    for sl in _chunks(problem, x):
        xs, ys, sqs = _silos(x, y, xsq, sl)
        if scalar:
            part = _scalar_mlp_diff(problem, w[sl], w_old[sl], xs, ys, weights[sl], clip,
                                    diff_clip[sl] if per_silo else diff_clip, xsq=sqs)
            if part is not None:
                out.append(part)
                continue
        index, t1, c1, keep1 = _point(problem, w[sl], xs, ys, clip)
        _, t0, c0, keep0 = _point(problem, w_old[sl], xs, ys, clip)
        e = weights[sl]
        keep = keep1 if keep0 is None else (keep0 if keep1 is None else keep1 & keep0)
        if keep is not None:  # a record non-finite at either point: its difference contributes zero
            e = torch.where(keep, e, torch.zeros_like(e))
            t1, t0 = [t.masked(keep) for t in t1], [t.masked(keep) for t in t0]
        if diff_clip is not None:
            dc = diff_clip[sl] if per_silo else diff_clip
            log_norm = torch.logsumexp(torch.stack([2 * a.diff_log_norm(b, c1, c0) for a, b in zip(t1, t0)]), 0) / 2
            factor = _release.factors_from_log_norms(log_norm, dc)  # a zero difference (-inf) keeps 1, even at dc 0
            e = torch.where(torch.isneginf(log_norm), torch.ones_like(factor), factor) * e
        parts = [(p1[0] - p0[0], p1[1] - p0[1]) for p1, p0 in
                 ((a.summed(e * c1), b.summed(e * c0)) for a, b in zip(t1, t0))]
        out.append(_assemble(problem, e.shape[0], w, index, parts))
    return out[0] if len(out) == 1 else torch.cat(out)


def _loss(problem, out, y):
    from .problems import loss_from_outputs

    return loss_from_outputs(problem.loss, out, y)


def _per_silo(w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    return w.expand(x.shape[0], -1) if w.dim() == 1 else w


def clipped_grad_sum(problem, w: torch.Tensor, x: torch.Tensor | Rows, y: torch.Tensor | None,
                     weights: torch.Tensor, clip: float | None, method: str = "ghost",
                     xsq: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_k weights[n, k] * clip(grad f0(w_n, x_nk))`` for every silo ``n`` -> ``[N, d]``.

    ``w`` is ``[N, d]`` (one iterate per silo) or ``[d]`` (broadcast). Weights encode the batch
    average (``1/K``) and padding masks (0 for padded rows). ``xsq [N, K]``: each record's
    ``||x||^2 + 1`` as :meth:`.federation.Federation.gather` computed it (``norms=True``), which the
    fused pass then reads instead of ``x`` (the same bits); None: from ``x``. The torch paths ignore it.
    ``x`` may be a :class:`.Rows` minibatch (``y`` and ``xsq`` then None): the ghost path gathers it
    a chunk of silos at a time, the reference whole.
    """
    w = _per_silo(w, x)
    if method == "materialize":
        x, y, xsq = _whole(x, y, xsq)
        g = clip_rows(per_sample_grads(problem, w, x, y), clip)
        return torch.einsum("nk,nkd->nd", weights, g)
    if method == "ghost":
        return _ghost(problem, w, x, y, weights, clip, xsq).detach()
    raise ValueError(f"method: must be one of {METHODS}, got {method!r}")


def clipped_diff_sum(problem, w: torch.Tensor, w_old: torch.Tensor, x: torch.Tensor | Rows,
                     y: torch.Tensor | None, weights: torch.Tensor, clip: float | None, diff_clip=None,
                     method: str = "ghost", xsq: torch.Tensor | None = None) -> torch.Tensor:
    """``sum_k weights[n, k] * clip_dc(clip(grad f0(w_n, x_nk)) - clip(grad f0(w_old_n, x_nk)))``
    -> ``[N, d]``: per-record differences of clipped gradients (SVRG, SPIDER), each difference
    clipped again to ``diff_clip`` (None: not clipped; a float or a tensor broadcasting against
    ``[N, K]``, e.g. ``[N, 1]`` per silo). Each record's term has l2 norm at most
    ``min(2 clip, diff_clip)``; a record whose gradient is not finite at either point contributes
    zero. ``"ghost"``: from each layer's activations and output gradients at both points
    (:func:`_ghost_diff`), no ``[N, K, d]`` tensor; ``"materialize"``: the reference. ``xsq`` and a
    :class:`.Rows` ``x``: as :func:`clipped_grad_sum`'s."""
    w, w_old = _per_silo(w, x), _per_silo(w_old, x)
    if method == "materialize":
        x, y, xsq = _whole(x, y, xsq)
        g1, g0 = per_sample_grads(problem, w, x, y), per_sample_grads(problem, w_old, x, y)
        keep = torch.isfinite(g1).all(-1) & torch.isfinite(g0).all(-1)  # non-finite at either point: zero
        g = clip_rows(_release.mask_rows(g1, keep), clip) - clip_rows(_release.mask_rows(g0, keep), clip)
        if diff_clip is not None:
            g = clip_rows(g, diff_clip)
        return torch.einsum("nk,nkd->nd", weights, g)
    if method == "ghost":
        return _ghost_diff(problem, w, w_old, x, y, weights, clip, diff_clip, xsq).detach()
    raise ValueError(f"method: must be one of {METHODS}, got {method!r}")


def _per_record(problem, w, x, y, method: str) -> torch.Tensor:
    """Unclipped per-record gradients ``[N, K, d]`` by ``method`` (``w`` per silo)."""
    if method == "materialize":
        return per_sample_grads(problem, w, x, y)
    if method != "ghost":
        raise ValueError(f"method: must be one of {METHODS}, got {method!r}")
    index, terms, _ = _layer_terms(problem, w, x, y)
    n, k = x.shape[:2]
    out = torch.empty(n, k, problem.model.dim, dtype=w.dtype, device=w.device)
    for i, t in zip(index, terms):
        gw, gb = t.per_record()
        sw, sb = problem.model.slices[i]
        out[..., sw] = gw.reshape(n, k, -1)
        out[..., sb] = gb
    return out


def clipped_per_sample(problem, w, x, y, clip, method: str = "ghost") -> torch.Tensor:
    """Clipped per-sample gradients ``[N, K, d]`` (the shuffle path randomizes every record's
    message, so it needs them), clipped by the primitive's :func:`.release.clip_rows` (a
    non-finite row is zero). ``"ghost"``: one batched forward/backward, each layer's per-record
    gradient formed from its factors (no ``vmap(grad)``); ``"materialize"``: the ``vmap``
    reference."""
    return clip_rows(_per_record(problem, _per_silo(w, x), x, y, method), clip)


def clipped_per_sample_diff(problem, w, w_old, x, y, clip, diff_clip=None, method: str = "ghost") -> torch.Tensor:
    """The shuffle path's per-record differences ``[N, K, d]``: ``clip(grad f0(w, x_k)) -
    clip(grad f0(w_old, x_k))``, clipped again to ``diff_clip`` (None: not clipped), each of l2 norm
    at most ``min(2 clip, diff_clip)``. A record whose gradient is not finite at *either* point is a
    zero contribution of that record (its whole difference is zero, as in :func:`clipped_diff_sum`,
    the Gaussian path), never the finite side alone: the finite side would be a term the
    non-finite one decided to release."""
    w, w_old = _per_silo(w, x), _per_silo(w_old, x)
    g1, g0 = _per_record(problem, w, x, y, method), _per_record(problem, w_old, x, y, method)
    keep = torch.isfinite(g1).all(-1) & torch.isfinite(g0).all(-1)
    out = clip_rows(_release.mask_rows(g1, keep), clip) - clip_rows(_release.mask_rows(g0, keep), clip)
    return out if diff_clip is None else clip_rows(out, diff_clip)
