"""Error lines of TensorRT-LLM's text logs in a lookup: a traceback shown as one record, and an
error line that names no request shown in the request that failed on its worker in its second.

TensorRT-LLM cannot run here: its text log lines and its `llm_request` span (OTLP/JSON, as its
tracing module names the attributes) are reproduced from its sources' formats."""

from __future__ import annotations

import pytest

import orjson


@pytest.fixture
def db(either_store):
    """Every lookup here answers alike on a DuckDB store and on a ClickHouse one."""
    return either_store

HOST, PID = "gpu-node-2", 4242
SECOND_NS = 1_796_035_710_000_000_000  # 2026-11-30T10:48:30Z, the second the log lines are stamped with
STAMP = "[11/30/2026-10:48:30]"

TRACEBACK = [
    f"{STAMP} [TRT-LLM] [E] Traceback (most recent call last):",
    '  File "/usr/local/lib/python3.12/dist-packages/tensorrt_llm/executor/worker.py", line 412, in _handle',
    "    raise RuntimeError(msg)",
    "RuntimeError: CUDA error: an illegal memory access was encountered",
]


def span_line(engine_id: int, start_ns: int, failed: bool, trace: str) -> bytes:
    """TensorRT-LLM's `llm_request` span of one engine request, in an OTLP/JSON export."""
    return orjson.dumps({"resourceSpans": [{
        "resource": {"attributes": [
            {"key": "service.name", "value": {"stringValue": "trtllm-worker"}},
            {"key": "host.name", "value": {"stringValue": HOST}},
            {"key": "process.pid", "value": {"intValue": str(PID)}}]},
        "scopeSpans": [{"scope": {"name": "trt.llm"}, "spans": [{
            "traceId": trace * 32, "spanId": trace * 16, "name": "llm_request", "kind": 2,
            "startTimeUnixNano": str(start_ns), "endTimeUnixNano": str(start_ns + 40_000_000),
            "attributes": [{"key": "gen_ai.request.id", "value": {"intValue": str(engine_id)}}],
            "status": {"code": 2, "message": "request failed"} if failed else {}}]}]}]}) + b"\n"


def deployment(tmp_path, spans: list[bytes], log: list[str]):
    (tmp_path / "spans.otlp.jsonl").write_bytes(b"".join(spans))
    folder = tmp_path / f"{HOST}-{PID}"  # the worker's log, in a folder named by its host and pid
    folder.mkdir()
    (folder / "trtllm-serve.log").write_text("\n".join([f"{STAMP} [TRT-LLM] [I] Server started", *log,
                                                        f"{STAMP} [TRT-LLM] [I] next line"]) + "\n")
    return tmp_path


def request_of(tj, engine_id: int) -> dict:
    [request] = tj("lookup", str(engine_id), "--json").json()["requests"]
    return request


def tracebacks(request: dict) -> list[dict]:
    return [r for r in request["records"] if r["source"] == "trtllm_log"]


def test_a_traceback_is_one_record_in_the_request_that_failed_on_its_worker_then(tj, tmp_path):
    spans = [span_line(5, SECOND_NS + 200_000_000, True, "a"), span_line(6, SECOND_NS + 300_000_000, False, "b")]
    assert tj("ingest", deployment(tmp_path, spans, TRACEBACK)).code == 0

    failed = request_of(tj, 5)
    [shown] = tracebacks(failed)
    assert shown["inferred"] and not shown.get("ambiguous")
    assert shown["text"] == "\n".join(line.removeprefix(f"{STAMP} [TRT-LLM] [E] ") for line in TRACEBACK)
    assert shown["lines"] == 4 and shown["exception"] == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert shown["origin"]["offset"] == len(f"{STAMP} [TRT-LLM] [I] Server started\n")  # where the traceback begins
    # placed at the failure it is inferred from, not at the start of the second its line names
    assert shown["time"] == "2026-11-30T10:48:30.240000Z" and "to the second" in shown["clock"]
    assert failed["first_error"]["text"].endswith(shown["exception"])
    # the same second on the same worker, but this request did not fail: not its error
    assert tracebacks(request_of(tj, 6)) == []

    shown_text = tj("lookup", "5").out
    assert "ERROR · Traceback (most recent call last): · RuntimeError: CUDA error" in shown_text
    assert '  File "/usr' not in shown_text  # its lines are in the record, not rows of their own
    assert '    raise RuntimeError(msg)' in tj("lookup", "5", "--full").out


def test_an_error_line_two_failed_requests_could_own_is_shown_in_both_marked_ambiguous(tj, tmp_path):
    spans = [span_line(5, SECOND_NS + 200_000_000, True, "a"), span_line(6, SECOND_NS + 300_000_000, True, "b")]
    assert tj("ingest", deployment(tmp_path, spans, TRACEBACK)).code == 0

    for engine_id in (5, 6):
        [shown] = tracebacks(request_of(tj, engine_id))
        assert shown["inferred"] and shown["ambiguous"] and "1 record(s) of other requests" in shown["clock"]


def test_an_error_line_naming_a_peer_the_request_did_not_use_is_not_inferred(tj, tmp_path):
    log = [f"{STAMP} [TRT-LLM] [E] Unexpected error while processing request to http://10.0.0.9:8002/v1/completions"]
    spans = [span_line(5, SECOND_NS + 200_000_000, True, "a")]
    assert tj("ingest", deployment(tmp_path, spans, log)).code == 0
    assert tracebacks(request_of(tj, 5)) == []


def test_a_traceback_naming_an_engine_id_is_joined_by_it_whole(tj, tmp_path):
    """Its last line names the engine request (`Post-processor hook failed for request N`): the
    whole traceback joins that request by the id, not by time, even with no failure recorded."""
    log = [*TRACEBACK[:-1], "RuntimeError: Post-processor hook failed for request 5: boom"]
    spans = [span_line(5, SECOND_NS + 200_000_000, False, "a")]
    assert tj("ingest", deployment(tmp_path, spans, log)).code == 0

    [shown] = tracebacks(request_of(tj, 5))
    assert not shown.get("inferred") and shown["lines"] == 4 and shown["text"].startswith("Traceback")
    assert shown["exception"] == "RuntimeError: Post-processor hook failed for request 5: boom"
