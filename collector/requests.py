"""Requests: the id graph's connected components, computed in DuckDB, and the one place its
rule is written.

Records are joined by edges (docs/id-model.md): a key id (reply id, internal id, disagg request
id, engine or ctx request id with its worker) joins every record that carries it; records in the
same span belong together; a child span joins its parent's request when a serving process
recorded the parent; a span with no key (a router's scheduling spans) joins the one request that
started in its trace, if only one did. Labels (`x_request_id`, `trace_id`, a bare engine id)
only find records. A key carried by requests that started separately is a collision: it then
joins records only within a trace in which it names one request, and the records it leaves apart
are shown as ambiguous by lookup.

Listing requests, coverage and dashboards need every request, so this module labels every record
with its request by label propagation over those edges, in SQL, and summarizes each request in
one row of `requests`. `lookup` runs the same edges over the records near the looked-up id
(group_records; graph.py finds them).

The result lives in temporary tables of the connection that built it (`request_members`,
`request_summary`), so commands on a read-only store can build it as well. `persist_requests`
copies them into the store as `request_records` and `requests`, for readers that only have the
file (Grafana reads the collector's snapshot; dashboards/ queries these tables).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Callable

from . import record_contract
from .duckdb_engine import duckdb, threads, transaction
from .ids import INTERNAL_ID, JOINING_KINDS, KEY_KINDS, PREFILL_ROLES, SCOPED_KINDS, SERVING_ROLES
from .store import Store, fetched


def _sql_list(values) -> str:
    return ", ".join(f"'{v}'" for v in values)


_KEY_FILTER = f"""(i.kind IN ({_sql_list(k for k in KEY_KINDS if k not in SCOPED_KINDS)})
                 OR (i.kind IN ({_sql_list(SCOPED_KINDS)}) AND i.scope IS NOT NULL))"""
_SERVING_ROLES_SQL = _sql_list(sorted(SERVING_ROLES))
_PREFILL_ROLES_SQL = _sql_list(sorted(PREFILL_ROLES))
_JOINING_KINDS = f"({_sql_list(JOINING_KINDS)})"


def _hashed(column: str) -> str:
    """The column's hash, NULL where it is NULL (hash(NULL) is a number)."""
    return f"CASE WHEN {column} IS NOT NULL THEN hash({column}) END"


# Whether a key id `i` joins the record `r` carrying it (`c`: the key's row in `collided`,
# `crowded`: the row of the record's trace there): always, unless the key collided; then only
# within a trace, and only a trace in which the key still names one request.
_JOINS_BY_KEY = "(c.key IS NULL OR (r.trace_id IS NOT NULL AND crowded.key IS NULL))"
_COLLIDED_OF = f"""
    LEFT JOIN collided c ON c.key = hash(i.kind, i.value, i.scope)
    LEFT JOIN crowded ON crowded.key = c.key AND crowded.trace = {_hashed('r.trace_id')}
"""

