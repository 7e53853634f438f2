"""The federation simulator: N silos' data as batched tensors, availability, minibatches.

Silo data is stored as ``x: [N, n_max, ...]``, ``y: [N, n_max]`` with a boolean ``mask`` for the
padding when silos differ in size. Everything random draws from one ``torch.Generator``, so a run
is reproducible bit for bit from its seed. The data may live on any torch device (CUDA where torch
sees one): counts, availability and minibatch indices are drawn on the CPU from the run's
generator (the same draws on every device) and the gather moves the indices to the data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from silodp.accounting.releases import BatchSampling

from . import draws as _draws
from . import fused as _fused

AVAILABILITY = ("fixed", "random")


def _storage_use_count() -> Any:
    """The number of tensors sharing a tensor's storage (torch's private counter; None where this
    torch lacks it: then no gather buffer is reused)."""
    count = getattr(torch._C, "_storage_Use_Count", None)
    if count is None:
        return None
    return lambda t: count(t.untyped_storage()._cdata)


_use_count = _storage_use_count()
_FREE = None if _use_count is None else _use_count(torch.empty(1))  # a tensor held by nothing else


@dataclass
class Federation:
    """Batched silo data plus the availability model.

    ``silos_per_round`` is M (default: all N). ``availability="fixed"`` draws exactly M of N
    silos uniformly each round (Assumption 3); ``"random"`` draws ``M_r = max(1, Bin(N, M/N))``
    independently per round and then a uniform subset of that size (Assumption 6).
    """

    x: torch.Tensor
    y: torch.Tensor
    counts: torch.Tensor
    silos_per_round: int | None = None
    availability: str = "fixed"
    #: secure aggregation's reconstruction threshold (SecAgg+): no sum of fewer silos is revealed,
    #: so shuffle-DP declares it as the fewest silos summed (None: no secure aggregation)
    reconstruction_threshold: int | None = None
    mask: torch.Tensor = field(init=False, repr=False)
    weights: torch.Tensor = field(init=False, repr=False)

    def __post_init__(self):
        if self.x.dim() < 3 or self.y.shape != self.x.shape[:2]:
            raise ValueError(f"x: expected [N, n, ...] with y [N, n], got {tuple(self.x.shape)} and {tuple(self.y.shape)}")
        self.counts = torch.as_tensor(self.counts, dtype=torch.long).cpu()  # the samplers draw on the CPU
        n_silos, n_max = self.x.shape[:2]
        if self.counts.shape != (n_silos,) or int(self.counts.min()) < 1 or int(self.counts.max()) > n_max:
            raise ValueError(f"counts: must be N={n_silos} integers in [1, {n_max}]")
        m = n_silos if self.silos_per_round is None else int(self.silos_per_round)
        if not 1 <= m <= n_silos:
            raise ValueError(f"silos_per_round: must be in [1, {n_silos}], got {self.silos_per_round}")
        self.silos_per_round = m
        if self.availability not in AVAILABILITY:
            raise ValueError(f"availability: must be one of {AVAILABILITY}, got {self.availability!r}")
        t = self.reconstruction_threshold
        if t is not None and not (isinstance(t, int) and 1 <= t <= (n_silos if self.availability == "random" else m)):
            raise ValueError(f"reconstruction_threshold: must be an integer in [1, {m}] (silos per round), got {t!r}")
        self.mask = (torch.arange(n_max).unsqueeze(0) < self.counts.unsqueeze(1)).to(self.x.device)
        self.weights = self.mask.to(self.x.dtype) / self.counts.unsqueeze(1).to(self.x.device, self.x.dtype)

    @classmethod
    def from_silos(cls, xs: Sequence, ys: Sequence, **kwargs: Any) -> "Federation":
        """Pad a list of per-silo arrays ``x_i: [n_i, ...]``, ``y_i: [n_i]`` into one batch."""
        if len(xs) != len(ys) or not xs:
            raise ValueError("xs: need one (non-empty) list of arrays per silo, same length as ys")
        xs = [torch.as_tensor(x) for x in xs]
        ys = [torch.as_tensor(y) for y in ys]
        counts = torch.tensor([len(x) for x in xs])
        n_max = int(counts.max())
        x = torch.zeros(len(xs), n_max, *xs[0].shape[1:], dtype=xs[0].dtype)
        y = torch.zeros(len(xs), n_max, dtype=x.dtype)
        for i, (xi, yi) in enumerate(zip(xs, ys)):  # construction only, not the simulation
            x[i, : len(xi)] = xi
            y[i, : len(yi)] = yi.to(x.dtype)
        return cls(x, y, counts, **kwargs)

    @property
    def num_silos(self) -> int:
        return self.x.shape[0]

    @property
    def min_size(self) -> int:
        return int(self.counts.min())

    def with_availability(self, silos_per_round: int | None, availability: str = "fixed") -> "Federation":
        return dataclasses.replace(self, silos_per_round=silos_per_round, availability=availability)

    def to(self, dtype: torch.dtype) -> "Federation":
        return dataclasses.replace(self, x=self.x.to(dtype), y=self.y.to(dtype))

    def sample_available(self, generator: torch.Generator) -> torch.Tensor:
        """Boolean ``[N]`` mask of this round's available silos."""
        n = self.num_silos
        m = self.silos_per_round
        if self.availability == "random":
            prob = torch.full((1,), m / n, dtype=torch.float64)
            m = max(1, int(torch.binomial(torch.tensor([float(n)], dtype=torch.float64), prob, generator=generator)))
        if m == n:
            return torch.ones(n, dtype=torch.bool)
        order = torch.rand(n, generator=generator).argsort()
        avail = torch.zeros(n, dtype=torch.bool)
        avail[order[:m]] = True
        return avail

    def gather(self, idx: torch.Tensor, norms: bool = False, silos: slice = slice(None),
               out: torch.Tensor | None = None) -> tuple:
        """Rows ``idx: [N, K]`` of every silo -> ``(x [N, K, ...], y [N, K])``: on the CPU numba's
        pass with software prefetch (:func:`.fused.gather`, the same rows bit for bit), else one
        ``index_select`` on the flattened records (4-5x faster than advanced indexing), written
        into ``out`` (a tensor of ``N K`` rows) when given, else into a buffer of an earlier gather
        that nothing references any more (no fresh pages per round; a batch still held keeps its
        own rows). ``silos``: the silos ``idx``'s rows index (a slice; default all of them). With
        ``norms``: ``(x, y, xsq)``, ``xsq [N, K]`` each row's ``||x||^2 + 1`` as the fused passes
        compute it, from numba's pass while it copies the row, or None where that pass did not run
        (the passes then read ``x``)."""
        xs, ys = self.x[silos], self.y[silos]
        n_silos, n_max = xs.shape[:2]
        src = xs.reshape(n_silos * n_max, *xs.shape[2:])
        x = self._gather_buffer(src, idx.numel()) if out is None else out.view(idx.numel(), *xs.shape[2:])
        done = _fused.gather(xs, ys, idx, x, norms)  # numba's pass where it runs (CPU float rows)
        if done is None:
            flat = (idx.to(xs.device) + torch.arange(n_silos, device=xs.device).unsqueeze(1) * n_max).reshape(-1)
            torch.index_select(src, 0, flat, out=x)
            y, xsq = ys.reshape(-1).index_select(0, flat), None
        else:
            y, xsq = done
        x, y = x.view(*idx.shape, *xs.shape[2:]), y.view(idx.shape)
        if not norms:
            return x, y
        return x, y, None if xsq is None else xsq.view(idx.shape)

    def _gather_buffer(self, src: torch.Tensor, rows: int) -> torch.Tensor:
        """A ``[rows, ...]`` tensor like ``src``: a pooled one whose storage only the pool holds
        (no batch, view or slice of it is alive, so overwriting it is unobservable), else a new
        one, pooled (at most two: a round's batch and the next one's)."""
        pool = self.__dict__.setdefault("_gather_pool", [])
        if _use_count is not None and not src.requires_grad:
            for buf in pool:
                if buf.shape[0] == rows and buf.dtype == src.dtype and buf.device == src.device \
                        and _use_count(buf) == _FREE:
                    return buf
        buf = torch.empty(rows, *src.shape[1:], dtype=src.dtype, device=src.device)
        if _use_count is not None and not src.requires_grad:
            pool[:] = [b for b in pool if b.shape[0] == rows][-1:] + [buf]
        return buf

    def __getstate__(self) -> dict:
        """The fields (the gather pool is a cache: not pickled)."""
        return {k: v for k, v in self.__dict__.items() if k != "_gather_pool"}


