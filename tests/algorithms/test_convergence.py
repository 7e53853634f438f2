"""With zero noise and full participation every algorithm reaches the composite optimum,
computed independently with scipy (numpy loss, L-BFGS-B on the split w = u - v)."""

import numpy as np
import pytest
import torch
from scipy.optimize import minimize

from silodp.algorithms import ALGORITHMS

from alg_helpers import ALL_NAMES, shuffled, zero_noise


def scipy_optimum(fed, l1, l2):
    xs = [fed.x[i, : fed.counts[i]].numpy() for i in range(fed.num_silos)]
    ys = [fed.y[i, : fed.counts[i]].numpy() for i in range(fed.num_silos)]
    d = xs[0].shape[1] + 1

    def smooth(w):
        val, grad = 0.0, np.zeros(d)
        for x, y in zip(xs, ys):
            z = x @ w[:-1] + w[-1]
            val += np.mean(np.logaddexp(0, z) - y * z) / len(xs)
            r = (1 / (1 + np.exp(-z)) - y) / len(y) / len(xs)
            grad += np.append(x.T @ r, r.sum())
        return val + 0.5 * l2 * w @ w, grad + l2 * w

    def split(uv):
        u, v = uv[:d], uv[d:]
        val, g = smooth(u - v)
        return val + l1 * uv.sum(), np.concatenate([g + l1, -g + l1])

    res = minimize(split, np.zeros(2 * d), jac=True, method="L-BFGS-B",
                   bounds=[(0, None)] * (2 * d), options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 5000})
    return res.x[:d] - res.x[d:]


@pytest.fixture(scope="module")
def optimum(small_data):
    return torch.as_tensor(scipy_optimum(small_data.train, 0.02, 0.2))


@pytest.mark.parametrize("name", ALL_NAMES)
def test_converges_to_scipy_optimum(name, small_data, composite_problem, optimum):
    cls = ALGORITHMS[name]
    fed = small_data.train
    n = fed.min_size
    # full-batch minibatches without replacement make every gradient exact
    kw = dict(rounds=150, batch_size=n, step_size=1.0, replacement=False, metrics_every=0, **zero_noise(cls))
    if name in ("local-sgd", "isrl-local-sgd", "dp-fedavg", "fedavg", "isrl-fedavgm"):  # FedAvg with K > 1 drifts
        kw["local_steps"] = 1
    if name == "isrl-fedavgm":  # heavy-ball momentum contracts slower per round: more rounds
        kw["rounds"] = 400
    if "svrg" in name:
        kw.update(rounds=150 if "pl" not in name else 50, inner_steps=1)
    result = cls(**kw).run(composite_problem, fed, seed=0)
    tol = 2e-3 if shuffled(cls) else 1e-5
    assert torch.linalg.norm(result.w_last - optimum) < tol, (name, result.w_last, optimum)
    if not cls.uniform_output:  # last-iterate output rule
        assert torch.equal(result.w_priv, result.w_last)
    else:  # a uniformly drawn iterate: no worse than the start on this (monotone) run
        f0 = composite_problem.objective(torch.zeros(4, dtype=torch.float64), fed)
        assert composite_problem.objective(result.w_priv, fed) <= f0
