"""Human-readable output of every command: aligned tables, numbers rounded toward privacy.

What a person reads never promises more privacy than the certificate: every real number is
printed to 6 significant digits rounded toward +inf (:func:`silodp._validation.round_up`), so a
printed noise scale is at least the calibrated one and a printed epsilon or delta at least the
certified one (noise up, epsilon up, delta up). ``--json`` output keeps every number at full
precision (:func:`silodp.cli.emit`). Integers, booleans and text print as they are; ``None``
and NaN as ``-``; infinities as ``inf`` / ``-inf``.
"""

from __future__ import annotations

import math
from typing import Any, Iterable, Sequence

from silodp._validation import round_up

#: what ``None`` (JSON null: not applicable, or no certificate) prints as
MISSING = "-"


def num(value: Any, digits: int = 6) -> str:
    """One value for a person (see the module docstring): reals rounded up to ``digits``
    significant digits, lists joined by ``, ``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return MISSING
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        if isinstance(value, (list, tuple)):
            return ", ".join(num(v, digits) for v in value)
        return str(value)
    if isinstance(value, int):
        return str(value)
    return round_up(value, digits) if math.isfinite(value) else ("inf" if value > 0 else "-inf")


def _is_number(cell: Any) -> bool:
    return isinstance(cell, (int, float)) and not isinstance(cell, bool)


def columns(header: Sequence[str], rows: Iterable[Sequence[Any]], digits: int = 6) -> str:
    """``rows`` under ``header`` as an aligned table: numbers right-aligned, text left-aligned,
    every cell through :func:`num`."""
    rows = [list(r) for r in rows]
    cells = [list(header)] + [[num(c, digits) for c in r] for r in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(header))]
    right = [any(_is_number(r[i]) for r in rows) for i in range(len(header))]

    def line(r: list[str]) -> str:
        return "  ".join(c.rjust(w) if ra else c.ljust(w) for c, w, ra in zip(r, widths, right)).rstrip()

    return "\n".join(line(r) for r in cells)


def flatten(payload: dict, prefix: str = "") -> list[tuple[str, Any]]:
    """``(dotted key, value)`` of every leaf of ``payload`` (``noise.sigma``); an empty
    mapping is a leaf (printed as ``-``)."""
    out: list[tuple[str, Any]] = []
    for key, value in payload.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out += flatten(value, name)
        elif isinstance(value, (list, tuple)) and value and all(isinstance(v, dict) for v in value):
            for i, item in enumerate(value):
                out += flatten(item, f"{name}[{i}]")
        else:
            out.append((name, None if isinstance(value, dict) else value))
    return out


def pairs(payload: dict, digits: int = 6) -> str:
    """``payload`` as an aligned two-column table of its flattened keys (:func:`flatten`)."""
    rows = flatten(payload)
    width = max((len(k) for k, _ in rows), default=0)
    return "\n".join(f"{k:<{width}}  {num(v, digits)}".rstrip() for k, v in rows)
