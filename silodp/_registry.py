"""The one registration rule every registry of silodp uses (algorithms, accountants), and a live
view of a registry's names."""

from __future__ import annotations

from collections.abc import Iterator


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


class RegistryView:
    """The names of a registry, read live (an entry registered later is in the view too), plus
    fixed ``extra`` names (``"all"``): what ``argparse``'s ``choices=`` and membership tests take."""

    def __init__(self, table: dict, *extra: str) -> None:
        self._table, self._extra = table, extra

    def __contains__(self, name: object) -> bool:
        return name in self._table or name in self._extra

    def __iter__(self) -> Iterator[str]:
        return iter((*self._table, *self._extra))

    def __repr__(self) -> str:
        return f"RegistryView({list(self)})"
