"""TensorRT-LLM's per-rank time events (`TRTLLM_PERF_TIME_EVENTS_PATH`, PR #16900): the lines are
written as that PR's writer writes them (TensorRT-LLM cannot run here), and join the same worker's
perf-metrics records by engine request id."""

from __future__ import annotations

import json

import pytest

from tracejoin.cli.demo.trtllm_formats import perf_metrics, worker_record
from tracejoin.collector.sources import detect, trtllm_time_events
from tracejoin.collector.sources.parsing import Unparseable


@pytest.fixture
def db(either_store):
    """Every lookup here answers alike on a DuckDB store and on a ClickHouse one."""
    return either_store

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


# The PR's later revision: one line per moment of a request, on workers and on the disaggregated
# router, and one line per request from the benchmark client; written as its writer writes them
# (`json.dumps` of the envelope, one line each).

def moment(role, event, request_id, t, *, ctx_request_id=None, rank=0, pid=4242, **provenance) -> dict:
    return {"role": role, "event": event, "request_id": request_id, "ctx_request_id": ctx_request_id,
            "rank": rank, "t": t, "pid": pid, **provenance}


def router_request(seq, disagg_request_id, t0, *, ctx_request_id=3, pid=100) -> list[dict]:
    """The five moments the router stamps; `ctx_request_id` is known from the context server's
    answer on, and the first line carries no `disagg_request_id`, which the router's own count of
    its requests still joins."""
    lines = []
    for i, event in enumerate(("arrival", "ctx_dispatch", "gen_dispatch", "first_token", "resp_done")):
        provenance = {"ctx_server": "ctx0:8000", "gen_server": "gen0:8001"}
        if i:
            provenance["disagg_request_id"] = disagg_request_id
        lines.append(moment("router", event, seq, t0 + i / 100, pid=pid, rank=None,
                            ctx_request_id=ctx_request_id if i >= 2 else None, **provenance))
    return lines


def write_lines(path, items) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(item) + "\n" for item in items))


def test_a_workers_moment_is_its_engine_request_at_that_steady_time(tmp_path):
    path = tmp_path / "gpu-node-1" / "time_events_rank0_pid4242.jsonl"
    line = json.dumps(moment("gen", "gen_first_token", 7, 1000.25, ctx_request_id=3)).encode()
    assert detect(str(path), [line]) is trtllm_time_events
    parser = trtllm_time_events.LineParser(str(path))
    [record] = parser.parse(line)
    assert (record.name, record.role, record.steady_s, parser.role) == ("gen_first_token", "gen", 1000.25, "gen")
    assert record.ids == [("engine_request_id", "7", "gpu-node-1:4242"), ("ctx_request_id", "3", None)]
    with pytest.raises(Unparseable, match="role 'router' in a worker's time events"):
        parser.parse(json.dumps(moment("router", "arrival", 1, 1.0)).encode())


def test_the_routers_moments_carry_its_own_count_and_the_disaggregated_id(tmp_path):
    path = tmp_path / "router-host" / "disagg_router_pid100.jsonl"
    lines = [json.dumps(item).encode() for item in router_request(0, 111, 2000.0)]
    assert detect(str(path), lines) is trtllm_time_events
    parser = trtllm_time_events.LineParser(str(path))
    first, second = parser.parse(lines[0])[0], parser.parse(lines[1])[0]
    assert (first.worker, first.role, first.name, parser.role) == ("router-host:100", "router", "arrival", "router")
    assert first.ids == [("router_request_id", "0", "router-host:100")]
    assert second.ids == [("router_request_id", "0", "router-host:100"), ("disagg_request_id", "111", None)]
    with pytest.raises(Unparseable, match="missing field 'event'"):
        parser.parse(b'{"role": "router", "request_id": 1}')


def test_the_benchmark_clients_request_is_its_reply_at_its_wall_clock_send_time(tmp_path):
    path = tmp_path / "bench-host" / "client_pid9.jsonl"
    item = {"source": "client", "client_index": 0, "send_time": 12.5, "send_wall_time": 1787000000.25,
            "response_id": "chatcmpl-3f2a", "ttft": 0.125, "latency": 0.5, "success": False, "error": "timed out"}
    line = json.dumps(item).encode()
    assert detect(str(path), [line]) is trtllm_time_events
    # A file of that name that is not the client's is not claimed.
    assert detect(str(path), [b'{"source": "other", "send_wall_time": 1}']) is not trtllm_time_events
    [record] = trtllm_time_events.LineParser(str(path)).parse(line)
    assert (record.role, record.time_ns, record.duration_ns, record.status) == \
        ("client", 1787000000250000000, 500_000_000, "error")
    assert record.ids == [("reply_id", "chatcmpl-3f2a", None)]
    attrs = json.loads(record.attrs_text)
    assert (attrs["ttft_ms"], attrs["e2e_ms"], attrs["error"]) == (125.0, 500.0, "timed out")


def test_lookup_of_a_disaggregated_request_shows_the_router_and_worker_moments_in_order(tj, tmp_path):
    write_lines(tmp_path / "router" / "router-host" / "disagg_router_pid100.jsonl",
                router_request(0, 111, 1000.0) + router_request(1, 222, 1001.0))
    write_lines(tmp_path / "workers" / "gpu-node-1" / "time_events_rank0_pid4242.jsonl",
                [moment("gen", "gen_arrival", 7, 1000.021, ctx_request_id=3),
                 moment("gen", "gen_first_token", 7, 1000.025, ctx_request_id=3),
                 moment("gen", "gen_arrival", 8, 1001.021, ctx_request_id=4)])
    perf = tmp_path / "perf" / "perf_metrics-server-gpu-node-1-4242-20260820T101500Z.jsonl"
    write_lines(perf, [worker_record(7, perf_metrics(TIMING, first_iter=1, last_iter=9, kv_blocks={}),
                                     ctx_request_id=3, disagg_request_id=111)])
    ingest = tj("ingest", tmp_path)
    assert ingest.code == 0
    [request] = tj("lookup", "111", "--json").json()["requests"]
    names = [r["name"] for r in request["records"] if r["source"] == "trtllm_time_events"]
    # All five router moments (the first joined by the router's own count), then the worker's,
    # interleaved by their steady times; nothing of the router's other request.
    assert names == ["arrival", "ctx_dispatch", "gen_dispatch", "gen_arrival", "gen_first_token",
                     "first_token", "resp_done"]
    workers = {r["worker"] for r in request["records"]}
    assert workers == {"router-host:100", "gpu-node-1:4242"}
    # No record of this request has a wall-clock time: the text timeline counts on the steady clock.
    [dispatch] = [line for line in tj("lookup", "111").out.splitlines() if line.endswith("ctx_dispatch")]
    assert dispatch.split()[:3] == ["steady", "10.0", "10.0"]
