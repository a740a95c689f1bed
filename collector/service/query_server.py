"""The collector's query endpoint: read commands run here while the collector holds the database.

An HTTP endpoint, `POST /query/<name>` with the query's parameters as JSON, answered with the
query's result as JSON (queries.py runs the same functions a command runs on its own). Each query
gets a connection of its own (a DuckDB cursor on the collector's database), so it reads one
consistent state while the writer goes on committing, and its temporary tables are its own. It is
served on a Unix socket beside the database, `<db>.collector.sock` (remote.query_socket), which
only the collector's user can connect to: no other user can reach it, so none can hold its
connections and keep the owner's commands waiting.
"""

from __future__ import annotations

import asyncio
from typing import Callable

import orjson
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import Route

from ..queries import QUERIES, BadParameters, check_parameters, run_query
from ..store import Store
from .otlp import Undecodable
from .otlp_http import TooLarge, read_body

# No command sends more: one argument of a command line holds at most 128 KiB.
MAX_PARAMETERS = 1 << 20


# Queries run at once, at most; the others wait their turn in the event loop, holding no thread.
# Each query may take every core and much of DuckDB's memory budget, both of which the writer
# shares: intake keeps priority over reads. Two, so that a quick lookup need not wait for a long
# `coverage` alone.
MAX_READS = 2


def query_app(connect: Callable[[], Store]) -> Starlette:
    reads = asyncio.Semaphore(MAX_READS)

    async def query(request: Request) -> Response:
        name = request.path_params["name"]
        if name not in QUERIES:
            return _error(404, f"no query named {name!r}")
        try:
            # The size alone bounds parameters; they are not weighed against an intake budget.
            params = orjson.loads(await read_body(request, MAX_PARAMETERS, lambda size: None))
        except TooLarge as e:
            return _error(413, f"{name}: {e}")
        except Undecodable as e:
            return _error(400, f"{name}: {e}")
        except orjson.JSONDecodeError as e:
            return _error(400, f"{name}: parameters are not JSON: {e}")
        except ClientDisconnect:
            return Response(status_code=400)  # no one is left to read it
        if not isinstance(params, dict):
            return _error(400, f"{name}: parameters must be a JSON object")
        try:
            check_parameters(name, params)
        except BadParameters as e:
            return _error(400, str(e))
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

