"""TensorRT-LLM per-request perf-metrics JSONL files (post-#16668), read by
sources/perf_metrics_jsonl.py.

TensorRT-LLM cannot run here (no GPU, no wheel): the files are built field for field, key order
and compact separators included, as `PerfMetricsJsonlWriter` (`tensorrt_llm/serve/perf_metrics.py`)
writes them (`WorkerPerfMetricsRecord`, `DisaggPerfMetricsRecord`,
file name `perf_metrics-<server_kind>-<hostname>-<pid>-<YYYYmmddTHHMMSSZ>.jsonl`), by the demo's
writers of these records (cli/demo/trtllm_formats.py) with this module's times. The legacy
`/perf_metrics` tests (test_trtllm_perf_legacy.py) build their items with the same helpers.
"""

from __future__ import annotations

import json

import orjson
import pytest

from tracejoin.cli.demo import trtllm_formats as trtllm
from tracejoin.collector.sources import perf_metrics_jsonl
from tracejoin.collector.sources.parsing import Unparseable

DISAGG_A = 1183745023401293842  # disagg ids live in [2^40, 2^63): beyond a double's 2^53
DISAGG_B = 1183745023401293907
STAMP = "20260722T101500Z"


def timing(arrival: float, *, queue=0.001, ttft=0.043, e2e=0.502, kv: tuple | None = None, nulls=()) -> dict:
    """`timing_metrics` of one finished request, steady-clock seconds: the HTTP arrival a
    few ms before the engine's, times in `nulls` unset, kv transfer keys only when kv_cache_size
    > 0."""
    times = {
        "arrival_time": arrival,
        "first_scheduled_time": arrival + queue,
        "first_token_time": arrival + ttft,
        "last_token_time": arrival + e2e,
        "server_arrival_time": arrival - 0.006,
        "server_first_token_time": arrival + ttft + 0.002,
    }
    if kv:
        times.update(kv_cache_transfer_start=arrival + kv[0], kv_cache_transfer_end=arrival + kv[1])
    for key in nulls:
        times[key] = None
    return trtllm.timing_metrics(times, 4718592 if kv else 0)


KV_BLOCKS = {"num_total_allocated_blocks": 9, "num_new_allocated_blocks": 3, "num_reused_blocks": 6,
             "num_missed_blocks": 3}


def worker_item(request_id, timing_metrics: dict, *, ctx_request_id=None, steps: int = 0, status=None,
                disagg_request_id=None) -> dict:
    """A worker item as the legacy `/perf_metrics` endpoint returns it (with `status`, a
    post-#16668 worker record), with `steps` iterations from iteration 1031 on."""
    a = timing_metrics["arrival_time"]
    perf = trtllm.perf_metrics(timing_metrics, first_iter=1031, last_iter=1031 + max(steps - 1, 0), kv_blocks=KV_BLOCKS)
    step_list = [trtllm.step_metric(1031 + i, (a + i * 0.01, a + i * 0.01 + 0.008), (a + i * 0.01 + 0.008, a + i * 0.01 + 0.009),
                                    gpu_forward_ms=7.9, gpu_sample_ms=0.9) for i in range(steps)]
    return trtllm.worker_record(request_id, perf, ctx_request_id=ctx_request_id, disagg_request_id=disagg_request_id,
                                steps=step_list, status=status)


def worker_line(request_id, timing_metrics: dict, *, ctx_request_id=None, disagg_request_id=None, steps=0) -> bytes:
    """A `WorkerPerfMetricsRecord` line."""
    return compact(worker_item(request_id, timing_metrics, ctx_request_id=ctx_request_id, steps=steps,
                               status="complete", disagg_request_id=disagg_request_id))


def disagg_line(disagg_request_id, arrival: float, *, ctx_server="10.0.0.5:8001", gen_server="10.0.0.6:8002") -> bytes:
    """A `DisaggPerfMetricsRecord` line: the phases' request_id is str(disagg id) made an int."""
    def phase(arrival_s, scheduled_s, first_token_s, last_token_s) -> dict:
        return {"arrival_time": arrival_s, "first_scheduled_time": scheduled_s,
                "first_token_time": first_token_s, "last_token_time": last_token_s}

    return compact(trtllm.disagg_record(
        ctx_server=ctx_server, gen_server=gen_server, arrival=arrival, ctx_dispatch=arrival + 0.003,
        first_token=arrival + 0.14,
        ctx_timing=phase(arrival + 0.009, arrival + 0.010, arrival + 0.06, arrival + 0.06),
        gen_timing=phase(arrival + 0.065, arrival + 0.095, arrival + 0.14, arrival + 0.9),
        disagg_request_id=disagg_request_id))


