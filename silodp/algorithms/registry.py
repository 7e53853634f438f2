"""Algorithm classes by CLI name: one registry, filled where each class is defined
(:func:`register_algorithm`, a class decorator). A leaf module: it imports no algorithm, so the
base class, the calibration and the families never import each other in a circle (the package's
``__init__`` imports the families, which registers them)."""

from __future__ import annotations

from typing import Any

from silodp._registry import register

#: every registered algorithm class by its ``name``
ALGORITHMS: dict[str, type] = {}


def register_algorithm(cls: type) -> type:
    """Class decorator: register ``cls`` under ``cls.name`` (a name taken by another class is refused)."""
    return register(ALGORITHMS, cls, "algorithm")


def unregister_algorithm(name: str) -> None:
    """Remove ``name`` (tests' toy algorithms)."""
    ALGORITHMS.pop(name, None)


def algorithm_class(algorithm: Any) -> Any:
    """The class of ``algorithm`` (a registry name, a class, or an instance)."""
    if isinstance(algorithm, str):
        if algorithm not in ALGORITHMS:
            raise ValueError(f"algorithm: must be one of {sorted(ALGORITHMS)}, got {algorithm!r}")
        return ALGORITHMS[algorithm]
    cls = algorithm if isinstance(algorithm, type) else type(algorithm)
    if not (isinstance(cls, type) and hasattr(cls, "Plan") and callable(getattr(cls, "run", None))):
        raise ValueError(f"algorithm: must be a registered name or a FederatedAlgorithm, got {cls.__name__}")
    return cls


def get_algorithm(name: str, **params: Any) -> Any:
    """Instantiate the algorithm called ``name`` (see :data:`ALGORITHMS`) with ``params``."""
    return algorithm_class(check_name(name))(**params)


def check_name(name: object) -> str:
    if not isinstance(name, str) or name not in ALGORITHMS:
        raise ValueError(f"algorithm: must be one of {sorted(ALGORITHMS)}, got {name!r}")
    return name