BUILD = f"""
-- Keys carried by requests that started separately, as `key`, the hash of (kind, value, scope):
-- entry records in different traces, or in one trace under one parent but in different spans
-- (requests a client made under one span of its own); `crowded`: the traces in which a key names
-- several requests. Here and in `edges`, ids are grouped by their 64-bit hashes, not their text,
-- and distinct rows are counted rather than count(DISTINCT ...): grouping millions of strings, or
-- holding a set per group, ran out of the memory limit on a 9M-record store. Two ids that hash
-- alike (about 1 in 10^12 for a store of millions) would be taken for one.
CREATE OR REPLACE TEMP TABLE crowded AS
WITH entries AS (
    SELECT DISTINCT hash(i.kind, i.value, i.scope) AS key, {_hashed('r.trace_id')} AS trace,
           {_hashed('r.span_id')} AS span, {_hashed('r.parent_span_id')} AS parent
    FROM build_ids i JOIN build_records r USING (record_id)
    WHERE r.entry AND r.trace_id IS NOT NULL AND {_KEY_FILTER}
)
SELECT DISTINCT key, trace FROM entries GROUP BY key, trace, parent HAVING count(span) > 1;

CREATE OR REPLACE TEMP TABLE collided AS
WITH traces AS (
    SELECT DISTINCT hash(i.kind, i.value, i.scope) AS key, {_hashed('r.trace_id')} AS trace
    FROM build_ids i JOIN build_records r USING (record_id)
    WHERE r.entry AND r.trace_id IS NOT NULL AND {_KEY_FILTER}
), untraced_entries AS (
    SELECT record_id FROM build_records WHERE entry AND trace_id IS NULL AND worker IS NOT NULL
), untraced AS (
    -- An entry tier writes one entry record a request: untraced entry records of one worker that
    -- carry one key are as many requests (two clients that send vLLM one X-Request-Id get one reply
    -- id, and vLLM's log line of each names no trace); but those that differ in their internal ids
    -- are one request's parts (vLLM logs a completion of several prompts as one request a prompt,
    -- `cmpl-<id>-0`, `cmpl-<id>-1`, each naming the reply `cmpl-<id>`).
    SELECT DISTINCT hash(i.kind, i.value, i.scope) AS key, {_hashed('r.worker')} AS worker, r.record_id,
           own.internal
    FROM build_ids i JOIN build_records r USING (record_id)
    LEFT JOIN (SELECT record_id, min(hash(value)) AS internal FROM build_ids
               WHERE kind = '{INTERNAL_ID}' AND record_id IN (SELECT record_id FROM untraced_entries)
               GROUP BY record_id) own USING (record_id)
    WHERE r.record_id IN (SELECT record_id FROM untraced_entries) AND {_KEY_FILTER}
)
SELECT key FROM traces GROUP BY key HAVING count(trace) > 1
UNION SELECT key FROM untraced GROUP BY key, worker, internal HAVING count(record_id) > 1
UNION SELECT key FROM crowded;

CREATE OR REPLACE TEMP TABLE edges AS
WITH keyed AS (  -- scopes under the process's main name (store.py: worker_aliases)
    SELECT i.record_id, hash(i.kind, i.value, coalesce(a.worker, i.scope)) AS key,
           {_hashed('r.trace_id')} AS trace, c.key IS NOT NULL AS is_collided, {_JOINS_BY_KEY} AS joins
    FROM build_ids i JOIN build_records r USING (record_id)
    LEFT JOIN worker_aliases a ON a.alias = i.scope
    {_COLLIDED_OF}
    WHERE {_KEY_FILTER}
), joinable AS (  -- a collided key joins only within a trace
    SELECT record_id, key, CASE WHEN is_collided THEN trace END AS within FROM keyed WHERE joins
), grouped AS (  -- each record to the first record of its group (grouped and joined, not a window:
                 -- DuckDB's window operator held its partitions in memory past the budget)
    SELECT j.record_id, g.other
    FROM joinable j
    JOIN (SELECT key, within, min(record_id) AS other FROM joinable GROUP BY key, within) g
      ON g.key = j.key AND g.within IS NOT DISTINCT FROM j.within
), span_ids AS (
    SELECT record_id, hash(value) AS span FROM build_ids WHERE kind = 'span'
), spans AS (
    SELECT s.record_id, g.other
    FROM span_ids s JOIN (SELECT span, min(record_id) AS other FROM span_ids GROUP BY span) g USING (span)
), parents AS (  -- a child span joins its parent's request when a serving process recorded the parent
    SELECT child.record_id, owner.record_id AS other
    FROM build_ids child
    JOIN build_ids owner ON owner.kind = 'span' AND owner.value = child.value
    JOIN build_records o ON o.record_id = owner.record_id
    WHERE child.kind = 'parent_span' AND o.role IN ({_SERVING_ROLES_SQL})
), one_request_traces AS (  -- traces in which one request started: their entry records are one span
    SELECT hash(trace_id) AS trace, min(record_id) AS other FROM build_records
    WHERE entry AND trace_id IS NOT NULL GROUP BY trace_id HAVING count(DISTINCT span_id) = 1
), keyless_spans AS (  -- spans that carry no key, such as a router's scheduling spans (llm-d's EPP)
    SELECT record_id, hash(trace_id) AS trace FROM build_records
    WHERE kind = 'span' AND trace_id IS NOT NULL AND NOT entry
      AND record_id NOT IN (SELECT i.record_id FROM build_ids i WHERE {_KEY_FILTER})
), in_trace AS (  -- a span with no key joins the one request started in its trace
    SELECT k.record_id, t.other FROM keyless_spans k JOIN one_request_traces t USING (trace)
)
SELECT record_id AS a, other AS b FROM grouped WHERE record_id <> other
UNION ALL SELECT record_id, other FROM spans WHERE record_id <> other
UNION ALL SELECT record_id, other FROM parents
UNION ALL SELECT record_id, other FROM in_trace;
"""

