"""OpenTelemetry for one serving process: a tracer provider named after it, and W3C trace context.

The middleware keeps a tracer provider of its own instead of the global one, so that it works the
same whether or not the application (vLLM with --otlp-traces-endpoint, say) set up another; both
continue the same trace, because the trace travels in the context, not in the provider.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import SpanProcessor, Tracer, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_ON, ParentBased, Sampler
from opentelemetry.trace import INVALID_SPAN_CONTEXT, NonRecordingSpan, Span, SpanContext, SpanKind, TraceFlags
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from .settings import Settings

TRACER_NAME = "tracejoin.middleware"

# traceparent and tracestate, read and written exactly as W3C Trace Context says, whatever global
# propagator the application configured.
W3C = TraceContextTextMapPropagator()
TRACEPARENT = b"traceparent"
TRACE_CONTEXT_HEADERS = (TRACEPARENT, b"tracestate")


class ServerSpans:
    """Starts each request's SERVER span, from a tracer provider of the serving process's own."""

    def __init__(self, settings: Settings, worker: str, span_processors: Iterable[SpanProcessor]):
        provider = TracerProvider(
            resource=Resource.create(
                {"service.name": settings.service, "service.instance.id": worker, "tracejoin.role": settings.role}
            )
        )
        processors: list[SpanProcessor] = []
        if settings.otlp_endpoint:
            processors.append(BatchSpanProcessor(OTLPSpanExporter(endpoint=traces_url(settings.otlp_endpoint))))
        if settings.otlp_file:
            # Each span is written as its request ends, like the log lines: a local append is cheap.
            processors.append(SimpleSpanProcessor(FileSpanExporter(settings.otlp_file)))
        processors.extend(span_processors)
        for processor in processors:
            provider.add_span_processor(processor)
        self.tracer: Tracer = provider.get_tracer(TRACER_NAME)
        # Without a processor no span leaves the process: recording one is work nobody sees.
        self.recorded = bool(processors)
        self.follows_caller = follows_caller(self.tracer.sampler)

    def start(self, name: str, parent: Context, caller: SpanContext, attributes: dict[str, Any],
              start_ns: int) -> Span:
        """The request's span, a child of `parent` (incoming_trace_context gave it and `caller`),
        begun at `start_ns` (ns since the epoch)."""
        if self.recorded:
            return self.tracer.start_span(name, context=parent, kind=SpanKind.SERVER, attributes=attributes,
                                          start_time=start_ns)
        return self._unrecorded(name, parent, caller, attributes)

    def _unrecorded(self, name: str, parent: Context, caller: SpanContext, attributes: dict[str, Any]) -> Span:
        """The span context the SDK's Tracer.start_span gives a span (its ids from the tracer's id
        generator; sampled and trace state as its sampler decides; the W3C level 2 random flag as
        the SDK sets it), on a NonRecordingSpan: the trace propagates and the records carry its ids
        exactly as with a recorded span, without the SDK span's attributes, locks and ending. It
        follows opentelemetry-sdk 1.45's start_span; recheck it when upgrading the SDK."""
        ids = self.tracer.id_generator
        if caller.is_valid:
            trace_id, random_trace_id = caller.trace_id, caller.trace_flags.random_trace_id
        else:
            trace_id, random_trace_id = ids.generate_trace_id(), ids.is_trace_id_random()
        if not self.follows_caller:
            sampling = self.tracer.sampler.should_sample(parent, trace_id, name, SpanKind.SERVER, attributes, ())
            sampled, trace_state = sampling.decision.is_sampled(), sampling.trace_state
        elif caller.is_valid:  # what the sampler would decide, without asking it on every request
            sampled, trace_state = caller.trace_flags.sampled, caller.trace_state
        else:
            sampled, trace_state = True, None
        flags = TraceFlags.SAMPLED if sampled else TraceFlags.DEFAULT
        if random_trace_id:
            flags |= TraceFlags.RANDOM_TRACE_ID
        context = SpanContext(
            trace_id, ids.generate_span_id(), is_remote=False, trace_flags=TraceFlags(flags), trace_state=trace_state
        )
        return NonRecordingSpan(context)


# The SDK's default sampler, unless OTEL_TRACES_SAMPLER names another.
_PARENT_BASED_ALWAYS_ON = ParentBased(ALWAYS_ON).get_description()


def follows_caller(sampler: Sampler) -> bool:
    """Whether `sampler` is ParentBased(ALWAYS_ON), which samples every new trace and otherwise takes
    the caller's sampled flag and trace state: a decision that needs no sampler call."""
    return type(sampler) is ParentBased and sampler.get_description() == _PARENT_BASED_ALWAYS_ON


def traces_url(endpoint: str) -> str:
    """An OTLP/HTTP base URL (`http://host:4318`) or the full traces URL, as the traces URL."""
    endpoint = endpoint.rstrip("/")
    return endpoint if endpoint.endswith("/v1/traces") else f"{endpoint}/v1/traces"


def incoming_trace_context(headers: Mapping[bytes, bytes]) -> tuple[Context, SpanContext]:
    """The caller's trace from its traceparent/tracestate (`headers`: a request's, by lower-case
    name), and the caller's span context in it; an empty context (a new trace) without one."""
    if TRACEPARENT not in headers:  # the usual case at an entry server: nothing to extract
        return Context(), INVALID_SPAN_CONTEXT
    carrier = {name.decode(): headers[name].decode("latin-1") for name in TRACE_CONTEXT_HEADERS if name in headers}
    parent = W3C.extract(carrier, context=Context())
    return parent, trace.get_current_span(parent).get_span_context()
