"""TensorRT-LLM text logs (workers and the disaggregated server), read by sources/trtllm_log.py.

TensorRT-LLM cannot run here (no GPU, no wheel): the lines are built as its code writes them —
`tensorrt_llm/logger.py`'s `[MM/DD/YYYY-HH:MM:SS]
[TRT-LLM] [I] msg` (with `[RANK N]`, older `[MPI_Rank N]`), stdlib loggers through the same root
handler, the C++ runtime's `[TensorRT-LLM][INFO]`, uvicorn — with the messages of the id-bearing
lines as TensorRT-LLM's code formats them (`openai_server.py`, `openai_client.py`, and the hook's
`postprocessor_hook.py`).
"""

from __future__ import annotations

import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.collector.sources import detect, dynamo_jsonl, text_log, trtllm_log
from tracejoin.collector.sources.parsing import Unparseable

from .test_trtllm_perf_legacy import CTX_REQUEST_ID, legacy_disagg_record
from .test_trtllm_perf_metrics import DISAGG_A, compact, file_name, timing, worker_line, write

T0 = 1_752_102_469_000_000_000  # 2025-07-09T23:07:49Z

WORKER_LOG = [
    "[TensorRT-LLM] TensorRT-LLM version: 1.1.0rc2.post2",
    "[07/09/2025-23:07:49] [TRT-LLM] [I] Starting TensorRT-LLM init.",
    "[TensorRT-LLM][INFO] Set logger level to INFO",
    "[07/09/2025-23:07:50] [TRT-LLM] [RANK 0] [I] iter = 5559, host_step_time = 50.5ms, num_scheduled_requests: 3",
    "[07/09/2025-23:07:51] [TRT-LLM] [MPI_Rank 1] [W] slow step",
    "INFO:     10.0.0.1:41234 - \"POST /v1/chat/completions HTTP/1.1\" 200 OK",
    "[07/09/2025-23:07:52] [TRT-LLM] [I] Address(host='10.0.0.1', port=41240) is disconnected, abort 1",
    "[07/09/2025-23:07:53] Post-processor hook failed for request 2; failing the request closed.",
    "Traceback (most recent call last):",
    '  File "/app/tensorrt_llm/executor/postprocessor_hook.py", line 228, in apply_post_processor_hook',
    "ValueError: bad chunk",
    "[07/09/2025-23:07:54] [TRT-LLM] [E] Error in harmony chat completion: "
    f"disaggregated_params is not set in the response for request {DISAGG_A}",
]

ROUTER_LOG = [
    "[07/09/2025-23:07:49] [TRT-LLM] [V] Sending ServerRole.CONTEXT request "
    f"{CTX_REQUEST_ID} to http://10.0.0.5:8001/v1/chat/completions",
    f"[07/09/2025-23:07:49] [TRT-LLM] [V] Sending ServerRole.GENERATION request {CTX_REQUEST_ID} "
    "to http://10.0.0.6:8002/v1/chat/completions",
    "[07/09/2025-23:07:50] [TRT-LLM] [V] Sending ServerRole.CONTEXT request None to http://10.0.0.5:8001/v1/completions",
    # Python 3.11 and later format the IntEnum ServerRole as its value.
    "[07/09/2025-23:07:51] [TRT-LLM] [V] Sending 0 request 1099511627812 to http://10.0.0.7:8001/v1/completions",
]


def parse_all(path: str, lines: list[str]):
    parser = trtllm_log.LineParser(path)
    return parser, [r for line in lines for r in parser.parse(line.encode())]


def test_every_line_is_a_record_and_untimed_lines_take_the_time_before_them():
    parser, records = parse_all("/logs/gpu-node-1-4242/trtllm-serve.log", WORKER_LOG)
    assert parser.worker == "gpu-node-1:4242"
    assert len(records) == len(WORKER_LOG)
    assert [r.time_ns for r in records] == [
        None, T0, T0, T0 + 1e9, T0 + 2e9, T0 + 2e9, T0 + 3e9, T0 + 4e9, T0 + 4e9, T0 + 4e9, T0 + 4e9, T0 + 5e9]
    assert [r.level for r in records[:7]] == [None, "INFO", "INFO", "INFO", "WARNING", "INFO", "INFO"]
    assert records[1].name == "Starting TensorRT-LLM init."
    assert records[3].attrs == {"rank": 0, "logger": "TRT-LLM"} and records[4].attrs["rank"] == 1
    assert records[2].attrs == {"logger": "TensorRT-LLM"} and records[2].name == "Set logger level to INFO"
    assert records[10].name == "ValueError: bad chunk"


def test_id_bearing_lines_carry_their_ids():
    _, records = parse_all("/logs/gpu-node-1-4242/trtllm-serve.log", WORKER_LOG)
    ids = {i: r.ids for i, r in enumerate(records) if r.ids}
    assert ids == {
        6: [("engine_request_id", "1", "gpu-node-1:4242")],
        7: [("engine_request_id", "2", "gpu-node-1:4242")],
        11: [("disagg_request_id", str(DISAGG_A), None)],
    }
    assert records[11].level == "ERROR"


