"""The middleware's own records are put together and rendered apart from structlog (they are written
twice per request); they must still be, byte for byte, the line structlog's processor chain writes
for the same event in the same request, so that a reader never tells the two apart."""

from __future__ import annotations

import re

import pytest
import structlog
from opentelemetry.trace import INVALID_SPAN

from tracejoin.middleware.logs import RecordLog, destination, processor_chain
from tracejoin.middleware.request_state import ServedRequest

IDENTITY = {"service": "svc", "role": "router", "worker": "gw-1:8000"}


def served_request(log: RecordLog, **ids) -> ServedRequest:
    return ServedRequest(
        internal_id="0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f", trace_id="4bf92f3577b34da6a3ce929d0e0e4736",
        span_id="9a3c1e5b7d2f4a60", worker=IDENTITY["worker"], span=INVALID_SPAN, log=log, **ids,
    )


def through_the_chain(request: ServedRequest, level: str, event: str, fields: dict) -> str:
    """The line an application's structlog call writes for `event` while `request` is served."""
    event_dict = {"event": event, **fields}
    with structlog.contextvars.bound_contextvars(**IDENTITY, **request.ids()):
        for processor in processor_chain(**IDENTITY):
            event_dict = processor(None, level, event_dict)
    return event_dict


def without_time(line: str) -> str:
    return re.sub(r'"ts":"[^"]*"', '"ts":"-"', line)


@pytest.mark.parametrize(
    ("ids", "fields"),
    [
        # a start as most requests have it: only ASCII, the ids minted at the start
        ({"x_request_id": "client-abc-123", "parent_span_id": None}, {"method": "POST", "route": "/v1/responses"}),
        # an end after every id became known, with a label orjson would not escape as JSONRenderer
        # does, and a value orjson cannot write at all
        (
            {"x_request_id": "caf\u00e9 \u2615", "parent_span_id": "00f067aa0ba902b7", "reply_id": "resp_7_0a1b",
             "disagg_request_id": "7", "engine_request_id": "12", "engine_worker": "gw-1:8000"},
            {"status": 200, "duration_ms": 1.5, "ttfb_ms": None, "bytes": 2**70, "streaming": True},
        ),
    ],
)
def test_a_record_is_the_line_structlog_writes_for_the_same_event(tmp_path, ids, fields):
    path = tmp_path / "records.jsonl"
    log = RecordLog(**IDENTITY, writer=destination(str(path)))
    request = served_request(log, **ids)

    request.info("request.end", **fields)
    request.warning("request.header_ignored", header="request-id")

    written = path.read_text(encoding="utf-8").splitlines()
    assert [without_time(line) for line in written] == [
        without_time(through_the_chain(request, "info", "request.end", fields)),
        without_time(through_the_chain(request, "warning", "request.header_ignored", {"header": "request-id"})),
    ]
