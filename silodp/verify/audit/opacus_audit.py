"""One-run audits of a real Opacus training loop: gradient canaries through ``make_private``.

``audit_opacus(model, data_loader, ...)`` trains the user's model once with Opacus
(``PrivacyEngine.make_private`` on a copy of the user's model, an SGD optimizer at ``config.lr``
and the loader's dataset) after inserting m canary records, each with probability 1/2
(add/remove: the record is present or absent; replace-one: the record's sign is + or -, dataset
size fixed). The canaries are white-box *gradient* canaries (Nasr et al. 2021, Sec. 4; Steinke,
Nasr & Jagielski 2023, Sec. 6): whatever their input, Opacus' per-sample gradient of a canary row
is replaced, between ``backward`` and ``step``, by a huge Dirac vector on coordinates that canary
owns (one per parameter tensor large enough), so Opacus' clipping turns it into a contribution of
norm exactly C. The adversary of the DP-SGD claim sees every noisy gradient and knows the other
records: a canary's score is the sum over steps of the released gradient on its coordinates, less
the other records' clipped contribution there, or, for shuffled batches, the per-epoch
log-likelihood ratio of "one batch per epoch holds it". The run's scores are judged by every
estimator of :mod:`.onerun` against the claim of the Opacus accountant the run used.

Mutations (:data:`OPACUS_MUTATIONS`) are switches on the real Opacus objects -- the accountant
the engine asks, the loader, the optimizer's clipping, noise generator or normalization:

* ``replace-one-shift-c`` (dp-accounting #378): the replace-one accountant reads the noise
  multiplier against a shift of C, not 2C;
* ``expected-batch-normalization`` (Opacus #571 / #819): the noisy sum is divided by
  ``int(len(dataset) * sample_rate)``, the size of the private dataset, while the sampled
  Gaussian is accounted (add/remove neighbours then differ in the normalization);
* ``per-layer-clipping``: each parameter tensor clipped to C, noise calibrated to a global C;
* ``shuffled-accounted-as-poisson`` (Chua et al. 2024): shuffled fixed-size batches, the
  Poisson-sampled Gaussian accounted;
* ``public-seed-noise``: the noise generator re-seeded from a public seed at every step (the
  adversary regenerates and subtracts the noise).

Several independent runs (``runs > 1``) pool their canaries: Steinke et al.'s theorem holds for
canaries spread over independent runs (a few-run audit, needed where the bug leaks a global
quantity such as the dataset size).
"""

from __future__ import annotations

import contextlib

import copy
import dataclasses
import math
import time
import warnings
from typing import Callable

import numpy as np
import torch
from torch import nn

from silodp.accounting import events as ev
from silodp.integrations import opacus as silodp_opacus
from silodp.verify.audit.onerun import CanaryScores, ONE_RUN_ESTIMATORS, RunAudit, judge_run

OPACUS_MUTATIONS = ("replace-one-shift-c", "expected-batch-normalization", "per-layer-clipping",
                    "shuffled-accounted-as-poisson", "public-seed-noise")
#: the canaries' raw gradient entries: far above any clip norm, so clipping sets their size
_CANARY_GRADIENT = 1e6
#: the public seed of the ``public-seed-noise`` mutation (known to the adversary)
PUBLIC_SEED = 1234


class ShiftCAccountant(silodp_opacus.SilodpOpacusAccountant):
    """dp-accounting #378 as an Opacus accountant: replace-one, but each Gaussian is read against a
    shift of C (silodp's replace-one accountant applies 2C, so the bug is the event at 2 z)."""

    accountant = "pld"
    neighbouring = ev.REPLACE_ONE
    name = "silodp-pld-replace-one-shift-c"

    def event(self) -> ev.DpEvent:
        honest, self.history = self.history, [(2.0 * z, q, s) for z, q, s in self.history]
        try:
            return super().event()
        finally:
            self.history = honest


def _register_mutated() -> str:
    from opacus.accountants.registry import _ACCOUNTANTS, register_accountant

    if ShiftCAccountant.name not in _ACCOUNTANTS:
        register_accountant(ShiftCAccountant.name, ShiftCAccountant)
    return ShiftCAccountant.name


