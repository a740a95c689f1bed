"""Dynamo JSON lines: one type check passes a good line, and a line it stops is quarantined for the
reason reading it field by field (`field`, in the order below) gives, learning the file's identity
just as far as that reading gets."""

from __future__ import annotations

import itertools

import orjson
import pytest

from tracejoin.collector.ids import INTERNAL_ID, TRACE_ID, X_REQUEST_ID
from tracejoin.collector import framing, line_attributes
from tracejoin.collector.sources import dynamo_jsonl
from tracejoin.collector.sources.dynamo_jsonl import LineParser
from tracejoin.collector.sources.parsing import Unparseable, field, iso_to_ns

GOOD = {
    "time": "2026-08-21T10:15:02.041500Z", "level": "INFO", "file": "push_handler.rs", "line": 1,
    "target": "dynamo_runtime::pipeline::network::ingress::push_handler", "message": "request received",
    "component": "backend", "instance_id": "7587888880384150231", "parent_id": "d9806472cb4ae069",
    "request_id": "3e334e85-9879-af25-6d38-27d651b7804a", "span_id": "9abcde3c584628a0",
    "span_name": "handle_payload", "trace_id": "809d4580aaed41565abc38d58f77f840", "x_request_id": "xr-0",
}
TEXT_FIELDS = ["message", "target", "span_name", "time", "level", "trace_id", "span_id", "parent_id",
               "request_id", "x_dynamo_request_id", "x_request_id"]
REQUIRED = {"target", "time", "level"}
MISSING = object()
WRONG = [MISSING, None, 7, 1.5, True, False, ["a"], {"a": 1}, "", "not a time"]


def reason_field_by_field(obj: dict) -> str | None:
    """The reference: each field through `field` in reading order, the time parsed once read."""
    try:
        for key in TEXT_FIELDS:
            value = field(obj, key, (str,), required=key in REQUIRED)
            if key == "time":
                iso_to_ns(value)
    except Unparseable as e:
        return str(e)
    return None


def parse(obj: dict, parser: LineParser | None = None):
    return (parser or LineParser("worker.stderr.jsonl")).parse(orjson.dumps(obj))


def reason(obj: dict) -> str | None:
    """Why Dynamo's reader cannot read the line (the reason its record keeps as `unread`)."""
    try:
        dynamo_jsonl.Reader("worker.stderr.jsonl").read(framing.frame(orjson.dumps(obj).decode()))
    except Unparseable as e:
        return str(e)
    return None


def with_values(**values) -> dict:
    obj = dict(GOOD)
    for key, value in values.items():
        if value is MISSING:
            obj.pop(key, None)
        else:
            obj[key] = value
    return obj


@pytest.mark.parametrize("key", TEXT_FIELDS)
@pytest.mark.parametrize("value", WRONG, ids=lambda v: "missing" if v is MISSING else repr(v))
def test_one_odd_field_gives_the_field_by_field_reason(key, value):
    obj = with_values(**{key: value})
    assert reason(obj) == reason_field_by_field(obj)


@pytest.mark.parametrize("first, second", list(itertools.combinations(TEXT_FIELDS, 2)))
def test_of_two_bad_fields_the_first_read_is_named(first, second):
    for value_1, value_2 in [(7, ["a"]), (MISSING, True), ("not a time", 1.5)]:
        obj = with_values(**{first: value_1, second: value_2})
        assert reason(obj) == reason_field_by_field(obj)


def test_reasons_name_the_field_and_its_type():
    assert reason(with_values(level=3)) == "field 'level' is int, expected str"
    assert reason(with_values(span_id=False)) == "field 'span_id' is bool, expected str"
    assert reason(with_values(target=MISSING, time=5)) == "missing field 'target'"
    assert reason(with_values(time="yesterday", level=None)) == "unreadable time 'yesterday'"


