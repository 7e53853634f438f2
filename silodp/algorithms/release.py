"""The one release primitive: the only code in silodp that clips, noises and releases.

Every path that lets a silo's records leave goes through these functions: the simulator's channel
(:meth:`silodp.algorithms.base.Context.term` / ``send``), the silo service, ``IsrlDpMod`` /
:func:`silodp.integrations.flower.privatize`, the SecAgg+ silo (:mod:`silodp.integrations.secagg`)
and the Opacus-in-a-silo path. Each treats every number the server sent as hostile:

* **A non-finite per-record term is a zero contribution of that record.** A finite model can make
  one record's logit ``inf - inf = NaN`` (weights ``MAX / t`` aimed at the records above a
  threshold): its gradient, its norm and the clip factor ``min(1, C / NaN)`` would all be NaN, and
  a NaN factor turns the whole message NaN, a one-bit release of that record. Here such a record's
  rows are masked to zero before any product (``0 * inf`` would be NaN again), so the clipped term
  stays in the ball of radius C whatever the record: the sensitivity the accountant charges
  (C add/remove, 2C replace-one; paper Definition 4, the clipped sum of Alg 1 line 7) holds. A
  whole-message zero would not do: it moves the silo's sum by up to K C.
* **Norms never overflow.** Squared norms are summed as usual (bit for bit the same clip on every
  ordinary record); a record whose squared norm overflows or underflows is normed again by scaling
  with its largest entry (log-domain across layers), so its clip factor is ``min(1, C / ||g||)``
  exactly as for any other record.
* **Noise first, then anything the server sent.** :func:`gaussian_release` computes
  ``offset + (term + N(0, std^2 I))`` in float64: the clipped term meets the noise before it is
  combined with a server value. ``(offset + term) + noise`` would round the clipped term onto the
  server's float grid first: with ``offset`` at ``1.5 * 2**51`` the centre moves by up to about
  2C for a term clipped to C, doubling the sensitivity the certificate assumed (issue 34, leak 4).
  Rounding *after* the noise is post-processing of the noised value.
* **A non-finite message is never released** (:class:`Refusal` "non-finite"), and a server model the
  silo cannot evaluate finitely on *any* record of its public input domain is refused by
  :func:`check_model`, a data-independent interval check that never looks at the records.

Refusals carry one of the fixed texts of :data:`REFUSALS`: nothing computed from records is ever in
an error.
"""

from __future__ import annotations

import math

import torch

from .models import Conv2d, Flatten, Linear, MaxPool2d, Model, ReLU, apply_activation

#: The fixed texts of every refusal the primitive raises (code -> text).
REFUSALS: dict[str, str] = {
    "model": "refused: the server's model is not finite on this silo's public input domain",
    "shape": "refused: the server's model does not have this silo's model shape",
    "non-finite": "refused: the release would not be finite; nothing was released",
    "noise": "refused: the noise standard deviation must be finite and >= 0",
}


class Refusal(ValueError):
    """The primitive refuses to release; ``code`` is a key of :data:`REFUSALS` and the message its
    fixed text (never a number computed from records)."""

    def __init__(self, code: str) -> None:
        super().__init__(REFUSALS[code])
        self.code = code


# -- norms ------------------------------------------------------------------------------------
def log_norms(x: torch.Tensor) -> torch.Tensor:
    """``log ||row||_2`` of each row (last dim) of ``x``, without overflow or underflow: the row is
    scaled by its largest magnitude first. ``-inf`` for a zero row, NaN for a row holding a
    non-finite value."""
    m = x.abs().amax(-1)
    safe = torch.where(m > 0, m, torch.ones_like(m))
    scaled = x / safe.unsqueeze(-1)
    out = torch.log(safe) + 0.5 * torch.log((scaled * scaled).sum(-1))
    out = torch.where(m > 0, out, torch.full_like(out, -math.inf))
    return torch.where(torch.isfinite(x).all(-1), out, torch.full_like(out, math.nan))