def compact(obj) -> bytes:
    return trtllm.compact_json(obj).encode()


def write(folder, name: str, *lines: bytes):
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def file_name(kind: str, host: str, pid: int) -> str:
    return f"perf_metrics-{kind}-{host}-{pid}-{STAMP}.jsonl"


# -- parser ----------------------------------------------------------------------------------


def attrs(record) -> dict:
    return orjson.loads(record.attrs_text)


def test_worker_identity_comes_from_the_file_name_split_from_the_right():
    parser = perf_metrics_jsonl.LineParser(f"/x/perf_metrics/{file_name('gen', 'gpu-node-2.dc-1', 4242)}")
    assert parser.worker == "gpu-node-2.dc-1:4242"
    assert parser.role == "gen"
    [record] = parser.parse(worker_line(7, timing(81234.518)))
    assert attrs(record)["process_start"] == "2026-07-22T10:15:00Z"
    assert ("engine_request_id", "7", "gpu-node-2.dc-1:4242") in record.ids
    assert perf_metrics_jsonl.LineParser(file_name("disagg", "orchestrator-0", 9)).role == "router"


def test_steady_clock_times_become_phase_durations_without_a_wall_time():
    t = timing(81234.518, queue=0.001, ttft=0.043, e2e=0.502, kv=(0.05, 0.0625))
    [record] = perf_metrics_jsonl.LineParser(file_name("ctx", "h", 1)).parse(worker_line(42, t, steps=3))
    assert record.kind == "perf" and record.name == "perf metrics" and record.status == "complete"
    assert record.time_ns is None
    assert record.steady_s == pytest.approx(81234.512)  # the HTTP arrival, before the engine's
    assert attrs(record)["queue_ms"] == 1.0
    assert attrs(record)["ttft_ms"] == 43.0
    assert attrs(record)["e2e_ms"] == 502.0
    assert attrs(record)["kv_transfer_ms"] == 12.5
    assert record.duration_ns == 502_000_000
    assert attrs(record)["perf_metrics"]["timing_metrics"]["kv_cache_size"] == 4718592
    assert attrs(record)["perf_metrics"]["kv_cache_metrics"]["num_reused_blocks"] == 6
    assert attrs(record)["time_breakdown_metrics"] == {"steps": 3}  # step metrics are counted, not stored


def test_a_record_keeps_its_line_as_written_after_the_durations_it_measures():
    line = (b'{"request_id":9,"perf_metrics":{"timing_metrics":{"arrival_time":23080.566997764,'
            b'"first_token_time":23080.590851950998,"last_token_time":23080.590851951}},'
            b'"status":"complete","vendor_field":[1, 2.50]}\n')
    [record] = perf_metrics_jsonl.LineParser(file_name("ctx", "h", 1)).parse(line)
    assert record.attrs_text == ('{"ttft_ms":23.854,"e2e_ms":23.854,"process_start":"2026-07-22T10:15:00Z",'
                                 + line.decode().strip()[1:])
    # a field of the line's own by a computed name is the line's, once
    [own] = perf_metrics_jsonl.LineParser(file_name("ctx", "h", 1)).parse(line.replace(b'"status"', b'"ttft_ms":1,"status"'))
    assert own.attrs_text.count('"ttft_ms"') == 1 and attrs(own)["ttft_ms"] == 1


def test_null_and_zero_times_leave_out_only_the_durations_that_need_them():
    t = timing(81234.518, nulls=("first_token_time", "server_arrival_time"))
    t["first_scheduled_time"] = 0  # a legacy server's "unset"
    [record] = perf_metrics_jsonl.LineParser(file_name("gen", "h", 1)).parse(worker_line(1, t))
    assert "ttft_ms" not in attrs(record) and "queue_ms" not in attrs(record)
    assert attrs(record)["e2e_ms"] == 502.0
    assert record.steady_s == 81234.518


def test_ids_keep_their_exact_text():
    line = worker_line("17", timing(5.0), ctx_request_id=DISAGG_A, disagg_request_id=DISAGG_A)
    assert str(DISAGG_A).encode() in line
    [record] = perf_metrics_jsonl.LineParser(file_name("ctx", "h", 1)).parse(line)
    assert ("disagg_request_id", "1183745023401293842", None) in record.ids
    assert ("engine_request_id", "17", "h:1") in record.ids  # request_id may be a string
    assert ("ctx_request_id", "1183745023401293842", None) in record.ids  # a label here


