"""`lookup`: any id to the requests it names, as the JSON object of `lookup --json`
(docs/quickstart.md)."""

from __future__ import annotations

import heapq
import re
from dataclasses import dataclass

import orjson

from . import error_lines, local_time, record_contract
from .record_contract import http_status_number
from .graph import NOT_LOOKED_UP, IdGraph
from .id_index import found_sql
from .ids import (
    BOOTSTRAP_ROOM, CTX_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, ENTRY_ROLES, INTERNAL_ID, PREFILL_ROLES, REPLY_ID,
    ROUTER_REQUEST_ID, SESSION_ID, TOOL_CALL_ID, TRACE_ID, VLLM_ENGINE_SCOPE, X_REQUEST_ID,
    REPLY_PREFIXES, implied_by_query, pasted_id,
)
from .request_list import summaries
from .requests import build_requests, requests_current, summarize_grouped, update_requests
from .times import SECOND_NS, SHOWN_ORDER_SQL, extent, failure_known_ns, known_to_ns, ns_to_iso, shown_order
from .store import Store
from .tokens import TOKEN

# When an id matches several kinds, the lookup is said to be by the strongest.
_KIND_ORDER = [REPLY_ID, INTERNAL_ID, DISAGG_REQUEST_ID, BOOTSTRAP_ROOM, ENGINE_REQUEST_ID, CTX_REQUEST_ID,
               ROUTER_REQUEST_ID, X_REQUEST_ID, TOOL_CALL_ID, SESSION_ID, TRACE_ID, TOKEN]