def factors_from_log_norms(log_norm: torch.Tensor, clip: float | torch.Tensor | None) -> torch.Tensor:
    """``min(1, C / ||g||)`` from ``log ||g||``; 0 where the norm is NaN (a non-finite record)."""
    if clip is None:
        out = torch.ones_like(log_norm)
    else:
        c = torch.as_tensor(clip, dtype=log_norm.dtype, device=log_norm.device)
        out = torch.exp(torch.clamp(torch.log(c) - log_norm, max=0.0))
        out = torch.where(torch.isneginf(log_norm), torch.ones_like(out), out)  # a zero row stays zero, even at C 0
    return torch.where(torch.isnan(log_norm), torch.zeros_like(out), out)


def clip_factors(sq_norms: torch.Tensor, clip: float | torch.Tensor | None) -> torch.Tensor:
    """``min(1, C / ||g||)`` from squared norms (1 where ``clip`` is None), 0 where the squared
    norm is not finite. Rows whose squared norm overflowed are normed again by the caller
    (:func:`clip_rows`, the ghost kernels) through :func:`log_norms`."""
    ok = torch.isfinite(sq_norms)
    if clip is None:
        return ok.to(sq_norms.dtype)
    out = torch.clamp(clip / torch.clamp(sq_norms.sqrt(), min=1e-30), max=1.0)
    return torch.where(ok, out, torch.zeros_like(out))


def mask_rows(x: torch.Tensor, keep: torch.Tensor) -> torch.Tensor:
    """``x`` with the rows where ``keep`` is False set to zero (no ``0 * inf`` products)."""
    return torch.where(keep.unsqueeze(-1), x, torch.zeros((), dtype=x.dtype, device=x.device))


def clip_rows(g: torch.Tensor, clip: float | torch.Tensor | None) -> torch.Tensor:
    """Each row (last dim) of ``g`` scaled to l2 norm at most ``clip`` (``clip`` None: unscaled);
    a row holding a non-finite value becomes zero; a row whose squared norm overflows or underflows
    is clipped through its scaled norm (:func:`log_norms`). Ordinary rows are clipped bit for bit
    as ``g * min(1, C / sqrt(sum g^2))``."""
    if clip is not None and not isinstance(clip, torch.Tensor):
        clip = float(clip)
    sq = (g * g).sum(-1)
    redo = ~torch.isfinite(sq) | ((sq == 0) & (g != 0).any(-1))
    if not bool(redo.any()):
        return g * clip_factors(sq, clip).unsqueeze(-1)
    g = mask_rows(g, torch.isfinite(g).all(-1))
    slow = g * factors_from_log_norms(log_norms(g), clip).unsqueeze(-1)  # |g_i| * f <= |g_i|: no overflow
    return torch.where(redo.unsqueeze(-1), slow, g * clip_factors(sq, clip).unsqueeze(-1))


def clip_update(delta: torch.Tensor, clip: float) -> torch.Tensor:
    """One flat update clipped to l2 norm ``clip`` (a non-finite update becomes zero)."""
    return clip_rows(delta.reshape(1, -1), clip).reshape(delta.shape)


def all_finite(t: torch.Tensor) -> bool:
    """Whether every entry of ``t`` is finite: one sum first (a sum is finite only if every
    term is: an infinity or NaN anywhere makes it infinite or NaN, IEEE 754), the entrywise test
    only when the sum is not finite (an overflow of finite entries is then told apart)."""
    return math.isfinite(float(t.sum())) or bool(torch.isfinite(t).all())


def noise_std(noise_multiplier: float, clip: float) -> float:
    """The Gaussian's std for ``noise_multiplier`` z at clip norm C: z C, rounded up until
    ``std / C >= z`` (toward more privacy: a ledger charges z, the release draws std)."""
    std = noise_multiplier * clip
    while std / clip < noise_multiplier:
        std = math.nextafter(std, math.inf)
    return std


