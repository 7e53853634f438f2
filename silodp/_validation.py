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



def check_index(name: str, value: object, size: int) -> int:
    """An integer index in [0, size) (a silo id); anything else names the argument."""
    if isinstance(value, bool) or not isinstance(value, Integral) or not 0 <= value < size:
        raise ValueError(f"{name}: must be an integer in [0, {size}), got {value!r}")
    return int(value)


def check_noise_map(name: str, value: object) -> dict:
    """A mapping of names to noise values: real numbers >= 0 (inf allowed: that message is never
    informative), none NaN or missing."""
    from collections.abc import Mapping

    if not isinstance(value, Mapping):
        raise ValueError(f"{name}: must be a mapping of names to numbers, got {type(value).__name__}")
    out = {}
    for key, x in value.items():
        if isinstance(x, bool) or not isinstance(x, Real) or math.isnan(float(x)) or float(x) < 0:
            raise ValueError(f"{name}: {key!r} must be a number >= 0, got {x!r}")
        out[key] = float(x)
    return out


def batch_from_rate(name: str, q: object, n: object) -> int:
    """The batch of a sampling ratio: ceil(q n) records (rounded UP, toward more privacy loss; a
    product within 1e-12 relative of an integer is that integer), at least 1 and at most n."""
    n = check_count("dataset_size", n)
    x = check_probability(name, q) * n
    return min(n, max(1, math.ceil(x * (1.0 - 1e-12))))


def round_up(value: float, digits: int = 6) -> str:
    """``value`` printed to ``digits`` significant digits, rounded toward +inf (a printed noise
    scale or epsilon is never below the certified one: noise up, epsilon up)."""
    x = float(value)
    if not math.isfinite(x) or x == 0:
        return f"{x:g}"
    text = f"{x:.{digits - 1}e}"
    if float(text) < x:
        mantissa, exp = text.split("e")
        text = f"{float(mantissa) + 10.0 ** -(digits - 1):.{digits - 1}f}e{exp}"
    return f"{float(text):.{digits}g}"


#: Spellings renamed in round 7 so that one name means one thing across silodp (``q`` is the
#: sampling rate of ``silodp epsilon`` / ``noise``; ``alpha`` an RDP order; ``beta`` the smoothness):
#: old name -> (new name, what it is). Passing an old name raises instead of being read.
RENAMED = {
    "q": ("period", "SPIDER's period of fresh minibatch gradients"),
    "--spider-q": ("--spider-period", "SPIDER's period of fresh minibatch gradients"),
}


def refuse_renamed(given: object, renamed: dict | None = None) -> None:
    """Raise ``ValueError`` naming the first old spelling in ``given`` (names, or a mapping's keys)
    with its new name (``renamed``: old -> (new, meaning); default :data:`RENAMED`)."""
    table = RENAMED if renamed is None else renamed
    for name in given:  # type: ignore[attr-defined]
        if name in table:
            new, meaning = table[name]
            raise ValueError(f"{name}: renamed to {new} ({meaning}); pass {new}")
