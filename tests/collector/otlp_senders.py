"""Spans and OTLP bodies made by the real OpenTelemetry SDK, for the collect tests."""

from __future__ import annotations

import gzip

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, format_span_id


def sdk_spans(replies: list[str], service: str = "gateway") -> list[ReadableSpan]:
    """One entry (router SERVER) span per reply id, as a traced gateway records them."""
    captured = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service, "tracejoin.role": "router"}))
    provider.add_span_processor(SimpleSpanProcessor(captured))
    tracer = provider.get_tracer("tracejoin-tests")
    for reply in replies:
        with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as span:
            span.set_attribute("gen_ai.response.id", reply)
    provider.shutdown()
    return list(captured.get_finished_spans())


def span_id(span: ReadableSpan) -> str:
    return format_span_id(span.context.span_id)


def grpc_exporter(address: str, **options) -> GrpcSpanExporter:
    return GrpcSpanExporter(endpoint=address, insecure=True, **options)


def http_exporter(base_url: str, **options) -> HttpSpanExporter:
    return HttpSpanExporter(endpoint=f"{base_url}/v1/traces", **options)


def protobuf_body(spans: list[ReadableSpan]) -> bytes:
    return encode_spans(spans).SerializeToString()


def json_traces(reply: str, trace_id: str, span_id: str, *, broken_spans: int = 0) -> bytes:
    """An OTLP/JSON traces export (hex ids, string nanos) with one good span and, optionally,
    spans that have no ids (each one is rejected)."""
    good = {
        "traceId": trace_id, "spanId": span_id, "name": "POST /v1/chat/completions", "kind": 2,
        "startTimeUnixNano": "1787307302481000000", "endTimeUnixNano": "1787307304315000000",
        "attributes": [{"key": "gen_ai.response.id", "value": {"stringValue": reply}}],
    }
    broken = [{"name": f"no ids {i}"} for i in range(broken_spans)]
    return orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "json-gateway"}},
                                    {"key": "tracejoin.role", "value": {"stringValue": "router"}}]},
        "scopeSpans": [{"scope": {"name": "tests"}, "spans": [good, *broken]}],
    }]})


def gzip_of_zeros(n: int) -> bytes:
    return gzip.compress(bytes(n), compresslevel=9)