# -- the release -------------------------------------------------------------------------------
def gaussian_release(term: torch.Tensor, std: float | torch.Tensor, generator: torch.Generator | None,
                     offset: torch.Tensor | None = None, *, noise: torch.Tensor | None = None,
                     dtype: torch.dtype | None = None) -> torch.Tensor:
    """``offset + (term + N(0, std^2 I))`` in float64 (see the module docstring): the clipped
    ``term`` meets the noise before anything the server sent. ``noise`` (already scaled) replaces
    the draw where a caller draws it itself (the simulator's channel, the stacked-trials
    instruments). ``dtype``: the released value's dtype (default float64): the float64 result
    rounded once to ``dtype``. Raises :class:`Refusal` "non-finite" when the result is not finite
    in that dtype (a finite float64 sum can overflow float32): nothing is released.

    A float32 ``term`` and float32 ``noise`` with no offset, released as float32, are added in
    float32 directly: IEEE addition rounded to 24 bits equals the float64 sum (53 bits) rounded to
    24 bits, double rounding being innocuous when p' >= 2p + 2 (Figueroa, "When is double rounding
    innocuous?", SIGNUM Newsl. 30(3), 1995; 53 >= 50), so the released bits are those of the float64
    route. The sum is written into ``noise``, as is a result rounded to ``dtype`` when ``noise`` has
    that dtype and its shape (the caller hands ``noise`` over: no further use)."""
    if not isinstance(std, torch.Tensor) and not (math.isfinite(float(std)) and float(std) >= 0):
        raise Refusal("noise")
    if noise is None:
        scale = std.to(torch.float64) if isinstance(std, torch.Tensor) else float(std)
        noise = torch.randn(term.shape, generator=generator, dtype=torch.float64, device=term.device) * scale
    if offset is None and dtype == torch.float32 == term.dtype == noise.dtype and noise.shape == term.shape:
        out = noise.add_(term)  # term + noise, rounded once to float32 (the docstring's equality)
    else:
        if noise.shape == term.shape:  # a fresh float64 copy, the noise added in place (in float64)
            out = term.to(torch.float64, copy=True)
            out += noise
        else:
            out = term.to(torch.float64) + noise.to(torch.float64)
        if offset is not None:  # offset + out, in float64 (IEEE addition commutes: in place where it fits)
            if offset.is_floating_point() and torch.broadcast_shapes(offset.shape, out.shape) == out.shape:
                out += offset
            else:
                out = offset.to(torch.float64) + out
        if dtype == noise.dtype and noise.shape == out.shape:
            out = noise.copy_(out)  # rounded to dtype once, as out.to(dtype), into the noise handed over
        elif dtype is not None:
            out = out.to(dtype)
    if not all_finite(out):
        raise Refusal("non-finite")
    return out


# -- the server's model ------------------------------------------------------------------------
def _check_shape(model: Model, w: torch.Tensor) -> torch.Tensor:
    if not isinstance(w, torch.Tensor) or tuple(w.shape) != (model.dim,):
        raise Refusal("shape")
    if not bool(torch.isfinite(w).all()):
        raise Refusal("model")
    return w.detach().to(torch.float64)


def _interval_forward(model: Model, w: torch.Tensor, bound: float):
    """Bounds over every input with ``|x_i| <= bound`` (interval arithmetic: exact for affine maps,
    monotone for ReLU and max-pool): per layer, the shape entering it and, for a parametric layer,
    the elementwise bound on its input's magnitude; then the output box ``(lo, hi)``."""
    lo = torch.full(model.input_shape, -float(bound), dtype=torch.float64)
    hi = -lo
    trace = []
    for i, layer in enumerate(model.layers):
        trace.append((tuple(lo.shape), torch.maximum(lo.abs(), hi.abs())))
        if isinstance(layer, (Linear, Conv2d)):
            W, b = model.params(w, i)
            c, r = (lo + hi) / 2, (hi - lo) / 2
            if isinstance(layer, Linear):
                c, r = c @ W.T + b, r @ W.abs().T
            else:
                c = torch.nn.functional.conv2d(c[None], W, b)[0]
                r = torch.nn.functional.conv2d(r[None], W.abs())[0]
            lo, hi = c - r, c + r
        elif isinstance(layer, (ReLU, MaxPool2d, Flatten)):
            lo, hi = apply_activation(layer, lo), apply_activation(layer, hi)
        else:
            raise Refusal("model")
    return trace, lo, hi


