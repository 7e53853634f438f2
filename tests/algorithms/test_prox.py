"""Each prox operator returns the argmin of eta f1(y) + ||y - v||^2 / 2 (checked with scipy)."""

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.optimize import minimize

from silodp.algorithms.prox import L1, Box, ElasticNet, GroupLasso, L2Ball, L2Squared, Zero

vectors = st.lists(st.floats(-5, 5), min_size=4, max_size=4).map(lambda v: torch.tensor(v, dtype=torch.float64))
etas = st.floats(0.05, 3.0)


def _objective(reg, v, eta):
    def h(y):
        y = torch.as_tensor(y, dtype=torch.float64)
        return float(eta * reg.value(y) + 0.5 * ((y - v) ** 2).sum())

    return h


def _check(reg, v, eta, constraints=()):
    p = reg.prox(v, eta)
    h = _objective(reg, v, eta)
    if constraints:
        res = minimize(lambda y: 0.5 * np.sum((y - v.numpy()) ** 2), np.zeros(4), constraints=constraints,
                       method="SLSQP", options={"ftol": 1e-12, "maxiter": 500})
        assert all(np.all(c["fun"](p.numpy()) >= -1e-9) for c in constraints)  # feasible
        ref = 0.5 * np.sum((res.x - v.numpy()) ** 2)
        # no worse than scipy's (SLSQP may end marginally infeasible, hence the relative slack)
        assert h(p) <= ref + 1e-6 * (1 + abs(ref))
    else:
        res = minimize(h, v.numpy(), method="Powell", options={"xtol": 1e-10, "ftol": 1e-12})
        assert h(p) <= res.fun + 1e-7
    rng = np.random.default_rng(0)
    for _ in range(5):  # no nearby feasible point is better
        q = reg.prox(p + torch.as_tensor(rng.normal(scale=0.1, size=4)), 1e-12)
        assert h(p) <= h(q) + 1e-9


@settings(max_examples=25, deadline=None)
@given(vectors, etas, st.floats(0.0, 2.0), st.floats(0.0, 2.0))
def test_penalties_are_argmins(v, eta, a, b):
    for reg in (Zero(), L1(a), L2Squared(b), ElasticNet(a, b), GroupLasso(a, (1, 3))):
        _check(reg, v, eta)


@settings(max_examples=25, deadline=None)
@given(vectors, etas, st.floats(0.1, 4.0))
def test_indicators_are_projections(v, eta, r):
    ball = L2Ball(r)
    _check(ball, v, eta, constraints=({"type": "ineq", "fun": lambda y: r ** 2 - y @ y},))
    box = Box(-r / 2, r)
    _check(box, v, eta, constraints=({"type": "ineq", "fun": lambda y: y + r / 2}, {"type": "ineq", "fun": lambda y: r - y}))


def test_bad_parameters_raise():
    import pytest

    for make, arg in ((lambda: L1(-1), "lam"), (lambda: L2Ball(0), "radius"), (lambda: Box(1, 0), "lower"),
                      (lambda: GroupLasso(1.0, (0,)), "group_sizes")):
        with pytest.raises(ValueError, match=arg):
            make()
    with pytest.raises(ValueError, match="group_sizes"):
        GroupLasso(1.0, (2, 3)).prox(torch.zeros(4), 1.0)
