"""The instruments that run a real algorithm through an altered channel, declared in one place.

:class:`~silodp.algorithms.context.Context` (the channel) can be subclassed here and nowhere else;
each instrument overrides only the channel's narrow hooks (``_expand``, ``_scale``,
``_clip_terms``, ``_noise_std``, ``_noise_generator``, ``_per_silo_offset``, ``_aggregate``,
``_offset_mean``, ``_shuffle_aggregate``, ``_declaration``, ``_log``), never ``term`` / ``send``:

* :class:`RecordingContext` -- the audits' reference and replayed runs (the channel's transcript
  entries already hold each release's query points, difference clip and public offset);
* :class:`TrialContext` -- ``trials`` stacked runs of ``silos`` silos
  (:mod:`silodp.verify.rates.trials`), checked against one run's declaration;
* :func:`mutated_context` -- the deliberately broken variants of
  :mod:`silodp.verify.audit.mutations`; by default their releases are not checked against the
  declaration (the test-only hook :func:`silodp.algorithms.context._unchecked_instrument`: the
  run-time check would refuse most of these bugs at once, the audits must catch them on their own);
* :func:`unclipped_trials` -- stacked trials whose per-record messages are not clipped.

A run goes through an instrument by its explicit argument, ``algo.run(..., context=Instrument)``;
:class:`Instrumented` pairs an algorithm with the instrument its runs use (the audit game's
replayed runs).
"""

from __future__ import annotations

import dataclasses

import torch

from silodp.algorithms import grads as _grads
from silodp.algorithms.context import Context, _unchecked_instrument
from silodp.algorithms.federation import Federation


class RecordingContext(Context):
    """The audits' channel: a plain :class:`Context` whose transcript entries hold the query
    point(s) ``w``, ``w_old``, the difference clip ``diff_clip`` and the public ``offset`` of each
    release (every channel records them; the class marks the runs the audit game accepts)."""


@dataclasses.dataclass(frozen=True)
class Instrumented:
    """An algorithm whose runs go through the channel instrument ``context``: :meth:`run` is
    ``algo.run(..., context=context)`` (no attribute of the algorithm is changed)."""

    algo: object
    context: type

    def run(self, problem, federation, seed: int = 0, replay=None, callback=None):
        """``algo.run`` through :attr:`context`."""
        return self.algo.run(problem, federation, seed, replay, callback, context=self.context)  # type: ignore[attr-defined]


class MutatedContext(RecordingContext):
    """Channel of a broken algorithm; ``mutation`` (a :class:`~silodp.verify.audit.mutations.Mutation`)
    is set by :func:`mutated_context`."""

    mutation = None
    _noise_seed: int | None = None

    def _clip_terms(self, data, w, w_old, diff_clip):
        if self.mutation.clip == "whole":
            return super()._clip_terms(data, w, w_old, diff_clip)
        x, y, weights = data._x, data._y, data._weights
        clip_fn = self.mutation.clip_fn(self._problem)
        wb = w.expand(x.shape[0], -1) if w.dim() == 1 else w
        terms, threshold = clip_fn(_grads.per_sample_grads(self._problem, wb, x, y))
        if w_old is not None:
            wo = w_old.expand(x.shape[0], -1) if w_old.dim() == 1 else w_old
            terms = terms - clip_fn(_grads.per_sample_grads(self._problem, wo, x, y))[0]
            if diff_clip is not None:
                terms = _grads.clip_rows(terms, diff_clip)
        return torch.einsum("nk,nkd->nd", weights, terms), threshold

    def _scale(self, value):
        """A per-silo scale ``[N]`` (the median-clip noise) as a column ``[N, 1]``."""
        return value.unsqueeze(-1) if isinstance(value, torch.Tensor) and value.dim() == 1 else value

    def _noise_std(self, group, term, std):
        m = self.mutation
        k = term._batch.size
        if m.noise_factor is not None:
            std = std * m.noise_factor(group, k, self._fed.silos_per_round)
        if m.clip == "median":
            std = std * term.bound / self._problem.clip
        return std

    def _noise_generator(self) -> torch.Generator:
        if not self.mutation.shared_noise:
            return self._gen
        if self._noise_seed is None:
            self._noise_seed = int(torch.randint(2**62, (1,), generator=self._gen))
        return torch.Generator().manual_seed(self._noise_seed)  # the same noise every release


def mutated_context(mutation, checked: bool = False) -> type:
    """The channel that realizes ``mutation`` in a real run (records like :class:`RecordingContext`);
    ``checked``: keep the run-time check of the declaration on (it then refuses most bugs)."""
    name = f"Mutated{mutation.name.title().replace('-', '')}Context"
    cls = type(name, (MutatedContext,), {"mutation": mutation, "__module__": __name__})
    return cls if checked else _unchecked_instrument(cls)


def _pick_uniform(iterates: list[torch.Tensor], gen: torch.Generator) -> torch.Tensor:
    """An independent uniform pick among ``iterates`` (each ``[T, d]``) for every trial."""
    stack = torch.stack(list(iterates))  # [I, T, d]
    idx = torch.randint(stack.shape[0], (stack.shape[1],), generator=gen)
    return stack[idx, torch.arange(stack.shape[1])]


class _PerTrialIterates(list):
    """``ctx.iterates`` of stacked trials: ``iterates[i]`` for an integer ``i`` (the algorithms'
    uniform pick) returns an independent uniform pick per trial; slices and iteration are a list's."""

    def __init__(self, generator: torch.Generator):
        super().__init__()
        self.generator = generator

    def __getitem__(self, i):
        if isinstance(i, int) and len(self):
            return _pick_uniform(self, self.generator)
        return super().__getitem__(i)


