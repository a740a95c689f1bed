"""TensorRT-LLM's legacy `GET /perf_metrics` arrays (PR #6985 until #16668) saved to files or
polled, read by sources/perf_metrics_legacy.py.

TensorRT-LLM cannot run here (no GPU, no wheel): the arrays are built as `get_perf_metrics` in
`tensorrt_llm/serve/openai_server.py` returns them — worker items are the post-#16668 worker
records without `status`; a disaggregated server's records pair the ctx and gen workers' items,
with `ctx_server`/`gen_server` and no `disagg_request_id` — as the endpoint returns them (compact
JSON) and as `jq .` / `json.dump(indent=2)` save them (pretty-printed).
"""

from __future__ import annotations

import json

import pytest

from tracejoin.collector.sources import detect, perf_metrics_legacy, text_log
from tracejoin.collector.sources.parsing import Unparseable

from .test_trtllm_perf_metrics import attrs, compact, timing, worker_item, write

CTX_REQUEST_ID = 1099511627799


def legacy_disagg_record(ctx_engine_id, gen_engine_id, ctx_request_id, arrival, *,
                         ctx_server="10.0.0.5:8001", gen_server="10.0.0.6:8002") -> dict:
    """The disaggregated server's record: the workers' items as it polled them."""
    return {
        "ctx_server": ctx_server, "gen_server": gen_server, "disagg_server_arrival_time": arrival,
        "disagg_ctx_dispatch_time": arrival + 0.003, "disagg_server_first_token_time": arrival + 0.14,
        "ctx_perf_metrics": {"request_id": ctx_engine_id, "ctx_request_id": ctx_request_id, "perf_metrics": {
            "timing_metrics": {"arrival_time": arrival + 0.009, "first_token_time": arrival + 0.06,
                               "kv_cache_size": 4718592, "kv_cache_transfer_start": arrival + 0.07,
                               "kv_cache_transfer_end": arrival + 0.09}}},
        "gen_perf_metrics": {"request_id": gen_engine_id, "ctx_request_id": ctx_request_id, "perf_metrics": {
            "timing_metrics": {"arrival_time": arrival + 0.065, "first_scheduled_time": arrival + 0.095}}},
    }


def legacy_timing(arrival, **kw) -> dict:
    """Legacy servers report every time, an unset one as 0 (timedelta.total_seconds())."""
    t = timing(arrival, **kw)
    return {k: (0 if v is None else v) for k, v in t.items()}


def test_the_reference_disagg_record_joins_each_worker_by_its_own_engine_id():
    [record] = perf_metrics_legacy.LineParser("/polls/disagg/10.0.0.1_8000.perf_metrics.jsonl").parse(
        compact([legacy_disagg_record(17, 88, CTX_REQUEST_ID, 81234.5)]))
    assert record.worker == "10.0.0.1:8000" and record.role == "router"
    assert sorted(record.ids) == [
        ("ctx_request_id", str(CTX_REQUEST_ID), "10.0.0.5:8001"),
        ("engine_request_id", "17", "10.0.0.5:8001"),
        ("engine_request_id", "88", "10.0.0.6:8002"),
    ]
    assert attrs(record)["ctx_kv_transfer_ms"] == 20.0 and attrs(record)["gen_queue_ms"] == 30.0
    assert "disagg_request_id" not in {kind for kind, _, _ in record.ids}


@pytest.mark.parametrize("path, worker", [
    ("/polls/10.0.0.5_8001.perf_metrics.json", "10.0.0.5:8001"),
    ("/polls/10.0.0.5:8001/polls.jsonl", "10.0.0.5:8001"),
    ("/polls/gpu-node-1_8001/perf_metrics.json.gz", "gpu-node-1:8001"),
    ("/polls/2026-07-22/ctx0.perf_metrics.json", "file:ctx0.perf_metrics"),
])
def test_the_worker_is_named_by_the_folder_or_the_file(path, worker):
    assert perf_metrics_legacy.LineParser(path).worker == worker
    assert perf_metrics_legacy.LineParser(path, worker="w:1").worker == "w:1"


def test_a_pretty_printed_array_is_read_when_it_closes():
    items = [worker_item(3, legacy_timing(10.0)), worker_item(4, legacy_timing(11.0, nulls=("first_token_time",)))]
    lines = json.dumps(items, indent=2).encode().split(b"\n")
    parser = perf_metrics_legacy.LineParser("/polls/h_8001.json")
    out = [parser.parse(line) for line in lines]
    assert all(r == [] for r in out[:-1])
    assert [r.ids for r in out[-1]] == [[("engine_request_id", "3", "h:8001")], [("engine_request_id", "4", "h:8001")]]
    assert "ttft_ms" not in attrs(out[-1][1]) and attrs(out[-1][0])["ttft_ms"] == 43.0  # 0 is unset
    assert parser.role == "agg"


def test_the_live_poller_gets_records_of_one_response():
    items = [worker_item(17, legacy_timing(1.0, e2e=0.043), ctx_request_id=CTX_REQUEST_ID)]
    [record] = perf_metrics_legacy.records_from_perf_metrics_response(items, "10.0.0.5:8001", role="ctx")
    assert record.worker == "10.0.0.5:8001" and record.role == "ctx"
    # A ctx worker's ctx request id is its own: a key, the same the disaggregated server's record carries.
    assert ("ctx_request_id", str(CTX_REQUEST_ID), "10.0.0.5:8001") in record.ids
    [unknown] = perf_metrics_legacy.records_from_perf_metrics_response(items, "10.0.0.5:8001")
    assert ("ctx_request_id", str(CTX_REQUEST_ID), None) in unknown.ids  # which side is unknown: a label
    assert unknown.role == "ctx"  # first and last token coincide: a context-only request
    assert perf_metrics_legacy.records_from_perf_metrics_response([], "10.0.0.5:8001") == []