def _output_grad_bound(loss: str, lo: torch.Tensor, hi: torch.Tensor, bound: float) -> torch.Tensor:
    """Elementwise bound on |d loss / d output| over the output box (labels of squared loss in
    ``[-bound, bound]``; logistic and softmax: at most 1)."""
    if loss == "squared":
        return torch.maximum(lo.abs(), hi.abs()) + float(bound)
    return torch.ones_like(lo)


def _finite(*tensors: torch.Tensor) -> bool:
    return all(bool(torch.isfinite(t).all()) for t in tensors)


def check_model(problem, w: torch.Tensor, input_bound: float) -> None:
    """Refuse (:class:`Refusal`) a server model ``w`` the silo cannot evaluate finitely.

    ``w`` must have the model's shape and be finite, and every forward activation, output gradient
    and per-layer parameter gradient must be finite for *every* input in the public box
    ``|x_i| <= input_bound``: interval arithmetic forward through the layers, then back
    (``|g_in| <= |W|^T |g_out|``; ReLU and max-pool pass at most ``|g_out|``; a weight's gradient is
    at most ``|g_out| |a|``). The check reads only ``w``, the architecture and the public bound, never
    a record: a refusal reveals nothing about the silo's data. The box should hold the caller's records
    (the silo service uses ``silodp.service.core.INPUT_BOUND``); a record outside it is still safe,
    as a non-finite term is a zero contribution (:func:`clip_rows`)."""
    if not (math.isfinite(float(input_bound)) and float(input_bound) > 0):
        raise ValueError(f"input_bound: must be positive and finite, got {input_bound!r}")
    model: Model = problem.model
    if not isinstance(w, torch.Tensor) or tuple(w.shape) != (model.dim,):
        raise Refusal("shape")
    w = w.detach().to(torch.float64)
    if not _finite(w):
        raise Refusal("model")
    with torch.no_grad():
        trace, lo, hi = _interval_forward(model, w, input_bound)
        if not _finite(lo, hi):
            raise Refusal("model")
        g = _output_grad_bound(problem.loss, lo, hi, input_bound)
        for i in reversed(range(len(model.layers))):
            layer, (shape, a) = model.layers[i], trace[i]
            if isinstance(layer, Linear):
                W, _ = model.params(w, i)
                grad_w, g = g[:, None] * a[None, :], g @ W.abs()
            elif isinstance(layer, Conv2d):
                W, _ = model.params(w, i)
                grad_w = torch.nn.functional.conv2d(a[:, None], g[:, None]).abs()
                g = torch.nn.functional.conv_transpose2d(g[None], W.abs())[0]
            elif isinstance(layer, MaxPool2d):  # each input in one window; the cropped rest gets none
                up = g.repeat_interleave(layer.size, -1).repeat_interleave(layer.size, -2)
                g = torch.zeros(shape, dtype=g.dtype)
                g[..., :up.shape[-2], :up.shape[-1]] = up
                continue
            else:  # ReLU passes at most |g|; Flatten reshapes
                g = g.reshape(shape)
                continue
            if not _finite(grad_w, g):
                raise Refusal("model")


__all__ = ["REFUSALS", "Refusal", "all_finite", "check_model", "clip_factors", "clip_rows", "clip_update", "factors_from_log_norms",
           "gaussian_release", "log_norms", "mask_rows", "noise_std"]
