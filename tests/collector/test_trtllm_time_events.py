"""TensorRT-LLM's per-rank time events (`TRTLLM_PERF_TIME_EVENTS_PATH`, PR #16900): the lines are
written as that PR's writer writes them (TensorRT-LLM cannot run here), and join the same worker's
perf-metrics records by engine request id."""

from __future__ import annotations

import json

import pytest

from tracejoin.cli.demo.trtllm_formats import perf_metrics, worker_record
from tracejoin.collector.sources import detect, trtllm_time_events
from tracejoin.collector.sources.parsing import Unparseable

TIMING = {"arrival_time": 1000.0, "first_scheduled_time": 1000.01, "first_token_time": 1000.05,
          "last_token_time": 1000.5}


def time_event(request_id, **more) -> dict:
    return {"request_id": request_id, "rank": 0, "ctx_request_id": 17,
            "time_breakdown_metrics": {"step_metrics": [{"iter": 1}, {"iter": 2}]},
            "request_timing_metrics": TIMING, **more}


def test_a_time_event_is_its_workers_engine_request_with_its_phases(tmp_path):
    path = tmp_path / "gpu-node-1" / "time_events_rank0_pid4242.jsonl"
    path.parent.mkdir()
    line = json.dumps(time_event(42)).encode()
    path.write_bytes(line + b"\n")
    assert detect(str(path), [line]) is trtllm_time_events
    [record] = trtllm_time_events.LineParser(str(path)).parse(line)
    assert record.worker == "gpu-node-1:4242" and record.steady_s == 1000.0
    assert record.ids == [("engine_request_id", "42", "gpu-node-1:4242"), ("ctx_request_id", "17", None)]
    attrs = json.loads(record.attrs_text)
    assert (attrs["queue_ms"], attrs["ttft_ms"], attrs["e2e_ms"]) == (10.0, 50.0, 500.0)
    assert attrs["time_breakdown_metrics"] == {"steps": 2}  # per-iteration metrics counted
    with pytest.raises(Unparseable, match="request_id"):
        trtllm_time_events.LineParser(str(path)).parse(b'{"rank": 0}')


def test_time_events_join_the_workers_perf_metrics(tj, tmp_path):
    events = tmp_path / "time_events" / "gpu-node-1" / "time_events_rank0_pid4242.jsonl"
    events.parent.mkdir(parents=True)
    events.write_text(json.dumps(time_event(42)) + "\n")
    perf = tmp_path / "perf" / "perf_metrics-server-gpu-node-1-4242-20260820T101500Z.jsonl"
    perf.parent.mkdir()
    perf.write_text(json.dumps(worker_record(42, perf_metrics(TIMING, first_iter=1, last_iter=9, kv_blocks={})))
                    + "\n")
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", "42", "--json").json()["requests"]
    assert sorted(r["source"] for r in request["records"]) == ["perf_metrics_jsonl", "trtllm_time_events"]
