"""What the experiments add to the datasets of :mod:`silodp.algorithms.data`: a registry of
loaders by name, the papers' model for each dataset, and a per-process cache.

The loaders, their train / validation / test splits and their preprocessing live in
:mod:`silodp.algorithms.data` (and :mod:`silodp.algorithms.fedprox_data` for the DP-SCAFFOLD
datasets); ``silodp run`` uses the same loaders with the same splits.
"""

from __future__ import annotations

import functools

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


def load(name: str, seed: int = 0, val_fraction: float = 0.2, test_fraction: float = 0.2, **kwargs) -> FederatedData:
    """Load dataset ``name`` (a key of :data:`LOADERS`) for trial ``seed`` (the seed fixes the
    split and the partition)."""
    if name not in LOADERS:
        raise ValueError(f"dataset: must be one of {sorted(LOADERS)}, got {name!r}")
    return LOADERS[name](seed=seed, val_fraction=val_fraction, test_fraction=test_fraction, **kwargs)


@functools.lru_cache(maxsize=8)
def load_cached(name: str, seed: int, val_fraction: float, test_fraction: float,
                items: tuple[tuple[str, object], ...] = ()) -> FederatedData:
    """:func:`load` memoized per process (a sweep runs many configs on the same split)."""
    return load(name, seed, val_fraction, test_fraction, **dict(items))
