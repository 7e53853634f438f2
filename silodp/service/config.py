"""The silo service's configuration: one TOML file its operator writes (read with ``tomllib``).

Nothing in it comes from a server: the records (a saved records file, or a dataset, partition
and seed the operator chose), the ledger file, the budget, the caps on what a server may
propose, the model families the silo accepts and where it listens::

    [records]                 # either path = "silo.npz" (SiloRecords.save), or:
    dataset = "wbcd"
    partition = 0
    seed = 0

    [ledger]
    path = "/var/lib/silo/ledger.sqlite"
    budget_epsilon = 6.0
    budget_delta = 1e-4
    # run_epsilon = 3.0       # optional: the most one run may ask for

    [caps]                    # optional, SiloPolicy's defaults
    max_rounds = 1000
    max_batch_size = 1000
    max_clip = 10.0
    max_step_size = 10.0
    max_local_steps = 100     # an ``update`` message's local steps (IsrlDpMod's service mode)

    [models]
    accepted = ["linear"]

    [listen]                  # a Unix domain socket (0600; user: who may connect), or
    socket = "/run/silo/silo.sock"
    # user = "flwr"
    # host = "127.0.0.1"      # a TCP port on 127.0.0.1 with a bearer token
    # port = 8765
    # token_file = "/etc/silo/token"   (or token = "...")

Bad input raises ``ValueError`` naming the key.
"""

from __future__ import annotations

import dataclasses
import tomllib
from pathlib import Path

from silodp.integrations.flower_silo import NODE_CAPS, SiloPolicy

_SECTIONS = {"records": {"path", "dataset", "partition", "seed"},
             "ledger": {"path", "budget_epsilon", "budget_delta", "run_epsilon"},
             "caps": {field for field, _ in NODE_CAPS.values()} | {"max_local_steps"},
             "models": {"accepted"},
             "listen": {"socket", "user", "host", "port", "token", "token_file"}}


@dataclasses.dataclass(frozen=True)
class ServiceConfig:
    """A parsed configuration (see the module docstring)."""

    policy: SiloPolicy
    records_path: str | None
    dataset: str | None
    partition: int
    seed: int
    models: tuple[str, ...]
    socket: str | None
    user: str | None
    host: str | None
    port: int | None
    token: str | None
    max_local_steps: int = 100

    @property
    def address(self) -> str:
        """What a client connects to: ``unix:PATH`` or ``http://127.0.0.1:PORT``."""
        return f"unix:{self.socket}" if self.socket else f"http://{self.host}:{self.port}"

    @property
    def fixed(self) -> dict:
        """The records the operator fixed (a proposal naming others is refused)."""
        return {} if self.dataset is None else {"dataset": self.dataset, "seed": self.seed}


def _get(table: dict, section: str, key: str, kind, default=dataclasses.MISSING):
    if key not in table:
        if default is dataclasses.MISSING:
            raise ValueError(f"[{section}] {key}: required")
        return default
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"[{section}] {key}: must be a {kind.__name__}, got {value!r}")
    return value


def parse(data: dict, base: Path = Path(".")) -> ServiceConfig:
    """A :class:`ServiceConfig` of a TOML document's tables (relative paths against ``base``)."""
    for section, table in data.items():
        if section not in _SECTIONS or not isinstance(table, dict):
            raise ValueError(f"{section}: not a section of a silo service configuration {sorted(_SECTIONS)}")
        extra = set(table) - _SECTIONS[section]
        if extra:
            raise ValueError(f"[{section}] {sorted(extra)[0]}: unknown key (allowed: {sorted(_SECTIONS[section])})")

    def path(value: str) -> str:
        return str((base / value).resolve())

    records, ledger = data.get("records", {}), data.get("ledger", {})
    caps, listen = data.get("caps", {}), data.get("listen", {})
    records_path = _get(records, "records", "path", str, None)
    dataset = _get(records, "records", "dataset", str, None)
    if (records_path is None) == (dataset is None):
        raise ValueError("[records]: give either path (a saved records file) or dataset (with partition and seed)")
    run_epsilon = _get(ledger, "ledger", "run_epsilon", float, None)
    policy = SiloPolicy(path(_get(ledger, "ledger", "path", str)), _get(ledger, "ledger", "budget_epsilon", float),
                        _get(ledger, "ledger", "budget_delta", float), run_epsilon,
                        **{field: _get(caps, "caps", field, type(default)) for key, (field, default) in NODE_CAPS.items()
                           if field in caps})
    max_local_steps = _get(caps, "caps", "max_local_steps", int, 100)
    if max_local_steps < 1:
        raise ValueError(f"[caps] max_local_steps: must be >= 1, got {max_local_steps}")
    models = _get(data.get("models", {}), "models", "accepted", list, ["linear"])
    if not models or not all(isinstance(m, str) and m for m in models):
        raise ValueError(f"[models] accepted: must be a non-empty list of model names, got {models!r}")
    socket, host = _get(listen, "listen", "socket", str, None), _get(listen, "listen", "host", str, None)
    if (socket is None) == (host is None):
        raise ValueError("[listen]: give either socket (a Unix domain socket path) or host and port")
    token, port = None, None
    if host is not None:
        if host != "127.0.0.1":
            raise ValueError(f"[listen] host: must be 127.0.0.1 (the service listens only locally), got {host!r}")
        port = _get(listen, "listen", "port", int)
        if not 0 < port < 65536:
            raise ValueError(f"[listen] port: must lie in [1, 65535], got {port}")
        token = _get(listen, "listen", "token", str, None)
        token_file = _get(listen, "listen", "token_file", str, None)
        if token_file is not None:
            token = Path(path(token_file)).read_text().strip()
        if not token or len(token) < 16:
            raise ValueError("[listen] token: a TCP service needs a token of 16 characters at least (token or token_file)")
    partition = _get(records, "records", "partition", int, 0)
    if partition < 0:
        raise ValueError(f"[records] partition: must be >= 0, got {partition}")
    return ServiceConfig(policy, None if records_path is None else path(records_path), dataset, partition,
                         _get(records, "records", "seed", int, 0), tuple(models),
                         None if socket is None else path(socket), _get(listen, "listen", "user", str, None),
                         host, port, token, max_local_steps)


def load(path: str | Path) -> ServiceConfig:
    """The configuration in the TOML file ``path``."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            data = tomllib.load(f)
    except OSError as exc:
        raise ValueError(f"config: cannot read {str(path)!r} ({exc.strerror})") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"config: {str(path)!r} is not TOML ({exc})") from None
    return parse(data, path.parent)


__all__ = ["ServiceConfig", "load", "parse"]
