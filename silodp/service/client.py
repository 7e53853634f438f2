"""The thin client of the silo service (what a ClientApp or ``IsrlDpMod`` runs): it forwards the
server's proposal and model and returns what the service released. httpx and numpy only: no
torch, no records, no ledger.

The address comes from the SuperNode's node config (:data:`NODE_SERVICE`, ``silodp-service``):
``unix:/path/silo.sock`` (a Unix domain socket; the file's permissions say who may connect) or
``http://127.0.0.1:PORT`` with the token in ``silodp-service-token``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping

from typing import TypeVar

import httpx
import numpy as np
from pydantic import BaseModel

from silodp.service import wire

#: node-config keys: the service's address and (for a TCP service) its token
NODE_SERVICE, NODE_SERVICE_TOKEN = "silodp-service", "silodp-service-token"


_Reply = TypeVar("_Reply", bound=BaseModel)


class ServiceRefused(ValueError):
    """The service refused (``code``, its fixed ``text``) or could not be reached; nothing released."""

    def __init__(self, code: str) -> None:
        super().__init__(wire.REFUSALS.get(code, wire.REFUSALS["internal"]))
        self.code = code if code in wire.REFUSALS else "internal"


class ServiceClient:
    """Calls to one silo service at ``address`` (``unix:PATH`` or ``http://127.0.0.1:PORT``)."""

    def __init__(self, address: str, token: str | None = None, timeout: float = 300.0) -> None:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        if address.startswith("unix:"):
            transport = httpx.HTTPTransport(uds=address[len("unix:"):])
            self._http = httpx.Client(transport=transport, base_url="http://silo", headers=headers, timeout=timeout)
        elif address.startswith("http://127.0.0.1:"):
            self._http = httpx.Client(base_url=address, headers=headers, timeout=timeout, trust_env=False)
        else:
            raise ValueError(f"address: must be unix:PATH or http://127.0.0.1:PORT, got {address!r}")

    @classmethod
    def for_node(cls, node_config: Mapping) -> "ServiceClient | None":
        """The client of the service the node config names, or None when it names none."""
        if NODE_SERVICE not in node_config:
            return None
        token = node_config.get(NODE_SERVICE_TOKEN)
        return cls(str(node_config[NODE_SERVICE]), None if token in (None, "") else str(token))

    def close(self) -> None:
        self._http.close()

    def _call(self, method: str, path: str, body: dict | None, reply: type[_Reply]) -> _Reply:
        """``body`` is sent as given (not validated here: the service validates, and records
        what it refuses in its ledger)."""
        try:
            response = self._http.request(method, path, content=None if body is None else json.dumps(body),
                                          headers={"Content-Type": "application/json"})
            data = response.json()
        except (httpx.HTTPError, ValueError):
            raise ServiceRefused("internal") from None
        if response.status_code != 200:
            raise ServiceRefused(str(data.get("code", "internal")) if isinstance(data, dict) else "internal")
        try:
            return reply.model_validate(data)
        except ValueError:
            raise ServiceRefused("internal") from None

    def admit(self, run_id: str, proposal: Mapping) -> wire.Admitted:
        return self._call("POST", "/admit", {"run_id": str(run_id), "proposal": dict(proposal)}, wire.Admitted)

    def release(self, run_id: str, proposal: Mapping, kind: str, w, w_prev=None) -> tuple[np.ndarray, wire.Released]:
        """The release of one message (float64) and the service's reply (its epsilons)."""
        body = {"run_id": str(run_id), "proposal": dict(proposal), "kind": str(kind),
                "w": wire.encode(w).model_dump(), "w_prev": None if w_prev is None else wire.encode(w_prev).model_dump()}
        out = self._call("POST", "/release", body, wire.Released)
        return wire.decode(out.message), out

    def status(self) -> wire.Status:
        return self._call("GET", "/status", None, wire.Status)


def proposal_of(run_config: Mapping) -> dict:
    """The proposal a run config makes (the example's keys, dashes as underscores; the silo's
    own ``delta`` and the server's ``model-path`` left out), sent unvalidated: the service
    validates it and records what it refuses."""
    from silodp.service.plan import Settings

    keys = set(wire.Proposal.model_fields)
    defaults = {k: v for k, v in vars(Settings()).items() if k in keys}
    given = {str(k).replace("-", "_"): v for k, v in dict(run_config).items()}
    return {**defaults, **{k: v for k, v in given.items() if k in keys}}


__all__ = ["proposal_of", "NODE_SERVICE", "NODE_SERVICE_TOKEN", "ServiceClient", "ServiceRefused"]
