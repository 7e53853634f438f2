"""What the server and the silos of the example share: the run settings, each silo's data, the
problem, the noise, and each silo's message (paper Algorithm 6 with replacement = ISRL-DP MB-SGD,
Algorithm 3 = ISRL-DP FedProx-SPIDER).

The noise comes from the very algorithm class ``silodp run`` uses
(:meth:`FederatedAlgorithm.resolve_noise`: :func:`silodp.algorithms.privacy.calibrate_algorithm`
on its declared releases), so a Flower run and a simulator run of the same settings release the
same messages with the same noise and certify the same epsilon. Each silo still keeps its own
ledger (:class:`silodp.integrations.flower.SiloLedger`) of what it really sent, and refuses a
request that would take it past its own budget: the server is not trusted with the accounting.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import torch

from silodp.accounting.releases import BatchSampling, GaussianRelease
from silodp.algorithms import Federation, Problem, get_algorithm
from silodp.algorithms.data import FederatedData
from silodp.algorithms.federation import BatchSampler
from silodp.algorithms.grads import clip_rows, clipped_grad_sum, clipped_per_sample
from silodp.experiments.datasets import load_cached, model_for

ALGORITHMS = ("isrl-mb-sgd", "isrl-spider")


@dataclasses.dataclass(frozen=True)
class Settings:
    """The ``[tool.flwr.app.config]`` of ``pyproject.toml`` (Flower spells keys with dashes)."""

    algorithm: str = "isrl-mb-sgd"
    dataset: str = "wbcd"
    model: str = "linear"
    epsilon: float = 3.0
    delta: float = 1e-4
    rounds: int = 25
    batch_size: int = 32
    q: int = 5
    step_size: float = 0.5
    clip: float = 1.0
    seed: int = 0
    #: silodp accountant of the calibration and of every silo's ledger ("": the tightest
    #: candidate, as `silodp run`; "rdp" is much faster for with-replacement batches)
    accountant: str = ""

    def __post_init__(self) -> None:
        if self.algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm must be one of {ALGORITHMS}, got {self.algorithm!r}")

    @classmethod
    def from_run_config(cls, config: dict) -> "Settings":
        fields = {f.name: f for f in dataclasses.fields(cls)}
        out = {}
        for key, value in config.items():
            name = key.replace("-", "_")
            if name in fields:
                out[name] = type(getattr(cls, name))(value)
        return cls(**out)

    def algorithm_object(self):
        extra = {"q": self.q} if self.algorithm == "isrl-spider" else {}
        return get_algorithm(self.algorithm, rounds=self.rounds, batch_size=self.batch_size,
                             step_size=self.step_size, epsilon=self.epsilon, delta=self.delta,
                             accountant=self.accountant or None, **extra)


@dataclasses.dataclass
class Setup:
    data: FederatedData
    problem: Problem
    algorithm: object
    sigmas: dict
    epsilon: float


@functools.lru_cache(maxsize=4)
def setup(settings: Settings) -> Setup:
    """Data, problem and calibrated noise, exactly as ``silodp run`` prepares them."""
    data = load_cached(settings.dataset, settings.seed, 0.2, 0.2)
    problem = Problem(model_for(data, settings.model), data.loss, clip=settings.clip)
    algo = settings.algorithm_object()
    sigmas, epsilon, _, _ = algo.resolve_noise(problem, data.train)
    return Setup(data, problem, algo, sigmas, epsilon)


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


def silo_message(problem: Problem, fed: Federation, kind: str, w: torch.Tensor, w_prev: torch.Tensor | None,
                 std: float, batch_size: int, generator: torch.Generator) -> tuple[torch.Tensor, GaussianRelease]:
    """One silo's noisy message and the release it is.

    ``kind="grad"``: mean of K clipped per-record gradients at ``w`` on a with-replacement batch
    plus N(0, std^2 I) (Alg 6 / Alg 3 line 7): contribution bound L / K. ``kind="diff"``: mean of
    K per-record differences g(w) - g(w_prev), each clipped to min(2L, beta ||w - w_prev||)
    (Alg 3 lines 9-10; 2L when the problem has no beta), plus noise: contribution bound that over K.
    """
    idx = BatchSampler(fed.counts, batch_size, True, generator).next()
    x, y = fed.gather(idx)
    weights = torch.full(idx.shape, 1.0 / batch_size, dtype=fed.x.dtype)
    clip = problem.clip
    if kind == "grad":
        term, bound = clipped_grad_sum(problem, w, x, y, weights, clip, "ghost")[0], clip
    elif kind == "diff":
        bound = 2 * clip
        if problem.beta is not None:
            bound = min(bound, problem.beta * float((w - w_prev).norm()))
        per = clip_rows(clipped_per_sample(problem, w, x, y, clip) - clipped_per_sample(problem, w_prev, x, y, clip),
                        bound)
        term = torch.einsum("nk,nkd->nd", weights, per)[0]
    else:
        raise ValueError(f"kind must be 'grad' or 'diff', got {kind!r}")
    noise = torch.randn(term.shape, generator=generator, dtype=term.dtype) * std
    z = std / (bound / batch_size) if bound > 0 else math.inf
    return term + noise, GaussianRelease(kind, 1, z, BatchSampling.WITH_REPLACEMENT, batch_size, fed.min_size)
