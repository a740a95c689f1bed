"""Looking up requests of a disaggregated Dynamo deployment (frontend, prefill and decode
workers), built field for field as Dynamo 1.6.1 writes them by DynamoSample."""

from __future__ import annotations

import pytest

import json

from tracejoin.cli.demo.dynamo_formats import DynamoSample


@pytest.fixture
def db(either_store):
    """Every lookup here answers alike on a DuckDB store and on a ClickHouse one."""
    return either_store

# Per successful request, as Dynamo 1.6.1 writes them: 7 frontend lines (request received, Selected
# worker and route request completed per hop, request completed, http response sent), 2 prefill
# and 2 decode lines (request received, request completed), 1 request-trace row, and 5 spans
# (http-request, two router.route_request, two handle_payload).
RECORDS_PER_REQUEST = 17


def ingest_sample(tj, tmp_path, sample: DynamoSample):
    sample.write(tmp_path / "logs")
    run = tj("ingest", tmp_path / "logs")
    assert run.code == 0, run.err
    return run


def test_one_request_by_reply_internal_and_trace_id(tj, tmp_path):
    sample = DynamoSample()
    req = sample.add(x_request_id="client-abc-123")
    sample.add(offset_ms=3)  # another request in flight at the same time
    ingest_sample(tj, tmp_path, sample)

    for query, kind in ((req.reply_id, "reply_id"), (req.request_id, "internal_id"), (req.trace_id, "trace_id")):
        run = tj("lookup", query, "--json")
        assert run.code == 0, run.err
        result = run.json()
        assert result["id_kind"] == kind
        assert len(result["requests"]) == 1
        request = result["requests"][0]
        assert request["ids"]["internal_id"] == [req.request_id]
        assert request["ids"]["x_request_id"] == ["client-abc-123"]
        assert request["ids"]["trace_id"] == [req.trace_id]
        assert len(request["records"]) == RECORDS_PER_REQUEST
        assert {w["role"] for w in request["workers"]} == {"frontend", "prefill", "decode"}
        by_role = {w["role"]: w["worker"] for w in request["workers"] if w["role"] != "frontend"}
        assert sample.prefill_instance in by_role["prefill"]
        assert sample.decode_instance in by_role["decode"]
        assert sum(w["records"] for w in request["workers"]) == RECORDS_PER_REQUEST
        kinds = {(r["source"], r["kind"]) for r in request["records"]}
        assert kinds == {("dynamo_jsonl", "log"), ("otlp_json", "span"), ("dynamo_request_trace", "log")}
        times = [r["time"] for r in request["records"]]
        assert times == sorted(times)


def test_reply_id_that_no_record_carries_still_resolves(tj, tmp_path):
    """Dynamo never logs reply ids: chatcmpl-<uuid> is parsed into the internal id."""
    sample = DynamoSample()
    req = sample.add(endpoint="completions", stream=False)
    ingest_sample(tj, tmp_path, sample)
    assert req.reply_id.startswith("cmpl-")
    result = tj("lookup", req.reply_id, "--json").json()
    assert result["id_kind"] == "reply_id"
    assert [r["ids"]["internal_id"] for r in result["requests"]] == [[req.request_id]]


def test_shared_x_request_id_lists_every_request(tj, tmp_path):
    sample = DynamoSample()
    reqs = [sample.add(offset_ms=i * 2.5, x_request_id="batch-7") for i in range(6)]
    sample.add(offset_ms=1, x_request_id="someone-else")
    ingest_sample(tj, tmp_path, sample)

    result = tj("lookup", "batch-7", "--json").json()
    assert result["id_kind"] == "x_request_id"
    assert sorted(r["ids"]["internal_id"][0] for r in result["requests"]) == sorted(q.request_id for q in reqs)
    assert all(len(r["records"]) == RECORDS_PER_REQUEST for r in result["requests"])

    one = tj("lookup", reqs[3].reply_id, "--json").json()
    assert len(one["requests"]) == 1
    assert one["requests"][0]["ids"]["internal_id"] == [reqs[3].request_id]

    text = tj("lookup", "batch-7")
    assert text.code == 0
    assert "names 6 requests" in text.out


