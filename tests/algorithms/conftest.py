"""Small shared fixtures for the algorithm tests (problems small enough for 2 CPU cores)."""

import pytest
import torch

from silodp.algorithms import ElasticNet, Problem, linear_model, synthetic


@pytest.fixture(scope="session")
def small_data():
    return synthetic(num_silos=3, n=50, d=3, task="logistic", heterogeneity=1.0, seed=3)


@pytest.fixture(scope="session")
def composite_problem():
    # strongly convex composite: logistic loss + elastic net; clip far above any gradient norm
    return Problem(linear_model(3), "logistic", ElasticNet(0.02, 0.2), clip=1e3, beta=2.0)

