"""Many independent runs of one federated algorithm at once: trials stacked as extra silos.

A rate experiment needs E[metric] with a confidence interval, i.e. many independent runs. Instead
of looping over runs, :func:`run_trials` builds one federation of ``T * N`` silos (trial t owns
silos ``t*N .. t*N + N - 1``, each with its own data) and runs the algorithm's own round logic
(``FederatedAlgorithm._run``) with a :class:`TrialContext` whose iterate is ``w: [T, d]``: every
silo computes its message at its trial's iterate, the Gaussian noise of all ``T * N`` silos is one
draw, and the server aggregates per trial. Availability (M of N) is drawn per trial. Privacy noise
is calibrated once, on a one-trial federation, by the algorithm itself (the accounting layer).

The algorithms pick a uniform random iterate by ``ctx.iterates[random index]`` (Alg 1 line 15,
Alg 2 line 3); in a :class:`TrialContext` an integer index of ``iterates`` returns an independent
uniform pick *per trial* instead, so trials stay independent. SPIDER's noise and clipping depend
on ``||w_r - w_{r-1}||``: on a ``[T, d]`` iterate it computes one norm per trial, and
:class:`TrialContext` accepts per-trial noise scales, clip bounds and P_vec bounds.
:data:`BATCH_SAFE` lists the algorithms whose ``_run`` is correct on stacked trials; the others
(Local SGD and the DP-SCAFFOLD family keep per-silo local models ``[N, d]``) are refused. Output
picks ``Unif(iterates)`` per trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from silodp.algorithms.base import Context, FederatedAlgorithm
from silodp.algorithms.federation import Federation

#: Algorithms whose ``_run`` is correct on a ``[T, d]`` iterate (no per-run norms or picks).
BATCH_SAFE = frozenset({"isrl-prox-sgd", "sdp-prox-sgd", "isrl-mb-sgd", "mb-sgd", "isrl-prox-svrg",
                        "sdp-prox-svrg", "isrl-pl-svrg", "sdp-pl-svrg", "isrl-spider", "sdp-spider",
                        "isrl-fed-spider"})

DataFn = Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


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
    """A :class:`~silodp.algorithms.base.Context` for ``trials`` stacked runs of ``silos`` silos."""

    def __init__(self, algo, problem, federation: Federation, seed: int, sigmas: dict, shuffle,
                 trials: int, silos: int, silos_per_round: int):
        super().__init__(algo, problem, federation, seed, sigmas, shuffle, None)
        self.entries = None
        self.iterates = _PerTrialIterates(self.gen)
        self.trials, self.silos, self.per_round = int(trials), int(silos), int(silos_per_round)

    def _per_silo(self, w: torch.Tensor | None) -> torch.Tensor | None:
        if w is None or w.dim() == 1:
            return w
        return w.repeat_interleave(self.silos, dim=0)

    def available(self) -> torch.Tensor:
        """Exactly M of N silos of each trial, uniformly (Assumption 3) -> ``[T * N]``."""
        if self.per_round == self.silos:
            return torch.ones(self.trials * self.silos, dtype=torch.bool)
        keys = torch.rand(self.trials, self.silos, generator=self.gen)
        return (keys.argsort(1).argsort(1) < self.per_round).reshape(-1)

    def _per_silo_scale(self, value):
        """A per-trial scalar ``[T]`` as one value per silo ``[T * N, 1]`` (floats pass through)."""
        if isinstance(value, torch.Tensor) and value.dim() == 1:
            return value.repeat_interleave(self.silos).unsqueeze(-1)
        return value

    def term(self, data, w, w_old=None, diff_clip=None):
        return super().term(data, self._per_silo(w), self._per_silo(w_old), self._per_silo_scale(diff_clip))

    def send(self, group, term, data, avail, std=0.0, bound=None, offset=None):
        """Per-trial aggregate ``[T, d]``; Gaussian messages of all silos in one draw."""
        _, _, weights, _ = data
        t, n = self.trials, self.silos
        a = avail.to(self.fed.x.dtype).view(t, n, 1)
        m = a.sum(1)
        if offset is not None and n > 1 and offset.dim() == 2 and offset.shape[0] == t:
            offset = offset.repeat_interleave(n, dim=0)  # a per-trial aggregate, sent back by every silo
        if self.algo.shuffled:
            agg = self._shuffle_trials(group, term, weights, a, bound)
            if offset is not None:
                agg = agg + (offset.view(t, n, -1) * a).sum(1) / m
            return agg, None
        mean = term if term.dim() == 2 else torch.einsum("nk,nkd->nd", weights, term)
        scale = self._per_silo_scale(std) if isinstance(std, torch.Tensor) else float(std)
        noise = torch.randn(mean.shape, generator=self.gen, dtype=mean.dtype) * scale
        messages = mean + noise if offset is None else mean + offset + noise
        return (messages.view(t, n, -1) * a).sum(1) / m, messages

    def _shuffle_trials(self, group, term, weights, a, bound):
        """P_vec per trial (one call per trial: each trial has its own shuffler and rotation)."""
        params = self.shuffle[group]
        sent = (weights > 0).to(term.dtype).view(self.trials, self.silos, -1) * a
        per_trial = term.view(self.trials, self.silos, *term.shape[1:])
        bounds = bound.tolist() if isinstance(bound, torch.Tensor) else [bound] * self.trials
        out = [self.pvec(per_trial[i], bounds[i], params, sent[i])[0] / float(sent[i].sum())
               for i in range(self.trials)]
        return torch.stack(out)

    def log(self, w: torch.Tensor) -> None:  # per-round metrics are not tracked per trial
        return None


@dataclass(frozen=True)
class TrialOutcome:
    """``w_priv`` and ``w_last`` ``[T, d]`` of T independent runs, and the noise they used;
    ``iterates`` ``[I, T, d]``: the iterates the uniform output picks from (None: not a uniform output),
    so an expectation over the output rule can be computed exactly."""

    w_priv: torch.Tensor
    w_last: torch.Tensor
    sigmas: dict
    epsilon: float | None
    delta: float | None
    shuffle: dict | None
    chunk: int
    iterates: torch.Tensor | None = None


def _template(x: torch.Tensor, y: torch.Tensor, silos_per_round: int) -> Federation:
    n_silos, n = x.shape[1:3]
    return Federation(x[0], y[0], torch.full((n_silos,), n), silos_per_round)


def run_trials(algorithm: FederatedAlgorithm, problem, data: DataFn, trials: int,
               silos_per_round: int | None = None, seed: int = 0, max_elements: int = 2**22,
               context: type = TrialContext) -> TrialOutcome:
    """Run ``trials`` independent copies of ``algorithm`` on data from ``data(T, generator)``.

    ``data`` returns ``x: [T, N, n, ...]``, ``y: [T, N, n]`` (fresh samples for SO, the same data
    set repeated for ERM). Trials are run in chunks of at most ``max_elements`` data entries.
    Reproducible from ``seed``. ``context``: a :class:`TrialContext` subclass (audits' mutations).
    """
    if int(trials) < 1:
        raise ValueError(f"trials: must be >= 1, got {trials}")
    if algorithm.name not in BATCH_SAFE:
        raise ValueError(f"algorithm: {algorithm.name!r} cannot run as stacked trials; one of {sorted(BATCH_SAFE)}")
    if algorithm.record_transcript:
        raise ValueError("record_transcript: not supported for stacked trials")
    gen = torch.Generator().manual_seed(int(seed))
    x, y = data(1, gen)
    n_silos = x.shape[1]
    m = n_silos if silos_per_round is None else int(silos_per_round)
    template = _template(x, y, m)
    algorithm._validate(problem, template)
    sigmas, epsilon, delta, shuffle = algorithm.resolve_noise(problem, template)
    per_trial = max(1, x[0].numel())
    chunk = max(1, min(int(trials), max_elements // per_trial))
    seeds = np.random.SeedSequence(int(seed)).generate_state((int(trials) + chunk - 1) // chunk)
    w_priv, w_last, pool = [], [], []
    for i, start in enumerate(range(0, int(trials), chunk)):
        size = min(chunk, int(trials) - start)
        xs, ys = data(size, gen)
        fed = Federation(xs.reshape(size * n_silos, *xs.shape[2:]), ys.reshape(size * n_silos, -1),
                         torch.full((size * n_silos,), xs.shape[2]))
        ctx = context(algorithm, problem, fed, int(seeds[i]), sigmas, shuffle, size, n_silos, m)
        w0 = problem.model.init(ctx.gen, dtype=fed.x.dtype) if algorithm.w0 is None else algorithm.w0
        last = algorithm._run(ctx, w0.to(fed.x.dtype).expand(size, -1).clone())
        w_last.append(last)
        uniform = algorithm.picks_uniform and bool(ctx.iterates)
        w_priv.append(_pick_uniform(ctx.iterates, ctx.gen) if uniform else last)
        pool.append(torch.stack(list(ctx.iterates)) if uniform else None)
    shuffle_out = None if shuffle is None else {g: vars(p) for g, p in shuffle.items()}
    iterates = torch.cat(pool, dim=1) if pool and all(p is not None for p in pool) else None
    return TrialOutcome(torch.cat(w_priv), torch.cat(w_last), sigmas, epsilon, delta, shuffle_out, chunk, iterates)