# Requests are the connected components of `edges`, each numbered by its least record id: labels
# propagated until none changes.
PROPAGATE = """
CREATE OR REPLACE TEMP TABLE next_labels AS
WITH e AS (SELECT a, b FROM edges UNION ALL SELECT b, a FROM edges),
     m AS (SELECT e.a AS record_id, min(l.label) AS label FROM e JOIN labels l ON l.record_id = e.b GROUP BY e.a)
SELECT l.record_id, least(l.label, coalesce(m.label, l.label)) AS label FROM labels l LEFT JOIN m USING (record_id);
"""

# Each record's worker within its request (request_members): a record whose source names no
# process (Dynamo's request-trace rows), or only a service (Dynamo's OTLP log records carry no
# instance id), is put under the one worker of its role that another source named in full in the
# request.
NAME_WORKERS = """
CREATE OR REPLACE TEMP TABLE request_workers AS
WITH w AS (
    SELECT m.record_id, m.request_id, r.worker, r.role,
           r.worker IS NULL OR NOT regexp_matches(r.worker, '[:@]') AS bare
    FROM request_members m JOIN build_records r USING (record_id)
), named AS (
    SELECT request_id, role, min(worker) AS worker FROM w WHERE NOT bare
    GROUP BY request_id, role HAVING count(DISTINCT worker) = 1
)
SELECT w.record_id, w.request_id, CASE WHEN w.bare THEN coalesce(n.worker, w.worker) ELSE w.worker END AS worker,
       w.role
FROM w LEFT JOIN named n ON n.request_id = w.request_id AND n.role IS NOT DISTINCT FROM w.role;

"""

# One slice of requests ($low <= request_id < $high) at a time: the list and ordered aggregates here
# hold their groups in memory, and over more than a slice of SUMMARY_SLICE_RECORDS records at once
# they exceed the store's memory limit (docs/performance.md, memory).
SUMMARY = f"""
WITH r AS (
    SELECT rw.request_id, rec.*, rw.worker AS w, rw.role AS ro
    FROM request_workers rw JOIN build_records rec USING (record_id)
    WHERE rw.request_id >= $low AND rw.request_id < $high
), entry AS (
    -- The first entry record (perf-metrics entries have no wall time: they come last).
    -- Of entry records of one moment (a line and its OTLP export), the one that states the value.
    SELECT request_id, first(w ORDER BY time_ns NULLS LAST, steady_s, source) AS entry_worker,
           first(ro ORDER BY time_ns NULLS LAST, steady_s, source) AS entry_role,
           first(route ORDER BY time_ns NULLS LAST, steady_s, route IS NULL) AS entry_route,
           first(endpoint ORDER BY time_ns NULLS LAST, steady_s, endpoint IS NULL) AS entry_endpoint
    FROM r WHERE entry GROUP BY request_id
), slice_ids AS (  -- the ids of the slice's records, read once
    SELECT m.request_id, i.*
    FROM request_members m JOIN build_ids i USING (record_id)
    WHERE m.request_id >= $low AND m.request_id < $high
), entry_reply AS (  -- the reply id the client saw: the one the entry server's records carry
    SELECT r.request_id, min(i.value) AS entry_reply_id
    FROM r JOIN entry e USING (request_id) JOIN slice_ids i USING (request_id, record_id)
    WHERE i.kind = 'reply_id' AND r.w IS NOT DISTINCT FROM e.entry_worker
    GROUP BY r.request_id
), reply_roles AS (  -- a reply id only the prefill leg's records carry is that leg's name for the request
    SELECT i.request_id, i.value, bool_and(coalesce(r.ro IN ({_PREFILL_ROLES_SQL}), false)) AS leg_only
    FROM slice_ids i JOIN r USING (request_id, record_id) WHERE i.kind = 'reply_id' GROUP BY i.request_id, i.value
), leg_names AS (  -- ... where another reply id is the reply the client saw
    SELECT request_id, value FROM reply_roles
    WHERE leg_only AND request_id IN (SELECT request_id FROM reply_roles WHERE NOT leg_only)
), ids AS (
    SELECT i.request_id,
           list(DISTINCT i.value ORDER BY i.value) FILTER (WHERE i.kind = 'reply_id' AND l.value IS NULL) AS reply_ids,
           list(DISTINCT i.value ORDER BY i.value) FILTER (WHERE i.kind = 'internal_id' OR l.value IS NOT NULL)
               AS internal_ids,
           list(DISTINCT i.value ORDER BY i.value) FILTER (WHERE i.kind = 'x_request_id') AS x_request_ids,
           list(DISTINCT i.value ORDER BY i.value) FILTER (WHERE i.kind = 'disagg_request_id') AS disagg_request_ids,
           list(DISTINCT i.value ORDER BY i.value) FILTER (WHERE i.kind = 'trace_id') AS trace_ids,
           bool_or(c.key IS NOT NULL) AS collided,
           -- Anything that names a request (startup and background lines carry none of these; an
           -- id-shaped word of a line's text, collector/tokens.py's TOKEN, names nothing known).
           bool_or(i.kind NOT IN ('span', 'parent_span', 'trace_id', 'token')) AS names_a_request
    FROM slice_ids i
    LEFT JOIN collided c ON c.key = hash(i.kind, i.value, i.scope)
    LEFT JOIN leg_names l ON i.kind = 'reply_id' AND l.request_id = i.request_id AND l.value = i.value
    GROUP BY i.request_id
), summary AS (
    SELECT
        r.request_id,
        -- A request starts when its entry server took it; a worker's log with one-second
        -- resolution (TensorRT-LLM's) must not move that earlier.
        coalesce(min(r.time_ns) FILTER (WHERE r.entry), min(r.time_ns)) AS start_ns,
        max(r.time_ns + CASE WHEN r.kind = 'span' THEN coalesce(r.duration_ns, 0) ELSE 0 END) AS end_ns,
        count(*) AS records,
        bool_or(r.entry) AS has_entry,
        any_value(e.entry_worker) AS entry_worker,
        any_value(e.entry_role) AS entry_role,
        any_value(e.entry_route) AS route,
        any_value(e.entry_endpoint) AS endpoint,
        -- The HTTP status the client got: the entry tier's own end record, else any.
        coalesce(
            max(r.http_status) FILTER (WHERE r.ro = e.entry_role), max(r.http_status)) AS http_status,
        bool_or(r.failed) AS error,
        bool_or(r.disconnected) AS disconnected,
        coalesce(max(r.request_ms), (max(r.time_ns) - min(r.time_ns)) / 1e6) AS duration_ms,
        coalesce(max(r.ttft_ms), max(r.ttfb_ms)) AS ttft_ms,
        max(r.queue_ms) AS queue_ms,
        max(r.kv_transfer_ms) AS kv_transfer_ms,
        -- as lookup lists them: a service's bare name that no worker of its role was named in full
        -- beside is a worker of its own
        list(DISTINCT r.w ORDER BY r.w) FILTER (WHERE r.w IS NOT NULL) AS workers,
        list(DISTINCT r.ro ORDER BY r.ro) FILTER (WHERE r.ro IS NOT NULL) AS roles,
        list(DISTINCT r.source ORDER BY r.source) AS sources
    FROM r LEFT JOIN entry e USING (request_id)
    GROUP BY r.request_id
)
-- A request answered with an error status sent its client no token: it has no time to first token,
-- whatever a worker measured of its own.
SELECT s.* REPLACE (CASE WHEN s.http_status >= '400' THEN NULL ELSE s.ttft_ms END AS ttft_ms),
       coalesce(e.entry_reply_id, i.reply_ids[1]) AS reply_id, i.reply_ids, i.internal_ids, i.x_request_ids,
       i.disagg_request_ids, i.trace_ids, coalesce(i.collided, false) AS collided,
       coalesce(i.names_a_request, false) AS names_a_request
FROM summary s LEFT JOIN ids i USING (request_id) LEFT JOIN entry_reply e USING (request_id)
"""

