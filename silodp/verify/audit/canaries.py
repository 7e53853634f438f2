"""Worst-case canaries: neighbouring silo datasets (replace one record) that make the audit tight.

The gradient canary follows the recipe of white-box audits (Nasr et al. 2021, Sec. 4; Nasr et al.
2023): a record whose clipped gradient has norm exactly L, in a direction that no other record's
gradient uses. Every silo gets one extra feature, zero for every real record (the canary's *free
coordinate*); the canary puts a large value A there. Under the squared loss its per-sample
gradient is ``(w.x + b - y) (A e_free, 1)``; with a label far outside the model's range the
residual keeps its sign at every iterate, so the clipped gradient is ``-+L (A e_free, 1) / ||.||``
whatever the training does. Replacing a label -Y record (D) by a label +Y one (D') flips it: the
two clipped gradients differ by exactly 2L, the full replace-one sensitivity of a clipped sum.
Other records touch that direction only through the bias coordinate (weight 1/A).

Special canaries for particular mechanisms:

* :func:`median_canary` -- for clip thresholds taken from the data (the ``median-clip`` bug): the
  replaced record decides whether the batch median of gradient norms is small or huge.
* :func:`flip_iterates` -- adversarial iterates for an MLP on which the canary's gradient flips
  direction between consecutive iterates, so a SPIDER/SVRG difference of it reaches 4L (two
  clipped gradients of opposite sign), the sensitivity the accountant assumes. For convex
  linear models the difference of one record's clipped gradients at two points never exceeds
  2L in the direction that separates canary from replaced record (gradients of a convex loss are
  monotone), so a difference-based audit needs a non-convex model and chosen iterates. Iterates
  may be chosen: ISRL-DP (paper Def 4) protects each silo's transcript for every fixed sequence
  of messages from the other silos, and those messages steer the server's iterates anywhere.
"""

from __future__ import annotations

import dataclasses

import torch

from silodp.algorithms.federation import Federation
from silodp.algorithms.models import Linear, Model
from silodp.algorithms.result import RunResult

#: canary feature value A and label magnitude Y of :func:`gradient_canary`
CANARY_SCALE = 1e3
CANARY_LABEL = 1e6


def free_coordinate_federation(num_silos: int = 2, n: int = 20, d: int = 4, seed: int = 0,
                               dtype: torch.dtype = torch.float64) -> Federation:
    """Linear-regression silos: ``x ~ N(0, I_d)`` plus one last feature that is 0 for every
    record (the canary's free coordinate), ``y = x w* + 0.1 N(0, 1)``. ``num_silos`` silos of
    ``n`` records each; the model must take ``d + 1`` features."""
    for name, value, low in (("num_silos", num_silos, 1), ("n", n, 2), ("d", d, 1)):
        if int(value) != value or value < low:
            raise ValueError(f"{name}: must be an integer >= {low}, got {value!r}")
    gen = torch.Generator().manual_seed(int(seed))
    x = torch.randn(num_silos, n, d, generator=gen, dtype=dtype)
    w_true = torch.randn(d, generator=gen, dtype=dtype) / d ** 0.5
    y = x @ w_true + 0.1 * torch.randn(num_silos, n, generator=gen, dtype=dtype)
    x = torch.cat([x, torch.zeros(num_silos, n, 1, dtype=dtype)], dim=-1)
    return Federation(x, y, torch.full((num_silos,), n))


def _check_position(fed: Federation, silo: int, record: int) -> None:
    if not 0 <= silo < fed.num_silos:
        raise ValueError(f"silo: must lie in [0, {fed.num_silos}), got {silo}")
    if not 0 <= record < int(fed.counts[silo]):
        raise ValueError(f"record: must lie in [0, {int(fed.counts[silo])}), got {record}")


def _replace(fed: Federation, silo: int, record: int, x: torch.Tensor, y: float) -> Federation:
    xs, ys = fed.x.clone(), fed.y.clone()
    xs[silo, record] = x
    ys[silo, record] = y
    return dataclasses.replace(fed, x=xs, y=ys)


def gradient_canary(fed: Federation, silo: int = 0, record: int = 0, homogeneous: bool = True,
                    scale: float = CANARY_SCALE, label: float = CANARY_LABEL) -> tuple[Federation, Federation]:
    """(D, D'): record ``record`` of silo ``silo`` is ``x = scale * e_free`` with label ``-label``
    in D and ``+label`` in D'. ``e_free`` is the last feature (see
    :func:`free_coordinate_federation`); use with the squared loss.

    ``homogeneous``: every other record of the silo is a copy of D's record too. Then the silo's
    message in D does not depend on which records the minibatch holds, while in D' it moves by
    2L/K per copy of the canary drawn: the worst case of subsampling (the dominating pair of the
    subsampled Gaussian), and the case where sampling with replacement hurts most (several copies).
    """
    _check_position(fed, silo, record)
    if not (scale > 0 and label > 0):
        raise ValueError(f"scale, label: must be > 0, got {scale}, {label}")
    x = torch.zeros(fed.x.shape[2:], dtype=fed.x.dtype)
    x.view(-1)[-1] = scale
    if homogeneous:
        xs, ys = fed.x.clone(), fed.y.clone()
        n = int(fed.counts[silo])
        xs[silo, :n] = x
        ys[silo, :n] = -label
        fed = dataclasses.replace(fed, x=xs, y=ys)
    return _replace(fed, silo, record, x, -label), _replace(fed, silo, record, x, label)


