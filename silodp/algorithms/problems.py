"""Composite federated problems ``f(w, x) = f0(w, x) + f1(w)`` (paper Assumptions 1-2).

``f0`` is a per-sample loss of a functional model (:mod:`.models`); ``f1`` is a convex regularizer
with a prox (:mod:`.prox`). The Lipschitz constant ``L`` of f0 is *enforced* by per-sample
clipping of the whole gradient to ``clip`` (see :mod:`.grads`); ``beta`` (smoothness) and ``mu``
(proximal-PL constant) are optional constants used for default step sizes and SPIDER noise.
"""

from __future__ import annotations

import math

import torch

from .federation import Federation
from .models import Model
from .prox import Zero

LOSSES = ("squared", "logistic", "softmax")


def loss_from_outputs(kind: str, out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-sample loss from model outputs ``out: [..., C]`` and labels ``y: [...]``."""
    if kind == "squared":
        return 0.5 * (out[..., 0] - y) ** 2
    if kind == "logistic":  # y in {0, 1}
        z = out[..., 0]
        return torch.nn.functional.softplus(z) - y * z
    if kind == "softmax":
        picked = torch.gather(out, -1, y.long().unsqueeze(-1)).squeeze(-1)
        return out.logsumexp(-1) - picked
    raise ValueError(f"loss: must be one of {LOSSES}, got {kind!r}")


def predict_from_outputs(kind: str, out: torch.Tensor) -> torch.Tensor:
    if kind == "logistic":
        return (out[..., 0] > 0).to(out.dtype)
    if kind == "softmax":
        return out.argmax(-1).to(out.dtype)
    return out[..., 0]


class Problem:
    """A composite problem: model + per-sample loss ``f0`` + regularizer ``f1`` + constants.

    Parameters
    ----------
    model : Model
    loss : "squared" | "logistic" | "softmax"
    regularizer : a :mod:`.prox` regularizer (default ``Zero()``)
    clip : per-sample l2 clip of the whole gradient of f0 (the Lipschitz constant ``L``);
        ``None`` means no clipping (only for non-private runs).
    beta : smoothness of f0 (optional); mu : proximal-PL constant (optional).
    """

    def __init__(self, model: Model, loss: str = "logistic", regularizer=None,
                 clip: float | None = 1.0, beta: float | None = None, mu: float | None = None):
        if loss not in LOSSES:
            raise ValueError(f"loss: must be one of {LOSSES}, got {loss!r}")
        if clip is not None and not (0 < float(clip) < math.inf):
            raise ValueError(f"clip: must be a finite number > 0 or None, got {clip}")
        for name, value in (("beta", beta), ("mu", mu)):
            if value is not None and not (0 < float(value) < math.inf):
                raise ValueError(f"{name}: must be a finite number > 0 or None, got {value}")
        self.model = model
        self.loss = loss
        self.regularizer = regularizer if regularizer is not None else Zero()
        self.clip = None if clip is None else float(clip)
        self.beta = None if beta is None else float(beta)
        self.mu = None if mu is None else float(mu)

    @property
    def dim(self) -> int:
        return self.model.dim

    def sample_loss(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """f0(w, x) for ONE sample (the function ``torch.func.grad`` differentiates)."""
        return loss_from_outputs(self.loss, self.model.forward(w, x), y)

    def losses(self, w: torch.Tensor, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """Per-sample f0 for ``x: [N, K, ...]``; ``w: [d]`` (shared) or ``[N, d]`` (per silo)."""
        if w.dim() == 1:
            return loss_from_outputs(self.loss, self.model.forward(w, x), y)
        return loss_from_outputs(self.loss, self.model.forward_batched(w, x), y)

    def smooth_objective(self, w: torch.Tensor, federation: Federation) -> torch.Tensor:
        """F^0(w) = (1/N) sum_i (1/n_i) sum_j f0(w, x_ij) (differentiable)."""
        per = self.losses(w, federation.x, federation.y) * federation.weights
        return per.sum() / federation.num_silos

    def objective(self, w: torch.Tensor, federation: Federation) -> float:
        """F(w) = F^0(w) + f1(w) on the federation's data."""
        with torch.no_grad():
            return float(self.smooth_objective(w, federation) + self.regularizer.value(w))

    def full_gradient(self, w: torch.Tensor, federation: Federation) -> torch.Tensor:
        """Unclipped gradient of F^0 at ``w`` (for metrics and reference solutions)."""
        w = w.detach().clone().requires_grad_(True)
        (g,) = torch.autograd.grad(self.smooth_objective(w, federation), w)
        return g

    def grad_mapping_norm(self, w: torch.Tensor, federation: Federation, eta: float) -> float:
        """||G_eta(w)|| with G_eta(w) = (w - prox_{eta f1}(w - eta grad F^0(w))) / eta (Sec. 3)."""
        g = self.full_gradient(w, federation)
        return float((w - self.regularizer.prox(w - eta * g, eta)).norm() / eta)

    def accuracy(self, w: torch.Tensor, federation: Federation) -> float | None:
        """Fraction of correct predictions (classification losses), else ``None``."""
        if self.loss == "squared":
            return None
        with torch.no_grad():
            pred = predict_from_outputs(self.loss, self.model.forward(w, federation.x))
            correct = (pred == federation.y).to(w.dtype) * federation.mask
            return float(correct.sum() / federation.mask.sum())
