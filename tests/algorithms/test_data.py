"""Datasets: paper partitions, split before preprocessing, scaler/PCA fitted on train only."""

import torch

from silodp.algorithms import mnist, synthetic, wbcd


def _valid(fed, i):
    return fed.x[i, : fed.counts[i]], fed.y[i, : fed.counts[i]]


def test_wbcd_one_class_per_silo_and_train_only_scaling():
    data = wbcd(seed=0)
    assert data.train.num_silos == 2 and data.num_features == 30
    for i, label in enumerate((0.0, 1.0)):
        _, y = _valid(data.train, i)
        assert torch.all(y == label)
    pooled = torch.cat([_valid(data.train, i)[0] for i in range(2)])
    test = torch.cat([_valid(data.test, i)[0] for i in range(2)])
    assert torch.allclose(pooled.mean(0), torch.zeros(30, dtype=torch.float64), atol=1e-10)
    assert test.mean(0).abs().max() > 1e-3  # test data was not used to fit the scaler
    assert int(data.train.counts.sum() + data.test.counts.sum()) == 569


def test_mnist_even_odd_pairs_pca50():
    data = mnist(seed=0)
    assert data.train.num_silos == 25 and data.num_features == 50
    for i in range(25):
        _, y = _valid(data.train, i)
        assert set(y.tolist()) == {0.0, 1.0}  # one even and one odd digit per silo
    pooled = torch.cat([_valid(data.train, i)[0] for i in range(25)])
    assert torch.allclose(pooled.mean(0), torch.zeros(50, dtype=torch.float64), atol=1e-8)
    assert int(data.train.counts.sum() + data.test.counts.sum()) == 5000


def test_synthetic_is_seeded_and_heterogeneous():
    a, b = synthetic(seed=1), synthetic(seed=1)
    assert torch.equal(a.train.x, b.train.x)
    means = a.train.x.mean(1)
    assert (means[0] - means[1]).norm() > 0.1
    soft = synthetic(task="softmax", num_classes=4, seed=2)
    assert soft.num_outputs == 4 and soft.train.y.max() <= 3
