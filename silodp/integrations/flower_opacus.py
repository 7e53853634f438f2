"""Opacus inside a Flower silo: the local DP-SGD steps a round ran, as one release of the silo's
ledger (:class:`~silodp.integrations.flower_silo.SiloLedgerDB`), composed across rounds and runs.

A silo that trains locally with Opacus (``PrivacyEngine.make_private`` on its own data loader)
releases, each round, a model that is post-processing of every noisy step it took: the round is
``steps`` Gaussian steps of noise multiplier ``optimizer.noise_multiplier`` (sigma / C, C the
per-sample clip ``max_grad_norm``, as Opacus and silodp mean it under every relation) on the
batches the loader really drew. With ``poisson_sampling=False`` (shuffled fixed-size batches, a
fresh permutation per epoch) the round is ``BatchSampling.SHUFFLED``: within an epoch a record
lies in one batch (parallel composition, McSherry 2009, Thm 4), so each epoch costs one
un-amplified Gaussian step under replace-one (sensitivity 2C), and epochs compose adaptively
(:func:`silodp.accounting.releases.gaussian_steps`, the certificate of the ``silodp-*-shuffled``
Opacus accountants). Rounds must run whole epochs, so that the rounds' steps, merged in the
ledger (counts add), are whole epochs too. Poisson batches (Opacus' default loader) are refused:
the silo ledger's releases do not express Poisson sampling yet.
"""

from __future__ import annotations

from silodp.accounting.releases import BatchSampling, GaussianRelease

#: The ledger group of Opacus' local steps.
GROUP = "opacus-dp-sgd"


def opacus_release(optimizer, data_loader, steps: int) -> GaussianRelease:
    """The release of ``steps`` local steps that Opacus' ``optimizer`` (a ``DPOptimizer``) took on
    ``data_loader`` (what ``make_private`` returned, ``poisson_sampling=False``); ValueError if the
    loader draws Poisson batches or ``steps`` is not a whole number of epochs."""
    from opacus.data_loader import DPDataLoader

    if isinstance(data_loader, DPDataLoader):
        raise ValueError("data_loader: Poisson batches (Opacus' default loader) are not expressible in the silo "
                         "ledger; make_private(..., poisson_sampling=False) draws shuffled batches")
    z = float(getattr(optimizer, "noise_multiplier", float("nan")))
    if not z > 0:
        raise ValueError(f"optimizer: needs Opacus' DPOptimizer with a positive noise_multiplier, got {z!r}")
    per_epoch = len(data_loader)
    if not isinstance(steps, int) or steps <= 0 or steps % per_epoch:
        raise ValueError(f"steps: must be a positive multiple of the loader's {per_epoch} batches per epoch "
                         f"(whole epochs), got {steps!r}")
    return GaussianRelease(GROUP, steps, z, BatchSampling.SHUFFLED, int(data_loader.batch_size),
                           len(data_loader.dataset))


__all__ = ["GROUP", "opacus_release"]
