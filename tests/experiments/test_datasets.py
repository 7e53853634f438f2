"""silodp.experiments.datasets: the registry of loaders a grid can name, the papers' models and
the cache. The loaders themselves are specified in tests/algorithms/test_data.py."""

import pytest
import torch

from silodp.algorithms import data, fedprox_data
from silodp.algorithms.models import lenet
from silodp.experiments import datasets as ds


def test_default_models_are_the_papers():
    assert ds.model_for(data.wbcd()).dim == 30 * 5 + 5 + 5 + 1  # MLP with 5 hidden units
    assert ds.model_for(data.synthetic(d=4)).dim == 5  # linear otherwise
    assert ds.model_for(data.wbcd(), "linear").dim == 31
    assert ds.make_model("mlp:64", (50,), 1).dim == 50 * 64 + 64 + 64 + 1
    assert ds.make_model("lenet", (3, 32, 32), 10).dim == lenet(3, 32, 10).dim
    for bad in ("cnn", "mlp:x", "lenet"):
        with pytest.raises(ValueError, match="model"):
            ds.make_model(bad, (3,), 1)


def test_load_is_the_algorithms_loader_with_its_split():
    a = ds.load("synthetic", seed=2, num_silos=3, n=50, d=4)
    b = data.synthetic(seed=2, num_silos=3, n=50, d=4)
    for part in ("train", "val", "test"):
        assert torch.equal(getattr(a, part).x, getattr(b, part).x)
    assert ds.LOADERS["fedprox_synthetic"] is fedprox_data.fedprox_synthetic
    assert ds.load_cached("wbcd", 0, 0.2, 0.2) is ds.load_cached("wbcd", 0, 0.2, 0.2)
    with pytest.raises(ValueError, match="dataset"):
        ds.load("_split")
