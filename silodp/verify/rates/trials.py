"""Many independent runs of one federated algorithm at once: trials stacked as extra silos.

A rate experiment needs E[metric] with a confidence interval, i.e. many independent runs. Instead
of looping over runs, :func:`run_trials` builds one federation of ``T * N`` silos (trial t owns
silos ``t*N .. t*N + N - 1``, each with its own data) and runs the algorithm's own round logic
(``FederatedAlgorithm._run``) with a :class:`~silodp.verify.instruments.TrialContext` whose iterate is ``w: [T, d]``: every
silo computes its message at its trial's iterate, the Gaussian noise of all ``T * N`` silos is one
draw, and the server aggregates per trial. Availability (M of N) is drawn per trial. Privacy noise
is calibrated once, on a one-trial federation, by the algorithm itself (the accounting layer).

The algorithms pick a uniform random iterate by ``ctx.iterates[random index]`` (Alg 1 line 15,
Alg 2 line 3); in a :class:`TrialContext` an integer index of ``iterates`` returns an independent
uniform pick *per trial* instead, so trials stay independent. SPIDER's noise and clipping depend
on ``||w_r - w_{r-1}||``: on a ``[T, d]`` iterate it computes one norm per trial, and
:class:`TrialContext` accepts per-trial noise scales, clip bounds and P_vec bounds.
:func:`stacks_trials` asks the algorithm class (its ``stacked_trials``) whether its ``_run`` is correct on stacked trials; the others
(Local SGD and the DP-SCAFFOLD family keep per-silo local models ``[N, d]``) are refused. Output
picks ``Unif(iterates)`` per trial.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from silodp.algorithms.base import FederatedAlgorithm
from silodp.algorithms.federation import Federation
from silodp.verify.instruments import TrialContext, _pick_uniform

__all__ = ["TrialContext", "TrialOutcome", "batch_safe", "run_trials", "stacks_trials"]

def stacks_trials(cls: type) -> bool:
    """Whether the algorithm class ``cls`` runs correctly on a ``[T, d]`` iterate: the
    ``stacked_trials`` of the class that defines its ``_run`` (a subclass overriding ``_run`` does
    not inherit the claim)."""
    owner = next((k for k in cls.__mro__ if "_run" in vars(k)), None)
    return owner is not None and bool(vars(owner).get("stacked_trials", False))


def batch_safe() -> frozenset[str]:
    """The registered algorithms that run as stacked trials (:func:`stacks_trials`)."""
    from silodp.algorithms import ALGORITHMS

    return frozenset(name for name, cls in ALGORITHMS.items() if stacks_trials(cls))

DataFn = Callable[[int, torch.Generator], tuple[torch.Tensor, torch.Tensor]]


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
    if not stacks_trials(type(algorithm)):
        raise ValueError(f"algorithm: {algorithm.name!r} cannot run as stacked trials; one of {sorted(batch_safe())}")
    if algorithm.record_transcript:
        raise ValueError("record_transcript: not supported for stacked trials")
    gen = torch.Generator().manual_seed(int(seed))
    x, y = data(1, gen)
    n_silos = x.shape[1]
    m = n_silos if silos_per_round is None else int(silos_per_round)
    template = _template(x, y, m)
    plan = algorithm.plan
    plan.validate(problem, template)
    sigmas, epsilon, delta, shuffle, _ = plan.resolve(problem, template)
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
        w0 = problem.model.init(ctx._gen, dtype=fed.x.dtype) if algorithm.w0 is None else algorithm.w0
        last = algorithm._run(ctx, w0.to(fed.x.dtype).expand(size, -1).clone())
        w_last.append(last)
        uniform = plan.picks_uniform and bool(ctx.iterates)
        w_priv.append(_pick_uniform(ctx.iterates, ctx._gen) if uniform else last)
        pool.append(torch.stack(list(ctx.iterates)) if uniform else None)
    shuffle_out = None if shuffle is None else {g: vars(p) for g, p in shuffle.items()}
    iterates = torch.cat(pool, dim=1) if pool and all(p is not None for p in pool) else None
    return TrialOutcome(torch.cat(w_priv), torch.cat(w_last), sigmas, epsilon, delta, shuffle_out, chunk, iterates)
