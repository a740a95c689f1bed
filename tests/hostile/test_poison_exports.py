"""One span the store cannot hold (a time past 2262, as a legal fixed64 start time makes it; an
integer over 64 bits; attributes nested past 254 levels) must not cost the exports sent beside it:
its own export is answered with OTLP partial success, which SDKs do not retry, and every other span
is stored. A body the writer cannot store is refused for good (400 / INVALID_ARGUMENT) while the
bodies committed with it are stored; a store that cannot write says "retry later" (503 /
UNAVAILABLE)."""

from __future__ import annotations

import resource
import threading
import time

import grpc
import httpx
import orjson
import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.collector.collector_process import query
from tests.collector.otlp_senders import grpc_exporter, http_exporter, protobuf_body, sdk_spans
from tracejoin.collector.records import Record, Unstorable
from tracejoin.collector.store import OutOfMemory, open_store
from tracejoin.collector.service.writer import Body, Writer

JSON = {"content-type": "application/json"}
PROTOBUF = {"content-type": "application/x-protobuf"}
FAR_FUTURE = (1 << 64) - 1  # 2^64 - 1 ns: a legal fixed64, centuries past what an int64 holds


def with_far_future_span(reply: str) -> list:
    """A gateway's entry span for `reply`, and a span that starts and ends at FAR_FUTURE, made by the SDK."""
    captured = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway", "tracejoin.role": "router"}))
    provider.add_span_processor(SimpleSpanProcessor(captured))
    tracer = provider.get_tracer("tracejoin-tests")
    with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as span:
        span.set_attribute("gen_ai.response.id", reply)
    tracer.start_span("clock from another century", start_time=FAR_FUTURE).end(end_time=FAR_FUTURE)
    provider.shutdown()
    return list(captured.get_finished_spans())


DEEP = "deeply nested value"  # stands for nested(260) until the export is written out


def json_export(spans: list[dict]) -> bytes:
    text = orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-gateway"}}]},
        "scopeSpans": [{"scope": {"name": "tests"}, "spans": spans}],
    }]})
    return text.replace(orjson.dumps(DEEP), nested(260))


def json_span(n: int, reply: str | None = None, **fields) -> dict:
    span = {"traceId": f"{n:032x}", "spanId": f"{n:016x}", "name": "POST /v1/chat/completions", "kind": 2,
            "startTimeUnixNano": "1787307302481000000", "endTimeUnixNano": "1787307304315000000",
            "attributes": [{"key": "gen_ai.response.id", "value": {"stringValue": reply}}] if reply else []}
    return {**span, **fields}


def nested(depth: int) -> bytes:
    """An AnyValue of arrays in arrays, `depth` deep, as JSON (deeper than orjson writes)."""
    return b'{"arrayValue":{"values":[' * depth + b'{"stringValue":"bottom"}' + b"]}}" * depth


# Each poisoned JSON export: one good span and one the store cannot hold, and why it is rejected.
POISONED_JSON = {
    "far future": ({"startTimeUnixNano": str(FAR_FUTURE), "endTimeUnixNano": str(FAR_FUTURE)}, "64-bit"),
    "big integer": ({"attributes": [{"key": "tokens", "value": {"intValue": "99999999999999999999"}}]}, "64 bits"),
    "deep nesting": ({"attributes": [{"key": "deep", "value": DEEP}]}, "254 levels"),
}