def test_the_disaggregated_server_names_the_ctx_request_on_the_server_it_sent_it_to():
    parser, records = parse_all("/logs/10.0.0.1_8000/disagg.log", ROUTER_LOG)
    assert parser.worker == "10.0.0.1:8000" and parser.role == "router"
    assert records[0].ids == [("ctx_request_id", str(CTX_REQUEST_ID), "10.0.0.5:8001")]
    assert records[0].attrs["ctx_server"] == "10.0.0.5:8001" and records[0].level == "DEBUG"
    assert records[1].ids == [("ctx_request_id", str(CTX_REQUEST_ID), None)]  # the gen server's: a label
    assert records[1].attrs["gen_server"] == "10.0.0.6:8002"
    assert records[2].ids == []
    assert records[3].ids == [("ctx_request_id", "1099511627812", "10.0.0.7:8001")]


def test_launcher_labels_colors_and_stdlib_formats_are_read():
    _, records = parse_all("/logs/h_8001/x.log", [
        " 0: [12/04/2025-18:38:28] [TRT-LLM] [RANK 0] [I] moe_load_balancer finalizing model...",
        "[1,5]<stderr>:[12/04/2025-18:38:29] [TRT-LLM] [RANK 5] [I] ready",
        "\x1b[32mINFO\x1b[0m:     Started server process [4242]",
        "ERROR:tensorrt_llm.executor.postprocessor_hook:Post-processor hook failed for request 9; failing the request closed.",
    ])
    assert [r.attrs and r.attrs.get("rank") for r in records[:2]] == [0, 5]
    assert records[1].name == "ready"
    assert records[2].level == "INFO" and records[2].name == "Started server process [4242]"
    assert records[3].level == "ERROR" and records[3].ids == [("engine_request_id", "9", "h:8001")]
    assert records[3].time_ns == records[1].time_ns


@pytest.mark.parametrize("zone, expected", [
    (None, T0),
    ("+02:00", T0 - 2 * 3600 * 10**9),
    ("-0530", T0 + 330 * 60 * 10**9),
    ("Europe/Berlin", T0 - 2 * 3600 * 10**9),  # summer time in July
])
def test_local_times_are_utc_unless_the_zone_is_given(monkeypatch, zone, expected):
    if zone is None:
        monkeypatch.delenv(trtllm_log.TZ_VARIABLE, raising=False)
    else:
        monkeypatch.setenv(trtllm_log.TZ_VARIABLE, zone)
    [record] = trtllm_log.LineParser("/l/x.log").parse(WORKER_LOG[1].encode())
    assert record.time_ns == expected


def test_an_unreadable_zone_or_line_says_why(monkeypatch):
    """A line the format cannot read says why (ingest then stores it as text, `unread`); a line
    that is not text cannot be stored at all; one that is not UTF-8 is read with U+FFFD."""
    monkeypatch.setenv(trtllm_log.TZ_VARIABLE, "Mars/Olympus")
    parser = trtllm_log.LineParser("/l/x.log")
    with pytest.raises(Unparseable, match="TRACEJOIN_TRTLLM_TZ='Mars/Olympus' is neither"):
        parser.parse(WORKER_LOG[1].encode())
    [unread] = parser.unread(WORKER_LOG[1].encode(), "the zone")
    assert unread.time_ns is None and unread.attrs["unread"] == "the zone" and unread.name == WORKER_LOG[1]
    assert parser.parse(b"no time here")[0].name == "no time here"
    monkeypatch.delenv(trtllm_log.TZ_VARIABLE)
    parser = trtllm_log.LineParser("/l/x.log")
    with pytest.raises(Unparseable, match="unreadable time"):
        parser.parse(b"[13/45/2025-23:07:49] [TRT-LLM] [I] x")
    with pytest.raises(Unparseable, match="binary"):
        parser.parse(b"[07/09/2025-23:07:49] \x00\x01")
    [record] = parser.parse(b"[07/09/2025-23:07:49] \xff\xfe")
    assert record.name == "\ufffd\ufffd" and "UTF-8" in record.attrs["unread"]


@pytest.mark.parametrize("path, worker", [
    ("/logs/gpu-node-1:8001/out.log", "gpu-node-1:8001"),
    ("/logs/gpu-node-1_8001/out.log", "gpu-node-1:8001"),
    ("/logs/gpu-node-1-4242/out.log", "gpu-node-1:4242"),
    ("/logs/2025-07-09/ctx0.log", "file:ctx0"),  # a dated folder is not host-pid
    ("/logs/ctx/10.0.0.5_8001.log", "10.0.0.5:8001"),
])
def test_the_worker_is_named_by_the_folder_or_else_the_file(path, worker):
    assert trtllm_log.LineParser(path).worker == worker


