"""Argument validation for every layer, with one message format.

Every public function validates its inputs here so that bad input raises a ``ValueError`` that
names the argument and its allowed range -- ``"name: must be ..., got value"`` -- instead of
returning NaN or inf (non-negotiable 5). Pure Python: importable from every layer and the CLI.
"""

from __future__ import annotations

import math
from numbers import Integral, Real


def _finite(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name}: must be a real number, got {value!r}")
    x = float(value)
    if math.isnan(x):
        raise ValueError(f"{name}: must not be NaN")
    if math.isinf(x):
        raise ValueError(f"{name}: must be finite, got {x}")
    return x


def check_positive(name: str, value: object) -> float:
    """A finite real number > 0 (epsilon, sigma, noise multiplier, sensitivity, ...)."""
    x = _finite(name, value)
    if x <= 0:
        raise ValueError(f"{name}: must be > 0, got {x}")
    return x


def check_nonnegative(name: str, value: object) -> float:
    x = _finite(name, value)
    if x < 0:
        raise ValueError(f"{name}: must be >= 0, got {x}")
    return x


def check_delta(name: str, value: object) -> float:
    """A probability strictly inside (0, 1)."""
    x = _finite(name, value)
    if not 0.0 < x < 1.0:
        raise ValueError(f"{name}: must lie in (0, 1), got {x}")
    return x


def check_probability(name: str, value: object) -> float:
    """A sampling probability in (0, 1]."""
    x = _finite(name, value)
    if not 0.0 < x <= 1.0:
        raise ValueError(f"{name}: must lie in (0, 1], got {x}")
    return x


def check_count(name: str, value: object, minimum: int = 1) -> int:
    """An integer >= minimum (steps, rounds, dataset sizes)."""
    if isinstance(value, bool):
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    if isinstance(value, Real) and not isinstance(value, Integral):
        x = float(value)
        if math.isnan(x) or math.isinf(x) or x != int(x):
            raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
        value = int(x)
    if not isinstance(value, Integral):
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value!r}")
    if value < minimum:
        raise ValueError(f"{name}: must be an integer >= {minimum}, got {value}")
    return int(value)

