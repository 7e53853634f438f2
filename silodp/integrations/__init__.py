"""silodp inside the tools federations run on: Flower, Opacus, torch modules, flwr-datasets.

* :mod:`silodp.integrations.flower` (extra ``silodp[flower]``): ``SilodpAccountant`` (Flower's
  ``PrivacyAccountant`` protocol on silodp's PLD/RDP), ``IsrlDpMod`` (a client mod that makes each
  silo ISRL-DP on its own, with a per-silo ledger in the node state), ``worst_silo_epsilon``.
* :mod:`silodp.integrations.opacus` (extra ``silodp[opacus]``): silodp accountants registered in
  Opacus' registry, for Poisson, shuffled and with-replacement batches.
* :mod:`silodp.integrations.modules`: ``torch.nn.Module`` <-> silodp model (state dicts).
* :mod:`silodp.integrations.partitions`: a ``Federation`` from any flwr-datasets partitioner.

Every name below is imported lazily, on first use, from its submodule, so ``import silodp`` (and
``import silodp.integrations``) never needs flwr or opacus. Where Opacus is installed, ``import
silodp.integrations`` registers silodp's accountants in Opacus' registry (``silodp-pld``, ...), so
``PrivacyEngine(accountant="silodp-pld")`` works after it. See docs/integrations.md.
"""

from __future__ import annotations

import importlib
import importlib.util
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


if importlib.util.find_spec("opacus") is not None:  # Opacus names its accountant by string
    importlib.import_module("silodp.integrations.opacus")


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'silodp.integrations' has no attribute {name!r}")
    return getattr(importlib.import_module(f"silodp.integrations.{_EXPORTS[name]}"), name)


def __dir__() -> list[str]:
    return sorted(_EXPORTS)


__all__ = sorted(_EXPORTS)
