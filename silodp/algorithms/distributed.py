"""What each silo runs for a distributed-noise sum under secure aggregation, and how the server
decodes the modular sum (:mod:`silodp.accounting.distributed` holds the parameters and their
certificates).

Silo (:func:`encode`): clip to ``clip``, rotate by the round's public signs and the normalized
Walsh-Hadamard transform, then

* Skellam / discrete Gaussian: scale by 1 / gamma, conditional randomized rounding (each
  coordinate up or down, unbiased, the whole vector retried until its norm is at most
  :func:`silodp.accounting.distributed.rounded_norm`; at record level plain randomized rounding),
  add the silo's integer noise;
* binomial: the paper's randomizer R_vec on the rotated range (:func:`silodp.algorithms.shuffle.randomize`),

and reduce modulo 2^bits. Secure aggregation (or :func:`modular_sum`) adds the residues; the
server (:func:`decode`) reads the centred representative, undoes the scaling (the binomial: the
analyzer A_vec) and the rotation.

The discrete Gaussian is sampled by Canonne, Kamath & Steinke's (2020) rejection from the
discrete Laplace, vectorized in float64: faithful for simulation; a deployment that must resist
floating-point side channels uses their exact-arithmetic sampler.
"""

from __future__ import annotations

import math

import torch

from silodp.accounting import distributed as acc
from silodp.algorithms import shuffle

#: Conditional rounding gives up after this many tries of one vector (each fails w.p. <= beta).
MAX_TRIES = 1000


def discrete_gaussian(shape: tuple[int, ...] | torch.Size, sigma: float, generator: torch.Generator) -> torch.Tensor:
    """N_Z(0, sigma^2) samples (CKS20 Alg 3: discrete Laplace of scale t = floor(sigma) + 1,
    accepted w.p. exp(-(|y| - sigma^2 / t)^2 / (2 sigma^2)))."""
    t = math.floor(sigma) + 1
    out = torch.zeros(shape, dtype=torch.int64)
    todo = torch.ones(shape, dtype=torch.bool)
    while todo.any():
        k = int(todo.sum())
        u = torch.rand(2, k, generator=generator, dtype=torch.float64).clamp_min(1e-300)
        y = torch.floor(-t * torch.log(u[0])) - torch.floor(-t * torch.log(u[1]))
        keep = torch.rand(k, generator=generator, dtype=torch.float64) < torch.exp(
            -((y.abs() - sigma ** 2 / t) ** 2) / (2 * sigma ** 2))
        idx = todo.nonzero(as_tuple=True)
        sel = tuple(i[keep] for i in idx)
        out[sel] = y[keep].long()
        todo[sel] = False
    return out


def _conditional_round(z: torch.Tensor, bound: float, generator: torch.Generator) -> torch.Tensor:
    """Unbiased randomized rounding of every row of ``z``, each row retried until its norm is at
    most ``bound`` (KLS21's conditional rounding)."""
    out = torch.empty_like(z)
    todo = torch.ones(z.shape[0], dtype=torch.bool)
    for _ in range(MAX_TRIES):
        rows = z[todo]
        floor = torch.floor(rows)
        r = floor + (torch.rand(rows.shape, generator=generator, dtype=z.dtype) < rows - floor).to(z.dtype)
        ok = r.norm(dim=-1) <= bound
        idx = todo.nonzero(as_tuple=True)[0]
        out[idx[ok]] = r[ok]
        todo[idx[ok]] = False
        if not todo.any():
            return out
    raise ValueError(f"conditional rounding: a vector failed {MAX_TRIES} tries (bound {bound:g})")


def _clip(x: torch.Tensor, clip: float) -> torch.Tensor:
    return x * torch.clamp(clip / x.norm(dim=-1, keepdim=True).clamp_min(1e-300), max=1.0)


