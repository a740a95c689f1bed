"""A server whose spans go nowhere still continues the trace as the SDK would.

Without a span processor the middleware does not record the request's span (tracing.ServerSpans
makes its span context without the SDK's span); the trace it passes on (the records' trace_id, the
traceparent and tracestate of calls to workers) must be the one a recorded span would have: the same
trace, sampled flag, W3C random flag and trace state, for every sampler OTEL_TRACES_SAMPLER can name.
"""

from __future__ import annotations

import time

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext

from tracejoin.middleware.settings import Settings
from tracejoin.middleware.tracing import ServerSpans, follows_caller, incoming_trace_context

CALLER_TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"
INCOMING = {
    "no traceparent": {},
    "sampled caller": {b"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01".encode()},
    "unsampled caller": {b"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-00".encode()},
    "caller with tracestate": {
        b"traceparent": f"00-{CALLER_TRACE}-00f067aa0ba902b7-01".encode(),
        b"tracestate": b"vendor=opaque,other=1",
    },
}
SAMPLERS = {  # OTEL_TRACES_SAMPLER (and its argument)
    "default": (None, None),
    "parentbased_always_on": ("parentbased_always_on", None),
    "parentbased_always_off": ("parentbased_always_off", None),
    "always_on": ("always_on", None),
    "always_off": ("always_off", None),
    "traceidratio 0": ("traceidratio", "0"),
    "parentbased_traceidratio 0": ("parentbased_traceidratio", "0"),
}


def _span_context(spans: ServerSpans, headers: dict[bytes, bytes]) -> SpanContext:
    parent, caller = incoming_trace_context(headers)
    return spans.start("POST /v1/chat/completions", parent, caller, {}, time.time_ns()).get_span_context()


@pytest.mark.parametrize("sampler", SAMPLERS)
@pytest.mark.parametrize("incoming", INCOMING)
def test_an_unrecorded_span_continues_the_trace_a_recorded_one_would(monkeypatch, sampler, incoming):
    name, argument = SAMPLERS[sampler]
    for variable, value in (("OTEL_TRACES_SAMPLER", name), ("OTEL_TRACES_SAMPLER_ARG", argument)):
        if value is None:
            monkeypatch.delenv(variable, raising=False)
        else:
            monkeypatch.setenv(variable, value)
    settings = Settings.resolve(role="agg")
    recorded = ServerSpans(settings, "w:1", [SimpleSpanProcessor(InMemorySpanExporter())])
    unrecorded = ServerSpans(settings, "w:1", [])
    assert recorded.recorded and not unrecorded.recorded

    headers = INCOMING[incoming]
    expected, got = _span_context(recorded, headers), _span_context(unrecorded, headers)

    assert (got.trace_flags, got.trace_state, got.is_remote) == (expected.trace_flags, expected.trace_state, False)
    if headers:
        assert got.trace_id == expected.trace_id == int(CALLER_TRACE, 16)
    else:
        assert got.trace_id != expected.trace_id, "a new trace each request"
    assert got.span_id != expected.span_id


def test_only_the_sdk_default_sampler_is_decided_without_asking_it(monkeypatch):
    monkeypatch.delenv("OTEL_TRACES_SAMPLER", raising=False)
    assert ServerSpans(Settings.resolve(role="agg"), "w:1", []).follows_caller
    for name in ("parentbased_always_off", "always_on", "parentbased_traceidratio"):
        monkeypatch.setenv("OTEL_TRACES_SAMPLER", name)
        spans = ServerSpans(Settings.resolve(role="agg"), "w:1", [])
        assert not follows_caller(spans.tracer.sampler), name
