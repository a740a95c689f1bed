"""TraceJoinMiddleware in front of an OpenAI-like app, through uvicorn, httpx and the openai client."""

from __future__ import annotations

import json
import re
import socket
import threading
import uuid
from contextlib import ExitStack
from datetime import datetime

import httpx
import openai
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.trace import SpanKind, format_span_id, format_trace_id
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tracejoin.middleware import TraceJoinMiddleware, bind_disagg_request_id, inject_tracejoin_headers

from .live_servers import (
    WAIT_S, LogFile, Served, app_config, event, first_data_event, running, serve_openai_like_app, streaming_post,
    wait_until,
)
from .openai_like_app import TEXT, create_app

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")
RESPONSES_NAME = re.compile(r"resp_(\d+)_[0-9a-f]{16}")


def openai_client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0, timeout=WAIT_S)


def data_events(lines) -> list[dict]:
    """The JSON payloads of an SSE body's `data:` lines, [DONE] left out."""
    return [json.loads(line[5:]) for line in lines if line.startswith("data:") and line != "data: [DONE]"]


# -- replies of every kind are tied to their request ------------------------------------------------


def test_health_checks_and_metric_scrapes_are_not_recorded(served: Served):
    for path in ("/health", "/metrics"):
        httpx.get(f"{served.url}{path}", timeout=WAIT_S)
    httpx.post(f"{served.url}/v1/chat/completions", json=CHAT, timeout=WAIT_S)
    served.log.wait_for(event("request.end"))
    routes = [r.get("route") for r in served.log.records() if r["event"] == "request.start"]
    assert routes == ["/v1/chat/completions"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
def test_a_chat_reply_is_tied_to_its_request(served: Served, stream: bool):
    chat = openai_client(served.url).chat.completions
    if stream:
        with chat.with_streaming_response.create(
            **CHAT, stream=True, extra_headers={"x-request-id": "client-abc"}
        ) as response:
            headers, chunks = response.headers, list(response.parse())
        reply_id = chunks[0].id
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chunks)
    else:
        raw = chat.with_raw_response.create(**CHAT, extra_headers={"x-request-id": "client-abc"})
        headers, reply = raw.headers, raw.parse()
        reply_id, text = reply.id, reply.choices[0].message.content

    assert text == TEXT
    assert headers["x-request-id"] == "client-abc"
    assert reply_id == f"chatcmpl-{headers['x-engine-request-id']}"
    end = served.log.end_of(reply_id=reply_id)
    assert end["status"] == 200
    assert end["streaming"] is stream
    assert end["disconnected"] is False
    assert end["engine_request_id"] == headers["x-engine-request-id"]
    assert end["x_request_id"] == "client-abc"
    assert uuid.UUID(end["internal_id"]).version == 4
    assert 0 < end["ttfb_ms"] <= end["duration_ms"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
def test_a_completion_reply_is_tied_to_its_request(served: Served, stream: bool):
    completions = openai_client(served.url).completions
    if stream:
        with completions.with_streaming_response.create(model="m", prompt="hi", stream=True) as response:
            headers, chunks = response.headers, list(response.parse())
        reply_id, text = chunks[0].id, "".join(chunk.choices[0].text for chunk in chunks)
    else:
        raw = completions.with_raw_response.create(model="m", prompt="hi")
        headers, reply = raw.headers, raw.parse()
        reply_id, text = reply.id, reply.choices[0].text

    assert text == TEXT
    assert reply_id == f"cmpl-{headers['x-engine-request-id']}"
    end = served.log.end_of(reply_id=reply_id)
    assert (end["status"], end["streaming"]) == (200, stream)
    assert end["engine_request_id"] == headers["x-engine-request-id"]


@pytest.mark.parametrize("stream", [False, True], ids=["unary", "streamed"])
def test_a_responses_reply_is_named_after_its_disagg_request(served: Served, stream: bool):
    responses = openai_client(served.url).responses
    if stream:
        with responses.with_streaming_response.create(model="m", input="hi", stream=True) as response:
            headers, events = response.headers, list(response.parse())
        assert events[0].type == "response.created"
        reply_id = events[0].response.id
        text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    else:
        raw = responses.with_raw_response.create(model="m", input="hi")
        headers, reply = raw.headers, raw.parse()
        reply_id, text = reply.id, reply.output_text

    assert text == TEXT
    name = RESPONSES_NAME.fullmatch(reply_id)
    assert name, reply_id
    end = served.log.end_of(reply_id=reply_id)
    assert end["disagg_request_id"] == name.group(1)
    assert end["engine_request_id"] == headers["x-engine-request-id"]
    span = served.span_of(end["internal_id"])
    assert span.attributes["gen_ai.response.id"] == reply_id
    assert span.attributes["tracejoin.disagg_request_id"] == name.group(1)
    assert span.attributes["tracejoin.engine_request_id"] == headers["x-engine-request-id"]


def test_a_client_set_request_id_names_the_responses_reply(served: Served):
    reply = openai_client(served.url).responses.create(model="m", input="hi", extra_body={"request_id": "resp_mine"})
    assert reply.id == "resp_mine"
    assert served.log.end_of(reply_id="resp_mine")["status"] == 200


# -- records, log lines and spans -------------------------------------------------------------------


def test_every_line_of_a_request_follows_the_schema_and_carries_its_ids(served: Served):
    reply = httpx.post(f"{served.url}/v1/chat/completions", json=CHAT, headers={"x-request-id": "lbl"}).json()

    end = served.log.end_of(reply_id=reply["id"])
    records = served.log.for_request(end["internal_id"])
    # the app's own structlog line sits between the middleware's, carrying the same ids
    assert [r["event"] for r in records] == ["request.start", "app.generating", "request.end"]
    port = served.url.rsplit(":", 1)[1]
    for record in records:
        assert record["schema"] == "tracejoin.log.v1"
        assert TIMESTAMP.fullmatch(record["ts"]), record["ts"]
        assert record["level"] == "info"
        assert (record["service"], record["role"]) == ("test-router", "router")
        assert record["worker"] == f"{socket.gethostname()}:{port}"
        assert record["x_request_id"] == "lbl"
        assert re.fullmatch("[0-9a-f]{32}", record["trace_id"]) and record["trace_id"] == end["trace_id"]
        assert re.fullmatch("[0-9a-f]{16}", record["span_id"]) and record["span_id"] == end["span_id"]
    start, app_line, _ = records
    assert (start["method"], start["route"]) == ("POST", "/v1/chat/completions")
    assert app_line["model"] == "m"
    assert app_line["engine_request_id"] == end["engine_request_id"]  # bound by the app before it logged
    assert end["bytes"] == len(json.dumps(reply, separators=(",", ":")).encode())


def test_one_server_span_per_request_carries_the_ids(served: Served):
    raw = openai_client(served.url).chat.completions.with_raw_response.create(
        **CHAT, extra_headers={"x-request-id": "span-label"}
    )
    end = served.log.end_of(reply_id=raw.parse().id)

    span = served.span_of(end["internal_id"])
    assert span.kind == SpanKind.SERVER
    assert span.name == "POST /v1/chat/completions"
    assert (format_trace_id(span.context.trace_id), format_span_id(span.context.span_id)) == (
        end["trace_id"], end["span_id"]
    )
    assert dict(span.attributes) == {
        "tracejoin.internal_id": end["internal_id"],
        "http.request.header.x-request-id": ("span-label",),
        "gen_ai.response.id": end["reply_id"],
        "tracejoin.engine_request_id": raw.headers["x-engine-request-id"],
        "tracejoin.engine_worker": end["worker"],
        "http.request.method": "POST",
        "url.path": "/v1/chat/completions",
        "http.route": "/v1/chat/completions",
        "http.response.status_code": 200,
        "tracejoin.streaming": False,
        "tracejoin.disconnected": False,
    }
    resource = span.resource.attributes
    assert (resource["service.name"], resource["service.instance.id"], resource["tracejoin.role"]) == (
        "test-router", end["worker"], "router"
    )


def test_a_span_and_its_request_end_line_state_the_same_interval(served: Served):
    # Two records of one request that disagree on how long it took make a lookup's phases depend on
    # which of them it reads (a loaded machine's span outlasted its line by most of a millisecond).
    for _ in range(5):
        reply = openai_client(served.url).chat.completions.create(**CHAT)
        end = served.log.end_of(reply_id=reply.id)
        span = served.span_of(end["internal_id"])
        ended_us = round(datetime.fromisoformat(end["ts"].replace("Z", "+00:00")).timestamp() * 1e6)
        assert abs(span.end_time / 1e3 - ended_us) <= 1
        assert abs((span.end_time - span.start_time) / 1e6 - end["duration_ms"]) <= 0.001


def test_an_incoming_traceparent_is_continued(served: Served):
    caller_trace, caller_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    httpx.post(
        f"{served.url}/v1/chat/completions", json=CHAT, headers={"traceparent": f"00-{caller_trace}-{caller_span}-01"}
    )

    start = served.log.wait_for(event("request.start"))[0]
    assert (start["trace_id"], start["parent_span_id"]) == (caller_trace, caller_span)
    span = served.span_of(start["internal_id"])
    assert format_trace_id(span.context.trace_id) == caller_trace
    assert span.parent.is_remote and format_span_id(span.parent.span_id) == caller_span


def test_without_a_traceparent_a_request_starts_its_own_trace(served: Served):
    httpx.post(f"{served.url}/v1/chat/completions", json=CHAT)

    start = served.log.wait_for(event("request.start"))[0]
    assert "parent_span_id" not in start
    assert served.span_of(start["internal_id"]).parent is None


# -- ids a client chooses are labels, never keys ----------------------------------------------------


def test_concurrent_requests_sharing_an_x_request_id_stay_apart(served: Served):
    body = {**CHAT, "model": "hold", "stream": True}
    with httpx.Client(base_url=served.url, timeout=WAIT_S) as client, ExitStack() as streams:
        responses = [
            streams.enter_context(
                client.stream("POST", "/v1/chat/completions", json=body, headers={"x-request-id": "shared"})
            )
            for _ in range(6)
        ]
        # all six are in flight at once: started, none ended
        served.log.wait_for(lambda r: r["event"] == "request.start", count=6)
        assert not [r for r in served.log.records() if r["event"] == "request.end"]
        served.release.set()
        replies = [data_events(response.iter_lines()) for response in responses]

    reply_ids = [events[0]["id"] for events in replies]
    assert all({e["id"] for e in events} == {events[0]["id"]} for events in replies), "a stream got another's chunks"
    assert len(set(reply_ids)) == 6
    ends = [served.log.end_of(reply_id=reply_id) for reply_id in reply_ids]
    assert {end["x_request_id"] for end in ends} == {"shared"}
    assert len({end["internal_id"] for end in ends}) == 6


def test_deprecated_request_id_headers_are_ignored_with_one_warning_each(served: Served):
    dynamo_id, plain_id = str(uuid.uuid4()), str(uuid.uuid4())
    deprecated_headers = {"x-dynamo-request-id": dynamo_id, "request-id": plain_id}
    reply = httpx.post(f"{served.url}/v1/chat/completions", json=CHAT, headers=deprecated_headers).json()

    end = served.log.end_of(reply_id=reply["id"])
    warnings = [r for r in served.log.for_request(end["internal_id"]) if r["event"] == "request.header_ignored"]
    assert sorted((w["header"], w["level"]) for w in warnings) == [
        ("request-id", "warning"), ("x-dynamo-request-id", "warning")
    ]
    assert dynamo_id not in served.log.path.read_text() and plain_id not in served.log.path.read_text()


def test_a_hostile_x_request_id_is_capped_and_cleaned_before_the_log_and_the_echo(served: Served):
    # What HTTP lets through: a tab, and in UTF-8 a bidi override, a C1 control, a line separator.
    hostile = "abc\tdef\u202e\u0085\u2028ünï😀" + "x" * 10_000
    cleaned = ("abcdefünï😀" + "x" * 10_000)[:256]
    response = httpx.post(
        f"{served.url}/v1/chat/completions", json=CHAT, headers=[(b"x-request-id", hostile.encode("utf-8"))]
    )

    assert dict(response.headers.raw)[b"x-request-id"].decode("utf-8") == cleaned
    end = served.log.end_of(reply_id=response.json()["id"])
    assert {r["x_request_id"] for r in served.log.for_request(end["internal_id"])} == {cleaned}
    assert max(len(line) for line in served.log.path.read_bytes().splitlines()) < 4096
    assert served.span_of(end["internal_id"]).attributes["http.request.header.x-request-id"] == (cleaned,)


# -- the Responses request_id an app keys its state on ----------------------------------------------


def test_a_second_request_in_flight_with_the_same_request_id_is_refused(served: Served):
    held = {"model": "hold", "input": "hi", "stream": True, "request_id": "resp_dup"}
    client = openai_client(served.url)
    with streaming_post(f"{served.url}/v1/responses", held) as first:
        lines = first.iter_lines()
        # the first event reaches the client while the app holds the rest: nothing is buffered
        assert first_data_event(lines)["type"] == "response.created"

        with pytest.raises(openai.ConflictError) as refused:
            client.responses.create(model="m", input="hi", extra_body={"request_id": "resp_dup"})
        assert refused.value.code == "request_id_in_use"
        assert "resp_dup" in refused.value.message

        served.release.set()
        rest = data_events(lines)
    assert rest[-1]["type"] == "response.completed"
    assert rest[-1]["response"]["id"] == "resp_dup"
    assert rest[-1]["response"]["output"][0]["content"][0]["text"] == TEXT

    first_end = served.log.end_of(reply_id="resp_dup")
    assert (first_end["status"], first_end["disconnected"]) == (200, False)
    refused_end = served.log.end_of(status=409)
    assert refused_end["internal_id"] != first_end["internal_id"]
    # the first has finished: the id is free again
    assert client.responses.create(model="m", input="hi", extra_body={"request_id": "resp_dup"}).id == "resp_dup"


def test_a_request_id_is_free_again_once_its_client_leaves(served: Served):
    held = {"model": "hold", "input": "hi", "stream": True, "request_id": "resp_left"}
    with streaming_post(f"{served.url}/v1/responses", held) as first:
        first_data_event(first.iter_lines())
    # the client left mid-stream, and the app never got the release it waits for

    assert served.log.end_of(reply_id="resp_left")["disconnected"] is True
    again = openai_client(served.url).responses.create(model="m", input="hi", extra_body={"request_id": "resp_left"})
    assert again.id == "resp_left"


# -- a client that leaves ----------------------------------------------------------------------------


def test_a_client_leaving_mid_stream_is_recorded_and_its_span_ended(served: Served):
    body = {**CHAT, "model": "endless", "stream": True}
    with streaming_post(f"{served.url}/v1/chat/completions", body) as response:
        reply_id = first_data_event(response.iter_lines())["id"]

    end = served.log.end_of(reply_id=reply_id)  # the stream never ends by itself
    assert (end["status"], end["streaming"], end["disconnected"]) == (200, True, True)
    assert end["bytes"] > 0
    span = served.span_of(end["internal_id"])  # only ended spans reach the exporter
    assert span.attributes["tracejoin.disconnected"] is True
    assert span.end_time >= span.start_time


async def _raising_asgi_app(scope, receive, send):
    raise RuntimeError("the app failed")


async def _raising_route(request: Request) -> Response:
    raise RuntimeError("the app failed")


@pytest.mark.parametrize("app", ["starlette", "asgi"])
def test_the_500_of_an_app_that_raises_echoes_the_x_request_id(tmp_path, app):
    """Starlette's own 500 comes from outside the middleware (add_middleware puts it within
    ServerErrorMiddleware), uvicorn's from under a bare ASGI app: neither passed through it."""
    log = LogFile(tmp_path / "app.jsonl")
    if app == "starlette":
        served = Starlette(routes=[Route("/v1/chat/completions", _raising_route, methods=["POST"])])
        served.add_middleware(TraceJoinMiddleware, role="agg", log=str(log.path))
    else:
        served = TraceJoinMiddleware(_raising_asgi_app, role="agg", log=str(log.path))
    with running(app_config(served)) as url:
        response = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers={"x-request-id": "ticket-500"},
                              timeout=WAIT_S)
        end = log.wait_for(event("request.end"))[0]
    assert response.status_code == 500
    assert response.headers["x-request-id"] == "ticket-500"
    assert (end["status"], end["x_request_id"]) == (500, "ticket-500")


