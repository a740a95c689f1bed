"""TensorRT-LLM text logs read in bulk (collector/bulk.py with trtllm_log.BULK) store what reading
every line with trtllm_log.LineParser stores, table for table: on the lines of test_trtllm_log.py
(built as TensorRT-LLM's code writes them; TensorRT-LLM cannot run here), and on the same files
with random lines mutated into every kind of line the bulk SQL must read as the parser does or
leave to it (odd times, ranks, servers and digits, colors, launcher labels, NUL bytes, bad UTF-8,
blank lines, untimed lines after lines the parser reads), cut into many pieces and stages, in UTC
and in a fixed zone."""

from __future__ import annotations

import random

import pytest

from tracejoin.collector.ingest import _bulk_settings
from tracejoin.collector.sources import trtllm_log

from .bulk_alike import assert_same, ingest_both_ways
from .bulk_alike import write_files as write
from .test_trtllm_log import ROUTER_LOG, WORKER_LOG

# Lines of each kind the bulk path must read as the parser does, or leave to it.
LINES = [
    b"",
    b"   ",
    b"\x0b",
    b"\t \r",
    b"plain text with no time",
    b"Traceback (most recent call last):",
    b'  File "/app/x.py", line 3, in f',
    b"[TensorRT-LLM][WARNING] [RANK 12] kv cache low",
    b"[TensorRT-LLM] TensorRT-LLM version: 1.1.0",
    b"[TensorRT-LLM][INFO]",
    b"[07/09/2025-23:07:55] [TRT-LLM] [RANK 3] [E] boom",
    b"[07/09/2025-23:07:55] [TRT-LLM] [MPI_Rank 007] [W] zero-padded rank",
    b"[07/09/2025-23:07:55] [TRT-LLM] [E] [executor] [RANK 3] a module's tag, the rank after it",
    b"[07/09/2025-23:07:55] [TRT-LLM] [I] [serve.openai_server] a module's tag alone",
    b"[07/09/2025-23:07:55] [TRT-LLM] [W] [RANK 4] the rank after the severity",
    b"[07/09/2025-23:07:55] [TRT-LLM] [I] [not a tag] a bracket with a space is the message's",
    b"[07/09/2025-23:07:55] [TRT-LLM] [RANK 123456789012345678901] [I] rank beyond 64 bits",
    b"[07/09/2025-23:07:55] [TRT-LLM] [X] unknown letter",
    b"[07/09/2025-23:07:55] [TRT-LLM][I]no spaces",
    b"[07/09/2025-23:07:55]no space after the time",
    b"[02/30/2025-23:07:55] [TRT-LLM] [I] no such day",
    b"[07/09/2025-24:00:00] [TRT-LLM] [I] hour 24",
    b"[07/09/2025-23:59:60] [TRT-LLM] [I] a leap second",
    b"[01/01/0000-00:00:00] [TRT-LLM] [I] year zero",
    b"[01/01/1600-00:00:00] [TRT-LLM] [I] before 1678",
    b"[12/31/9999-23:59:59] [TRT-LLM] [I] after 2262",
    b"[04/11/2262-23:47:16] [TRT-LLM] [I] the last 64-bit second",
    b"[07/09/2025-23:07:5] [TRT-LLM] [I] short second",
    "[07/09/2025-23:07:5\u0665] [TRT-LLM] [I] an Arabic-Indic digit".encode(),
    " \u0663: [07/09/2025-23:07:55] [TRT-LLM] [I] a launcher label in other digits".encode(),
    b" 12: [07/09/2025-23:07:56] [TRT-LLM] [I] srun label",
    b"[3,1]<stdout>:[07/09/2025-23:07:56] [TRT-LLM] [I] mpirun label",
    b"\x1b[32m[07/09/2025-23:07:57]\x1b[0m [TRT-LLM] [I] colored",
    b"\x1b[1;31mERROR\x1b[0m:    uvicorn error",
    b"WARNING:root:stdlib warning",
    b"CRITICAL:\x0b\x0cspaces",
    b"INFO:     127.0.0.1:52840 - \"GET /health HTTP/1.1\" 200 OK",
    b"[07/09/2025-23:07:58] [TRT-LLM] [I] Address(host='h', port=1) is disconnected, abort 77",
    b"[07/09/2025-23:07:58] Post-processor hook failed for request 78; failing the request closed.",
    b"ERROR:x:Failed to abort request 79",
    b"[07/09/2025-23:07:58] [TRT-LLM] [E] disaggregated_params is not set in the response for request 80",
    b"[07/09/2025-23:07:58] [TRT-LLM] [V] Sending ServerRole.CONTEXT request 81 to http://10.0.0.5:8001/v1/x",
    b"[07/09/2025-23:07:58] [TRT-LLM] [V] Sending 1 request 82 to https://10.0.0.6:8002/v1/x",
    b"[07/09/2025-23:07:58] [TRT-LLM] [V] Sending context request None to 10.0.0.5:8001",
    b'[07/09/2025-23:07:58] [TRT-LLM] [V] Sending 0 request 83 to http://a"b\\c:1/x',
    "[07/09/2025-23:07:58] [TRT-LLM] [V] Sending 0 request 84 to http://h\u00f6st:1/x".encode(),
    b"[07/09/2025-23:07:58] [TRT-LLM] [V] Sending 0 request 85 to http://ctl\x01:1/x",
    b"[07/09/2025-23:07:58] [TRT-LLM] [V] Send\x1b[0ming 0 request 86 to http://10.0.0.9:8001/x",
    b"[07/09/2025-23:07:58] [TRT-LLM] [I] \x00 a NUL byte",
    b"[07/09/2025-23:07:58] [TRT-LLM] [I] bad \xc3 utf-8",
    "[07/09/2025-23:07:58] [TRT-LLM] [I] caf\u00e9 \u20ac e\u0301".encode(),
    b"[07/09/2025-23:07:58] [TRT-LLM] [I] carriage return\r\r",
    b"[07/09/2025-23:07:58] [TRT-LLM] [I] long " + "\u00e9".encode() * 2100,
    b"[07/09/2025-23:07:59] [TRT-LLM] [E] Traceback (most recent call last):",
    b"RuntimeError: boom",
    b"INFO:     Sending ServerRole.CONTEXT request 87 to http://10.0.0.5:8001/v1/x",
    b"INFO: a stdlib line naming bootstrap_room=7418329021459911432",
    b"WARN: not one of the levels read in bulk",
]