@dataclasses.dataclass(frozen=True)
class OpacusRunConfig:
    """How the audited run trains (Opacus' own knobs) and how the canaries enter it."""

    epochs: int = 1
    noise_multiplier: float = 1.0
    max_grad_norm: float = 1.0
    delta: float = 1e-5
    poisson_sampling: bool = True
    neighbouring: str = "add-or-remove"  # or "replace-one"
    accountant: str = "pld"
    lr: float = 0.1
    #: Poisson rate; default the loader's batch_size / len(dataset); the normalization is the public
    #: int(len(user's dataset) * rate) (canaries excluded), except under expected-batch-normalization
    sample_rate: float | None = None
    #: the adversary's statistic: "sum" of each canary's released coordinates over steps,
    #: "epoch-lr" (shuffled batches: the per-epoch likelihood ratio), or "scale" (minus the released
    #: gradients' total squared norm: reads the normalization, for one canary per run)
    score: str = "sum"
    #: replace every real record's gradient by the excluded canary's (a homogeneous dataset, Chua et
    #: al. 2024's worst case for shuffling: D' then releases the same whichever batch holds what)
    background: bool = False


@dataclasses.dataclass(frozen=True)
class OpacusAudit(RunAudit):
    """Result of :func:`audit_opacus` (``as_dict`` gives the issue's JSON keys, then the run's)."""

    runs: int
    mutation: str | None
    accountant: str
    noise_multiplier: float
    steps: int
    wall_s: float
    #: the Opacus accountant's history of the run, (noise multiplier, sample rate, steps) entries
    history: tuple = ()


class _Canaried(torch.utils.data.Dataset):
    """The user's dataset plus canary rows; every item is (x, y, canary id), id -1 for real rows."""

    def __init__(self, base, present: np.ndarray) -> None:
        self.base = base
        self.ids = np.flatnonzero(present)
        x0, y0 = base[0][:2]
        self.x0, self.y0 = torch.zeros_like(torch.as_tensor(x0)), torch.as_tensor(y0)

    def __len__(self) -> int:
        return len(self.base) + len(self.ids)

    def __getitem__(self, i: int):
        if i < len(self.base):
            x, y = self.base[i][:2]
            return torch.as_tensor(x), torch.as_tensor(y), torch.tensor(-1)
        return self.x0, self.y0, torch.tensor(int(self.ids[i - len(self.base)]))


def _owned_coordinates(params: list[torch.Tensor], m: int, rng: np.random.Generator) -> list[np.ndarray | None]:
    """Per parameter tensor: the flat coordinate each canary owns there (distinct), or None when
    the tensor has fewer than m entries."""
    out = [rng.permutation(p.numel())[:m] if p.numel() >= m else None for p in params]
    if all(o is None for o in out):
        raise ValueError(f"canaries: {m} canaries need a parameter tensor with at least {m} entries")
    return out


