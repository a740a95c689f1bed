"""What the router and the workers of the demo deployment serve alike: their API behind
TraceJoinMiddleware, which writes trace-join's lines to `tracejoin/<role>-<pid>.jsonl` and its
spans to `otlp/tracejoin-<role>-<pid>.jsonl` in the output folder, and a `GET /health` outside the
middleware, since the deployment's readiness polls are not requests anyone will look up; and how a
router passes a server's reply on; and how a simulated engine's server is made and run."""

from __future__ import annotations

import argparse
import contextlib
import os
import socket
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route

from tracejoin.middleware import TraceJoinMiddleware



GRACEFUL_SHUTDOWN_S = 2


def traced_app(routes: Sequence[BaseRoute], *, role: str, service: str, out: Path, lifespan: Any) -> Starlette:
    (out / "tracejoin").mkdir(parents=True, exist_ok=True)
    (out / "otlp").mkdir(parents=True, exist_ok=True)
    name = f"{role}-{os.getpid()}.jsonl"
    traced = TraceJoinMiddleware(Starlette(routes=routes), role=role, service=service,
                                 log=str(out / "tracejoin" / name), otlp_file=str(out / "otlp" / f"tracejoin-{name}"))
    return Starlette(routes=[Route("/health", health), Mount("", app=traced)], lifespan=lifespan)


async def health(request: Request) -> Response:
    return PlainTextResponse("")


async def relayed(upstream: httpx.Response) -> Response:
    """A server's reply (sent with `stream=True`) passed on to the client: an error whole, anything
    else as it arrives. If the client leaves, the upstream reply is closed, so its server stops."""
    if upstream.is_error:
        content = await upstream.aread()
        await upstream.aclose()
        return Response(content, status_code=upstream.status_code, media_type="application/json")

    async def chunks() -> AsyncIterator[bytes]:
        try:
            async for chunk in upstream.aiter_bytes():
                yield chunk
        finally:
            await upstream.aclose()

    return StreamingResponse(chunks(), status_code=upstream.status_code, media_type=upstream.headers.get("content-type"))


def engine_app(paths, serve, shutdown: Callable[[], None]) -> Starlette:
    """A simulated engine server: `serve` answering POSTs on `paths`, `GET /health`, and `shutdown`
    (its span exporter's) called as it stops."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        shutdown()

    routes = [Route(path, serve, methods=["POST"]) for path in paths]
    return Starlette(routes=[Route("/health", health), *routes], lifespan=lifespan)


def run_engine_process(prog: str, entry: str, make_entry: Callable, make_server: Callable,
                       log_of: Callable[[Path, str], Path], argv: list[str] | None = None) -> None:
    """One process of a simulated engine's deployment:

        python -m PROG prefill|decode|ENTRY --fd N --out DIR --name NAME [--prefill H:P]... [--decode H:P]...

    The entry (the engine's router or proxy) is `make_entry(out, prefill, decode)`; a server, whose
    stdout and stderr go to `log_of(out, name)`, `make_server(role, out, name, port)`. Both return the
    ASGI app served on the listening socket `--fd`, which the deployment opened."""
    parser = argparse.ArgumentParser(prog=f"python -m {prog}")
    parser.add_argument("role", choices=("prefill", "decode", entry))
    parser.add_argument("--fd", type=int, required=True, help="a listening socket inherited from the parent")
    parser.add_argument("--out", type=Path, required=True, help="the demo's output folder")
    parser.add_argument("--name", required=True, help="the server's service name")
    parser.add_argument("--prefill", action="append", default=[], help=f"a prefill server ({entry} only)")
    parser.add_argument("--decode", action="append", default=[], help=f"a decode server ({entry} only)")
    args = parser.parse_args(argv)
    sock = socket.socket(fileno=args.fd)
    if args.role == entry:
        app = make_entry(args.out, args.prefill, args.decode)
    else:
        capture_output(log_of(args.out, args.name))
        app = make_server(args.role, args.out, args.name, sock.getsockname()[1])
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=GRACEFUL_SHUTDOWN_S)
    uvicorn.Server(config).run(sockets=[sock])


def capture_output(path: Path) -> None:
    """`exec >>path 2>&1`: what the process and its libraries print lands in one file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    log = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