class _Codec:
    """The draws and decodings of :class:`silodp.accounting.distributed.Codec` in torch, from one
    generator: each mechanism object says which of them it is made of."""

    def __init__(self, generator: torch.Generator) -> None:
        self.generator = generator

    def round(self, y: torch.Tensor, p: acc.DistributedParams) -> torch.Tensor:
        z = y / p.scale
        if p.vector_norm:  # record level: plain randomized rounding (coupled across neighbours)
            rounded = torch.floor(z + torch.rand(z.shape, generator=self.generator, dtype=z.dtype))
        else:
            rounded = _conditional_round(z, acc.rounded_norm(p.clip / p.scale, p.padded, p.beta), self.generator)
        return rounded.long()

    def poisson(self, shape: torch.Size, rate: float) -> torch.Tensor:
        return torch.poisson(torch.full(shape, rate, dtype=torch.float64), generator=self.generator).long()

    def discrete_gaussian(self, shape: torch.Size, sigma: float) -> torch.Tensor:
        return discrete_gaussian(shape, sigma, self.generator)

    @staticmethod
    def _binomial(p: acc.DistributedParams) -> tuple[float, shuffle.BinomialParams]:
        """The binomial mechanism's P_vec range (the rotated clip ball's) and protocol parameters."""
        from silodp.accounting.pvec import rotated_bound

        return rotated_bound(p.clip, p.dimension), shuffle.BinomialParams(p.levels, int(p.noise), 0.5, rotate=True)

    def randomize(self, y: torch.Tensor, p: acc.DistributedParams) -> torch.Tensor:
        bound, bp = self._binomial(p)
        return shuffle.randomize(y, bound, bp, self.generator)

    def analyze(self, sums: torch.Tensor, summed: int, p: acc.DistributedParams) -> torch.Tensor:
        bound, bp = self._binomial(p)
        return shuffle.analyze(sums, summed, bound, bp)

    def unscale(self, sums: torch.Tensor, p: acc.DistributedParams) -> torch.Tensor:
        return sums.to(torch.float64) * p.scale


def integers(x: torch.Tensor, p: acc.DistributedParams, signs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each silo's integer vector ``[M, d']`` (int64) for its vector ``x: [M, D]``, before the
    modular reduction: its mechanism's :meth:`~silodp.accounting.distributed.DistributedMechanism.encode`
    of the rotated, clipped vector."""
    y = shuffle.rotate(_clip(x.to(torch.float64), p.bound), signs)
    return p.kind.encode(_Codec(generator), y, p)


def encode(x: torch.Tensor, p: acc.DistributedParams, signs: torch.Tensor, generator: torch.Generator) -> torch.Tensor:
    """Each silo's message: :func:`integers` modulo 2^bits, residues ``[M, d']`` in [0, 2^bits)."""
    return torch.remainder(integers(x, p, signs, generator), p.modulus)


def modular_sum(messages: torch.Tensor, modulus: int) -> torch.Tensor:
    """What secure aggregation returns: the coordinate-wise sum of the residues modulo ``modulus``."""
    return torch.remainder(messages.sum(0), modulus)


def centred(total: torch.Tensor, modulus: int, middle: int = 0) -> torch.Tensor:
    """The representative of ``total`` (mod ``modulus``) in [middle - modulus/2, middle + modulus/2)."""
    half = modulus // 2
    return torch.remainder(total - middle + half, modulus) - half + middle


def centre(p: acc.DistributedParams, summed: int) -> int:
    """The integer the decoding window is centred on (the mechanism's: the binomial sum's middle, else 0)."""
    return p.kind.centre(p, summed)


def decode(total: torch.Tensor, p: acc.DistributedParams, summed: int, signs: torch.Tensor) -> torch.Tensor:
    """The server's estimate ``[D]`` of the sum of the ``summed`` silos' clipped vectors (the
    mechanism's :meth:`~silodp.accounting.distributed.DistributedMechanism.decode`, which draws
    nothing, then the inverse rotation)."""
    sums = centred(total, p.modulus, centre(p, summed))
    return shuffle.unrotate(p.kind.decode(_Codec(torch.Generator()), sums, summed, p), signs, p.dimension)