class CanaryHook:
    """The two lines a user adds to their own Opacus loop (after ``backward``, after ``step``).

    ``inject(optimizer, ids)`` overwrites the per-sample gradients of the batch's canary rows
    (``ids >= 0``) by their Dirac gradients (sign +1, or the replace-one sign); ``observe(optimizer)``
    records the released noisy gradient summed over every canary's coordinates (``released``: one
    row per step); ``owned`` is how many coordinates (parameter tensors) each canary has.
    """

    def __init__(self, params: list[torch.Tensor], signs: np.ndarray, seed: int = 0) -> None:
        self.coords = _owned_coordinates(params, len(signs), np.random.default_rng(seed))
        self.signs = torch.as_tensor(signs, dtype=torch.float64)
        self.released: list[np.ndarray] = []
        self.energy: list[float] = []
        self.owned = sum(c is not None for c in self.coords)
        self._known = np.zeros(len(signs))

    def inject(self, optimizer, ids: torch.Tensor, background: bool = False) -> None:
        """Canary rows get their Dirac gradients; with ``background`` (one canary only) every real
        row gets the "-" canary's gradient, so the dataset is homogeneous."""
        rows = torch.nonzero(ids >= 0).flatten()
        real = torch.nonzero(ids < 0).flatten()
        if background and len(self.signs) != 1:
            raise ValueError("background: needs exactly one canary per run")
        grads = [p.grad_sample for p in optimizer.params]
        for gs, coords in zip(grads, self.coords):
            if gs is None:
                continue
            flat = gs.view(gs.shape[0], math.prod(gs.shape[1:]))  # rows may be 0 (empty Poisson batch)
            if rows.numel():
                flat[rows] = 0.0
                if coords is not None:
                    c = ids[rows].long()
                    flat[rows, torch.as_tensor(coords)[c]] = (_CANARY_GRADIENT * self.signs[c]).to(flat.dtype)
            if background and real.numel():
                flat[real] = 0.0
                if coords is not None:
                    flat[real, int(coords[0])] = -_CANARY_GRADIENT
        if background:  # every row of the batch is known to be a "-" copy, unless it is the "+" canary
            self._known = self._real_part(optimizer, grads, ids < 0) * len(ids) / max(len(real), 1)
            if not real.numel():
                self._known = -np.full(1, math.sqrt(self.owned) * optimizer.max_grad_norm) * len(ids)
        else:
            self._known = self._real_part(optimizer, grads, ids < 0)

    def _real_part(self, optimizer, grads, real: torch.Tensor) -> np.ndarray:
        """The other records' clipped contribution on each canary's coordinates, with the
        optimizer's own clipping rule (known to the white-box adversary, who knows the rest of the
        data: with full or Poisson batches the canary's privacy does not rest on it)."""
        out = np.zeros(len(self.signs))
        if any(g is None for g in grads) or not real.any():
            return out
        flat = [g.reshape(g.shape[0], math.prod(g.shape[1:]))[real].double() for g in grads]
        norms = torch.stack([f.norm(dim=1) for f in flat], dim=1)
        per_layer = hasattr(optimizer, "max_grad_norms")
        if per_layer:
            factors = (torch.tensor(optimizer.max_grad_norms, dtype=torch.float64) / (norms + 1e-6)).clamp(max=1.0)
        else:
            factors = (optimizer.max_grad_norm / (norms.norm(dim=1, keepdim=True) + 1e-6)).clamp(max=1.0)
            factors = factors.expand_as(norms)
        for k, (f, coords) in enumerate(zip(flat, self.coords)):
            if coords is not None:
                out += (factors[:, k:k + 1] * f[:, torch.as_tensor(coords)]).sum(dim=0).numpy()
        return out

    def observe(self, optimizer, subtract: list[torch.Tensor] | None = None) -> None:
        total, energy = -self._known / (optimizer.expected_batch_size * optimizer.accumulated_iterations), 0.0
        for k, (p, coords) in enumerate(zip(optimizer.params, self.coords)):
            if p.grad is None:
                continue
            g = p.grad.detach().reshape(-1).double()
            if subtract is not None:
                g = g - subtract[k].reshape(-1).double()
            energy += float(g @ g)
            if coords is not None:
                total += g[torch.as_tensor(coords)].numpy()
        self.released.append(total)
        self.energy.append(energy)


def _public_noise(optimizer, step: int) -> list[torch.Tensor]:
    """The noise a public-seed optimizer adds at ``step``, regenerated by the adversary."""
    gen = torch.Generator().manual_seed(PUBLIC_SEED + step)
    std = optimizer.noise_multiplier * optimizer.max_grad_norm
    scale = optimizer.expected_batch_size * optimizer.accumulated_iterations
    return [torch.normal(0.0, std, p.summed_grad.shape if p.summed_grad is not None else p.shape,
                         generator=gen) / scale for p in optimizer.params]


def _scores(released: np.ndarray, steps_per_epoch: int, epoch_lr: bool, shift: float, std: float,
            background: bool) -> np.ndarray:
    """Per canary: the sum over steps, or (shuffled batches) the sum over epochs of the
    log-likelihood ratio of "+ in one batch of the epoch" against "- in one batch" (released mean
    +-``shift``, noise ``std``), or with a homogeneous ``background`` against "no batch moves"
    (the "-" canary is a copy of every other record: the released mean is +2 ``shift`` or 0)."""
    if not epoch_lr:
        return released.sum(axis=0)
    from scipy.special import logsumexp

    t = released.shape[0] // steps_per_epoch * steps_per_epoch
    a = shift / std ** 2 if std > 0 else 1e6
    per = released[:t].reshape(-1, steps_per_epoch, released.shape[1])
    if background:
        return logsumexp(2 * a * per, axis=1).sum(axis=0)
    return (logsumexp(a * per, axis=1) - logsumexp(-a * per, axis=1)).sum(axis=0)


