"""What the server and the silos of the example share: the run settings, the problem and the
noise the server expects (paper Algorithm 6 with replacement = ISRL-DP MB-SGD, Algorithm 3 =
ISRL-DP FedProx-SPIDER). The code that computes a silo's release is silodp's
(:mod:`silodp.service.silo`, re-exported here), not the app bundle's: a silo runs it in its own
silo service, or in process where its operator trusts the app.

The noise comes from the very algorithm class ``silodp run`` uses
(its plan's :meth:`~silodp.algorithms.plan.Plan.resolve`: :func:`silodp.algorithms.privacy.calibrate_algorithm`
on its declared releases), so a Flower run and a simulator run of the same settings release the
same messages with the same noise and certify the same epsilon. Each silo still keeps its own
ledger (:mod:`silodp.integrations.flower_silo`) of what it really sent, and refuses a request
that would take it past its own budget: the server is not trusted with the accounting.
"""

from __future__ import annotations

import dataclasses
import functools

from silodp.algorithms import Problem
from silodp.algorithms.data import FederatedData
from silodp.experiments.datasets import load_cached, model_for
from silodp.service.silo import (  # noqa: F401 (re-exported: the silo's code is silodp's)
    SiloPlan,
    SiloRecords,
    diff_std,
    silo_data,
    silo_message,
    silo_plan,
    silo_release,
)
from silodp_flower.settings import ALGORITHMS, Settings  # noqa: F401 (re-exported)


@dataclasses.dataclass
class Setup:
    data: FederatedData
    problem: Problem
    algorithm: object
    sigmas: dict
    epsilon: float  #: the calibration's certificate (under the calibration's accountant)

    @functools.cached_property
    def certified(self) -> float:
        """silodp's tightest certificate of these noises (:func:`silodp.algorithms.privacy.certify`,
        as every silo's ledger certifies): what the smallest silo reports."""
        from silodp.algorithms.privacy import certify

        cfg = self.algorithm.plan.transcript_config(self.problem, self.data.train)
        return certify(self.algorithm, cfg, self.sigmas, self.algorithm.delta)[0]


@functools.lru_cache(maxsize=4)
def setup(settings: Settings) -> Setup:
    """Data, problem and calibrated noise, exactly as ``silodp run`` prepares them."""
    data = load_cached(settings.dataset, settings.seed, 0.2, 0.2)
    problem = Problem(model_for(data, settings.model), data.loss, clip=settings.clip)
    algo = settings.algorithm_object()
    sigmas, epsilon, *_ = algo.plan.resolve(problem, data.train)
    return Setup(data, problem, algo, sigmas, epsilon)