MAX_ROUNDS = 50
# New records built into the stored tables at a time (update_requests): a build of this many, with
# the requests they reach, fits DuckDB's default memory limit while a request's records lie near
# each other (docs/performance.md, memory); a step that does not fit is halved, down to the least.
UPDATE_STEP_RECORDS = 500_000
MIN_STEP_RECORDS = 5_000
SUMMARY_SLICE_RECORDS = 50_000  # records whose requests are summarized at once
# Builds of up to this many records (a small ingest, the first update of a large one) run on all of
# DuckDB's threads; larger ones on one, within the memory budget (_build).
PARALLEL_BUILD_RECORDS = 300_000

# What the build reads of each record (from the view record_workers): its worker and role, its
# place in the span tree, and the facts the summary shows (record_contract.py), not every record's
# whole JSON.
_RECORD_COLUMNS = f"""
    record_id, worker, role, time_ns, steady_s, entry, kind, name, level, status, duration_ns, source,
    trace_id, span_id, parent_span_id,
    {record_contract.columns("route", "endpoint", "disconnected", "failed", "http_status", "request_ms",
                             "ttft_ms", "ttfb_ms", "queue_ms", "kv_transfer_ms")}
"""
# The records and ids the build reads: the whole store, or (update_requests) those of the requests
# that new records reach. Records are copied once into a temp table of these columns (DuckDB spills
# it beyond its budget); the scope's ids too: read through views with a semi-join, every use held
# a hash table of the scope's records, several in one query.
WHOLE_STORE = f"""
CREATE OR REPLACE TEMP TABLE build_records AS SELECT {_RECORD_COLUMNS} FROM record_workers;
CREATE OR REPLACE TEMP VIEW build_ids AS SELECT * FROM record_ids;
"""
SCOPE = f"""
CREATE OR REPLACE TEMP TABLE build_records AS
    SELECT {_RECORD_COLUMNS} FROM record_workers WHERE record_id IN (SELECT record_id FROM scope_records);
CREATE OR REPLACE TEMP TABLE scope_ids AS
    SELECT * FROM record_ids WHERE record_id IN (SELECT record_id FROM scope_records);
CREATE OR REPLACE TEMP VIEW build_ids AS SELECT * FROM scope_ids;
"""
# The SQL that makes the persisted tables: when it changes, tables an older trace-join built are
# built again whole, not added to.
BUILT_BY = hashlib.sha256((_RECORD_COLUMNS + BUILD + PROPAGATE + NAME_WORKERS + SUMMARY).encode()).hexdigest()[:16]


