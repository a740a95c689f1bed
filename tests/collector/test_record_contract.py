"""The record contract: each fact the later stages read is found under its one name in
`record_facts`, whichever source's field it comes from. Built from the demo's writers of each
format (Dynamo's frontend and workers, TensorRT-LLM's perf-metrics files, trace-join's own lines),
ingested for real into a store on disk."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.cli.demo.trtllm_formats import disagg_record, worker_record
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.record_contract import FACTS
from tracejoin.collector.requests import build_requests
from tracejoin.collector.store import open_store


def _facts(store, where: str) -> list[dict]:
    rel = store.con.execute(f"SELECT f.* FROM record_facts f JOIN records r USING (record_id) WHERE {where} "
                            "ORDER BY record_id")
    names = [d[0] for d in rel.description]
    return [dict(zip(names, row)) for row in rel.fetchall()]


# (a Dynamo line's record stores only the fields the facts read: its target is in its line)
_FRONTEND_COMPLETED = "r.name = 'request completed' AND r.origin_id IN (SELECT origin_id FROM origins WHERE role = 'frontend')"


def _carries(internal_id: str) -> str:
    return f"record_id IN (SELECT record_id FROM record_ids WHERE kind = 'internal_id' AND value = '{internal_id}')"


@pytest.fixture
def store(tmp_path):
    sample = DynamoSample()
    ok = sample.add()
    failed = sample.add(offset_ms=500, status="error")
    sample.add(offset_ms=1000, status="cancelled")
    files = sample.write(tmp_path / "dynamo")
    timing = {"arrival_time": 100.0, "first_scheduled_time": 100.004, "first_token_time": 100.05,
              "last_token_time": 100.25, "kv_cache_transfer_start": 100.06, "kv_cache_transfer_end": 100.07}
    perf = tmp_path / "perf_metrics-gen-node1-4242-20261130T104030Z.jsonl"
    perf.write_bytes(orjson.dumps(worker_record(7, {"timing_metrics": timing}, ctx_request_id=3,
                                                disagg_request_id=1099511627799)) + b"\n")
    disagg = tmp_path / "perf_metrics-disagg-router1-17-20261130T104030Z.jsonl"
    disagg.write_bytes(orjson.dumps(disagg_record(
        ctx_server="node0:8001", gen_server="node1:8002", arrival=99.99, ctx_dispatch=99.995, first_token=100.06,
        ctx_timing=None, gen_timing=None, disagg_request_id=1099511627799)) + b"\n")
    middleware = tmp_path / "router.jsonl"
    middleware.write_bytes(orjson.dumps({
        "schema": "tracejoin.log.v1", "ts": "2026-11-30T10:40:30.300000Z", "level": "info", "event": "request.end",
        "role": "router", "worker": "gw:8000", "internal_id": "0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f",
        "status": 499, "duration_ms": 300.0, "ttfb_ms": 41.5, "disconnected": True, "route": "/v1/responses"}) + b"\n")
    with open_store(tmp_path / "store.duckdb") as s:
        Ingester(s).ingest_paths([str(p) for p in files.values()] + [str(perf), str(disagg), str(middleware)])
        yield s, sample, ok, failed


def test_every_fact_is_a_column_of_record_facts(store):
    s, *_ = store
    columns = [d[0] for d in s.con.execute("SELECT * FROM record_facts LIMIT 0").description]
    assert columns == ["record_id", *(fact.name for fact in FACTS)]


def test_dynamo_frontend_fields_are_read_under_the_contract_names(store):
    s, sample, ok, failed = store
    [completed] = _facts(s, f"{_FRONTEND_COMPLETED} AND {_carries(ok.request_id)}")
    assert completed["ttft_ms"] == 58.21 and completed["request_ms"] == 180.0
    assert completed["route"] == "/v1/chat/completions" and completed["endpoint"] == "chat_completions"
    assert (completed["prefill_worker"], completed["decode_worker"]) == (sample.prefill_instance, sample.decode_instance)
    assert not completed["failed"] and completed["http_status"] is None
    [answered] = _facts(s, f"r.name = 'http response sent' AND {_carries(failed.request_id)}")
    assert answered["http_status"] == "500" and answered["failed"]
    [gave_up] = _facts(s, f"{_FRONTEND_COMPLETED} AND {_carries(failed.request_id)}")
    assert gave_up["error_text"] == "internal: Failed to generate completions" and gave_up["failed"]
    assert not gave_up["disconnected"]
    [cancelled] = _facts(s, f"{_FRONTEND_COMPLETED} AND {_carries(sample.requests[2].request_id)}")
    assert cancelled["disconnected"]


def test_trtllm_perf_metrics_are_read_under_the_contract_names(store):
    s, *_ = store
    [worker] = _facts(s, "r.source = 'perf_metrics_jsonl' AND r.name = 'perf metrics'")
    assert worker["queue_ms"] == 4.0 and worker["ttft_ms"] == 50.0 and worker["e2e_ms"] == 250.0
    assert worker["kv_transfer_ms"] == 10.0 and worker["router_queue_ms"] is None
    [router] = _facts(s, "r.name = 'disagg perf metrics'")
    assert router["router_queue_ms"] == 5.0 and router["ttft_ms"] == 70.0


def test_the_middlewares_end_of_request_is_read_under_the_contract_names(store):
    s, *_ = store
    [end] = _facts(s, "r.name = 'request.end'")
    assert end["http_status"] == "499" and end["ttfb_ms"] == 41.5 and end["request_ms"] == 300.0
    assert end["disconnected"] and end["route"] == "/v1/responses" and not end["failed"]


def test_the_request_summary_reads_the_facts(store):
    s, sample, ok, failed = store
    build_requests(s)
    rows = dict(s.con.execute(
        "SELECT internal_ids[1], [http_status, CAST(duration_ms AS VARCHAR), CAST(ttft_ms AS VARCHAR), CAST(error AS VARCHAR)] "
        "FROM request_summary WHERE len(internal_ids) = 1").fetchall())
    assert rows[ok.request_id] == ["200", "180.1", "58.21", "false"]  # the http-request span's
    assert rows[failed.request_id][0] == "500" and rows[failed.request_id][3] == "true"
    disconnected = dict(s.con.execute("SELECT internal_ids[1], disconnected FROM request_summary "
                                      "WHERE len(internal_ids) = 1").fetchall())
    assert [disconnected[r.request_id] for r in sample.requests] == [None, None, True]  # None: no record says either


def test_the_contributor_page_lists_every_fact():
    page = (Path(__file__).parents[2] / "docs" / "contributing.md").read_text()
    assert [fact.name for fact in FACTS if f"| `{fact.name}` |" not in page] == []