def _one_run(model: nn.Module, base, batch_size: int, loss_fn, present: np.ndarray, signs: np.ndarray,
             config: OpacusRunConfig, mutation: str | None, seed: int):
    from opacus import PrivacyEngine
    from opacus.data_loader import DPDataLoader

    torch.manual_seed(seed)
    model = copy.deepcopy(model)
    data = _Canaried(base, present)
    rate = config.sample_rate or batch_size / len(base)
    poisson = config.poisson_sampling
    accountant = _accountant_name(config, mutation)
    engine = PrivacyEngine(accountant=accountant)
    if poisson:  # the public rate, not 1 / len(loader) of the private dataset
        loader = DPDataLoader(data, sample_rate=rate, generator=torch.Generator().manual_seed(seed + 1))
    else:
        loader = torch.utils.data.DataLoader(data, batch_size=batch_size, shuffle=True,
                                             generator=torch.Generator().manual_seed(seed + 1))
    per_layer = mutation == "per-layer-clipping"
    params = [p for p in model.parameters() if p.requires_grad]
    clip = [config.max_grad_norm] * len(params) if per_layer else config.max_grad_norm
    gen = torch.Generator().manual_seed(seed + 2)
    approximate = mutation == "shuffled-accounted-as-poisson"  # the shipped bug, refused outside its audit
    with silodp_opacus.allow_poisson_approximation() if approximate else contextlib.nullcontext():
        module, optimizer, loader = engine.make_private(
            module=model, optimizer=torch.optim.SGD(params, lr=config.lr), data_loader=loader,
            noise_multiplier=config.noise_multiplier, max_grad_norm=clip, poisson_sampling=False,
            clipping="per_layer" if per_layer else "flat", noise_generator=gen)
    if per_layer:  # the shipped bug: the noise reads the per-tensor C as the global norm
        optimizer.max_grad_norm = config.max_grad_norm
    if mutation == "expected-batch-normalization":  # Opacus' int(len(dataset) * sample_rate)
        optimizer.expected_batch_size = int(len(data) * rate)
    else:  # a public normalization, the same for every neighbour
        optimizer.expected_batch_size = max(1, int(len(base) * rate))
    if poisson:  # account the public rate the loader really uses
        optimizer.step_hook = engine.accountant.get_optimizer_hook_fn(sample_rate=rate)
    hook = CanaryHook(optimizer.params, signs, seed)
    steps = 0
    for _ in range(config.epochs):
        for x, y, ids in loader:
            optimizer.zero_grad()
            if mutation == "public-seed-noise":
                gen.manual_seed(PUBLIC_SEED + steps)
            if len(x):
                loss_fn(module(x), y).backward()
            else:  # an empty Poisson batch: Opacus still releases noise
                for p in optimizer.params:
                    p.grad_sample = torch.zeros((0, *p.shape), dtype=p.dtype)
            hook.inject(optimizer, ids, config.background)
            known = _public_noise(optimizer, steps) if mutation == "public-seed-noise" else None
            optimizer.step()
            hook.observe(optimizer, known)
            steps += 1
    # a canary's released mean on its k coordinates sums to sqrt(k) C (global clip), the noise to sqrt(k) z C
    shift = math.sqrt(hook.owned) * config.max_grad_norm / optimizer.expected_batch_size
    if config.score == "scale":
        scores = np.full(len(signs), -float(np.sum(hook.energy)))
    else:
        scores = _scores(np.asarray(hook.released), len(loader), config.score == "epoch-lr", shift,
                         shift * config.noise_multiplier, config.background)
    return scores, engine.accountant, steps, accountant


def _accountant_name(config: OpacusRunConfig, mutation: str | None) -> str:
    rel = ev.REPLACE_ONE if config.neighbouring == "replace-one" else ev.ADD_OR_REMOVE_ONE
    if mutation == "replace-one-shift-c":
        if rel != ev.REPLACE_ONE:
            raise ValueError("mutation: replace-one-shift-c needs neighbouring='replace-one'")
        return _register_mutated()
    if mutation == "shuffled-accounted-as-poisson" and config.poisson_sampling:
        raise ValueError("mutation: shuffled-accounted-as-poisson needs poisson_sampling=False")
    if not config.poisson_sampling and mutation != "shuffled-accounted-as-poisson":
        return silodp_opacus.opacus_accountant(config.accountant, "shuffled", ev.REPLACE_ONE)
    return silodp_opacus.opacus_accountant(config.accountant, "poisson", rel)


