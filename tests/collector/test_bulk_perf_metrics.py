"""TensorRT-LLM perf-metrics JSONL read in bulk (collector/bulk.py with perf_metrics_jsonl.BULK,
DuckDB's JSON reader) stores what reading every line with perf_metrics_jsonl.LineParser stores,
table for table: on records built as TensorRT-LLM writes them (test_trtllm_perf_metrics.py;
TensorRT-LLM cannot run here), and on the same files with random lines replaced by every kind of
line the bulk SQL must read as the parser does or leave to it (values of other types, NaN, keys
twice, ids the parser refuses, durations at a half, step metrics, lines that are not JSON), cut
into many pieces and stages; and files whose role their records decide come to the same role."""

from __future__ import annotations

import json
import random

import pytest

from tracejoin.collector import bulk
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.sources import perf_metrics_jsonl
from tracejoin.collector.store import open_store

from .bulk_alike import assert_same, by_position, ingest_both_ways, killed_and_read_whole
from .bulk_alike import write_files as write
from .test_trtllm_perf_metrics import DISAGG_A, DISAGG_B, compact, disagg_line, file_name, timing, worker_line


def worker(i: int, **kw) -> dict:
    return json.loads(worker_line(i, timing(100.0 + i, kv=(0.05, 0.06) if i % 2 else None),
                                  ctx_request_id=i, disagg_request_id=DISAGG_A + i, **kw))


def edited(obj: dict, path: tuple, value) -> bytes:
    """The record with the value at `path` set (or deleted, for ...)."""
    obj = json.loads(json.dumps(obj))
    *parents, last = path
    node = obj
    for key in parents:
        node = node[key]
    if value is ...:
        node.pop(last, None)
    else:
        node[last] = value
    return json.dumps(obj, separators=(",", ":")).encode()


T = ("perf_metrics", "timing_metrics")
W = worker(7)
D = json.loads(disagg_line(DISAGG_B, 200.0))
AGG = json.loads(worker_line(9, timing(300.0)))

# Lines of each kind the bulk path must read as the parser does, or leave to it.
LINES = [
    b"", b"   ", b"\x0b", b"garbage", b"{", b"[1]", b"5", b'"x"', b"{}",
    compact(W), compact(D), compact(AGG), compact(W) + b"\r", b"  " + compact(W) + b" \t",
    edited(W, T + ("arrival_time",), "100.5"), edited(W, T + ("arrival_time",), True),
    edited(W, T + ("arrival_time",), None), edited(W, T + ("arrival_time",), 0), edited(W, T + ("arrival_time",), 0.0),
    edited(W, T + ("first_token_time",), 2**53 + 1), edited(W, T + ("first_token_time",), 90),
    edited(W, T + ("last_token_time",), 1.0), edited(W, T + ("last_token_time",), {"a": 1}),
    edited(W, T + ("first_scheduled_time",), 100.0000005),  # queue of 0.0005 ms: a half
    edited(W, T + ("first_scheduled_time",), 100.0001234), edited(W, T + ("last_token_time",), 1e17),
    edited(W, T, None), edited(W, T, {}), edited(W, T, 5), edited(W, ("perf_metrics",), None),
    edited(W, ("perf_metrics",), ...), edited(W, ("perf_metrics",), {}), edited(W, ("perf_metrics",), "x"),
    edited(W, ("request_id",), "7"), edited(W, ("request_id",), "chatcmpl-abc-0123abcd"), edited(W, ("request_id",), 7.5),
    edited(W, ("request_id",), True), edited(W, ("request_id",), None), edited(W, ("request_id",), ...),
    edited(W, ("request_id",), 2**64 + 5), edited(W, ("request_id",), -3), edited(W, ("request_id",), ""),
    edited(W, ("status",), 5), edited(W, ("status",), False), edited(W, ("status",), None), edited(W, ("status",), ""),
    edited(W, ("disagg_request_id",), ""), edited(W, ("disagg_request_id",), "x"), edited(W, ("disagg_request_id",), 1.5),
    edited(W, ("disagg_request_id",), None), edited(W, ("ctx_request_id",), None), edited(W, ("ctx_request_id",), [1]),
    edited(json.loads(edited(W, ("ctx_request_id",), None)), ("disagg_request_id",), None),
    edited(W, ("time_breakdown_metrics",), {"step_metrics": [{"iter": 1}], "x": 1}),
    edited(W, ("time_breakdown_metrics",), None), edited(W, ("time_breakdown_metrics",), 5),
    edited(W, ("queue_ms",), 1.0), edited(W, ("process_start",), "x"), edited(W, ("ctx_server",), None),
    edited(W, ("note",), "ctx_server"), edited(W, ("note",), '"ctx_server": 1'), edited(W, ("note",), "caf\u00e9 \u20ac"),
    edited(W, ("note",), "a\u0000b"), compact(W)[:-1] + b',"deep":' + b"[" * 1100 + b"]" * 1100 + b"}",
    compact(W)[:-1] + b',"deep":' + b"[" * 900 + b"]" * 900 + b"}",
    compact(W)[:-1] + b',"request_id":8}', compact(W)[:-1] + b',"request\\u005fid":8}',
    compact(W).replace(b'"timing_metrics":{', b'"timing_metrics":{"arrival_time":1.0,'),
    compact(W).replace(b'"kv_cache_metrics":{', b'"kv_cache_metrics":{"num_reused_blocks":1,'),
    compact(W)[:-1] + b',"x":NaN}', compact(W)[:-1] + b',"x":-Infinity}', compact(W)[:-1] + b',}',
    compact(W)[:-1] + b',"x":1e400}', compact(W)[:-1] + b',"x":[1,]}', compact(W) + b" x",
    compact(W).replace(b'"request_id":7', b'"request_id":-0'), compact(W).replace(b'"request_id":7', b'"request_id": 7'),
    edited(D, ("ctx_server",), None), edited(D, ("ctx_server",), 5), edited(D, ("gen_server",), ...),
    edited(D, ("disagg_server_arrival_time",), "1"), edited(D, ("disagg_server_arrival_time",), 0),
    edited(D, ("disagg_ctx_dispatch_time",), 150.0), edited(D, ("ctx_perf_metrics",), None),
    edited(D, ("ctx_perf_metrics",), {}), edited(D, ("gen_perf_metrics",), None), edited(D, ("gen_perf_metrics",), 3),
    edited(D, ("ctx_perf_metrics", "request_id"), "None"), edited(D, ("ctx_perf_metrics", "request_id"), 17),
    edited(D, ("ctx_perf_metrics", "request_id"), str(DISAGG_B)), edited(D, ("gen_perf_metrics", "ctx_request_id"), 99),
    edited(D, ("disagg_request_id",), None),
    edited(json.loads(edited(D, ("disagg_request_id",), None)), ("ctx_perf_metrics", "request_id"), "None"),
    edited(D, ("gen_perf_metrics", "perf_metrics", "timing_metrics", "last_token_time"), None),
    edited(D, ("status",), 1), edited(D, ("ttft_ms",), 1),
    b'{"x":"' + b"\xc3" + b'"}', compact(W)[:-1] + b',"long":"' + b"x" * (1 << 20) + b'"}',
]


