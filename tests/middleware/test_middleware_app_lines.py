"""What the app logs through structlog while a request is served carries the request's ids, whoever
configured structlog: the middleware (its own chain adds them) or the app (its chain merges
structlog's contextvars, where the middleware binds them). Either way a line reads as if the ids had
been bound into structlog's contextvars when the request started, and the ids the bind_* helpers name
from the call on."""

from __future__ import annotations

import json
import re

import pytest
import structlog
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.testclient import TestClient

from tracejoin.middleware import TraceJoinMiddleware, bind_disagg_request_id, bind_engine_request_id
from tracejoin.middleware.logs import processor_chain

IDENTITY = {"service": "svc", "role": "router", "worker": "w-1"}
HEADERS = {"x-request-id": "lbl", "traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}
START_IDS = ("internal_id", "x_request_id", "trace_id", "span_id", "parent_span_id")


async def handler(request: Request) -> JSONResponse:
    log = structlog.get_logger()
    structlog.contextvars.bind_contextvars(tenant="acme")  # a key of the app's own
    log.info("app.before", model="m")
    bind_engine_request_id(7)
    bind_disagg_request_id(1)
    log.warning("app.after", span_id="the app's")  # the event's own key wins over a bound one
    bind_disagg_request_id(2)
    log.info("app.retried")
    structlog.contextvars.unbind_contextvars("tenant")
    return JSONResponse({"id": "chatcmpl-1"})


def traced_app(log_path) -> Starlette:
    app = Starlette(routes=[Route("/v1/chat/completions", handler, methods=["POST"])])
    app.add_middleware(TraceJoinMiddleware, **IDENTITY, log=str(log_path))
    return app


def post(client: TestClient) -> None:
    assert client.post("/v1/chat/completions", json={}, headers=HEADERS).status_code == 200


def start_ids(lines: list[str]) -> dict:
    """The ids the last request.start carries: those bound when the request started."""
    start = [json.loads(line) for line in lines if '"event":"request.start"' in line][-1]
    return {key: start[key] for key in START_IDS}


# What each of the handler's lines carries besides the ids bound at the start, and its own fields.
EXPECTED = [
    ("info", "app.before", {"tenant": "acme"}, {"model": "m"}),
    ("warning", "app.after", {"tenant": "acme", "engine_request_id": "7", "engine_worker": "w-1",
                              "disagg_request_id": "1"}, {"span_id": "the app's"}),
    ("info", "app.retried", {"tenant": "acme", "engine_request_id": "7", "engine_worker": "w-1",
                             "disagg_request_id": "2"}, {}),
]


def without_time(line: str) -> str:
    return re.sub(r'"ts":"[^"]*"', '"ts":"-"', line)


def test_with_the_middlewares_chain_the_app_lines_are_those_of_bound_contextvars(tmp_path):
    log_path = tmp_path / "router.jsonl"
    with TestClient(traced_app(log_path)) as client:
        post(client)
        post(client)  # a second request carries its own ids, not the first's
    lines = log_path.read_text(encoding="utf-8").splitlines()

    requests = [lines[:5], lines[5:]]  # request.start, the app's three lines, request.end
    for request_lines in requests:
        bound_at_start = {**IDENTITY, **start_ids(request_lines)}
        expected = []
        for level, event, bound_later, fields in EXPECTED:
            event_dict = {"event": event, **fields}
            with structlog.contextvars.bound_contextvars(**bound_at_start, **bound_later):
                for processor in processor_chain(**IDENTITY):
                    event_dict = processor(None, level, event_dict)
            expected.append(without_time(event_dict) + "\n")
        assert [without_time(line) + "\n" for line in request_lines[1:4]] == expected
    assert start_ids(requests[0])["internal_id"] != start_ids(requests[1])["internal_id"]


@pytest.mark.parametrize("when", ["before_the_first_request", "after_the_first_request"])
def test_with_the_apps_own_chain_the_ids_are_bound_into_structlog_contextvars(tmp_path, when):
    log_path = tmp_path / "router.jsonl"
    capture = structlog.testing.LogCapture()
    own_chain = [structlog.contextvars.merge_contextvars, capture]
    if when == "before_the_first_request":
        structlog.configure(processors=own_chain)
    with TestClient(traced_app(log_path)) as client:
        if when == "after_the_first_request":
            post(client)  # the middleware configures structlog
            structlog.configure(processors=own_chain)
        post(client)

    ids = start_ids(log_path.read_text(encoding="utf-8").splitlines())
    assert capture.entries == [
        {**IDENTITY, **ids, **bound_later, **fields, "event": event, "log_level": level}
        for level, event, bound_later, fields in EXPECTED
    ]