def test_sniffing_leaves_dynamo_captures_to_dynamo(tmp_path):
    assert detect("x.log", [line.encode() for line in WORKER_LOG]) is trtllm_log
    assert detect("x.log", [b" 0: [12/04/2025-18:38:28] [TRT-LLM] [RANK 0] [I] x"]) is trtllm_log
    files = DynamoSample().write(tmp_path / "dyn")
    head = files["decode"].read_bytes().splitlines()[:3]
    mixed = head + [line.encode() for line in WORKER_LOG[:3]]
    assert detect("decode.stderr.jsonl", mixed) is dynamo_jsonl
    assert detect("notes.txt", [b"just some notes", b"[not a time] nothing"]) is text_log  # any other text


def test_log_lines_join_the_records_of_their_process_and_of_the_ctx_server(tj, tmp_path):
    """The worker's log sits in a host-pid folder, so its abort line meets the engine id of its
    perf-metrics file; the disaggregated server's DEBUG line meets the ctx request id its legacy
    perf record scopes to the same ctx server."""
    write(tmp_path / "logs" / "gpu-node-1-4242", "trtllm-serve.log", *(line.encode() for line in WORKER_LOG))
    write(tmp_path / "perf", file_name("ctx", "gpu-node-1", 4242),
          worker_line(1, timing(5.0, e2e=0.043), ctx_request_id=1, disagg_request_id=DISAGG_A))
    write(tmp_path / "logs" / "10.0.0.1_8000", "disagg.log", *(line.encode() for line in ROUTER_LOG))
    write(tmp_path / "polls" / "10.0.0.1_8000", "perf_metrics.jsonl",
          compact([legacy_disagg_record(17, 88, CTX_REQUEST_ID, 81234.5)]))
    run = tj("ingest", tmp_path, "--json")
    assert run.code == 0, run.err
    assert run.json()["sources"]["trtllm_log"]["records"] == len(WORKER_LOG) + len(ROUTER_LOG)

    # The abort line meets the perf record by engine id; the error line naming the disagg id too.
    [aborted] = tj("lookup", "1", "--json").json()["requests"]
    assert sorted(r["source"] for r in aborted["records"]) == ["perf_metrics_jsonl", "trtllm_log", "trtllm_log"]
    assert [(r["time"], r["summary"].split(" · ")[-1]) for r in aborted["records"] if r["source"] == "trtllm_log"] == [
        ("2025-07-09T23:07:52Z", "Address(host='10.0.0.1', port=41240) is disconnected, abort 1"),
        ("2025-07-09T23:07:54Z", "Error in harmony chat completion: disaggregated_params is not set "
                                        f"in the response for request {DISAGG_A}"),
    ]
    assert aborted["ids"]["disagg_request_id"] == [str(DISAGG_A)]

    [disagg] = tj("lookup", "88", "--json").json()["requests"]
    assert sorted((r["source"], r["role"]) for r in disagg["records"]) == [
        ("perf_metrics_legacy", "router"), ("trtllm_log", "router")]
    assert "Sending ServerRole.CONTEXT" in next(r["summary"] for r in disagg["records"] if r["source"] == "trtllm_log")


def test_the_user_names_the_process_of_a_log_whose_folder_does_not(tj, tmp_path):
    """`ingest --worker`: a log in a folder named after nothing joins its process's perf records."""
    write(tmp_path / "logs", "worker.log", *(line.encode() for line in WORKER_LOG))
    write(tmp_path / "perf", file_name("ctx", "gpu-node-1", 4242),
          worker_line(1, timing(5.0, e2e=0.043), ctx_request_id=1, disagg_request_id=DISAGG_A))
    assert tj("ingest", tmp_path / "perf").code == 0
    assert tj("ingest", tmp_path / "logs", "--worker", "gpu-node-1:4242").code == 0
    [aborted] = tj("lookup", "1", "--json").json()["requests"]
    assert {r["source"] for r in aborted["records"]} == {"perf_metrics_jsonl", "trtllm_log"}
    assert {w["worker"] for w in aborted["workers"]} == {"gpu-node-1:4242"}


@pytest.mark.parametrize("line, level, rank, module, message", [
    ("[07/09/2025-23:07:55] [TRT-LLM] [RANK 3] [E] boom", "ERROR", 3, None, "boom"),
    ("[07/09/2025-23:07:55] [TRT-LLM] [E] [executor] [RANK 3] boom", "ERROR", 3, "executor", "boom"),
    ("[07/09/2025-23:07:55] [TRT-LLM] [W] [serve.openai_server] slow", "WARNING", None, "serve.openai_server", "slow"),
    ("[07/09/2025-23:07:55] [TRT-LLM] [I] [RANK 4] ready", "INFO", 4, None, "ready"),
])
def test_the_rank_before_or_after_the_severity_and_a_modules_tag(line, level, rank, module, message):
    """Older releases write `[TRT-LLM] [RANK n] [E]`, the newest `tensorrt_llm/logger.py` a module's
    tag after the severity and the rank after that: `[TRT-LLM] [E] [module] [RANK n]`."""
    [record] = trtllm_log.LineParser("/l/x.log").parse(line.encode())
    assert (record.level, record.attrs.get("rank"), record.attrs.get("module"), record.name) == (
        level, rank, module, message)
