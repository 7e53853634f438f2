"""FedProx's Synthetic(alpha, beta) and the label-skew MNIST partition (silodp.algorithms.fedprox_data):
the documented formula's statistics, the i.i.d. variant, and the similarity parameter."""

import numpy as np
import pytest
from scipy import stats

from silodp.algorithms.fedprox_data import fedprox_synthetic, label_skew_partition, mnist_label_skew


def _pooled(fed):
    """Per-user arrays (unpadded) of a federation."""
    return [(fed.x[i, : fed.counts[i]].numpy(), fed.y[i, : fed.counts[i]].numpy().astype(int)) for i in range(fed.num_silos)]


def _label_table(data, classes):
    feds = [_pooled(data.train), _pooled(data.val), _pooled(data.test)]
    return np.array([np.bincount(np.concatenate([f[i][1] for f in feds]), minlength=classes)
                     for i in range(data.train.num_silos)])


def test_shapes_labels_and_determinism():
    a = fedprox_synthetic(1, 1, num_users=5, samples_per_user=40, dim=7, num_classes=4, seed=3)
    b = fedprox_synthetic(1, 1, num_users=5, samples_per_user=40, dim=7, num_classes=4, seed=3)
    assert a.loss == "softmax" and a.num_features == 7 and a.num_outputs == 4
    assert a.train.x.shape == (5, 26, 7) and a.val.x.shape == (5, 6, 7) and a.test.x.shape == (5, 8, 7)
    assert set(np.unique(a.train.y.numpy())) <= set(range(4))
    assert np.array_equal(a.train.x.numpy(), b.train.x.numpy())


def test_input_covariance_and_user_means_follow_the_formula():
    """x ~ N(v_k, diag(j^-1.2)) with v_kj ~ N(B_k, 1), B_k ~ N(0, beta): within a user the
    per-coordinate variance is j^-1.2; across users the mean of a coordinate has variance 1 + beta."""
    beta, users = 4.0, 400
    data = fedprox_synthetic(0.0, beta, num_users=users, samples_per_user=60, dim=5, seed=0)
    parts = _pooled(data.train)
    within = np.mean([x.var(0, ddof=1) for x, _ in parts], axis=0)
    np.testing.assert_allclose(within, np.arange(1, 6) ** -1.2, rtol=0.05)
    means = np.array([x.mean(0) for x, _ in parts])
    across = means.var(0, ddof=1) - within / 48  # remove the sampling noise of each user's mean
    # the coordinates share B_k, so they are correlated; their average variance is 1 + beta
    assert np.mean(across) == pytest.approx(1 + beta, rel=0.2)
    np.testing.assert_allclose(np.corrcoef(means.T)[0, 1], beta / (1 + beta), atol=0.1)


def test_iid_variant_is_homogeneous_and_alpha_beta_are_not():
    iid = _label_table(fedprox_synthetic(num_users=8, samples_per_user=150, iid=True, seed=1), 10)
    het = _label_table(fedprox_synthetic(5, 5, num_users=8, samples_per_user=150, seed=1), 10)
    keep = lambda t: t[:, t.sum(0) > 0]  # noqa: E731
    assert stats.chi2_contingency(keep(iid)).pvalue > 1e-3
    assert stats.chi2_contingency(keep(het)).pvalue < 1e-20
    # alpha = beta = 0 is still heterogeneous: every user draws its own W_k, b_k, v_k
    zero = _label_table(fedprox_synthetic(0, 0, num_users=8, samples_per_user=150, seed=1), 10)
    assert stats.chi2_contingency(keep(zero)).pvalue < 1e-20


def test_iid_labels_come_from_one_linear_model():
    """i.i.d.: y = argmax(W x + b) with the same W, b for everyone, so a single linear model fits
    every user's records perfectly (a least-squares fit on one-hot labels separates them)."""
    data = fedprox_synthetic(num_users=4, samples_per_user=300, dim=6, num_classes=3, iid=True, seed=2)
    x = np.concatenate([p[0] for p in _pooled(data.train)])
    y = np.concatenate([p[1] for p in _pooled(data.train)])
    from sklearn.linear_model import LogisticRegression

    assert LogisticRegression(C=1e6, max_iter=5000).fit(x, y).score(x, y) > 0.98


def test_label_noise_and_normalization():
    clean = fedprox_synthetic(1, 1, num_users=20, samples_per_user=100, seed=4)
    noisy = fedprox_synthetic(1, 1, num_users=20, samples_per_user=100, label_noise=0.3, seed=4)
    flipped = float((clean.train.y != noisy.train.y).to(float).mean())
    assert flipped == pytest.approx(0.3 * 0.9, abs=0.04)  # a flip lands on the same class 1/10 of the time
    unit = fedprox_synthetic(1, 1, num_users=3, samples_per_user=20, normalize=True, seed=4)
    norms = np.concatenate([np.linalg.norm(x, axis=1) for x, _ in _pooled(unit.train)])
    np.testing.assert_allclose(norms, 1.0, rtol=1e-12)


@pytest.mark.parametrize("kwargs,arg", [({"alpha": -1}, "alpha"), ({"beta": -1}, "beta"), ({"num_users": 0}, "num_users"),
                                        ({"samples_per_user": 2}, "samples_per_user"), ({"label_noise": 2}, "label_noise")])
def test_bad_arguments_raise_naming_them(kwargs, arg):
    with pytest.raises(ValueError, match=arg):
        fedprox_synthetic(**kwargs)


def test_label_skew_partition_similarity():
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), 100)
    for similarity in (0.0, 0.5, 1.0):
        parts = label_skew_partition(labels, 10, similarity, np.random.default_rng(1))
        allidx = np.concatenate(parts)
        assert np.array_equal(np.sort(allidx), np.arange(1000))  # a partition
        counts = np.array([np.bincount(labels[p], minlength=10) for p in parts])
        if similarity == 0.0:
            assert (counts > 0).sum(1).max() <= 2  # sorted chunks: one or two digits per user
        if similarity == 1.0:
            assert stats.chi2_contingency(counts).pvalue > 1e-3
        # the i.i.d. share of each user: its records outside its two dominant labels come from it
        top = np.sort(counts, 1)[:, -2:].sum(1) / counts.sum(1)
        assert top.mean() >= (1 - similarity) - 0.05
    with pytest.raises(ValueError, match="similarity"):
        label_skew_partition(labels, 10, 1.5, rng)


def test_mnist_label_skew():
    data = mnist_label_skew(num_users=10, similarity=0.0, pca_dim=20, seed=0)
    assert data.loss == "softmax" and data.num_outputs == 10 and data.num_features == 20
    table = _label_table(data, 10)
    assert table.sum() == 5000 and (table > 0).sum(1).max() <= 2