def sample_lines() -> dict[str, list[bytes]]:
    worker = [line.encode() for line in WORKER_LOG]
    return {
        "gpu-node-1-4242/trtllm-serve.log": worker * 4,
        "10.0.0.1_8000/disagg.log": [b"INFO:     Started server process [679]"]
        + [line.encode() for line in ROUTER_LOG] * 3 + worker,
    }


def mutated(lines: list[bytes], rng: random.Random, share: float) -> list[bytes]:
    """Lines replaced by, or followed by, lines of LINES; runs of untimed lines after them."""
    out = []
    for line in lines:
        if rng.random() >= share:
            out.append(line)
            continue
        kind = rng.randrange(3)
        if kind == 0:
            out.append(rng.choice(LINES))
        elif kind == 1:
            out += [line, rng.choice(LINES), *rng.sample(LINES[4:9], 2)]
        else:
            out.append(line[: rng.randrange(1, len(line) + 1)])
    return out


@pytest.fixture(params=["utc", "+05:30"])
def zone(request, monkeypatch):
    if request.param == "utc":
        monkeypatch.delenv(trtllm_log.TZ_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(trtllm_log.TZ_VARIABLE, request.param)
    return request.param


@pytest.mark.parametrize("small", [False, True], ids=["one stage", "many pieces"])
def test_the_sample_is_stored_alike(tmp_path, monkeypatch, zone, small):
    files = write(tmp_path / "logs", sample_lines())
    in_bulk, by_line = ingest_both_ways(tmp_path, files, monkeypatch, trtllm_log, small=small)
    assert len(by_line["records"]) == sum(len(lines) for lines in sample_lines().values())
    assert any(kind == "ctx_request_id" for _, kind, _, _ in by_line["record_ids"])
    assert_same(in_bulk, by_line)


@pytest.mark.parametrize("seed", range(10))
def test_mutated_lines_are_stored_and_quarantined_alike(tmp_path, monkeypatch, zone, seed):
    rng = random.Random(seed)
    files = {name: mutated(lines, rng, 0.3 if seed % 2 else 0.08) for name, lines in sample_lines().items()}
    paths = write(tmp_path / "logs", files, last_newline=rng.random() < 0.7)
    in_bulk, by_line = ingest_both_ways(tmp_path, paths, monkeypatch, trtllm_log, small=seed % 3 == 0)
    assert_same(in_bulk, by_line)


def test_every_kind_of_line_alone_is_stored_alike(tmp_path, monkeypatch, zone):
    """Each line of LINES after a timed line, then after an untimed one."""
    lines = []
    for line in LINES:
        lines += [WORKER_LOG[1].encode(), line, WORKER_LOG[2].encode(), b"untimed", line, b"untimed after"]
    paths = write(tmp_path / "logs", {"h_1/kinds.log": lines})
    in_bulk, by_line = ingest_both_ways(tmp_path, paths, monkeypatch, trtllm_log, small=False)
    assert by_line["quarantine"], "some lines are quarantined"
    assert_same(in_bulk, by_line)


def test_a_zone_with_daylight_saving_is_read_line_by_line(monkeypatch):
    """DuckDB's zone rules may not be Python's: such a zone's files are the parser's alone."""
    monkeypatch.setenv(trtllm_log.TZ_VARIABLE, "Europe/Berlin")
    assert _bulk_settings(trtllm_log, trtllm_log.LineParser("/l/x.log")) is None
    monkeypatch.setenv(trtllm_log.TZ_VARIABLE, "-0530")
    assert _bulk_settings(trtllm_log, trtllm_log.LineParser("/l/x.log")) == {"offset_s": str(-(5 * 3600 + 30 * 60))}
