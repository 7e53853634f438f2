"""Conformance suites run over every registered entry: what any accountant and any algorithm of
silodp must satisfy, whoever wrote it.

:func:`check_accountant` -- on a fixed battery: ``supports()`` never raises (malformed and foreign
inputs included); every supported certificate is sound, at least the exact Gaussian epsilon
(Balle & Wang 2018's analytic curve of the composed Gaussian, a T-fold composition of multiplier z
being one Gaussian of multiplier z / sqrt(T)) and at least dp-accounting's *optimistic* PLD of a
Poisson-subsampled Gaussian (a lower bound of the exact epsilon); for P_vec invocations
(:class:`~silodp.accounting.events.PvecDpEvent`), at least the exact epsilon of one coordinate's
pair (Bin(m, 1/2) + g, Bin(m, 1/2)), summed by scipy's binomial pmf; monotone: no less epsilon
for less noise or more steps. An accountant answers the cases it supports (the Gaussian ones for
the Gaussian accountants, the P_vec ones for ``pvec``); each must support at least one.

:func:`check_algorithm` -- one small run: it stays within its declaration (the ledger checked
every release), the calibration certifies at most the target, and the ledger refuses a run whose
noise is halved (Gaussian) and one message beyond the declared count of each group.
"""

from __future__ import annotations

import functools
import math
from typing import Any, Callable

from silodp.accounting import events as ev
from silodp.accounting.calibration import AccountantFactory

#: (noise multiplier, steps) of the battery's Gaussian compositions, and its delta; the
#: monotonicity checks compare its points (more noise, same steps; more steps, same noise)
GAUSSIAN_BATTERY = ((0.8, 1), (2.0, 10), (4.0, 10), (4.0, 50))
MONOTONE_IN_NOISE = ((2.0, 10), (4.0, 10))
MONOTONE_IN_STEPS = ((4.0, 10), (4.0, 50))
DELTA = 1e-5
#: a Poisson-subsampled Gaussian (q, z, steps) compared with dp-accounting's optimistic PLD
SUBSAMPLED = (0.05, 1.0, 40)
#: the accountant of :func:`check_algorithm`'s refused runs (their certificate is computed before
#: the ledger refuses them and then discarded: the cheapest sound one serves; shuffle-DP runs keep
#: their own, cached with the calibration's)
REFUSED_RUN_ACCOUNTANT = "rdp"
#: P_vec invocations (levels g, trials b, messages m) of one coordinate, compared with the exact pair
PVEC_BATTERY = ((2, 4, 100), (4, 2, 200))


class _Foreign(ev.DpEvent):
    """An event no accountant knows."""


def _epsilon(make: AccountantFactory, relation: ev.NeighboringRelation, event: ev.DpEvent) -> float | None:
    acc = make(relation)
    if not acc.supports(event):
        return None
    return acc.compose(event).get_epsilon(DELTA)


def check_accountant(make: AccountantFactory, relation: ev.NeighboringRelation = ev.REPLACE_ONE) -> dict:
    """Run the battery on the accountant factory ``make`` (``(relation) -> Accountant``); raises
    AssertionError naming the failed property; returns the certificates it computed."""
    from silodp.accounting.gaussian import epsilon_for_delta

    acc = make(relation)
    for odd in (None, object(), "gaussian", _Foreign(), ev.NonPrivateDpEvent()):
        answer = acc.supports(odd)  # must not raise
        assert isinstance(answer, bool), f"supports({odd!r}) returned {answer!r}"
    out = {}
    for z, steps in GAUSSIAN_BATTERY:
        event = ev.SelfComposedDpEvent(ev.GaussianDpEvent(z), steps) if steps > 1 else ev.GaussianDpEvent(z)
        eps = _epsilon(make, relation, event)
        if eps is None:
            continue
        exact = epsilon_for_delta(z / math.sqrt(steps), DELTA, ev.sensitivity(relation))
        assert eps >= exact * (1 - 1e-9), f"gaussian z={z}, steps={steps}: {eps} below the exact {exact}"
        out[("gaussian", z, steps)] = eps
    by_noise = [out.get(("gaussian", *point)) for point in MONOTONE_IN_NOISE]
    if None not in by_noise:
        assert by_noise[0] >= by_noise[1] * (1 - 1e-9), f"not monotone in noise: {by_noise}"
    by_steps = [out.get(("gaussian", *point)) for point in MONOTONE_IN_STEPS]
    if None not in by_steps:
        assert by_steps[0] <= by_steps[1] * (1 + 1e-9), f"not monotone in steps: {by_steps}"
    q, z, steps = SUBSAMPLED
    event = ev.SelfComposedDpEvent(ev.PoissonSampledDpEvent(q, ev.GaussianDpEvent(z)), steps)
    eps = _epsilon(make, relation, event)
    if eps is not None:
        lower = _dp_accounting_lower(relation)
        assert eps >= lower * (1 - 1e-6), f"poisson q={q}, z={z}, steps={steps}: {eps} below dp-accounting's {lower}"
        out[("poisson", q, z, steps)] = eps
    out.update(_check_pvec(make, relation))
    return out


def _pvec(g: int, b: int, m: int, uses: int = 1) -> ev.DpEvent:
    one = ev.PvecDpEvent(g, b, m, 1, float(g))  # one coordinate: the l2 shift is g
    return ev.SelfComposedDpEvent(one, uses) if uses > 1 else one


