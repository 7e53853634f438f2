"""Convex regularizers f1 (paper Assumption 2) and their proximal operators.

``prox(v, eta) = argmin_y  eta * f1(y) + ||y - v||^2 / 2`` (paper, Notation). All operators act on
the last dimension, so a batch ``[..., d]`` of points is handled in one call.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def _check_nonneg(name: str, value: float) -> float:
    value = float(value)
    if not value >= 0 or value == float("inf"):
        raise ValueError(f"{name}: must be a finite number >= 0, got {value}")
    return value


def _soft_threshold(v: torch.Tensor, t: float) -> torch.Tensor:
    return torch.sign(v) * torch.clamp(v.abs() - t, min=0.0)


@dataclass(frozen=True)
class Zero:
    """f1 = 0; the prox is the identity."""

    def value(self, w: torch.Tensor) -> torch.Tensor:
        return torch.zeros(w.shape[:-1], dtype=w.dtype)

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        return v.clone()


@dataclass(frozen=True)
class L1:
    """f1(w) = lam * ||w||_1; prox is soft-thresholding at eta * lam."""

    lam: float

    def __post_init__(self):
        _check_nonneg("lam", self.lam)

    def value(self, w: torch.Tensor) -> torch.Tensor:
        return self.lam * w.abs().sum(-1)

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        return _soft_threshold(v, eta * self.lam)


@dataclass(frozen=True)
class L2Squared:
    """f1(w) = (lam / 2) * ||w||^2; prox is shrinkage by 1 / (1 + eta * lam)."""

    lam: float

    def __post_init__(self):
        _check_nonneg("lam", self.lam)

    def value(self, w: torch.Tensor) -> torch.Tensor:
        return 0.5 * self.lam * (w * w).sum(-1)

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        return v / (1.0 + eta * self.lam)


@dataclass(frozen=True)
class ElasticNet:
    """f1(w) = l1 * ||w||_1 + (l2 / 2) * ||w||^2."""

    l1: float
    l2: float

    def __post_init__(self):
        _check_nonneg("l1", self.l1)
        _check_nonneg("l2", self.l2)

    def value(self, w: torch.Tensor) -> torch.Tensor:
        return self.l1 * w.abs().sum(-1) + 0.5 * self.l2 * (w * w).sum(-1)

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        return _soft_threshold(v, eta * self.l1) / (1.0 + eta * self.l2)


@dataclass(frozen=True)
class L2Ball:
    """Indicator of {w : ||w - center|| <= radius} (center 0); prox is Euclidean projection."""

    radius: float

    def __post_init__(self):
        if not float(self.radius) > 0:
            raise ValueError(f"radius: must be > 0, got {self.radius}")

    def value(self, w: torch.Tensor) -> torch.Tensor:
        inside = w.norm(dim=-1) <= self.radius * (1 + 1e-9)
        return torch.where(inside, 0.0, float("inf")).to(w.dtype)

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        norm = v.norm(dim=-1, keepdim=True)
        return v * torch.clamp(self.radius / torch.clamp(norm, min=1e-300), max=1.0)


@dataclass(frozen=True)
class Box:
    """Indicator of the box [lower, upper]^d; prox is coordinatewise clamping."""

    lower: float
    upper: float

    def __post_init__(self):
        if not float(self.lower) <= float(self.upper):
            raise ValueError(f"lower: must be <= upper, got {self.lower} > {self.upper}")

    def value(self, w: torch.Tensor) -> torch.Tensor:
        tol = 1e-9 * max(1.0, abs(self.lower), abs(self.upper))
        inside = ((w >= self.lower - tol) & (w <= self.upper + tol)).all(-1)
        return torch.where(inside, 0.0, float("inf")).to(w.dtype)

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        return torch.clamp(v, self.lower, self.upper)


@dataclass(frozen=True)
class GroupLasso:
    """f1(w) = lam * sum_g ||w_g||_2 over disjoint consecutive groups of the given sizes."""

    lam: float
    group_sizes: tuple[int, ...]

    def __post_init__(self):
        _check_nonneg("lam", self.lam)
        if not self.group_sizes or min(self.group_sizes) < 1:
            raise ValueError(f"group_sizes: must be positive integers, got {self.group_sizes}")

    def _ids(self, d: int, device) -> torch.Tensor:
        if sum(self.group_sizes) != d:
            raise ValueError(f"group_sizes: must sum to the dimension {d}, got {sum(self.group_sizes)}")
        sizes = torch.tensor(self.group_sizes, device=device)
        return torch.repeat_interleave(torch.arange(len(self.group_sizes), device=device), sizes)

    def _group_norms(self, w):
        ids = self._ids(w.shape[-1], w.device)
        sq = torch.zeros(*w.shape[:-1], len(self.group_sizes), dtype=w.dtype, device=w.device)
        return sq.index_add_(-1, ids, w * w).sqrt(), ids

    def value(self, w: torch.Tensor) -> torch.Tensor:
        return self.lam * self._group_norms(w)[0].sum(-1)

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        norms, ids = self._group_norms(v)
        scale = torch.clamp(1 - eta * self.lam / torch.clamp(norms, min=1e-300), min=0.0)
        return v * scale.index_select(-1, ids)


REGULARIZERS = {
    "none": Zero,
    "l1": L1,
    "l2": L2Squared,
    "elastic-net": ElasticNet,
    "l2-ball": L2Ball,
    "box": Box,
    "group-lasso": GroupLasso,
}
