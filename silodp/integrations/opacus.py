"""silodp's accountants inside Opacus: registered by name, for Poisson, shuffled or with-replacement batches.

Opacus creates its accountant from a name (``PrivacyEngine(accountant="prv")``,
``get_noise_multiplier(accountant=...)``, ``make_private_with_epsilon``) through
``opacus.accountants.registry``, and records its steps as ``(noise_multiplier, sample_rate,
steps)`` triples in ``history``. Importing this module registers, under those rules:

========================================  ==================  ======================
name                                      batches             neighbouring relation
========================================  ==================  ======================
``silodp-pld``, ``silodp-rdp``            Poisson             add/remove (Opacus')
``silodp-pld-replace-one`` (``-rdp-``)    Poisson             replace-one
``silodp-pld-shuffled`` (``-rdp-``)       shuffled, fixed     replace-one
``silodp-pld-balls-in-bins``              balls-in-bins       add/remove
========================================  ==================  ======================

and :func:`opacus_accountant` registers any other combination (with-replacement sampling needs
the dataset and batch sizes). ``noise_multiplier`` is sigma / C, C the clip norm
(``max_grad_norm``), exactly as Opacus; silodp's accountant applies the relation's sensitivity
(2C under replace-one).

Shuffled fixed-size batches (``poisson_sampling=False``). Opacus then walks through a random
permutation in ``m = 1 / sample_rate = len(data_loader)`` batches per epoch and still accounts each
step as Poisson-subsampled, which its own docstring calls an approximation: a shuffled batch is not
a Poisson sample, and the amplification-by-subsampling theorems (Mironov, Talwar & Zhang 2019;
Balle, Barthe & Gaboardi 2018, Thm 9) do not apply to batches of one permutation, which are not
independent. Here the certificate is the one that holds: within an epoch a record lies in exactly
one batch, so the epoch's m releases are a parallel composition (McSherry 2009, Thm 4) and cost one
un-amplified Gaussian release of the record's batch (sensitivity 2C under replace-one, the coupling
that keeps the permutation and swaps the record); epochs compose adaptively. This is
:func:`silodp.accounting.releases.gaussian_steps` with ``BatchSampling.SHUFFLED``; when the noise
changes inside an epoch the epoch is charged its smallest noise multiplier. Under add/remove the
argument fails (an inserted record shifts every later batch boundary), so shuffled batches are
certified under replace-one only.

Balls-in-bins batches (:func:`balls_in_bins_data_loader`, with ``poisson_sampling=False``): each
epoch every record goes to one of ``len(data_loader)`` batches, chosen uniformly and independently
(batch sizes vary; Opacus averages by the expected batch size, a constant). Removing a record
leaves the others' batches as they were, so add/remove holds, and the epoch is a random
allocation: :mod:`silodp.accounting.allocation` certifies it with amplification close to
Poisson's (Chua et al. 2025; Feldman & Shenfeld 2025). Only the ``pld`` accountant knows it.
"""

from __future__ import annotations

import contextlib
import enum
import logging
import math
from typing import Any, ClassVar

# Importing opacus runs ``logging.basicConfig`` (opacus.utils.module_utils), which gives the root
# logger a stderr handler: every record of a propagating logger (Flower's) would then print twice.
# ``import silodp.integrations`` imports this module whenever Opacus is installed, so it must not
# configure the host's logging: the handlers that import adds are removed again.
_root_handlers = list(logging.getLogger().handlers)
try:
    from opacus.accountants import IAccountant
    from opacus.accountants.registry import _ACCOUNTANTS, register_accountant
except ModuleNotFoundError as _missing:  # name the extra and its install, keep the exception's type and name
    if (_missing.name or "").split(".")[0] != "opacus":
        raise
    raise ModuleNotFoundError("silodp.integrations.opacus needs Opacus, which is not installed: "
                              "pip install 'silodp[opacus]'", name="opacus") from None
finally:
    for _handler in [h for h in logging.getLogger().handlers if h not in _root_handlers]:
        logging.getLogger().removeHandler(_handler)
    del _root_handlers

from silodp.accounting import ACCOUNTANTS, calibrate, get_accountant
from silodp.accounting import events as ev
from silodp.accounting.accountants import TIGHT
from silodp._validation import check_count, check_delta, check_positive, check_probability
from silodp.accounting.releases import BatchSampling, gaussian_steps

