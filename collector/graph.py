"""The id graph: from the records that carry a looked-up id to the whole requests they belong to.

Records are joined by keys (docs/id-model.md):
- a key id (reply id, internal id, disagg request id, engine or ctx request id with its worker)
  joins every record that carries it;
- the span tree: records in the same span belong together, and a span's children join the
  request of their parent when the parent was recorded by a serving process (a client's span is
  shared by every request it made, so it joins nothing).
Labels (`x_request_id`, `trace_id`, a bare engine id) only find records; they never join them.

A key carried by two requests that started separately (two entry records in different traces, or
in one trace but in unrelated spans) is a collision: it joins records only within each trace, and
records that carry it with nothing else to tell them apart are shown as ambiguous.

The walk is breadth-first over the id index (id_index.py), a few queries per step, so a lookup
touches only the records of the requests it returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .id_index import carriers_sql
from .ids import KEY_KINDS, PARENT_SPAN, SCOPED_KINDS, SPAN

SERVING_ROLES = {"router", "frontend", "proxy", "agg", "ctx", "gen", "prefill", "decode", "worker"}
_CHUNK = 2000  # values per query
# Up to this many values, each is looked up on its own (one row group of each id run); more are
# joined against the whole index in one scan, which costs the same for 10 values as for 2,000.
_FEW_VALUES = 32
# A request's records lie in a few stretches of the store, one for each file that logged it: ids
# nearer than this are read as one range, each range by a query branch of its own, since one IN
# list spanning the stretches has DuckDB read every row group between its lowest id and its
# highest. Past _MANY_RANGES branches, one IN list is cheaper again.
_NEAR = 4096
_MANY_RANGES = 64


# A record's columns as the view record_workers states them (its worker and role settled against
# the rest of the store, as the requests build sees them); the first eight are the walk's, the rest
# are read in the same query for lookup to show.
RECORD_COLUMNS = (
    "record_id", "time_ns", "worker", "role", "entry", "trace_id", "span_id", "parent_span_id",
    "steady_s", "source", "kind", "level", "name", "duration_ns", "status", "attrs", "origin_id", "offset", "seq",
)
_SELECT_RECORDS = ", ".join(f'"{c}"' for c in RECORD_COLUMNS)


@dataclass
class Node:
    record_id: int
    time_ns: int | None
    worker: str | None
    role: str | None
    entry: bool
    trace_id: str | None
    span_id: str | None
    parent_span_id: str | None
    record: dict = field(default_factory=dict)  # every column of RECORD_COLUMNS
    ids: list[tuple[str, str, str | None]] = field(default_factory=list)

    def keys(self):
        for kind, value, scope in self.ids:
            if kind in KEY_KINDS and (kind not in SCOPED_KINDS or scope is not None):
                yield kind, value, scope


@dataclass
class Request:
    record_ids: set[int]
    ambiguous: set[int] = field(default_factory=set)  # shown here and in another request


@dataclass
class Collision:
    kind: str
    value: str
    requests: int
    ok_traces: set[str]  # traces within which the key still names one request


class IdGraph:
    def __init__(self, con):
        self.con = con
        self.nodes: dict[int, Node] = {}
        self._rows: dict[str, list[tuple[int, str, str | None]]] = {}  # value -> (record, kind, scope)
        self._collisions: dict[tuple, Collision | None] = {}
        self.warnings: list[str] = []
        # A scope (the worker an engine id belongs to) under the process's main name, so an engine
        # id named by a perf file (host:pid) and by the middleware (host:port) is one key.
        self._aliases = dict(con.execute("SELECT alias, worker FROM worker_aliases").fetchall())

    def _warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    # -- loading --------------------------------------------------------------------------------

    def rows_for(self, values) -> None:
        """Fetch, once, every (record, kind, scope) carrying each value."""
        missing = [v for v in set(values) if v not in self._rows]
        for v in missing:
            self._rows[v] = []
        for i in range(0, len(missing), _CHUNK):
            chunk = missing[i:i + _CHUNK]
            found = [r for (r,) in self.con.execute(_found_query(len(chunk)), chunk).fetchall()]
            if not found:
                continue
            carriers = carriers_sql("{}", ",".join("?" * len(chunk)))
            for record_id, kind, value, scope in _by_ranges(self.con, carriers, found, chunk):
                self._rows[value].append((record_id, kind, self._aliases.get(scope, scope)))

    def load(self, record_ids) -> None:
        """Fetch, once, the columns and ids of these records."""
        missing = [r for r in set(record_ids) if r not in self.nodes]
        for i in range(0, len(missing), _CHUNK):
            chunk = missing[i:i + _CHUNK]
            for row in _by_ranges(self.con, f"SELECT {_SELECT_RECORDS} FROM record_workers WHERE {{}}", chunk):
                self.nodes[row[0]] = Node(*row[:8], record=dict(zip(RECORD_COLUMNS, row)))
            for record_id, kind, value, scope in _by_ranges(
                    self.con, "SELECT record_id, kind, value, scope FROM record_ids WHERE {}", chunk):
                self.nodes[record_id].ids.append((kind, value, self._aliases.get(scope, scope)))

    def carriers(self, values, kinds=None) -> list[tuple[int, str]]:
        """(record, kind) of every record carrying one of these values (as an id of `kinds`)."""
        self.rows_for(values)
        return [
            (record_id, kind)
            for v in set(values)
            for record_id, kind, _ in self._rows[v]
            if (kinds is None and kind not in (SPAN, PARENT_SPAN)) or (kinds is not None and kind in kinds)
        ]

    # -- collisions -----------------------------------------------------------------------------

    def collision(self, key: tuple[str, str, str | None]) -> Collision | None:
        if key in self._collisions:
            return self._collisions[key]
        kind, value, scope = key
        self.rows_for([value])
        holders = [r for r, k, s in self._rows[value] if k == kind and s == scope]
        self.load(holders)
        # Only entries in a trace can tell requests apart; one without (a perf-metrics row) cannot.
        entries = [self.nodes[r] for r in holders if self.nodes[r].entry and self.nodes[r].trace_id]
        clusters = _cluster_entries(entries)
        result = None
        if len(clusters) > 1:
            traces: dict[str | None, int] = {}
            for cluster in clusters:
                for trace in {e.trace_id for e in cluster}:
                    traces[trace] = traces.get(trace, 0) + 1
            result = Collision(kind, value, len(clusters), {t for t, n in traces.items() if t and n == 1})
            self._warn(
                f"collision: {kind} {value} is carried by {len(clusters)} requests that started separately; "
                f"they are listed apart, not merged"
            )
        self._collisions[key] = result
        return result

    # -- the walk -------------------------------------------------------------------------------

    def _neighbors(self, node: Node, ambiguous: set[int]) -> set[int]:
        out: set[int] = set()
        for key in node.keys():
            kind, value, scope = key
            holders = [r for r, k, s in self._rows[value] if k == kind and s == scope]
            collision = self.collision(key)
            if collision is None:
                out.update(holders)
            elif node.trace_id in collision.ok_traces:
                self.load(holders)
                out.update(r for r in holders if self.nodes[r].trace_id == node.trace_id)
            else:
                ambiguous.add(node.record_id)
        serving = node.role in SERVING_ROLES
        if node.trace_id and node.span_id:
            for r, kind, _ in self._rows[f"{node.trace_id}/{node.span_id}"]:
                if kind == SPAN or (kind == PARENT_SPAN and serving):
                    out.add(r)
        if node.trace_id and node.parent_span_id:
            parents = [r for r, kind, _ in self._rows[f"{node.trace_id}/{node.parent_span_id}"] if kind == SPAN]
            self.load(parents)
            out.update(r for r in parents if self.nodes[r].role in SERVING_ROLES)
        return out

    def component(self, start: int, ambiguous: set[int]) -> set[int]:
        seen = {start}
        frontier = [start]
        while frontier:
            self.load(frontier)
            values = []
            for r in frontier:
                n = self.nodes[r]
                values += [v for _, v, _ in n.keys()]
                if n.trace_id and n.span_id:
                    values.append(f"{n.trace_id}/{n.span_id}")
                if n.trace_id and n.parent_span_id:
                    values.append(f"{n.trace_id}/{n.parent_span_id}")
            self.rows_for(values)
            nxt = []
            for r in frontier:
                for nb in self._neighbors(self.nodes[r], ambiguous):
                    if nb not in seen:
                        seen.add(nb)
                        nxt.append(nb)
            frontier = nxt
        return seen

    def requests(self, seeds: list[int]) -> list[Request]:
        """The requests these records belong to, in order of their first record."""
        self.load(seeds)
        ordered = sorted(seeds, key=lambda r: (self.nodes[r].time_ns or 0, r))
        placed: set[int] = set()
        ambiguous: set[int] = set()
        requests: list[Request] = []
        for seed in ordered:
            if seed in placed:
                continue
            comp = self.component(seed, ambiguous)
            placed |= comp
            requests.append(Request(comp))
        self.load(placed)
        return self._place_ambiguous(requests, ambiguous)

    def _place_ambiguous(self, requests: list[Request], ambiguous: set[int]) -> list[Request]:
        """A request made only of records whose key collided, with nothing else to place them, is
        shown inside the collided requests whose time spans cover it (all of them if none does)."""
        anchored = [q for q in requests if any(self.nodes[r].entry for r in q.record_ids)]
        result = list(anchored)
        for q in requests:
            if q in anchored:
                continue
            if not (q.record_ids & ambiguous):
                result.append(q)
                continue
            keys = {k for r in q.record_ids & ambiguous for k in self.nodes[r].keys()}
            candidates = [
                a for a in anchored
                if any(k in set(self.nodes[r].keys()) for r in a.record_ids for k in keys)
            ]
            if not candidates:
                result.append(q)
                continue
            times = [self.nodes[r].time_ns for r in q.record_ids if self.nodes[r].time_ns is not None]
            covering = [a for a in candidates if times and _covers(self._span_of(a), min(times))] or candidates
            for a in covering:
                a.record_ids |= q.record_ids
                if len(covering) > 1:
                    a.ambiguous |= q.record_ids
            if len(covering) > 1:
                self._warn(
                    f"{len(q.record_ids)} record(s) carry only a collided id and cannot be told apart: "
                    f"shown in each of the {len(covering)} requests that share it, marked ambiguous"
                )
        return sorted(result, key=lambda q: min((self.nodes[r].time_ns or 0) for r in q.record_ids))

    def _span_of(self, request: Request) -> tuple[int, int]:
        times = [self.nodes[r].time_ns for r in request.record_ids if self.nodes[r].time_ns is not None]
        return (min(times), max(times)) if times else (0, -1)


def _covers(window: tuple[int, int], t: int) -> bool:
    return window[0] <= t <= window[1]


def _cluster_entries(entries: list[Node]) -> list[list[Node]]:
    """Group entry records into the requests they start (see _same_request)."""
    clusters: list[list[Node]] = []
    for e in entries:
        joined = None
        for cluster in clusters:
            if any(_same_request(e, other) for other in cluster):
                if joined is None:
                    cluster.append(e)
                    joined = cluster
                else:
                    joined.extend(cluster)
                    cluster.clear()
        clusters = [c for c in clusters if c]
        if joined is None:
            clusters.append([e])
    return clusters


def _same_request(a: Node, b: Node) -> bool:
    """Two entry records start one request when they share a trace, unless they are sibling spans
    (two requests a client made under one span of its own). Different traces: different requests.
    One request can have several entry records: a proxy's and the server's behind it, a log line
    and the span it belongs to, or a span nested in another."""
    if not a.trace_id or a.trace_id != b.trace_id:
        return False
    if a.span_id == b.span_id:
        return True
    return a.parent_span_id != b.parent_span_id


def _found_query(n: int) -> str:
    """The record ids the index finds for n values (parameters) by their hashes."""
    if n <= _FEW_VALUES:  # each hash a constant: one row group of each run
        return " UNION ALL ".join(["SELECT record_id FROM id_index WHERE key = hash(?)"] * n)
    marks = ",".join("?" * n)
    return f"SELECT record_id FROM id_index WHERE key IN (SELECT hash(unnest([{marks}])))"


def _by_ranges(con, select: str, record_ids: list[int], parameters: list = ()) -> list[tuple]:
    """The rows of `select` (its `{}` a condition on record_id) for these records, and only theirs."""
    ranges: list[list[int]] = []
    for r in sorted(record_ids):
        if ranges and r - ranges[-1][1] <= _NEAR:
            ranges[-1][1] = r
        else:
            ranges.append([r, r])
    if len(ranges) > _MANY_RANGES:
        sql = select.format(f"record_id IN ({','.join(map(str, record_ids))})")
        return con.execute(sql, list(parameters)).fetchall()
    sql = " UNION ALL ".join(f"({select.format(f'record_id BETWEEN {int(lo)} AND {int(hi)}')})" for lo, hi in ranges)
    wanted = set(record_ids)
    return [row for row in con.execute(sql, list(parameters) * len(ranges)).fetchall() if row[0] in wanted]
