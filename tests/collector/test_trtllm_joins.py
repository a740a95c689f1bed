"""Joins across TensorRT-LLM's records (TensorRT-LLM cannot run here, so its formats are reproduced
from its sources, as the other test_trtllm_* modules cite them): steady-clock perf records placed on the
wall clock through an anchor, and a retried context request's abandoned disagg id."""

from __future__ import annotations

import pytest

import orjson

from .test_trtllm_perf_metrics import (
    DISAGG_A, DISAGG_B, disagg_line, file_name, timing, worker_line, write,
)


@pytest.fixture
def db(either_store):
    """Every lookup here answers alike on a DuckDB store and on a ClickHouse one."""
    return either_store

WALL_START_NS = 1_796_035_710_000_000_000  # when the worker's llm_request span started


def llm_request_span_line(host: str, pid: int, engine_id: int, start_ns: int, duration_s: float,
                          pod: str | None = None) -> bytes:
    """An OTLP/JSON export of TensorRT-LLM's `llm_request` span: SERVER, gen_ai.request.id
    = the engine id, started at the request's arrival moved onto the wall clock; `pod`: the
    resource's k8s.pod.name, as OTEL_RESOURCE_ATTRIBUTES adds it in Kubernetes."""
    return orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "trtllm-worker"}},
            {"key": "host.name", "value": {"stringValue": host}},
            {"key": "process.pid", "value": {"intValue": str(pid)}},
            *([{"key": "k8s.pod.name", "value": {"stringValue": pod}}] if pod else [])]},
        "scopeSpans": [{"scope": {"name": "trt.llm"}, "spans": [{
            "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174",
            "name": "llm_request", "kind": 2, "startTimeUnixNano": str(start_ns),
            "endTimeUnixNano": str(start_ns + int(duration_s * 1e9)),
            "attributes": [{"key": "gen_ai.request.id", "value": {"intValue": str(engine_id)}},
                           {"key": "gen_ai.latency.time_to_first_token", "value": {"doubleValue": 0.043}},
                           {"key": "gen_ai.latency.e2e", "value": {"doubleValue": duration_s}}],
            "status": {}}]}]}]})


def test_perf_records_are_placed_on_the_wall_clock_by_the_same_process_span(tj, tmp_path):
    arrival = 81234.509
    write(tmp_path, file_name("gen", "gpu-node-2", 4242), worker_line(5, timing(arrival, e2e=0.835)))
    (tmp_path / "spans.otlp.jsonl").write_bytes(llm_request_span_line("gpu-node-2", 4242, 5, WALL_START_NS, 0.835) + b"\n")
    assert tj("ingest", tmp_path).code == 0

    [request] = tj("lookup", "5", "--json").json()["requests"]
    perf = [r for r in request["records"] if r["kind"] == "perf"]
    assert len(perf) == 1 and len(request["records"]) == 2
    # The span starts at the engine's arrival (TensorRT-LLM moves it onto the wall clock), so the
    # perf record lands at the same instant.
    assert perf[0]["time"] == "2026-11-30T10:48:30.000000Z"
    assert perf[0]["clock"] == f"steady {arrival - 0.006:.6f} s, placed by llm_request on gpu-node-2:4242"


def test_a_pod_named_span_and_the_host_pid_named_perf_file_are_one_worker(tj, tmp_path):
    """In Kubernetes the span's resource names the pod as well as host and pid: the worker is
    the pod, and the perf-metrics file, which names the process by host and pid, is the same
    worker's; the engine id, scoped by either name, joins them."""
    write(tmp_path, file_name("gen", "gpu-node-2", 4242), worker_line(5, timing(81234.509, e2e=0.835)))
    (tmp_path / "spans.otlp.jsonl").write_bytes(
        llm_request_span_line("gpu-node-2", 4242, 5, WALL_START_NS, 0.835, pod="trtllm-gen-7f9c4-x2x8q") + b"\n")
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", "5", "--json").json()["requests"]
    assert [(w["worker"], w["records"]) for w in request["workers"]] == [("trtllm-gen-7f9c4-x2x8q", 2)]
    assert [r["kind"] for r in request["records"]] == ["span", "perf"]


def test_a_retried_context_requests_abandoned_disagg_id_is_an_orphan_not_a_wrong_join(tj, tmp_path, db):
    """The disaggregated server re-mints the disagg id when it retries a context request; its
    record names only the last one. The first context attempt, on another ctx worker, is then
    reached by no reply: an orphan, joined to nothing else."""
    folder = tmp_path / "perf"
    write(folder, file_name("disagg", "router-host", 7), disagg_line(DISAGG_B, 81240.0,
                                                                       ctx_server="ctx-b:8001", gen_server="gen:8002"))
    write(folder, file_name("ctx", "ctx-a", 11),
          worker_line(1, timing(81240.004, e2e=0.02), disagg_request_id=DISAGG_A))  # abandoned attempt
    write(folder, file_name("ctx", "ctx-b", 12),
          worker_line(1, timing(81240.03, e2e=0.05), disagg_request_id=DISAGG_B))
    write(folder, file_name("gen", "gen", 13),
          worker_line(1, timing(81240.09, e2e=0.7), disagg_request_id=DISAGG_B))
    assert tj("ingest", folder).code == 0

    [request] = tj("lookup", str(DISAGG_B), "--json").json()["requests"]
    assert {w["worker"] for w in request["workers"]} == {"router-host:7", "ctx-b:12", "gen:13"}
    [orphan] = tj("lookup", str(DISAGG_A), "--json").json()["requests"]
    assert [w["worker"] for w in orphan["workers"]] == ["ctx-a:11"]

    if str(db).startswith("chdb:"):
        return  # coverage runs on a DuckDB store only
    coverage = tj("coverage", "--json").json()
    assert coverage["replies"] == 1
    assert coverage["joined"]["both_workers"] == 1
    assert coverage["orphans"] == {"requests": 1, "records": 1}
    assert {w["worker"]: w["orphan_records"] for w in coverage["by_worker"]}["ctx-a:11"] == 1
