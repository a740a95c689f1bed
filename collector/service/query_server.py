"""The collector's query endpoint: read commands run here while the collector holds the database.

A loopback HTTP endpoint, `POST /query/<name>` with the query's parameters as JSON, answered with
the query's result as JSON (queries.py runs the same functions a command runs on its own). Each
query gets a connection of its own (a DuckDB cursor on the collector's database), so it reads one
consistent state while the writer goes on committing, and its temporary tables are its own. The
address and a random token, which every query must present, are written to `<db>.collector.json`,
readable by the collector's user only.
"""

from __future__ import annotations

import asyncio
import os
import secrets
from pathlib import Path
from typing import Callable

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..queries import QUERIES, run_query
from ..store import Store
from .http_server import bearer_matches
from .remote import endpoint_file


def new_token() -> str:
    return secrets.token_urlsafe(32)


# Queries run at once, at most; the others wait their turn in the event loop, holding no thread.
# Each query may take every core and much of DuckDB's memory budget, both of which the writer
# shares: intake keeps priority over reads. Two, so that a quick lookup need not wait for a long
# `coverage` alone.
MAX_READS = 2


def query_app(connect: Callable[[], Store], token: str) -> Starlette:
    reads = asyncio.Semaphore(MAX_READS)

    async def query(request: Request) -> Response:
        if not bearer_matches(request.headers.get("authorization"), token):
            return _error(401, "a bearer token is required")
        name = request.path_params["name"]
        if name not in QUERIES:
            return _error(404, f"no query named {name!r}")
        try:
            params = orjson.loads(await request.body())
        except orjson.JSONDecodeError as e:
            return _error(400, f"parameters are not JSON: {e}")
        if not isinstance(params, dict):
            return _error(400, "parameters must be a JSON object")
        try:
            async with reads:
                result = await run_in_threadpool(_run, connect, name, params)
        except Exception as e:  # noqa: BLE001 - the command shows the reason on one line
            return _error(500, f"{type(e).__name__}: {e}")
        return Response(orjson.dumps(result), media_type="application/json")

    return Starlette(routes=[Route("/query/{name}", query, methods=["POST"])])


def _run(connect: Callable[[], Store], name: str, params: dict):
    with connect() as store:
        return run_query(store, name, params)


def _error(status: int, text: str) -> Response:
    return Response(orjson.dumps({"error": text}), status, media_type="application/json")


def write_endpoint_file(db: Path, url: str, token: str) -> Path:
    """Write `<db>.collector.json` (mode 0600) in one step: a reader sees all of it or none."""
    path = endpoint_file(db)
    partial = path.with_name(f".{path.name}.partial")  # hidden: a watched folder does not read it
    partial.unlink(missing_ok=True)
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(orjson.dumps({"url": url, "token": token}))
    os.replace(partial, path)
    return path
