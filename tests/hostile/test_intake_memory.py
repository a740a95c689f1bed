"""Many large bodies at once must not take the collector's memory past its intake budget: a body
that would not fit beside those in progress is refused before it is read, with a "retry later"
(503 with Retry-After, UNAVAILABLE with a RetryInfo), over HTTP and gRPC alike, and clients that
retry get every body stored."""

from __future__ import annotations

import threading
import time

import grpc
import httpx
from google.rpc import error_details_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.collector.collector_process import query
from tests.collector.otlp_senders import protobuf_body

MAX_BODY = 1 << 20
BUDGET = 24 << 20  # one body of MAX_BODY, at what the collector counts a protobuf byte
STORE_MEMORY_MIB = 32  # DuckDB's own budget (TRACEJOIN_MEMORY_LIMIT), beside the intake's
OTHER_MIB = 32  # the rest that grows as the store does: the batch's Arrow tables, the id index
SPANS_PER_BODY = 1600
HTTP_BODIES = GRPC_BODIES = 8


def bodies(names: list[str]) -> list[bytes]:
    """Exports of SPANS_PER_BODY spans as an instrumented server makes them (a dozen attributes
    each), nearly MAX_BODY each: the same spans, under each service name."""
    captured = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "vllm"}))  # the worker is its name
    provider.add_span_processor(SimpleSpanProcessor(captured))
    tracer = provider.get_tracer("vllm.tracing")
    for i in range(SPANS_PER_BODY):
        with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER, attributes={
                "gen_ai.response.id": f"chatcmpl-memory-{i:06d}", "gen_ai.request.id": f"{i:032x}",
                "gen_ai.request.model": "meta-llama/Llama-3.1-8B-Instruct", "gen_ai.usage.prompt_tokens": 1234,
                "gen_ai.usage.completion_tokens": 321, "gen_ai.request.temperature": 0.7,
                "gen_ai.request.top_p": 0.95, "gen_ai.request.max_tokens": 1024,
                "gen_ai.latency.time_to_first_token": 0.043, "gen_ai.latency.e2e": 1.43,
                "gen_ai.response.finish_reasons": '["stop"]', "http.response.status_code": 200}):
            pass
    provider.shutdown()
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(protobuf_body(captured.get_finished_spans()))
    made = []
    for name in names:
        request.resource_spans[0].resource.attributes[0].value.string_value = name
        made.append(request.SerializeToString())
    assert all(MAX_BODY * 0.8 < len(body) <= MAX_BODY for body in made), len(made[0])
    return made


def test_concurrent_large_bodies_stay_within_the_budget_and_are_all_stored(collector, db, monkeypatch):
    monkeypatch.setenv("TRACEJOIN_MEMORY_LIMIT", f"{STORE_MEMORY_MIB}MB")
    c = collector("--max-body", MAX_BODY, "--intake-budget", BUDGET, "--snapshot-interval", "600")
    names = [f"http-{n}" for n in range(HTTP_BODIES)] + [f"grpc-{n}" for n in range(GRPC_BODIES)]
    made = bodies(names)
    over_http, over_grpc = made[:HTTP_BODIES], made[HTTP_BODIES:]
    time.sleep(0.5)
    baseline_kib = c.peak_rss_kib()
    refusals: list[str] = []
    failures: list[str] = []

    def send_http(body: bytes) -> None:
        with httpx.Client(timeout=30) as client:
            while True:
                answer = client.post(f"{c.http}/v1/traces", headers={"content-type": "application/x-protobuf"},
                                     content=body)
                if answer.status_code == 200:
                    return
                if answer.status_code != 503 or "retry-after" not in answer.headers:
                    failures.append(f"HTTP {answer.status_code}: {answer.text}")
                    return
                refusals.append("http")
                time.sleep(float(answer.headers["retry-after"]))

    def send_grpc(body: bytes) -> None:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        with grpc.insecure_channel(c.grpc) as channel:
            export = trace_service_pb2_grpc.TraceServiceStub(channel).Export
            while True:
                try:
                    export(request, timeout=30)
                    return
                except grpc.RpcError as e:
                    retry = dict(e.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
                    if e.code() != grpc.StatusCode.UNAVAILABLE or retry is None:
                        failures.append(f"gRPC {e.code()}: {e.details()}")
                        return
                    refusals.append("grpc")
                    time.sleep(error_details_pb2.RetryInfo.FromString(retry).retry_delay.seconds)

    threads = [threading.Thread(target=send_http, args=(b,)) for b in over_http]
    threads += [threading.Thread(target=send_grpc, args=(b,)) for b in over_grpc]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    growth_mib = (c.peak_rss_kib() - baseline_kib) / 1024
    assert growth_mib < (BUDGET >> 20) + STORE_MEMORY_MIB + OTHER_MIB, f"peak RSS grew by {growth_mib:.0f} MiB"
    assert {"http", "grpc"} <= set(refusals)  # the budget did turn some away, on both receivers
    assert c.terminate() == 0, c.stderr()
    stored = dict(query(db, "SELECT worker, count(*) FROM records GROUP BY worker"))
    assert stored == {name: SPANS_PER_BODY for name in names}
