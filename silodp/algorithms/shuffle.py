"""Binomial shuffle protocols P_1D and P_vec (paper Alg. 4-5; Cheu, Joseph, Mao, Peng 2021, arXiv:2106.09805).

Each message is a vector ``x`` with ``||x|| <= bound``, so every coordinate lies in
``[-bound, bound]``. The randomizer shifts a coordinate to ``[0, 2 * bound]`` and runs the scalar
randomizer R_1D on that range (Alg. 5 line 4 shifts by L but then calls R_1D for range L; the
shifted value needs range 2L, which is what we use): ``xbar = floor(w g / (2 bound))``, stochastic
rounding ``+ Ber(frac)``, binomial noise ``+ Bin(b, p)``; the report is that many ones among
``g + b`` bits. The analyzer sums all bits of coordinate ``j`` over the ``n`` shuffled messages
and outputs ``(2 bound / g) * (total - p b n) - n * bound`` (Alg. 5 re-centres by ``L`` once; the
sum of ``n`` shifted inputs must be re-centred by ``n L``).

Two paths:

* :func:`pvec_messages` -- exact message level: bit vectors, a uniform shuffle per coordinate,
  the analyzer. For audits and small ``d``.
* :func:`pvec_fast` -- samples the analyzer's output distribution directly: the per-message
  rounding bits, plus ONE ``Bin(n b, p)`` draw per coordinate for the summed noise (a sum of
  independent ``Bin(b, p)`` is ``Bin(n b, p)``). Equal in distribution to the message path.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class BinomialParams:
    """Parameters of R_1D: ``g`` rounding levels, ``b`` noise trials, success probability ``p``."""

    g: int
    b: int
    p: float

    def __post_init__(self):
        if int(self.g) < 1 or int(self.b) < 0 or not 0.0 <= float(self.p) <= 0.5:
            raise ValueError(f"params: need g >= 1, b >= 0, p in [0, 1/2], got {self}")


def as_params(obj) -> BinomialParams:
    """Accept :class:`BinomialParams`, the accounting layer's object, a dict or a (g, b, p) tuple."""
    if isinstance(obj, BinomialParams):
        return obj
    if isinstance(obj, dict):
        return BinomialParams(int(obj["g"]), int(obj["b"]), float(obj["p"]))
    if isinstance(obj, (tuple, list)):
        return BinomialParams(int(obj[0]), int(obj[1]), float(obj[2]))
    return BinomialParams(int(obj.g), int(obj.b), float(obj.p))


def _check_bound(bound: float) -> float:
    if not float(bound) > 0:
        raise ValueError(f"bound: must be > 0, got {bound}")
    return float(bound)


def randomize(x: torch.Tensor, bound: float, params: BinomialParams, generator: torch.Generator) -> torch.Tensor:
    """R_vec on every message ``x: [..., d]`` at once -> counts of ones ``[..., d]`` (int64)."""
    bound = _check_bound(bound)
    scaled = (torch.clamp(x, -bound, bound) + bound) * (params.g / (2 * bound))
    floor = torch.floor(scaled)
    frac = torch.clamp(scaled - floor, 0.0, 1.0)
    rounded = floor + (torch.rand(x.shape, generator=generator, dtype=x.dtype) < frac).to(x.dtype)
    noise = torch.binomial(torch.full(x.shape, float(params.b), dtype=torch.float64),
                           torch.full(x.shape, float(params.p), dtype=torch.float64), generator=generator)
    return (rounded.to(torch.float64) + noise).long()


def encode(counts: torch.Tensor, params: BinomialParams, generator: torch.Generator) -> torch.Tensor:
    """Unary reports: ``counts: [n, d]`` -> bits ``[n, d, g + b]`` with that many ones, in random order."""
    width = params.g + params.b
    bits = (torch.arange(width) < counts.unsqueeze(-1)).to(torch.int8)
    order = torch.rand(bits.shape, generator=generator).argsort(-1)
    return torch.gather(bits, -1, order)


def shuffle(bits: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """The shuffler: an independent uniform permutation of the ``n`` messages of each coordinate."""
    n, d = bits.shape[:2]
    order = torch.rand(n, d, generator=generator).argsort(0)
    return torch.gather(bits, 0, order.unsqueeze(-1).expand_as(bits))


def analyze(totals: torch.Tensor, num_messages: int, bound: float, params: BinomialParams) -> torch.Tensor:
    """A_vec from per-coordinate totals of ones: unbiased estimate of the sum of the inputs."""
    scale = 2 * bound / params.g
    return scale * (totals.to(torch.float64) - params.p * params.b * num_messages) - num_messages * bound


def pvec_messages(x: torch.Tensor, bound: float, params, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Exact P_vec on messages ``x: [n, d]``: returns (estimate ``[d]``, shuffled bits ``[n, d, g+b]``)."""
    params = as_params(params)
    bits = shuffle(encode(randomize(x, bound, params, generator), params, generator), generator)
    totals = bits.sum(dim=(0, 2))
    return analyze(totals, x.shape[0], bound, params).to(x.dtype), bits


def pvec_fast(x: torch.Tensor, bound: float, params, generator: torch.Generator,
              weights: torch.Tensor | None = None) -> torch.Tensor:
    """P_vec's output for messages ``x: [..., d]`` (``weights`` 0/1 selects which rows are sent)."""
    params = as_params(params)
    bound = _check_bound(bound)
    scaled = (torch.clamp(x, -bound, bound) + bound) * (params.g / (2 * bound))
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


def pvec_variance(x: torch.Tensor, bound: float, params) -> float:
    """Exact ``E||P_vec(x) - sum x||^2`` for messages ``x: [n, d]``:
    ``(2 bound / g)^2 * sum_j [sum_i f_ij (1 - f_ij) + n b p (1 - p)]`` with ``f`` the rounding fractions."""
    params = as_params(params)
    scaled = (torch.clamp(x, -bound, bound) + bound) * (params.g / (2 * bound))
    frac = scaled - torch.floor(scaled)
    n, d = x.shape
    per = (frac * (1 - frac)).sum() + d * n * params.b * params.p * (1 - params.p)
    return float((2 * bound / params.g) ** 2 * per)
