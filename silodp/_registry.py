"""The one registration rule every registry of silodp uses (algorithms, accountants), a live
view of a registry's names, and the package walk that finds the modules that register (so a new
algorithm, accountant or bound is one new file and nothing else)."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil
import sys
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


def discover(package: str, marker: str) -> list[str]:
    """Import every module of ``package`` (a package walk, subpackages included) whose source
    contains ``marker`` (its registration call, e.g. ``"@register_accountant"``), so that a module
    registers by being there, with no import list to edit. Modules without the marker are not
    imported (heavy modules stay off light paths); those imported already are skipped. Returns
    the names imported."""
    pkg = sys.modules[package]
    done = []
    for info in pkgutil.walk_packages(pkg.__path__, prefix=f"{package}."):
        if info.ispkg or info.name in sys.modules:
            continue
        spec = importlib.util.find_spec(info.name)
        origin = getattr(spec, "origin", None)
        if not origin or not origin.endswith(".py"):
            continue
        with open(origin, encoding="utf-8") as source:
            if marker not in source.read():
                continue
        importlib.import_module(info.name)
        done.append(info.name)
    return done