def test_a_rejected_line_teaches_the_identity_only_if_it_was_read_that_far():
    announce = {"time": "2026-08-21T10:14:57.000000Z", "level": "INFO", "target": "dynamo_llm::http::service",
                "message": "Starting HTTP(S) service", "address": "0.0.0.0:8000"}
    parser = LineParser("frontend.stderr.jsonl")
    with pytest.raises(Unparseable):
        parse({**announce, "span_name": 4}, parser)  # refused before the identity is looked at
    assert parser.worker is None
    with pytest.raises(Unparseable):
        parse({**announce, "level": 4}, parser)  # refused after
    assert (parser.worker, parser.role) == ("frontend:0.0.0.0:8000", "frontend")


def attrs_read_again(obj: dict) -> dict | None:
    """The attributes a reader shows of the line's record, read again from the line as kept."""
    return line_attributes.READ_AGAIN["dynamo_jsonl"](orjson.dumps(obj).decode())


def test_a_good_line():
    line = {**GOOD, "parent_id": None, "x_dynamo_request_id": GOOD["request_id"], "extra": [1]}
    [record] = parse(line)
    assert (record.name, record.level, record.time_ns) == ("request received", "INFO", 1787307302041500000)
    assert (record.trace_id, record.span_id, record.parent_span_id) == (GOOD["trace_id"], GOOD["span_id"], None)
    assert record.ids == [(INTERNAL_ID, GOOD["request_id"], None), (X_REQUEST_ID, "xr-0", None),
                          (TRACE_ID, GOOD["trace_id"], None)]
    # The record stores none of the line's other fields (the record contract reads none of them)...
    assert record.attrs is None
    # ...a reader reads them from the line: lifted keys (even null ones) left out, the rest in their
    # order, target and span_name last.
    assert list(attrs_read_again(line).items()) == [
        ("file", "push_handler.rs"), ("line", 1), ("component", "backend"), ("instance_id", "7587888880384150231"),
        ("extra", [1]), ("target", GOOD["target"]), ("span_name", "handle_payload"),
    ]


def test_a_line_stores_the_fields_the_record_contract_reads():
    """What the requests build and the dashboards read of a record (its route, endpoint, error)
    is stored, so they never read the line; a reader shows them among the others."""
    line = {**GOOD, "uri": "/v1/chat/completions", "endpoint": "chat_completions", "error_type": "Overloaded",
            "status": 503, "ttft_ms": 12.5, "uri_extra": None}
    [record] = parse(line)
    assert record.attrs == {"error_type": "Overloaded", "ttft_ms": 12.5, "uri": "/v1/chat/completions",
                            "endpoint": "chat_completions"}
    assert attrs_read_again(line).items() >= record.attrs.items()


def test_lines_whose_records_store_their_attributes_whole_are_not_read_again():
    assert attrs_read_again({"schema": line_attributes.REQUEST_TRACE_SCHEMA, "event_type": "request_end"}) is None
    assert attrs_read_again({**GOOD, "target": 4}) is None
    assert line_attributes.READ_AGAIN["dynamo_jsonl"]("2026-08-21T10:15:02.041500Z  INFO dynamo_llm: hello") is None
    wrapped = "2026-08-21T10:15:02.041500001Z stderr F " + orjson.dumps(GOOD).decode()
    assert line_attributes.READ_AGAIN["dynamo_jsonl"](wrapped)["instance_id"] == GOOD["instance_id"]


def test_empty_texts_are_no_values():
    [record] = parse(with_values(message="", span_name="", request_id="", x_request_id=""))
    assert record.name == GOOD["target"]
    assert record.ids == [(TRACE_ID, GOOD["trace_id"], None)]
    assert "span_name" not in attrs_read_again(with_values(message="", span_name="", request_id="", x_request_id=""))


def test_a_json_line_without_dynamos_keys_is_kept_with_its_time_and_level():
    """Never worse than grep: a line Dynamo's reader does not claim is read as JSON text."""
    [record] = parse(with_values(target=MISSING))
    assert (record.level, record.time_ns) == (GOOD["level"], iso_to_ns(GOOD["time"]))
    assert record.attrs["request_id"] == GOOD["request_id"]
