"""Per-sample gradients of f0, clipped as a whole to l2 norm ``clip`` and summed per silo.

Two paths compute the same quantity ``sum_k weight[n, k] * clip(grad f0(w_n, x_nk))``:

* ``"materialize"`` -- the reference: ``vmap(vmap(grad))`` builds every per-sample gradient
  ``[N, K, d]``, clips rows, sums. Works for any model.
* ``"ghost"`` -- ghost clipping (Goodfellow 2015; Li et al. 2022, arXiv:2110.05679): one batched
  forward/backward gives each parametric layer's input ``a`` and output gradient ``g`` per sample;
  for a Linear layer the per-sample weight-gradient norm is ``||a|| * ||g||`` and the clipped sum
  is ``sum_k c_k g_k a_k^T``, so no ``[N, K, d]`` tensor is formed. Convolutions use the per-layer
  unfolded product (small for LeNet). Tested against the reference.
"""

from __future__ import annotations

import torch
from torch.func import grad, vmap

from . import release as _release
from .config import GRAD_METHODS
from .models import Conv2d, Linear
from .release import clip_factors, clip_rows  # noqa: F401  (the primitive's; re-exported)

METHODS = GRAD_METHODS


def per_sample_grads(problem, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Unclipped per-sample gradients ``[N, K, d]``; ``w: [N, d]``, ``x: [N, K, ...]``."""
    g = grad(problem.sample_loss)
    return vmap(vmap(g, in_dims=(None, 0, 0)), in_dims=(0, 0, 0))(w, x, y)


def _layer_terms(layer, a: torch.Tensor, g: torch.Tensor):
    """Per-sample squared gradient norm of one layer, its overflow-safe log-norm (a closure, for the
    records whose squared norm is not finite) and a closure for its clipped sum over the records
    ``keep`` selects (the others' rows are masked to zero before any product: no ``0 * inf``)."""
    if isinstance(layer, Linear):
        sq = ((a * a).sum(-1) + 1.0) * (g * g).sum(-1)

        def log_norm():  # ||a_k g_k^T||_F and the bias part: ||(a_k, 1)|| ||g_k||
            ones = torch.ones_like(a[..., :1])
            return _release.log_norms(torch.cat([a, ones], -1)) + _release.log_norms(g)

        def summed(c, keep=None):
            ga, aa = (g, a) if keep is None else (_release.mask_rows(g, keep), _release.mask_rows(a, keep))
            gc = ga * c.unsqueeze(-1)
            return torch.einsum("nko,nki->noi", gc, aa), gc.sum(1)

        return sq, log_norm, summed
    n, k = a.shape[:2]
    ks = layer.kernel_size
    cols = torch.nn.functional.unfold(a.reshape(n * k, *a.shape[2:]), ks)  # [nk, cin*ks*ks, P]
    gg = g.reshape(n * k, layer.out_channels, -1)  # [nk, cout, P]
    gw = torch.bmm(gg, cols.transpose(1, 2)).reshape(n, k, -1)  # per-layer per-sample grad
    gb = gg.sum(-1).reshape(n, k, -1)
    sq = (gw * gw).sum(-1) + (gb * gb).sum(-1)

    def log_norm():
        return _release.log_norms(torch.cat([gw, gb], -1))

    def summed(c, keep=None):
        gwk, gbk = (gw, gb) if keep is None else (_release.mask_rows(gw, keep), _release.mask_rows(gb, keep))
        return (gwk * c.unsqueeze(-1)).sum(1), (gbk * c.unsqueeze(-1)).sum(1)

    return sq, log_norm, summed


def _ghost(problem, w, x, y, weights, clip):
    model = problem.model
    wg = w.detach().requires_grad_(True)
    out, inputs, outputs = model.forward_batched(wg, x, record=True)
    losses = _loss(problem, out, y)
    grads_out = torch.autograd.grad(losses.sum(), outputs)
    layers = [(i, layer) for i, layer in enumerate(model.layers) if isinstance(layer, (Linear, Conv2d))]
    terms = [_layer_terms(layer, a.detach(), g) for (i, layer), a, g in zip(layers, inputs, grads_out)]
    sq = sum(t[0] for t in terms)
    c, keep = clip_factors(sq, clip), None
    if not bool(torch.isfinite(sq).all()):  # overflowed or non-finite records: the safe norms
        log_norm = torch.logsumexp(torch.stack([2 * t[1]() for t in terms]), 0) / 2
        keep = ~torch.isnan(log_norm)
        c = torch.where(torch.isfinite(sq), c, _release.factors_from_log_norms(log_norm, clip))
    c = c * weights
    result = torch.zeros(w.shape[0], model.dim, dtype=w.dtype, device=w.device)
    for (i, _), (_, _, summed) in zip(layers, terms):
        gw, gb = summed(c, keep)
        sw, sb = model.slices[i]
        result[:, sw] = gw.reshape(w.shape[0], -1)
        result[:, sb] = gb
    return result


def _loss(problem, out, y):
    from .problems import loss_from_outputs

    return loss_from_outputs(problem.loss, out, y)


def clipped_grad_sum(problem, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                     weights: torch.Tensor, clip: float | None, method: str = "ghost") -> torch.Tensor:
    """``sum_k weights[n, k] * clip(grad f0(w_n, x_nk))`` for every silo ``n`` -> ``[N, d]``.

    ``w`` is ``[N, d]`` (one iterate per silo) or ``[d]`` (broadcast). Weights encode the batch
    average (``1/K``) and padding masks (0 for padded rows).
    """
    if w.dim() == 1:
        w = w.expand(x.shape[0], -1)
    if method == "materialize":
        g = clip_rows(per_sample_grads(problem, w, x, y), clip)
        return torch.einsum("nk,nkd->nd", weights, g)  # non-finite rows are zero: no NaN here
    if method == "ghost":
        return _ghost(problem, w, x, y, weights, clip).detach()
    raise ValueError(f"method: must be one of {METHODS}, got {method!r}")


def clipped_per_sample(problem, w, x, y, clip):
    """Materialized clipped per-sample gradients ``[N, K, d]`` (the shuffle path needs them)."""
    if w.dim() == 1:
        w = w.expand(x.shape[0], -1)
    return clip_rows(per_sample_grads(problem, w, x, y), clip)