#: silodp accountants registered in Opacus by default: the registered tight ones (``candidacy``
#: TIGHT: pld, then rdp, Opacus' own default), by ``candidate_rank``; :func:`opacus_accountant`
#: takes any registered one that supports the steps.
ACCOUNTANT_NAMES = tuple(sorted((name for name, cls in ACCOUNTANTS.items() if cls.candidacy == TIGHT),
                                key=lambda name: ACCOUNTANTS[name].candidate_rank))


_APPROXIMATION_ALLOWED = False


@contextlib.contextmanager
def allow_poisson_approximation():
    """Inside this block a Poisson accountant accepts ``poisson_sampling=False`` (Opacus' unsound
    approximation): only for the audit that demonstrates the bug (mutation
    ``shuffled-accounted-as-poisson``), never for a certificate."""
    global _APPROXIMATION_ALLOWED
    before, _APPROXIMATION_ALLOWED = _APPROXIMATION_ALLOWED, True
    try:
        yield
    finally:
        _APPROXIMATION_ALLOWED = before


class OpacusSampling(enum.Enum):
    """How Opacus' data loader draws a batch."""

    POISSON = "poisson"
    SHUFFLED = "shuffled"
    WITH_REPLACEMENT = "with-replacement"
    BALLS_IN_BINS = "balls-in-bins"


class BallsInBinsBatchSampler:
    """Batches of indices for a ``DataLoader(batch_sampler=...)``: each epoch (one pass of
    ``__iter__``) every one of ``num_samples`` records is put in one of ``num_batches`` batches,
    chosen uniformly and independently (``torch.randint``); batches may be empty."""

    def __init__(self, num_samples: int, num_batches: int, generator=None) -> None:
        self.num_samples = check_count("num_samples", num_samples)
        self.num_batches = check_count("num_batches", num_batches)
        self.generator = generator

    def __len__(self) -> int:
        return self.num_batches

    def __iter__(self):
        import torch

        bins = torch.randint(self.num_batches, (self.num_samples,), generator=self.generator)
        order = torch.argsort(bins, stable=True)
        counts = torch.bincount(bins, minlength=self.num_batches).tolist()
        for batch in torch.split(order, counts):
            yield batch.tolist()


def balls_in_bins_data_loader(data_loader, generator=None):
    """``data_loader``'s dataset and collate function with balls-in-bins batches, as many per epoch
    as ``data_loader`` has (empty batches collated as Opacus' own Poisson loader does); pass it to
    ``make_private(..., poisson_sampling=False)`` with the accountant ``silodp-pld-balls-in-bins``."""
    from opacus.data_loader import wrap_collate_with_empty
    from torch.utils.data import DataLoader

    dataset = data_loader.dataset
    sampler = BallsInBinsBatchSampler(len(dataset), len(data_loader), generator)
    collate = wrap_collate_with_empty(collate_fn=data_loader.collate_fn)
    return DataLoader(dataset, batch_sampler=sampler, collate_fn=collate, num_workers=data_loader.num_workers,
                      pin_memory=data_loader.pin_memory)


