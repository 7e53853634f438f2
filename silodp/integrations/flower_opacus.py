"""Opacus inside a Flower silo: the local DP-SGD steps a round ran, as one release of the silo's
ledger (:class:`~silodp.integrations.flower_silo.SiloLedgerDB`), composed across rounds and runs.

A silo that trains locally with Opacus (``PrivacyEngine.make_private`` on its own data loader)
releases, each round, a model that is post-processing of every noisy step it took: the round is
``steps`` Gaussian steps of noise multiplier ``optimizer.noise_multiplier`` (sigma / C, C the
per-sample clip ``max_grad_norm``, as Opacus and silodp mean it under every relation) on the
batches the loader really drew:

* ``poisson_sampling=True`` (Opacus' default: a ``DPDataLoader``, each record in each batch
  independently with the loader's ``sample_rate`` q): ``BatchSampling.POISSON``, ``steps``
  Poisson-subsampled Gaussian steps at rate K / n, K the smallest expected batch with
  K / n >= q (equal to q for Opacus' q = 1 / len(loader) when the batch size divides n; above
  it, toward more privacy loss, otherwise). Any number of steps.
* ``poisson_sampling=False`` (shuffled fixed-size batches, a fresh permutation per epoch):
  ``BatchSampling.SHUFFLED``: within an epoch a record lies in one batch (parallel composition,
  McSherry 2009, Thm 4), so each epoch costs one un-amplified Gaussian step under replace-one
  (sensitivity 2C), and epochs compose adaptively (:func:`silodp.accounting.releases.gaussian_steps`,
  the certificate of the ``silodp-*-shuffled`` Opacus accountants). Rounds must run whole epochs,
  so that the rounds' steps, merged in the ledger (counts add), are whole epochs too.

Before the first step, :func:`harden` gives the optimizer silodp's one release primitive as its
clip (:mod:`silodp.algorithms.release`): Opacus' own clip factor ``C / (norm + 1e-6)`` is NaN for
a record whose per-sample gradient is not finite (a model the server crafted can aim an
``inf - inf`` logit at one record), which makes the whole step NaN; hardened, such a record
contributes zero and norms never overflow. :func:`opacus_release` refuses an optimizer that is not
hardened.

The ledger certifies under replace-one (ISRL-DP, paper Definition 4), so its epsilon is larger
than Opacus' own add/remove accountant reports for the same steps.
"""

from __future__ import annotations

import math

from silodp.accounting.releases import BatchSampling, GaussianRelease

#: The ledger group of Opacus' local steps.
GROUP = "opacus-dp-sgd"


def poisson_batch(sample_rate: float, dataset_size: int) -> int:
    """The smallest expected batch K with K / n >= ``sample_rate`` (as the accountants read it, in
    floating point): the release's rate is never below the rate the loader drew with."""
    q, n = float(sample_rate), int(dataset_size)
    if not 0 < q <= 1:
        raise ValueError(f"data_loader: sample_rate must lie in (0, 1], got {sample_rate!r}")
    k = min(n, max(1, math.ceil(q * n)))
    while k > 1 and (k - 1) / n >= q:
        k -= 1
    while k < n and k / n < q:
        k += 1
    return k


def _clip_and_accumulate(self) -> None:
    """Opacus' ``DPOptimizer.clip_and_accumulate`` through silodp's release primitive: each
    record's gradient (all parameters jointly) scaled to norm at most ``max_grad_norm``, its norm
    computed without overflow, a non-finite record's rows zero (never a NaN factor)."""
    import torch
    from opacus.optimizers.optimizer import _check_processed_flag, _mark_as_processed

    from silodp.algorithms.release import factors_from_log_norms, log_norms

    samples = [self._get_flat_grad_sample(p) for p in self.params]
    flat = [g.reshape(len(g), -1).to(torch.float64) for g in samples]
    if not flat or len(flat[0]) == 0:
        log_norm = torch.zeros(0, dtype=torch.float64)
    else:
        log_norm = torch.logsumexp(2 * torch.stack([log_norms(f) for f in flat], 1), 1) / 2
    factors = factors_from_log_norms(log_norm, float(self.max_grad_norm))
    keep = ~torch.isnan(log_norm)
    for p, g in zip(self.params, samples):
        _check_processed_flag(p.grad_sample)
        g = g.to(p.dtype)
        g = torch.where(keep.to(g.device).view(-1, *([1] * (g.dim() - 1))), g, torch.zeros((), dtype=g.dtype))
        grad = torch.einsum("i,i...", factors.to(device=g.device, dtype=p.dtype), g)
        p.summed_grad = grad if p.summed_grad is None else p.summed_grad + grad
        _mark_as_processed(p.grad_sample)


def harden(optimizer):
    """Give Opacus' ``DPOptimizer`` silodp's clip (see the module docstring); returns it. Call it
    once, before the first step (:func:`opacus_release` refuses an optimizer that is not hardened)."""
    import types

    if not hasattr(optimizer, "clip_and_accumulate") or not hasattr(optimizer, "max_grad_norm"):
        raise ValueError(f"optimizer: needs Opacus' DPOptimizer, got {type(optimizer).__name__}")
    optimizer.clip_and_accumulate = types.MethodType(_clip_and_accumulate, optimizer)
    optimizer._silodp_hardened = True
    return optimizer


def opacus_release(optimizer, data_loader, steps: int) -> GaussianRelease:
    """The release of ``steps`` local steps that Opacus' ``optimizer`` (a ``DPOptimizer``) took on
    ``data_loader`` (what ``make_private`` returned); ValueError if the optimizer has no positive
    noise multiplier, or, with shuffled batches, ``steps`` is not a whole number of epochs."""
    from opacus.data_loader import DPDataLoader

    if not getattr(optimizer, "_silodp_hardened", False):
        raise ValueError("optimizer: not hardened; call silodp.integrations.flower_opacus.harden(optimizer) "
                         "before its first step (silodp's clip: a non-finite record contributes zero)")
    z = float(getattr(optimizer, "noise_multiplier", float("nan")))
    if not z > 0:
        raise ValueError(f"optimizer: needs Opacus' DPOptimizer with a positive noise_multiplier, got {z!r}")
    if not isinstance(steps, int) or isinstance(steps, bool) or steps <= 0:
        raise ValueError(f"steps: must be a positive int, got {steps!r}")
    n = len(data_loader.dataset)
    if isinstance(data_loader, DPDataLoader):  # Poisson batches, as Opacus drew them
        return GaussianRelease(GROUP, steps, z, BatchSampling.POISSON, poisson_batch(data_loader.sample_rate, n), n)
    per_epoch = len(data_loader)
    if steps % per_epoch:
        raise ValueError(f"steps: must be a positive multiple of the loader's {per_epoch} batches per epoch "
                         f"(whole epochs), got {steps!r}")
    return GaussianRelease(GROUP, steps, z, BatchSampling.SHUFFLED, int(data_loader.batch_size), n)


__all__ = ["GROUP", "harden", "opacus_release", "poisson_batch"]