class Rows:
    """The rows ``idx [N, K]`` of every silo of ``fed``, not yet copied: a slice of silos at a time
    into the caller's buffer (:meth:`take`, the ghost kernel's chunks: each chunk's rows are copied
    just before its products read them, still in the cache; at N 100, where a whole minibatch
    outgrows the last-level cache, about 5% of the round), or all at once (:meth:`whole`, kept).
    ``shape``, ``dtype``, ``device`` and :meth:`element_size` are the gathered tensor's."""

    __slots__ = ("fed", "idx", "_whole")

    def __init__(self, fed: Federation, idx: torch.Tensor) -> None:
        self.fed, self.idx = fed, idx
        self._whole: tuple | None = None

    @property
    def shape(self) -> torch.Size:
        return torch.Size((*self.idx.shape, *self.fed.x.shape[2:]))

    @property
    def dtype(self) -> torch.dtype:
        return self.fed.x.dtype

    @property
    def device(self) -> torch.device:
        return self.fed.x.device

    def element_size(self) -> int:
        return self.fed.x.element_size()

    def take(self, silos: slice, out: torch.Tensor) -> tuple:
        """``(x, y, xsq)`` of the silos ``silos`` (a slice with a stop), ``x`` written into ``out``
        (as many elements; its previous contents are overwritten); the rows of :meth:`whole` where
        they were gathered already."""
        if self._whole is not None:
            x, y, xsq = self._whole
            return x[silos], y[silos], None if xsq is None else xsq[silos]
        return self.fed.gather(self.idx[silos], norms=True, silos=silos, out=out)

    def whole(self) -> tuple:
        """``(x [N, K, ...], y [N, K], xsq)``: :meth:`Federation.gather` with ``norms``, once."""
        if self._whole is None:
            self._whole = self.fed.gather(self.idx, norms=True)
        return self._whole


