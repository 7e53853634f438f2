"""Hyperparameter selection on the validation split (never on the test split).

For every *setting* (experiment, algorithm, epsilon, calibration) the hyperparameters (step size,
clip, q, local steps, ...) with the smallest mean validation error over the trials are chosen;
the reported number is the mean (and standard deviation) of the *test* error of those runs over
the trials. Only hyperparameter configurations with every trial of the setting finished compete
(a configuration with a failed trial could otherwise win on fewer, luckier trials). Ties go to the
configuration that sorts first, so selection is deterministic. Non-finite or missing validation
errors count as the worst possible.

The authors' code (App H) picked hyperparameters by *test* accuracy, which biases the reported
errors downwards; silodp's numbers are therefore not expected to be as low.
"""

from __future__ import annotations

import collections
import math
import statistics
from dataclasses import dataclass, field

from .store import RunRecord



@dataclass(frozen=True)
class Selection:
    """The chosen hyperparameters of one setting and what they achieve."""

    experiment: dict
    algorithm: str
    epsilon: float | None
    calibration: str
    hyperparameters: dict
    val_error: float
    test_errors: tuple[float, ...]
    certified_epsilon: float | None
    candidates: int
    trials: int
    sigmas: dict = field(default_factory=dict)
    output: str = "algorithm"

    @property
    def test_mean(self) -> float:
        return statistics.fmean(self.test_errors)

    @property
    def test_std(self) -> float:
        """Sample standard deviation over trials (0 for one trial)."""
        return statistics.stdev(self.test_errors) if len(self.test_errors) > 1 else 0.0


OUTPUTS = ("algorithm", "last")


def _metric(record: RunRecord, split: str, worst: float, output: str = "algorithm") -> float:
    """Error rate on ``split`` ("val" / "test") of the algorithm's output (or of the last iterate),
    or the loss for problems without an error rate."""
    if output == "last":
        v = record.metrics.get(f"last_{split}_error", record.metrics.get(f"last_{split}_loss"))
    else:
        v = getattr(record, f"{split}_error")
        if v is None:
            v = record.metrics.get(f"{split}_loss")
    return v if v is not None and math.isfinite(v) else worst


def select(records: list[RunRecord], output: str = "algorithm") -> list[Selection]:
    """One :class:`Selection` per setting among the successful ``records``, selected by the mean
    validation error (validation loss for regression problems). ``output``: "algorithm" (its own
    output rule, e.g. SPIDER's uniformly random iterate) or "last" (the last iterate)."""
    if output not in OUTPUTS:
        raise ValueError(f"output: must be one of {OUTPUTS}, got {output!r}")
    settings = collections.defaultdict(lambda: collections.defaultdict(list))
    for r in records:
        if r.status == "ok":
            settings[r.config.setting_key()][r.config.hyperparameter_key()].append(r)
    out = []
    for key in sorted(settings, key=repr):
        candidates = settings[key]
        full = max(len(runs) for runs in candidates.values())
        complete = {hp: runs for hp, runs in candidates.items() if len(runs) == full}
        scored = sorted((statistics.fmean(_metric(r, "val", math.inf, output) for r in runs), repr(hp), hp)
                        for hp, runs in complete.items())
        score, _, best = scored[0]
        runs = sorted(complete[best], key=lambda r: r.config.trial)
        tests = tuple(_metric(r, "test", math.nan, output) for r in runs)
        certified = [r.certified_epsilon for r in runs if r.certified_epsilon is not None]
        cfg = runs[0].config
        out.append(Selection(cfg.experiment(), cfg.algorithm, cfg.epsilon, cfg.calibration, cfg.hyperparameters(),
                             score, tests, max(certified) if certified else None, len(candidates), full,
                             runs[0].sigmas or {}, output))
    return out
