"""BatchBuilder's ids table, which Arrow builds from each record's list of ids: one row per id, record
by record in order, each record's ids then its span and parent-span edges."""

from __future__ import annotations

from tracejoin.collector.ids import ENGINE_REQUEST_ID, INTERNAL_ID, PARENT_SPAN, REPLY_ID, SPAN, TRACE_ID
from tracejoin.collector.records import IDS_SCHEMA, BatchBuilder, Record
from tracejoin.collector.store import Origin

T = "809d4580aaed41565abc38d58f77f840"


def records() -> list[Record]:
    plain = Record(kind="log", name="no ids")
    reply = Record(kind="log", name="reply")
    reply.add_id(REPLY_ID, "chatcmpl-3e334e85-9879-af25-6d38-27d651b7804a")  # also names its internal id
    reply.add_id(INTERNAL_ID, "3e334e85-9879-af25-6d38-27d651b7804a")  # already there: once
    scoped = Record(kind="perf", name="scoped")
    scoped.add_id(ENGINE_REQUEST_ID, 42, "host:1")
    span = Record(kind="span", name="span", trace_id=T, span_id="9abcde3c584628a0", parent_span_id="d9806472cb4ae069")
    span.add_id(TRACE_ID, T)
    child = Record(kind="log", name="parent only", trace_id=T, parent_span_id="d9806472cb4ae069")
    untraced = Record(kind="log", name="span without trace", span_id="9abcde3c584628a0")
    return [plain, reply, scoped, span, child, plain, untraced]


ORIGIN = Origin(1, "x.log", "test", 0, "", 0, 0)


def test_ids_rows_record_by_record():
    batch = BatchBuilder("test", ORIGIN)
    for offset, record in enumerate(records()):
        batch.add([record], offset)
    _, ids, _ = batch.tables(1000)
    assert ids.schema == IDS_SCHEMA
    assert ids.to_pylist() == [dict(zip(IDS_SCHEMA.names, row)) for row in [
        (1001, REPLY_ID, "chatcmpl-3e334e85-9879-af25-6d38-27d651b7804a", None),
        (1001, INTERNAL_ID, "3e334e85-9879-af25-6d38-27d651b7804a", None),
        (1002, ENGINE_REQUEST_ID, "42", "host:1"),
        (1003, TRACE_ID, T, None),
        (1003, SPAN, f"{T}/9abcde3c584628a0", None),
        (1003, PARENT_SPAN, f"{T}/d9806472cb4ae069", None),
        (1004, PARENT_SPAN, f"{T}/d9806472cb4ae069", None),
    ]]


def test_a_batch_without_records():
    batch = BatchBuilder("test", ORIGIN)
    batch.quarantine("x.log", 0, 1, "unreadable", b"?")
    records, ids, quarantined = batch.tables(7)
    assert (records.num_rows, ids.num_rows, quarantined.num_rows) == (0, 0, 1)
    assert ids.schema == IDS_SCHEMA
