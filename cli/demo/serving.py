"""What the router and the workers of the demo deployment serve alike: their API behind
TraceJoinMiddleware, which writes trace-join's lines to `tracejoin/<role>-<pid>.jsonl` and its
spans to `otlp/tracejoin-<role>-<pid>.jsonl` in the output folder, and a `GET /health` outside the
middleware, since the deployment's readiness polls are not requests anyone will look up; and how a
router passes a server's reply on."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import BaseRoute, Mount, Route

from tracejoin.middleware import TraceJoinMiddleware


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
