"""TensorRT-LLM post-processor hook records (`raw_output` lines of the `RawOutputDump` hook), read
by sources/trtllm_hook.py.

TensorRT-LLM cannot run here (no GPU, no wheel): the lines are built (by the demo's writer of
them, cli/demo/trtllm_formats.py) as the fork
JunyiXu-nv/TensorRT-LLM's `tensorrt_llm/executor/raw_output_hook.py` writes them: `json.dumps(record, ensure_ascii=False,
separators=(",", ":"))` into `<TRTLLM_RAW_OUTPUT_DIR>/<YYYY-MM-DDTHH>/raw-<pid>.jsonl`, the engine
id and the disagg id as strings, times from `datetime.now(timezone.utc).isoformat()`.
"""

from __future__ import annotations

import duckdb
import pytest

from tracejoin.cli.demo import trtllm_formats as trtllm
from tracejoin.collector.sources import detect, text_log, trtllm_hook
from tracejoin.collector.sources.parsing import Unparseable

from .test_trtllm_perf_metrics import DISAGG_A, file_name, timing, worker_line, write

SECRET = "the model's reply, which is not stored"


def raw_output(request_id: int, disagg_request_id: int | None = None, *, started="2026-09-18T07:12:33.101010+00:00",
               finished="2026-09-18T07:12:34.567890+00:00", aborted=False, frames=("the model's ", "reply, ",
                                                                                  "which is not stored")) -> bytes:
    return trtllm.raw_output_line(request_id, disagg_request_id, started_at=started, finished_at=finished,
                                  frames=list(frames), streaming=len(frames) > 1, aborted=aborted).encode()


def test_a_record_is_one_engine_request_on_its_process():
    parser = trtllm_hook.LineParser("/var/log/raw/gpu-node-2/2026-09-18T07/raw-4242.jsonl")
    assert parser.worker == "gpu-node-2:4242"
    [record] = parser.parse(raw_output(7, DISAGG_A))
    assert record.kind == "hook" and record.name == "raw output" and record.status == "complete"
    assert record.ids == [("engine_request_id", "7", "gpu-node-2:4242"), ("disagg_request_id", str(DISAGG_A), None)]
    assert record.time_ns == 1_789_715_553_101_010_000
    assert record.duration_ns == 1_466_880_000
    assert record.attrs == {"output_index": 0, "streaming": True, "aborted": False, "text_chars": len(SECRET),
                            "frames": 3}
    assert parser.role == "worker"  # disaggregated; which side, the hook does not say
    [aggregated] = trtllm_hook.LineParser("/d/h/2026-09-18T07/raw-1.jsonl").parse(raw_output(3, aborted=True))
    assert aggregated.status == "aborted" and [k for k, _, _ in aggregated.ids] == ["engine_request_id"]


@pytest.mark.parametrize("path, worker", [
    ("/dump/gpu-node-2/2026-09-18T07/raw-4242.jsonl", "gpu-node-2:4242"),
    ("/dump/gpu-node-2/2026-09-18T07/raw-4242.jsonl.gz", "gpu-node-2:4242"),
    ("/collected/raw-4242.jsonl", "local:4242"),  # not in an hour folder
    ("/collected/10.0.0.6_8002/hook.jsonl", "10.0.0.6:8002"),  # renamed: parsing.worker_from_path
])
def test_the_worker_is_the_host_folder_and_the_pid(path, worker):
    assert trtllm_hook.LineParser(path).worker == worker


@pytest.mark.parametrize("line, reason", [
    (b'{"event":"other","request_id":"1"}', "not a raw_output"),
    (b'{"event":"raw_output","request_id":["1"],"started_at":"2026-09-18T07:12:33+00:00",'
     b'"finished_at":"2026-09-18T07:12:34+00:00"}', "'request_id' is list"),
    (b'{"event":"raw_output","request_id":"1","started_at":"yesterday","finished_at":"2026-09-18T07:12:34+00:00"}',
     "unreadable time"),
    (b'{"event":"raw_output","request_id":"1","started_at":"2026-09-18T07:12:33+00:00"}', "missing field 'finished_at'"),
    (b'{"event":"raw_output","request_id":"1","started_at":"2026-09-18T07:12:33+00:00",'
     b'"finished_at":"2026-09-18T07:12:34+00:00","aborted":"no"}', "'aborted' is str"),
])
def test_malformed_records_say_why(line, reason):
    with pytest.raises(Unparseable, match=reason):
        trtllm_hook.LineParser("/d/h/2026-09-18T07/raw-1.jsonl").parse(line)


def test_sniffing_takes_raw_output_lines_only():
    assert detect("raw-1.jsonl", [raw_output(1), raw_output(2, DISAGG_A)]) is trtllm_hook
    # any other text is read a line at a time
    assert detect("raw-1.jsonl", [raw_output(1), b'{"event":"something else"}']) is text_log


def test_hook_records_join_perf_records_by_engine_id_on_the_same_process_and_by_disagg_id(tj, tmp_path, db):
    """The gen worker gpu-node-2 (pid 4242) dumps raw output under a folder named after its host, so
    its hook records meet its perf records by engine id; the aggregated server on gpu-node-3 also
    issued engine id 7, and stays apart."""
    dump = tmp_path / "raw" / "gpu-node-2" / "2026-09-18T07"
    write(dump, "raw-4242.jsonl", raw_output(7, DISAGG_A), raw_output(8, DISAGG_A + 1, aborted=True))
    write(tmp_path / "raw" / "gpu-node-3" / "2026-09-18T08", "raw-4242.jsonl",
          raw_output(7, started="2026-09-18T08:00:00.000001+00:00", finished="2026-09-18T08:00:01+00:00"))
    write(tmp_path / "perf", file_name("gen", "gpu-node-2", 4242), worker_line(7, timing(5.0)))
    run = tj("ingest", tmp_path, "--json")
    assert run.code == 0, run.err
    assert run.json()["sources"]["trtllm_hook"] == {"files": 2, "records": 3, "quarantined": 0}

    sevens = tj("lookup", "7", "--json").json()["requests"]
    assert len(sevens) == 2
    on_node_2 = next(r for r in sevens if r["workers"][0]["worker"] == "gpu-node-2:4242")
    assert sorted(r["kind"] for r in on_node_2["records"]) == ["hook", "perf"]
    assert on_node_2["ids"]["disagg_request_id"] == [str(DISAGG_A)]
    hook = next(r for r in on_node_2["records"] if r["kind"] == "hook")
    assert hook["time"] == "2026-09-18T07:12:33.101010Z"
    assert hook["summary"] == "raw output · status=complete · 1466.9 ms"

    by_disagg = tj("lookup", str(DISAGG_A + 1), "--json").json()["requests"]
    assert [r["records"][0]["summary"].split(" · ")[:2] for r in by_disagg] == [["raw output", "status=aborted"]]
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM records WHERE attrs LIKE '%not stored%'").fetchone()[0] == 0
