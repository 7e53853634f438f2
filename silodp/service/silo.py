"""The silo side of a Flower run: its records, its plan for a proposal and its releases (paper
Algorithm 6 with replacement = ISRL-DP MB-SGD, Algorithm 3 = ISRL-DP FedProx-SPIDER).

The code that computes a release runs in the silo's own process: the silo service
(:mod:`silodp.service.app`), or, where the operator accepts the app bundle as trusted, the
in-process ClientApp (:class:`silodp.service.core.Silo` in both). The noise comes from the very
algorithm class ``silodp run`` uses (its plan's :meth:`~silodp.algorithms.plan.Plan.resolve`:
:func:`silodp.algorithms.privacy.calibrate_algorithm` on its declared releases), calibrated by
the silo for its own records' count and its own delta, never from noise the server sends.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
from pathlib import Path
from typing import cast

import numpy as np
import torch

from silodp.accounting.releases import BatchSampling, GaussianRelease
from silodp.algorithms import Federation, Problem
from silodp.algorithms.data import FederatedData
from silodp.algorithms.federation import BatchSampler
from silodp.algorithms.grads import clipped_diff_sum, clipped_grad_sum
from silodp.algorithms.release import clip_update, gaussian_release, noise_std
from silodp.experiments.datasets import load_cached, model_for
from silodp.service.plan import UPDATE, Settings, silo_noise, update_calibration, update_release

@dataclasses.dataclass
class SiloPlan:
    """What one silo releases over a run and the noise it adds, computed by the silo itself from
    its own records' count, its own delta and the run's proposed settings (never from noise the
    server sends): the algorithm's declared releases (its plan's ``run_declaration``, the same as
    ``silodp run`` certifies) at the calibration its plan's ``resolve`` finds for this silo."""

    settings: Settings
    problem: Problem
    fed: Federation
    algorithm: object  # the registered algorithm; None for the service's own UPDATE
    sigmas: dict
    releases: list

    def std(self, kind: str, w: torch.Tensor, w_prev: torch.Tensor | None) -> float:
        """The noise of a ``kind`` message, as the algorithm class declares it (its ``silo_noise``:
        a noise key, e.g. the anchor's sigma, or its method of the step, Alg 3 line 10's
        difference noise)."""
        key = silo_noise(self.settings.algorithm).get(kind)
        if key is None:
            raise ValueError(f"kind: {self.settings.algorithm} sends no {kind!r} messages")
        if key in self.sigmas:
            return float(self.sigmas[key])
        if w_prev is None:
            raise ValueError(f"kind: a {kind!r} message needs w_prev")
        return float(getattr(self.algorithm, key)(self.sigmas, float((w - w_prev).norm())))


@dataclasses.dataclass(frozen=True)
class SiloRecords:
    """One silo's training records and what a model needs to know of its dataset: all a silo
    needs to train, saved on its own disk (:meth:`save`) so that a train message reads one small
    file instead of loading the dataset (sklearn, pandas: seconds per message process)."""

    fed: Federation
    name: str
    loss: str
    input_shape: tuple[int, ...]
    num_outputs: int

    @classmethod
    def load(cls, settings: Settings, partition_id: int) -> "SiloRecords":
        """Silo ``partition_id``'s records of ``settings``' dataset and seed (the split and partition)."""
        return cls.from_dataset(settings.dataset, partition_id, settings.seed)

    @classmethod
    def from_dataset(cls, dataset: str, partition_id: int, seed: int) -> "SiloRecords":
        """Silo ``partition_id``'s training records of ``dataset`` split and partitioned with ``seed``."""
        data = load_cached(dataset, seed, 0.2, 0.2)
        return cls(silo_data(data, partition_id), data.name, data.loss, tuple(data.input_shape), data.num_outputs)

    def save(self, path: Path) -> None:
        """Write to ``path`` atomically (a temporary file renamed over it)."""
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        n = int(self.fed.counts[0])
        with tmp.open("wb") as out:
            meta = {"name": self.name, "loss": self.loss, "input_shape": self.input_shape,
                    "num_outputs": self.num_outputs}
            np.savez(out, x=self.fed.x[0, :n].numpy(), y=self.fed.y[0, :n].numpy(), meta=np.array(json.dumps(meta)))
        os.replace(tmp, path)

    @classmethod
    def beside(cls, ledger: str | Path, settings: Settings, partition_id: int) -> "SiloRecords":
        """The silo's records from its disk, beside its ``ledger`` file: saved there by the first
        call (which loads the dataset), read back by every later one (which does not)."""
        ledger = Path(ledger)
        path = ledger.with_name(f"{ledger.name}.records-{settings.dataset}-seed{settings.seed}-silo{partition_id}.npz")
        if path.is_file():
            return cls.read(path)
        records = cls.load(settings, partition_id)
        records.save(path)
        return records

    @classmethod
    def read(cls, path: Path) -> "SiloRecords":
        with np.load(path) as saved:
            meta = json.loads(str(saved["meta"]))
            fed = Federation.from_silos([torch.from_numpy(saved["x"])], [torch.from_numpy(saved["y"])])
        return cls(fed, meta["name"], meta["loss"], tuple(meta["input_shape"]), int(meta["num_outputs"]))


