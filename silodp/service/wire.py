"""The silo service's wire schema: pydantic models (FastAPI validates every request against them
before the service reads it) and the fixed set of texts the service may answer with.

Arrays travel as base64 of their float64 bytes (little-endian, C order) with their shape
(:func:`encode`, :func:`decode`): exact, and no float is formatted or parsed by hand. Numbers that
are not finite are invalid everywhere (``allow_inf_nan=False``), extra fields are refused.

What the service sends back is one of: the admitted plan's certificate (:class:`Admitted`), a
noised release with the ledger's epsilons (:class:`Released`), the ledger's summary
(:class:`Status`) or a refusal (:class:`Refused`) whose text is one of :data:`REFUSALS`, chosen
by a code and never formatted with a value: nothing computed from the records, no exception
text, leaves the service. The operator reads the detailed reason in the ledger
(``silodp ledger``).
"""

from __future__ import annotations

import base64

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

#: code -> the one text the service answers with (and the HTTP status it answers it with)
REFUSALS: dict[str, str] = {
    "auth": "silo service: unauthorized",
    "request": "silo service: malformed request; nothing released",
    "plan": "silo service: the proposed plan is outside this silo's caps or accepted models; nothing released",
    "budget": "silo service: this silo's budget does not admit it; nothing released",
    "model": "silo service: the server's model is not one this silo evaluates; nothing released",
    "kind": "silo service: this message is not in the admitted plan; nothing released",
    "release": "silo service: the release was not finite; nothing released",
    "internal": "silo service: the silo could not answer; nothing released",
}
STATUS = {"auth": 401, "request": 422, "plan": 403, "budget": 403, "model": 422, "kind": 403, "release": 422,
          "internal": 500}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, frozen=True)


class Arr(_Strict):
    """A float64 array: its shape and base64 of its little-endian C-order bytes."""

    shape: list[int] = Field(max_length=8)
    data: str = Field(max_length=64 * 2**20)


def encode(array) -> Arr:
    a = np.ascontiguousarray(np.asarray(array, dtype="<f8"))
    return Arr(shape=list(a.shape), data=base64.b64encode(a.tobytes()).decode("ascii"))


def decode(arr: Arr) -> np.ndarray:
    """The array ``arr`` carries; ValueError if its bytes do not match its shape."""
    raw = base64.b64decode(arr.data, validate=True)
    if any(s < 0 for s in arr.shape) or len(raw) != 8 * int(np.prod(arr.shape, dtype=np.int64)):
        raise ValueError("arr: its bytes do not match its shape")
    return np.frombuffer(raw, dtype="<f8").reshape(arr.shape).astype(np.float64)


class Proposal(_Strict):
    """A run's plan, as the server proposes it (the example's run config,
    :class:`silodp.service.plan.Settings`); the silo checks it against its caps."""

    algorithm: str = Field(max_length=64)
    dataset: str = Field(max_length=128)
    model: str = Field(max_length=64)
    epsilon: float
    rounds: int
    batch_size: int
    q: int = 5
    step_size: float
    clip: float
    seed: int = 0
    accountant: str = Field(default="", max_length=64)
    local_steps: int = 1


class AdmitRequest(_Strict):
    run_id: str = Field(max_length=128)
    proposal: Proposal


class ReleaseRequest(_Strict):
    """One message of run ``run_id``'s plan: ``kind`` (``grad`` / ``diff`` / ``update``) at the
    server's model ``w`` (and ``w_prev`` for ``diff``)."""

    run_id: str = Field(max_length=128)
    proposal: Proposal
    kind: str = Field(max_length=16)
    w: Arr
    w_prev: Arr | None = None


class Admitted(_Strict):
    """The admitted plan: its certificate and the silo's epsilon with it, all runs composed."""

    run_id: str
    epsilon_run: float
    epsilon_total: float
    budget_epsilon: float
    budget_delta: float


class Released(_Strict):
    """The noised release and the ledger's epsilons after it (this run's, all runs', what is left)."""

    message: Arr
    epsilon_run: float
    epsilon_spent: float
    epsilon_left: float


class Status(_Strict):
    mode: str
    budget_epsilon: float
    budget_delta: float
    epsilon_spent: float
    runs: int
    releases: int
    refused: int


class Refused(_Strict):
    code: str
    refusal: str


def refused(code: str) -> Refused:
    return Refused(code=code, refusal=REFUSALS[code])
