"""silodp inside the tools federations run on: Flower, Opacus, torch modules, flwr-datasets.

* :mod:`silodp.integrations.flower` (extra ``silodp[flower]``): ``SilodpAccountant`` (Flower's
  ``PrivacyAccountant`` protocol on silodp's PLD/RDP), ``IsrlDpMod`` (a client mod that makes each
  silo ISRL-DP on its own, with a per-silo ledger in the node state), ``worst_silo_epsilon``.
* :mod:`silodp.integrations.opacus` (extra ``silodp[opacus]``): silodp accountants registered in
  Opacus' registry, for Poisson, shuffled and with-replacement batches.
* :mod:`silodp.integrations.modules`: ``torch.nn.Module`` <-> silodp model (state dicts).
* :mod:`silodp.integrations.partitions`: a ``Federation`` from any flwr-datasets partitioner.

Every name below is imported lazily, on first use, from its submodule, so ``import silodp`` (and
``import silodp.integrations``) never needs flwr or opacus. After ``import silodp.integrations``,
silodp's accountants are in Opacus' registry (``silodp-pld``, ...) as soon as Opacus is imported,
so ``PrivacyEngine(accountant="silodp-pld")`` works; Opacus (and torch with it) is not imported
before something imports it, which keeps a Flower ClientApp that never trains with Opacus lean.
See docs/integrations.md.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from typing import Any

_EXPORTS = {
    "SilodpAccountant": "flower",
    "IsrlDpMod": "flower",
    "SiloLedger": "flower",
    "worst_silo_epsilon": "flower",
    "OpacusSampling": "opacus",
    "SilodpOpacusAccountant": "opacus",
    "get_noise_multiplier": "opacus",
    "opacus_accountant": "opacus",
    "from_module": "modules",
    "to_module": "modules",
    "state_dict_to_vector": "modules",
    "vector_to_state_dict": "modules",
    "federation_from_partitioner": "partitions",
}


def _register_in_opacus() -> None:
    importlib.import_module("silodp.integrations.opacus")  # Opacus names its accountant by string


class _ThenRegister(importlib.abc.Loader):
    """Opacus' own loader, then :func:`_register_in_opacus` once ``opacus`` has executed."""

    def __init__(self, loader) -> None:
        self._loader = loader

    def __getattr__(self, name: str) -> Any:  # resource readers, get_source, ...
        return getattr(self._loader, name)

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module) -> None:
        self._loader.exec_module(module)
        _register_in_opacus()


class _OnOpacusImport(importlib.abc.MetaPathFinder):
    """Finds ``opacus`` as the other finders do (once), its loader wrapped in :class:`_ThenRegister`."""

    def find_spec(self, name, path, target=None):
        if name != "opacus":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is not None and spec.loader is not None:
            spec.loader = _ThenRegister(spec.loader)
        return spec


if "opacus" in sys.modules:
    _register_in_opacus()
elif importlib.util.find_spec("opacus") is not None:
    sys.meta_path.insert(0, _OnOpacusImport())


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'silodp.integrations' has no attribute {name!r}")
    return getattr(importlib.import_module(f"silodp.integrations.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted(_EXPORTS)


__all__ = sorted(_EXPORTS)
