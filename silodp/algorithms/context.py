"""The channel of one run (:class:`Context`) and its opaque handles (:class:`Batch`, :class:`Term`).

Every silo message goes through :meth:`Context.send`, which draws the noise of all N silos in one
call, records what each silo released, and returns the server's aggregate. Everything an
algorithm computes afterwards is a function of released messages only (post-processing), which
is what lets :meth:`~silodp.algorithms.base.FederatedAlgorithm.run` *replay* a recorded
transcript: with ``replay=result`` the server's aggregates and each silo's released messages are
taken from ``result`` while the silo still computes its own message on its own data. Two runs on
neighbouring datasets, one replaying the other, thus show exactly how one silo's message depends
on one record at the same iterates (the ISRL-DP sensitivity).

Every message :meth:`Context.send` makes is recorded in a
:class:`~silodp.accounting.releases.ReleaseLedger` holding the run's declaration (its plan's
:meth:`~silodp.algorithms.plan.Plan.run_declaration`), which refuses, naming the release, any
message the declaration does not cover. The contribution bound of each message is taken from
:meth:`Context.term`, which computed it (clip norm, twice it for a difference, or the difference
clip), over the batch weights; never from the algorithm's own say-so. How a message is computed
and released is the plan's channel (:class:`~silodp.algorithms.plan.GaussianChannel` or
:class:`~silodp.algorithms.plan.ShuffleChannel`).
"""

from __future__ import annotations

import weakref
from typing import Any, ClassVar

import torch

from silodp.accounting.releases import BatchSampling, ReleaseLedger

from . import plan as _plan
from .federation import BallsInBinsSampler, BatchSampler, Rows, SubsetSampler


class Term:
    """Clipped per-record terms of one batch, computed by :meth:`Context.term` and consumed (once)
    by :meth:`Context.send`: an opaque handle. Its values stay in the channel, so an algorithm can
    neither read, scale nor replace them; ``bound`` is the l2 bound of each per-record term (the
    clip norm, twice it for a difference, or the difference clip), the contribution bound the
    ledger divides the noise by."""

    __slots__ = ("bound", "_batch", "__weakref__")

    def __init__(self, bound, batch: "Batch") -> None:
        self.bound = bound
        self._batch = batch

    def __repr__(self) -> str:
        return f"Term(bound={self.bound!r}, batch={self._batch!r})"


class Batch:
    """An opaque handle of one minibatch (or the full data) the channel drew: ``sampling``
    (:class:`~silodp.accounting.releases.BatchSampling`) and ``size`` (records per silo) are
    public, the records, their labels and indices stay in the channel. A minibatch's records are
    copied when a term needs them (:class:`~silodp.algorithms.federation.Rows`: the ghost kernel
    gathers them a chunk of silos at a time); ``_x``, ``_y`` and ``_xsq`` (each record's
    ``||x||^2 + 1`` where the gather computed it, for the fused passes; None otherwise) are the
    whole batch, gathered once on first use."""

    __slots__ = ("sampling", "size", "_records", "_weights", "_idx", "__weakref__")

    def __init__(self, records: Rows | tuple, weights, idx, sampling: BatchSampling, size: int) -> None:
        self.sampling, self.size = sampling, int(size)
        self._records, self._weights, self._idx = records, weights, idx

    def _whole(self) -> tuple:
        """``(x, y, xsq)`` of every silo."""
        return self._records.whole() if isinstance(self._records, Rows) else self._records

    def _inputs(self) -> tuple:
        """``(x, y, xsq)`` for the gradient kernels: a minibatch's :class:`Rows` (``y``, ``xsq`` None:
        the kernel gathers them by chunks of silos), else the tensors."""
        return (self._records, None, None) if isinstance(self._records, Rows) else self._records

    @property
    def _x(self) -> torch.Tensor:
        return self._whole()[0]

    @property
    def _y(self) -> torch.Tensor:
        return self._whole()[1]

    @property
    def _xsq(self) -> torch.Tensor | None:
        return self._whole()[2]

    def __repr__(self) -> str:
        return f"Batch({self.sampling.value}, size={self.size})"


