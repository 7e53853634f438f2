"""Cheating subclasses of FederatedAlgorithm written against the public API (issue 27): each is
impossible through the channel (:class:`silodp.algorithms.base.Context`) or refused at run time,
and explicit noise reports what it certifies, never the requested epsilon."""

import math
import warnings

import pytest
import torch

from silodp.accounting.releases import BatchSampling
from silodp.algorithms import Problem, linear_model
from silodp.algorithms.context import Batch, Context, Term
from silodp.algorithms.data import synthetic
from silodp.algorithms.privacy import certify
from silodp.algorithms.proxsgd import IsrlProxSGD, SdpProxSGD
from silodp.algorithms.svrg import IsrlProxSVRG

PARAMS = dict(rounds=3, batch_size=5, step_size=0.1, epsilon=2.0, delta=1e-5, metrics_every=0)


@pytest.fixture(scope="module")
def setup():
    data = synthetic(num_silos=3, n=40, d=3, seed=0)
    return data.train, Problem(linear_model(3), "logistic", clip=1.0, beta=1.0)


def _cheat(run):
    """An ISRL-DP Prox-SGD whose ``_run`` is ``run(ctx, w)``."""
    return type("Cheat", (IsrlProxSGD,), {"name": "cheat", "_run": lambda self, ctx, w: run(self, ctx, w)})


def _step(ctx):
    sampler = ctx.sampler(5)
    return sampler, ctx.batch(sampler)


def scaled_term(self, ctx, w):        # 1: a term scaled x10 after Context.term
    _, data = _step(ctx)
    ctx.send("grad", ctx.term(data, w) * 10, ctx.available(), std=ctx.sigmas["sigma"])


def forged_term(self, ctx, w):        # 2: a Term built by hand around other values
    _, data = _step(ctx)
    ctx.send("grad", Term(1.0, data), ctx.available(), std=ctx.sigmas["sigma"])


def raw_data(self, ctx, w):           # 3: raw values sent after a legitimate term
    _, data = _step(ctx)
    ctx.term(data, w)
    ctx.send("grad", torch.ones(ctx.num_silos, 3, dtype=ctx.dtype), ctx.available(), std=ctx.sigmas["sigma"])


def term_sent_twice(self, ctx, w):    # 4: one term released twice
    _, data = _step(ctx)
    t = ctx.term(data, w)
    ctx.send("grad", t, ctx.available(), std=ctx.sigmas["sigma"])
    ctx.send("grad", t, ctx.available(), std=ctx.sigmas["sigma"])


def private_offset(self, ctx, w):     # 5: an offset that is not a released value
    _, data = _step(ctx)
    ctx.send("grad", ctx.term(data, w), ctx.available(), std=ctx.sigmas["sigma"],
             offset=torch.ones(3, dtype=ctx.dtype))


def fake_batch(self, ctx, w):         # 6: every record labelled as a K-batch (a Batch built by hand)
    full = ctx.full()
    ctx.term(Batch((full._x, full._y, None), full._weights, None, BatchSampling.SHUFFLED, 5), w)


def fake_sampler(self, ctx, w):       # 7: a batch selected by the algorithm (its own sampler)
    class Mine:
        sampling = BatchSampling.SHUFFLED

        def next(self):
            return torch.zeros(3, 5, dtype=torch.long)
    ctx.batch(Mine())


def less_noise(self, ctx, w):         # 8: less noise than declared
    _, data = _step(ctx)
    ctx.send("grad", ctx.term(data, w), ctx.available(), std=ctx.sigmas["sigma"] / 2)


def extra_message(self, ctx, w):      # 9: one message more than declared
    sampler = ctx.sampler(5)
    for _ in range(int(self.rounds) + 1):
        ctx.send("grad", ctx.term(ctx.batch(sampler), w), ctx.available(), std=ctx.sigmas["sigma"])


def undeclared_group(self, ctx, w):   # 10: a message group the algorithm never declared
    ctx.send("snapshot", ctx.term(ctx.full(), w), ctx.available(), std=ctx.sigmas["sigma"])


def full_data_as_grad(self, ctx, w):  # 11: the full data sent where K-batches are declared
    ctx.send("grad", ctx.term(ctx.full(), w), ctx.available(), std=ctx.sigmas["sigma"])


