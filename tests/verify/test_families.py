"""silodp.verify.rates.families: the constants are true bounds, F* is accurate, heterogeneity moves.

Independent references: per-sample gradients and Hessians from torch.func at random points
(L, beta); the proximal-PL inequality of Assumption 4 evaluated exactly (its inner minimum is a
prox step); scipy's BFGS and an eigendecomposition/root-finding solution of the trust-region
subproblem for F*; scipy minimization for the prox of ``BallRidge``.
"""

import math

import numpy as np
import pytest
import torch
from scipy import optimize

from silodp.algorithms import Federation
from silodp.algorithms.grads import clipped_grad_sum
from silodp.verify.rates import families as F

D = 6


@pytest.fixture(scope="module")
def logistic():
    return F.logistic_ridge(dim=D, num_silos=3, heterogeneity=1.0, pool_size=512, seed=2)


@pytest.fixture(scope="module")
def lsq():
    return F.least_squares_ball(dim=D, num_silos=3, heterogeneity=1.0, radius=1.0, lam_ratio=0.05,
                                pool_size=512, seed=2)


@pytest.fixture(scope="module")
def sigmoid():
    return F.sigmoid_l1(dim=D, num_silos=3, heterogeneity=1.0, l1=0.01, pool_size=512, seed=2)


def _points(family, count, radius, seed=0):
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(count, family.dim, generator=g, dtype=torch.float64)
    return w / w.norm(dim=1, keepdim=True) * radius * torch.rand(count, 1, generator=g, dtype=torch.float64)


def _per_sample(family, w, fn):
    x = family.pool.x.reshape(-1, family.pool.x.shape[-1])[::7]
    y = family.pool.y.reshape(-1)[::7]
    return torch.func.vmap(fn(family.problem.sample_loss), in_dims=(None, 0, 0))(w, x, y)


@pytest.mark.parametrize("name, radius", [("logistic", 20.0), ("lsq", 1.0), ("sigmoid", 20.0)])
def test_lipschitz_and_smoothness_constants_bound_every_sample(name, radius, request):
    family = request.getfixturevalue(name)
    c = family.constants
    grad_max = hess_max = 0.0
    for w in _points(family, 12, radius):
        g = _per_sample(family, w, torch.func.grad)
        grad_max = max(grad_max, float(g.norm(dim=1).max()))
        hs = _per_sample(family, w, torch.func.hessian)
        hess_max = max(hess_max, float(torch.linalg.eigvalsh(hs).abs().max()))
    assert grad_max <= c.L * (1 + 1e-9)
    assert hess_max <= c.beta * (1 + 1e-9)
    assert grad_max >= 0.3 * c.L  # the bound is not vacuous


def test_sigmoid_constants_are_the_exact_suprema():
    lip, second = F._sigmoid_square_constants()
    t = np.linspace(-20, 20, 400001)
    s = 1 / (1 + np.exp(-t))
    assert lip == pytest.approx(np.max(s * s * (1 - s)), rel=1e-8)
    assert second == pytest.approx(np.max(np.abs(s * s * (1 - s) * (2 - 3 * s))), rel=1e-6)


@pytest.mark.parametrize("name", ["logistic", "lsq"])
def test_proximal_pl_inequality_holds_at_random_points(name, request):
    """mu (F(w) - F*) <= -beta min_y [<grad F0(w), y - w> + beta/2 ||y - w||^2 + f1(y) - f1(w)],
    the minimum attained at y = prox_{f1/beta}(w - grad F0(w) / beta)."""
    family = request.getfixturevalue(name)
    p, c, ref = family.problem, family.constants, family.reference()
    radius = 1.0 if name == "lsq" else 5.0
    w = p.regularizer.prox(_points(family, 32, radius, seed=3), 1.0)  # feasible points
    g = F.smooth_gradient(p, family.pool, w)
    y = p.regularizer.prox(w - g / c.beta, 1.0 / c.beta)
    inner = (g * (y - w)).sum(1) + c.beta / 2 * ((y - w) ** 2).sum(1) + p.regularizer.value(y) - p.regularizer.value(w)
    gap = F.objective(p, family.pool, w) - ref.F_star
    assert (c.mu * gap <= -c.beta * inner + 1e-12).all()
    assert c.kappa >= 1


def test_logistic_optimum_matches_scipy_bfgs(logistic):
    p, fed = logistic.problem, logistic.pool

    def fun(w):
        t = torch.tensor(w, requires_grad=True)
        v = p.smooth_objective(t, fed) + p.regularizer.value(t)
        (g,) = torch.autograd.grad(v, t)
        return float(v.detach()), g.numpy()

    res = optimize.minimize(fun, np.zeros(D), jac=True, method="BFGS", options={"gtol": 1e-12})
    ref = logistic.reference()
    assert ref.F_star == pytest.approx(res.fun, abs=1e-11)
    assert ref.F_star <= res.fun + 1e-12
    assert ref.grad_mapping_norm < 1e-9
    assert ref.Delta == pytest.approx(math.log(2) - ref.F_star, rel=1e-10)  # F(0) = ln 2 exactly