class SilodpOpacusAccountant(IAccountant):
    """An Opacus ``IAccountant`` whose epsilon is certified by a silodp accountant.

    Subclasses (made by :func:`opacus_accountant`) fix the silodp ``accountant`` name, the
    ``sampling`` and the ``neighbouring`` relation, because Opacus' registry constructs
    accountants without arguments. ``history`` holds Opacus' ``(noise_multiplier, sample_rate,
    steps)`` triples in order, so Opacus' own ``get_noise_multiplier`` and checkpoints work.
    """

    accountant: ClassVar[str] = "pld"
    sampling: ClassVar[OpacusSampling] = OpacusSampling.POISSON
    neighbouring: ClassVar[ev.NeighboringRelation] = ev.ADD_OR_REMOVE_ONE
    dataset_size: ClassVar[int | None] = None
    batch_size: ClassVar[int | None] = None
    name: ClassVar[str] = "silodp-pld"

    def __init__(self) -> None:
        self.history: list[tuple[float, float, int]] = []

    @classmethod
    def mechanism(cls) -> str:
        return cls.name

    def step(self, *, noise_multiplier: float, sample_rate: float) -> None:
        """Record one optimizer step (merged into the last entry when nothing changed)."""
        z = check_positive("noise_multiplier", noise_multiplier)
        q = check_probability("sample_rate", sample_rate)
        if self.history and self.history[-1][:2] == (z, q):
            self.history[-1] = (z, q, self.history[-1][2] + 1)
        else:
            self.history.append((z, q, 1))

    def get_optimizer_hook_fn(self, sample_rate: float):
        """Opacus' step hook, refused for a Poisson accountant when ``make_private`` was called with
        ``poisson_sampling=False``: Opacus would account shuffled fixed-size batches as Poisson
        samples, an approximation with no theorem behind it (see the module docstring); the sound
        certificate is ``silodp-pld-shuffled``. (Opacus passes the hook only the sample rate, so
        the caller's ``poisson_sampling`` is read from its frame, ``PrivacyEngine.make_private``.)"""
        import sys

        from opacus.data_loader import DPDataLoader

        caller = sys._getframe(1).f_locals
        shuffled = caller.get("poisson_sampling") is False and not isinstance(caller.get("data_loader"), DPDataLoader)
        if self.sampling is OpacusSampling.POISSON and shuffled and not _APPROXIMATION_ALLOWED:
            raise ValueError(f"accountant: {self.name!r} certifies Poisson batches, but make_private got "
                             "poisson_sampling=False (shuffled fixed-size batches); use "
                             "accountant='silodp-pld-shuffled' (sound, replace-one), or "
                             "'silodp-pld-balls-in-bins' with balls_in_bins_data_loader")
        return super().get_optimizer_hook_fn(sample_rate)

    def __len__(self) -> int:
        """The number of ``history`` entries, as Opacus' accountants (:attr:`steps` counts steps)."""
        return len(self.history)

    @property
    def steps(self) -> int:
        """Optimizer steps recorded."""
        return sum(int(steps) for _, _, steps in self.history)

    def event(self) -> ev.DpEvent:
        """The silodp event of every step recorded so far (see the module docstring)."""
        if not self.history:
            return ev.NoOpDpEvent()
        if self.sampling in (OpacusSampling.SHUFFLED, OpacusSampling.BALLS_IN_BINS):
            return _shuffled_event(self.history, BatchSampling(self.sampling.value))
        parts = []
        for z, q, steps in self.history:
            step = ev.GaussianDpEvent(check_positive("noise_multiplier", z))
            if self.sampling == OpacusSampling.WITH_REPLACEMENT:
                step = ev.SampledWithReplacementDpEvent(self.dataset_size, self.batch_size, step)
            elif check_probability("sample_rate", q) < 1:
                step = ev.PoissonSampledDpEvent(q, step)
            parts.append(ev.SelfComposedDpEvent(step, check_count("steps", steps)))
        return ev.ComposedDpEvent(parts)

    def get_epsilon(self, delta: float, **kwargs: Any) -> float:
        """Certified epsilon at ``delta`` (silodp accountant ``self.accountant``, rounded up)."""
        if kwargs:
            raise ValueError(f"kwargs: silodp accountants take no options here, got {sorted(kwargs)}")
        return get_accountant(self.accountant, self.neighbouring).compose(self.event()).get_epsilon(
            check_delta("delta", delta))

    def get_epsilon_lower_bound(self, delta: float) -> float:
        """Shuffled or balls-in-bins batches: an epsilon no sound accountant can go below on the
        worst-case instance (the max-coordinate test of Chua et al. 2024 over the complete
        epochs, at the largest noise recorded; :func:`silodp.accounting.allocation.lower_bound_epsilon`),
        to set beside :meth:`get_epsilon`: how much the un-amplified shuffled charge may cost."""
        from silodp.accounting import allocation

        if self.sampling not in (OpacusSampling.SHUFFLED, OpacusSampling.BALLS_IN_BINS):
            raise ValueError(f"sampling: a lower bound is offered for shuffled or balls-in-bins batches, "
                             f"not {self.sampling.value}")
        if not self.history:
            return 0.0
        m = _batches_per_epoch(self.history[0][1])
        epochs = self.steps // m
        if epochs == 0:
            return 0.0
        z = max(float(z) for z, _, _ in self.history)
        return allocation.lower_bound_epsilon(z, m, epochs, check_delta("delta", delta),
                                              replace_one=self.neighbouring == ev.REPLACE_ONE)

    def get_privacy_spent(self, *, delta: float, **kwargs: Any) -> tuple[float, None]:
        """``(epsilon, None)`` at ``delta``, as Opacus' ``get_privacy_spent`` (no best RDP order:
        the certificate is :meth:`get_epsilon`'s)."""
        return self.get_epsilon(delta, **kwargs), None