def negative_noise(self, ctx, w):     # 12: a negative or NaN standard deviation
    _, data = _step(ctx)
    ctx.send("grad", ctx.term(data, w), ctx.available(), std=-ctx.sigmas["sigma"])


def nan_noise(self, ctx, w):          # 13
    _, data = _step(ctx)
    ctx.send("grad", ctx.term(data, w), ctx.available(), std=math.nan)


def other_runs_batch(self, ctx, w):   # 14: a batch of another run's channel
    other = Context(self, ctx._problem, ctx._fed, 0, ctx.sigmas, None, None)
    ctx.term(other.full(), w)


def CHEATS_REFUSED():
    return [
        (scaled_term, TypeError, "unsupported operand"),
        (forged_term, ValueError, "not computed by Context.term"),
        (raw_data, ValueError, "not computed by Context.term"),
        (term_sent_twice, ValueError, "sent already"),
        (private_offset, ValueError, "offset of group 'grad'"),
        (fake_batch, ValueError, "must come from this run's Context.batch"),
        (fake_sampler, ValueError, "sampler: must come from this run's Context.sampler"),
        (less_noise, ValueError, "below the declared"),
        (extra_message, ValueError, "only 3 were declared"),
        (undeclared_group, ValueError, "declared no such message group"),
        (full_data_as_grad, ValueError, "sent as full batches"),
        (negative_noise, ValueError, "below the declared"),
        (nan_noise, ValueError, "below the declared"),
        (other_runs_batch, ValueError, "must come from this run's Context.batch"),
    ]


@pytest.mark.parametrize("run, error, match", CHEATS_REFUSED(), ids=lambda v: getattr(v, "__name__", ""))
def test_cheats_through_the_channel_are_refused(setup, run, error, match):
    fed, problem = setup
    with pytest.raises(error, match=match):
        _cheat(run)(**PARAMS).run(problem, fed)


def test_the_channel_exposes_no_data_generator_or_ledger_switch(setup):
    """15-17: no public name reaches the records, the labels, the noise generator, the ledger or
    its switch; the released messages are the only tensors an algorithm receives."""
    seen = {}

    def spy(self, ctx, w):
        seen["public"] = {n for n in dir(ctx) if not n.startswith("_")}
        _, data = _step(ctx)
        seen["batch"] = {n for n in dir(data) if not n.startswith("_")}
        term = ctx.term(data, w)
        seen["term"] = {n for n in dir(term) if not n.startswith("_")}
        ctx.send("grad", term, ctx.available(), std=ctx.sigmas["sigma"])
        return w

    fed, problem = setup
    _cheat(spy)(**dict(PARAMS, rounds=1)).run(problem, fed)
    for name in ("fed", "problem", "gen", "ledger", "check_releases", "entries", "record", "pvec"):
        assert name not in seen["public"], name
    assert seen["batch"] == {"sampling", "size"} and seen["term"] == {"bound"}


def test_the_check_cannot_be_switched_off_by_subclassing(setup):
    """18: ``context_class.check_releases = False`` is gone; a channel subclass outside the
    instruments module is refused at class creation, ``run`` cannot be overridden, a class cannot
    name its own channel, and ``run``'s ``context`` must be the channel or an instrument."""
    with pytest.raises(TypeError, match="cannot be subclassed"):
        type("Mine", (Context,), {})
    with pytest.raises(TypeError, match="run is the channel's verb"):
        type("Mine", (IsrlProxSGD,), {"run": lambda self, *a, **k: None})
    fed, problem = setup
    algo = IsrlProxSGD(**dict(PARAMS, rounds=1))
    with pytest.raises(TypeError, match="context_class is gone"):
        type("Mine", (IsrlProxSGD,), {"context_class": Context})
    with pytest.raises(ValueError, match="context: must be Context"):
        algo.run(problem, fed, context=dict)


