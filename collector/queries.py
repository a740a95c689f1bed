"""The read queries behind `lookup`, `requests`, `coverage` and `quarantine`, by name, and `files`,
how far the store has read each file (what `trace-join demo --dynamo` waits on before it stops the
collector).

Each takes a store and JSON parameters and returns JSON-ready data. The command runs it on the
database itself when it can open it; while `trace-join collect` holds the database, the collector
runs the same function under its own connection (service/query_server.py) and sends the result back
(service/remote.py). Either way the command prints the same.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import orjson

from .lookup import DEFAULT_LIMIT, RECORDS_SHOWN, Window, carried_by_many, lookup
from .store import Store, StoreError
from .times import INT64_MAX, INT64_MIN


def _lookup(store: Store, p: dict) -> dict:
    return lookup(store, p["id"], Window(p.get("since_ns"), p.get("until_ns")), p.get("limit", DEFAULT_LIMIT),
                  p.get("records", RECORDS_SHOWN))


def _requests(store: Store, p: dict) -> list[dict]:
    from .request_list import RequestFilter, list_requests

    return list_requests(store, RequestFilter(**p))


def _coverage(store: Store, p: dict) -> dict:
    from .coverage import coverage

    return coverage(store, p.get("since_ns"), p.get("until_ns"))


def _quarantine(store: Store, p: dict) -> list[dict]:
    return [dict(zip(("path", "line", "offset", "reason", "excerpt"), row)) for row in store.quarantined(p["limit"])]


def _files(store: Store, p: dict) -> list[dict]:
    """Each file read into the store, under the path it was last read from, and the byte offset up
    to which its records are committed (`read_to`; of a .gz file, in its decompressed bytes). Of
    several origins under one path (a file truncated and begun again), the one read last."""
    cur = store.con.execute(
        "SELECT path, arg_max(source, updated), arg_max(consumed, updated) FROM origins "
        "WHERE head_len > 0 GROUP BY path ORDER BY path"  # receivers' origins have no file head
    )
    return [{"path": path, "source": source, "read_to": read_to} for path, source, read_to in cur.fetchall()]


QUERIES: dict[str, Callable[[Store, dict], Any]] = {
    "lookup": _lookup,
    "requests": _requests,
    "coverage": _coverage,
    "quarantine": _quarantine,
    "files": _files,
}


class BadParameters(ValueError):
    """Parameters a query does not take: unknown, missing, of another type or out of range."""


@dataclass(frozen=True)
class _Kind:
    what: str
    fits: Callable[[Any], bool]


def _int64(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and INT64_MIN <= value <= INT64_MAX


_TEXT = _Kind("a string", lambda v: isinstance(v, str))
_TEXT_OR_NULL = _Kind("a string or null", lambda v: v is None or isinstance(v, str))
_FLAG = _Kind("true or false", lambda v: isinstance(v, bool))
_TIME = _Kind("ns since the epoch in 64 bits, or null", lambda v: v is None or _int64(v))
_COUNT = _Kind("a whole number, 0 or more", lambda v: _int64(v) and v >= 0)
_POSITIVE = _Kind("a whole number, 1 or more", lambda v: _int64(v) and v >= 1)

# The parameters each query takes, as the commands send them: what the query endpoint accepts
# from a client (service/query_server.py).
PARAMETERS: dict[str, dict[str, _Kind]] = {
    "lookup": {"id": _TEXT, "since_ns": _TIME, "until_ns": _TIME, "limit": _COUNT, "records": _POSITIVE},
    "requests": {"slowest": _FLAG, "errors": _FLAG, "worker": _TEXT_OR_NULL, "route": _TEXT_OR_NULL,
                 "since_ns": _TIME, "until_ns": _TIME, "limit": _COUNT},
    "coverage": {"since_ns": _TIME, "until_ns": _TIME},
    "quarantine": {"limit": _COUNT},
    "files": {},
}
REQUIRED = {"lookup": ("id",), "quarantine": ("limit",)}


def check_parameters(name: str, params: dict) -> None:
    """BadParameters, in one line, unless `params` are parameters the query `name` takes."""
    takes = PARAMETERS[name]
    for key, value in params.items():
        if key not in takes:
            raise BadParameters(f"{name} takes no parameter {key!r} (it takes {', '.join(takes) or 'none'})")
        if not takes[key].fits(value):
            shown = orjson.dumps(value).decode()
            shown = shown if len(shown) <= 40 else f"{shown[:40]}…"
            raise BadParameters(f"{name}: {key!r} must be {takes[key].what}, not {shown}")
    missing = [key for key in REQUIRED.get(name, ()) if key not in params]
    if missing:
        raise BadParameters(f"{name} needs {', '.join(map(repr, missing))}")


def run_query(store: Store, name: str, params: dict) -> Any:
    if name == "files" and store.shared:  # the files' positions as a DuckDB store keeps them
        raise StoreError("`files` runs on a DuckDB store only")
    return QUERIES[name](store, params)


# Queries that read the requests tables: on a store open for writing they bring them up to date
# first (requests.build_requests), and keep them for the next reader.
READ_REQUESTS = {"requests", "coverage"}


def stores_first(store: Store, name: str, params: dict) -> bool:
    """Whether the query, run on this store opened for writing, would store something first: the
    requests tables, lagging the records (a lookup reads them for an id many records carry)."""
    if not store.keeps_requests or (name not in READ_REQUESTS and not (name == "lookup" and carried_by_many(store, params["id"]))):
        return False
    from .requests import requests_current

    return not requests_current(store)