def _check_pvec(make: AccountantFactory, relation: ev.NeighboringRelation) -> dict:
    """The P_vec cases: sound against :func:`_exact_pvec_epsilon`, monotone in trials and uses."""
    out = {}
    for g, b, m in PVEC_BATTERY:
        eps = _epsilon(make, relation, _pvec(g, b, m))
        if eps is None:
            continue
        exact = _exact_pvec_epsilon(g, m * b)
        assert eps >= exact * (1 - 1e-6), f"pvec g={g}, b={b}, m={m}: {eps} below the exact {exact}"
        out[("pvec", g, b, m)] = eps
    by_noise = [_epsilon(make, relation, _pvec(2, b, 100, 3)) for b in (2, 8)]
    if None not in by_noise:
        assert by_noise[0] >= by_noise[1] * (1 - 1e-9), f"pvec not monotone in trials: {by_noise}"
    by_uses = [_epsilon(make, relation, _pvec(2, 4, 100, t)) for t in (2, 8)]
    if None not in by_uses:
        assert by_uses[0] <= by_uses[1] * (1 + 1e-9), f"pvec not monotone in uses: {by_uses}"
    return out


@functools.lru_cache(maxsize=8)
def _exact_pvec_epsilon(shift: int, trials: int) -> float:
    """The exact epsilon at :data:`DELTA` of the pair (Bin(trials, 1/2) + shift, Bin(trials, 1/2))
    (symmetric, so either order): delta(eps) = sum_x max(0, P(x) - e^eps Q(x)), bisected on eps."""
    import numpy as np
    from scipy.stats import binom

    x = np.arange(trials + shift + 1)
    p, q = binom.pmf(x - shift, trials, 0.5), binom.pmf(x, trials, 0.5)

    def delta(eps: float) -> float:
        return float(np.sum(np.maximum(0.0, p - math.exp(eps) * q)))

    lo, hi = 0.0, 50.0
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if delta(mid) > DELTA else (lo, mid)
    return lo


@functools.lru_cache(maxsize=4)
def _dp_accounting_lower(relation: ev.NeighboringRelation) -> float:
    """dp-accounting's optimistic PLD epsilon of :data:`SUBSAMPLED` under ``relation`` (a lower
    bound of the exact one: the optimistic estimate rounds every privacy loss down)."""
    import dp_accounting as dpa
    from dp_accounting.pld import privacy_loss_distribution as pld

    q, z, steps = SUBSAMPLED
    rel = getattr(dpa.NeighboringRelation, relation.name)
    one = pld.from_gaussian_mechanism(z, pessimistic_estimate=False, value_discretization_interval=1e-3,
                                      sampling_prob=q, neighboring_relation=rel)
    return one.self_compose(steps).get_epsilon_for_delta(DELTA)


def check_algorithm(cls: type, problem: Any, federation: Any, params: dict, epsilon: float = 4.0,
                    delta: float = 1e-4) -> None:
    """One small run of ``cls(**params)`` at the target (``epsilon``, ``delta``): within its
    declaration and certified <= target; the ledger refuses halved noise and one message beyond
    each group's declared count. AssertionError names the failed property."""
    from silodp.verify.audit.mutations import get_mutation

    algo = cls(**params, epsilon=epsilon, delta=delta)
    result = algo.run(problem, federation)
    assert result.ledger, f"{cls.name}: the ledger recorded nothing"
    if not cls.private:
        return
    assert result.epsilon <= epsilon * (1 + 1e-9), f"{cls.name}: certified {result.epsilon} above the target {epsilon}"
    # the broken runs reuse the calibrated noise (explicit), certified cheaply (REFUSED_RUN_ACCOUNTANT)
    noise = dict(shuffle_params=result.shuffle) if cls.shuffled else dict(
        sigmas=result.sigmas, **({} if "accountant" in params else {"accountant": REFUSED_RUN_ACCOUNTANT}))
    if not cls.shuffled:
        halved = cls(**params, **noise, delta=delta)
        halved.context_class = get_mutation("halve-noise").context_class(checked=True)
        _refused(lambda: halved.run(problem, federation), "below the declared", f"{cls.name}: halved noise")
    for group in sorted({s.group for s in result.ledger}):
        extra = type(f"Extra{cls.__name__}", (cls,), {"_run": _one_too_many(group)})(**params, **noise, delta=delta)
        _refused(lambda: extra.run(problem, federation), "were declared", f"{cls.name}: one more {group!r}")


def _refused(run: Callable[[], Any], match: str, what: str) -> None:
    try:
        run()
    except ValueError as exc:
        assert match in str(exc), f"{what}: refused for another reason: {exc}"
        return
    raise AssertionError(f"{what}: the ledger did not refuse it")


def _one_too_many(group: str) -> Callable:
    """A ``_run`` sending ``group`` once more than declared, at ample noise and the declared batches."""
    import torch

    from silodp.accounting.releases import BatchSampling

    def run(self, ctx, w):
        decl = ctx._ledger.declaration[group]
        everyone = torch.ones(ctx.num_silos, dtype=torch.bool)
        if decl.sampling == BatchSampling.FULL:
            draw = ctx.full
        else:
            sampler = ctx.sampler(decl.batch_size, subset=decl.sampling == BatchSampling.SUBSET,
                                  replacement=decl.sampling == BatchSampling.WITH_REPLACEMENT)
            draw = lambda: ctx.batch(sampler)  # noqa: E731
        for _ in range(decl.count + 1):
            ctx.send(group, ctx.term(draw(), w), everyone, std=1e6)
        return w

    return run