def build_requests(store: Store) -> None:
    """Every record's request (temp `request_members`, and `request_workers` with the record's
    worker and role in it) and each request's summary (temp `request_summary`), for this
    connection: the stored tables, brought up to date first (update_requests) when the store is
    open for writing; for a read-only connection whose stored tables lag, built here for the whole
    store."""
    con = store.con
    if store.keeps_requests and not store.read_only:
        update_requests(store)
    if _stored_tables_current(con):
        _drop_temp(con, _RESULTS)
        con.execute("""
            CREATE TEMP VIEW request_members AS SELECT record_id, request_id FROM main.request_records;
            CREATE TEMP VIEW request_workers AS SELECT record_id, request_id, worker, role FROM main.request_records;
            CREATE TEMP VIEW request_summary AS SELECT * FROM main.requests;
        """)
        return
    with threads(con, 1):  # the copy of the records; _build decides for itself
        con.execute(WHOLE_STORE)
        _build(con)


_RESULTS = ("request_members", "request_workers", "request_summary")


@dataclass
class Grouped:
    """Records grouped into requests by the build's rules (group_records)."""

    request_of: dict[int, int]  # each record's request: the least record id in it
    # each record's worker as settled within its request, where that is not the one the view
    # record_workers states (a service's bare name, put under the one worker of its role named in full)
    renamed: dict[int, str | None]
    # (record, kind, value, scope, joins) of each collided key a record carries; `joins`: it still
    # joins the record within its trace
    collided: list[tuple[int, str, str, str | None, bool]]


_COLLIDED_IDS = f"""
SELECT i.record_id, i.kind, i.value, coalesce(a.worker, i.scope), {_JOINS_BY_KEY}
FROM build_ids i JOIN build_records r USING (record_id)
LEFT JOIN worker_aliases a ON a.alias = i.scope
{_COLLIDED_OF}
WHERE c.key IS NOT NULL AND {_KEY_FILTER}
"""


def group_records(store: Store, record_ids: list[int], walked: Callable[[int], tuple]) -> Grouped:
    """The requests these records make by the rules of the whole build, for records that hold
    every record sharing a joining id with one of them (lookup's walk, graph.py, finds such a set):
    the same edges as for the whole store, so a lookup shows the requests `requests` lists.
    `walked(record_id)`: the record's columns of GROUPED_COLUMNS as the view record_workers has them
    (the walk read them already). The components of so few records are found here, not by
    propagating labels in SQL, whose rounds of statements would cost a lookup more than its walk."""
    con = store.con
    _drop_temp(con, _RESULTS)
    if len(record_ids) <= _PASSED_RECORDS:
        columns = list(zip(*map(walked, record_ids))) or [() for _ in GROUPED_COLUMNS]
        con.execute("CREATE OR REPLACE TEMP TABLE build_records AS SELECT " + ", ".join(
            f"unnest(${n + 1}::{sql_type}[]) AS {name}" for n, (name, sql_type) in enumerate(GROUPED_COLUMNS.items())),
            [list(column) for column in columns])
    else:
        _copy_records(store, ", ".join(GROUPED_COLUMNS), record_ids)
    picked, params = store.picked("SELECT * FROM record_ids WHERE {}", record_ids)
    con.execute(f"CREATE OR REPLACE TEMP TABLE scope_ids AS {picked}", params)
    con.execute("CREATE OR REPLACE TEMP VIEW build_ids AS SELECT * FROM scope_ids")
    con.execute(BUILD)
    request_of = _components(record_ids, fetched(con.execute("SELECT a, b FROM edges")))
    con.execute("CREATE OR REPLACE TEMP TABLE request_members AS "
                "SELECT unnest(?::BIGINT[]) AS record_id, unnest(?::BIGINT[]) AS request_id",
                [list(request_of), list(request_of.values())])
    con.execute(NAME_WORKERS)
    renamed = dict(fetched(con.execute("SELECT w.record_id, w.worker FROM request_workers w JOIN build_records r "
                                       "USING (record_id) WHERE w.worker IS DISTINCT FROM r.worker")))
    return Grouped(request_of, renamed, con.execute(_COLLIDED_IDS).fetchall())