def test_one_unstorable_span_is_rejected_and_the_exports_beside_it_are_stored(collector, db):
    c = collector("--snapshot-interval", "600")
    url = f"{c.http}/v1/traces"
    answers: dict[str, object] = {}

    def send(name: str, export) -> None:
        answers[name] = export()

    sends = {}
    for i in range(6):  # innocent exports, from the real SDK exporters and as JSON
        spans_http, spans_grpc = sdk_spans([f"chatcmpl-http-{i}"]), sdk_spans([f"chatcmpl-grpc-{i}"])
        sends[f"http {i}"] = lambda s=spans_http: http_exporter(c.http).export(s)
        sends[f"grpc {i}"] = lambda s=spans_grpc: grpc_exporter(c.grpc).export(s)
        body = json_export([json_span(100 + i, f"chatcmpl-json-{i}")])
        sends[f"json {i}"] = lambda b=body: httpx.post(url, headers=JSON, content=b, timeout=30)
    poisoned_http = with_far_future_span("chatcmpl-http-beside")
    poisoned_grpc = with_far_future_span("chatcmpl-grpc-beside")
    sends["http poisoned"] = lambda: http_exporter(c.http).export(poisoned_http)
    sends["grpc poisoned"] = lambda: grpc_exporter(c.grpc).export(poisoned_grpc)
    for n, (name, (fields, _)) in enumerate(POISONED_JSON.items()):
        body = json_export([json_span(200 + n, f"chatcmpl-beside-{n}"), json_span(300 + n, **fields)])
        sends[name] = lambda b=body: httpx.post(url, headers=JSON, content=b, timeout=30)
    started = time.monotonic()
    threads = [threading.Thread(target=send, args=item) for item in sends.items()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    # The SDKs took the answers as final: none retried (a 503 has them retry for up to 10 s).
    assert time.monotonic() - started < 5
    for name, answer in answers.items():
        if isinstance(answer, httpx.Response):
            assert answer.status_code == 200, (name, answer.status_code, answer.text)
        else:
            assert answer == SpanExportResult.SUCCESS, name
    for name, (_, reason) in POISONED_JSON.items():
        partial = answers[name].json()["partialSuccess"]
        assert partial["rejectedSpans"] in (1, "1") and reason in partial["errorMessage"], (name, partial)

    # The protobuf path answers a partial success too, and a body whose only span is poison is
    # answered so as well: nothing of it stored, nothing to retry.
    far_future_only = protobuf_body(with_far_future_span("chatcmpl-kept")[1:])
    answer = httpx.post(url, headers=PROTOBUF, content=far_future_only)
    assert answer.status_code == 200
    partial = trace_service_pb2.ExportTraceServiceResponse.FromString(answer.content).partial_success
    assert partial.rejected_spans == 1 and "2262" in partial.error_message
    with grpc.insecure_channel(c.grpc) as channel:
        reply = trace_service_pb2_grpc.TraceServiceStub(channel).Export(
            trace_service_pb2.ExportTraceServiceRequest.FromString(protobuf_body(poisoned_grpc)), timeout=10)
    assert reply.partial_success.rejected_spans == 1

    assert c.terminate() == 0, c.stderr()
    stored = {r for (r,) in query(db, "SELECT attrs->>'gen_ai.response.id' FROM records WHERE kind = 'span'")}
    expected = {f"chatcmpl-{way}-{i}" for way in ("http", "grpc", "json") for i in range(6)}
    expected |= {"chatcmpl-http-beside", "chatcmpl-grpc-beside"} | {f"chatcmpl-beside-{n}" for n in range(3)}
    assert stored == expected
    assert query(db, "SELECT count(*) FROM records WHERE name = 'clock from another century'") == [(0,)]

    # A store that cannot write is not the body's fault: retry later. Its files may not grow past
    # 64 KiB, which the write-ahead log of 2,000 spans does.
    c = collector()
    resource.prlimit(c.pid, resource.RLIMIT_FSIZE, (1 << 16, 1 << 16))
    body = protobuf_body(sdk_spans([f"chatcmpl-disk-{i}" for i in range(2000)]))
    answer = httpx.post(f"{c.http}/v1/traces", headers=PROTOBUF, content=body, timeout=30)
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1", answer.text
    assert status_pb2.Status.FromString(answer.content).code == code_pb2.UNAVAILABLE
    with grpc.insecure_channel(c.grpc) as channel, pytest.raises(grpc.RpcError) as refused:
        trace_service_pb2_grpc.TraceServiceStub(channel).Export(
            trace_service_pb2.ExportTraceServiceRequest.FromString(body), timeout=10)
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE


def spans_of(*replies: str) -> list[Record]:
    return [Record(kind="span", name="s", time_ns=1787307302481000000, trace_id=f"{i + 1:032x}",
                   span_id=f"{i + 1:016x}", attrs={"gen_ai.response.id": reply}) for i, reply in enumerate(replies)]


@pytest.fixture
def small_memory_budget(monkeypatch):
    """The store of a writer (held_writer, asked for after this) gets a DuckDB memory budget of 8 MB."""
    monkeypatch.setenv("TRACEJOIN_MEMORY_LIMIT", "8MB")


@pytest.fixture
def held_writer(db):
    """(writer, release): a writer on a real store whose thread is held up until `release` is
    set, so that the bodies submitted meanwhile are committed in one round."""
    store = open_store(db)
    writer = Writer(store, report=print)
    writer.start()
    running, release = threading.Event(), threading.Event()
    held = writer.run(lambda _store: running.set() or release.wait(30))
    assert running.wait(10)
    try:
        yield writer, release
    finally:
        release.set()
        held.result(30)
        writer.stop()
        store.close()


def test_the_writer_stores_the_bodies_committed_with_those_it_cannot_store(held_writer):
    writer, release = held_writer

    def submit(sha256: str, records: list[Record]):
        return writer.submit(Body("otlp/http", "otlp_json", sha256, records), wait=False)

    good = [submit(f"{i:064x}", spans_of(f"chatcmpl-good-{i}")) for i in range(4)]
    # A time past 2262 is found as the body goes into the batch; a name that is not text only when
    # the batch's tables are built.
    far_future_span = Record(kind="span", name="s", time_ns=FAR_FUTURE, trace_id="f" * 32, span_id="f" * 16)
    far_future = submit("a" * 64, [*spans_of("chatcmpl-beside-far-future"), far_future_span])
    good += [submit(f"{i:064x}", spans_of(f"chatcmpl-good-{i}")) for i in range(4, 7)]
    not_text = submit("b" * 64, [*spans_of("chatcmpl-beside-not-text"), Record(kind="span", name=5)])
    good += [submit(f"{i:064x}", spans_of(f"chatcmpl-good-{i}")) for i in range(7, 10)]
    release.set()
    for committed in good:
        assert committed.result(30) is None
    with pytest.raises(Unstorable, match="64-bit"):
        far_future.result(30)
    with pytest.raises(Unstorable, match="cannot be stored"):
        not_text.result(30)
    rows = writer.store.con.cursor().execute("SELECT attrs->>'gen_ai.response.id' FROM records").fetchall()
    assert sorted(r for (r,) in rows) == sorted(f"chatcmpl-good-{i}" for i in range(10))


def test_a_commit_the_store_fails_fails_no_other_origins_bodies_nor_the_jobs(small_memory_budget, held_writer):
    writer, release = held_writer
    # ~10 MB of distinct attribute text: more than the store's 8 MB budget can commit at once.
    heavy = [Record(kind="span", name="s", time_ns=1787307302481000000, trace_id=f"{i + 1:032x}", span_id=f"{i + 1:016x}",
                    attrs={"gen_ai.response.id": f"chatcmpl-heavy-{i}", "text": f"{i:04x}" * 600}) for i in range(4000)]
    too_heavy = writer.submit(Body("otlp/http", "otlp_json", "a" * 64, heavy), wait=False)
    light = writer.submit(Body("otlp/grpc", "otlp_json", "b" * 64, spans_of("chatcmpl-light")), wait=False)
    job = writer.run(lambda store: "ran")
    release.set()
    with pytest.raises(OutOfMemory, match="TRACEJOIN_MEMORY_LIMIT=8MB"):
        too_heavy.result(30)
    assert light.result(30) is None
    assert job.result(30) == "ran"
    rows = writer.store.con.cursor().execute("SELECT attrs->>'gen_ai.response.id' FROM records").fetchall()
    assert rows == [("chatcmpl-light",)]
    assert writer.records_stored == 1
