"""The parameters of the binomial vector-summation protocol P_vec (paper Alg 4-5, Thm D.2; Cheu,
Joseph, Mao & Peng 2021) that both certificates read (:mod:`silodp.accounting.pvec`, the
per-coordinate PLD; :mod:`silodp.accounting.pvec_l2`, the l2-aware Renyi moments): the levels g,
the rotation's range, the binomial noise window, and the groups of invocations.

Rotation (the l2-aware protocol). Before quantization every message is multiplied by a random
sign diagonal D and the normalized Walsh-Hadamard matrix H / sqrt(d') (d' the next power of two;
:func:`silodp.algorithms.shuffle.rotate`). Each rotated coordinate is a Rademacher sum
sum_i +-x_i / sqrt(d') of variance ||x||^2 / d', so by Hoeffding and a union bound over d'
coordinates P[max_j |y_j| > gamma] <= beta for gamma = L sqrt(2 ln(2 d' / beta) / d')
(:func:`rotated_bound`). The rotated coordinates are clamped to [-gamma, gamma] before
quantization, so the certificate above holds for *every* sign draw with range gamma instead of
L (the d' coordinates of the rotated message): the rotation failure costs no delta, only a bias
on the (at most beta) clamped messages. The noise per coordinate then scales as gamma^2 =
O(L^2 log(d / beta) / d) instead of L^2.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from silodp._validation import check_count, check_positive, check_probability

#: Rotation failure probability per message (bias only, see the module docstring).
ROTATION_BETA = 1e-3
#: Levels g = max(ceil(sqrt(messages)), MIN_LEVELS): rounding variance at most one message range.
MIN_LEVELS = 4


def levels(messages: int) -> int:
    """g for ``messages`` messages (see :data:`MIN_LEVELS`)."""
    return max(math.ceil(math.sqrt(check_count("messages", messages))), MIN_LEVELS)


def rotated_dimension(dimension: int) -> int:
    """d' = the smallest power of two >= d (the Walsh-Hadamard size)."""
    return 1 << (check_count("dimension", dimension) - 1).bit_length()


def rotated_bound(bound: float, dimension: int, beta: float = ROTATION_BETA) -> float:
    """gamma = L sqrt(2 ln(2 d' / beta) / d') (Hoeffding + union bound; module docstring), at most L."""
    L = check_positive("bound", bound)
    b = check_probability("beta", beta)
    dp = rotated_dimension(dimension)
    return min(L, L * math.sqrt(2.0 * math.log(2.0 * dp / b) / dp))


def log_pmf_window(trials: int, sds: float, extra: int = 0) -> tuple[int, np.ndarray, float]:
    """(lo, log Bin(trials, 1/2)(x) for x = lo..hi (+ ``extra`` points beyond hi, at most to
    ``trials``), a bound on the mass outside lo..hi) on the symmetric +-``sds`` standard deviations
    window, from the ratios B(x+1)/B(x) = (m - x)/(x + 1) accumulated from the mode, normalized to
    the window's mass."""
    m = trials
    sd = 0.5 * math.sqrt(m)
    lo = max(0, math.floor(m / 2 - sds * sd))
    hi = m - lo
    x = np.arange(lo, min(m, hi + extra), dtype=float)
    steps = np.log(m - x) - np.log(x + 1.0)  # log B(x+1) - log B(x), x = lo..
    c = np.concatenate([[0.0], np.cumsum(steps)])
    # Hoeffding, P[X <= m/2 - t] <= exp(-2 t^2 / m), for each side cut (bdtr loses accuracy at huge m)
    outside = 2.0 * math.exp(-2.0 * (m / 2 - lo + 1) ** 2 / m) if lo > 0 else 0.0
    c -= c[:hi - lo + 1].max()
    c -= math.log(float(np.sum(np.exp(c[:hi - lo + 1])))) - math.log1p(-outside)  # window: 1 - outside
    return lo, c, outside


def certified_dimension(dimension: int, rotate: bool) -> int:
    """Coordinates the certificate composes: d, or d' with the rotation."""
    return rotated_dimension(dimension) if rotate else check_count("dimension", dimension)


@dataclasses.dataclass(frozen=True)
class PvecGroup:
    """The P_vec invocations of one message group as the certificate sees them: ``uses`` adaptive
    invocations a record can enter; its multiplicity in each is 1, or Bin(batch, 1/n) with
    replacement (``with_replacement``)."""

    uses: int
    g: int
    b: int
    messages: int
    dimension: int
    with_replacement: bool = False
    batch_size: int = 1
    dataset_size: int = 1
    #: l2 bound on one message's level shift (:func:`silodp.accounting.pvec_l2.shift_l2`); None:
    #: only the per-coordinate certificate applies
    l2: float | None = None

    def __post_init__(self) -> None:
        """Fail closed: counts are integers (uses >= 0, the rest >= 1), the l2 bound > 0 and finite."""
        object.__setattr__(self, "uses", check_count("uses", self.uses, minimum=0))
        for name in ("g", "b", "messages", "dimension", "batch_size", "dataset_size"):
            object.__setattr__(self, name, check_count(name, getattr(self, name)))
        if self.l2 is not None:
            object.__setattr__(self, "l2", check_positive("l2", self.l2))
