"""The registry of bounds by id (what ``silodp bound ID`` looks up)."""

from __future__ import annotations

from silodp.bounds.core import Bound

#: Every registered bound, by id, in registration order.
BOUNDS: dict[str, Bound] = {}


def register(*bounds: Bound) -> None:
    """Add bounds to :data:`BOUNDS`; ids are unique."""
    for b in bounds:
        if b.id in BOUNDS:
            raise ValueError(f"bound id {b.id!r} registered twice")
        BOUNDS[b.id] = b


def get_bound(bound_id: str) -> Bound:
    """The bound with this id; ``ValueError`` naming the id (and the known ids) otherwise."""
    try:
        return BOUNDS[bound_id]
    except KeyError:
        raise ValueError(
            f"unknown bound id {bound_id!r} (known: {', '.join(BOUNDS)})"
        ) from None


def list_bounds() -> list[Bound]:
    """All bounds, in registration order (paper order, then comparators)."""
    return list(BOUNDS.values())