def _batches_per_epoch(sample_rate: float) -> int:
    """Opacus' ``sample_rate = 1 / len(data_loader)`` for shuffled batches: ``len(data_loader)``."""
    m = round(1.0 / check_probability("sample_rate", sample_rate))
    if abs(m * sample_rate - 1.0) > 1e-9:
        raise ValueError(f"sample_rate: shuffled batches need 1 / len(data_loader), got {sample_rate!r} "
                         "(gradient accumulation is not supported with shuffled batches)")
    return m


def _shuffled_event(history: list[tuple[float, float, int]],
                    sampling: BatchSampling = BatchSampling.SHUFFLED) -> ev.DpEvent:
    """Epoch by epoch: each epoch charged at its smallest noise multiplier (shuffled: one Gaussian,
    parallel composition within the epoch; balls-in-bins: one random-allocation epoch),
    consecutive epochs of equal noise as one ``gaussian_steps``."""
    rates = {q for _, q, _ in history}
    if len(rates) != 1:
        raise ValueError(f"sample_rate: shuffled batches need one batches-per-epoch count, got rates {sorted(rates)}")
    m = _batches_per_epoch(rates.pop())
    steps_of_epoch: list[int] = []
    z_of_epoch: list[float] = []
    position = 0
    for z, _, steps in history:
        for _ in range(check_count("steps", steps)):
            if position % m == 0:
                steps_of_epoch.append(0)
                z_of_epoch.append(math.inf)
            steps_of_epoch[-1] += 1
            z_of_epoch[-1] = min(z_of_epoch[-1], check_positive("noise_multiplier", z))
            position += 1
    runs: list[list[float]] = []  # [z, steps] of consecutive epochs with the same noise
    for z, steps in zip(z_of_epoch, steps_of_epoch):
        if runs and runs[-1][0] == z:
            runs[-1][1] += steps
        else:
            runs.append([z, steps])
    # m batches of one record "slot" each: a record is in exactly one batch per epoch
    return ev.ComposedDpEvent([gaussian_steps(int(steps), z, sampling, 1, m) for z, steps in runs])


def _default_name(accountant: str, sampling: OpacusSampling, neighbouring: ev.NeighboringRelation,
                  dataset_size: int | None, batch_size: int | None) -> str:
    parts = ["silodp", accountant]
    if sampling != OpacusSampling.POISSON:
        parts.append(sampling.value)
    if sampling == OpacusSampling.WITH_REPLACEMENT:
        parts += [f"n{dataset_size}", f"k{batch_size}"]
    if neighbouring == ev.REPLACE_ONE and sampling == OpacusSampling.POISSON:
        parts.append("replace-one")
    return "-".join(parts)


