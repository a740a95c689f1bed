"""What a source yields: one `Record` per log line, span, perf row, hook record or proxy tap.

Sources build `Record`s; `BatchBuilder` turns a batch of them into the Arrow tables the store
inserts in one go (DuckDB reads Arrow directly; row-by-row inserts are a hundred times slower).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from operator import attrgetter
from typing import TYPE_CHECKING

import orjson
import pyarrow as pa

from .ids import PARENT_SPAN, SPAN, derived
from .times import INT64_MAX, INT64_MIN

if TYPE_CHECKING:
    from .store import Origin


# What a line or a field writes where a request has no id: never an id, so never one request of
# every record that writes it.
NOT_IDS = frozenset({"", "None", "none", "NONE", "null", "Null", "NULL", "nil", "undefined", "-1", "N/A", "n/a",
                     "NaN", "nan"})


class Unstorable(ValueError):
    """A record with a value the store cannot hold (a time past 2262, attributes nested deeper than
    JSON text is written): its line or span is quarantined with this reason, the rest is stored."""


@dataclass(slots=True)
class Record:
    kind: str  # log | span | perf | hook | tap
    name: str | None = None
    time_ns: int | None = None
    steady_s: float | None = None
    worker: str | None = None
    role: str | None = None
    level: str | None = None
    duration_ns: int | None = None
    status: str | None = None
    entry: bool = False
    trace_id: str | None = None
    span_id: str | None = None
    parent_span_id: str | None = None
    attrs: dict | None = None
    attrs_text: str | None = None  # the attributes already as JSON text (a line kept as written), instead of attrs
    ids: list[tuple[str, str, str | None]] = field(default_factory=list)
    # The format that read the record, where it is not its file's (a line of another format in a
    # mixed stream, collector/sources/text_log.py); None: the file's.
    source: str | None = None
    # The line's text as stored (without the prompt or reply text a source leaves out), which the
    # scan for id-shaped words reads (collector/tokens.py); not stored itself.
    line_text: str | None = None

    def add_id(self, kind: str, value, scope: str | None = None) -> None:
        """Attach an id; empty values and the words that say there is none (`None`, `null`, `-1`)
        are skipped, numbers (values and scopes) are kept as their decimal text."""
        if value is None or isinstance(value, bool):
            return
        if not isinstance(value, str):
            value = str(value)
        if value in NOT_IDS:
            return
        if scope is not None and not isinstance(scope, str):
            scope = str(scope)
        if (kind, value, scope) not in self.ids:
            self.ids.append((kind, value, scope))
            for implied_kind, implied_value in derived(kind, value):
                self.add_id(implied_kind, implied_value)


RECORDS_SCHEMA = pa.schema(
    [
        ("record_id", pa.int64()),
        ("time_ns", pa.int64()),
        ("steady_s", pa.float64()),
        ("source", pa.string()),
        ("kind", pa.string()),
        ("worker", pa.string()),
        ("role", pa.string()),
        ("level", pa.string()),
        ("name", pa.string()),
        ("duration_ns", pa.int64()),
        ("status", pa.string()),
        ("entry", pa.bool_()),
        ("trace_id", pa.string()),
        ("span_id", pa.string()),
        ("parent_span_id", pa.string()),
        ("attrs", pa.string()),
        ("origin_id", pa.int64()),  # a ClickHouse store's are 63-bit
        ("offset", pa.int64()),
        ("seq", pa.int32()),
    ]
)
IDS_SCHEMA = pa.schema(
    [("record_id", pa.int64()), ("kind", pa.string()), ("value", pa.string()), ("scope", pa.string())]
)
# A record's ids, (kind, value, scope) triples, as one Arrow list value.
_ID_LIST = pa.list_(pa.struct(list(IDS_SCHEMA)[1:]))
QUARANTINE_SCHEMA = pa.schema(
    [
        ("origin_id", pa.int64()),  # a ClickHouse store's are 63-bit
        ("path", pa.string()),
        ("offset", pa.int64()),
        ("line_no", pa.int64()),
        ("reason", pa.string()),
        ("excerpt", pa.string()),
    ]
)

_RECORD_FIELDS = [
    "time_ns", "steady_s", "kind", "worker", "role", "level", "name", "duration_ns", "status",
    "entry", "trace_id", "span_id", "parent_span_id",
]


class BatchBuilder:
    """Accumulates records with their positions, and quarantined lines, from one origin or from
    several in turn (ingest puts many small files in one transaction); `origins` are those whose
    rows (their positions) are written with the batch. `tables` makes the columns, one list
    comprehension per column (a few times faster than appending field by field as records arrive)."""

    def __init__(self, source: str | None = None, origin: Origin | None = None):
        self.clear()
        if origin is not None:
            self.reading(source, origin)

    def reading(self, source: str, origin: Origin) -> None:
        """Records and lines added from now on come from `origin`, as `source` read it."""
        self._source, self._origin = source, origin
        self.origins[origin.origin_id] = origin

    def clear(self) -> None:
        """Empty the batch, origins included: `reading` goes on with one."""
        self._records: list[Record] = []
        self._attrs: list[str | None] = []
        self._offsets: list[int] = []
        self._seqs: list[int] = []
        self._runs: list[list] = []  # [source, origin_id, records] of consecutive records, in order
        self._quarantine: dict[str, list] = {name: [] for name in QUARANTINE_SCHEMA.names}
        # Lines stored as text because their format could not read them: how many, and where the
        # first few are with why (the ingest summary says them).
        self.unread = 0
        self.unread_samples: list[str] = []
        self.origins: dict[int, Origin] = {}
        self._source, self._origin = None, None

    def __len__(self) -> int:
        return len(self._records) + len(self._quarantine["reason"])

    def add(self, records: list[Record], offset: int) -> None:
        """The records of one line (or one received body) at `offset`, numbered in order: all of
        them, or none and Unstorable when one holds a value the store cannot."""
        attrs = [storable_attrs(r) for r in records]
        self._records += records
        self._attrs += attrs
        self._offsets += [offset] * len(records)
        self._seqs += range(len(records))
        runs, origin_id = self._runs, self._origin.origin_id
        for record in records:
            source = record.source or self._source
            if runs and runs[-1][1] == origin_id and runs[-1][0] == source:
                runs[-1][2] += 1
            else:
                runs.append([source, origin_id, 1])

    def note_unread(self, path: str, offset: int, line_no: int, reason: str) -> None:
        self.unread += 1
        if len(self.unread_samples) < 5:
            self.unread_samples.append(f"{path}:{line_no} (byte {offset}): {reason}")

    def quarantine(self, path: str, offset: int, line_no: int, reason: str, excerpt: bytes) -> None:
        q = self._quarantine
        q["origin_id"].append(self._origin.origin_id)
        q["path"].append(path)
        q["offset"].append(offset)
        q["line_no"].append(line_no)
        q["reason"].append(reason)
        q["excerpt"].append(excerpt[:200].decode("utf-8", "replace"))

    def counts_by_source(self) -> dict[str, tuple[int, int]]:
        """(records, quarantined lines) the batch holds, by source."""
        counts: dict[str, list[int]] = {}
        for source, _, n in self._runs:
            counts.setdefault(source, [0, 0])[0] += n
        for origin_id in self._quarantine["origin_id"]:
            counts.setdefault(self.origins[origin_id].source, [0, 0])[1] += 1
        return {source: (records, quarantined) for source, (records, quarantined) in counts.items()}

    @property
    def record_count(self) -> int:
        return len(self._records)

    @property
    def quarantine_count(self) -> int:
        return len(self._quarantine["reason"])

    def tables(self, first_record_id: int, record_ids: list[int] | None = None) -> tuple[pa.Table, pa.Table, pa.Table]:
        """The records, their ids and the quarantined lines; the records numbered from
        first_record_id on, or by `record_ids` (collector/bulk.py numbers them among its own)."""
        records = self._records
        if record_ids is None:
            record_ids = list(range(first_record_id, first_record_id + len(records)))
        cols = {name: list(map(attrgetter(name), records)) for name in _RECORD_FIELDS}
        cols["attrs"] = self._attrs
        cols["offset"] = self._offsets
        cols["seq"] = self._seqs
        cols["record_id"] = record_ids
        cols["source"] = [source for source, _, n in self._runs for _ in range(n)]
        cols["origin_id"] = [origin_id for _, origin_id, n in self._runs for _ in range(n)]
        id_lists = list(map(_ids_and_edges, records))
        # Arrow flattens the records' lists of triples into columns in C: transposing a Python row
        # per id cost more than building the whole records table. (`values` of the new array is its
        # flattened list; ListArray.flatten() would also import pyarrow.compute, ~0.1 s.)
        kinds_values_scopes = pa.array(id_lists, type=_ID_LIST).values.flatten()
        ids_record_id = [record_id for record_id, ids in zip(record_ids, id_lists) for _ in ids]
        return (
            pa.Table.from_pydict(cols, schema=RECORDS_SCHEMA),
            pa.Table.from_arrays([pa.array(ids_record_id, pa.int64()), *kinds_values_scopes], schema=IDS_SCHEMA),
            pa.Table.from_pydict(self._quarantine, schema=QUARANTINE_SCHEMA),
        )


def check_storable(records: list[Record]) -> None:
    """Unstorable when one of the records holds a value the store cannot (as BatchBuilder.add)."""
    for record in records:
        storable_attrs(record)


def storable_attrs(record: Record) -> str | None:
    """The record's attributes as the JSON text stored; Unstorable when a value does not fit."""
    for name in ("time_ns", "duration_ns"):
        value = getattr(record, name)
        if value is not None and not INT64_MIN <= value <= INT64_MAX:
            raise Unstorable(f"{_WHAT[name]} {value} ns does not fit the store's 64-bit integers"
                             f"{' (it is not between 1677 and 2262)' if name == 'time_ns' else ''}")
    if record.attrs_text is not None:
        return record.attrs_text
    if not record.attrs:
        return None
    try:
        return orjson.dumps(record.attrs).decode()
    except TypeError as e:  # orjson.JSONEncodeError
        reason = _ATTRS_UNSTORABLE.get(str(e), str(e))
        raise Unstorable(f"its attributes cannot be stored: {reason}") from None


_WHAT = {"time_ns": "time", "duration_ns": "duration"}
_ATTRS_UNSTORABLE = {
    "Recursion limit reached": "nested more than 254 levels deep",
    "Integer exceeds 64-bit range": "an integer does not fit 64 bits",
}


def _ids_and_edges(record: Record) -> list[tuple[str, str, str | None]]:
    """The record's ids, and its place in the span tree as `span`/`parent_span` ids (ids.py)."""
    if not record.trace_id or not (record.span_id or record.parent_span_id):
        return record.ids
    edges = []
    if record.span_id:
        edges.append((SPAN, f"{record.trace_id}/{record.span_id}", None))
    if record.parent_span_id:
        edges.append((PARENT_SPAN, f"{record.trace_id}/{record.parent_span_id}", None))
    return record.ids + edges