def test_least_squares_ball_optimum_matches_the_trust_region_solution(lsq):
    """min 1/2 w^T A w - b^T w + lam/2 ||w||^2 s.t. ||w|| <= r: KKT via eigendecomposition."""
    x = lsq.pool.x.reshape(-1, D - 1).numpy()
    y = lsq.pool.y.reshape(-1).numpy()
    xt = np.concatenate([x, np.ones((x.shape[0], 1))], 1)
    A = xt.T @ xt / x.shape[0] + lsq.constants.lam * np.eye(D)
    b = xt.T @ y / x.shape[0]
    r = lsq.problem.regularizer.radius
    vals, vecs = np.linalg.eigh(A)
    coef = vecs.T @ b
    w_of = lambda nu: vecs @ (coef / (vals + nu))  # noqa: E731
    nu = 0.0
    if np.linalg.norm(w_of(0.0)) > r:
        nu = optimize.brentq(lambda v: np.linalg.norm(w_of(v)) - r, 0, 1e6, xtol=1e-15)
    w = w_of(nu)
    exact = 0.5 * w @ A @ w - b @ w + 0.5 * float(np.mean(y * y))
    ref = lsq.reference()
    assert ref.F_star == pytest.approx(exact, abs=1e-10)
    assert np.allclose(ref.w_star.numpy(), w, atol=1e-6)


def test_sigmoid_reference_is_stationary(sigmoid):
    ref = sigmoid.reference()
    assert ref.grad_mapping_norm < 1e-8
    assert ref.Delta >= 0 and sigmoid.constants.mu is None


def test_heterogeneity_grows_with_its_parameter():
    ups = [F.logistic_ridge(dim=D, num_silos=4, heterogeneity=h, pool_size=512, seed=0).reference().upsilon2_at_opt
           for h in (0.0, 0.5, 1.0, 2.0)]
    assert all(a < b for a, b in zip(ups, ups[1:]))
    assert ups[0] < 0.05 * ups[-1]  # h = 0: i.i.d. silos up to sampling


def test_batched_metrics_agree_with_the_problem(logistic):
    p, fed = logistic.problem, logistic.pool
    w = _points(logistic, 3, 2.0)
    eta = 0.7
    for i in range(3):
        assert float(F.objective(p, fed, w)[i]) == pytest.approx(p.objective(w[i], fed), rel=1e-12)
        assert float(F.grad_mapping_sq(p, fed, w, eta)[i]) == pytest.approx(
            p.grad_mapping_norm(w[i], fed, eta) ** 2, rel=1e-10)
    g = F.silo_gradients(p, fed, w)
    assert torch.allclose(g.mean(1), F.smooth_gradient(p, fed, w), atol=1e-12)


def test_ball_ridge_prox_matches_numerical_minimization():
    reg = F.BallRidge(radius=1.5, lam=0.8)
    rng = np.random.default_rng(0)
    for scale in (0.5, 5.0):
        v = rng.normal(size=4) * scale
        eta = 0.6
        res = optimize.minimize(lambda z: eta * 0.4 * z @ z + 0.5 * np.sum((z - v) ** 2), np.zeros(4),
                                constraints=[{"type": "ineq", "fun": lambda z: 1.5**2 - z @ z}], method="SLSQP",
                                options={"ftol": 1e-14})
        got = reg.prox(torch.tensor(v), eta).numpy()
        assert np.allclose(got, res.x, atol=1e-6)
    assert float(reg.value(torch.tensor([3.0, 0.0]))) == math.inf


def test_sigmoid_model_ghost_clipping_equals_materialized(sigmoid):
    x = sigmoid.pool.x[:, :10]
    y = sigmoid.pool.y[:, :10]
    w = _points(sigmoid, 3, 3.0)
    weights = torch.full((3, 10), 0.1, dtype=torch.float64)
    ghost = clipped_grad_sum(sigmoid.problem, w, x, y, weights, 0.05, "ghost")
    mat = clipped_grad_sum(sigmoid.problem, w, x, y, weights, 0.05, "materialize")
    assert torch.allclose(ghost, mat, atol=1e-12)


def test_samples_come_from_each_silos_pool(logistic):
    x, y = logistic.sample(2000, 3, torch.Generator().manual_seed(0))
    assert x.shape == (3, 3, 2000, D - 1) and y.shape == (3, 3, 2000)
    for i in range(3):
        pool = logistic.pool.x[i]
        assert torch.isin(x[0, i, :, 0], pool[:, 0]).all()
        assert torch.allclose(x[:, i].reshape(-1, D - 1).mean(0), pool.mean(0), atol=0.03)


