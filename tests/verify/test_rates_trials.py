"""silodp.verify.rates.trials: stacked trials are the algorithm's own runs, independent, and exact.

References: (1) one stacked trial reproduces ``FederatedAlgorithm.run`` bit for bit; (2) without
noise every stacked trial equals a separate run on its own data; (3) on a quadratic problem with
noise-free gradients the excess risk of noisy Prox-SGD is a linear-Gaussian recursion whose
expectation is computed exactly, and the stacked trials' mean must match it.
"""

import math

import numpy as np
import pytest
import torch

from silodp.algorithms import Federation, Problem, get_algorithm, linear_model
from silodp.verify.rates.families import BallRidge, logistic_ridge, objective
from silodp.verify.rates.trials import TrialContext, batch_safe, run_trials, stacks_trials


@pytest.fixture(scope="module")
def family():
    return logistic_ridge(dim=4, num_silos=3, heterogeneity=1.0, pool_size=256, seed=1)


def _single(family, n, seed):
    x, y = family.sample(n, 1, torch.Generator().manual_seed(seed))
    return x, y, Federation(x[0], y[0], torch.full((family.num_silos,), n))


@pytest.mark.parametrize("name, extra", [
    ("isrl-prox-sgd", dict(rounds=6, batch_size=8)),
    ("isrl-prox-svrg", dict(rounds=2, batch_size=8, inner_steps=3)),
    ("isrl-spider", dict(rounds=6, batch_size=8, period=3)),
])
def test_one_stacked_trial_reproduces_the_algorithm_bit_for_bit(family, name, extra):
    x, y, fed = _single(family, 48, seed=2)
    sigmas = {k: 0.3 for k in get_algorithm(name).noise_keys}
    algo = get_algorithm(name, sigmas=sigmas, metrics_every=0, **extra)
    reference = algo.run(family.problem, fed, seed=11)
    ctx = TrialContext(algo, family.problem, fed, 11, sigmas, None, trials=1, silos=3, silos_per_round=3)
    w_last = algo._run(ctx, torch.zeros(1, family.dim, dtype=torch.float64))
    assert torch.equal(w_last[0], reference.w_last)


def test_without_noise_each_trial_equals_its_own_run(family):
    n, trials = 24, 3
    x, y = family.sample(n, trials, torch.Generator().manual_seed(5))
    algo = get_algorithm("isrl-prox-sgd", rounds=4, batch_size=n, sigmas={"sigma": 0.0}, metrics_every=0)
    out = run_trials(algo, family.problem, lambda t, g: (x[:t], y[:t]) if t == 1 else (x, y), trials, seed=0)
    for t in range(trials):
        fed = Federation(x[t], y[t], torch.full((3,), n))
        single = algo.run(family.problem, fed, seed=0)
        assert torch.allclose(out.w_last[t], single.w_last, atol=1e-12, rtol=0)


@pytest.mark.parametrize("name", ["isrl-spider", "sdp-spider"])
def test_stacked_spider_trials_use_their_own_step_norms(family, name):
    """SPIDER's difference clip min(2L, beta ||w_r - w_{r-1}||) (and, for Alg 10, its P_vec bound)
    is per trial: without noise each stacked trial equals its own run (beta finite, period 2)."""
    n, trials = 24, 3
    x, y = family.sample(n, trials, torch.Generator().manual_seed(7))
    assert family.problem.beta is not None
    kwargs = dict(rounds=5, batch_size=n, period=2, metrics_every=0, step_size=0.5, replacement=False)  # full batches
    if name == "isrl-spider":
        kwargs["sigmas"] = {"sigma1": 0.0, "sigma2": 0.0, "sigma2_hat": 0.0}
    else:
        kwargs["shuffle_params"] = {"g": 10**6, "b": 0, "p": 0.0}  # P_vec with negligible rounding, no noise
    algo = get_algorithm(name, **kwargs)
    out = run_trials(algo, family.problem, lambda t, g: (x[:t], y[:t]) if t == 1 else (x, y), trials, seed=0)
    assert out.chunk == trials
    for t in range(trials):
        single = algo.run(family.problem, Federation(x[t], y[t], torch.full((3,), n)), seed=0)
        atol = 1e-12 if name == "isrl-spider" else 1e-3
        assert torch.allclose(out.w_last[t], single.w_last, atol=atol, rtol=0)


