"""`lookup`: any id to the requests it names, as the JSON object of `lookup --json`
(docs/quickstart.md)."""

from __future__ import annotations

from dataclasses import dataclass

import orjson

from .graph import IdGraph
from .ids import (
    CTX_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, INTERNAL_ID, REPLY_ID, TRACE_ID, X_REQUEST_ID,
    implied_by_query,
)
from .times import ns_to_iso
from .store import Store

# When an id matches several kinds, the lookup is said to be by the strongest.
_KIND_ORDER = [REPLY_ID, INTERNAL_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, CTX_REQUEST_ID, X_REQUEST_ID, TRACE_ID]
# `lookup --json`'s id kinds have no ctx_request_id: a lookup by one is reported as by an engine request
# id, the kind it is closest to (TensorRT-LLM's context server issues it).
_REPORTED_KIND = {CTX_REQUEST_ID: ENGINE_REQUEST_ID}
_SHOWN_ID_KINDS = [REPLY_ID, INTERNAL_ID, X_REQUEST_ID, DISAGG_REQUEST_ID, TRACE_ID]
# Attributes worth a glance in a record's one-line summary.
_SUMMARY_ATTRS = (
    "route", "method", "endpoint", "model", "error_type", "error_detail", "worker_id",
    "disagg_queue_ms", "queue_ms", "ttft_ms", "kv_transfer_ms", "ttfb_ms", "avg_itl_ms",
    "input_tokens", "output_tokens", "disconnected", "header", "upstream_status", "finish_reason",
)


@dataclass
class Window:
    since_ns: int | None = None
    until_ns: int | None = None

    def contains(self, t: int | None) -> bool:
        if self.since_ns is None and self.until_ns is None:
            return True
        if t is None:
            return False
        return (self.since_ns is None or t >= self.since_ns) and (self.until_ns is None or t <= self.until_ns)

    def as_json(self) -> dict:
        return {
            "since": ns_to_iso(self.since_ns) if self.since_ns is not None else None,
            "until": ns_to_iso(self.until_ns) if self.until_ns is not None else None,
        }


def lookup(store: Store, query: str, window: Window | None = None) -> dict:
    query = query.strip()
    window = window or Window()
    graph = IdGraph(store)
    implied = implied_by_query(query)
    graph.rows_for([query, *(value for _, value in implied)])  # one read of the index for all of them
    direct = graph.carriers([query])
    id_kind = _strongest({kind for _, kind in direct})
    matches = list(direct)
    for kind, value in implied:
        matches += [(r, k) for r, k in graph.carriers([value], kinds=(kind,))]
    if id_kind is None and matches:
        id_kind = _strongest({k for _, k in matches}) if not implied else REPLY_ID
    seeds = sorted({r for r, _ in matches})
    graph.load(seeds)
    seeds = [r for r in seeds if window.contains(graph.nodes[r].time_ns)]
    requests = graph.requests(seeds) if seeds else []
    return {
        "query": query,
        "id_kind": id_kind or _guess_kind(query),
        "window": window.as_json(),
        "requests": [_request_json(graph, q) for q in requests],
        "warnings": graph.warnings,
    }


def _strongest(kinds: set[str]) -> str | None:
    for kind in _KIND_ORDER:
        if kind in kinds:
            return _REPORTED_KIND.get(kind, kind)
    return None


def _guess_kind(query: str) -> str:
    """What a query that matched nothing looks like, for the report."""
    if implied_by_query(query) or query.startswith(("chatcmpl-", "cmpl-", "resp_", "msg_")):
        return REPLY_ID
    if len(query) == 32 and all(c in "0123456789abcdefABCDEF" for c in query):
        return TRACE_ID
    if query.isdigit():
        return DISAGG_REQUEST_ID if int(query) >= 1 << 40 else ENGINE_REQUEST_ID
    if len(query) == 36 and query.count("-") == 4:
        return INTERNAL_ID
    return X_REQUEST_ID