def summarize_grouped(store: Store) -> None:
    """Each request that group_records made, summarized as the build summarizes (temp
    request_summary, which request_list.summaries reads)."""
    _copy_records(store, _RECORD_COLUMNS, [r for (r,) in store.con.execute("SELECT record_id FROM request_members").fetchall()])
    store.con.execute(f"CREATE OR REPLACE TEMP TABLE request_summary AS {SUMMARY}", {"low": 0, "high": 1 << 62})


# What grouping reads of a record (BUILD, NAME_WORKERS, _COLLIDED_IDS), with its type: a lookup groups
# the records it walked to, and summarizes them (from _RECORD_COLUMNS) only when they make several
# requests. Up to _PASSED_RECORDS of them it passes the columns the walk read; past that, passing
# them (DuckDB makes a value of each element) costs more than reading them again.
GROUPED_COLUMNS = {"record_id": "BIGINT", "worker": "VARCHAR", "role": "VARCHAR", "entry": "BOOLEAN", "kind": "VARCHAR",
                   "trace_id": "VARCHAR", "span_id": "VARCHAR", "parent_span_id": "VARCHAR"}
_PASSED_RECORDS = 4000


def _copy_records(store: Store, columns: str, record_ids: list[int]) -> None:
    """Temp table build_records: these columns (SQL over the view record_workers) of these records."""
    picked, params = store.picked(f"SELECT {columns} FROM record_workers WHERE {{}}", record_ids)
    store.con.execute(f"CREATE OR REPLACE TEMP TABLE build_records AS {picked}", params)


