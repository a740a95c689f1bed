"""Protobuf export requests are read straight from their messages (collector/service/otlp.py), JSON ones by
the OTLP JSON source: the same data must give the same records, and the same rejections, either way.

The exports are made by the real OpenTelemetry SDK and its OTLP encoders; the invalid items an SDK
never sends are then added to the encoded message."""

from __future__ import annotations

import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry._logs import SeverityNumber
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from tracejoin.collector.service.otlp import LOGS, TRACES, Decoded, Receiver, Signal

REPLY = "chatcmpl-7029674b-fb5d-4e14-b2d8-e6e7f6e00764"
INTERNAL_ID = "92224e18-6e5e-45be-945f-40267759d235"
# Every kind of AnyValue, nested ones included; the SDK encodes None as an empty AnyValue.
EVERY_KIND = {
    "text": "a", "count": 3, "ratio": 0.25, "stream": True, "raw": b"\x00\xffbytes", "nothing": None,
    "numbers": [1, 2, 3], "mixed": ["a", 1, 2.5, False, None, b"\x01", {"k": "v"}, [1, [2]]],
    "nested": {"a": 1, "b": {"c": [True]}, "d": b"\x02", "e": None},
}


def sdk_export():
    """(spans, log records) of two processes: a frontend named by host and pid, with a request's
    server span, its child, events, an error status and logs inside the span; and a Dynamo worker
    that names itself only on its handle_payload span."""
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    frontend = Resource.create({"service.name": "dynamo-frontend", "host.name": "node-1", "process.pid": 4242,
                                "deployment": {"zone": "a", "tags": ["x", "y"]}})
    worker = Resource({"service.name": "dynamo-backend"})
    for resource in (frontend, worker):  # simple processors export at once: no shutdown (it would stop the exporters)
        tracer_provider, logger_provider = TracerProvider(resource=resource), LoggerProvider(resource=resource)
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        tracer = tracer_provider.get_tracer("tracejoin-tests", "1.0")
        logger = logger_provider.get_logger("dynamo_runtime::ingress")
        if resource is worker:
            with tracer.start_as_current_span("handle_payload", attributes={"instance_id": 7587, "component": "backend",
                                                                             "request_id": INTERNAL_ID}):
                logger.emit(body="generating", severity_text="DEBUG")
        else:
            with tracer.start_as_current_span("http-request", kind=SpanKind.SERVER, attributes={
                    "gen_ai.response.id": REPLY, "x_request_id": "xr-1", "http.response.status_code": 200,
                    **EVERY_KIND}) as root:
                root.add_event("first token", {"token": 1})
                root.add_event("")
                with tracer.start_as_current_span("llm_request", kind=SpanKind.CLIENT, attributes={
                        "gen_ai.request.id": 7, "gen_ai.latency.time_to_first_token": 0.043,
                        "gen_ai.response.finish_reasons": '["stop"]'}) as child:
                    child.add_event("retry", {"prompt": "not kept"})
                    child.record_exception(RuntimeError("generation request 1 failed: the KV cache never arrived"))
                    child.set_status(Status(StatusCode.ERROR, "aborted"))
                    logger.emit(severity_number=SeverityNumber.INFO, severity_text="INFO", body="request received",
                                attributes={"request_id": INTERNAL_ID, **EVERY_KIND})
            logger.emit(body={"event": "done", "tokens": [1, 2]}, event_name="gen_ai.done", attributes={"raw": b"\x00"})
            logger.emit(body=b"\x01\x02", observed_timestamp=1796035710308707042)
    return spans.get_finished_spans(), logs.get_finished_logs()


def both_ways(signal: Signal, request) -> tuple[Decoded, Decoded]:
    """The request decoded from protobuf and from protobuf's JSON mapping of it (base64 ids, enum
    names), each by a new receiver."""
    return (Receiver("test").decode_protobuf(signal, request.SerializeToString()),
            Receiver("test").decode_json(signal, MessageToJson(request).encode()))


@pytest.fixture(scope="module")
def export():
    return sdk_export()


