"""An ASGI app served by uvicorn on a thread, for the collector's HTTP endpoints (OTLP/HTTP, queries).

The socket is bound here, before uvicorn starts, so port 0 gives an ephemeral port the caller can
announce, and a port in use fails at once with a clear error.
"""

from __future__ import annotations

import hmac
import socket
import threading
import time

import uvicorn

from tracejoin.middleware.proxy import parse_listen

START_TIMEOUT_S = 10


class HttpServer:
    def __init__(self, app, listen: str, *, limit_concurrency: int | None = None, graceful_s: float = 10):
        host, port = parse_listen(listen)
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family)
        bound_port = self.socket.getsockname()[1]
        self.address = f"[{host}]:{bound_port}" if family == socket.AF_INET6 else f"{host}:{bound_port}"
        config = uvicorn.Config(
            app, log_level="warning", access_log=False, lifespan="off", server_header=False,
            # Beyond this many connections at once uvicorn answers 503: requests in memory stay bounded.
            limit_concurrency=limit_concurrency,
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


def bearer_matches(authorization: str | None, token: str | None) -> bool:
    """An `Authorization: Bearer TOKEN` header (or gRPC metadata) that names the token, when one is set."""
    return token is None or hmac.compare_digest((authorization or "").encode(), f"Bearer {token}".encode())
