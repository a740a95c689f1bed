"""A record's attributes read again from its line, for the lines whose records do not store them.

Making each record's attributes at ingest (the line's fields as JSON text, less those lifted into
columns) was most of what reading Dynamo's JSON log lines cost, and what the store held most of. The
store keeps every line's bytes (line_blocks.py), so the records of such a line store only the
attributes the record contract reads (record_contract.ATTRIBUTES: what the requests build, the
worker naming and the dashboards read of a record), and a reader that shows a record (`lookup`,
its page) reads the rest from the line here, by the same rule the line's parser keeps them by.

Which lines: Dynamo's JSON log lines (not its request-trace rows, nor its readable-format lines or
the lines of other formats in the same file, which store their attributes whole).

This module is read by every lookup, so it imports nothing of the source modules (their import
costs a lookup more than its queries): the source module imports its rule from here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from .store import Store

# Dynamo's request-trace rows, which a worker's stderr may hold among its log lines.
REQUEST_TRACE_SCHEMA = "dynamo.request.trace.v1"

# The fields of a Dynamo JSON log line that become its record's columns and ids, not attributes.
DYNAMO_LIFTED = frozenset({
    "time", "level", "target", "message", "trace_id", "span_id", "parent_id", "request_id",
    "x_dynamo_request_id", "x_request_id", "span_name",
})


def dynamo_json_attrs(obj: dict, target: str, span_name: str | None) -> dict:
    """The attributes of a Dynamo JSON log line, from its fields (`obj`, changed in place:
    deleting the few lifted keys is cheaper than copying the rest, and keeps the others in their
    order), with its target and span name last."""
    for key in DYNAMO_LIFTED.intersection(obj):
        del obj[key]
    obj["target"] = target
    if span_name:
        obj["span_name"] = span_name
    return obj


def _dynamo_json_line(text: str) -> dict | None:
    """The attributes of the line, when it is a Dynamo JSON log line whose record keeps only some."""
    if not text.startswith("{"):  # wrapped by what collected it (kubectl, docker): unwrapped as it was read
        from .framing import frame

        text = frame(text).text
        if not text.startswith("{"):
            return None
    try:
        obj = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(obj, dict) or obj.get("schema") == REQUEST_TRACE_SCHEMA:
        return None
    target, span_name = obj.get("target"), obj.get("span_name")
    if not (type(target) is type(obj.get("time")) is type(obj.get("level")) is str):
        return None
    return dynamo_json_attrs(obj, target, span_name if isinstance(span_name, str) else None)


# The sources whose records may keep only some of their attributes, and how each reads them all
# again from a line (None: the line is not one of those, its record stores them whole).
READ_AGAIN = {"dynamo_jsonl": _dynamo_json_line}


def fill(store: Store, rows: list[dict]) -> None:
    """Give each record (rows with `source`, `kind`, `origin_id`, `offset`, `seq` and `attrs`, a
    dict) its attributes whole, read from its line where its record keeps only some. A store that
    does not hold the line (written before lines were kept) has kept them whole."""
    wanted = [row for row in rows if row["source"] in READ_AGAIN and row["kind"] == "log" and row["seq"] == 0]
    lines = store.lines_at([(row["origin_id"], row["offset"]) for row in wanted])
    for row in wanted:
        line = lines.get((row["origin_id"], row["offset"]))
        attrs = READ_AGAIN[row["source"]](line) if line is not None else None
        if attrs is not None:
            row["attrs"] = attrs