def silo_plan(settings: Settings, partition_id: int, delta: float, sigmas: dict | None = None,
              records: SiloRecords | None = None) -> SiloPlan:
    """Silo ``partition_id``'s :class:`SiloPlan` of ``settings`` at the silo's ``delta``, with the
    calibration ``sigmas`` and the silo's ``records`` when given (the client caches both on the
    silo's disk)."""
    own = dataclasses.replace(settings, delta=delta)
    records = records or SiloRecords.load(own, partition_id)
    # SiloRecords has what model_for reads of a dataset (name, input_shape, num_outputs)
    problem = Problem(model_for(cast(FederatedData, records), own.model), records.loss, clip=own.clip)
    fed = records.fed
    if own.algorithm == UPDATE:
        if sigmas is None:
            sigmas = {"sigma": update_std(own)}
        return SiloPlan(own, problem, fed, None, sigmas, [update_release(sigmas["sigma"] / own.clip, own.rounds)])
    algo = own.algorithm_object()

    sigmas = algo.plan.resolve(problem, fed)[0] if sigmas is None else sigmas
    return SiloPlan(own, problem, fed, algo, sigmas, algo.plan.run_declaration(problem, fed, sigmas, None))


def update_std(settings: Settings) -> float:
    """The noise std of :data:`~silodp.service.plan.UPDATE`'s releases: z C for the calibrated
    noise multiplier z (:func:`~silodp.service.plan.update_calibration` at the silo's delta),
    rounded up until ``std / C >= z`` (the ledger charges ``std / C``)."""
    z = update_calibration(settings.rounds, settings.epsilon, settings.delta, settings.accountant).noise_multiplier
    return noise_std(z, settings.clip)


def silo_data(data: FederatedData, partition_id: int) -> Federation:
    """Silo ``partition_id``'s training records as a one-silo federation."""
    fed = data.train
    if not 0 <= partition_id < fed.num_silos:
        raise ValueError(f"partition_id must lie in [0, {fed.num_silos}), got {partition_id}")
    n = int(fed.counts[partition_id])
    return Federation.from_silos([fed.x[partition_id, :n]], [fed.y[partition_id, :n]])


def diff_std(algorithm, sigmas: dict, step: float) -> float:
    """Alg 3 line 10's noise, min(sigma2 ||w_r - w_{r-1}||, sigma2_hat), from the algorithm itself."""
    return algorithm.diff_noise(sigmas, step)


