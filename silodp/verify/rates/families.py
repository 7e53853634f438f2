"""Problem families whose constants are known, for rate experiments (issue 6).

Each builder returns a :class:`Family`: a :class:`silodp.algorithms.Problem` (with ``clip = L`` and
``beta``, ``mu`` set), a *population* federation ``pool`` (silo i's distribution D_i is the uniform
distribution over its pool, so population quantities are exact averages), the constants of the
paper's assumptions computed from the data, and a heterogeneity parameter ``h`` that moves the
silos apart (feature mean shift and label-model shift both scale with ``h``; ``h = 0`` gives
i.i.d. silos up to sampling).

Families (Lowy, Ghafelebashi & Razaviyayn 2023, arXiv:2203.06735, Assumptions 1, 2 and 4):

* :func:`logistic_ridge` -- proximal-PL: logistic regression with features of norm <= 1 (plus a
  bias coordinate), ``f1 = lam/2 ||w||^2`` (optionally ``+ l1 ||w||_1``). ``L`` and ``beta`` are
  global (Lipschitz on R^d), so the gradient clip never binds and nothing saturates.
* :func:`least_squares_ball` -- proximal-PL: least squares on the l2 ball of radius ``radius``
  (``f1`` = its indicator, optionally ``+ lam/2 ||w||^2``); ``L`` holds on the ball only.
* :func:`sigmoid_l1` -- non-convex composite: ``f0 = (sigmoid(<w, x>) - y)^2 / 2`` (the squared
  loss on a sigmoid output), ``f1 = l1 ||w||_1``.
* :func:`opposed_silos` -- the counterexample to Thm 2.1 for M < N (docs/paper-notes.md, note 28):
  d = 1, ``f = (w - x)^2 / 2`` on ``[-radius, radius]``, every record of silo i equal to
  ``+h`` (even i) or ``-h`` (odd i), so ``upsilon^2 = h^2`` exactly and ``mu = beta = 1``.

Proximal-PL constant (Assumption 4 with the paper's beta). If ``F0`` is convex and mu0-strongly
convex and ``F = F0 + f1`` is ``mu_F``-strongly convex, then for every w, taking ``y = w + t (w* -
w)`` in the minimum of Assumption 4 with ``t = mu_F / (beta - mu0 + mu_F)`` gives
``mu (F(w) - F*) <= -beta min_y[...]`` with ``mu = beta mu_F / (beta - mu0 + mu_F)``
(:func:`ppl_constant`). With ``mu0 = 0`` this only uses the ridge, so it holds for every minibatch
objective ``F_S`` too (Assumption 4 is stated for minibatch objectives).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import torch
from scipy import optimize

from silodp.algorithms.federation import Federation
from silodp.algorithms.models import Linear, Model, linear_model
from silodp.algorithms.problems import Problem
from silodp.algorithms.prox import L1, ElasticNet, L2Squared, Zero

DTYPE = torch.float64
FAMILIES = ("logistic-ridge", "least-squares-ball", "sigmoid-l1", "opposed-silos")


# ----------------------------------------------------------------------------- building blocks
@dataclass(frozen=True)
class BallRidge:
    """``f1(w) = lam/2 ||w||^2 + indicator(||w|| <= radius)``; prox = projection of v/(1 + eta lam)."""

    radius: float
    lam: float = 0.0

    def __post_init__(self):
        if not float(self.radius) > 0:
            raise ValueError(f"radius: must be > 0, got {self.radius}")
        if not float(self.lam) >= 0:
            raise ValueError(f"lam: must be >= 0, got {self.lam}")

    def value(self, w: torch.Tensor) -> torch.Tensor:
        inside = w.norm(dim=-1) <= self.radius * (1 + 1e-9)
        ridge = 0.5 * self.lam * (w * w).sum(-1)
        return torch.where(inside, ridge, torch.full_like(ridge, math.inf))

    def prox(self, v: torch.Tensor, eta: float) -> torch.Tensor:
        v = v / (1.0 + eta * self.lam)
        norm = v.norm(dim=-1, keepdim=True)
        return v * torch.clamp(self.radius / torch.clamp(norm, min=1e-300), max=1.0)


class SigmoidLinear(Model):
    """``x -> sigmoid(<W, x> + b)``: one Linear layer followed by a sigmoid (a smooth non-convex
    model under the squared loss). Ghost clipping still sees the Linear layer's output."""

    def __init__(self, num_features: int):
        super().__init__([Linear(num_features, 1)], (num_features,), 1)

    def forward(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(super().forward(w, x))

    def forward_batched(self, w: torch.Tensor, x: torch.Tensor, record: bool = False):
        out = super().forward_batched(w, x, record)
        if record:
            h, inputs, outputs = out
            return torch.sigmoid(h), inputs, outputs
        return torch.sigmoid(out)


def ppl_constant(beta: float, strong_convexity: float, loss_strong_convexity: float = 0.0) -> float:
    """Proximal-PL constant ``beta mu_F / (beta - mu0 + mu_F)`` (module docstring)."""
    mu_f, mu0 = float(strong_convexity), float(loss_strong_convexity)
    if not (0 <= mu0 <= mu_f and mu_f > 0 and beta > 0):
        raise ValueError(f"strong_convexity: need 0 <= mu0 <= mu_F, mu_F > 0; got mu0={mu0}, mu_F={mu_f}")
    return beta * mu_f / (beta - mu0 + mu_f)


def _sigmoid_square_constants() -> tuple[float, float]:
    """Sup over t and y in {0, 1} of |d/dt| and |d^2/dt^2| of (sigmoid(t) - y)^2 / 2.

    With s = sigmoid(t), y = 0: first derivative s^2 (1 - s), max 4/27 at s = 2/3; second
    derivative s^2 (1 - s)(2 - 3s); y = 1 is the mirror image.
    """
    lip = 4.0 / 27.0
    second = [optimize.minimize_scalar(lambda s, sg=sg: -sg * s * s * (1 - s) * (2 - 3 * s),
                                       bounds=(0.0, 1.0), method="bounded", options={"xatol": 1e-12})
              for sg in (1.0, -1.0)]
    return lip, max(-r.fun for r in second)


@dataclass(frozen=True)
class Constants:
    """The paper's constants for a family, computed from its data.

    ``L``: Lipschitz bound of f0 (on the domain of Assumption 1); ``beta``: per-sample smoothness of
    f0; ``mu``: proximal-PL constant (None for non-convex families); ``kappa = beta / mu``;
    ``lam``: ridge weight in f1; ``feature_bound``: max ||(x, 1)|| over the pool.
    """

    L: float
    beta: float
    mu: float | None
    lam: float
    feature_bound: float
    label_bound: float | None = None

    @property
    def kappa(self) -> float | None:
        return None if self.mu is None else self.beta / self.mu


@dataclass
class Family:
    """A problem, its population pool ``[N, P, f]`` and its constants (see module docstring)."""

    name: str
    problem: Problem
    pool: Federation
    constants: Constants
    heterogeneity: float
    convex: bool
    seed: int
    _reference: "Reference | None" = field(default=None, repr=False)

    @property
    def num_silos(self) -> int:
        return self.pool.num_silos

    @property
    def dim(self) -> int:
        return self.problem.dim

    def sample(self, n: int, trials: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """``trials`` independent data sets of ``n`` records per silo, i.i.d. from each D_i:
        ``x: [trials, N, n, f]``, ``y: [trials, N, n]``."""
        if int(n) < 1 or int(trials) < 1:
            raise ValueError(f"n: need n >= 1 and trials >= 1, got n={n}, trials={trials}")
        n_silos, size = self.pool.x.shape[:2]
        idx = torch.randint(size, (int(trials), n_silos, int(n)), generator=generator)
        rows = torch.arange(n_silos).view(1, n_silos, 1)
        return self.pool.x[rows, idx], self.pool.y[rows, idx]

    def reference(self) -> "Reference":
        """Population optimum and heterogeneity (computed once)."""
        if self._reference is None:
            self._reference = reference(self.problem, self.pool, self.constants, self.convex, seed=self.seed)
        return self._reference


# ----------------------------------------------------------------------- batched evaluation
def objective(problem: Problem, fed: Federation, w: torch.Tensor) -> torch.Tensor:
    """``F(w) = F0(w) + f1(w)`` on ``fed`` for a batch ``w: [T, d]`` -> ``[T]``."""
    w = torch.atleast_2d(w)
    smooth = torch.func.vmap(problem.smooth_objective, in_dims=(0, None))(w, fed)
    return smooth + problem.regularizer.value(w)


def smooth_gradient(problem: Problem, fed: Federation, w: torch.Tensor) -> torch.Tensor:
    """Unclipped ``grad F0(w)`` for a batch ``w: [T, d]`` -> ``[T, d]``."""
    g = torch.func.grad(problem.smooth_objective)
    return torch.func.vmap(g, in_dims=(0, None))(torch.atleast_2d(w), fed)


def grad_mapping_sq(problem: Problem, fed: Federation, w: torch.Tensor, eta: float) -> torch.Tensor:
    """``||G_eta(w)||^2`` with ``G_eta(w) = (w - prox_{eta f1}(w - eta grad F0(w))) / eta`` (Sec. 3),
    exactly on the full data of ``fed``, for a batch ``w: [T, d]`` -> ``[T]``."""
    w = torch.atleast_2d(w)
    step = w - problem.regularizer.prox(w - eta * smooth_gradient(problem, fed, w), eta)
    return (step * step).sum(-1) / eta**2


def silo_gradients(problem: Problem, fed: Federation, w: torch.Tensor) -> torch.Tensor:
    """``grad F0_i(w)`` of every silo for a batch ``w: [T, d]`` -> ``[T, N, d]``."""

    def per_silo(v):
        return (problem.losses(v, fed.x, fed.y) * fed.weights).sum(-1)

    jac = torch.func.jacrev(per_silo)
    return torch.func.vmap(jac)(torch.atleast_2d(w))


def heterogeneity(problem: Problem, fed: Federation, w: torch.Tensor) -> torch.Tensor:
    """``(1/N) sum_i ||grad F0_i(w) - grad F0(w)||^2`` (the quantity upsilon^2 of Thm E.2 bounds
    over w) for a batch ``w: [T, d]`` -> ``[T]``."""
    g = silo_gradients(problem, fed, w)
    return ((g - g.mean(1, keepdim=True)) ** 2).sum(-1).mean(-1)


# --------------------------------------------------------------------------- optimization
@dataclass(frozen=True)
class Reference:
    """Non-private reference quantities on one data set (pool = population, or an ERM sample).

    ``F_star`` is the optimum found (for non-convex families the best of several starts, an upper
    estimate of the infimum); ``Delta = F(0) - F_star`` (algorithms start at w0 = 0);
    ``grad_mapping_norm`` certifies stationarity of ``w_star``; ``upsilon2_at_opt`` and
    ``upsilon2_max`` are the heterogeneity at ``w_star`` and the largest value over probe points
    (a lower estimate of the supremum in Thm E.2's definition).
    """

    w_star: torch.Tensor
    F_star: float
    Delta: float
    grad_mapping_norm: float
    upsilon2_at_opt: float
    upsilon2_max: float


def _smooth_parts(regularizer) -> tuple[float, float] | None:
    """(l1, l2) weights when f1 = l1 ||w||_1 + l2/2 ||w||^2 (L-BFGS-B can take it), else None."""
    if isinstance(regularizer, Zero):
        return 0.0, 0.0
    if isinstance(regularizer, L2Squared):
        return 0.0, float(regularizer.lam)
    if isinstance(regularizer, L1):
        return float(regularizer.lam), 0.0
    if isinstance(regularizer, ElasticNet):
        return float(regularizer.l1), float(regularizer.l2)
    return None


def _value_grad(problem: Problem, fed: Federation, w: np.ndarray) -> tuple[float, np.ndarray]:
    t = torch.as_tensor(w, dtype=DTYPE).requires_grad_(True)
    value = problem.smooth_objective(t, fed)
    (g,) = torch.autograd.grad(value, t)
    return float(value.detach()), g.numpy()


def _lbfgs(problem: Problem, fed: Federation, w0: np.ndarray, l1: float, l2: float) -> np.ndarray:
    """L-BFGS-B on the split form w = u - v, u, v >= 0 (exact for the l1 term)."""
    d = w0.size

    def fun(z):
        w = z[:d] - z[d:]
        f, g = _value_grad(problem, fed, w)
        f += l1 * z.sum() + 0.5 * l2 * float(w @ w)
        gw = g + l2 * w
        return f, np.concatenate([gw + l1, -gw + l1])

    z0 = np.concatenate([np.maximum(w0, 0), np.maximum(-w0, 0)])
    res = optimize.minimize(fun, z0, jac=True, method="L-BFGS-B", bounds=[(0, None)] * (2 * d),
                            options={"maxiter": 5000, "ftol": 1e-15, "gtol": 1e-12})
    return res.x[:d] - res.x[d:]


def _fista(problem: Problem, fed: Federation, w: torch.Tensor, beta: float, iters: int, tol: float) -> torch.Tensor:
    """Accelerated proximal gradient with gradient restarts (step 1/beta), to ||G|| <= tol."""
    eta = 1.0 / beta
    y, t = w.clone(), 1.0
    for _ in range(iters):
        w_new = problem.regularizer.prox(y - eta * smooth_gradient(problem, fed, y)[0], eta)
        if float(grad_mapping_sq(problem, fed, w_new, eta)[0]) <= tol**2:
            return w_new
        t_new = 0.5 * (1 + math.sqrt(1 + 4 * t * t))
        restart = float(((y - w_new) * (w_new - w)).sum()) > 0
        y = w_new if restart else w_new + (t - 1) / t_new * (w_new - w)
        t = 1.0 if restart else t_new
        w = w_new
    return w


def minimize(problem: Problem, fed: Federation, beta: float, starts: int = 1, seed: int = 0,
             tol: float = 1e-10, iters: int = 20000) -> tuple[torch.Tensor, float]:
    """Non-private minimizer of ``F`` on ``fed`` to ``||G_{1/beta}|| <= tol`` (best of ``starts``).

    L-BFGS-B (scipy) on a smooth reformulation when f1 is a ridge / l1 / elastic net, then an
    accelerated proximal-gradient polish (any f1 with a prox, e.g. balls). Starts: 0, then random.
    """
    d = problem.dim
    rng = np.random.default_rng(seed)
    parts = _smooth_parts(problem.regularizer)
    best = None
    for s in range(int(starts)):
        w0 = np.zeros(d) if s == 0 else rng.normal(size=d)
        if parts is not None:
            w0 = _lbfgs(problem, fed, w0, *parts)
        w = problem.regularizer.prox(torch.as_tensor(w0, dtype=DTYPE).unsqueeze(0), 1.0 / beta)
        w = _fista(problem, fed, w, beta, iters, tol)
        value = float(objective(problem, fed, w)[0])
        if best is None or value < best[1]:
            best = (w[0], value)
    return best


def reference(problem: Problem, fed: Federation, constants: Constants, convex: bool, seed: int = 0,
              probes: int = 16) -> Reference:
    """:class:`Reference` of ``problem`` on ``fed`` (see there)."""
    w_star, f_star = minimize(problem, fed, constants.beta, starts=1 if convex else 8, seed=seed)
    zero = torch.zeros(1, problem.dim, dtype=DTYPE)
    f0 = float(objective(problem, fed, zero)[0])
    gmap = float(grad_mapping_sq(problem, fed, w_star, 1.0 / constants.beta)[0]) ** 0.5
    gen = torch.Generator().manual_seed(seed)
    radius = 1.0 + 2.0 * float(w_star.norm())
    if isinstance(problem.regularizer, BallRidge):
        radius = problem.regularizer.radius
    rand = torch.randn(probes, problem.dim, generator=gen, dtype=DTYPE)
    rand = rand / rand.norm(dim=1, keepdim=True) * radius * torch.rand(probes, 1, generator=gen, dtype=DTYPE)
    points = torch.cat([w_star.unsqueeze(0), zero, rand])
    ups = heterogeneity(problem, fed, points)
    return Reference(w_star, f_star, max(f0 - f_star, 0.0), gmap, float(ups[0]), float(ups.max()))


# ------------------------------------------------------------------------------- data
def _unit(rng: np.random.Generator, *shape: int) -> np.ndarray:
    v = rng.normal(size=shape)
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


def _features(rng: np.random.Generator, num_silos: int, size: int, f: int, h: float) -> np.ndarray:
    """Features of norm <= 1: N(0, I/f) shifted by ``h/2`` times a unit silo direction, rescaled
    into the unit ball."""
    centers = 0.5 * h * _unit(rng, num_silos, 1, f)
    x = rng.normal(size=(num_silos, size, f)) / math.sqrt(f) + centers
    return x / np.maximum(1.0, np.linalg.norm(x, axis=-1, keepdims=True))


def _label_models(rng: np.random.Generator, num_silos: int, f: int, h: float, scale: float) -> np.ndarray:
    """Silo i's label model ``scale * (u + h v_i)`` (u, v_i unit vectors) and a bias ``h b_i``."""
    w = scale * (_unit(rng, 1, f) + h * _unit(rng, num_silos, f))
    b = scale * h * rng.uniform(-0.5, 0.5, size=(num_silos, 1))
    return np.concatenate([w, b], axis=1)


def _draw_features(dim: int, num_silos: int, h: float, pool_size: int, seed: int):
    """Validate the common arguments; ``(rng, x [N, pool_size, dim - 1])`` (see :func:`_features`)."""
    if int(dim) < 2:
        raise ValueError(f"dim: must be >= 2 (features + bias), got {dim}")
    if int(num_silos) < 1:
        raise ValueError(f"num_silos: must be >= 1, got {num_silos}")
    if not (h >= 0 and math.isfinite(h)):
        raise ValueError(f"heterogeneity: must be a finite number >= 0, got {h}")
    if int(pool_size) < 2:
        raise ValueError(f"pool_size: must be >= 2, got {pool_size}")
    rng = np.random.default_rng(seed)
    return rng, _features(rng, int(num_silos), int(pool_size), int(dim) - 1, h)


def _pool(x: np.ndarray, y: np.ndarray) -> Federation:
    x_t, y_t = torch.as_tensor(x, dtype=DTYPE), torch.as_tensor(y, dtype=DTYPE)
    return Federation(x_t, y_t, torch.full((x.shape[0],), x.shape[1]))


def _feature_bound(x: np.ndarray) -> float:
    return math.sqrt(float((x * x).sum(-1).max()) + 1.0)


def _logits(x: np.ndarray, models: np.ndarray) -> np.ndarray:
    return np.einsum("nkf,nf->nk", x, models[:, :-1]) + models[:, -1:]


def _bernoulli_labels(rng, x, h, scale) -> np.ndarray:
    z = _logits(x, _label_models(rng, x.shape[0], x.shape[2], h, scale))
    return (rng.uniform(size=z.shape) < 1 / (1 + np.exp(-z))).astype(float)


# ------------------------------------------------------------------------------ builders
def logistic_ridge(dim: int, num_silos: int, heterogeneity: float = 0.5, lam_ratio: float = 0.5,
                   l1: float = 0.0, pool_size: int = 4096, signal: float = 3.0, seed: int = 0) -> Family:
    """Heterogeneous logistic regression, ``f1 = lam/2 ||w||^2 (+ l1 ||w||_1)``, ``lam = lam_ratio beta``.

    ``dim`` counts the bias: ``dim - 1`` features of norm <= 1. Constants: ``L = B`` (|sigmoid - y|
    < 1, ``B = max ||(x, 1)||``), ``beta = B^2 / 4``, ``mu = beta lam / (beta + lam)`` (loss convex,
    f1 lam-strongly convex: :func:`ppl_constant` with mu0 = 0).
    """
    if not lam_ratio > 0:
        raise ValueError(f"lam_ratio: must be > 0, got {lam_ratio}")
    rng, x = _draw_features(dim, num_silos, heterogeneity, pool_size, seed)
    f = x.shape[-1]
    y = _bernoulli_labels(rng, x, heterogeneity, signal)
    bound = _feature_bound(x)
    beta = bound**2 / 4
    lam = lam_ratio * beta
    reg = ElasticNet(l1, lam) if l1 > 0 else L2Squared(lam)
    mu = ppl_constant(beta, lam)
    consts = Constants(L=bound, beta=beta, mu=mu, lam=lam, feature_bound=bound)
    problem = Problem(linear_model(f), "logistic", regularizer=reg, clip=bound, beta=beta, mu=mu)
    return Family("logistic-ridge", problem, _pool(x, y), consts, float(heterogeneity), True, seed)


def least_squares_ball(dim: int, num_silos: int, heterogeneity: float = 0.5, radius: float = 1.0,
                       lam_ratio: float = 0.0, noise: float = 0.1, pool_size: int = 4096,
                       seed: int = 0) -> Family:
    """Heterogeneous least squares ``(<w, (x, 1)> - y)^2 / 2`` on the ball ``||w|| <= radius``
    (``f1`` = indicator ``+ lam/2 ||w||^2``, ``lam = lam_ratio beta``).

    Labels ``y = <w_i, (x, 1)> + U(-noise, noise)`` with ``||w_i|| ~ radius/2``. Constants on the
    ball: ``L = B (radius B + Y)`` (``Y = max |y|``), ``beta = B^2``, ``mu`` from
    :func:`ppl_constant` with ``mu0`` the smallest eigenvalue of the pool's second-moment matrix
    (an ERM / population constant; minibatch objectives only have the ridge).
    """
    if not radius > 0 or not lam_ratio >= 0 or not noise >= 0:
        raise ValueError(f"radius: need radius > 0, lam_ratio >= 0, noise >= 0; got {radius}, {lam_ratio}, {noise}")
    rng, x = _draw_features(dim, num_silos, heterogeneity, pool_size, seed)
    f = x.shape[-1]
    models = _label_models(rng, int(num_silos), f, heterogeneity, 0.5 * radius / math.sqrt(1 + heterogeneity**2))
    y = _logits(x, models) + rng.uniform(-noise, noise, size=x.shape[:2])
    bound = _feature_bound(x)
    label_bound = float(np.abs(y).max())
    beta = bound**2
    lam = lam_ratio * beta
    xt = np.concatenate([x, np.ones(x.shape[:2] + (1,))], axis=-1).reshape(-1, f + 1)
    mu0 = float(np.linalg.eigvalsh(xt.T @ xt / xt.shape[0])[0])
    mu = ppl_constant(beta, mu0 + lam, mu0) if mu0 + lam > 0 else None
    consts = Constants(L=bound * (radius * bound + label_bound), beta=beta, mu=mu, lam=lam,
                       feature_bound=bound, label_bound=label_bound)
    problem = Problem(linear_model(f), "squared", regularizer=BallRidge(radius, lam), clip=consts.L,
                      beta=beta, mu=mu)
    return Family("least-squares-ball", problem, _pool(x, y), consts, float(heterogeneity), True, seed)


def sigmoid_l1(dim: int, num_silos: int, heterogeneity: float = 0.5, l1: float = 0.01,
               pool_size: int = 4096, signal: float = 3.0, seed: int = 0) -> Family:
    """Non-convex composite: ``f0 = (sigmoid(<w, (x, 1)>) - y)^2 / 2`` with Bernoulli labels,
    ``f1 = l1 ||w||_1``. Constants: ``L = (4/27) B``, ``beta = c B^2`` with ``c`` the sup of the
    second derivative of (sigmoid(t) - y)^2 / 2 (computed numerically, about 0.0811); no mu."""
    if not l1 >= 0:
        raise ValueError(f"l1: must be >= 0, got {l1}")
    rng, x = _draw_features(dim, num_silos, heterogeneity, pool_size, seed)
    f = x.shape[-1]
    y = _bernoulli_labels(rng, x, heterogeneity, signal)
    bound = _feature_bound(x)
    lip, second = _sigmoid_square_constants()
    consts = Constants(L=lip * bound, beta=second * bound**2, mu=None, lam=0.0, feature_bound=bound)
    problem = Problem(SigmoidLinear(f), "squared", regularizer=L1(l1), clip=consts.L, beta=consts.beta)
    return Family("sigmoid-l1", problem, _pool(x, y), consts, float(heterogeneity), False, seed)


def opposed_silos(dim: int = 1, num_silos: int = 2, heterogeneity: float = 1.0, radius: float = 10.0,
                  pool_size: int = 2, seed: int = 0) -> Family:
    """Thm 2.1's counterexample for M < N: ``f(w, x) = (w - x)^2 / 2``, ``w`` in ``[-radius, radius]``
    (d = 1: a bias-only model, f1 = the interval's indicator), silo i holds only ``x = +h`` (i even)
    or ``-h`` (i odd), ``num_silos`` even.

    Then ``F(w) = (w^2 + h^2) / 2`` (F* = h^2/2 at 0), ``grad F_i(w) - grad F(w) = -+h`` everywhere
    (``upsilon^2 = h^2``), every minibatch objective is 1-strongly convex and 1-smooth (Assumption 4
    with ``mu = beta = 1``), ``L = radius + h`` on the interval. With M of N silos per round, a
    Prox-SGD step averages M silos' ``+-h`` and its error has variance
    ``h^2 (N - M)/((N - 1) M)`` whatever the batch size K: eqs. (11)-(13) miss it.
    """
    if int(dim) != 1:
        raise ValueError(f"dim: the opposed-silos family is one-dimensional, got {dim}")
    if int(num_silos) < 2 or int(num_silos) % 2:
        raise ValueError(f"num_silos: must be even and >= 2, got {num_silos}")
    if not (heterogeneity > 0 and math.isfinite(heterogeneity)) or not radius > heterogeneity:
        raise ValueError(f"heterogeneity: need 0 < h < radius, got h={heterogeneity}, radius={radius}")
    if int(pool_size) < 1:
        raise ValueError(f"pool_size: must be >= 1, got {pool_size}")
    signs = np.where(np.arange(int(num_silos)) % 2 == 0, 1.0, -1.0)
    y = np.repeat(heterogeneity * signs[:, None], int(pool_size), axis=1)
    pool = _pool(np.zeros(y.shape + (0,)), y)
    consts = Constants(L=radius + heterogeneity, beta=1.0, mu=1.0, lam=0.0, feature_bound=1.0,
                       label_bound=float(heterogeneity))
    problem = Problem(Model([Linear(0, 1)], (0,), 1), "squared", regularizer=BallRidge(radius), clip=consts.L,
                      beta=1.0, mu=1.0)
    return Family("opposed-silos", problem, pool, consts, float(heterogeneity), True, seed)


BUILDERS = {"logistic-ridge": logistic_ridge, "least-squares-ball": least_squares_ball, "sigmoid-l1": sigmoid_l1,
            "opposed-silos": opposed_silos}


def get_family(name: str, **params) -> Family:
    """Build the family called ``name`` (one of :data:`FAMILIES`)."""
    if name not in BUILDERS:
        raise ValueError(f"family: must be one of {FAMILIES}, got {name!r}")
    return BUILDERS[name](**params)
