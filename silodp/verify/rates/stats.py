"""Bootstrap confidence intervals and log-log slope fits for rate experiments.

Each grid point ``x_p`` has independent trial values ``samples[p]`` (excess risk, squared
gradient-mapping norm, ...). The estimate of ``E[value]`` at ``x_p`` is the trial mean; its
confidence interval is the percentile bootstrap over trials. The rate is the ordinary
least-squares slope of ``log mean`` on ``log x``; its confidence interval resamples the trials of
every point independently (a nonparametric bootstrap of the whole experiment) and refits, all
replicates at once (one ``[reps, P]`` matrix, no Python loop over replicates).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np


def _check_confidence(confidence: float) -> float:
    if not 0 < float(confidence) < 1:
        raise ValueError(f"confidence: must lie in (0, 1), got {confidence}")
    return float(confidence)


def _as_samples(samples: Sequence) -> list[np.ndarray]:
    out = [np.asarray(s, dtype=float).ravel() for s in samples]
    if not out or any(s.size < 2 for s in out):
        raise ValueError("samples: need at least two trial values at every point")
    if any(not np.isfinite(s).all() for s in out):
        raise ValueError("samples: trial values must be finite")
    return out


def bootstrap_means(samples: Sequence, reps: int = 2000, seed: int = 0) -> np.ndarray:
    """``[reps, P]`` bootstrap replicates of each point's trial mean (trials resampled per point)."""
    if int(reps) < 10:
        raise ValueError(f"reps: must be >= 10, got {reps}")
    rng = np.random.default_rng(seed)
    cols = [s[rng.integers(0, s.size, size=(int(reps), s.size))].mean(1) for s in _as_samples(samples)]
    return np.stack(cols, axis=1)


def percentile_interval(replicates: np.ndarray, confidence: float = 0.95) -> tuple[np.ndarray, np.ndarray]:
    """Equal-tailed percentile interval of ``replicates`` along axis 0."""
    tail = 50 * (1 - _check_confidence(confidence))
    return np.percentile(replicates, tail, axis=0), np.percentile(replicates, 100 - tail, axis=0)


def ols_loglog(x: np.ndarray, means: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(slope, intercept)`` of ``log means`` on ``log x`` (means ``[..., P]``, broadcast)."""
    lx = np.log(np.asarray(x, dtype=float))
    means = np.asarray(means, dtype=float)
    if (means <= 0).any():
        raise ValueError("means: a log-log fit needs positive means")
    ly = np.log(means)
    cx = lx - lx.mean()
    slope = (ly * cx).sum(-1) / (cx * cx).sum()
    return slope, ly.mean(-1) - slope * lx.mean()


@dataclass(frozen=True)
class PowerLawFit:
    """``mean ~ exp(intercept) * x ** slope`` with a bootstrap interval for the slope."""

    slope: float
    intercept: float
    slope_ci: tuple[float, float]
    slope_se: float
    confidence: float

    def predict(self, x) -> np.ndarray:
        return np.exp(self.intercept) * np.asarray(x, dtype=float) ** self.slope

    def contains(self, value: float) -> bool:
        """Whether ``value`` lies in the slope's confidence interval."""
        return self.slope_ci[0] <= value <= self.slope_ci[1]


def fit_replicates(x: np.ndarray, means: np.ndarray, replicates: np.ndarray, confidence: float = 0.95) -> PowerLawFit:
    """Slope of ``means`` (``[P]``) on ``x`` with the interval of the bootstrap ``replicates`` ``[B, P]``."""
    x = np.asarray(x, dtype=float)
    if x.ndim != 1 or x.size < 2 or (x <= 0).any() or np.unique(x).size < 2:
        raise ValueError("x: need at least two distinct positive grid values")
    slope, intercept = ols_loglog(x, means)
    boot, _ = ols_loglog(x, replicates)
    lo, hi = percentile_interval(boot, confidence)
    return PowerLawFit(float(slope), float(intercept), (float(lo), float(hi)), float(boot.std(ddof=1)), confidence)


def fit_power_law(x, samples: Sequence, reps: int = 2000, confidence: float = 0.95, seed: int = 0) -> PowerLawFit:
    """Log-log slope of the trial means over ``x`` with a bootstrap confidence interval."""
    samples = _as_samples(samples)
    if len(samples) != len(np.atleast_1d(x)):
        raise ValueError(f"samples: need one array per grid value ({len(np.atleast_1d(x))}), got {len(samples)}")
    means = np.array([s.mean() for s in samples])
    return fit_replicates(x, means, bootstrap_means(samples, reps, seed), confidence)


def mean_intervals(samples: Sequence, reps: int = 2000, confidence: float = 0.95, seed: int = 0):
    """``(means, low, high)`` per point: trial means and percentile-bootstrap intervals."""
    samples = _as_samples(samples)
    lo, hi = percentile_interval(bootstrap_means(samples, reps, seed), confidence)
    return np.array([s.mean() for s in samples]), lo, hi