def sample() -> dict[str, list[bytes]]:
    """A ctx worker, a gen worker, a disaggregated server, a worker whose kind says no side (its
    records decide), and a renamed file."""
    return {
        file_name("ctx", "gpu-node-1", 11): [worker_line(i, timing(100.0 + i, e2e=0.06), ctx_request_id=i,
                                                         disagg_request_id=DISAGG_A + i) for i in range(40)],
        file_name("gen", "gpu-node-2", 22): [worker_line(i, timing(100.1 + i, kv=(0.05, 0.0625)), ctx_request_id=i,
                                                         disagg_request_id=DISAGG_A + i) for i in range(40)],
        file_name("disagg", "router", 33): [disagg_line(DISAGG_A + i, 99.9 + i) for i in range(40)],
        file_name("server", "gpu-node-3", 44): [worker_line(i, timing(100.0 + i, e2e=0.06 if i % 3 else 0.5),
                                                            ctx_request_id=i, disagg_request_id=DISAGG_A + i)
                                                for i in range(40)] + [compact(AGG)] * 3,
        "10.0.0.9_8002/perf.jsonl": [worker_line(i, timing(500.0 + i)) for i in range(40)],
    }


def staged(monkeypatch) -> list[tuple[int, int]]:
    """(lines staged, lines left to the parser) of each stage read from now on."""
    stages = []
    stage = bulk._stage

    def counted(con, pieces):
        unread, *rest = stage(con, pieces)
        stages.append((sum(p.lines for p in pieces), sum(map(len, unread.values()))))
        return (unread, *rest)

    monkeypatch.setattr(bulk, "_stage", counted)
    return stages


@pytest.mark.parametrize("small", [False, True], ids=["one stage", "many pieces"])
def test_the_sample_is_stored_alike(tmp_path, monkeypatch, small):
    files = write(tmp_path / "perf", sample())
    stages = staged(monkeypatch)
    in_bulk, by_line = ingest_both_ways(tmp_path, files, monkeypatch, perf_metrics_jsonl, small=small)
    assert len(by_line["records"]) == sum(len(lines) for lines in sample().values())
    lines, unread = map(sum, zip(*stages))
    assert lines == len(by_line["records"]) and unread == 0, "DuckDB reads every line of the sample"
    assert {row[-2] for row in by_line["origins"]} >= {"ctx", "gen", "router"}  # role, before clock
    assert_same(in_bulk, by_line)


