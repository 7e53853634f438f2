"""An accountant as a value: its registry name plus its settings (as jax_privacy's configs).

A calibration carries the :class:`AccountantSpec` that certified it (:attr:`Calibration.spec`), so
a caller that must account again with the same accountant (a silo's ledger, DP-SCAFFOLD's
certificate of explicit noise) builds it from the spec instead of parsing the printed label
(``pld(value_discretization_interval=0.002)``) back into a name.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from silodp.accounting import events as ev

if TYPE_CHECKING:
    from silodp.accounting.accountants import Accountant


@dataclasses.dataclass(frozen=True)
class AccountantSpec:
    """A registered accountant ``name`` and the keyword ``settings`` it is built with (each one
    of the class's ``SETTINGS``); hashable, so a calibration can be cached by it."""

    name: str
    settings: tuple[tuple[str, Any], ...] = ()

    def __post_init__(self) -> None:
        from silodp.accounting.accountants import ACCOUNTANTS

        if self.name not in ACCOUNTANTS:
            raise ValueError(f"accountant: must be one of {sorted(ACCOUNTANTS)}, got {self.name!r}")
        settings = dict(self.settings.items() if isinstance(self.settings, Mapping) else self.settings)
        allowed = getattr(ACCOUNTANTS[self.name], "SETTINGS", ())
        unknown = sorted(set(settings) - set(allowed))
        if unknown:
            raise ValueError(f"settings: {unknown} are not settings of accountant {self.name!r} ({list(allowed)})")
        object.__setattr__(self, "settings", tuple(sorted(settings.items())))

    @classmethod
    def of(cls, value: str | AccountantSpec) -> AccountantSpec:
        """``value`` itself, or the spec of the registry name ``value`` with no settings."""
        if isinstance(value, AccountantSpec):
            return value
        if not isinstance(value, str):
            raise ValueError(f"accountant: must be a registry name or an AccountantSpec, got {value!r}")
        return cls(value)

    @property
    def label(self) -> str:
        """How outputs print it: ``name`` or ``name(key=value, ...)`` (for reading, never parsed)."""
        if not self.settings:
            return self.name
        return f"{self.name}({', '.join(f'{k}={v:.2g}' if isinstance(v, float) else f'{k}={v}' for k, v in self.settings)})"

    def to_json(self) -> dict[str, Any]:
        """``{"name": ..., "settings": {...}}``: how outputs and stores carry it (read back by
        :meth:`from_json`, never by parsing the label)."""
        return {"name": self.name, "settings": dict(self.settings)}

    @classmethod
    def from_json(cls, value: Mapping[str, Any]) -> AccountantSpec:
        """The spec :meth:`to_json` wrote (validated against the registry again)."""
        return cls(value["name"], value.get("settings", {}))

    def make(self, neighbouring: ev.NeighboringRelation | None = None) -> Accountant:
        """A fresh accountant of this spec under ``neighbouring``."""
        from silodp.accounting.accountants import get_accountant

        return get_accountant(self.name, neighbouring, **dict(self.settings))

    def __str__(self) -> str:
        return self.label