def median_canary(fed: Federation, silo: int = 0, record: int = 0, small: float = 1e-2, large: float = 1e2,
                  scale: float = CANARY_SCALE, label: float = CANARY_LABEL) -> tuple[Federation, Federation]:
    """(D, D') for a clip threshold set to the median per-sample gradient norm.

    Under the squared loss at the zero model, a record's gradient norm is ``|y| ||(x, 1)||``.
    The silo's other records get labels of size ``small`` (first half) and ``large`` (second
    half); the replaced record is ``x = scale e_free`` with a tiny label in D and ``label`` in D',
    so it tips the median from the small half to the large half.
    """
    _check_position(fed, silo, record)
    n = int(fed.counts[silo])
    if n % 2 == 0:
        raise ValueError(f"median_canary: the silo needs an odd number of records, got {n}")
    ys = fed.y.clone()
    others = [i for i in range(n) if i != record]
    half = len(others) // 2
    ys[silo, others[:half]] = small
    ys[silo, others[half:]] = large
    base = dataclasses.replace(fed, y=ys)
    x = torch.zeros(fed.x.shape[2:], dtype=fed.x.dtype)
    x.view(-1)[-1] = scale
    return _replace(base, silo, record, x, small / scale), _replace(base, silo, record, x, label)


def flip_iterates(model: Model, count: int, free_weight: float = 1e-3, seed: int = 0,
                  dtype: torch.dtype = torch.float64) -> list[torch.Tensor]:
    """``count`` iterates of a one-hidden-layer MLP on which the gradient canary's gradient
    alternates in sign: the first layer's weight on the free coordinate is ``free_weight`` (small,
    so the canary's hidden unit is active but its output small), the output weight alternates
    +1, -1, +1, ... (it multiplies the first layer's gradient, which then dominates and flips).
    Other weights come from the model's initialisation (seeded)."""
    layers = [i for i, layer in enumerate(model.layers) if isinstance(layer, Linear)]
    if len(layers) != 2 or model.layers[layers[0]].out_features != 1:
        raise ValueError("model: flip_iterates needs mlp(d, [1], 1) (one hidden unit)")
    if int(count) < 1:
        raise ValueError(f"count: must be >= 1, got {count}")
    base = model.init(torch.Generator().manual_seed(int(seed)), dtype=dtype)
    (w1, b1), (w2, b2) = (model.slices[i] for i in layers)
    base[w1.stop - 1] = free_weight  # weight of the free (last) feature
    base[b1] = 0.0
    base[b2] = 0.0
    out = []
    for r in range(int(count)):
        w = base.clone()
        w[w2] = 1.0 if r % 2 == 0 else -1.0
        out.append(w)
    return out


def spider_replay(iterates: list[torch.Tensor], step_size: float, q: int, num_silos: int) -> RunResult:
    """A transcript that steers ISRL-DP FedProx-SPIDER (paper Alg 3, f1 = 0) through ``iterates``.

    Alg 3 sets ``h_r`` to the round's aggregate every ``q`` rounds and adds it otherwise, then
    ``w_{r+1} = w_r - eta h_r``; so the aggregates ``h_r = (w_r - w_{r+1}) / eta`` (gradient
    rounds) and ``h_r - h_{r-1}`` (difference rounds) reproduce ``iterates`` = w_0 .. w_R when
    replayed. Run the algorithm with ``w0 = iterates[0]`` (the result's ``w_priv``) and
    ``replay=`` this result.
    """
    if len(iterates) < 2 or not step_size > 0 or int(q) < 1:
        raise ValueError("iterates, step_size, q: need >= 2 iterates, step_size > 0, q >= 1")
    d = iterates[0].shape[0]
    entries, h_prev = [], None
    for r in range(len(iterates) - 1):
        h = (iterates[r] - iterates[r + 1]) / step_size
        grad_round = r % int(q) == 0
        agg = h if grad_round else h - h_prev
        entries.append({"round": r, "group": "grad" if grad_round else "diff",
                        "messages": torch.zeros(num_silos, d, dtype=h.dtype), "aggregate": agg})
        h_prev = h
    # w_priv holds the start w_0 (the algorithm's w0), w_last the end
    return RunResult("isrl-spider", iterates[0].clone(), iterates[-1].clone(), transcript=entries)
