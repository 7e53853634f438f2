"""The silo service as a web app: FastAPI over a Unix domain socket (or 127.0.0.1 with a bearer
token), served by uvicorn; ``silodp silo serve CONFIG.toml`` runs :func:`serve`.

Three calls (:mod:`silodp.service.wire` is their schema): ``POST /admit`` (a run's proposed
plan -> :class:`~silodp.service.wire.Admitted`), ``POST /release`` (one message of an admitted
plan at the server's model -> :class:`~silodp.service.wire.Released`), ``GET /status`` (the
ledger's summary, :class:`~silodp.service.wire.Status`); ``GET /health`` answers ``{}``.

Every error is one of :data:`~silodp.service.wire.REFUSALS`' fixed texts (FastAPI's own
validation and routing errors included, which would otherwise echo the input), written to the
ledger with its detailed reason; nothing of the records, of a per-record value, a loss or an
un-noised statistic is in any reply. The records, the models and the calibrations are loaded
once (:class:`~silodp.service.core.Silo` stays warm); a killed service loses no ledger entry
(each write is one SQLite transaction, recorded before the release leaves).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
import os
import socket
import threading

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from silodp.service import wire
from silodp.service.config import ServiceConfig
from silodp.service.core import Refusal, Silo, proposal_settings

log = logging.getLogger("silodp.service")


def build_silo(config: ServiceConfig) -> Silo:
    """The service's :class:`Silo`: its records loaded now, from the operator's path or dataset;
    noiseless only where the environment it starts in sets the test-only
    :data:`~silodp.service.core.ENV_TEST_NOISELESS` to ``"1"`` (read here, once)."""
    from silodp.integrations.flower_silo import MODE_SERVICE
    from silodp.service.core import ENV_TEST_NOISELESS
    from silodp.service.silo import SiloRecords

    if config.records_path is not None:
        from pathlib import Path

        records = SiloRecords.read(Path(config.records_path))
    elif config.dataset is not None:
        records = SiloRecords.from_dataset(config.dataset, config.partition, config.seed)
    else:
        raise ValueError("[records]: give either path (a saved records file) or dataset")
    noiseless = os.environ.get(ENV_TEST_NOISELESS) == "1"
    if noiseless:
        log.warning("silo service: %s=1: the noise is OFF (a test-only hook; the ledger records the calibrated "
                    "noise)", ENV_TEST_NOISELESS)
    return Silo(config.policy, records, fixed=config.fixed, models=config.models, partition=config.partition,
                mode=MODE_SERVICE, max_local_steps=config.max_local_steps, noiseless=noiseless)


def make_app(silo: Silo, token: str | None = None) -> FastAPI:
    """The FastAPI app of ``silo``; ``token``: the bearer token every call must carry (TCP)."""
    app = FastAPI(docs_url=None, redoc_url=None, openapi_url=None)
    lock = threading.Lock()  # one release at a time: the silo's plans and its ledger stay in order

    def refused(code: str, reason: str | None = None, run_id: str = "?") -> JSONResponse:
        if reason is not None:  # what the operator reads in the ledger; never sent
            with contextlib.suppress(Exception):
                silo.ledger.refuse(run_id, f"silo service refuses: {reason}")
        return JSONResponse(wire.refused(code).model_dump(), status_code=wire.STATUS[code])

    @app.middleware("http")
    async def _authorize(request: Request, call_next):
        if request.url.path != "/health" and token is not None:
            given = request.headers.get("authorization", "")
            if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
                return refused("auth", f"unauthorized call of {request.url.path[:64]!r}")
        try:
            return await call_next(request)
        except Exception as exc:  # noqa: BLE001 -- the contract: one fixed text, whatever failed
            log.exception("silo service: internal error")
            return refused("internal", f"internal error ({type(exc).__name__})")

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        fields = sorted({".".join(str(p) for p in e.get("loc", ()))[:80] for e in exc.errors()})
        return refused("request", f"malformed {request.url.path[:64]!r}: {fields[:5]}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        return refused("request", f"HTTP {exc.status_code} on {request.url.path[:64]!r}")

    def answer(run_id: str, compute):
        try:
            with lock:
                return compute()
        except Refusal as exc:
            return refused(exc.code)  # recorded by the silo with its reason
        except ValueError as exc:  # a proposal Settings refuses, an array that does not decode
            return refused("request", str(exc)[:300], run_id)

    @app.get("/health")
    def _health() -> dict:
        return {}

    @app.post("/admit", response_model=wire.Admitted)
    def _admit(body: wire.AdmitRequest):
        def compute():
            run_eps, total = silo.admit(body.run_id, proposal_settings(body.proposal.model_dump()))
            return wire.Admitted(run_id=body.run_id, epsilon_run=run_eps, epsilon_total=total,
                                 budget_epsilon=silo.policy.budget_epsilon, budget_delta=silo.policy.budget_delta)

        return answer(body.run_id, compute)

    @app.post("/release", response_model=wire.Released)
    def _release(body: wire.ReleaseRequest):
        def compute():
            w = wire.decode(body.w)
            w_prev = None if body.w_prev is None else wire.decode(body.w_prev)
            message, metrics = silo.release(body.run_id, proposal_settings(body.proposal.model_dump()), body.kind,
                                            w, w_prev)
            return wire.Released(message=wire.encode(message), **metrics)

        return answer(body.run_id, compute)

    @app.get("/status", response_model=wire.Status)
    def _status():
        def compute():
            out = silo.status()
            return wire.Status(mode=out["mode"], budget_epsilon=out["budget_epsilon"],
                               budget_delta=out["budget_delta"], epsilon_spent=out["epsilon_spent"],
                               runs=len(out["runs"]), releases=sum(r["releases"] for r in out["runs"]),
                               refused=out["refused"])

        return answer("?", compute)

    return app


def listening_socket(config: ServiceConfig) -> socket.socket:
    """The service's bound socket: a Unix domain socket created with mode 0600 (owned by
    ``[listen] user`` when set, so only that user and root connect; a stale socket file is
    replaced; the file appears only once the socket listens), or 127.0.0.1:``port``."""
    if config.socket is None:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", config.port))
        return sock
    # bound and listening under a temporary name, then renamed into place: a client that sees the
    # socket file can connect (no refused connection between bind and the server's start)
    building = f"{config.socket}.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        os.unlink(building)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)  # created 0600: no moment at which another user may connect
    try:
        sock.bind(building)
    finally:
        os.umask(old)
    os.chmod(building, 0o600)
    if config.user is not None:
        import pwd

        entry = pwd.getpwnam(config.user)
        os.chown(building, entry.pw_uid, entry.pw_gid)
    sock.listen(128)
    os.replace(building, config.socket)  # a stale socket file is replaced
    return sock


def serve(config: ServiceConfig) -> None:
    """Load the silo (warm), bind its socket and serve until SIGTERM / SIGINT."""
    import uvicorn

    silo = build_silo(config)
    sock = listening_socket(config)
    server = uvicorn.Server(uvicorn.Config(make_app(silo, config.token), log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
        if config.socket is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(config.socket)


__all__ = ["build_silo", "listening_socket", "make_app", "serve"]