def audit_opacus(model: nn.Module, data_loader, loss_fn: Callable | None = None, *, canaries: int = 1000,
                 runs: int = 1, config: OpacusRunConfig = OpacusRunConfig(), mutation: str | None = None,
                 estimator: str = "steinke", alpha: float = 0.05, seed: int = 0) -> OpacusAudit:
    """Audit the Opacus run of ``model`` on ``data_loader``'s dataset (its ``batch_size``) with
    ``canaries`` gradient canaries per run, ``runs`` independent runs: the claim is the Opacus
    accountant's epsilon at ``config.delta``; ``verdict`` is ``violated`` when ``estimator``'s
    (1 - alpha) lower bound exceeds it."""
    if mutation is not None and mutation not in OPACUS_MUTATIONS:
        raise ValueError(f"mutation: must be one of {OPACUS_MUTATIONS}, got {mutation!r}")
    if estimator not in (*ONE_RUN_ESTIMATORS, "clopper-pearson", "gdp"):
        raise ValueError(f"estimator: must be one of {sorted((*ONE_RUN_ESTIMATORS, 'clopper-pearson', 'gdp'))}")
    if int(canaries) < 1 or int(runs) < 1 or canaries * runs < 2:
        raise ValueError(f"canaries, runs: need >= 1 each and >= 2 canaries in all, got {canaries}, {runs}")
    if config.score not in ("sum", "epoch-lr", "scale"):
        raise ValueError(f"score: 'sum', 'epoch-lr' or 'scale', got {config.score!r}")
    if config.neighbouring not in ("add-or-remove", "replace-one"):
        raise ValueError(f"neighbouring: 'add-or-remove' or 'replace-one', got {config.neighbouring!r}")
    if not config.poisson_sampling and config.neighbouring != "replace-one":
        raise ValueError("neighbouring: shuffled batches are certified under replace-one only")
    loss_fn = loss_fn or nn.functional.cross_entropy
    replace = config.neighbouring == "replace-one"
    rng = np.random.default_rng(seed)
    started = time.perf_counter()
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small per-step tensors: one thread is fastest, and leaves the other cores free
    try:
        with warnings.catch_warnings():  # Opacus' advice on secure_mode, empty batches, hooks: not ours to print
            for text in ("Secure RNG", "secure_mode", "empty", "Full backward hook", "Optimal order"):
                warnings.filterwarnings("ignore", message=f".*{text}.*")
            return _audit(model, data_loader, loss_fn, canaries, runs, config, mutation, estimator, alpha, rng,
                          seed, replace, started)
    finally:
        torch.set_num_threads(threads)


def _audit(model, data_loader, loss_fn, canaries, runs, config, mutation, estimator, alpha, rng, seed, replace,
           started) -> OpacusAudit:
    all_scores, all_inc, histories = [], [], set()
    for run in range(runs):
        inc = rng.random(canaries) < 0.5
        present = np.ones(canaries, bool) if replace else inc
        signs = np.where(inc, 1.0, -1.0) if replace else np.ones(canaries)
        scores, ledger, steps, accountant = _one_run(
            model, data_loader.dataset, data_loader.batch_size, loss_fn, present, signs, config, mutation,
            seed + 7919 * run)
        all_scores.append(scores)
        all_inc.append(inc)
        histories.add(tuple(ledger.history))
    if len(histories) != 1:  # every run releases the same steps, so one claim covers them all
        raise RuntimeError(f"runs: the runs were accounted differently ({sorted(histories)})")
    claimed = float(ledger.get_epsilon(config.delta))
    canary = CanaryScores(np.concatenate(all_scores), np.concatenate(all_inc))
    return OpacusAudit(**judge_run(canary, claimed, config.delta, alpha, estimator), runs=runs, mutation=mutation,
                       accountant=accountant, noise_multiplier=config.noise_multiplier, steps=steps,
                       wall_s=time.perf_counter() - started, history=tuple(ledger.history))


#: mutations that switch only the accountant: the training is the correct run's, the claim is not
ACCOUNTANT_ONLY = ("replace-one-shift-c", "shuffled-accounted-as-poisson")


def counterpart_of(audit: OpacusAudit, config: OpacusRunConfig) -> OpacusAudit:
    """The same runs judged against the correct accountant's claim, for a mutation of
    :data:`ACCOUNTANT_ONLY` (the released gradients are those of the correct run, so the audit's
    lower bounds stand; only the claim and the verdict change)."""
    from opacus.accountants.registry import create_accountant

    if audit.mutation not in ACCOUNTANT_ONLY:
        raise ValueError(f"audit: counterpart_of needs a mutation in {ACCOUNTANT_ONLY}, got {audit.mutation!r}")
    name = _accountant_name(config, None)
    ledger = create_accountant(name)
    ledger.history = list(audit.history)
    claimed = float(ledger.get_epsilon(config.delta))
    verdict = "violated" if audit.epsilon_lower.get(audit.estimator, 0.0) > claimed else "consistent"
    return dataclasses.replace(audit, claimed_epsilon=claimed, verdict=verdict, mutation=None, accountant=name)


__all__ = ["ACCOUNTANT_ONLY", "CanaryHook", "OPACUS_MUTATIONS", "counterpart_of", "OpacusAudit", "OpacusRunConfig", "ShiftCAccountant", "audit_opacus"]
