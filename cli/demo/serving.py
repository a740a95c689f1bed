"""What the router and the workers of the demo deployment serve alike: their API behind
TraceJoinMiddleware, which writes trace-join's lines to `tracejoin/<role>-<pid>.jsonl` and its
spans to `otlp/tracejoin-<role>-<pid>.jsonl` in the output folder, and a `GET /health` outside the
middleware, since the deployment's readiness polls are not requests anyone will look up."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Mount, Route

from tracejoin.middleware import TraceJoinMiddleware


def traced_app(routes: Sequence[BaseRoute], *, role: str, service: str, out: Path, lifespan: Any) -> Starlette:
    (out / "tracejoin").mkdir(parents=True, exist_ok=True)
    (out / "otlp").mkdir(parents=True, exist_ok=True)
    name = f"{role}-{os.getpid()}.jsonl"
    traced = TraceJoinMiddleware(Starlette(routes=routes), role=role, service=service,
                                 log=str(out / "tracejoin" / name), otlp_file=str(out / "otlp" / f"tracejoin-{name}"))
    return Starlette(routes=[Route("/health", _health), Mount("", app=traced)], lifespan=lifespan)


async def _health(request: Request) -> Response:
    return PlainTextResponse("")
