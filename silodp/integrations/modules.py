"""``torch.nn.Module`` <-> silodp model: a user's module runs in the simulator, simulator weights
load into Flower (as arrays) and Opacus (as a module).

silodp's models (:mod:`silodp.algorithms.models`) are sequences of layers on one flat parameter
vector. A module converts when it is an ``nn.Sequential`` (nested ones are flattened) of the
layers silodp supports, with PyTorch's own semantics:

* ``nn.Linear`` (with bias) -> ``Linear``;
* ``nn.Conv2d`` (square kernel, stride 1, no padding, dilation 1, groups 1, bias) -> ``Conv2d``;
* ``nn.ReLU`` -> ``ReLU``; ``nn.MaxPool2d(k)`` (stride k, no padding) -> ``MaxPool2d(k)``;
* ``nn.Flatten()`` on a ``[C, H, W]`` activation -> ``Flatten``.

Anything else is a ``ValueError`` naming the layer. The flat vector holds each parametric layer's
weight then bias, in module order, which is also the order of the module's ``state_dict``: the
conversion is exact (bit for bit) both ways.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import torch
from torch import nn

from silodp.algorithms.models import Conv2d, Flatten, Linear, MaxPool2d, Model, ReLU


def _leaves(module: nn.Module) -> list[nn.Module]:
    if isinstance(module, nn.Sequential):
        return [leaf for child in module for leaf in _leaves(child)]
    return [module]


def _layer(module: nn.Module, shape: tuple[int, ...]):
    """The silodp layer equal to ``module`` on inputs of ``shape`` (``ValueError`` otherwise)."""
    where = f"module: layer {module!r}"
    if isinstance(module, nn.Linear):
        if module.bias is None:
            raise ValueError(f"{where} has no bias; silodp's Linear has one")
        return Linear(module.in_features, module.out_features)
    if isinstance(module, nn.Conv2d):
        k = module.kernel_size
        if (k[0] != k[1] or module.stride != (1, 1) or module.padding not in ((0, 0), "valid")
                or module.dilation != (1, 1) or module.groups != 1 or module.bias is None):
            raise ValueError(f"{where}: silodp's Conv2d is square, stride 1, no padding, dilation 1, one group, biased")
        return Conv2d(module.in_channels, module.out_channels, k[0])
    if isinstance(module, nn.ReLU):
        return ReLU()
    if isinstance(module, nn.MaxPool2d):
        k, s = module.kernel_size, module.stride
        if not (isinstance(k, int) and s in (k, (k, k)) and module.padding == 0 and module.dilation == 1
                and not module.ceil_mode):
            raise ValueError(f"{where}: silodp's MaxPool2d(k) has stride k, no padding, floor mode")
        return MaxPool2d(k)
    if isinstance(module, nn.Flatten):
        if len(shape) != 3 or module.start_dim != 1 or module.end_dim != -1:
            raise ValueError(f"{where}: silodp's Flatten flattens a [C, H, W] activation, got shape {shape}")
        return Flatten()
    raise ValueError(f"{where} is not supported (Linear, Conv2d, ReLU, MaxPool2d, Flatten)")


def from_module(module: nn.Module, input_shape: tuple[int, ...]) -> tuple[Model, torch.Tensor]:
    """The silodp model equal to ``module`` on inputs of ``input_shape`` (one record's shape, no
    batch dimension) and its flat parameter vector (float64)."""
    shape = tuple(int(s) for s in input_shape)
    if not shape or min(shape) < 1:
        raise ValueError(f"input_shape: must be a non-empty tuple of sizes >= 1, got {input_shape!r}")
    layers = []
    probe = torch.zeros(1, *shape, dtype=torch.float64)
    for leaf in _leaves(module):
        layers.append(_layer(leaf, tuple(probe.shape[1:])))
        with torch.no_grad():
            probe = _apply(leaf, probe)
    if not any(isinstance(layer, (Linear, Conv2d)) for layer in layers) or len(probe.shape) != 2:
        raise ValueError("module: must have parameters and end in flat outputs [batch, outputs]")
    model = Model(layers, shape, int(probe.shape[1]))
    return model, state_dict_to_vector(model, module.state_dict())


def _apply(leaf: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """``leaf`` on ``x`` without changing ``leaf``'s dtype (shape inference only)."""
    params = {k: v.to(x.dtype) for k, v in leaf.state_dict().items()}
    return torch.func.functional_call(leaf, params, (x,))


def _parametric(model: Model) -> list[tuple[int, tuple[int, ...], tuple[int, ...]]]:
    return [(i, *layer.shapes) for i, layer in enumerate(model.layers) if isinstance(layer, (Linear, Conv2d))]


def state_dict_to_vector(model: Model, state_dict: Mapping[str, torch.Tensor]) -> torch.Tensor:
    """The flat vector of ``model`` from a module's ``state_dict`` (tensors in module order:
    weight, bias per parametric layer; float64, values exact)."""
    tensors = list(state_dict.values())
    expected = [s for _, w, b in _parametric(model) for s in (w, b)]
    if [tuple(t.shape) for t in tensors] != expected:
        raise ValueError(f"state_dict: tensor shapes {[tuple(t.shape) for t in tensors]} do not match the "
                         f"model's {expected}")
    return torch.cat([torch.as_tensor(t).detach().reshape(-1).to(torch.float64) for t in tensors])


def vector_to_state_dict(model: Model, w: torch.Tensor, template: Mapping[str, torch.Tensor]) -> OrderedDict:
    """``w`` as a state dict with ``template``'s keys and dtypes (e.g. ``module.state_dict()``, or
    an Opacus ``GradSampleModule``'s, whose keys carry a ``_module.`` prefix), ready for
    ``load_state_dict``; ``list(out.values())`` are the arrays of a Flower ``ArrayRecord``."""
    w = torch.as_tensor(w)
    if w.shape != (model.dim,):
        raise ValueError(f"w: must have shape ({model.dim},), got {tuple(w.shape)}")
    views = [t for i, _, _ in _parametric(model) for t in model.params(w, i)]
    keys = list(template.keys())
    if len(keys) != len(views) or any(tuple(template[k].shape) != tuple(v.shape) for k, v in zip(keys, views)):
        raise ValueError("template: its tensors do not match the model's parameters")
    return OrderedDict((k, v.detach().clone().to(template[k].dtype)) for k, v in zip(keys, views))


def to_module(model: Model, w: torch.Tensor | None = None, dtype: torch.dtype = torch.float64) -> nn.Sequential:
    """An ``nn.Sequential`` equal to ``model`` (with parameters ``w`` if given)."""
    layers: list[nn.Module] = []
    for layer in model.layers:
        if isinstance(layer, Linear):
            layers.append(nn.Linear(layer.in_features, layer.out_features, dtype=dtype))
        elif isinstance(layer, Conv2d):
            layers.append(nn.Conv2d(layer.in_channels, layer.out_channels, layer.kernel_size, dtype=dtype))
        elif isinstance(layer, ReLU):
            layers.append(nn.ReLU())
        elif isinstance(layer, MaxPool2d):
            layers.append(nn.MaxPool2d(layer.size))
        elif isinstance(layer, Flatten):
            layers.append(nn.Flatten())
        else:
            raise ValueError(f"model: unsupported layer {layer!r}")
    module = nn.Sequential(*layers)
    if w is not None:
        module.load_state_dict(vector_to_state_dict(model, w, module.state_dict()))
    return module


__all__ = ["from_module", "state_dict_to_vector", "to_module", "vector_to_state_dict"]
