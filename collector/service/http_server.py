"""An ASGI app served by uvicorn on a thread, for the collector's HTTP endpoints (OTLP/HTTP, queries).

It listens on a TCP `HOST:PORT`, or on a Unix socket at a path that only this user can connect to
(unix_socket.py). The socket is bound here, before uvicorn starts, so port 0 gives an ephemeral
port the caller can announce, and a port in use fails at once with a clear error.

uvicorn waits for a request's head and body as long as the client keeps its connection open, so a
few clients that connect and send nothing, or send half a request, would hold the server. Each
connection is therefore served by `_GuardedH11`, uvicorn's own HTTP/1.1 protocol with three limits
(`Limits`): a connection beyond `max_connections` is closed as soon as it is accepted; one whose
request head has not arrived within `header_timeout_s` of its opening (or of the previous answer)
is closed, and so is one whose body has not arrived within `body_timeout_s` of its head. Requests
on the connections accepted are not limited: each gets its answer.
"""

from __future__ import annotations

import asyncio
import hmac
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from tracejoin.middleware.proxy import listening_socket, parse_listen

from .unix_socket import owner_only_listener

START_TIMEOUT_S = 10
MAX_CONNECTIONS = 256
HEADER_TIMEOUT_S = 10.0
BODY_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Limits:
    max_connections: int = MAX_CONNECTIONS
    header_timeout_s: float = HEADER_TIMEOUT_S
    body_timeout_s: float = BODY_TIMEOUT_S


class HttpServer:
    def __init__(self, app, listen: str | Path, *, limits: Limits = Limits(), graceful_s: float = 10):
        """`listen`: `HOST:PORT`, or the Path of a Unix socket only this user can connect to."""
        self._unix_path = listen if isinstance(listen, Path) else None
        if self._unix_path is not None:
            self.socket, self.address = owner_only_listener(listen), str(listen)
        else:
            host, port = parse_listen(listen)
            self.socket = listening_socket(host, port)
            bound_port = self.socket.getsockname()[1]
            self.address = f"[{host}]:{bound_port}" if ":" in host else f"{host}:{bound_port}"
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", server_header=False,
            http=type("GuardedH11", (_GuardedH11,), {"limits": limits}),
            ws="none",  # an upgraded connection would leave the guard behind
            timeout_graceful_shutdown=graceful_s,
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [self.socket]}, name=f"http {self.address}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()
        deadline = time.monotonic() + START_TIMEOUT_S
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the HTTP server on {self.address} did not start")
            time.sleep(0.01)

    def stop(self) -> None:
        """Stop accepting; requests in flight finish (within the graceful period)."""
        self._server.should_exit = True
        self._thread.join()
        self.socket.close()
        if self._unix_path is not None:
            self._unix_path.unlink(missing_ok=True)


class _GuardedH11(H11Protocol):
    """uvicorn's HTTP/1.1 protocol, with the limits of `Limits`. h11 says what the connection waits
    for from the client: a request head (IDLE), a body (SEND_BODY), or nothing while the answer is
    being made; each wait has its deadline, and one missed closes the connection."""

    limits: Limits  # of the server, set on the subclass it makes

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._waiting_for: object = None  # the h11 state whose deadline is armed
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            transport.close()
            return
        self._follow()

    def connection_lost(self, exc: Exception | None) -> None:
        self._arm(None)
        super().connection_lost(exc)

    def handle_events(self) -> None:
        super().handle_events()
        self._follow()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._follow()

    def _follow(self) -> None:
        state = self.conn.their_state
        if self.transport.is_closing() or state not in (h11.IDLE, h11.SEND_BODY):
            state = None
        if state is not self._waiting_for:
            self._arm(state)

    def _arm(self, state) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        self._waiting_for = state
        if state is not None:
            timeout = self.limits.header_timeout_s if state is h11.IDLE else self.limits.body_timeout_s
            # abort, not close: a client that does not read would keep close() waiting for the
            # answer to leave.
            self._deadline = self.loop.call_later(timeout, self.transport.abort)


def bearer_matches(authorization: str | None, token: str | None) -> bool:
    """An `Authorization: Bearer TOKEN` header (or gRPC metadata) that names the token, when one is
    set. The scheme's name is case-insensitive (RFC 7235) and one or more spaces follow it (RFC
    6750); the token is compared in constant time, so the time taken tells nothing of it."""
    if token is None:
        return True
    scheme, _, credentials = (authorization or "").partition(" ")
    return scheme.lower() == "bearer" and hmac.compare_digest(credentials.lstrip(" ").encode(), token.encode())
