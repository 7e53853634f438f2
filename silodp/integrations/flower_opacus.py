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


def opacus_release(optimizer, data_loader, steps: int) -> GaussianRelease:
    """The release of ``steps`` local steps that Opacus' ``optimizer`` (a ``DPOptimizer``) took on
    ``data_loader`` (what ``make_private`` returned); ValueError if the optimizer has no positive
    noise multiplier, or, with shuffled batches, ``steps`` is not a whole number of epochs."""
    from opacus.data_loader import DPDataLoader

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


__all__ = ["GROUP", "opacus_release", "poisson_batch"]