def test_bad_input_raises():
    with pytest.raises(ValueError, match="dim"):
        F.logistic_ridge(dim=1, num_silos=2)
    with pytest.raises(ValueError, match="heterogeneity"):
        F.logistic_ridge(dim=3, num_silos=2, heterogeneity=-1.0)
    with pytest.raises(ValueError, match="family"):
        F.get_family("nope", dim=3, num_silos=2)
    with pytest.raises(ValueError, match="radius"):
        F.BallRidge(radius=0.0)
    with pytest.raises(ValueError, match="strong_convexity"):
        F.ppl_constant(1.0, 0.0)
    assert F.ppl_constant(2.0, 1.0) == pytest.approx(2.0 / 3.0)  # beta lam / (beta + lam)
    assert F.ppl_constant(2.0, 1.0, 1.0) == pytest.approx(1.0)  # strongly convex loss: mu itself
    with pytest.raises(ValueError, match="n"):
        F.logistic_ridge(dim=3, num_silos=2, pool_size=16).sample(0, 1, torch.Generator())


def test_pool_is_a_population_federation(logistic):
    assert isinstance(logistic.pool, Federation) and logistic.pool.num_silos == 3
    assert logistic.dim == D and logistic.problem.clip == logistic.constants.L


def test_l1_variant_optimum_agrees_between_lbfgs_split_and_proximal_gradient():
    fam = F.logistic_ridge(dim=D, num_silos=3, heterogeneity=1.0, l1=0.05, pool_size=512, seed=4)
    ref = fam.reference()  # L-BFGS-B on w = u - v, then a proximal polish
    w = F._fista(fam.problem, fam.pool, torch.zeros(1, D, dtype=torch.float64), fam.constants.beta, 20000, 1e-11)
    assert ref.F_star == pytest.approx(float(F.objective(fam.problem, fam.pool, w)[0]), abs=1e-11)
    assert (ref.w_star.abs() < 1e-12).any()  # the l1 term makes some coordinates exactly zero


# -- Thm 2.1's counterexample for M < N (docs/paper-notes.md, note 28) ---------------------------------
def test_opposed_silos_constants():
    fam = F.opposed_silos(heterogeneity=1.0, radius=10.0)
    ref = fam.reference()
    assert ref.F_star == pytest.approx(0.5, abs=1e-12) and float(ref.w_star[0]) == pytest.approx(0.0, abs=1e-9)
    assert ref.upsilon2_at_opt == pytest.approx(1.0) and ref.upsilon2_max == pytest.approx(1.0)
    w = torch.linspace(-10, 10, 9, dtype=torch.float64).unsqueeze(1)
    assert torch.allclose(F.objective(fam.problem, fam.pool, w), (w[:, 0] ** 2 + 1) / 2)
    with pytest.raises(ValueError, match="num_silos"):
        F.opposed_silos(num_silos=3)
    with pytest.raises(ValueError, match="dim"):
        F.opposed_silos(dim=2)


@pytest.mark.parametrize("n", [1e6, 1e8])
def test_thm21_counterexample_violates_eq20_for_partial_participation(n):
    """N = 2, M = 1, silo 1 all x = +1, silo 2 all x = -1 (Assumption 4 with mu = 1): Alg 6 at the
    theorem's R, K and Prop D.2's noise keeps excess risk (1 + sigma^2)/6 ~ 1/6 whatever n, far above
    eq. (20) (printed or corrected); the bound with the silo-sampling term (eq20-sampling) holds.

    Every record of a silo is the same, so a K-record minibatch mean is one record's gradient: the
    run uses batch_size 1 on R records per silo with the sigma prescribed for K = floor(n/R), which
    is the algorithm at n records per silo exactly (without allocating n records)."""
    from silodp.algorithms import get_algorithm
    from silodp.bounds import get_bound
    from silodp.verify.rates.trials import run_trials

    fam = F.opposed_silos(heterogeneity=1.0, radius=10.0)
    p = dict(n=n, N=2, M=1, d=1, eps=1.0, delta=1e-5, L=fam.constants.L, beta=1.0, mu=1.0, Delta=50.0)  # w0 = 10
    plan = get_bound("thm2.1-isrl").prescribe(p, variant="corrected")
    rounds, sigma = int(plan["R"]), float(plan["sigma"])
    algo = get_algorithm("isrl-prox-sgd", rounds=rounds, batch_size=1, sigmas={"sigma": sigma}, metrics_every=0,
                         w0=torch.tensor([10.0], dtype=torch.float64), replacement=False)
    out = run_trials(algo, fam.problem, lambda t, g: fam.sample(rounds, t, g), trials=4000, silos_per_round=1, seed=5)
    excess = F.objective(fam.problem, fam.pool, out.w_priv) - 0.5
    mean, se = float(excess.mean()), float(excess.std()) / math.sqrt(excess.numel())
    assert abs(mean - (1 + sigma**2) / 6) < 4 * se  # the silo-sampling variance, stationary
    params = {**p, "R": plan["R"], "K": plan["K"]}
    for printed in ("eq20", "eq20-corrected"):
        assert mean - 4 * se > 10 * get_bound(printed).evaluate(params)
        assert get_bound(printed).conditions_hold(params) is False  # and silodp bound says so
    assert mean + 4 * se < get_bound("eq20-sampling").evaluate({**params, "upsilon": 1.0})
    assert get_bound("eq20-sampling").conditions_hold({**params, "upsilon": 1.0}) is True
