"""`requests`: list and filter the store's requests (built by requests.py)."""

from __future__ import annotations

from dataclasses import dataclass

from .record_contract import http_status_number
from .requests import build_requests
from .store import Store
from .times import ns_to_iso

_COLUMNS = (
    "request_id", "start_ns", "duration_ms", "ttft_ms", "queue_ms", "kv_transfer_ms", "http_status",
    "error", "disconnected", "route", "endpoint", "entry_worker", "workers", "roles", "reply_id",
    "reply_ids", "internal_ids", "x_request_ids", "disagg_request_ids", "trace_ids", "records", "collided",
)


@dataclass
class RequestFilter:
    slowest: bool = False
    errors: bool = False
    worker: str | None = None
    route: str | None = None
    since_ns: int | None = None
    until_ns: int | None = None
    limit: int = 20  # 0: all


def list_requests(store: Store, wanted: RequestFilter) -> list[dict]:
    """Requests that started at an entry server (a router, frontend or proxy), filtered."""
    since_ns, until_ns = store.requests_window(wanted.since_ns, wanted.until_ns)
    build_requests(store)
    where, params = ["has_entry"], []
    if wanted.errors:
        where.append("(error OR coalesce(disconnected, false))")
    if wanted.worker:
        where.append("contains(array_to_string(workers, ' '), ?)")
        params.append(wanted.worker)
    if wanted.route:
        where.append("(contains(coalesce(route, ''), ?) OR contains(coalesce(endpoint, ''), ?))")
        params += [wanted.route, wanted.route]
    if since_ns is not None:
        where.append("start_ns >= ?")
        params.append(since_ns)
    if until_ns is not None:
        where.append("start_ns <= ?")
        params.append(until_ns)
    order = "duration_ms DESC NULLS LAST" if wanted.slowest else "start_ns DESC"
    return _rows(store.con.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM request_summary WHERE {' AND '.join(where)} "
        f"ORDER BY {order}, request_id" + (" LIMIT ?" if wanted.limit else ""),
        [*params, wanted.limit] if wanted.limit else params,
    ))


def summaries(store: Store, among: str, params: list) -> list[dict]:
    """The summaries (temp request_summary: of the whole store, or of the requests a lookup
    grouped) of the requests `among` selects (SQL, with its parameters), first started first, as
    `requests` lists them."""
    return _rows(store.con.execute(
        f"SELECT {', '.join(_COLUMNS)} FROM request_summary WHERE request_id IN ({among}) "
        "ORDER BY start_ns NULLS LAST, request_id", params))


def _rows(cursor) -> list[dict]:
    rows = []
    for values in cursor.fetchall():
        row = dict(zip(_COLUMNS, values))
        row["start"] = ns_to_iso(row.pop("start_ns")) if row["start_ns"] is not None else None
        for key in ("workers", "roles", "reply_ids", "internal_ids", "x_request_ids", "disagg_request_ids", "trace_ids"):
            row[key] = row[key] or []
        row["disconnected"] = bool(row["disconnected"])
        row["http_status"] = http_status_number(row["http_status"])
        rows.append(row)
    return rows