def test_disagg_record_phases_carry_the_disagg_id_not_engine_ids():
    [record] = perf_metrics_jsonl.LineParser(file_name("disagg", "orch", 9)).parse(disagg_line(DISAGG_A, 81234.5))
    assert record.role == "router" and record.name == "disagg perf metrics"
    assert record.ids == [("disagg_request_id", str(DISAGG_A), None)]
    assert record.steady_s == 81234.5
    a = attrs(record)
    assert (a["ctx_server"], a["gen_server"]) == ("10.0.0.5:8001", "10.0.0.6:8002")
    assert a["disagg_queue_ms"] == 3.0 and a["ttft_ms"] == 140.0 and a["e2e_ms"] == 900.0
    assert a["ctx_ttft_ms"] == 51.0 and a["ctx_queue_ms"] == 1.0
    assert a["gen_queue_ms"] == 30.0 and a["gen_e2e_ms"] == 835.0
    assert record.duration_ns == 900_000_000


def test_a_disagg_record_without_a_disagg_id_names_the_ctx_request_on_its_ctx_server():
    obj = json.loads(disagg_line(77, 10.0))
    del obj["disagg_request_id"]  # request_id = str(disagg_request_id or ctx_request_id)
    [record] = perf_metrics_jsonl.LineParser(file_name("disagg", "orch", 9)).parse(compact(obj))
    assert record.ids == [("ctx_request_id", "77", "10.0.0.5:8001")]


@pytest.mark.parametrize("items, role", [
    ([{}], "agg"),  # no disaggregation ids
    ([{"ctx_request_id": 5, "disagg_request_id": DISAGG_A}], "gen"),  # tokens after the first
    ([{"ctx_request_id": 5, "disagg_request_id": DISAGG_A, "e2e": 0.043}], "ctx"),  # stopped at the first
    ([{"ctx_request_id": 5, "e2e": 0.043}, {"ctx_request_id": 6}, {"ctx_request_id": 7}], "gen"),  # most say
    ([{"ctx_request_id": 5, "nulls": ("last_token_time",)}], None),  # cannot tell
])
def test_a_worker_file_whose_kind_says_no_side_takes_the_role_its_records_suggest(items, role):
    parser = perf_metrics_jsonl.LineParser(file_name("server", "h", 1))
    for i, item in enumerate(items):
        t = timing(10.0 + i, e2e=item.get("e2e", 0.5), nulls=item.get("nulls", ()))
        [record] = parser.parse(worker_line(i, t, ctx_request_id=item.get("ctx_request_id"),
                                            disagg_request_id=item.get("disagg_request_id")))
        assert record.role is None  # the file's role, settled when the file is stored
    assert parser.role == role


@pytest.mark.parametrize("line, reason", [
    (b'{"request_id":1.5,"perf_metrics":{"timing_metrics":{}},"status":"complete"}', "'request_id' is float"),
    (b'{"request_id":1,"perf_metrics":[],"status":"complete"}', "'perf_metrics' is list"),
    (b'{"request_id":1,"perf_metrics":{"timing_metrics":{"arrival_time":"81234.5"}}}', "'arrival_time' is str"),
    (b'{"request_id":1,"perf_metrics":{"timing_metrics":{}},"disagg_request_id":true}', "'disagg_request_id' is bool"),
    (b'{"ctx_server":"a:1","gen_server":"b:2","disagg_server_arrival_time":[1]}', "'disagg_server_arrival_time'"),
    (b'{"ctx_server":"a:1","disagg_server_arrival_time":1.0,"ctx_perf_metrics":{"request_id":{}}}', "'request_id'"),
    (b'{"perf_metrics":{"timing_metrics":{}},"status":"complete"}', "missing field 'request_id'"),
    (b'{"request_id":1,"perf_metrics":{"timing_metrics":{"arrival_time":NaN}}}', "invalid JSON"),
])
def test_wrongly_typed_lines_say_why(line, reason):
    with pytest.raises(Unparseable, match=reason):
        perf_metrics_jsonl.LineParser(file_name("gen", "h", 1)).parse(line)


# -- what a user sees --------------------------------------------------------------------------