@pytest.mark.parametrize("line, reason", [
    (b'{"request_id":1}', "expected a JSON array"),
    (b"[1, 2]", "array item is int"),
    (b'[{"request_id":[1],"perf_metrics":{}}]', "'request_id' is list"),
    (b'[{"request_id":1,"perf_metrics":{"timing_metrics":{"arrival_time":true}}}]', "'arrival_time' is bool"),
    (b'[{"request_id":1,', "invalid JSON"),
])
def test_malformed_polls_say_why(line, reason):
    with pytest.raises(Unparseable, match=reason):
        perf_metrics_legacy.LineParser("/p/h_8001.json").parse(line)


def test_a_broken_pretty_printed_array_is_unreadable_at_its_closing_line():
    parser = perf_metrics_legacy.LineParser("/p/h_8001.json")
    assert parser.parse(b"[") == [] and parser.parse(b'  {"request_id": 1,,') == []
    with pytest.raises(Unparseable, match="invalid JSON"):
        parser.parse(b"]")
    assert [r.ids for r in parser.parse(compact([worker_item(2, legacy_timing(1.0))]))] == [
        [("engine_request_id", "2", "h:8001")]]  # the next poll reads on


def test_sniffing_takes_arrays_of_perf_items_only(tmp_path):
    pretty = json.dumps([worker_item(1, legacy_timing(1.0))], indent=2).encode().split(b"\n")
    assert detect("x.json", [line for line in pretty if line.strip()][:20]) is perf_metrics_legacy
    assert detect("polls.jsonl", [compact([legacy_disagg_record(1, 2, 3, 4.0)])]) is perf_metrics_legacy
    assert detect("perf_metrics_polls.jsonl", [b"[]", b"[]"]) is perf_metrics_legacy
    # any other text is read a line at a time
    assert detect("other.jsonl", [b"[]"]) is text_log
    assert detect("numbers.json", [b"[1, 2, 3]"]) is text_log
    assert detect("trtllm.log", [b"[07/09/2025-23:07:49] [TRT-LLM] [I] perf_metrics: {\"perf_metrics\": 1}"]) \
        is not perf_metrics_legacy


def test_legacy_polls_join_the_disaggregated_request_across_its_workers(tj, tmp_path):
    """Polls saved per server: the disaggregated server's records, a ctx worker's (pretty-printed,
    named after its host and port) and a gen worker's (one poll per line, in a host_port folder). A
    second ctx worker also issued engine id 17; it must not join."""
    polls = tmp_path / "polls"
    write(polls / "10.0.0.1_8000", "perf_metrics.jsonl",
          compact([legacy_disagg_record(17, 88, CTX_REQUEST_ID, 81234.5)]), compact([]),
          compact([legacy_disagg_record(17, 91, CTX_REQUEST_ID + 5, 81299.0, ctx_server="10.0.0.7:8001")]))
    (polls / "10.0.0.5_8001.perf_metrics.json").write_text(json.dumps([
        worker_item(16, legacy_timing(81230.0, e2e=0.043), ctx_request_id=CTX_REQUEST_ID - 1),
        worker_item(17, legacy_timing(81234.509, e2e=0.043), ctx_request_id=CTX_REQUEST_ID),
    ], indent=2))
    write(polls / "10.0.0.6_8002", "perf_metrics.jsonl",
          compact([worker_item(88, legacy_timing(81234.565, e2e=0.835), ctx_request_id=CTX_REQUEST_ID)]),
          compact([worker_item(91, legacy_timing(81299.07, e2e=0.3), ctx_request_id=CTX_REQUEST_ID + 5)]))
    write(polls / "10.0.0.7_8001", "perf_metrics.jsonl",
          compact([worker_item(17, legacy_timing(81299.01, e2e=0.043), ctx_request_id=CTX_REQUEST_ID + 5)]))
    run = tj("ingest", polls, "--json")
    assert run.code == 0, run.err
    assert run.json()["sources"]["perf_metrics_legacy"]["records"] == 7

    result = tj("lookup", "88", "--json").json()
    [request] = result["requests"]
    assert {(w["worker"], w["role"]) for w in request["workers"]} == {
        ("10.0.0.1:8000", "router"), ("10.0.0.5:8001", "ctx"), ("10.0.0.6:8002", "gen")}
    assert sorted((e["worker"], e["id"]) for e in request["ids"]["engine_request_id"]) == [
        ("10.0.0.5:8001", "17"), ("10.0.0.6:8002", "88")]
    assert len(request["records"]) == 3

    sevens = tj("lookup", "17", "--json").json()["requests"]
    assert sorted(sorted(w["worker"] for w in r["workers"]) for r in sevens) == [
        ["10.0.0.1:8000", "10.0.0.5:8001", "10.0.0.6:8002"],
        ["10.0.0.1:8000", "10.0.0.6:8002", "10.0.0.7:8001"],
    ]


def test_a_poll_that_is_not_an_array_is_quarantined(tj, tmp_path):
    path = write(tmp_path / "10.0.0.5_8001", "perf_metrics.jsonl",
                 compact([worker_item(1, legacy_timing(1.0))]), b'{"detail":"Not Found"}',
                 compact([worker_item(2, legacy_timing(2.0))]))
    run = tj("ingest", path, "--json")
    assert run.code == 2
    assert run.json()["sources"]["perf_metrics_legacy"]["records"] == 2
    [row] = tj("quarantine", "--json").json()
    assert row["line"] == 2 and "expected a JSON array" in row["reason"]
