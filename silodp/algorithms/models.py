"""Functional models on a flat parameter vector, usable with :mod:`torch.func`.

A model is a sequence of layers. Parameters live in one flat vector ``w`` of length
:attr:`Model.dim`; each parametric layer reads its weight and bias as views of that vector.
``Model.forward(w, x)`` accepts any leading batch shape on ``x`` (so ``vmap`` over samples works),
and :meth:`Model.forward_batched` runs one *different* parameter vector per silo,
``w: [N, d]`` on ``x: [N, K, ...]``, which is what the ghost-clipping path in :mod:`.grads` uses.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F


@dataclass(frozen=True)
class Linear:
    """Affine layer ``x -> x W^T + b`` with ``W: [out, in]``."""

    in_features: int
    out_features: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        return (self.out_features, self.in_features), (self.out_features,)


@dataclass(frozen=True)
class Conv2d:
    """2-d convolution, stride 1, no padding, square kernel."""

    in_channels: int
    out_channels: int
    kernel_size: int

    @property
    def shapes(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        k = self.kernel_size
        return (self.out_channels, self.in_channels, k, k), (self.out_channels,)


@dataclass(frozen=True)
class ReLU:
    pass


@dataclass(frozen=True)
class MaxPool2d:
    size: int = 2


@dataclass(frozen=True)
class Flatten:
    """Flatten the last three (channel, height, width) dimensions."""


PARAMETRIC = (Linear, Conv2d)


class Model:
    """A sequential functional model; parameters are one flat vector of length :attr:`dim`."""

    def __init__(self, layers: list, input_shape: tuple[int, ...], num_outputs: int):
        self.layers = list(layers)
        self.input_shape = tuple(input_shape)
        self.num_outputs = int(num_outputs)
        self.slices: list[tuple[slice, slice] | None] = []
        offset = 0
        for layer in self.layers:
            if isinstance(layer, PARAMETRIC):
                w_shape, b_shape = layer.shapes
                nw, nb = math.prod(w_shape), math.prod(b_shape)
                self.slices.append((slice(offset, offset + nw), slice(offset + nw, offset + nw + nb)))
                offset += nw + nb
            else:
                self.slices.append(None)
        self.dim = offset

    def __repr__(self) -> str:
        return f"Model(layers={self.layers}, dim={self.dim})"

    def params(self, w: torch.Tensor, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Weight and bias of layer ``index`` as views of ``w`` (leading dims of ``w`` kept)."""
        layer, (sw, sb) = self.layers[index], self.slices[index]
        w_shape, b_shape = layer.shapes
        lead = w.shape[:-1]
        return w[..., sw].reshape(*lead, *w_shape), w[..., sb].reshape(*lead, *b_shape)

    def init(self, generator: torch.Generator | None = None, dtype: torch.dtype = torch.float64) -> torch.Tensor:
        """Kaiming-uniform-style initialisation (PyTorch's default), zero for linear models."""
        w = torch.zeros(self.dim, dtype=dtype)
        if len([s for s in self.slices if s is not None]) == 1:
            return w
        for layer, sl in zip(self.layers, self.slices):
            if sl is None:
                continue
            fan_in = math.prod(layer.shapes[0][1:])
            bound = 1.0 / math.sqrt(fan_in)
            for s in sl:
                n = s.stop - s.start
                w[s] = (torch.rand(n, generator=generator, dtype=dtype) * 2 - 1) * bound
        return w

    def forward(self, w: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Outputs for ``x: [..., *input_shape]`` under one parameter vector ``w: [d]``."""
        h = x
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Linear):
                W, b = self.params(w, i)
                h = h @ W.T + b
            elif isinstance(layer, Conv2d):
                W, b = self.params(w, i)
                lead = h.shape[:-3]  # conv2d takes [B, C, H, W]: fold any leading dims into B
                out = F.conv2d(h.reshape(-1, *h.shape[-3:]), W, b)
                h = out.reshape(*lead, *out.shape[1:])
            else:
                h = apply_activation(layer, h)
        return h

    def forward_batched(self, w: torch.Tensor, x: torch.Tensor, record: bool = False) -> Any:
        """Outputs for ``x: [N, K, *input_shape]`` with per-silo parameters ``w: [N, d]``.

        With ``record=True`` also returns, for each parametric layer, its input activation and
        its output (pre-activation) tensor, as needed by ghost clipping.
        """
        n_silos, k = x.shape[:2]
        h = x
        inputs, outputs = [], []
        for i, layer in enumerate(self.layers):
            if isinstance(layer, Linear):
                W, b = self.params(w, i)
                inputs.append(h)
                h = torch.baddbmm(b.unsqueeze(1), h, W.transpose(1, 2))
                outputs.append(h)
            elif isinstance(layer, Conv2d):
                W, b = self.params(w, i)
                inputs.append(h)
                c, hh, ww = h.shape[2:]
                grouped = h.transpose(0, 1).reshape(k, n_silos * c, hh, ww)
                out = F.conv2d(grouped, W.reshape(-1, *W.shape[2:]), b.reshape(-1), groups=n_silos)
                h = out.reshape(k, n_silos, layer.out_channels, *out.shape[2:])
                h = h.transpose(0, 1)
                outputs.append(h)
            else:
                h = apply_activation(layer, h)
        return (h, inputs, outputs) if record else h


def apply_activation(layer: object, h: torch.Tensor) -> torch.Tensor:
    if isinstance(layer, ReLU):
        return torch.relu(h)
    if isinstance(layer, Flatten):
        return h.flatten(-3)
    if isinstance(layer, MaxPool2d):
        lead = h.shape[:-3]
        out = F.max_pool2d(h.reshape(-1, *h.shape[-3:]), layer.size)
        return out.reshape(*lead, *out.shape[1:])
    raise ValueError(f"layer: unsupported layer {layer!r}")


def linear_model(num_features: int, num_outputs: int = 1) -> Model:
    """Linear / logistic (``num_outputs=1``) or softmax (``num_outputs=C``) regression."""
    if num_features < 1 or num_outputs < 1:
        raise ValueError("num_features and num_outputs must be >= 1")
    return Model([Linear(num_features, num_outputs)], (num_features,), num_outputs)


def mlp(num_features: int, hidden: tuple[int, ...] | list[int], num_outputs: int = 1) -> Model:
    """Multi-layer perceptron with ReLU activations and any hidden sizes."""
    sizes = [int(num_features), *[int(h) for h in hidden], int(num_outputs)]
    if min(sizes) < 1:
        raise ValueError(f"hidden: all layer sizes must be >= 1, got {sizes}")
    layers: list = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [Linear(a, b), ReLU()]
    return Model(layers[:-1], (num_features,), num_outputs)


def lenet(in_channels: int = 3, image_size: int = 32, num_outputs: int = 10) -> Model:
    """The paper's CNN (Sec. 4, App. H.3): conv5x5(6)-ReLU-pool2, conv5x5(16)-ReLU-pool2,
    fc120-ReLU, fc84-ReLU, fc(num_outputs)."""
    side = ((image_size - 4) // 2 - 4) // 2
    if side < 1:
        raise ValueError(f"image_size: must be >= 16, got {image_size}")
    layers = [
        Conv2d(in_channels, 6, 5), ReLU(), MaxPool2d(2),
        Conv2d(6, 16, 5), ReLU(), MaxPool2d(2), Flatten(),
        Linear(16 * side * side, 120), ReLU(), Linear(120, 84), ReLU(), Linear(84, num_outputs),
    ]
    return Model(layers, (in_channels, image_size, image_size), num_outputs)
