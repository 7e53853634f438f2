"""Algorithms declare what they release; the run records every release and refuses any the
declaration does not cover (:mod:`silodp.accounting.releases`, :class:`silodp.algorithms.base.Context`)."""

import math

import pytest
import torch

from silodp.accounting import BatchSampling, GaussianRelease, ReleaseLedger
from silodp.accounting.releases import Sent
from silodp.algorithms import ALGORITHMS, Problem, linear_model
from silodp.algorithms.base import FederatedAlgorithm
from silodp.algorithms.data import synthetic
from silodp.algorithms.plan import ShufflePlan
from silodp.algorithms.proxsgd import IsrlProxSGD


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=3, n=40, d=3, seed=0)
    return data, Problem(linear_model(3), "logistic", clip=1.0, beta=1.0)


class OneMoreRelease(IsrlProxSGD):
    """A deliberately mis-declared toy: sends one more "grad" message than it declares."""

    name = "toy-one-more"

    def _run(self, ctx, w):
        w = super()._run(ctx, w)
        data = ctx.batch(ctx.sampler(int(self.batch_size)))
        ctx.send("grad", ctx.term(data, w), ctx.available(), std=ctx.sigmas["sigma"])
        return w


class UndeclaredGroup(IsrlProxSGD):
    name = "toy-undeclared"

    def _run(self, ctx, w):
        data = ctx.full()
        ctx.send("snapshot", ctx.term(data, w), ctx.available(), std=ctx.sigmas["sigma"])
        return w


def test_a_release_beyond_the_declaration_raises_naming_it(setup):
    data, problem = setup
    algo = OneMoreRelease(rounds=3, batch_size=5, step_size=0.1, epsilon=2.0, delta=1e-5)
    with pytest.raises(ValueError, match=r"release 4 of group 'grad': only 3 were declared"):
        algo.run(problem, data.train)
    with pytest.raises(ValueError, match="declared no such message group"):
        UndeclaredGroup(rounds=3, batch_size=5, step_size=0.1, sigmas={"sigma": 1.0}).run(problem, data.train)


def test_less_noise_than_declared_raises(setup):
    """The run-time check catches the audit's halve-noise bug on its own."""
    from silodp.verify.audit.mutations import get_mutation

    data, problem = setup
    algo = IsrlProxSGD(rounds=2, batch_size=5, step_size=0.1, sigmas={"sigma": 0.3})
    halved = get_mutation("halve-noise").context(checked=True)
    with pytest.raises(ValueError, match=r"group 'grad': noise multiplier 0.75 is below the declared 1.5"):
        algo.run(problem, data.train, context=halved)


def test_another_sampling_than_declared_raises():
    ledger = ReleaseLedger([GaussianRelease("grad", 5, 2.0, BatchSampling.SHUFFLED, 10, 100)])
    ledger.record(Sent("grad", BatchSampling.SHUFFLED, 10, 100, noise_multiplier=2.0))
    with pytest.raises(ValueError, match="with-replacement"):
        ledger.record(Sent("grad", BatchSampling.WITH_REPLACEMENT, 10, 100, noise_multiplier=2.0))


PRIVATE = sorted(name for name, cls in ALGORITHMS.items() if cls.private)


@pytest.mark.parametrize("name", PRIVATE)
def test_every_private_algorithm_runs_within_its_declaration(name, setup):
    """Each run's ledger: every group declared, at most the declared count, at least the declared
    noise multiplier (checked while running), and the totals are what the class declares."""
    data, problem = setup
    params = dict(rounds=4, batch_size=5, step_size=0.1, epsilon=4.0, delta=1e-4, metrics_every=0)
    if name.startswith("sdp-"):
        params.update(rounds=2)
    if "svrg" in name:
        params.update(inner_steps=2, rounds=2)
    cls = ALGORITHMS[name]
    algo = cls(**params)
    result = algo.run(problem, data.train)
    assert result.ledger, "the ledger recorded nothing"
    cfg = algo.plan.transcript_config(problem, data.train)
    shuffled = isinstance(cls.plan, ShufflePlan)
    budgets = {"epsilon": 4.0, "delta": 1e-4} if shuffled else result.sigmas
    declared = {r.group: r for r in cls.plan.declaration(cfg, budgets)}
    sent = {}
    for s in result.ledger:
        sent[s.group] = sent.get(s.group, 0) + 1
        assert s.group in declared
        if not shuffled:
            assert s.noise_multiplier >= declared[s.group].noise_multiplier * (1 - 1e-9)
    for group, count in sent.items():
        assert count <= declared[group].count
    if not shuffled and "spider" not in name:  # fixed schedules: exact counts
        assert sent == {g: r.count for g, r in declared.items()}
    assert math.isfinite(result.epsilon) and result.epsilon <= 4.0 * (1 + 1e-9)


def test_non_private_algorithms_are_recorded_not_checked(setup):
    data, problem = setup
    result = ALGORITHMS["mb-sgd"](rounds=3, batch_size=5, step_size=0.1).run(problem, data.train)
    assert [s.group for s in result.ledger] == ["grad"] * 3
    assert FederatedAlgorithm.private and not ALGORITHMS["mb-sgd"].private


def test_term_not_computed_by_the_context_is_refused(setup):
    class RawSend(IsrlProxSGD):
        name = "toy-raw"

        def _run(self, ctx, w):
            data = ctx.batch(ctx.sampler(int(self.batch_size)))
            ctx.send("grad", torch.zeros(ctx.num_silos, w.shape[0], dtype=w.dtype), ctx.available(), std=1.0)
            return w

    data, problem = setup
    with pytest.raises(ValueError, match="not computed by Context.term"):
        RawSend(rounds=1, batch_size=5, step_size=0.1, sigmas={"sigma": 1.0}).run(problem, data.train)
