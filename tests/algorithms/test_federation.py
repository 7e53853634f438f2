"""The federation simulator: availability, minibatches, padding, reproducibility, errors."""

import pytest
import torch

from silodp.algorithms import BatchSampler, Federation, IsrlProxSGD, Problem, linear_model, synthetic


def _fed(**kw):
    xs = [torch.randn(n, 2, dtype=torch.float64) for n in (5, 8, 6, 7)]
    ys = [torch.zeros(len(x)) for x in xs]
    return Federation.from_silos(xs, ys, **kw)


def test_padding_and_mask():
    fed = _fed()
    assert fed.x.shape == (4, 8, 2) and fed.counts.tolist() == [5, 8, 6, 7]
    assert fed.mask.sum(1).tolist() == [5, 8, 6, 7]
    assert torch.allclose(fed.weights.sum(1), torch.ones(4, dtype=torch.float64))


def test_exactly_m_of_n_available():
    fed = _fed(silos_per_round=2)
    gen = torch.Generator().manual_seed(0)
    draws = torch.stack([fed.sample_available(gen) for _ in range(400)])
    assert torch.all(draws.sum(1) == 2)
    assert torch.allclose(draws.double().mean(0), torch.full((4,), 0.5, dtype=torch.float64), atol=0.08)


def test_random_m_r_varies_with_mean_m():
    fed = _fed(silos_per_round=2, availability="random")
    gen = torch.Generator().manual_seed(0)
    sizes = torch.stack([fed.sample_available(gen).sum() for _ in range(2000)]).double()
    assert sizes.min() >= 1 and sizes.max() > 2 and len(sizes.unique()) >= 3
    assert abs(sizes.mean().item() - 2.0) < 0.15


def test_without_replacement_batches_are_disjoint_within_an_epoch():
    fed = _fed()
    sampler = BatchSampler(fed.counts, 2, False, torch.Generator().manual_seed(1))
    first, second = sampler.next(), sampler.next()
    for i in range(4):
        seen = torch.cat([first[i], second[i]])
        assert len(seen.unique()) == 4 and int(seen.max()) < int(fed.counts[i])


def test_with_replacement_stays_inside_each_silo():
    fed = _fed()
    idx = torch.cat([BatchSampler(fed.counts, 50, True, torch.Generator().manual_seed(2)).next() for _ in range(3)], 1)
    assert torch.all(idx < fed.counts.unsqueeze(1)) and torch.all(idx >= 0)
    assert all(len(idx[i].unique()) == int(fed.counts[i]) for i in range(4))  # all records reachable


def test_runs_are_reproducible_from_the_seed():
    data = synthetic(num_silos=3, n=30, d=2, seed=0)
    problem = Problem(linear_model(2), "logistic", clip=1.0)
    algo = IsrlProxSGD(rounds=3, batch_size=4, step_size=0.1, sigmas={"sigma": 0.5}, metrics_every=0)
    fed = data.train.with_availability(2)
    a, b, c = (algo.run(problem, fed, seed=s) for s in (7, 7, 8))
    assert torch.equal(a.w_priv, b.w_priv) and not torch.equal(a.w_priv, c.w_priv)


@pytest.mark.parametrize("kwargs,arg", [({"silos_per_round": 5}, "silos_per_round"), ({"availability": "x"}, "availability")])
def test_bad_federation_raises(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        _fed(**kwargs)


def test_bad_sampler_raises():
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(torch.tensor([3, 5]), 4, False, torch.Generator())