#: Context subclasses may only be declared in this module (the audit, trial and mutation
#: instruments); an algorithm cannot bring its own channel.
INSTRUMENTS_MODULE = "silodp.verify.instruments"


def _unchecked_instrument(cls: type) -> type:
    """Test-only hook (used by :mod:`silodp.verify.instruments` for the audit's mutations): runs
    through the instrument ``cls`` itself (not its subclasses) are not checked against the
    declaration: the deliberately broken variants of :mod:`silodp.verify.audit.mutations`, which
    the audits must catch on their own. The mark is the class's own attribute (no module state)."""
    if not (isinstance(cls, type) and issubclass(cls, Context) and cls.__module__ == INSTRUMENTS_MODULE):
        raise TypeError("only the audit instruments of silodp.verify.instruments may run unchecked")
    cls._unchecked_by = cls
    return cls


class Context:
    """The channel of one run: it owns the data, the generator and the release ledger.

    The algorithm draws batches through it (:meth:`sampler`, :meth:`batch`, :meth:`full`: opaque
    :class:`Batch` handles), asks it for clipped per-record terms (:meth:`term`: an opaque
    :class:`Term`) and sends them (:meth:`send`), receiving only noised releases; offsets must be
    values the channel released. Public state: :attr:`num_silos`, :attr:`min_size`, :attr:`clip`,
    :attr:`beta`, :attr:`dtype`, :attr:`eta`, :attr:`sigmas`, :attr:`iterates`. Gaussian and shuffle
    releases go through :meth:`send`, through the channel its algorithm's plan gives it
    (:class:`~silodp.algorithms.plan.GaussianChannel` or :class:`~silodp.algorithms.plan.ShuffleChannel`).

    Instruments (stacked trials, audit recordings, mutations) subclass it in
    :data:`INSTRUMENTS_MODULE` only, overriding the narrow hooks ``_expand``, ``_scale``,
    ``_clip_terms``, ``_noise_std``, ``_noise_generator``, ``_per_silo_offset``, ``_aggregate``,
    ``_offset_mean``, ``_shuffle_aggregate``.
    """

    #: set by :func:`_unchecked_instrument` on the one instrument class it marks
    _unchecked_by: ClassVar[type | None] = None

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if cls.__module__ != INSTRUMENTS_MODULE:
            raise TypeError(f"{cls.__name__}: the channel cannot be subclassed outside {INSTRUMENTS_MODULE}")

    def __init__(self, algo, problem, federation, seed, sigmas, shuffle, replay):
        self._algo, self._problem, self._fed = algo, problem, federation
        self._checked = type(self)._unchecked_by is not type(self)
        self._plan = algo.plan
        self._channel = self._plan.channel()
        if type(self._channel) not in _plan.CHANNELS:
            raise TypeError(f"{type(self._channel).__name__}: a run releases through the plans' channels only "
                            f"({', '.join(c.__name__ for c in _plan.CHANNELS)}); only the channel's hooks are "
                            f"subclassed, in {INSTRUMENTS_MODULE}")
        declared = self._declaration(algo, problem, federation, sigmas, shuffle) if self._checked else None
        self._ledger = ReleaseLedger(declared)
        self._gen = torch.Generator().manual_seed(seed)
        self._sigmas, self._shuffle = dict(sigmas), shuffle
        self.eta = algo.eta(problem)
        self._entries = [] if (algo.record_transcript or replay is not None) else None
        if replay is not None and replay.transcript is None:
            raise ValueError("replay: the replayed result has no transcript (run with record_transcript=True)")
        self._replay = replay.transcript if replay is not None else None
        self._replay_pos = 0
        self._samplers = weakref.WeakValueDictionary()
        self._batches = weakref.WeakValueDictionary()
        self._terms: dict[int, tuple] = {}
        self._released = weakref.WeakValueDictionary()
        self.round = 0
        self.history = {"round": [], "objective": [], "grad_mapping_norm": [], "accuracy": []}
        self.iterates: list[torch.Tensor] = []
        self.callback = None

    @staticmethod
    def _declaration(algo, problem, federation, sigmas, shuffle):
        """The releases this run must stay within (its plan's :meth:`~silodp.algorithms.plan.Plan.run_declaration`)."""
        return algo.plan.run_declaration(problem, federation, sigmas, shuffle)

    # -- public state --------------------------------------------------------------------------
    @property
    def num_silos(self) -> int:
        return self._fed.num_silos

    @property
    def min_size(self) -> int:
        return self._fed.min_size

    @property
    def clip(self) -> float | None:
        return self._problem.clip

    @property
    def beta(self) -> float | None:
        return self._problem.beta

    @property
    def dtype(self) -> torch.dtype:
        return self._fed.x.dtype

    @property
    def sigmas(self) -> dict:
        """The noise standard deviations of this run (a copy)."""
        return dict(self._sigmas)

    def prox(self, v: torch.Tensor, step: float | None = None) -> torch.Tensor:
        """The regularizer's prox at step ``step`` (default :attr:`eta`): public post-processing."""
        return self._problem.regularizer.prox(v, self.eta if step is None else step)

    def uniform_iterate(self) -> torch.Tensor:
        """A uniformly random element of :attr:`iterates` (Alg 1 line 15, Alg 2 line 3)."""
        return self.iterates[int(torch.randint(len(self.iterates), (1,), generator=self._gen))]

    def coin(self, n: int, p: float) -> torch.Tensor:
        """``n`` independent Bernoulli(``p``) draws (e.g. DP-SCAFFOLD's user sampling), data-free."""
        return torch.rand(n, generator=self._gen, dtype=torch.float64) < float(p)

    # -- data ----------------------------------------------------------------------------------
    def sampler(self, batch_size: int, replacement: bool | None = None, subset: bool = False) -> Any:
        """Minibatch indices of every silo: with or without replacement
        (:class:`~silodp.algorithms.federation.BatchSampler`), or ``subset``: a fresh uniform subset
        per step (:class:`~silodp.algorithms.federation.SubsetSampler`); with the algorithm's
        ``balls_in_bins``, t = min_size // batch_size balls-in-bins batches per epoch
        (:class:`~silodp.algorithms.federation.BallsInBinsSampler`)."""
        out: Any
        if subset:
            out = SubsetSampler(self._fed.mask, batch_size, self._gen)
        elif getattr(self._algo, "balls_in_bins", False) and replacement is None:
            if not self._channel.balls_in_bins:
                raise ValueError("balls_in_bins: shuffle-DP algorithms declare their own batches (Gaussian algorithms only)")
            out = BallsInBinsSampler(self._fed.counts, max(1, self._fed.min_size // int(batch_size)), self._gen,
                                     expected_size=int(batch_size))
        else:
            rep = self._plan.uses_replacement if replacement is None else replacement
            out = BatchSampler(self._fed.counts, batch_size, rep, self._gen)
        self._samplers[id(out)] = out
        return out

    def available(self) -> torch.Tensor:
        return self._fed.sample_available(self._gen)

    def _issue(self, batch: Batch) -> Batch:
        self._batches[id(batch)] = batch
        return batch

    def batch(self, sampler: Any) -> Batch:
        if self._samplers.get(id(sampler)) is not sampler:
            raise ValueError("sampler: must come from this run's Context.sampler")
        if sampler.sampling is BatchSampling.BALLS_IN_BINS:  # members only, over the constant expected size
            idx, mask = sampler.next()
            weights = mask.to(self._fed.x.device, self._fed.x.dtype) / sampler.expected_size
            return self._issue(Batch(Rows(self._fed, idx), weights, idx, sampler.sampling, sampler.expected_size))
        idx = sampler.next()
        weights = torch.full(idx.shape, 1.0 / idx.shape[1], dtype=self._fed.x.dtype, device=self._fed.x.device)
        return self._issue(Batch(Rows(self._fed, idx), weights, idx, sampler.sampling, idx.shape[1]))

    def full(self) -> Batch:
        fed = self._fed
        return self._issue(Batch((fed.x, fed.y, None), fed.weights, None, BatchSampling.FULL, fed.min_size))

    # -- gradients -----------------------------------------------------------------------------
    def term(self, data: Batch, w: torch.Tensor, w_old: torch.Tensor | None = None,
             diff_clip: float | torch.Tensor | None = None) -> Term:
        """Clipped gradient terms of every silo on ``data`` at ``w`` (minus the ones at ``w_old``,
        the differences clipped to ``diff_clip``), as an opaque :class:`Term`."""
        if not isinstance(data, Batch) or self._batches.get(id(data)) is not data:
            raise ValueError("data: must come from this run's Context.batch or Context.full")
        values, bound = self._clip_terms(data, w, w_old, diff_clip)
        out = Term(bound, data)
        query = None if self._entries is None else \
            (w.detach().clone(), None if w_old is None else w_old.detach().clone(), diff_clip)  # for the transcript
        self._terms[id(out)] = (out, values, query)
        return out

    def _clip_terms(self, data: Batch, w, w_old, diff_clip):
        """(values, bound): the weighted sums ``[N, d]`` (Gaussian channel, ghost clipping) or the
        per-sample vectors ``[N, K, d]``, and each per-record term's l2 bound."""
        clip = self._problem.clip
        w, w_old, dc = self._expand(w), self._expand(w_old), self._scale(diff_clip)
        bound = diff_clip if diff_clip is not None else (None if clip is None else (2 * clip if w_old is not None else clip))
        return self._channel.terms(self, data, w, w_old, dc, self._algo.grad_method), bound

    def _expand(self, w):
        """The query point of every silo (stacked trials: one per trial, repeated per silo)."""
        return w

    def _scale(self, value):
        """A per-run scale as one value per silo (stacked trials)."""
        return value

    # -- the channel ---------------------------------------------------------------------------
    def send(self, group: str, term: Term, avail: torch.Tensor, std: float | torch.Tensor = 0.0,
             offset: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Each available silo releases its message of ``group``; returns ``(aggregate [d],
        released [N, d])``.

        Gaussian: message = (weighted) term + offset + N(0, std^2 I), noise for all silos in one
        draw. Shuffle: the silos' per-record vectors go through P_vec with the term's bound; the
        aggregate is the analyzer's estimate divided by the number of messages, plus the mean
        offset; ``released`` is None. ``term`` must come from :meth:`term` (each is sent once);
        ``offset`` must be a value this channel released (public), else ``ValueError``.
        """
        held = self._terms.pop(id(term), None)
        if held is None or held[0] is not term:
            raise ValueError(f"release of group {group!r}: its term was not computed by Context.term "
                             "(or was sent already)")
        _, values, query = held
        if offset is not None and self._released.get(id(offset)) is not offset:
            raise ValueError(f"offset of group {group!r}: must be a value this channel released")
        data = term._batch
        idx = data._idx
        a = avail.to(self._fed.x.device, self._fed.x.dtype)
        std = self._noise_std(group, term, std)
        self._record(group, data, std, term.bound, self._channel.messages(data._weights, a))
        replayed = self._next_replay(group)
        agg, released, messages = self._channel.release(self, group, values, term, a, std, offset, replayed)
        if replayed is not None:
            agg = replayed["aggregate"]
        self._released[id(agg)] = agg
        if self._entries is not None:
            w, w_old, diff_clip = query
            self._entries.append({"round": self.round, "group": group, "available": avail.clone(),
                                  "batch": None if idx is None else idx.clone(), "sampling": data.sampling,
                                  "std": float(std) if not isinstance(std, torch.Tensor) or std.numel() == 1 else std.detach().clone(),
                                  "messages": messages.detach().clone(),
                                  "aggregate": agg.detach().clone(), "w": w, "w_old": w_old, "diff_clip": diff_clip,
                                  "offset": None if offset is None else offset.detach().clone()})
        return agg, released

    def _noise_std(self, group: str, term: Term, std):
        return std

    def _noise_generator(self) -> torch.Generator:
        return self._gen

    def _per_silo_offset(self, offset: torch.Tensor) -> torch.Tensor:
        return offset

    def _aggregate(self, released: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        """The mean of the available silos' messages (``a``: 1 for a silo summed, 0 for one left
        out). With every silo available the rows are summed as they are (``x * 1`` is ``x``, bit for
        bit: the same sum without a product the size of the messages) and divided by their count, the
        value ``a.sum()`` holds exactly (below 2**24 rows); the sum is divided in place (a fresh tensor
        nothing else holds)."""
        low, high = a.aminmax()
        if float(low) == float(high) == 1.0 and a.shape[0] < 2**24:
            return released.sum(0).div_(float(a.shape[0]))
        return (released * a[:, None]).sum(0).div_(a.sum())

    def _offset_mean(self, offset: torch.Tensor, a: torch.Tensor) -> torch.Tensor:
        return offset if offset.dim() == 1 else (offset * a[:, None]).sum(0) / a.sum()

    def _record(self, group: str, data: Batch, std, bound, messages: int = 0) -> None:
        """Enter one message of ``group`` in the release ledger (raises when not declared).
        Noise multiplier: ``std`` over the contribution bound, the term's l2 bound times the
        largest batch weight (the smallest multiplier over silos and stacked runs). Shuffle: the
        protocol parameters (g, b, p, rotate) and the ``messages`` summed."""
        self._ledger.record(self._channel.sent(self, group, data, std, bound, messages))

    def _next_replay(self, group):
        if self._replay is None:
            return None
        if self._replay_pos >= len(self._replay):
            raise ValueError("replay: transcript out of step (more releases than recorded)")
        entry = self._replay[self._replay_pos]
        self._replay_pos += 1
        if entry["group"] != group:
            raise ValueError(f"replay: transcript out of step (expected group {group!r}, found {entry['group']!r})")
        return entry

    def _shuffle_aggregate(self, group, values, weights, a, bound):
        """P_vec on the sent rows of ``values``; returns (mean estimate, the analyzer's view or None)."""
        sent = (weights > 0).to(values.dtype) * a[:, None]
        est, view = self._pvec(values, bound, self._shuffle[group], sent)
        return est / int(sent.sum()), view

    def _pvec(self, term, bound, params, sent):
        """P_vec on the rows of ``term`` that ``sent`` selects (:meth:`silodp.algorithms.plan.ShuffleChannel.pvec`)."""
        return _plan.ShuffleChannel.pvec(self, term, bound, params, sent)

    # -- bookkeeping ---------------------------------------------------------------------------
    def end_round(self, w: torch.Tensor, keep_iterate: bool = False) -> None:
        if keep_iterate:
            self.iterates.append(w.detach().clone())
        every = self._algo.metrics_every
        if every and self.round % every == 0:
            self._log(w)
        if self.callback is not None:
            self.callback(self.round, w)
        self.round += 1

    def _log(self, w: torch.Tensor) -> None:
        """Evaluation of the server's iterate on the training federation (the harness's, not a release)."""
        p = self._problem
        self.history["round"].append(self.round)
        self.history["objective"].append(p.objective(w, self._fed))
        self.history["grad_mapping_norm"].append(p.grad_mapping_norm(w, self._fed, self.eta))
        self.history["accuracy"].append(p.accuracy(w, self._fed))