def test_spans_read_from_protobuf_are_the_records_of_their_json(export, tmp_path):
    spans, _ = export
    request = encode_spans(spans)
    from_protobuf, from_json = both_ways(TRACES, request)
    assert from_protobuf == from_json
    assert (from_protobuf.rejected, from_protobuf.error) == (0, None)
    # ... and of the OTLP/JSON the SDK's file exporter writes (hex ids, enums as numbers).
    FileSpanExporter(tmp_path / "spans.jsonl").export(spans)
    assert Receiver("test").decode_json(TRACES, (tmp_path / "spans.jsonl").read_bytes()) == from_protobuf

    by_name = {r.name: r for r in from_protobuf.records}
    root, child, payload = by_name["http-request"], by_name["llm_request"], by_name["handle_payload"]
    assert child.parent_span_id == root.span_id == format(spans[1].context.span_id, "016x")
    assert root.trace_id == format(spans[1].context.trace_id, "032x")
    assert (root.worker, root.role, root.entry, root.status) == ("node-1:4242", "frontend", True, "200")
    assert {k: root.attrs[k] for k in EVERY_KIND} == {
        **EVERY_KIND, "raw": "AP9ieXRlcw==",  # bytes as base64 text, as OTLP/JSON writes them
        "mixed": ["a", 1, 2.5, False, None, "AQ==", {"k": "v"}, [1, [2]]],
        "nested": {"a": 1, "b": {"c": [True]}, "d": "Ag==", "e": None},
    }
    assert [e["name"] for e in root.attrs["events"]] == ["first token", None]  # "" is no name, as in JSON
    assert (child.status, child.attrs["status_message"], child.attrs["ttft_ms"]) == ("error", "aborted", 43.0)
    # An exception event keeps what it says; any other event its name and time only.
    retry, exception = child.attrs["events"]
    assert set(retry) == {"name", "time_ns"}
    assert (exception["name"], exception["exception.type"], exception["exception.message"]) == (
        "exception", "RuntimeError", "generation request 1 failed: the KV cache never arrived")
    assert "RuntimeError" in exception["exception.stacktrace"]
    assert ("engine_request_id", "7", "node-1:4242") in child.ids
    assert ("internal_id", REPLY.removeprefix("chatcmpl-"), None) in root.ids  # implied by the Dynamo reply id
    assert payload.worker == "backend:7587"


def test_log_records_read_from_protobuf_are_the_records_of_their_json(export, tmp_path):
    spans, logs = export
    request = encode_logs(logs)
    from_protobuf, from_json = both_ways(LOGS, request)
    assert from_protobuf == from_json
    assert (from_protobuf.rejected, from_protobuf.error) == (0, None)
    FileLogExporter(tmp_path / "logs.jsonl").export(logs)
    assert Receiver("test").decode_json(LOGS, (tmp_path / "logs.jsonl").read_bytes()) == from_protobuf

    received, done, raw, generating = from_protobuf.records
    child = next(s for s in spans if s.name == "llm_request")
    assert (received.trace_id, received.span_id) == (
        format(child.context.trace_id, "032x"), format(child.context.span_id, "016x"))
    assert (received.name, received.level, received.attrs["raw"]) == ("request received", "INFO", "AP9ieXRlcw==")
    assert ("internal_id", INTERNAL_ID, None) in received.ids
    assert (done.name, done.trace_id) == ("gen_ai.done", None)  # a body that is no text: the event's name
    assert (raw.name, raw.time_ns) == ("AQI=", 1796035710308707042)  # only the observed time
    assert generating.worker == "dynamo-backend"  # logs name no Dynamo instance


def test_invalid_items_are_rejected_alike(export):
    """An item no reader can take is rejected and counted the same way from protobuf and from
    JSON; the others are kept."""
    spans, logs = export
    traces = encode_spans(spans)
    scope = traces.resource_spans[0].scope_spans[0]
    unfinished = scope.spans.add()  # kept, without a duration
    unfinished.CopyFrom(scope.spans[0])
    unfinished.end_time_unix_nano = 0
    good = len(spans) + 1
    scope.spans.add(name="no ids")
    short_trace = scope.spans.add()
    short_trace.CopyFrom(scope.spans[0])
    short_trace.trace_id = b"\x01" * 5
    short_parent = scope.spans.add()
    short_parent.CopyFrom(scope.spans[0])
    short_parent.parent_span_id = b"\x01" * 3
    no_key = scope.spans.add()
    no_key.CopyFrom(scope.spans[0])
    no_key.attributes.append(KeyValue(key="", value=AnyValue(string_value="x")))
    zero_ids = scope.spans.add()  # all-zero ids mean none, so this one has no ids either
    zero_ids.CopyFrom(scope.spans[0])
    zero_ids.trace_id = bytes(16)
    # A resource whose attributes cannot be read: each of its spans is rejected.
    broken = traces.resource_spans.add()
    broken.CopyFrom(traces.resource_spans[1])
    broken.resource.attributes.add(key="", value=AnyValue(int_value=1))

    from_protobuf, from_json = both_ways(TRACES, traces)
    assert from_protobuf == from_json
    assert len(from_protobuf.records) == good
    assert from_protobuf.rejected == 5 + len(broken.scope_spans[0].spans)
    assert from_protobuf.error == "span 'no ids' has no traceId or spanId"

    requests = encode_logs(logs)
    records = requests.resource_logs[0].scope_logs[0].log_records
    records[0].span_id = b"\x01" * 3
    records[1].trace_id = bytes(16)  # none: kept, without a trace
    records[2].observed_time_unix_nano = 0  # kept, without a time
    from_protobuf, from_json = both_ways(LOGS, requests)
    assert from_protobuf == from_json
    assert (len(from_protobuf.records), from_protobuf.rejected) == (len(logs) - 1, 1)
    assert from_protobuf.error == "spanId has 3 bytes, expected 8"
    assert [(r.trace_id, r.time_ns) for r in from_protobuf.records[:2]] == [
        (None, records[1].observed_time_unix_nano), (None, None)]