# `lookup --json`'s id kinds have no ctx_request_id or router_request_id: a lookup by one is reported
# as by an engine request id, the kind they are closest to (a number one process issued).
_REPORTED_KIND = {CTX_REQUEST_ID: ENGINE_REQUEST_ID, ROUTER_REQUEST_ID: ENGINE_REQUEST_ID}
_SHOWN_ID_KINDS = [REPLY_ID, INTERNAL_ID, X_REQUEST_ID, DISAGG_REQUEST_ID, BOOTSTRAP_ROOM, TRACE_ID]
# Attributes worth a glance in a record's one-line summary.
_SUMMARY_ATTRS = (
    "route", "method", "endpoint", "model", "error_type", "error_detail", "error", "error.type", "worker_id",
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

    def sql(self, column: str) -> str:
        """`contains` as SQL over a column of ns (NULL, not false, for a time unknown)."""
        bounds = ([f"{column} >= {int(self.since_ns)}"] if self.since_ns is not None else []) + \
                 ([f"{column} <= {int(self.until_ns)}"] if self.until_ns is not None else [])
        return " AND ".join(bounds) or "true"

    def as_json(self) -> dict:
        return {
            "since": ns_to_iso(self.since_ns) if self.since_ns is not None else None,
            "until": ns_to_iso(self.until_ns) if self.until_ns is not None else None,
        }


DEFAULT_LIMIT = 10  # requests shown in full, the first started first; the summary lists them all
# At most this many requests are shown in full, whatever `limit` asks (0 asks for all): an id a
# whole session's requests share would otherwise walk and show every one of them. The summary still
# lists them all, each with its own ids to look it up by.
MOST_SHOWN = 100
RECORDS_SHOWN = 1000  # records shown of each request, the first recorded first; it says how many it has
# Past this many records carrying the id (a label such as an x-request-id shared by a whole agent
# session), the requests are read from the stored requests tables when those hold every record, and
# only the first `limit` are walked; below it, the walk costs less than reading those tables.
MANY_CARRIERS = 200


def lookup(store: Store, query: str, window: Window | None = None, limit: int = DEFAULT_LIMIT,
           records: int = RECORDS_SHOWN) -> dict:
    """The requests an id names: how many (`matched`); when more than one, `summary`, one row each
    (as `requests` lists them) in the order they started; `requests`, the first `limit` of them (all
    when 0), never more than MOST_SHOWN (`requests_cut` says when fewer are shown than asked for),
    each with its first `records` records (`records_total` and `records_cut` say how many it has).
    The query is read as pasted_id reads it."""
    query = pasted_id(query)
    limit = min(limit or MOST_SHOWN, MOST_SHOWN)
    window = window or Window()
    graph = IdGraph(store)
    wanted = wanted_ids(query)
    many = len(graph.found([value for value, _ in wanted])) > MANY_CARRIERS
    if many and not store.read_only:
        update_requests(store)  # and keep them for the next reader
    if many and requests_current(store):
        id_kinds, matched, summary, requests = _from_stored_requests(store, graph, wanted, window, limit)
    else:
        id_kinds, matched, summary, requests = _walked(store, graph, wanted, window, limit)
    direct_kinds, implied_kinds = id_kinds
    # found only by the ids the query implies: a reply id (Dynamo logs the UUID in chatcmpl-<uuid>),
    # or a client's id (vLLM's reply chatcmpl-<client's id>)
    id_kind = _strongest(set(direct_kinds)) or (
        (REPLY_ID if query.startswith(REPLY_PREFIXES) else X_REQUEST_ID) if implied_kinds else None)
    return {
        "query": query,
        "id_kind": id_kind or _guess_kind(query),
        "window": window.as_json(),
        "matched": matched,
        "summary": summary,
        "requests": [_request_json(graph, q, records) for q in requests],
        "requests_cut": len(requests) == MOST_SHOWN < matched,
        "warnings": graph.warnings,
    }


def wanted_ids(query: str) -> list[tuple[str, str | None]]:
    """(value, kind) of what a lookup looks for: the query (as pasted_id left it), as any kind of
    id, and the ids it implies (the UUID inside a Dynamo reply id), as their kind."""
    return [(query, None), *((value, kind) for kind, value in implied_by_query(query))]


def carried_by_many(store: Store, query: str) -> bool:
    """Whether more than MANY_CARRIERS records may carry what a lookup of the query looks for (by
    their keys in the index): the lookup then reads the stored requests tables, on a store that
    keeps them."""
    return store.keeps_requests and len(store.found([value for value, _ in wanted_ids(pasted_id(query))])) > MANY_CARRIERS


def _walked(store: Store, graph: IdGraph, wanted: list[tuple[str, str | None]], window: Window, limit: int):
    """The kinds the query and its implied ids were found as, how many requests the records
    carrying them belong to, their summary (when more than one), and the first `limit` of those
    requests: all walked."""
    graph.rows_for([value for value, _ in wanted])  # one read of the index for all of them
    (query, _), implied = wanted[0], wanted[1:]
    direct = graph.carriers([query])
    matches = list(direct)
    for value, kind in implied:
        matches += [(r, k) for r, k in graph.carriers([value], kinds=(kind,))]
    seeds = sorted({r for r, _ in matches})
    graph.load(seeds)
    seeds = [r for r in seeds if window.contains(graph.nodes[r].time_ns)]
    requests = graph.requests(seeds) if seeds else []
    summary = []
    if len(requests) > 1:  # of one, none: the build's summary costs a lookup of one request a third of its time
        summarize_grouped(store)
        summary = summaries(store, "SELECT unnest(?::BIGINT[])", [[q.request_id for q in requests]])
    kinds = ([k for _, k in direct], [k for _, k in matches[len(direct):]])  # as the query, as the ids it implies
    return kinds, len(requests), summary, _in_order_of(summary, requests)[:limit or None]


def _from_stored_requests(store: Store, graph: IdGraph, wanted: list[tuple[str, str | None]], window: Window,
                          limit: int):
    """As _walked, for an id many records carry: the requests they belong to from the stored
    requests tables, in SQL, and only the first `limit` walked, from their own records."""
    con = store.con
    found_as = " OR ".join(
        f"(i.value = ${n} AND i.kind " + (f"NOT IN {NOT_LOOKED_UP})" if kind is None else f"= '{kind}')")
        for n, (_, kind) in enumerate(wanted, 1))
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE lookup_carriers AS
        SELECT i.record_id, i.kind, i.value = $1 AS direct, m.request_id, {window.sql("r.time_ns")} AS in_window
        FROM record_ids i JOIN records r USING (record_id) JOIN request_records m USING (record_id)
        WHERE i.record_id IN ({found_sql(len(wanted))}) AND ({found_as})""", [value for value, _ in wanted])
    kinds = tuple([k for (k,) in con.execute(f"SELECT DISTINCT kind FROM lookup_carriers WHERE direct = {flag}").fetchall()]
                  for flag in ("true", "false"))
    build_requests(store)  # read-only and current: the stored tables under the names summaries reads
    summary = summaries(store, "SELECT request_id FROM lookup_carriers WHERE in_window", [])
    shown = [row["request_id"] for row in (summary[:limit] if limit else summary)]
    walked = [r for (r,) in con.execute("SELECT DISTINCT record_id FROM lookup_carriers WHERE in_window AND "
                                        "request_id IN (SELECT unnest(?::BIGINT[]))", [shown]).fetchall()]
    graph.load(walked)
    return kinds, len(summary), summary, _in_order_of(summary, graph.requests(walked) if walked else [])


def _in_order_of(summary: list[dict], requests: list) -> list:
    """The requests in the summary's order (a request the summary does not list, last)."""
    place = {row["request_id"]: i for i, row in enumerate(summary)}
    return sorted(requests, key=lambda q: place.get(q.request_id, len(place)))


def _strongest(kinds: set[str]) -> str | None:
    for kind in _KIND_ORDER:
        if kind in kinds:
            return _REPORTED_KIND.get(kind, kind)
    return None


def _guess_kind(query: str) -> str:
    """What a query that matched nothing looks like, for the report."""
    if query.startswith(REPLY_PREFIXES):
        return REPLY_ID
    if len(query) == 32 and all(c in "0123456789abcdefABCDEF" for c in query):
        return TRACE_ID
    if query.isdigit():
        return DISAGG_REQUEST_ID if int(query) >= 1 << 40 else ENGINE_REQUEST_ID
    if len(query) == 36 and query.count("-") == 4:
        return INTERNAL_ID
    return X_REQUEST_ID


def _request_json(graph: IdGraph, request, shown: int) -> dict:
    """The request's ids, workers, outcome, phases and its first `shown` records."""
    nodes = [graph.nodes[r] for r in request.record_ids]
    ids: dict[str, list] = {k: [] for k in _SHOWN_ID_KINDS}
    engine: list[dict] = []
    owners: dict[str, list] = {}  # vLLM engine id -> the records carrying it
    reply_roles: dict[str, set] = {}  # reply id -> the roles of the records carrying it
    for n in sorted(nodes, key=lambda n: (n.time_ns or 0, n.record_id)):
        for kind, value, scope in n.ids:
            if kind == ENGINE_REQUEST_ID:
                if scope == VLLM_ENGINE_SCOPE:
                    owners.setdefault(value, []).append(n)
                elif (entry := {"worker": scope or n.worker, "id": value}) not in engine:
                    engine.append(entry)
            elif kind in ids and value not in ids[kind]:
                ids[kind].append(value)
            if kind == REPLY_ID:
                reply_roles.setdefault(value, set()).add(n.role)
    # a reply id only the prefill leg's records carry is that leg's name for the request
    leg_names = [v for v, roles in reply_roles.items() if roles <= PREFILL_ROLES]
    if len(leg_names) < len(reply_roles):
        ids[REPLY_ID] = [v for v in ids[REPLY_ID] if v not in leg_names]
        ids[INTERNAL_ID] += [v for v in leg_names if v not in ids[INTERNAL_ID]]
    # A vLLM engine id is scoped to no process: it is shown on the process that ran it, the first
    # to name it other than a decode server naming its prefill's (`remote_request_id`).
    remote = {row["record_id"]: row["attrs"].get("remote_request_id")
              for row in graph.rows(n.record_id for carriers in owners.values() for n in carriers)}
    for value, carriers in owners.items():
        own = [n for n in carriers if remote[n.record_id] != value] or carriers
        engine.append({"worker": own[0].worker, "id": value})
    ids[ENGINE_REQUEST_ID] = engine

    first = _first_recorded(graph, request.record_ids, shown)
    rows = _shown_rows(graph, first)
    # How the request went (its outcome, first error and phases) is read from all of its records:
    # past those shown, from the ones that state what that reads (_telling_records), which all
    # come after the shown ones in the order they were recorded.
    cut = len(request.record_ids) > shown
    telling = _telling_records(graph.store, request.record_ids - set(first)) if cut else []
    told = rows + _shown_rows(graph, telling) if telling else rows
    origins = graph.origins({r["origin_id"] for r in rows} | {o["origin_id"] for r in rows for o in r["also"]})
    _warn_guessed_times(graph, rows, origins)
    records = []
    workers: dict[str, dict] = {}
    for row in rows:
        rec = {
            "time": _time_text(row),
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
            "failed": bool(row["failed"]),
            "origin": _origin(origins, row),
        }
        if "text" in row:
            rec.update(text=row["text"], lines=row["lines"], exception=row["exception"])
        if row.get("inferred"):
            rec["inferred"] = True
        if row.get("within"):
            rec["within"] = {"from": ns_to_iso(row["within"][0]), "until": ns_to_iso(row["within"][1])}
        if row["also"]:
            rec["also"] = [{"source": other["source"], "origin": _origin(origins, other)} for other in row["also"]]
            rec["summary"] += " · also from " + ", ".join(dict.fromkeys(other["source"] for other in row["also"]))
        if row["record_id"] in request.ambiguous or row.get("ambiguous"):
            rec["ambiguous"] = True
        if row.get("anchor"):
            rec["clock"] = f"steady {row['steady_s']:.6f} s, placed by {row['anchor']}"
        elif row.get("clock"):
            rec["clock"] = row["clock"]
        elif row["time_ns"] is None and row["steady_s"] is not None:
            rec["clock"] = f"steady {row['steady_s']:.6f} s, no wall-clock anchor in this request"
            rec["steady_s"] = row["steady_s"]
        records.append(rec)
        w = workers.setdefault(row["worker"] or "?", {"worker": row["worker"], "role": None, "role_from": None,
                                                         "records": 0})
        # a log line may not know the role its worker's spans state; what a process states of its
        # role outweighs what its name suggests, and the answer says which it is
        if row["role"] and (w["role"] is None or (w["role_from"] == "name" and not row["role_by_name"])):
            w["role"], w["role_from"] = row["role"], "name" if row["role_by_name"] else "stated"
        w["records"] += 1
    # The failure first known (failure_known_ns; a line known to its second, at the first moment it
    # can have been written); of two at once, the one that says why.
    failed = min((row for row in told if row["failed"]), default=None, key=lambda row: (
        row["time_ns"] is None, row["time_ns"] is not None and (row["within"][0] if row.get("within")
                                                                else failure_known_ns(row)),
        not row.get("exception")))
    first_error = None if failed is None else {
        "time": _time_text(failed),
        "worker": failed["worker"], "role": failed["role"],
        "text": " · ".join(dict.fromkeys(filter(None, (
            None if failed.get("exception") and failed["name"] == _TRACEBACK else failed["name"],
            failed["status"] and f"status={failed['status']}", failed["error_text"],
            failed.get("exception"), _exception(failed["attrs"])))))}
    return {"request_id": request.request_id, "ids": ids, "workers": list(workers.values()),
            "outcome": _outcome(told, first_error), "first_error": first_error, "phases": _phases(told),
            "records": records, "records_total": len(request.record_ids), "records_cut": cut}


_TRACEBACK = "Traceback (most recent call last):"


def _outcome(rows: list[dict], first_error: dict | None) -> dict:
    """How the request ended for its client: the HTTP status its entry server's records state it
    answered with, whether anything on its way failed, whether the client left first."""
    entry_workers = {row["worker"] for row in rows if row["entry"]}
    answered = [row["http_status"] for row in rows if row["http_status"] and row["worker"] in entry_workers]
    return {"http_status": http_status_number(max(answered, default=None)), "failed": first_error is not None,
            "client_left": any(row["disconnected"] for row in rows)}


def _phases(rows: list[dict]) -> list[dict]:
    """Where the request's time went, as its workers measured it (the record contract's facts):
    each phase a worker measured once, from the first record stating it. A phase begins when the
    worker took the request (when the record's duration began, `extent`), decode at the first
    token; the entry's whole request is `end to end`."""
    phases, seen = [], set()
    for row in rows:
        if row["time_ns"] is None:
            continue
        arrival = extent(row["kind"], row["time_ns"], row["duration_ns"] or 0)[0]
        measured = []
        if row["entry"] and row["duration_ns"]:
            measured.append(("end to end", 0.0, row["duration_ns"] / 1e6))
        for fact, phase in (("router_queue_ms", "router queue"), ("queue_ms", "queue"),
                            ("kv_transfer_ms", "kv transfer"), ("ttft_ms", "to first token")):
            if row[fact] is not None:
                measured.append((phase, 0.0, row[fact]))
        if row["ttft_ms"] is not None and row["e2e_ms"] is not None:
            measured.append(("decode", row["ttft_ms"], row["e2e_ms"]))
        if row["prefill_ms"] is not None:  # a proxy's legs, one after the other
            measured.append(("prefill", 0.0, row["prefill_ms"]))
            if row["decode_ms"] is not None:
                measured.append(("decode", row["prefill_ms"], row["prefill_ms"] + row["decode_ms"]))
        if row["coordinator_ms"] is not None:
            measured.append(("coordinator overhead", 0.0, row["coordinator_ms"]))
        for phase, begin_ms, end_ms in measured:
            if (row["worker"], phase) in seen or end_ms <= begin_ms:
                continue
            seen.add((row["worker"], phase))
            phases.append({"worker": row["worker"], "role": row["role"], "phase": phase,
                           "start": ns_to_iso(arrival + round(begin_ms * 1e6)), "duration_ms": end_ms - begin_ms,
                           "measured_by": f"{row['name'] or row['kind']} ({row['source']})",
                           "failed": bool(row["failed"])})
    phases += _router_overhead(rows)
    return sorted(phases, key=lambda p: p["start"])


def _router_overhead(rows: list[dict]) -> list[dict]:
    """The entry's whole request less the time its workers held it (the union of their own
    whole-request records: `request.end`, an entry span of theirs, Dynamo's `request completed`):
    what the router itself, and the network to its workers, cost. Drawn from the entry's start."""
    entry = next((row for row in rows if row["entry"] and row["duration_ns"] and row["time_ns"] is not None), None)
    if entry is None:
        return []
    held = sorted(extent(row["kind"], row["time_ns"], round(row["request_ms"] * 1e6)) for row in rows
                  if row["request_ms"] and row["time_ns"] is not None and row["worker"] != entry["worker"])
    if not held:
        return []
    covered, reach = 0, None
    for begin, end in held:  # the union's length
        if reach is None or begin > reach:
            covered, reach = covered + end - begin, end
        elif end > reach:
            covered, reach = covered + end - reach, end
    overhead_ns = entry["duration_ns"] - covered
    if overhead_ns <= 0:
        return []
    return [{"worker": entry["worker"], "role": entry["role"], "phase": "router overhead",
             "start": ns_to_iso(extent(entry["kind"], entry["time_ns"], entry["duration_ns"])[0]),
             "duration_ms": overhead_ns / 1e6,
             "measured_by": f"{entry['name'] or entry['kind']} ({entry['source']}) less its workers' own requests",
             "failed": False}]


def _warn_guessed_times(graph: IdGraph, rows: list[dict], origins: dict) -> None:
    """A warning for each way of reading local times that assumed what the files did not say."""
    guessed: dict[str, list[int]] = {}
    for row in rows:
        how = origins.get(row["origin_id"], (None, None, None))[2]
        if how and local_time.guessed(how):
            guessed.setdefault(how, []).append(row["origin_id"])
    for how, origin_ids in guessed.items():
        files = len(set(origin_ids))
        graph.warn(f"the times of {len(origin_ids)} records ({files} file{'s' * (files > 1)}): {how}")


def _origin(origins: dict[int, tuple[str, bool, str | None]], row: dict) -> dict:
    """Where the record was read: the file and the byte its line starts at (in the decompressed
    stream of a .gz), or the receiver and the number of the body it came in; `seq`, the record's
    place among those of its line or body; `local_time`, how the file's local times were read, for
    a source whose times have no zone (local_time.py)."""
    path, is_file, clock = origins.get(row["origin_id"], (None, True, None))
    origin = {"path": path, "kind": "file" if is_file else "received", "offset": row["offset"], "seq": row["seq"]}
    if clock:
        origin["local_time"] = clock
    return origin


def _first_recorded(graph: IdGraph, record_ids, shown: int) -> list[int]:
    """The first `shown` of these records in the order they were recorded, by what the walk read
    of them."""
    return [n.record_id for n in heapq.nsmallest(shown, (graph.nodes[r] for r in record_ids), key=shown_order)]


def _shown_rows(graph: IdGraph, record_ids: list[int]) -> list[dict]:
    """These records as rows to show, each under its worker as settled within its request: read
    whole, placed in time, a traceback's lines as one record with it, the error lines naming no
    request that its failures place in it added, and each event once."""
    rows = graph.rows(record_ids)
    _place_steady_times(rows)
    rows = error_lines.whole_texts(graph, rows + error_lines.inferred_rows(graph, rows))
    rows = _one_event_once(rows)
    _place_coarse_times(rows)
    return rows


# The records a request's heading reads past those shown: of each worker's, the first (in the order
# they were recorded) that states each of these facts, and the one of the highest HTTP status. A
# worker states each once a request, or the heading reads its first.
_TELLING = ("failed", "disconnected", "entry", "entry AND duration_ns <> 0", *(f"{fact} IS NOT NULL" for fact in (
    "request_ms", "router_queue_ms", "queue_ms", "kv_transfer_ms", "ttft_ms", "e2e_ms", "prefill_ms", "decode_ms",
    "coordinator_ms")))
_TELLING_COLUMNS = 'record_id, worker, entry, duration_ns, time_ns, source, "offset", seq, origin_id, ' + \
    record_contract.columns("failed", "disconnected", "http_status", "request_ms", "router_queue_ms", "queue_ms",
                            "kv_transfer_ms", "ttft_ms", "e2e_ms", "prefill_ms", "decode_ms", "coordinator_ms")
_TELLING_FIRSTS = ", ".join([*(f"first(record_id ORDER BY {SHOWN_ORDER_SQL}) FILTER (WHERE {fact})" for fact in _TELLING),
                             "first(record_id ORDER BY http_status DESC) FILTER (WHERE http_status IS NOT NULL)"])


def _telling_records(store: Store, record_ids) -> list[int]:
    """Of these records (a request's, past those shown), the ones its heading reads (_TELLING)."""
    picked, params = store.picked(f"SELECT {_TELLING_COLUMNS} FROM record_workers WHERE {{}}", record_ids)
    told = store.con.execute(f"SELECT DISTINCT unnest([{_TELLING_FIRSTS}]) FROM ({picked}) GROUP BY worker", params)
    return [r for (r,) in told.fetchall() if r is not None]


# A log line and its OTLP export are stamped apart by the time between the two writes: Dynamo's
# JSONL `time` and its OTLP log record's were 2-14 µs apart on an idle machine, and a pair more
# than 1 ms apart was seen while the machine also ran the test suite.
SAME_EVENT_NS = 20_000_000


# The `key=value` fields Rust's tracing text format writes after a message (sources/tracing_fmt.py's
# FIELD, written out here: importing the sources package would add its 170 ms to every lookup), which
# an OTLP log record of the same event holds as attributes.
_FIELDS_AFTER = re.compile(r'(?:\s+[A-Za-z_][\w.]*=(?:"(?:[^"\\]|\\.)*"|\S+))+$')


def _one_event_once(rows: list[dict]) -> list[dict]:
    """The records with each event once: one that reached the store by two paths is shown once,
    in the place of the first, as the one of them that names its worker and holds the most
    attributes, its `also` naming the others. A span is one event under its trace and span id,
    however often it was exported; a log record is the one of another source with the same
    message within SAME_EVENT_NS, of the same worker and span, or of a worker or span one of them
    does not name, in no other role (Dynamo writes every log line to its console, as JSONL or as
    text, and to its OTLP export, whose record names neither the text's worker nor its span)."""
    shown: list[dict] = []
    events: dict[tuple, list[int]] = {}  # the places in `shown` of the events of a span or a message

    def same_event(kept: dict, row: dict) -> bool:
        if row["kind"] == "span":
            return True
        if kept["source"] == row["source"] or row["source"] in {o["source"] for o in kept["also"]}:
            return False
        if abs(kept["time_ns"] - row["time_ns"]) > SAME_EVENT_NS:
            return False
        if (kept["worker"], kept["span_id"]) == (row["worker"], row["span_id"]):
            return True
        unnamed = None in (kept["worker"], row["worker"]) or None in (kept["span_id"], row["span_id"])
        return unnamed and (None in (kept["role"], row["role"]) or kept["role"] == row["role"])

    for row in rows:
        row["also"] = []
        if row["kind"] == "span" and row["trace_id"] and row["span_id"]:
            key = ("span", row["trace_id"], row["span_id"])
        elif row["kind"] == "log" and row["time_ns"] is not None:
            key = ("log", _FIELDS_AFTER.sub("", row["name"] or ""))
        else:
            shown.append(row)
            continue
        place = next((i for i in events.get(key, ()) if same_event(shown[i], row)), None)
        if place is None:
            events.setdefault(key, []).append(len(shown))
            shown.append(row)
            continue
        kept = shown[place]
        if (row["worker"] is not None, len(row["attrs"])) > (kept["worker"] is not None, len(kept["attrs"])):
            row["also"], kept["also"] = [*kept["also"], kept], []
            shown[place] = row
        else:
            kept["also"].append(row)
    return shown


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
    fallback = next((anchors[process(r["worker"])] for r in steady
                     if r["role"] in ENTRY_ROLES and process(r["worker"]) in anchors), None)
    fallback = fallback or (anchors[min(anchors)] if anchors else None)  # any, but the same every time
    for r in steady:
        anchor = anchors.get(process(r["worker"])) or fallback
        if anchor:
            r["time_ns"] = round(r["steady_s"] * 1e9) + anchor[0]
            r["anchor"] = anchor[1]
    rows.sort(key=lambda r: (r["time_ns"] is None, r["time_ns"] or 0, r["steady_s"] or 0))


def _time_text(row: dict) -> str | None:
    """A record's time as ISO text, to the digits it is known to: a text log's line to its second."""
    if row["time_ns"] is None:
        return None
    return ns_to_iso(row["time_ns"], 1 if row.get("inferred") else known_to_ns(row["source"], row["time_ns"]))


def _place_coarse_times(rows: list[dict]) -> None:
    """Place the records timed to the second (a text log's lines) within what is known of them:
    in their second, and within the request's finer-timed records where those overlap it (an
    engine's `Generated response` line stamped 07:01:19 belongs to a request whose records ran from
    07:01:18.95 to 07:01:19.23: it was written between 07:01:19.000 and 07:01:19.23); in the order
    of their file. Each gets `within` (ns from, until), and the rows are ordered by where each
    can first have been. A line an error line placed at a failure (`inferred`) stays there."""
    coarse = [r for r in rows if r["time_ns"] is not None and not r.get("inferred")
              and known_to_ns(r["source"], r["time_ns"]) == SECOND_NS]
    if not coarse:
        return
    fine = [extent(r["kind"], r["time_ns"], r["duration_ns"] or 0) for r in rows
            if r["time_ns"] is not None and (r.get("inferred") or known_to_ns(r["source"], r["time_ns"]) == 1)]
    known = (min(b for b, _ in fine), max(e for _, e in fine)) if fine else None
    last_of_file: dict[int, int] = {}
    for r in sorted(coarse, key=lambda r: (r["origin_id"], r["offset"], r["seq"])):
        begin, end = r["time_ns"], r["time_ns"] + SECOND_NS
        if known and begin <= known[1] and known[0] < end:  # the request's own times narrow the second
            begin, end = max(begin, known[0]), min(end, known[1])
        begin = min(max(begin, last_of_file.get(r["origin_id"], begin)), end)  # not before the line above it
        last_of_file[r["origin_id"]] = begin
        r["within"] = (begin, end)
    rows.sort(key=lambda r: (r["time_ns"] is None, r["within"][0] if r.get("within") else r["time_ns"] or 0,
                             *shown_order(r)[2:]))


def _exception(attrs: dict) -> str | None:
    """What a span's first exception event says (its type and message)."""
    for event in attrs.get("events") or ():
        if isinstance(event, dict) and (event.get("exception.type") or event.get("exception.message")):
            return "exception " + ": ".join(filter(None, (event.get("exception.type"), event.get("exception.message"))))
    return None


def _summary_value(value) -> str:
    """An attribute's value as a person reads it in a summary: SGLang's `finish_reason` object
    (`{"type": "length", "length": 64}`) by its type, other objects and lists as JSON, not as
    Python writes them."""
    if isinstance(value, dict) and isinstance(value.get("type"), str):
        return value["type"]
    return orjson.dumps(value).decode() if isinstance(value, (dict, list)) else str(value)


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
    for key in _SUMMARY_ATTRS:
        value = attrs.get(key)
        if value is True:
            parts.append(key)  # `disconnected`; its False says nothing worth a place
        elif value not in (None, "", False) and (text := _summary_value(value)) != row["status"]:
            parts.append(f"{key}={text}")
    if exception := _exception(attrs) or row.get("exception"):
        parts.append(exception)
    return " · ".join(str(p) for p in parts)

