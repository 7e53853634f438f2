"""Reference baseline: ISRL-DP noisy minibatch SGD written as a plain per-silo, per-sample loop
(one autograd call per sample). Kept as the yardstick for ``bench_simulator.py``; not used by the
library."""

from __future__ import annotations

import torch


def loop_round(model, loss_fn, w, xs, ys, batch_size, clip, sigma, step, generator):
    """One round: every silo samples ``batch_size`` records with replacement, clips each
    per-sample gradient to ``clip``, averages, adds N(0, sigma^2 I); the server averages and steps."""
    messages = []
    for x, y in zip(xs, ys):  # silos
        idx = torch.randint(len(x), (batch_size,), generator=generator)
        total = torch.zeros_like(w)
        for j in idx.tolist():  # samples
            wj = w.detach().clone().requires_grad_(True)
            (g,) = torch.autograd.grad(loss_fn(model.forward(wj, x[j]), y[j]), wj)
            total += g * min(1.0, clip / max(float(g.norm()), 1e-30))
        messages.append(total / batch_size + sigma * torch.randn(w.shape, generator=generator, dtype=w.dtype))
    return w - step * torch.stack(messages).mean(0)