def silo_release(problem: Problem, kind: str, w: torch.Tensor, w_prev: torch.Tensor | None, std: float,
                 batch_size: int, dataset_size: int) -> tuple[float, GaussianRelease]:
    """The contribution bound of a ``kind`` message at ``w`` (and ``w_prev``) and the release it
    is with noise ``std``: a function of the server's model and the silo's noise, never of its
    records, so the silo can account a message before it computes it.

    ``kind="grad"``: mean of K clipped per-record gradients (Alg 6 / Alg 3 line 7): bound L / K.
    ``kind="diff"``: mean of K per-record differences g(w) - g(w_prev), each clipped to
    min(2L, beta ||w - w_prev||) (Alg 3 lines 9-10; 2L when the problem has no beta): that over K.
    ``kind="update"``: the local model update clipped to L (:func:`silo_update`): one
    contribution of norm <= L (:func:`~silodp.service.plan.update_release`).
    """
    clip = _clip(problem)
    if kind == "update":
        return clip, update_release(std / clip if clip > 0 else math.inf)
    if kind == "grad":
        bound = clip
    elif kind == "diff":
        bound = 2 * clip
        if w_prev is None:
            raise ValueError("w_prev: a 'diff' message needs the server's previous model")
        if problem.beta is not None:
            bound = min(bound, problem.beta * float((w - w_prev).norm()))
    else:
        raise ValueError(f"kind must be 'grad', 'diff' or 'update', got {kind!r}")
    z = std / (bound / batch_size) if bound > 0 else math.inf
    return bound, GaussianRelease(kind, 1, z, BatchSampling.WITH_REPLACEMENT, batch_size, dataset_size)


def _clip(problem: Problem) -> float:
    """The silo's clip norm L (every silo problem clips)."""
    if problem.clip is None:
        raise ValueError("clip: a silo's problem must clip its contributions")
    return float(problem.clip)


def silo_message(problem: Problem, fed: Federation, kind: str, w: torch.Tensor, w_prev: torch.Tensor | None,
                 std: float, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, GaussianRelease]:
    """One silo's noisy message (see :func:`silo_release`) and the release it is."""
    bound, release = silo_release(problem, kind, w, w_prev, std, batch_size, fed.min_size)
    idx = BatchSampler(fed.counts, batch_size, True, generator).next()
    x, y = fed.gather(idx)
    weights = torch.full(idx.shape, 1.0 / batch_size, dtype=fed.x.dtype)
    clip = _clip(problem)
    if kind == "grad":
        term = clipped_grad_sum(problem, w, x, y, weights, clip, "ghost")[0]
    elif w_prev is not None:  # the simulator's kernel: differences clipped to the bound, no [K, d] tensor
        term = clipped_diff_sum(problem, w, w_prev, x, y, weights, clip, bound, "ghost")[0]
    else:
        raise ValueError("w_prev: a 'diff' message needs the server's previous model")
    # the one release primitive: noise added to the clipped term in float64; a non-finite result
    # raises its Refusal and nothing is released
    return gaussian_release(term, std, generator), release


def silo_update(problem: Problem, fed: Federation, w: torch.Tensor, local_steps: int, step_size: float, std: float,
                generator: torch.Generator | None) -> tuple[torch.Tensor, GaussianRelease]:
    """:data:`~silodp.service.plan.UPDATE`'s message: ``local_steps`` full-batch gradient steps
    of size ``step_size`` on the silo's records from the server's ``w``, the update ``v - w``
    clipped to L (:func:`~silodp.algorithms.release.clip_update`: a non-finite update is the zero
    update) and released as ``w + (clip(v - w) + N(0, std^2 I))`` through the one release
    primitive (:func:`~silodp.algorithms.release.gaussian_release`: the noise meets the clipped
    update in float64 before the server's ``w``). Replacing any of the silo's records moves the
    centre by at most 2L (paper Def. 4 at silo level)."""
    _, release = silo_release(problem, "update", w, None, std, 1, 1)
    v = w.detach().clone()
    for _ in range(int(local_steps)):
        v = v - float(step_size) * problem.full_gradient(v, fed)
    with torch.no_grad():
        clipped = clip_update((v.to(torch.float64) - w.to(torch.float64)), _clip(problem))
        return gaussian_release(clipped, std, generator, w.to(torch.float64)), release
