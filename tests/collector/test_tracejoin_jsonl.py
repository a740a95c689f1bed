"""trace-join's own JSON lines (docs/tracejoin-log-schema.md), as a router and its workers write
them, and the id rules they exercise: several values of one key, derived keys, scoped engine ids."""

from __future__ import annotations

import orjson

from tracejoin.collector.sources import tracejoin_jsonl

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def line(ts, event, **fields):
    return orjson.dumps({"schema": "tracejoin.log.v1", "ts": ts, "level": "info", "event": event, **fields})


def write(path, *lines):
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


def test_fields_become_ids_and_columns():
    [record] = tracejoin_jsonl.LineParser("router.jsonl").parse(line(
        "2026-11-30T10:40:30.123456Z", "request.start", role="router", worker="gw-1:8000",
        internal_id="0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f", x_request_id="client-abc", trace_id=TRACE,
        span_id="9a3c1e5b7d2f4a60", method="POST", route="/v1/responses"))
    assert record.entry and record.kind == "log" and record.worker == "gw-1:8000"
    assert record.time_ns == 1_796_035_230_123_456_000
    assert ("internal_id", "0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f", None) in record.ids
    assert ("x_request_id", "client-abc", None) in record.ids
    assert record.attrs == {"method": "POST", "route": "/v1/responses"}
    [tap] = tracejoin_jsonl.LineParser("proxy.jsonl").parse(line(
        "2026-11-30T10:40:31Z", "proxy.tap", role="proxy", worker="px:8080", reply_id="resp_1099511627799_0123456789abcdef"))
    assert tap.kind == "tap" and not tap.entry
    assert ("disagg_request_id", "1099511627799", None) in tap.ids  # derived from the Responses reply id


def test_a_retried_context_request_resolves_by_each_disagg_id_and_scoped_engine_ids(tj, tmp_path):
    rid = "0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f"
    common = dict(trace_id=TRACE, internal_id=rid)
    router = write(
        tmp_path / "router.jsonl",
        line("2026-11-30T10:40:30.000000Z", "request.start", role="router", worker="gw:8000", span_id="1111111111111111", **common),
        line("2026-11-30T10:40:30.001000Z", "disagg id assigned", role="router", worker="gw:8000", span_id="1111111111111111",
             disagg_request_id="1099511627799", **common),
        line("2026-11-30T10:40:30.050000Z", "context request retried", role="router", worker="gw:8000",
             span_id="1111111111111111", disagg_request_id="1099511627800", **common),
        line("2026-11-30T10:40:30.300000Z", "request.end", role="router", worker="gw:8000", span_id="1111111111111111",
             status=200, duration_ms=300.0, reply_id="resp_1099511627800_0123456789abcdef", **common),
    )
    # Two workers that both issued engine id 7; only ctx-a's belongs to this request.
    ctx = write(tmp_path / "ctx-a.jsonl", line("2026-11-30T10:40:30.060000Z", "request.end", role="ctx", worker="ctx-a:8001",
                                               disagg_request_id="1099511627800", engine_request_id="7", status=200))
    other = write(tmp_path / "ctx-b.jsonl", line("2026-11-30T10:40:31.000000Z", "request.end", role="ctx", worker="ctx-b:8001",
                                                 disagg_request_id="1099511627999", engine_request_id="7", status=200))
    assert tj("ingest", router, ctx, other).code == 0

    for query in ("1099511627799", "1099511627800", "resp_1099511627800_0123456789abcdef", rid):
        result = tj("lookup", query, "--json").json()
        assert len(result["requests"]) == 1, query
        request = result["requests"][0]
        assert request["ids"]["disagg_request_id"] == ["1099511627799", "1099511627800"]
        assert request["ids"]["engine_request_id"] == [{"worker": "ctx-a:8001", "id": "7"}]
        assert {w["worker"] for w in request["workers"]} == {"gw:8000", "ctx-a:8001"}
        assert len(request["records"]) == 5

    sevens = tj("lookup", "7", "--json").json()
    assert sorted(r["ids"]["engine_request_id"][0]["worker"] for r in sevens["requests"]) == ["ctx-a:8001", "ctx-b:8001"]


def test_a_wrongly_typed_line_is_quarantined(tj, tmp_path):
    path = write(tmp_path / "app.jsonl",
                 line("2026-11-30T10:40:30Z", "request.start", role="router", worker="gw:8000", internal_id="a"),
                 line("2026-11-30T10:40:30Z", "request.end", role="router", worker="gw:8000", status=[200]))
    run = tj("ingest", path)
    assert run.code == 2
    assert "field 'status' is list" in run.err


def test_a_process_named_two_ways_is_one_worker(tj, tmp_path):
    """The middleware names a worker host:port and says its host:pid; TensorRT-LLM's perf-metrics
    files (`perf_metrics-<kind>-<host>-<pid>-<time>.jsonl`, reproduced: TensorRT-LLM cannot run here)
    name it host:pid."""
    middleware = write(tmp_path / "gen.jsonl", line(
        "2026-11-30T10:40:30.000000Z", "request.end", role="gen", worker="gpu-2:8002", process="gpu-2:4242",
        disagg_request_id="1099511627800", engine_request_id="3", engine_worker="gpu-2:4242", status=200))
    perf = tmp_path / "perf_metrics-server-gpu-2-4242-20261130T104000Z.jsonl"
    perf.write_bytes(orjson.dumps({
        "request_id": 3, "perf_metrics": {"timing_metrics": {"arrival_time": 100.0, "first_token_time": 100.04,
                                                             "last_token_time": 100.5}},
        "disagg_request_id": 1099511627800, "ctx_request_id": 9, "status": "complete"}) + b"\n")
    assert tj("ingest", middleware, perf).code == 0

    [request] = tj("lookup", "1099511627800", "--json").json()["requests"]
    assert [(w["worker"], w["role"], w["records"]) for w in request["workers"]] == [("gpu-2:8002", "gen", 2)]
    assert request["ids"]["engine_request_id"] == [{"worker": "gpu-2:8002", "id": "3"}]
