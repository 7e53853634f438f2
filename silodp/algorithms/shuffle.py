"""Binomial shuffle protocols P_1D and P_vec (paper Alg. 4-5; Cheu, Joseph, Mao, Peng 2021, arXiv:2106.09805).

Each message is a vector ``x`` with ``||x|| <= bound``, so every coordinate lies in
``[-bound, bound]``. The randomizer shifts a coordinate to ``[0, 2 * bound]`` and runs the scalar
randomizer R_1D on that range (Alg. 5 line 4 shifts by L but then calls R_1D for range L; the
shifted value needs range 2L, which is what we use): ``xbar = floor(w g / (2 bound))``, stochastic
rounding ``+ Ber(frac)``, binomial noise ``+ Bin(b, p)``; the report is that many ones among
``g + b`` bits. The analyzer sums all bits of coordinate ``j`` over the ``n`` shuffled messages
and outputs ``(2 bound / g) * (total - p b n) - n * bound`` (Alg. 5 re-centres by ``L`` once; the
sum of ``n`` shifted inputs must be re-centred by ``n L``).

Levels: the scaled value is clamped to [0, g] before rounding, so every rounded level lies in
{0, ..., g} (floating point could otherwise put x = bound a hair above g), which is what the
certificate (:mod:`silodp.accounting.pvec`) assumes.

Rotation (``params.rotate``, the l2-aware protocol of :mod:`silodp.accounting.pvec`; not in the
paper's Alg 5): messages are rotated by a random sign diagonal and the normalized Walsh-Hadamard
transform (:func:`rotate`, O(d log d)), the protocol runs on the d' rotated coordinates with the
range ``rotated_bound(bound, d)`` (clamped), and the analyzer's estimate is rotated back
(:func:`unrotate`). The signs are public randomness, drawn from the run's generator.

Two paths:

* :func:`pvec_messages` -- exact message level, as Cheu et al.'s protocol sends it: every message
  is ONE bit labelled with its coordinate, ``(j, bit)``; each silo's report for coordinate ``j``
  is ``g + b`` such messages, ``count`` of them ones; the shuffler permutes all ``n d (g + b)``
  labelled bits of the invocation together (:func:`shuffle`). The analyzer's view is a uniformly
  ordered multiset of labelled bits, so it is a function of the per-coordinate totals of ones
  alone (the number of zeros per label is public): exactly what both certificates of
  :mod:`silodp.accounting.pvec` assume. (Permuting whole ``(g + b)``-bit reports instead would
  reveal the multiset of per-message counts, which the certificates do not cover.) For audits
  and small ``d``.
* :func:`pvec_fast` -- samples the analyzer's output distribution directly: the per-message
  rounding bits, plus ONE ``Bin(n b, p)`` draw per coordinate for the summed noise (a sum of
  independent ``Bin(b, p)`` is ``Bin(n b, p)``). Equal in distribution to the message path.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class BinomialParams:
    """Parameters of R_1D: ``g`` rounding levels, ``b`` noise trials, success probability ``p``;
    ``rotate``: P_vec rotates the messages first (module docstring)."""

    g: int
    b: int
    p: float
    rotate: bool = False

    def key(self) -> tuple:
        """(g, b, p, rotate): what the release ledger compares with the declaration."""
        return (int(self.g), int(self.b), float(self.p), bool(self.rotate))

    def __post_init__(self):
        if int(self.g) < 1 or int(self.b) < 0 or not 0.0 <= float(self.p) <= 0.5:
            raise ValueError(f"params: need g >= 1, b >= 0, p in [0, 1/2], got {self}")


def as_params(obj: Any) -> BinomialParams:
    """Accept :class:`BinomialParams`, the accounting layer's object, a dict or a (g, b, p) tuple."""
    if isinstance(obj, BinomialParams):
        return obj
    if isinstance(obj, dict):
        return BinomialParams(int(obj["g"]), int(obj["b"]), float(obj["p"]), bool(obj.get("rotate", False)))
    if isinstance(obj, (tuple, list)):
        return BinomialParams(int(obj[0]), int(obj[1]), float(obj[2]), bool(obj[3]) if len(obj) > 3 else False)
    return BinomialParams(int(obj.g), int(obj.b), float(obj.p), bool(getattr(obj, "rotate", False)))


def _check_bound(bound: float) -> float:
    if not float(bound) > 0:
        raise ValueError(f"bound: must be > 0, got {bound}")
    return float(bound)


def _scaled(x: torch.Tensor, bound: float, g: int) -> torch.Tensor:
    """Coordinates clamped to [-bound, bound], mapped to [0, g] (clamped again against round-off)."""
    return torch.clamp((torch.clamp(x, -bound, bound) + bound) * (g / (2 * bound)), 0.0, float(g))