def test_availability_draws_exactly_m_of_n_per_trial(family):
    x, y, fed = _single(family, 8, seed=0)
    big = Federation(x[0].repeat(5, 1, 1), y[0].repeat(5, 1), torch.full((15,), 8))
    algo = get_algorithm("isrl-prox-sgd", rounds=1, batch_size=4, sigmas={"sigma": 0.0})
    ctx = TrialContext(algo, family.problem, big, 0, {"sigma": 0.0}, None, trials=5, silos=3, silos_per_round=2)
    draws = torch.stack([ctx.available().view(5, 3) for _ in range(400)])
    assert (draws.sum(-1) == 2).all()
    # each silo of each trial is available with probability 2/3
    assert torch.allclose(draws.double().mean(0), torch.full((5, 3), 2 / 3, dtype=torch.float64), atol=0.08)


def test_uniform_picks_are_independent_per_trial(family):
    x, y, _ = _single(family, 8, seed=0)
    big = Federation(x[0].repeat(4, 1, 1), y[0].repeat(4, 1), torch.full((12,), 8))
    algo = get_algorithm("isrl-pl-svrg", rounds=1, batch_size=4, sigmas={"sigma1": 0.0, "sigma2": 0.0})
    ctx = TrialContext(algo, family.problem, big, 0, algo.sigmas, None, trials=4, silos=3, silos_per_round=3)
    for k in range(5):
        ctx.iterates.append(torch.full((4, 1), float(k)))
    picks = torch.stack([ctx.iterates[0][:, 0] for _ in range(300)])  # [300, 4]
    assert not (picks == picks[:, :1]).all()  # trials do not share the pick
    assert abs(float(picks.mean()) - 2.0) < 0.2
    assert len(ctx.iterates[1:3]) == 2  # slices still behave like a list


def test_the_claim_is_the_class_that_defines_run():
    """A subclass that overrides ``_run`` does not inherit ``stacked_trials`` (its loop is new)."""
    from silodp.algorithms import ALGORITHMS

    cls = next(c for _, c in sorted(ALGORITHMS.items()) if stacks_trials(c))
    assert stacks_trials(type("Same", (cls,), {}))
    assert not stacks_trials(type("NewLoop", (cls,), {"_run": lambda self, ctx, w: w}))


def test_chunking_rules(family):
    safe = batch_safe()
    assert {"isrl-prox-sgd", "isrl-pl-svrg", "isrl-spider"} <= safe and "isrl-local-sgd" not in safe
    data = lambda t, g: family.sample(16, t, g)  # noqa: E731
    per_trial = data(1, torch.Generator())[0][0].numel()
    batched = run_trials(get_algorithm("isrl-prox-sgd", rounds=2, batch_size=8, sigmas={"sigma": 0.1}),
                         family.problem, data, 6, seed=0, max_elements=4 * per_trial)
    assert batched.chunk == 4 and batched.w_priv.shape == (6, family.dim)  # chunks of 4, then 2
    again = run_trials(get_algorithm("isrl-prox-sgd", rounds=2, batch_size=8, sigmas={"sigma": 0.1}),
                       family.problem, data, 6, seed=0, max_elements=4 * per_trial)
    assert torch.equal(batched.w_priv, again.w_priv)  # reproducible from the seed
    with pytest.raises(ValueError, match="stacked trials"):  # per-silo local models
        run_trials(get_algorithm("isrl-local-sgd", rounds=2, batch_size=8, sigmas={"sigma": 0.1}),
                   family.problem, data, 3, seed=0)


def test_bad_input_raises(family):
    algo = get_algorithm("isrl-prox-sgd", rounds=2, batch_size=4, sigmas={"sigma": 0.1})
    with pytest.raises(ValueError, match="trials"):
        run_trials(algo, family.problem, lambda t, g: family.sample(8, t, g), 0)
    rec = get_algorithm("isrl-prox-sgd", rounds=2, batch_size=4, sigmas={"sigma": 0.1}, record_transcript=True)
    with pytest.raises(ValueError, match="record_transcript"):
        run_trials(rec, family.problem, lambda t, g: family.sample(8, t, g), 2)


