"""The one registration rule every registry of silodp uses (algorithms, accountants)."""

from __future__ import annotations


def register(table: dict, cls: type, kind: str) -> type:
    """Enter ``cls`` in ``table`` under ``cls.name``; a missing name, or one taken by another
    class, is refused naming ``kind``."""
    name = getattr(cls, "name", "")
    if not name or not isinstance(name, str):
        raise ValueError(f"{cls.__name__}: an {kind} needs a non-empty string name to be registered")
    if table.get(name, cls) is not cls:
        raise ValueError(f"{kind}: the name {name!r} is taken by {table[name]!r}")
    table[name] = cls
    return cls