def _hadamard(x: torch.Tensor) -> torch.Tensor:
    """Normalized Walsh-Hadamard transform H / sqrt(n) along the last axis (n a power of two;
    orthogonal and its own inverse), in O(n log n)."""
    n = x.shape[-1]
    lead = x.shape[:-1]
    h = 1
    while h < n:
        y = x.reshape(*lead, n // (2 * h), 2, h)
        x = torch.stack((y[..., 0, :] + y[..., 1, :], y[..., 0, :] - y[..., 1, :]), dim=-2).reshape(*lead, n)
        h *= 2
    return x / math.sqrt(n)


def rotation_signs(dimension: int, generator: torch.Generator, dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """The random sign diagonal D of one invocation, of the Walsh-Hadamard size d'."""
    from silodp.accounting.pvec import rotated_dimension

    size = rotated_dimension(dimension)
    return (torch.randint(0, 2, (size,), generator=generator) * 2 - 1).to(dtype)


def rotate(x: torch.Tensor, signs: torch.Tensor) -> torch.Tensor:
    """y = H D x / sqrt(d') for messages ``x: [..., d]`` (zero-padded to d' = signs.shape[-1])."""
    pad = signs.shape[-1] - x.shape[-1]
    return _hadamard(torch.nn.functional.pad(x, (0, pad)) * signs.to(x.dtype))


def unrotate(y: torch.Tensor, signs: torch.Tensor, dimension: int) -> torch.Tensor:
    """x = D H y / sqrt(d'), the first ``dimension`` coordinates (the inverse of :func:`rotate`)."""
    return (_hadamard(y) * signs.to(y.dtype))[..., :dimension]


def randomize(x: torch.Tensor, bound: float, params: BinomialParams, generator: torch.Generator) -> torch.Tensor:
    """R_vec on every message ``x: [..., d]`` at once -> counts of ones ``[..., d]`` (int64)."""
    bound = _check_bound(bound)
    scaled = _scaled(x, bound, params.g)
    floor = torch.floor(scaled)
    frac = torch.clamp(scaled - floor, 0.0, 1.0)
    rounded = floor + (torch.rand(x.shape, generator=generator, dtype=x.dtype) < frac).to(x.dtype)
    noise = torch.binomial(torch.full(x.shape, float(params.b), dtype=torch.float64),
                           torch.full(x.shape, float(params.p), dtype=torch.float64), generator=generator)
    return (rounded.to(torch.float64) + noise).long()


def encode(counts: torch.Tensor, params: BinomialParams) -> torch.Tensor:
    """Labelled one-bit messages: ``counts: [n, d]`` -> ``[n d (g + b), 2]`` rows ``(coordinate,
    bit)``, ``counts[i, j]`` ones among the ``g + b`` messages of silo ``i`` for coordinate ``j``
    (their order is irrelevant: :func:`shuffle` permutes every message)."""
    n, d = counts.shape
    width = params.g + params.b
    bits = (torch.arange(width) < counts.unsqueeze(-1)).to(torch.int64)
    labels = torch.arange(d).view(1, d, 1).expand(n, d, width)
    return torch.stack((labels.reshape(-1), bits.reshape(-1)), dim=-1)


def shuffle(messages: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The shuffler: one uniform permutation of ALL the labelled messages ``[N, 2]`` of an invocation."""
    return messages[torch.randperm(messages.shape[0], generator=generator)]


def tally(messages: torch.Tensor, dimension: int) -> torch.Tensor:
    """The analyzer's sufficient statistic: the total of ones per coordinate label, ``[dimension]``."""
    return torch.bincount(messages[:, 0], weights=messages[:, 1].to(torch.float64), minlength=dimension)


def analyze(totals: torch.Tensor, num_messages: int, bound: float, params: BinomialParams) -> torch.Tensor:
    """A_vec from per-coordinate totals of ones: unbiased estimate of the sum of the inputs."""
    scale = 2 * bound / params.g
    return scale * (totals.to(torch.float64) - params.p * params.b * num_messages) - num_messages * bound


def pvec_messages(x: torch.Tensor, bound: float, params: Any, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact P_vec on messages ``x: [n, d]``: returns (estimate ``[d]``, the shuffled labelled bits
    ``[n d (g + b), 2]``: the analyzer's whole view)."""
    params = as_params(params)
    view = shuffle(encode(randomize(x, bound, params, generator), params), generator)
    return analyze(tally(view, x.shape[-1]), x.shape[0], bound, params).to(x.dtype), view


def pvec_fast(x: torch.Tensor, bound: float, params: Any, generator: torch.Generator,
              weights: torch.Tensor | None = None) -> torch.Tensor:
    """P_vec's output for messages ``x: [..., d]`` (``weights`` 0/1 selects which rows are sent)."""
    params = as_params(params)
    bound = _check_bound(bound)
    scaled = _scaled(x, bound, params.g)
    floor = torch.floor(scaled)
    rounded = floor + (torch.rand(x.shape, generator=generator, dtype=x.dtype) < scaled - floor).to(x.dtype)
    if weights is not None:
        rounded = rounded * weights.unsqueeze(-1)
        n = int(weights.sum())
    else:
        n = x[..., 0].numel()
    totals = rounded.reshape(-1, x.shape[-1]).sum(0).to(torch.float64)
    d = x.shape[-1]
    totals = totals + torch.binomial(torch.full((d,), float(n * params.b), dtype=torch.float64),
                                     torch.full((d,), float(params.p), dtype=torch.float64), generator=generator)
    return analyze(totals, n, bound, params).to(x.dtype)


def pvec_variance(x: torch.Tensor, bound: float, params: Any) -> float:
    """Exact ``E||P_vec(x) - sum x||^2`` for messages ``x: [n, d]``:
    ``(2 bound / g)^2 * sum_j [sum_i f_ij (1 - f_ij) + n b p (1 - p)]`` with ``f`` the rounding fractions."""
    params = as_params(params)
    scaled = _scaled(x, _check_bound(bound), params.g)
    frac = scaled - torch.floor(scaled)
    n, d = x.shape
    per = (frac * (1 - frac)).sum() + d * n * params.b * params.p * (1 - params.p)
    return float((2 * bound / params.g) ** 2 * per)