# -- calls to workers ----------------------------------------------------------------------------------


def test_calls_to_workers_carry_the_trace_and_ids(tmp_path):
    router_log = LogFile(tmp_path / "router.jsonl")

    with serve_openai_like_app(tmp_path / "ctx.jsonl", service="ctx-worker", role="ctx") as worker:

        async def forward_to_worker(request: Request) -> JSONResponse:
            bind_disagg_request_id(7)
            async with httpx.AsyncClient(event_hooks={"request": [inject_tracejoin_headers]}) as client:
                answer = await client.post(f"{worker.url}/v1/chat/completions", content=await request.body())
            return JSONResponse(answer.json())

        router = Starlette(routes=[Route("/v1/chat/completions", forward_to_worker, methods=["POST"])])
        router.add_middleware(TraceJoinMiddleware, role="router", log=str(router_log.path))
        with running(app_config(router)) as router_url:
            # a client cannot hand an entry server a key
            reply = httpx.post(
                f"{router_url}/v1/chat/completions", json=CHAT,
                headers={"x-request-id": "lbl", "x-tracejoin-disagg-request-id": "999"},
            ).json()

        router_start = router_log.wait_for(event("request.start"))[0]
        router_end = router_log.end_of(reply_id=reply["id"])
        worker_start = worker.log.wait_for(event("request.start"))[0]

    assert "disagg_request_id" not in router_start
    assert router_end["disagg_request_id"] == "7"
    assert worker_start["trace_id"] == router_end["trace_id"]
    assert worker_start["parent_span_id"] == router_end["span_id"]
    assert worker_start["x_request_id"] == "lbl"
    assert worker_start["disagg_request_id"] == "7"
    assert worker_start["internal_id"] != router_end["internal_id"]