class BatchSampler:
    """Per-silo minibatch indices ``[N, K]``, all silos in one call.

    With replacement: K i.i.d. uniform draws from each silo's ``n_i`` records. Without
    replacement: each silo walks through a fresh random permutation of its records, so batches
    are disjoint within an epoch (what parallel composition in Thm E.1's proof needs); a new
    permutation starts when the smallest silo runs out.
    """

    def __init__(self, counts: torch.Tensor, batch_size: int, replacement: bool, generator: torch.Generator):
        self.counts = counts.clone()  # the sampler's own copy: what it derives below cannot go stale
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size: must be >= 1, got {batch_size}")
        self._smallest = int(self.counts.min())
        if not replacement and self.batch_size > self._smallest:
            raise ValueError(f"batch_size: without replacement must be <= the smallest silo size {self._smallest}, got {batch_size}")
        self.replacement = replacement
        self.sampling = BatchSampling.WITH_REPLACEMENT if replacement else BatchSampling.SHUFFLED
        self.generator = generator
        # n_i as float64 (exact below 2**53: u * n_i is the product the long counts promote to) and n_i - 1
        self._sizes, self._last = self.counts.unsqueeze(1).to(torch.float64), self.counts.unsqueeze(1) - 1
        self._perm = None
        self._cursor = 0

    def next(self) -> torch.Tensor:
        n_silos = self.counts.shape[0]
        k = self.batch_size
        if self.replacement:  # floor(u n_i), at most n_i - 1 (the product and the clamp in place)
            u = _draws.rand((n_silos, k), self.generator, torch.float64).mul_(self._sizes)  # torch.rand's values
            return u.long().clamp_(max=self._last)
        if self._perm is None or self._cursor + k > self._smallest:
            n_max = int(self.counts.max())
            keys = _draws.rand((n_silos, n_max), self.generator, torch.get_default_dtype())
            keys = keys.masked_fill(torch.arange(n_max).unsqueeze(0) >= self.counts.unsqueeze(1), 2.0)
            self._perm, self._cursor = _draws.argsort_rows(keys), 0  # keys.argsort(dim=1)
        batch = self._perm[:, self._cursor : self._cursor + k]
        self._cursor += k
        return batch


class SubsetSampler:
    """Per silo, a fresh uniform subset of ``batch_size`` of its records (without replacement),
    independent across steps and silos (DP-SCAFFOLD's data sampling); all silos in one
    ``multinomial`` call."""

    sampling = BatchSampling.SUBSET

    def __init__(self, mask: torch.Tensor, batch_size: int, generator: torch.Generator):
        self.weights = mask.to(torch.float64)
        self.batch_size = int(batch_size)
        self.generator = generator

    def next(self) -> torch.Tensor:
        return torch.multinomial(self.weights, self.batch_size, replacement=False, generator=self.generator)


class BallsInBinsSampler:
    """Balls-in-bins minibatches (``BatchSampling.BALLS_IN_BINS``), all silos in one call: at the
    start of each epoch every record of every silo is put in one of ``batches`` bins, chosen
    uniformly and independently; step j of the epoch uses bin j. Batch sizes vary, so
    :meth:`next` returns indices ``[N, M]`` (M the largest bin of the step, padded with index 0)
    and a 0/1 ``mask`` ``[N, M]`` of the real members: a step must sum ``mask``-weighted
    contributions and divide by a constant (the expected batch size), never by the bin's size."""

    sampling = BatchSampling.BALLS_IN_BINS

    def __init__(self, counts: torch.Tensor, batches: int, generator: torch.Generator,
                 expected_size: int | None = None):
        self.counts = counts
        self.batches = int(batches)
        #: the constant a step divides its masked sum by (default: the smallest silo's n / batches)
        self.expected_size = int(expected_size) if expected_size else max(1, int(counts.min()) // max(1, self.batches))
        if self.batches < 1:
            raise ValueError(f"batches: must be >= 1, got {batches}")
        self.generator = generator
        self._bins = None
        self._step = 0

    def next(self) -> tuple[torch.Tensor, torch.Tensor]:
        n_silos, n_max = self.counts.shape[0], int(self.counts.max())
        if self._bins is None or self._step == self.batches:  # a fresh allocation per epoch
            bins = torch.randint(self.batches, (n_silos, n_max), generator=self.generator)
            self._bins = bins.masked_fill(torch.arange(n_max).unsqueeze(0) >= self.counts.unsqueeze(1), -1)
            self._step = 0
        member = self._bins == self._step
        self._step += 1
        width = max(1, int(member.sum(dim=1).max()))
        order = torch.argsort((~member).to(torch.int8), dim=1, stable=True)[:, :width]  # members first
        mask = torch.gather(member, 1, order)
        return torch.where(mask, order, torch.zeros_like(order)), mask.to(torch.get_default_dtype())