@pytest.mark.parametrize("seed", range(8))
def test_mutated_lines_are_stored_and_quarantined_alike(tmp_path, monkeypatch, seed):
    rng = random.Random(seed)
    share = 0.3 if seed % 2 else 0.05
    files = {name: [rng.choice(LINES) if rng.random() < share else line for line in lines]
             for name, lines in sample().items()}
    paths = write(tmp_path / "perf", files, last_newline=rng.random() < 0.7)
    in_bulk, by_line = ingest_both_ways(tmp_path, paths, monkeypatch, perf_metrics_jsonl, small=seed % 3 == 0)
    assert_same(in_bulk, by_line)


def test_every_kind_of_line_alone_is_stored_alike(tmp_path, monkeypatch):
    """Each line of LINES between two good ones, in a file of each kind: the ones that stop DuckDB's
    reader (a key twice, a field of another shape) make their stage the parser's, the others not."""
    paths = []
    for n, line in enumerate(LINES):
        good = worker_line(n, timing(100.0 + n), ctx_request_id=n, disagg_request_id=DISAGG_A + n)
        paths += write(tmp_path / f"perf{n}", {file_name("gen", "h", n): [good, line, good]})
    in_bulk, by_line = ingest_both_ways(tmp_path, paths, monkeypatch, perf_metrics_jsonl, small=False)
    assert by_line["quarantine"], "some lines are quarantined"
    assert_same(in_bulk, by_line)


def test_a_file_whose_records_tie_takes_the_disaggregated_role_whatever_their_order(tmp_path):
    """Two records that look aggregated and two that look like generation: `gen`, read either way."""
    gen = [worker_line(i, timing(10.0 + i), ctx_request_id=i, disagg_request_id=DISAGG_A + i) for i in range(2)]
    agg = [worker_line(i + 2, timing(20.0 + i)) for i in range(2)]
    for order in (agg + gen, gen + agg):
        parser = perf_metrics_jsonl.LineParser(file_name("server", "h", 1))
        for line in order:
            parser.parse(line)
        assert parser.role == "gen"


def test_kill_9_at_any_moment_of_a_bulk_ingest_loses_and_repeats_nothing(tmp_path, monkeypatch):
    """Each stage, with the positions its files reach and the roles their records voted for, is one
    transaction: killed at any moment and run again, the ingest of several files in shared stages
    ends with the store that reading every line once gives."""
    files = {name: lines * 25 for name, lines in sample().items()}
    paths = write(tmp_path / "perf", files)
    db, by_line_db, committed_at_kills = killed_and_read_whole(tmp_path, monkeypatch, perf_metrics_jsonl, paths,
                                                               seed=7, kills=8)
    lines = sum(len(v) for v in files.values())
    assert any(0 < n < lines for n in committed_at_kills), committed_at_kills
    assert by_position(db) == by_position(by_line_db)
    roles = "SELECT path, worker, role FROM origins ORDER BY path"
    with open_store(db, read_only=True) as a, open_store(by_line_db, read_only=True) as b:
        assert a.con.execute(roles).fetchall() == b.con.execute(roles).fetchall()


@pytest.mark.parametrize("in_bulk", [True, False], ids=["in bulk", "line by line"])
def test_a_file_read_as_it_grows_takes_the_role_its_whole_records_give(tmp_path, monkeypatch, in_bulk):
    """Thirty records that look aggregated, then twenty that look like generation: the file's role
    is `agg` whether it is read whole or read on after each part was written (as a collector tails
    it), since the votes are kept with the file's position."""
    agg = [worker_line(i, timing(10.0 + i)) for i in range(30)]
    gen = [worker_line(30 + i, timing(50.0 + i), ctx_request_id=i, disagg_request_id=DISAGG_A + i) for i in range(20)]
    name = file_name("server", "gpu-node-4", 55)
    if not in_bulk:
        monkeypatch.setattr(perf_metrics_jsonl, "BULK", None)

    def role(db) -> str:
        with open_store(db, read_only=True) as store:
            return store.con.execute("SELECT role FROM origins").fetchone()[0]

    [whole] = write(tmp_path / "whole", {name: agg + gen})
    with open_store(tmp_path / "whole.duckdb") as store:
        Ingester(store).ingest_paths([whole])
    [grown] = write(tmp_path / "grown", {name: agg})
    for part in ([], gen):
        with open(grown, "ab") as f:
            f.write(b"".join(line + b"\n" for line in part))
        with open_store(tmp_path / "grown.duckdb") as store:
            Ingester(store).ingest_paths([grown])
    assert role(tmp_path / "whole.duckdb") == role(tmp_path / "grown.duckdb") == "agg"
