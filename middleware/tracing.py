"""OpenTelemetry for one serving process: a tracer provider named after it, and W3C trace context.

The middleware keeps a tracer provider of its own instead of the global one, so that it works the
same whether or not the application (vLLM with --otlp-traces-endpoint, say) set up another; both
continue the same trace, because the trace travels in the context, not in the provider.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .settings import Settings

TRACER_NAME = "tracejoin.middleware"

# traceparent and tracestate, read and written exactly as W3C Trace Context says, whatever global
# propagator the application configured.
W3C = TraceContextTextMapPropagator()


def build_tracer_provider(settings: Settings, worker: str, span_processors: Iterable[SpanProcessor]) -> TracerProvider:
    provider = TracerProvider(
        resource=Resource.create(
            {"service.name": settings.service, "service.instance.id": worker, "tracejoin.role": settings.role}
        )
    )
    if settings.otlp_endpoint:
        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(settings.otlp_endpoint))))
    if settings.otlp_file:
        # Each span is written as its request ends, like the log lines: a local append is cheap.
        provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(settings.otlp_file)))
    for processor in span_processors:
        provider.add_span_processor(processor)
    return provider


def traces_url(endpoint: str) -> str:
    """An OTLP/HTTP base URL (`http://host:4318`) or the full traces URL, as the traces URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def incoming_trace_context(headers: Mapping[str, str]) -> Context:
    """The caller's trace from its traceparent/tracestate; an empty context (a new trace) without one."""
    return W3C.extract(headers, context=Context())