def opacus_accountant(accountant: str = "pld", sampling: OpacusSampling | str = OpacusSampling.POISSON,
                      neighbouring: ev.NeighboringRelation = ev.ADD_OR_REMOVE_ONE,
                      dataset_size: int | None = None, batch_size: int | None = None,
                      name: str | None = None) -> str:
    """Register (once) the Opacus accountant for this configuration and return its name, for
    ``PrivacyEngine(accountant=name)``.

    ``accountant``: a registered silodp accountant that supports these steps (``"pld"``, ``"rdp"``, ...;
    see :mod:`silodp.accounting.accountants`).
    ``sampling``: ``"poisson"`` (Opacus' default loader), ``"shuffled"`` (``poisson_sampling=False``;
    replace-one only), ``"with-replacement"`` (a loader drawing ``batch_size`` indices i.i.d. from
    ``dataset_size`` records each step; replace-one only) or ``"balls-in-bins"``
    (:func:`balls_in_bins_data_loader`; by the accountants whose ``supports()`` accepts a
    :class:`~silodp.accounting.events.BallsInBinsDpEvent`).
    """
    try:
        how = OpacusSampling(sampling)
    except ValueError:
        raise ValueError(f"sampling must be one of {[s.value for s in OpacusSampling]}, got {sampling!r}") from None
    rel = ev.relation(neighbouring)
    if how == OpacusSampling.BALLS_IN_BINS:  # asked of the accountant (its supports()), not of its name
        epoch = ev.BallsInBinsDpEvent(2, ev.GaussianDpEvent(1.0))
        able = sorted(n for n in ACCOUNTANTS if get_accountant(n, rel).supports(epoch))
        if accountant not in able:
            raise ValueError(f"accountant: balls-in-bins batches are certified by {able} only, got {accountant!r}")
    if how not in (OpacusSampling.POISSON, OpacusSampling.BALLS_IN_BINS) and rel != ev.REPLACE_ONE:
        raise ValueError(f"neighbouring: {how.value} batches are certified under REPLACE_ONE only "
                         "(see silodp.integrations.opacus)")
    if how == OpacusSampling.WITH_REPLACEMENT:
        dataset_size, batch_size = check_count("dataset_size", dataset_size), check_count("batch_size", batch_size)
    elif dataset_size is not None or batch_size is not None:
        raise ValueError(f"dataset_size, batch_size: only for with-replacement sampling, not {how.value}")
    name = name or _default_name(accountant, how, rel, dataset_size, batch_size)
    config = dict(accountant=accountant, sampling=how, neighbouring=rel, dataset_size=dataset_size,
                  batch_size=batch_size, name=name)
    probe = type("Probe", (SilodpOpacusAccountant,), config)()
    probe.history = [(1.0, 0.5, 2)]  # two subsampled steps: what the registry's accountant must support
    if accountant not in ACCOUNTANTS or not get_accountant(accountant, rel).supports(probe.event()):
        able = [n for n in ACCOUNTANTS if get_accountant(n, rel).supports(probe.event())]
        raise ValueError(f"accountant: must be a registered accountant certifying {how.value} steps {able}, "
                         f"got {accountant!r}")
    existing = _ACCOUNTANTS.get(name)
    if existing is not None:
        if not (isinstance(existing, type) and issubclass(existing, SilodpOpacusAccountant)
                and all(getattr(existing, k) == v for k, v in config.items())):
            raise ValueError(f"name: {name!r} is already registered in Opacus for another accountant")
        return name
    cls = type(f"SilodpOpacus_{name.replace('-', '_')}", (SilodpOpacusAccountant,), config)
    register_accountant(name, cls)
    return name


def get_noise_multiplier(*, target_epsilon: float, target_delta: float, sample_rate: float,
                         steps: int | None = None, epochs: int | None = None,
                         accountant: str = "silodp-pld") -> float:
    """The smallest noise multiplier silodp certifies for ``steps`` (or ``epochs / sample_rate``)
    Opacus steps at ``sample_rate`` under the registered ``accountant``: silodp's
    :func:`~silodp.accounting.calibrate`, rounded toward more privacy (certified epsilon in
    [target (1 - rtol), target]). Opacus' own ``get_noise_multiplier(accountant=...)`` also works
    with these names (its bisection stops within an absolute 0.01 below the target)."""
    cls = _ACCOUNTANTS.get(accountant)
    if not (isinstance(cls, type) and issubclass(cls, SilodpOpacusAccountant)):
        raise ValueError(f"accountant: {accountant!r} is not a registered silodp accountant "
                         "(see opacus_accountant)")
    q = check_probability("sample_rate", sample_rate)
    if (steps is None) == (epochs is None):
        raise ValueError("steps, epochs: give exactly one")
    count = check_count("steps", steps) if steps is not None else int(check_count("epochs", epochs) / q)  # as Opacus

    def event_of(z: float) -> ev.DpEvent:
        probe = cls()
        probe.history = [(z, q, count)]
        return probe.event()

    return calibrate(event_of, target_epsilon, target_delta, cls.accountant, cls.neighbouring).noise_multiplier


def _register_defaults() -> None:
    for name in ACCOUNTANT_NAMES:
        opacus_accountant(name)
        opacus_accountant(name, neighbouring=ev.REPLACE_ONE)
        opacus_accountant(name, OpacusSampling.SHUFFLED, ev.REPLACE_ONE)
    opacus_accountant("pld", OpacusSampling.BALLS_IN_BINS)


_register_defaults()

__all__ = ["ACCOUNTANT_NAMES", "OpacusSampling", "SilodpOpacusAccountant", "get_noise_multiplier",
           "opacus_accountant"]
