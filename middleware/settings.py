"""How a serving process names itself and where it writes: keyword arguments, else `TRACEJOIN_*`.

| keyword          | variable                  | default                                                 |
|------------------|---------------------------|---------------------------------------------------------|
| `service`        | `TRACEJOIN_SERVICE`       | the role                                                |
| `role`           | `TRACEJOIN_ROLE`          | `agg`                                                   |
| `worker`         | `TRACEJOIN_WORKER`        | `host:port` of the server that takes the first request, |
|                  |                           | `host:pid` when it has no port                          |
| `log`            | `TRACEJOIN_LOG`           | `stderr` (else a file path, opened for appending)       |
| `otlp_endpoint`  | `TRACEJOIN_OTLP_ENDPOINT` | none: OTLP/HTTP (protobuf), e.g. `http://127.0.0.1:4318`|
| `otlp_file`      | `TRACEJOIN_OTLP_FILE`     | none: a path for OTLP/JSON span lines                   |
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass

ROLES = ("router", "frontend", "ctx", "gen", "prefill", "decode", "agg", "proxy")

# Roles that serve sub-requests sent by a router of ours; only they believe the ids it forwards.
WORKER_ROLES = frozenset({"ctx", "gen", "prefill", "decode"})

STDERR = "stderr"


@dataclass(frozen=True)
class Settings:
    service: str
    role: str
    worker: str | None  # None: named from the first request's server (see worker_identity)
    log: str  # a file path, or STDERR
    otlp_endpoint: str | None
    otlp_file: str | None

    @classmethod
    def resolve(
        cls,
        *,
        service: str | None = None,
        role: str | None = None,
        worker: str | None = None,
        log: str | None = None,
        otlp_endpoint: str | None = None,
        otlp_file: str | None = None,
    ) -> Settings:
        """Keyword arguments win over the environment; unset and empty values fall to the default."""
        role = role or _env("ROLE") or "agg"
        if role not in ROLES:
            raise ValueError(f"trace-join role must be one of {', '.join(ROLES)}, not {role!r}")
        log = log or _env("LOG") or STDERR
        return cls(
            service=service or _env("SERVICE") or role,
            role=role,
            worker=worker or _env("WORKER"),
            log=STDERR if log == "-" else log,
            otlp_endpoint=otlp_endpoint or _env("OTLP_ENDPOINT"),
            otlp_file=otlp_file or _env("OTLP_FILE"),
        )


def worker_identity(server: tuple[str, int | None] | None) -> str:
    """`host:port` when serving on a port (ASGI `scope["server"]`), else `host:pid`.

    The host is the machine's name, not the bound address, so that two machines both listening on
    0.0.0.0:8000 stay two workers.
    """
    host = socket.gethostname()
    if server and server[1]:
        return f"{host}:{server[1]}"
    return f"{host}:{os.getpid()}"


def _env(name: str) -> str | None:
    return os.environ.get(f"TRACEJOIN_{name}") or None