def test_a_plan_cannot_bring_its_own_release_code(setup):
    """A Plan subclass chooses between the plans' channels; a channel of its own (here one whose
    release drops the noise while its ledger entry still claims it) is refused before any release."""
    from silodp.algorithms import plan

    class Noiseless(plan.GaussianChannel):
        def release(self, ctx, group, values, term, a, std, offset, replayed):
            return super().release(ctx, group, values, term, a, 0.0, offset, replayed)

    own = type("OwnChannel", (IsrlProxSGD,), {"Plan": type("OwnPlan", (plan.GaussianPlan,), {"Channel": Noiseless})})
    fed, problem = setup
    with pytest.raises(TypeError, match="Noiseless: a run releases through the plans' channels only"):
        own(**dict(PARAMS, rounds=1)).run(problem, fed)
    assert IsrlProxSGD(**dict(PARAMS, rounds=1)).run(problem, fed).ledger  # the plans' own channel runs


def test_noise_cancelled_by_replaying_the_generator_is_impossible(setup):
    """19: the generator is the channel's; the public randomness (coins, uniform picks) draws from
    it without exposing its state, so a release's noise cannot be reproduced and subtracted."""
    fed, problem = setup
    got = {}

    def replay(self, ctx, w):
        got["has_gen"] = any(isinstance(getattr(ctx, n), torch.Generator) for n in dir(ctx) if not n.startswith("_")
                             and not callable(getattr(type(ctx), n, None)))
        return w

    _cheat(replay)(**PARAMS).run(problem, fed)
    assert got == {"has_gen": False}


def test_the_final_model_is_the_algorithms_output_of_released_values(setup):
    """20: with a noise-free channel two datasets that differ only in records the algorithm never
    releases give the same model (no path from the data to the model but the releases)."""
    fed, problem = setup

    def nothing(self, ctx, w):
        for _ in range(2):
            ctx.end_round(w)
        return w

    a = _cheat(nothing)(**PARAMS).run(problem, fed, seed=1)
    other = fed.to(fed.x.dtype)
    other.x = other.x + 100.0
    b = _cheat(nothing)(**PARAMS).run(problem, other, seed=1)
    assert torch.equal(a.w_priv, b.w_priv)


def test_explicit_sigmas_report_what_they_certify(setup):
    """21-22: ``RunResult.epsilon`` of explicit ``sigmas`` is their certificate, not the request:
    tiny noise with a claimed epsilon 1 warns and reports the huge certificate and the target."""
    fed, problem = setup
    algo = IsrlProxSGD(rounds=3, batch_size=5, step_size=0.1, sigmas={"sigma": 1e-3}, epsilon=1.0, delta=1e-5,
                       metrics_every=0)
    with pytest.warns(UserWarning, match="above the requested 1"):
        res = algo.run(problem, fed)
    cfg = algo.plan.transcript_config(problem, fed)
    assert res.epsilon == certify(IsrlProxSGD, cfg, {"sigma": 1e-3}, 1e-5)[0] > 100
    assert res.target_epsilon == 1.0 and res.delta == 1e-5
    quiet = IsrlProxSGD(rounds=3, batch_size=5, step_size=0.1, sigmas={"sigma": 5.0}, metrics_every=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        res = quiet.run(problem, fed)
    assert res.epsilon == certify(IsrlProxSGD, cfg, {"sigma": 5.0}, 1 / fed.min_size ** 2)[0] < math.inf


def test_explicit_shuffle_params_report_what_they_certify(setup):
    """Issue 22 item 2: b = 1 trial certifies far more than the requested 3.0 (warned, both reported)."""
    fed, problem = setup
    algo = SdpProxSGD(rounds=1, batch_size=5, step_size=0.1, epsilon=3.0, delta=1e-5, metrics_every=0,
                      shuffle_params={"g": 4, "b": 1, "p": 0.5})
    with pytest.warns(UserWarning, match="above the requested 3"):
        res = algo.run(problem, fed)
    assert res.epsilon > 30 and res.target_epsilon == 3.0


def test_the_offset_may_be_a_released_value(setup):
    """Honest offsets (SVRG's released snapshot gradient) pass the channel's check."""
    fed, problem = setup
    res = IsrlProxSVRG(rounds=1, batch_size=5, step_size=0.1, inner_steps=2, epsilon=2.0, delta=1e-5,
                       metrics_every=0).run(problem, fed)
    assert [s.group for s in res.ledger] == ["full", "diff", "diff"] and res.epsilon <= 2.0