class TrialContext(Context):
    """The channel of ``trials`` stacked runs of ``silos`` silos (trial t owns silos
    ``t*N .. t*N + N - 1``): iterates ``[T, d]``, per-trial aggregates, one noise draw for all."""

    def __init__(self, algo, problem, federation: Federation, seed: int, sigmas: dict, shuffle,
                 trials: int, silos: int, silos_per_round: int):
        self.trials, self.silos, self.per_round = int(trials), int(silos), int(silos_per_round)
        super().__init__(algo, problem, federation, seed, sigmas, shuffle, None)
        self._entries = None
        self.iterates = _PerTrialIterates(self._gen)

    def _declaration(self, algo, problem, federation, sigmas, shuffle):
        """One run's declaration (the first trial's silos): every stacked run must stay within it."""
        n = self.silos
        one = dataclasses.replace(federation, x=federation.x[:n], y=federation.y[:n], counts=federation.counts[:n],
                                  silos_per_round=self.per_round)
        return algo.plan.run_declaration(problem, one, sigmas, shuffle)

    def _expand(self, w: torch.Tensor | None) -> torch.Tensor | None:
        if w is None or w.dim() == 1:
            return w
        return w.repeat_interleave(self.silos, dim=0)

    def _scale(self, value):
        """A per-trial scalar ``[T]`` as one value per silo ``[T * N, 1]`` (floats pass through)."""
        if isinstance(value, torch.Tensor) and value.dim() == 1:
            return value.repeat_interleave(self.silos).unsqueeze(-1)
        return value

    def available(self) -> torch.Tensor:
        """Exactly M of N silos of each trial, uniformly (Assumption 3) -> ``[T * N]``."""
        if self.per_round == self.silos:
            return torch.ones(self.trials * self.silos, dtype=torch.bool)
        keys = torch.rand(self.trials, self.silos, generator=self._gen)
        return (keys.argsort(1).argsort(1) < self.per_round).reshape(-1)

    def _per_silo_offset(self, offset):
        t, n = self.trials, self.silos
        if n > 1 and offset.dim() == 2 and offset.shape[0] == t:
            return offset.repeat_interleave(n, dim=0)  # a per-trial aggregate, sent back by every silo
        return offset

    def _aggregate(self, released, a):
        """Per-trial aggregate ``[T, d]``."""
        a = a.view(self.trials, self.silos, 1)
        return (released.view(self.trials, self.silos, -1) * a).sum(1) / a.sum(1)

    def _offset_mean(self, offset, a):
        return self._aggregate(self._per_silo_offset(offset), a)

    def _shuffle_aggregate(self, group, values, weights, a, bound):
        """P_vec per trial (one call per trial: each trial has its own shuffler and rotation)."""
        params = self._shuffle[group]
        sent = (weights > 0).to(values.dtype).view(self.trials, self.silos, -1) * a.view(self.trials, self.silos, 1)
        per_trial = values.view(self.trials, self.silos, *values.shape[1:])
        bounds = bound.tolist() if isinstance(bound, torch.Tensor) else [bound] * self.trials
        out = [self._pvec(per_trial[i], bounds[i], params, sent[i])[0] / float(sent[i].sum())
               for i in range(self.trials)]
        return torch.stack(out), None

    def _log(self, w: torch.Tensor) -> None:  # per-round metrics are not tracked per trial
        return None


class _UnclippedTrials(TrialContext):
    """Stacked trials whose per-record messages are not clipped to L (gradient messages only:
    no ``w_old``); the bookkeeping keeps the declared bound."""

    def _clip_terms(self, data, w, w_old, diff_clip):
        _, bound = super()._clip_terms(data, w, w_old, diff_clip)
        return _grads.clipped_per_sample(self._problem, self._expand(w), data._x, data._y, None), bound


def unclipped_trials() -> type:
    """The stacked-trials channel of the ``sdp-norm-unclipped`` mutation."""
    return _UnclippedTrials


class _RateMutation:
    """Mixin of the utility mutations' channels (:mod:`silodp.verify.rates.mutations`): the step
    size scaled by ``mutation.step``, the prox dropped unless ``mutation.prox``, the noise std
    scaled by ``mutation.noise``, the first round's iterate kept; unchecked, so the ledger records
    what is really sent (:attr:`sent`) against the correct run's declaration."""

    rate_mutation = None
    opened: list | None = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.eta = self.eta * self.rate_mutation.step
        self.first = None
        self.opened.append(self)

    def prox(self, v, step=None):
        return super().prox(v, step) if self.rate_mutation.prox else v

    def _noise_std(self, group, term, std):
        return super()._noise_std(group, term, std) * self.rate_mutation.noise

    def end_round(self, w, keep_iterate=False):
        if self.first is None:
            self.first = w.detach().clone()
        super().end_round(w, keep_iterate)

    @property
    def sent(self) -> tuple:
        """Every message this channel sent (:class:`~silodp.accounting.releases.Sent`)."""
        return tuple(self._ledger.sent)

    @property
    def target(self) -> tuple[float, float]:
        """The run's requested (epsilon, delta)."""
        return float(self._algo.epsilon), float(self._algo.delta)


def rate_mutated_trials(mutation, opened: list, base: type = TrialContext) -> type:
    """The stacked-trials channel that runs the utility ``mutation`` (appending each channel it
    opens to ``opened``, so the caller can certify what was really sent)."""
    name = f"RateMutated{mutation.name.title().replace('-', '').replace('.', '')}Trials"
    cls = type(name, (_RateMutation, base), {"rate_mutation": mutation, "opened": opened, "__module__": __name__})
    return _unchecked_instrument(cls)