# -- configuration ---------------------------------------------------------------------------------------


def test_settings_come_from_tracejoin_variables(tmp_path, monkeypatch):
    log, spans_file = tmp_path / "gen.jsonl", tmp_path / "spans.jsonl"
    monkeypatch.setenv("TRACEJOIN_SERVICE", "gen-service")
    monkeypatch.setenv("TRACEJOIN_ROLE", "gen")
    monkeypatch.setenv("TRACEJOIN_WORKER", "gpu-node-7:4242")
    monkeypatch.setenv("TRACEJOIN_LOG", str(log))
    monkeypatch.setenv("TRACEJOIN_OTLP_FILE", str(spans_file))
    app = create_app(threading.Event())
    app.add_middleware(TraceJoinMiddleware)
    with running(app_config(app)) as url:
        reply = httpx.post(f"{url}/v1/chat/completions", json=CHAT, headers={"x-request-id": "lbl"}).json()

    end = LogFile(log).end_of(reply_id=reply["id"])
    assert (end["service"], end["role"], end["worker"], end["engine_worker"]) == (
        "gen-service", "gen", "gpu-node-7:4242", "gpu-node-7:4242"
    )
    (exported,) = [json.loads(line) for line in spans_file.read_text().splitlines()]
    resource_spans = exported["resourceSpans"][0]
    resource = {a["key"]: a["value"]["stringValue"] for a in resource_spans["resource"]["attributes"]}
    assert (resource["service.name"], resource["service.instance.id"], resource["tracejoin.role"]) == (
        "gen-service", "gpu-node-7:4242", "gen"
    )
    (span,) = resource_spans["scopeSpans"][0]["spans"]
    attributes = {a["key"]: a["value"] for a in span["attributes"]}
    assert (span["traceId"], span["spanId"], span["kind"]) == (end["trace_id"], end["span_id"], 2)
    assert attributes["tracejoin.internal_id"] == {"stringValue": end["internal_id"]}
    assert attributes["http.request.header.x-request-id"] == {"arrayValue": {"values": [{"stringValue": "lbl"}]}}


def test_spans_go_to_an_otlp_http_endpoint(tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "20")  # ms; the exporter batches
    received: list[ExportTraceServiceRequest] = []

    async def collect(request: Request) -> Response:
        export = ExportTraceServiceRequest()
        export.ParseFromString(await request.body())
        received.append(export)
        return Response(b"", media_type="application/x-protobuf")

    receiver = Starlette(routes=[Route("/v1/traces", collect, methods=["POST"])])
    with running(app_config(receiver)) as otlp_url, serve_openai_like_app(
        tmp_path / "router.jsonl", role="router", otlp_endpoint=otlp_url
    ) as served:
        reply = httpx.post(f"{served.url}/v1/chat/completions", json=CHAT).json()
        end = served.log.end_of(reply_id=reply["id"])

        def exported_span_ids() -> set[str]:
            return {
                span.span_id.hex()
                for export in list(received)
                for resource_spans in export.resource_spans
                for scope_spans in resource_spans.scope_spans
                for span in scope_spans.spans
            }

        wait_until(lambda: end["span_id"] in exported_span_ids(), "the span never reached the OTLP endpoint")
