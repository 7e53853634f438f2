"""The registry of accountants by name (``--accountant NAME``, as Opacus' ``\"rdp\"``,
``\"prv\"``): a class registers where it is defined (``@register_accountant``, one file in
``silodp/accounting/`` or here, found by :func:`silodp._registry.discover`), and callers get a
fresh one by name or :class:`~silodp.accounting.spec.AccountantSpec`."""

from __future__ import annotations

from typing import Any

from silodp.accounting import events as ev
from silodp._registry import RegistryView, register
from silodp.accounting.accountants.base import Accountant

#: every registered accountant class by its ``name`` (filled by :func:`register_accountant`)
ACCOUNTANTS: dict[str, type[Accountant]] = {}


def register_accountant(cls: type) -> type:
    """Class decorator: register the accountant class ``cls`` under ``cls.name`` (a name taken by
    another class is refused). Where it is defined is all it takes: ``--accountant`` of
    ``silodp epsilon``, the calibration and the conformance suite read this registry."""
    return register(ACCOUNTANTS, cls, "accountant")


def unregister_accountant(name: str) -> None:
    """Remove ``name`` (tests' toy accountants)."""
    ACCOUNTANTS.pop(name, None)


def accountant_choices(*extra: str) -> RegistryView:
    """The registered accountant names, read live, plus ``extra`` ones (the CLI's ``"all"``):
    ``--accountant``'s ``choices``."""
    return RegistryView(ACCOUNTANTS, *extra)



def get_accountant(name: Any, neighbouring: ev.NeighboringRelation | None = None, **kwargs: Any) -> Accountant:
    """A fresh accountant by registry name (``gdp``, ``rdp``, ``pld``, ``zcdp``, ``advanced``, ``dwork-roth``,
    ``pvec``, ``pvec-pld``, and any registered later) or by :class:`~silodp.accounting.spec.AccountantSpec`
    (its settings, then ``kwargs``); ``neighbouring`` (or ``neighboring_relation=``) defaults to
    :data:`DEFAULT_RELATION`."""
    if not isinstance(name, str) and hasattr(name, "settings"):  # an AccountantSpec (spec.py imports this module)
        name, kwargs = name.name, {**dict(name.settings), **kwargs}
    if name not in ACCOUNTANTS:
        raise ValueError(f"accountant: must be one of {sorted(ACCOUNTANTS)}, got {name!r}")
    return ACCOUNTANTS[name](neighbouring, **kwargs)


def epsilon(event: ev.DpEvent, delta: float | None = None, accountant: str = "pld",
            neighbouring: ev.NeighboringRelation | None = None, *, target_delta: float | None = None,
            **kwargs: Any) -> float:
    """Certified epsilon of ``event`` at ``delta`` (or ``target_delta=``)."""
    return get_accountant(accountant, neighbouring, **kwargs).compose(event).get_epsilon(delta, target_delta=target_delta)


def delta(event: ev.DpEvent, epsilon: float | None = None, accountant: str = "pld",
          neighbouring: ev.NeighboringRelation | None = None, *, target_epsilon: float | None = None,
          **kwargs: Any) -> float:
    """Certified delta of ``event`` at ``epsilon`` (or ``target_epsilon=``)."""
    return get_accountant(accountant, neighbouring, **kwargs).compose(event).get_delta(epsilon,
                                                                                        target_epsilon=target_epsilon)