def test_noisy_prox_sgd_matches_the_exact_linear_gaussian_expectation():
    """Least squares where every record of silo i is the same (x_i, y_i): minibatch gradients are
    exact, so w_{r+1} = (w_r - eta (H w_r - h + xi_r)) / (1 + eta lam), xi_r ~ N(0, sigma^2/M I).
    E F(w_R) - F* = F(E w_R) - F* + tr((H + lam I) C_R) / 2 with C_R from the covariance recursion."""
    d_feat, silos, n, rounds, sigma, lam = 3, 3, 20, 12, 0.4, 0.5
    rng = np.random.default_rng(0)
    xs = rng.normal(size=(silos, d_feat)) / 2
    ys = rng.normal(size=silos)
    xt = np.concatenate([xs, np.ones((silos, 1))], 1)
    H = xt.T @ xt / silos
    h = (ys[:, None] * xt).mean(0)
    beta = float(np.linalg.eigvalsh(H)[-1]) + lam
    eta = 1.0 / (2.0 * beta)
    problem = Problem(linear_model(d_feat), "squared", regularizer=BallRidge(1e6, lam), clip=1e6, beta=beta)
    x = torch.tensor(np.repeat(xs[:, None, :], n, 1))
    y = torch.tensor(np.repeat(ys[:, None], n, 1))

    A = (np.eye(d_feat + 1) - eta * H) / (1 + eta * lam)
    m, C = np.zeros(d_feat + 1), np.zeros((d_feat + 1, d_feat + 1))
    for _ in range(rounds):
        m = A @ m + eta * h / (1 + eta * lam)
        C = A @ C @ A.T + (eta / (1 + eta * lam)) ** 2 * sigma**2 / silos * np.eye(d_feat + 1)
    HF = H + lam * np.eye(d_feat + 1)
    w_star = np.linalg.solve(HF, h)
    F = lambda w: 0.5 * w @ HF @ w - h @ w  # noqa: E731  (constant y^2/2 cancels)
    exact = F(m) - F(w_star) + 0.5 * np.trace(HF @ C)

    trials = 4000
    algo = get_algorithm("isrl-prox-sgd", rounds=rounds, batch_size=n // rounds or 1, step_size=eta,
                         sigmas={"sigma": sigma}, metrics_every=0)
    out = run_trials(algo, problem, lambda t, g: (x.expand(t, *x.shape), y.expand(t, *y.shape)), trials, seed=3)
    fed = Federation(x, y, torch.full((silos,), n))
    f_star = float(objective(problem, fed, torch.tensor(w_star).unsqueeze(0))[0])
    excess = (objective(problem, fed, out.w_priv) - f_star).numpy()
    se = excess.std(ddof=1) / math.sqrt(trials)
    assert abs(excess.mean() - exact) < 4 * se, (excess.mean(), exact, se)
    assert se < 0.05 * exact  # the check is sharp: a 20% error in the noise would fail it


def test_uniform_output_returns_the_iterates_it_picks_from(family):
    """Alg 3's output is uniform over w_1..w_R: the outcome carries all R iterates per trial (so the
    rates take the exact expectation, issue 25) and each trial's w_priv is one of its own."""
    n, trials = 24, 4
    x, y = family.sample(n, trials, torch.Generator().manual_seed(7))
    algo = get_algorithm("isrl-spider", rounds=5, batch_size=n, period=2, sigmas={k: 0.2 for k in ("sigma1", "sigma2", "sigma2_hat")},
                         metrics_every=0, step_size=0.5)
    out = run_trials(algo, family.problem, lambda t, g: (x[:t], y[:t]), trials, seed=1)
    assert out.iterates.shape == (5, trials, family.dim)
    assert torch.equal(out.iterates[-1], out.w_last)
    for t in range(trials):
        assert any(torch.equal(out.w_priv[t], out.iterates[i, t]) for i in range(5))
    sgd = run_trials(get_algorithm("isrl-prox-sgd", rounds=3, batch_size=6, sigmas={"sigma": 0.1}, metrics_every=0),
                     family.problem, lambda t, g: (x[:t], y[:t]), trials, seed=1)
    assert sgd.iterates is None  # last-iterate output