def _request_json(graph: IdGraph, request) -> dict:
    nodes = [graph.nodes[r] for r in request.record_ids]
    ids: dict[str, list] = {k: [] for k in _SHOWN_ID_KINDS}
    engine: list[dict] = []
    for n in sorted(nodes, key=lambda n: (n.time_ns or 0, n.record_id)):
        for kind, value, scope in n.ids:
            if kind == ENGINE_REQUEST_ID:
                entry = {"worker": scope or n.worker, "id": value}
                if entry not in engine:
                    engine.append(entry)
            elif kind in ids and value not in ids[kind]:
                ids[kind].append(value)
    ids[ENGINE_REQUEST_ID] = engine

    rows = _record_rows(graph, request.record_ids)
    _place_steady_times(rows)
    records = []
    workers: dict[str, dict] = {}
    for row in rows:
        rec = {
            "time": ns_to_iso(row["time_ns"]) if row["time_ns"] is not None else None,
            "source": row["source"],
            "kind": row["kind"],
            "worker": row["worker"],
            "role": row["role"],
            "summary": _summary(row),
            "name": row["name"],
            "level": row["level"],
            "status": row["status"],
            "duration_ms": row["duration_ns"] / 1e6 if row["duration_ns"] is not None else None,
            "trace_id": row["trace_id"],
            "span_id": row["span_id"],
            "parent_span_id": row["parent_span_id"],
            "attrs": row["attrs"],
            "origin": _origin(graph, row),
        }
        if row["record_id"] in request.ambiguous:
            rec["ambiguous"] = True
        if row.get("anchor"):
            rec["clock"] = f"steady {row['steady_s']:.6f} s, placed by {row['anchor']}"
        elif row["time_ns"] is None and row["steady_s"] is not None:
            rec["clock"] = f"steady {row['steady_s']:.6f} s, no wall-clock anchor in this request"
        records.append(rec)
        w = workers.setdefault(row["worker"] or "?", {"worker": row["worker"], "role": row["role"], "records": 0})
        w["role"] = w["role"] or row["role"]  # a log line may not know the role its worker's spans state
        w["records"] += 1
    return {"ids": ids, "workers": list(workers.values()), "records": records}


def _origin(graph: IdGraph, row: dict) -> dict:
    """Where the record was read: the file and the byte its line starts at (in the decompressed
    stream of a .gz), or the receiver and the number of the body it came in; `seq`, the record's
    place among those of its line or body."""
    path, is_file = graph.origins.get(row["origin_id"], (None, True))
    return {"path": path, "kind": "file" if is_file else "received", "offset": row["offset"], "seq": row["seq"]}


def _record_rows(graph: IdGraph, record_ids) -> list[dict]:
    """The records as rows to show, in the order they were recorded (the walk has read them),
    each under its worker as settled within its request."""
    rows = [dict(graph.nodes[r].record) for r in record_ids]
    for row in rows:
        row["attrs"] = orjson.loads(row["attrs"]) if row["attrs"] else {}
    rows.sort(key=lambda r: (r["time_ns"] is None, r["time_ns"] or 0, r["origin_id"], r["offset"], r["seq"]))
    return rows


def _place_steady_times(rows: list[dict]) -> None:
    """Put records that only have steady-clock seconds (TensorRT-LLM perf metrics) on the wall
    clock (docs/id-model.md, rule 5). The anchor is the first wall-clock record of the same
    process in this request (its span or request.start, at the same HTTP arrival the perf
    record's arrival time marks), else the entry server's (a disaggregated server brings its
    workers' steady clocks into its own). Without one the record keeps its steady time only and
    its phase durations still show."""
    steady = [r for r in rows if r["time_ns"] is None and r["steady_s"] is not None]
    if not steady:
        return

    def process(worker):
        return worker.rsplit("@", 1)[-1] if worker else None

    anchors: dict[str, tuple[int, str]] = {}
    for worker in {process(r["worker"]) for r in steady}:
        wall = [r for r in rows if r["time_ns"] is not None and process(r["worker"]) == worker]
        arrival = min(r["steady_s"] for r in steady if process(r["worker"]) == worker)
        if wall:
            first = min(wall, key=lambda r: r["time_ns"])
            anchors[worker] = (first["time_ns"] - round(arrival * 1e9), f"{first['name']} on {first['worker']}")
    entry_roles = ("router", "frontend", "proxy", "agg")
    fallback = next((anchors[process(r["worker"])] for r in steady
                     if r["role"] in entry_roles and process(r["worker"]) in anchors), None)
    fallback = fallback or (anchors[min(anchors)] if anchors else None)  # any, but the same every time
    for r in steady:
        anchor = anchors.get(process(r["worker"])) or fallback
        if anchor:
            r["time_ns"] = round(r["steady_s"] * 1e9) + anchor[0]
            r["anchor"] = anchor[1]
    rows.sort(key=lambda r: (r["time_ns"] is None, r["time_ns"] or 0, r["steady_s"] or 0))


def _summary(row: dict) -> str:
    parts = [row["name"] or row["kind"]]
    level = (row["level"] or "").upper()
    if level in ("WARN", "WARNING", "ERROR", "CRITICAL", "FATAL"):
        parts.insert(0, level)
    if row["status"]:
        parts.append(f"status={row['status']}")
    if row["duration_ns"] is not None:
        parts.append(f"{row['duration_ns'] / 1e6:.1f} ms")
    attrs = row["attrs"]
    parts += [f"{k}={attrs[k]}" for k in _SUMMARY_ATTRS if attrs.get(k) not in (None, "")]
    return " · ".join(str(p) for p in parts)

