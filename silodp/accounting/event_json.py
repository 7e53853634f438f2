"""dp-accounting events as JSON, for ``silodp epsilon --event FILE``.

The format is dp-accounting's own ``DpEvent.to_named_tuple()``, written as JSON objects: every
event is an object with ``class_name`` (a dp-accounting event class), optionally ``module_name``
(``"dp_accounting.dp_event"``), and exactly that class's fields; a nested event is an object under
``event``, a list of them under ``events``::

    {"class_name": "SelfComposedDpEvent", "count": 1000,
     "event": {"class_name": "PoissonSampledDpEvent", "sampling_probability": 0.01,
               "event": {"class_name": "GaussianDpEvent", "noise_multiplier": 1.0}}}

The classes read are those whose class and fields silodp shares with dp-accounting
(:data:`silodp.accounting.events._SHARED`), each with dp-accounting's own field names: Gaussian,
zCDP, the compositions and samplings, ``LaplaceDpEvent(noise_multiplier)``,
``DiscreteLaplaceDpEvent(noise_parameter, sensitivity)`` and
``RandomizedResponseDpEvent(noise_parameter, num_buckets)``. silodp's own events without a
dp-accounting counterpart (``EpsilonDeltaDpEvent``, ``ParallelComposedDpEvent``,
``DiscreteGaussianDpEvent``) have no dp-accounting JSON and are neither read nor written.

:func:`dumps` writes it from a silodp or a dp-accounting event. Reading fails closed: an unknown
class (one silodp does not certify, e.g. ``MixtureOfGaussiansDpEvent``), a missing or unknown
field, or a malformed value is a ``ValueError`` naming it; the tree then converts as
:func:`silodp.accounting.events.from_dp_accounting` (so dp-accounting's conventions hold:
``noise_multiplier`` 0 is non-private, a sampling probability 0 releases nothing).
"""

from __future__ import annotations

import dataclasses
import functools
import json
from typing import Any

from silodp.accounting import events as ev

_MODULES = ("dp_accounting.dp_event", "dp_accounting", "silodp.accounting.events")


@functools.cache
def _stand_in(name: str) -> type:
    """A class named like dp-accounting's event class, to carry the fields read from JSON."""
    return type(name, (), {})


def _read(obj: Any, where: str) -> Any:
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: must be a JSON object with class_name, got {type(obj).__name__}")
    name = obj.get("class_name")
    if name not in ev._SHARED:
        raise ValueError(f"{where}.class_name: must be one of {sorted(ev._SHARED)}, got {name!r}")
    if obj.get("module_name", _MODULES[0]) not in _MODULES:
        raise ValueError(f"{where}.module_name: must be one of {list(_MODULES)}, got {obj['module_name']!r}")
    fields = {f.name: f for f in dataclasses.fields(ev._SHARED[name])}
    given = set(obj) - {"class_name", "module_name"}
    unknown = sorted(given - set(fields))
    missing = sorted(k for k, f in fields.items() if k not in given and f.default is dataclasses.MISSING)
    if unknown or missing:
        raise ValueError(f"{where}: {name} has the fields {sorted(fields)}, got "
                         + (f"unknown {unknown[0]!r}" if unknown else f"no {missing[0]!r}"))
    node = _stand_in(name)()
    for key in given:
        value = obj[key]
        if key == "event":
            value = _read(value, f"{where}.event")
        elif key == "events":
            if not isinstance(value, list):
                raise ValueError(f"{where}.events: must be a list of events")
            value = [_read(e, f"{where}.events[{i}]") for i, e in enumerate(value)]
        elif isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ValueError(f"{where}.{key}: must be a number, got {value!r}")
        setattr(node, key, value)
    return node


def loads(text: str) -> ev.DpEvent:
    """The silodp event of a dp-accounting event serialized as JSON (see the module docstring)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"event: not JSON ({exc})") from None
    return ev.from_dp_accounting(_read(obj, "event"))


def _tree(event: ev.DpEvent) -> dict[str, Any]:
    if type(event).__name__ not in ev._SHARED:
        raise ValueError(f"event: {type(event).__name__} has no dp-accounting counterpart")
    out: dict[str, Any] = {"class_name": type(event).__name__}
    for field in dataclasses.fields(event):
        value = getattr(event, field.name)
        out[field.name] = (_tree(value) if field.name == "event" else
                           [_tree(e) for e in value] if field.name == "events" else value)
    return out


def dumps(event: Any) -> str:
    """``event`` (silodp's, or dp-accounting's) in the JSON format that :func:`loads` reads."""
    if not isinstance(event, ev.DpEvent):
        event = ev.from_dp_accounting(event)
    return json.dumps(_tree(event))