def test_client_chosen_internal_id_shared_by_two_requests_is_a_collision(tj, tmp_path):
    """Dynamo before the #17010 fix takes a client UUID as the internal id: two requests share it."""
    sample = DynamoSample()
    shared = "0b7c6f1e-1d2a-4c3b-9e8f-7a6b5c4d3e2f"
    first = sample.add(request_id=shared, x_request_id="first")
    second = sample.add(request_id=shared, offset_ms=4, x_request_id="second")
    ingest_sample(tj, tmp_path, sample)

    result = tj("lookup", shared, "--json").json()
    assert len(result["requests"]) == 2
    assert any("collision" in w and shared in w for w in result["warnings"])
    traces = sorted(r["ids"]["trace_id"][0] for r in result["requests"])
    assert traces == sorted([first.trace_id, second.trace_id])
    for request in result["requests"]:
        assert len(request["ids"]["trace_id"]) == 1, "the two traces were merged"
        assert {w["role"] for w in request["workers"]} >= {"frontend", "prefill", "decode"}
    assert {r["ids"]["x_request_id"][0] for r in result["requests"]} == {"first", "second"}

    by_label = tj("lookup", "second", "--json").json()
    assert len(by_label["requests"]) == 1
    assert by_label["requests"][0]["ids"]["trace_id"] == [second.trace_id]


def test_client_traceparent_shared_by_several_requests_does_not_merge_them(tj, tmp_path):
    sample = DynamoSample()
    client_span = "00f067aa0ba902b7"
    shared_trace = None
    for i in range(3):  # one client span and trace over three requests
        req = sample.add(offset_ms=i, client_parent_span=client_span, trace_id=shared_trace)
        shared_trace = req.trace_id
    ingest_sample(tj, tmp_path, sample)

    result = tj("lookup", shared_trace, "--json").json()
    assert result["id_kind"] == "trace_id"
    assert len(result["requests"]) == 3
    assert sorted(r["ids"]["internal_id"][0] for r in result["requests"]) == sorted(q.request_id for q in sample.requests)
    assert result["warnings"] == []


def test_nothing_found_is_exit_1_with_one_line(tj, tmp_path):
    sample = DynamoSample()
    sample.add()
    ingest_sample(tj, tmp_path, sample)
    run = tj("lookup", "chatcmpl-00000000-0000-4000-8000-000000000000")
    assert run.code == 1
    assert "nothing found" in run.err and run.out == ""
    run = tj("lookup", "no-such-id", "--json")
    assert run.code == 1
    assert run.json()["requests"] == []


def test_time_window(tj, tmp_path):
    sample = DynamoSample(start_ns=1_787_307_302_000_000_000)  # 2026-08-21T10:15:02Z
    early = sample.add(x_request_id="w")
    late = sample.add(offset_ms=3_600_000, x_request_id="w")  # an hour later
    ingest_sample(tj, tmp_path, sample)
    result = tj("lookup", "w", "--json", "--since", "2026-08-21T10:30:00Z").json()
    assert [r["ids"]["internal_id"] for r in result["requests"]] == [[late.request_id]]
    assert result["window"]["since"].startswith("2026-08-21T10:30:00")
    result = tj("lookup", "w", "--json", "--until", "2026-08-21T10:30:00Z").json()
    assert [r["ids"]["internal_id"] for r in result["requests"]] == [[early.request_id]]
    run = tj("lookup", "w", "--since", "yesterday-ish")
    assert run.code == 2


def test_an_agent_sessions_tool_events_are_found_by_its_session_and_tool_call_not_merged(tj, tmp_path):
    """Dynamo's request-trace tool rows (`tool_start`, `tool_end`, `tool_error`): the session and the
    tool call are labels; the two requests a tool event names (the one that asked for the tool, the
    one that took its result) stay two requests."""
    first, second = "6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11", "7a2d3b9f-4e5c-4d6a-8c2f-1b8e3f6a9d22"
    rows = [
        {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 1787307304315,
         "agent_context": {"session_id": "run-42:coder"},
         "request": {"request_id": first, "request_received_ms": 1787307302481, "total_time_ms": 1834.0}},
        {"schema": "dynamo.request.trace.v1", "event_type": "tool_end", "event_time_unix_ms": 1787307305000,
         "event_source": "harness", "agent_context": {"session_id": "run-42:coder"},
         "tool": {"tool_call_id": "call_abc", "tool_class": "bash", "started_at_unix_ms": 1787307304400,
                  "ended_at_unix_ms": 1787307304900,
                  "claude": {"source_request_id": first, "consumer_request_id": second}}},
        {"schema": "dynamo.request.trace.v1", "event_type": "request_end", "event_time_unix_ms": 1787307306315,
         "agent_context": {"session_id": "run-42:coder"},
         "request": {"request_id": second, "request_received_ms": 1787307305000, "total_time_ms": 1315.0}},
    ]
    (tmp_path / "dynamo-request-trace.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert tj("ingest", tmp_path).code == 0
    by_session = tj("lookup", "run-42:coder", "--json").json()
    assert by_session["id_kind"] == "session_id" and by_session["matched"] == 3
    [tool] = tj("lookup", "call_abc", "--json").json()["requests"]
    [event] = tool["records"]
    assert event["duration_ms"] == 500.0 and event["attrs"]["tool"]["claude"]["consumer_request_id"] == second
    assert len(tj("lookup", first, "--json").json()["requests"]) == 1
