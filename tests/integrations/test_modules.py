"""torch.nn.Module <-> silodp model: exact round trips, equal outputs, refusals naming the layer."""

import pytest
import torch
from torch import nn

from silodp.algorithms.models import lenet, mlp
from silodp.integrations import from_module, state_dict_to_vector, to_module, vector_to_state_dict


def _cnn():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU(), nn.MaxPool2d(2),
                         nn.Sequential(nn.Flatten(), nn.Linear(3 * 3 * 3, 8), nn.ReLU()), nn.Linear(8, 4))


def test_module_to_silodp_and_back_is_exact():
    module = _cnn().double()
    model, w = from_module(module, (1, 8, 8))
    assert model.dim == sum(p.numel() for p in module.parameters()) == w.numel()
    x = torch.randn(5, 1, 8, 8, dtype=torch.float64)
    assert torch.equal(model.forward(w, x), module(x))  # same ops, same order: bitwise equal
    back = to_module(model, w)
    for (k, a), b in zip(module.state_dict().items(), back.state_dict().values()):
        assert torch.equal(a, b), k
    model2, w2 = from_module(back, (1, 8, 8))
    assert model2.layers == model.layers and torch.equal(w2, w)


def test_float32_weights_round_trip_through_the_float64_vector():
    module = _cnn()  # float32 parameters: float64 holds them exactly
    model, w = from_module(module, (1, 8, 8))
    restored = vector_to_state_dict(model, w, module.state_dict())
    assert all(torch.equal(a, b) and a.dtype == b.dtype for a, b in zip(module.state_dict().values(),
                                                                         restored.values()))


@pytest.mark.parametrize("model", [mlp(6, [5, 3], 2), lenet(1, 16, 3)])
def test_silodp_model_to_module_and_back(model):
    w = model.init(torch.Generator().manual_seed(1))
    module = to_module(model, w)
    again, w2 = from_module(module, model.input_shape)
    assert again.layers == model.layers and torch.equal(w2, w)
    x = torch.randn(4, *model.input_shape, dtype=torch.float64)
    assert torch.allclose(module(x), model.forward(w, x), rtol=0, atol=1e-12)


def test_simulator_weights_load_into_an_opacus_module():
    opacus = pytest.importorskip("opacus")
    model = mlp(4, [3], 2)
    w = model.init(torch.Generator().manual_seed(2))
    wrapped = opacus.GradSampleModule(to_module(model))
    wrapped.load_state_dict(vector_to_state_dict(model, w, wrapped.state_dict()))  # "_module." keys
    assert torch.equal(state_dict_to_vector(model, wrapped.state_dict()), w)


@pytest.mark.parametrize("layer, match", [
    (nn.Conv2d(1, 2, 3, padding=1), "padding"),
    (nn.Linear(4, 2, bias=False), "bias"),
    (nn.Tanh(), "not supported"),
])
def test_unsupported_layers_are_named(layer, match):
    shape = (1, 6, 6) if isinstance(layer, nn.Conv2d) else (4,)
    with pytest.raises(ValueError, match=match):
        from_module(nn.Sequential(layer), shape)


def test_shape_mismatch_is_refused():
    model = mlp(4, [3], 2)
    with pytest.raises(ValueError, match="state_dict"):
        state_dict_to_vector(model, to_module(mlp(4, [2], 2)).state_dict())
    with pytest.raises(ValueError, match="w"):
        vector_to_state_dict(model, torch.zeros(3), to_module(model).state_dict())
