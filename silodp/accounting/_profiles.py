"""Exact privacy profiles of discrete pairs of distributions.

A :class:`DiscreteProfile` holds the privacy losses ln(P(x)/Q(x)) sorted in decreasing order with
cumulative masses of P and Q, so that delta(eps) = sum_{loss > eps} P - e^eps Q is a binary
search, and eps(delta) a bisection over those. Mass that was not enumerated is charged to delta
in full, so every answer is an upper bound.
"""

from __future__ import annotations

import math

import numpy as np


class DiscreteProfile:
    """Hockey-stick profile of (P, Q) given log-masses on a common (finite) support."""

    def __init__(self, log_p: np.ndarray, log_q: np.ndarray, left_out: float = 0.0) -> None:
        with np.errstate(invalid="ignore"):
            loss = np.where(np.isneginf(log_p), -np.inf, log_p - log_q)
        order = np.argsort(-loss, kind="stable")
        self.losses = loss[order]
        self.cum_p = np.cumsum(np.exp(log_p[order]))
        self.cum_q = np.cumsum(np.exp(log_q[order]))
        self.left_out = float(max(0.0, left_out))

    def delta(self, eps: float) -> float:
        k = int(np.searchsorted(-self.losses, -eps, side="left"))  # entries with loss > eps
        if k == 0:
            return min(1.0, self.left_out)
        head = self.cum_p[k - 1] - math.exp(eps) * self.cum_q[k - 1]
        return float(min(1.0, max(0.0, head) + self.left_out))

    def epsilon(self, delta: float, hi: float = 50.0) -> float:
        """Smallest eps in [0, hi] (rounded up) with delta(eps) <= ``delta``; inf if none."""
        if self.delta(hi) > delta:
            return math.inf
        lo = 0.0
        if self.delta(lo) <= delta:
            return 0.0
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            lo, hi = (lo, mid) if self.delta(mid) <= delta else (mid, hi)
        return hi