def disaggregated_deployment(tmp_path):
    """A router, a ctx worker and a gen worker on two hosts (same pid), and two requests: A's ctx
    phase and B's gen phase were both engine id 1 on their workers."""
    folder = tmp_path / "perf_metrics"
    write(folder, file_name("disagg", "router-host-1", 777),
          disagg_line(DISAGG_A, 81234.5), disagg_line(DISAGG_B, 81240.0))
    write(folder, file_name("ctx", "gpu-node-1", 4242),
          worker_line(1, timing(81234.509, e2e=0.051, kv=(0.052, 0.07)), ctx_request_id=1, disagg_request_id=DISAGG_A),
          worker_line(2, timing(81240.009, e2e=0.05), ctx_request_id=2, disagg_request_id=DISAGG_B))
    write(folder, file_name("gen", "gpu-node-2", 4242),
          worker_line(7, timing(81234.565, e2e=0.835), ctx_request_id=1, disagg_request_id=DISAGG_A),
          worker_line(1, timing(81240.07, e2e=0.7), ctx_request_id=2, disagg_request_id=DISAGG_B))
    return folder


def test_the_disagg_id_gives_one_request_with_the_router_and_both_workers(tj, tmp_path):
    run = tj("ingest", disaggregated_deployment(tmp_path), "--json")
    assert run.code == 0, run.err
    assert run.json()["sources"]["perf_metrics_jsonl"] == {"files": 3, "records": 6, "quarantined": 0}

    result = tj("lookup", str(DISAGG_A), "--json").json()
    assert result["id_kind"] == "disagg_request_id"
    [request] = result["requests"]
    assert request["ids"]["disagg_request_id"] == [str(DISAGG_A)]
    assert sorted(map(tuple, (e.values() for e in request["ids"]["engine_request_id"]))) == [
        ("gpu-node-1:4242", "1"), ("gpu-node-2:4242", "7")]
    assert {(w["worker"], w["role"], w["records"]) for w in request["workers"]} == {
        ("router-host-1:777", "router", 1), ("gpu-node-1:4242", "ctx", 1), ("gpu-node-2:4242", "gen", 1)}
    assert all(r["kind"] == "perf" and r["source"] == "perf_metrics_jsonl" for r in request["records"])
    assert all(r["time"] is None for r in request["records"])  # steady clock only
    # Without a wall-clock anchor the records keep their steady time, in order, with their phases.
    assert [r["summary"] for r in request["records"]] == [
        "disagg perf metrics · status=complete · 900.0 ms · disagg_queue_ms=3.0 · ttft_ms=140.0",
        "perf metrics · status=complete · 51.0 ms · queue_ms=1.0 · ttft_ms=43.0 · kv_transfer_ms=18.0",
        "perf metrics · status=complete · 835.0 ms · queue_ms=1.0 · ttft_ms=43.0",
    ]
    assert [r["clock"] for r in request["records"]] == [
        f"steady {s:.6f} s, no wall-clock anchor in this request" for s in (81234.5, 81234.503, 81234.559)]


def test_engine_id_1_on_two_workers_is_two_requests(tj, tmp_path):
    assert tj("ingest", disaggregated_deployment(tmp_path)).code == 0
    result = tj("lookup", "1", "--json").json()
    assert result["id_kind"] == "engine_request_id"
    by_disagg_id = {r["ids"]["disagg_request_id"][0]: r for r in result["requests"]}
    assert set(by_disagg_id) == {str(DISAGG_A), str(DISAGG_B)}
    a_engines = {(e["worker"], e["id"]) for e in by_disagg_id[str(DISAGG_A)]["ids"]["engine_request_id"]}
    b_engines = {(e["worker"], e["id"]) for e in by_disagg_id[str(DISAGG_B)]["ids"]["engine_request_id"]}
    assert a_engines == {("gpu-node-1:4242", "1"), ("gpu-node-2:4242", "7")}
    assert b_engines == {("gpu-node-1:4242", "2"), ("gpu-node-2:4242", "1")}


def test_a_wrongly_typed_line_is_quarantined_and_the_rest_stored(tj, tmp_path):
    bad = b'{"request_id":3,"perf_metrics":{"timing_metrics":{"arrival_time":"soon"}},"status":"complete"}'
    path = write(tmp_path, file_name("gen", "gpu-node-2", 4242),
                 worker_line(7, timing(1.0)), bad, worker_line(8, timing(2.0)))
    run = tj("ingest", path, "--json")
    assert run.code == 2
    assert run.json()["sources"]["perf_metrics_jsonl"]["records"] == 2
    [row] = tj("quarantine", "--json").json()
    assert row["line"] == 2 and "'arrival_time' is str" in row["reason"]
    assert tj("lookup", "8", "--json").code == 0
    assert tj("lookup", "3").code == 1
