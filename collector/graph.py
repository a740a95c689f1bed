"""The id graph from one id: the records a looked-up id reaches, grouped into its requests.

Which records belong together is one rule, the requests build's (requests.py, docs/id-model.md):
records are joined by keys (reply id, internal id, disagg request id, engine or ctx request id
with its worker) and by the span tree (a record's span; a child span joins its parent's request
when a serving process recorded the parent; a span with no key joins the one request started in
its trace); labels (`x_request_id`, `trace_id`, a bare engine id) only find records; a key
carried by requests that started separately is a collision and joins records only within a trace
where it names one request.

This module finds the records that rule has to see for a lookup: those carrying the looked-up id,
then every record an edge may lead to from one found (sharing a key, a span, or a serving parent's
span), until none is left, by a breadth-first walk over the id index, a few queries a step, so a
lookup touches only the records near the requests it returns. requests.group_records then groups
them with the edges the whole build uses. Records left apart because the only key they carry
collided are shown inside the requests that share it (`_place_ambiguous`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from operator import attrgetter

import orjson

from . import line_attributes, record_contract
from .ids import KEY_KINDS, PARENT_SPAN, SCOPED_KINDS, SERVING_ROLES, SPAN, TRACE_ID
from .requests import GROUPED_COLUMNS, group_records
from .store import Store
from .times import shown_order
from .tokens import TOKEN

_CHUNK = 2000  # values per query
# Ids a query is never found as: a span is named by its trace and span ids together, which no
# one quotes.
NOT_LOOKED_UP = (SPAN, PARENT_SPAN)


# What the walk reads of each record, from the view record_workers (its worker and role settled
# against the rest of the store): its place in the id graph, and its place on a request's timeline
# (times.shown_order), so that the records lookup shows are picked before any is read whole.
_WALK_COLUMNS = ("record_id", "time_ns", "worker", "role", "entry", "trace_id", "span_id", "parent_span_id",
                 "kind", "source", "offset", "seq", "origin_id")
_SELECT_WALK = ", ".join(f'"{c}"' for c in _WALK_COLUMNS)
# What lookup shows of a record, read only for the records it shows (IdGraph.rows): every column,
# with the record contract's facts lookup shows: whether it states a failure, the HTTP status it
# answered with and the phases of the request it measured.
_STORED_COLUMNS = (
    "record_id", "time_ns", "worker", "role", "entry", "trace_id", "span_id", "parent_span_id",
    "steady_s", "source", "kind", "level", "name", "duration_ns", "status", "attrs", "origin_id", "offset", "seq",
)
_FACTS = ("failed", "error_text", "http_status", "disconnected", "request_ms", "ttfb_ms", "router_queue_ms", "queue_ms",
          "kv_transfer_ms", "ttft_ms", "e2e_ms", "prefill_ms", "decode_ms", "coordinator_ms", "role_by_name")
RECORD_COLUMNS = (*_STORED_COLUMNS, *_FACTS)
_SELECT_RECORDS = ", ".join(f'"{c}"' for c in _STORED_COLUMNS) + ", " + record_contract.columns(*_FACTS)
# Records a walk reads whole as it goes (IdGraph.load), those of a few requests.
WHOLE_RECORDS = 1000
# What the requests build groups a walked record by, read off its node.
_grouped_columns = attrgetter(*GROUPED_COLUMNS)


@dataclass(slots=True)
class Node:
    """A walked record: its columns of _WALK_COLUMNS, its ids, and those of them that are keys."""

    record_id: int
    time_ns: int | None
    worker: str | None  # as the view record_workers settles it; within its request, see IdGraph.rows
    role: str | None
    entry: bool
    trace_id: str | None
    span_id: str | None
    parent_span_id: str | None
    kind: str
    source: str
    offset: int
    seq: int
    origin_id: int
    ids: tuple[tuple[str, str, str | None], ...] = ()
    keys: tuple[tuple[str, str, str | None], ...] = ()

    def __getitem__(self, column: str):
        """A column by its name, as of a row (so times.shown_order places a node as it places a row)."""
        return getattr(self, column)


def _is_key(kind: str, scope: str | None) -> bool:
    """Whether an id of this kind and scope is a key: an engine id only with its worker."""
    return kind in KEY_KINDS and (kind not in SCOPED_KINDS or scope is not None)


def _first_time(followed: set[tuple], edge: tuple) -> bool:
    """Whether a walk follows this edge for the first time (and it is now followed)."""
    if edge in followed:
        return False
    followed.add(edge)
    return True


@dataclass
class Request:
    request_id: int  # as the requests build numbers it: its least record id, ambiguous ones aside
    record_ids: set[int]
    ambiguous: set[int] = field(default_factory=set)  # shown here and in another request


class IdGraph:
    def __init__(self, store: Store):
        self.store = store
        self.nodes: dict[int, Node] = {}
        # value -> (kind, scope) -> the records carrying it so
        self._rows: dict[str, dict[tuple[str, str | None], list[int]]] = {}
        self._ids: dict[int, tuple[tuple[str, str, str | None], ...]] = {}  # record -> (kind, value, scope) of each
        self._copies: dict = {}  # see _kept
        self._whole: dict[int, tuple] = {}  # record -> its columns of RECORD_COLUMNS, where `load` read them
        self._found: dict[tuple[str, ...], set[int]] = {}  # values -> the records their keys find
        self.warnings: list[str] = []
        self._origins: dict[int, tuple[str, bool, str | None]] = {}
        self._trace_members: dict[str, set[int]] = {}  # trace -> the records that join in it (_one_request_trace)
        self._worker_in_request: dict[int, str | None] = {}  # record -> its worker as settled within its request
        # A scope (the worker an engine id belongs to) under the process's main name, so an engine
        # id named by a perf file (host:pid) and by the middleware (host:port) is one key.
        self._aliases = store.worker_aliases()

    def origins(self, origin_ids) -> dict[int, tuple[str, bool, str | None]]:
        """(path or receiver's name, whether it is a file, how its local times were read) of these
        origins, each read once. A receiver's origin has no head: its fingerprint is its name."""
        wanted = set(origin_ids) - self._origins.keys()
        if wanted:
            self._origins.update((origin_id, (path, head_len > 0, clock))
                                 for origin_id, path, head_len, clock in self.store.origin_rows(sorted(wanted)))
        return self._origins

    def warn(self, message: str) -> None:
        if message not in self.warnings:
            self.warnings.append(message)

    # -- loading --------------------------------------------------------------------------------

    def rows_for(self, values) -> None:
        """Fetch, once, every record carrying each value, by the kind and scope it carries it as."""
        missing = [v for v in set(values) if v not in self._rows]
        for v in missing:
            self._rows[v] = {}
        for i in range(0, len(missing), _CHUNK):
            chunk = missing[i:i + _CHUNK]
            found = self.found(chunk)
            self._read_ids(found)
            wanted = set(chunk)
            # The index finds records by the hash of a value: each keeps only the values it carries.
            for record_id in sorted(found):
                for kind, value, scope in self._ids[record_id]:
                    if value in wanted:
                        self._rows[value].setdefault((kind, scope), []).append(record_id)

    def found(self, values: list[str]) -> set[int]:
        """The records the index finds for these values by their keys, read once: a record so
        found may carry another value of the same hash, which rows_for leaves out."""
        key = tuple(sorted(set(values)))
        if key not in self._found:
            self._found[key] = self.store.found(list(key))
        return self._found[key]

    def _read_ids(self, record_ids) -> None:
        """Fetch, once, every id these records carry (their rows of record_ids), its scope under
        the process's main name."""
        read: dict[int, list] = {r: [] for r in set(record_ids) - self._ids.keys()}
        for record_id, kind, value, scope in self.store.ids_of(list(read)):
            read[record_id].append(self._kept((kind, value, self._aliases.get(scope, scope))))
        for record_id, ids in read.items():
            self._ids[record_id] = self._kept(tuple(ids))

    def _kept(self, value):
        """The one copy of this value the walk keeps: the records of one request repeat their ids,
        and the texts of a few columns (their workers, roles, kinds, sources), as often as it has
        records."""
        return self._copies.setdefault(value, value)

    def load(self, record_ids) -> None:
        """Fetch, once, the walk's columns and the ids of these records; and while the walk has
        read few records (WHOLE_RECORDS), every column of them too, in the same query: most
        requests are a few records, and one query for what the walk and `rows` read costs less
        than two."""
        missing = [r for r in set(record_ids) if r not in self.nodes]
        self._read_ids(missing)
        whole = len(self.nodes) + len(missing) <= WHOLE_RECORDS
        kept = self._kept
        for row in self.store.record_rows(_SELECT_WALK + (", " + _SELECT_RECORDS if whole else ""), missing):
            record_id, time_ns, worker, role, entry, trace_id, span_id, parent_span_id, kind, source, *place = \
                row[:len(_WALK_COLUMNS)]
            ids = self._ids[record_id]
            self.nodes[record_id] = Node(record_id, time_ns, kept(worker), kept(role), entry, trace_id, span_id,
                                         parent_span_id, kept(kind), kept(source), *place, ids=ids,
                                         keys=kept(tuple(i for i in ids if _is_key(i[0], i[2]))))
            if whole:
                self._whole[record_id] = row[len(_WALK_COLUMNS):]

    def rows(self, record_ids) -> list[dict]:
        """What lookup shows of these loaded records, read whole: each a row of RECORD_COLUMNS, its
        attributes read, under its worker as settled within its request (`requests`); in the order
        they were recorded (times.shown_order)."""
        record_ids = list(record_ids)
        read = [self._whole[r] for r in record_ids if r in self._whole]
        read += self.store.record_rows(_SELECT_RECORDS, [r for r in record_ids if r not in self._whole])
        rows = []
        for values in read:
            row = dict(zip(RECORD_COLUMNS, values))
            row["worker"] = self._worker_in_request.get(row["record_id"], row["worker"])
            row["attrs"] = orjson.loads(row["attrs"]) if row["attrs"] else {}
            rows.append(row)
        line_attributes.fill(self.store, rows)
        return sorted(rows, key=shown_order)

    def carriers(self, values, kinds=None) -> list[tuple[int, str]]:
        """(record, kind) of every record carrying one of these values (as an id of `kinds`)."""
        self.rows_for(values)
        return [
            (record_id, kind)
            for v in set(values)
            for (kind, _), records in self._rows[v].items()
            if (kinds is None and kind not in NOT_LOOKED_UP) or (kinds is not None and kind in kinds)
            for record_id in records
        ]

    def _carrying(self, value: str, kind: str) -> list[int]:
        """The records carrying this value (read by rows_for) as an id of this kind, of any scope."""
        return [r for (k, _), records in self._rows[value].items() if k == kind for r in records]

    # -- the walk -------------------------------------------------------------------------------

    def _reach(self, node: Node, followed: set[tuple]) -> set[int]:
        """The records an edge of the id graph may join to this one: those carrying one of its
        keys, its span, or (when a serving process recorded it, or it is a child of such a span)
        the span it is the parent or child of. An edge `followed` already in this walk is not
        followed again: the records it leads to are found already, and following it from each of
        a request's records would cost the square of their number."""
        out: set[int] = set()
        follow = partial(_first_time, followed)
        for kind, value, scope in node.keys:
            if follow(("key", kind, value, scope)):
                out.update(self._rows[value].get((kind, scope), ()))
        serving = node.role in SERVING_ROLES
        if node.trace_id and node.span_id and follow(("span", node.trace_id, node.span_id, serving)):
            for (kind, _), records in self._rows[f"{node.trace_id}/{node.span_id}"].items():
                if kind == SPAN or (kind == PARENT_SPAN and serving):
                    out.update(records)
        if node.trace_id and node.parent_span_id and follow(("parent", node.trace_id, node.parent_span_id)):
            parents = self._carrying(f"{node.trace_id}/{node.parent_span_id}", SPAN)
            self.load(parents)
            out.update(r for r in parents if self.nodes[r].role in SERVING_ROLES)
        if self._joins_in_trace(node) and follow(("trace", node.trace_id)):
            out.update(self._one_request_trace(node.trace_id))
        return out

    def _joins_in_trace(self, node: Node) -> bool:
        """Whether the node may join by its trace alone: an entry record, or a span with no key."""
        return bool(node.trace_id) and (node.entry or (node.kind == "span" and not any(node.keys)))

    def _one_request_trace(self, trace_id: str) -> set[int]:
        """The entry records and the spans with no key of this trace, if one request started in
        it (its entry records are one span): they join; else none."""
        if trace_id not in self._trace_members:
            in_trace = self._carrying(trace_id, TRACE_ID)
            rows = list(self.store.record_rows("record_id, entry, kind, span_id", in_trace))
            entries = {r for r, entry, _, _ in rows if entry}
            keyless = {r for r, entry, kind, _ in rows
                       if kind == "span" and not entry and not any(_is_key(k, s) for k, _, s in self._ids[r])}
            one = len({span for _, entry, _, span in rows if entry and span is not None}) == 1
            self._trace_members[trace_id] = entries | keyless if one else set()
        return self._trace_members[trace_id]

    def _closure(self, seeds: list[int]) -> set[int]:
        seen = set(seeds)
        frontier = list(seeds)
        followed: set[tuple] = set()
        while frontier:
            self.load(frontier)
            values = []
            for r in frontier:
                n = self.nodes[r]
                values += [v for _, v, _ in n.keys]
                if n.trace_id and n.span_id:
                    values.append(f"{n.trace_id}/{n.span_id}")
                if n.trace_id and n.parent_span_id:
                    values.append(f"{n.trace_id}/{n.parent_span_id}")
                if self._joins_in_trace(n):
                    values.append(n.trace_id)
            self.rows_for(values)
            # dict.fromkeys: a record two of the frontier reach is walked from once
            frontier = list(dict.fromkeys(nb for r in frontier for nb in self._reach(self.nodes[r], followed) if nb not in seen))
            seen.update(frontier)
        return seen

    def requests(self, seeds: list[int]) -> list[Request]:
        """The requests these records belong to, in order of their first record; each record's
        worker as settled within its request (what `rows` shows)."""
        scope = self._closure(seeds)  # every record of it loaded by the walk
        grouped = group_records(self.store, sorted(scope), lambda r: _grouped_columns(self.nodes[r]))
        self._worker_in_request.update(grouped.renamed)
        members: dict[int, set[int]] = {}
        for r, q in grouped.request_of.items():
            members.setdefault(q, set()).add(r)
        wanted = sorted({grouped.request_of[r] for r in seeds},
                        key=lambda q: min((self.nodes[r].time_ns or 0, r) for r in members[q]))
        requests = self._lines_naming_it([Request(q, members[q]) for q in wanted])
        requests = self._add_mentions(requests)
        return self._place_ambiguous(requests, grouped)

    def _lines_naming_it(self, requests: list[Request]) -> list[Request]:
        """Lines found only by a word of their text (`token` labels alone: no source read them as
        a request's) are one request, not one each: the lines that name what was looked up."""
        alone = [q for q in requests if self._only_tokens(q)]
        if len(alone) < 2:
            return requests
        merged = Request(min(q.request_id for q in alone), set().union(*(q.record_ids for q in alone)))
        return [q for q in requests if q not in alone] + [merged]

    def _add_mentions(self, requests: list[Request]) -> list[Request]:
        """Lines that name one of a request's keys in their text, read by no source as an id (a
        `token` label, tokens.py), are shown with the request: what grep of its ids finds. They
        join nothing: a line that names two requests' ids is shown with each."""
        keys = {q.request_id: {v for r in q.record_ids for _, v, _ in self.nodes[r].keys} for q in requests}
        self.rows_for(set().union(*keys.values()))  # the walk read most of them already
        mentions = {q.request_id: {r for v in keys[q.request_id] for r in self._carrying(v, TOKEN)} - q.record_ids
                    for q in requests}
        shown: set[int] = set().union(*mentions.values())
        self.load(shown)
        for q in requests:
            q.record_ids |= mentions[q.request_id]
        # the lines naming it that are now shown with a request need no request of their own
        return [q for q in requests if not (q.record_ids <= shown and self._only_tokens(q))]

    def _only_tokens(self, request: Request) -> bool:
        return all(kind == TOKEN for r in request.record_ids for kind, _, _ in self.nodes[r].ids)

    def _place_ambiguous(self, requests: list[Request], grouped) -> list[Request]:
        """A request made only of records whose key collided, with nothing else to place them, is
        shown inside the collided requests whose time spans cover it (all of them if none does)."""
        collided: dict[int, set[tuple]] = {}  # record -> the collided keys it carries
        left_apart: set[int] = set()  # records a collided key does not join
        for record_id, kind, value, scope, joins in grouped.collided:
            collided.setdefault(record_id, set()).add((kind, value, scope))
            if not joins:
                left_apart.add(record_id)
        self._warn_collisions(requests, grouped)
        anchored = [q for q in requests if any(self.nodes[r].entry for r in q.record_ids)]
        result = list(anchored)
        for q in requests:
            if q in anchored:
                continue
            if not (q.record_ids & left_apart):
                result.append(q)
                continue
            keys = {k for r in q.record_ids & left_apart for k in collided[r]}
            candidates = [a for a in anchored if any(collided.get(r, set()) & keys for r in a.record_ids)]
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
                self.warn(
                    f"{len(q.record_ids)} record(s) carry only a collided id and cannot be told apart: "
                    f"shown in each of the {len(covering)} requests that share it, marked ambiguous"
                )
        return sorted(result, key=lambda q: min((self.nodes[r].time_ns or 0) for r in q.record_ids))

    def _warn_collisions(self, requests: list[Request], grouped) -> None:
        """A warning for each collided key the requests found carry: how many requests started
        separately with it."""
        shown = set().union(*(q.record_ids for q in requests)) if requests else set()
        started: dict[tuple, set[int]] = {}
        for record_id, kind, value, scope, _ in grouped.collided:
            if self.nodes[record_id].entry:
                started.setdefault((kind, value, scope), set()).add(grouped.request_of[record_id])
        for (kind, value, scope), holders in started.items():
            if any(r in shown for r in self._rows.get(value, {}).get((kind, scope), ())):
                self.warn(f"collision: {kind} {value} is carried by {len(holders)} requests that started "
                           f"separately; they are listed apart, not merged")

    def _span_of(self, request: Request) -> tuple[int, int]:
        times = [self.nodes[r].time_ns for r in request.record_ids if self.nodes[r].time_ns is not None]
        return (min(times), max(times)) if times else (0, -1)


def _covers(window: tuple[int, int], t: int) -> bool:
    return window[0] <= t <= window[1]