def _components(record_ids, edges) -> dict[int, int]:
    """Each record's component, named by its least record id (union-find)."""
    parent = {r: r for r in record_ids}

    def root(r: int) -> int:
        while parent[r] != r:
            parent[r] = parent[parent[r]]
            r = parent[r]
        return r

    for a, b in edges:
        ra, rb = root(a), root(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
    for r in parent:  # each to its root, in place: a request can hold very many records
        parent[r] = root(r)
    return parent


def _drop_temp(con, names) -> None:
    """Drop these temp tables or views, whichever they are (CREATE OR REPLACE cannot turn one into the other)."""
    listed = ", ".join(f"'{n}'" for n in names)
    for name, kind in con.execute(
        f"SELECT view_name, 'VIEW' FROM duckdb_views() WHERE temporary AND view_name IN ({listed}) "
        f"UNION ALL SELECT table_name, 'TABLE' FROM duckdb_tables() WHERE temporary AND table_name IN ({listed})"
    ).fetchall():
        con.execute(f"DROP {kind} temp.{name}")


def _build(con) -> None:
    """Requests of the records the build_* views show: on all of DuckDB's threads when they are few
    enough, else on one, within the memory budget (duckdb_engine.threads)."""
    _drop_temp(con, _RESULTS)
    records = con.execute("SELECT count(*) FROM build_records").fetchone()[0]
    with threads(con, None if records <= PARALLEL_BUILD_RECORDS else 1):
        _label_and_summarize(con)


def _label_and_summarize(con) -> None:
    con.execute(BUILD)
    con.execute("CREATE OR REPLACE TEMP TABLE labels AS SELECT record_id, record_id AS label FROM build_records")
    for _ in range(MAX_ROUNDS):
        con.execute(PROPAGATE)
        changed = con.execute(
            "SELECT count(*) FROM labels l JOIN next_labels n USING (record_id) WHERE l.label <> n.label"
        ).fetchone()[0]
        con.execute("DROP TABLE labels; ALTER TABLE next_labels RENAME TO labels")
        if not changed:
            break
    con.execute("""
        CREATE OR REPLACE TEMP TABLE request_members AS SELECT record_id, label AS request_id FROM labels;
        DROP TABLE labels;  -- the memory the summary needs
        DROP TABLE edges;
    """)
    con.execute(NAME_WORKERS)
    con.execute(f"CREATE OR REPLACE TEMP TABLE request_summary AS {SUMMARY}", {"low": 0, "high": 0})
    bounds = _slice_bounds(con)
    for low, high in zip(bounds, bounds[1:]):
        con.execute(f"INSERT INTO request_summary {SUMMARY}", {"low": low, "high": high})


def _slice_bounds(con) -> list[int]:
    """Request ids that cut the requests into slices of about SUMMARY_SLICE_RECORDS records each.
    By members, not by record id: a request is numbered by its first record, and one file's records
    come before the next file's, so the requests numbered in the first 100k record ids can hold
    several times as many records, read from all over the store."""
    starts = con.execute(
        "SELECT request_id FROM (SELECT request_id, row_number() OVER (ORDER BY request_id) AS n "
        "FROM request_members) WHERE (n - 1) % $slice = 0 ORDER BY request_id",
        {"slice": SUMMARY_SLICE_RECORDS},
    ).fetchall()
    last = con.execute("SELECT coalesce(max(request_id), 0) FROM request_members").fetchone()[0]
    return sorted({request_id for (request_id,) in starts}) + [last + 1]


def update_requests(store: Store, step: int = UPDATE_STEP_RECORDS) -> None:
    """Bring the tables `requests` and `request_records` (record_id, request_id, and the record's
    worker and role as settled within its request) up to date with the store, `step` new records
    at a time, each step in one transaction.

    Only the requests that the step's records touch are built again: those holding a record that
    shares an id with a new record, then those sharing one with these, until none is left (a
    collided key, or a client's span, can reach from one request into another); and the requests
    of records whose worker or role a new origin, alias or role renamed. The requests outside stay
    as they were, since no edge of the id graph reaches them. Stepping keeps each build to a
    bounded part of the store, within DuckDB's memory limit, however many records came since."""
    con = store.con
    last = _last_record(con)
    state = _stored_state(con)
    naming = _naming(con)
    if state == (last, naming):
        return
    with threads(con, 1):  # the scope, and writing the tables; _build decides for itself
        while state != (last, naming):
            try:
                state = _step(con, state, min(last, (state[0] if state else 0) + step), naming)
            except duckdb.OutOfMemoryException:
                # The requests a step's records reach did not fit DuckDB's budget (they grow with
                # how far apart a request's records were written): fewer records a step.
                if step <= MIN_STEP_RECORDS:
                    raise
                step = max(MIN_STEP_RECORDS, step // 2)


def _step(con, state: tuple[int, dict] | None, through: int, naming: dict) -> tuple[int, dict]:
    """Build the requests the records up to `through` reach, and store them; the new state."""
    if state is None:  # nothing to go on from: the first step's records, whole
        con.execute(f"CREATE OR REPLACE TEMP TABLE scope_records AS "
                    f"SELECT record_id FROM records WHERE record_id <= {through}")
    else:
        built_through, built_naming = state
        _scope(con, built_through, through, _renamed_records(con, built_through, built_naming, naming))
    con.execute(SCOPE)
    _build(con)
    _persist(con, whole=state is None, through=through, naming=naming)
    return through, naming


def persist_requests(store: Store) -> None:
    """Build every request of the store again and store them (update_requests, from nothing)."""
    store.con.execute("DELETE FROM meta WHERE key = 'requests_state'")
    update_requests(store)


def _last_record(con) -> int:
    return con.execute("SELECT coalesce(max(record_id), 0) FROM records").fetchone()[0]


def requests_current(store: Store) -> bool:
    """Whether the stored requests tables hold every record the store holds, as named now."""
    return _stored_tables_current(store.con)


def _stored_tables_current(con) -> bool:
    return _stored_state(con) == (_last_record(con), _naming(con))


def _stored_state(con) -> tuple[int, dict] | None:
    """(last record built, the naming then) of the persisted tables, if this release built them."""
    row = con.execute("SELECT value FROM meta WHERE key = 'requests_state'").fetchone()
    if row is None:
        return None
    state = json.loads(row[0])
    if state.get("built_by") != BUILT_BY:
        return None
    return state["through"], state["naming"]


def _naming(con) -> dict:
    """What settles a record's worker and role besides the record (the view record_workers): each
    origin's worker and role, and each worker name as worker_names settles it."""
    return {
        "origins": {str(o): [w, r] for o, w, r in con.execute("SELECT origin_id, worker, role FROM origins").fetchall()},
        "names": {n: [w, r] for n, w, r in con.execute("SELECT name, worker, role FROM worker_names").fetchall()},
    }


def _renamed_records(con, through: int, before: dict, now: dict) -> str:
    """SQL for the records up to `through` whose worker or role a naming change may have changed:
    those of an origin that changed, and those going by a name settled otherwise now (or not known
    to the state before: tables an older trace-join built). A new origin's records are all new."""
    origins = [int(o) for o, named in now["origins"].items() if before["origins"].get(o, named) != named]
    names = sorted(n for n, settled in now["names"].items() if before.get("names", {}).get(n) != settled)
    if not origins and not names:
        return "SELECT NULL::BIGINT AS record_id WHERE false"
    con.execute("CREATE OR REPLACE TEMP TABLE renamed_names AS SELECT unnest(?::VARCHAR[]) AS name", [names])
    listed = ",".join(map(str, origins)) or "NULL"
    return f"""
        SELECT r.record_id FROM records r JOIN origins o USING (origin_id)
        WHERE r.record_id <= {through} AND (r.origin_id IN ({listed})
            OR coalesce(r.worker, o.worker) IN (SELECT name FROM renamed_names))"""


def _scope(con, through: int, upto: int, renamed: str) -> None:
    """Temp table scope_records: the records after `through` up to `upto`, and every record of the
    stored requests they reach (see update_requests); scope_requests: those requests."""
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE scope_requests AS
            SELECT DISTINCT request_id FROM request_records WHERE record_id IN ({renamed});
        CREATE OR REPLACE TEMP TABLE reached AS SELECT * FROM scope_requests;
        -- ids as their index keys: a key two values share (1 in 10^12) only widens the scope
        CREATE OR REPLACE TEMP TABLE scope_keys AS
            SELECT DISTINCT hash(value) AS key FROM record_ids
            WHERE record_id > {through} AND record_id <= {upto} AND kind IN {_JOINING_KINDS}
            -- the trace of a new span or entry record: a span with no key joins the one request
            -- started in its trace, whichever was stored first
            UNION SELECT DISTINCT hash(r.trace_id) FROM records r
            WHERE r.record_id > {through} AND r.record_id <= {upto} AND r.trace_id IS NOT NULL
              AND (r.kind = 'span' OR r.entry);
        CREATE OR REPLACE TEMP TABLE frontier AS SELECT key FROM scope_keys;
    """)
    while True:
        con.execute("""
            INSERT INTO frontier
            SELECT DISTINCT hash(i.value) FROM record_ids i
            JOIN request_records m USING (record_id) JOIN reached USING (request_id)
            WHERE i.kind IN """ + _JOINING_KINDS + """ AND hash(i.value) NOT IN (SELECT key FROM scope_keys);
            INSERT INTO scope_keys SELECT key FROM frontier WHERE key NOT IN (SELECT key FROM scope_keys);
            CREATE OR REPLACE TEMP TABLE reached AS
                SELECT DISTINCT m.request_id FROM id_index x JOIN frontier f ON x.key = f.key
                JOIN request_records m ON m.record_id = x.record_id
                WHERE m.request_id NOT IN (SELECT request_id FROM scope_requests);
            INSERT INTO scope_requests SELECT request_id FROM reached;
            DELETE FROM frontier;
        """)
        if con.execute("SELECT count(*) FROM reached").fetchone()[0] == 0:
            break
    con.execute(f"""
        CREATE OR REPLACE TEMP TABLE scope_records AS
            SELECT record_id FROM request_records WHERE request_id IN (SELECT request_id FROM scope_requests)
            UNION ALL SELECT record_id FROM records WHERE record_id > {through} AND record_id <= {upto};
    """)


def _persist(con, *, whole: bool, through: int, naming: dict) -> None:
    state = json.dumps({"built_by": BUILT_BY, "through": through, "naming": naming})
    if whole:
        tables = """
            CREATE OR REPLACE TABLE main.request_records AS
                SELECT record_id, request_id, worker, role FROM request_workers;
            CREATE OR REPLACE TABLE main.requests AS SELECT * FROM request_summary;
        """
    else:
        tables = """
            DELETE FROM main.request_records WHERE request_id IN (SELECT request_id FROM scope_requests);
            DELETE FROM main.requests WHERE request_id IN (SELECT request_id FROM scope_requests);
            INSERT INTO main.request_records SELECT record_id, request_id, worker, role FROM request_workers;
            INSERT INTO main.requests SELECT * FROM request_summary;
        """
    with transaction(con):
        con.execute(tables)
        con.execute("INSERT OR REPLACE INTO meta VALUES ('requests_state', ?)", [state])
