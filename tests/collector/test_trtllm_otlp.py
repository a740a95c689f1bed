"""TensorRT-LLM's OpenTelemetry spans, read by sources/otlp_json.py.

TensorRT-LLM cannot run here (no GPU, no wheel): its spans are made with the real OpenTelemetry
SDK as `tensorrt_llm/llmapi/tracing.py` names them — the worker's `llm_request` (SERVER, scope
`trt.llm`, `gen_ai.request.id` = the engine id, `gen_ai.latency.*` in seconds with -1 when
unmeasured, `gen_ai.response.finish_reasons` as a JSON string, events `kv_cache_transfer_start` /
`_end`) and the disaggregated server's `disaggregated_request` (SERVER, no attributes) — and
exported to a file as the OTLP JSON file exporter writes them.
"""

from __future__ import annotations

import duckdb
import orjson
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from .test_otlp_json import write_otlp_json
from .test_trtllm_perf_metrics import file_name, timing, worker_line, write


def spans(service: str, host: str, pid: int, make) -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": service, "host.name": host, "process.pid": pid}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    make(provider.get_tracer("trt.llm"))
    provider.shutdown()
    return memory.get_finished_spans()


def llm_request(tracer, engine_id: int, *, kv: bool) -> None:
    with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER) as span:
        span.set_attribute("gen_ai.request.id", engine_id)
        span.set_attribute("gen_ai.request.max_tokens", 64)
        span.set_attribute("gen_ai.usage.prompt_tokens", 12)
        span.set_attribute("gen_ai.usage.completion_tokens", 64)
        span.set_attribute("gen_ai.latency.time_to_first_token", 0.043)
        span.set_attribute("gen_ai.latency.e2e", 0.502)
        span.set_attribute("gen_ai.latency.time_in_queue", 0.00125)
        span.set_attribute("gen_ai.latency.kv_cache_transfer_time", 0.0125 if kv else -1.0)
        span.set_attribute("gen_ai.response.finish_reasons", '["length"]')
        if kv:
            span.add_event("kv_cache_transfer_start")
            span.add_event("kv_cache_transfer_end")


def test_trtllm_worker_and_disagg_spans(tj, tmp_path, db):
    worker = spans("trtllm-serve", "gpu-node-2", 4242,
                   lambda t: (llm_request(t, 7, kv=True), llm_request(t, 8, kv=False)))
    router = spans("trtllm-disagg", "orch-1", 99,
                   lambda t: t.start_span("disaggregated_request", kind=SpanKind.SERVER).end())
    write_otlp_json(tmp_path / "worker.otlp.jsonl", worker)
    write_otlp_json(tmp_path / "router.otlp.jsonl", router)
    # The same process's perf-metrics file: host and pid name the worker in both.
    write(tmp_path, file_name("gen", "gpu-node-2", 4242), worker_line(7, timing(81234.518)))
    assert tj("ingest", tmp_path).code == 0

    [seven] = tj("lookup", "7", "--json").json()["requests"]
    assert seven["ids"]["engine_request_id"] == [{"worker": "gpu-node-2:4242", "id": "7"}]
    assert sorted(r["kind"] for r in seven["records"]) == ["perf", "span"]
    span = next(r for r in seven["records"] if r["kind"] == "span")
    assert span["summary"].startswith("llm_request · ")
    assert "ttft_ms=43.0" in span["summary"] and "finish_reason=length" in span["summary"]
    with duckdb.connect(str(db), read_only=True) as con:
        rows = con.execute(
            "SELECT name, role, entry, attrs FROM records WHERE kind = 'span' ORDER BY name, record_id").fetchall()
    by_name = {}
    for name, role, entry, attrs in rows:
        attrs = orjson.loads(attrs) if attrs else {}
        by_name.setdefault(name, []).append((role, entry, attrs))
    [(role, entry, _)] = by_name["disaggregated_request"]
    assert (role, entry) == ("router", True)
    with_kv, without_kv = (a for _, _, a in by_name["llm_request"])
    assert (with_kv["queue_ms"], with_kv["ttft_ms"], with_kv["e2e_ms"], with_kv["kv_transfer_ms"]) == (1.25, 43.0, 502.0, 12.5)
    assert [e["name"] for e in with_kv["events"]] == ["kv_cache_transfer_start", "kv_cache_transfer_end"]
    assert "kv_transfer_ms" not in without_kv  # -1: not measured
    assert without_kv["gen_ai.latency.kv_cache_transfer_time"] == -1.0  # the raw attribute stays
