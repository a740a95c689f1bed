"""Logs as deployments write them, not as one version's format strings say: wrappers before the
engine's line, every version of each engine, several processes and other tools in one stream, ids
as they appear, errors tied to a request by their text, and times of every precision. Never worse
than grep: a lookup shows every line that holds the id as a whole word, and then what the joins add.

The lines are written here in the shapes users of vLLM (0.4 to 0.33 and its Rust frontend),
SGLang, TensorRT-LLM and Dynamo pasted in public issues, with values of our own; none of those
engines runs here."""

from __future__ import annotations

import os
from datetime import datetime, timezone

import pytest

from tracejoin.collector import local_time

UUID = "6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11"


@pytest.fixture(autouse=True)
def no_zone(monkeypatch):
    monkeypatch.delenv(local_time.VARIABLE, raising=False)


def write(path, lines: list[str], modified=datetime(2026, 3, 9, tzinfo=timezone.utc)) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(("\n".join(lines) + "\n").encode())
    ns = int(modified.timestamp()) * 10**9
    os.utime(path, ns=(ns, ns))
    return str(path)


def shown(tj, query: str) -> tuple[list[str], dict]:
    """The text of every line a lookup shows (each record's name and attrs), and its one request."""
    answer = tj("lookup", query, "--json", "--limit", "0").json()
    assert answer["matched"] >= 1, f"{query} not found"
    texts = [f"{r['name']} {r['attrs']}" for q in answer["requests"] for r in q["records"]]
    return texts, answer["requests"][0]


def grep(lines: list[str], query: str) -> list[str]:
    return [line for line in lines if query in line]


# -- 1. wrappers ------------------------------------------------------------------------------------

WRAPPED = [
    "2026-03-02T08:14:51.402118733Z stdout F (APIServer pid=1) INFO 03-02 08:14:51 [logger.py:39] "
    "Received request chatcmpl-4b1f0c2d9e8a7b6c: params: SamplingParams(n=1), lora_request: None.",
    "[pod/vllm-decode-0/vllm] (EngineCore_DP0 pid=7) INFO 03-02 08:14:52 [core.py:270] "
    "Added request chatcmpl-4b1f0c2d9e8a7b6c-a1b2c3d4.   ",
    "vllm-decode-1  | [2mINFO 03-02 08:14:53 [logger.py:39] Finished request chatcmpl-4b1f0c2d9e8a7b6c.[0m",
    "Mar 02 08:14:54 gpu-node-3 vllm[4182]: \x1b[31mERROR 03-02 08:14:54 [serving.py:12] "
    "chatcmpl-4b1f0c2d9e8a7b6c failed\x1b[0m\r",
    "1: [03/02/2026-08:14:55] [TRT-LLM] [E] Error in disagg_request_id=537104838928187",
]


def test_wrapped_lines_are_read_with_the_wrappers_fields(tj, tmp_path):
    log = write(tmp_path / "pods.log", WRAPPED)
    assert tj("ingest", log).code == 0
    texts, request = shown(tj, "chatcmpl-4b1f0c2d9e8a7b6c")
    assert len(texts) == len(grep(WRAPPED, "chatcmpl-4b1f0c2d9e8a7b6c")) == 4
    by_name = {r["name"].split("chatcmpl")[0].strip(): r for r in request["records"]}
    received = by_name["Received request"]
    # the kubelet's UTC nanoseconds over the line's own local second, and what it was read from
    assert received["time"] == "2026-03-02T08:14:51.402118Z"
    assert received["attrs"]["time_from"] == "kubelet" and received["attrs"]["wrapper"]["stream"] == "stdout"
    # the pod, the compose service, the journald unit as the worker where the line names none
    assert by_name["Added request"]["worker"].startswith("vllm-decode-0")
    assert by_name["Finished request"]["worker"] == "vllm-decode-1"
    assert by_name[""]["worker"] == "gpu-node-3/vllm[4182]" and by_name[""]["level"] == "ERROR"
    assert request["first_error"]["text"] == "chatcmpl-4b1f0c2d9e8a7b6c failed"
    [trt] = tj("lookup", "537104838928187", "--json").json()["requests"]
    assert trt["records"][0]["attrs"]["wrapper"]["rank"] == 1


# -- 2. versions of each engine -----------------------------------------------------------------------

VLLM_VERSIONS = [
    # 0.4: chat-<32 hex>, the prompt in the line, `file:line]` without its bracket
    "INFO 03-02 08:14:51 async_llm_engine.py:508] Received request chat-0a1b2c3d4e5f60718293a4b5c6d7e8f9: "
    "prompt: 'the secret prompt', sampling_params: SamplingParams(n=1), prompt_token_ids: [1, 2], lora_request: None.",
    "INFO 03-02 08:14:52 async_llm_engine.py:120] Finished request chat-0a1b2c3d4e5f60718293a4b5c6d7e8f9.",
    # 0.6: per-prompt completion ids
    "INFO 03-02 08:14:53 logger.py:36] Received request cmpl-93ab01c2d3e4f5a6b7c8d9e0f1a2b3c4-0: prompt: 'one', "
    "params: SamplingParams(n=1), prompt_token_ids: [1], lora_request: None, prompt_adapter_request: None.",
    "INFO 03-02 08:14:53 logger.py:36] Received request cmpl-93ab01c2d3e4f5a6b7c8d9e0f1a2b3c4-1: prompt: 'two', "
    "params: SamplingParams(n=1), prompt_token_ids: [2], lora_request: None, prompt_adapter_request: None.",
    "INFO 03-02 08:14:53 engine.py:267] Added request cmpl-93ab01c2d3e4f5a6b7c8d9e0f1a2b3c4-0.",
    # v1: stacked process tags, a path location
    "(APIServer pid=11) (EngineCore_DP3 pid=12) INFO 03-02 08:14:54 [v1/metrics/loggers.py:259] "
    f"Added request chatcmpl-{UUID}-bf02a813.",
    "(VllmWorker rank=0 pid=13) WARNING 03-02 08:14:54 [nixl_connector.py:901] "
    f"Releasing expired KV blocks for request chatcmpl-{UUID}-bf02a813 which were retrieved by 0 decode worker(s)",
    # the Rust frontend: the request in the span scope
    "(RustFrontend pid=2502) INFO 03-02 08:14:55 [chat_completions.rs:212] chat_completions{request_id=chatcmpl-"
    '1a2b3c4d engine_request_id="chatcmpl-1a2b3c4d-bf02a813"}: chat completion finished prompt_tokens=12',
    # aborted, in the markdown a paste autolinked
    "(APIServer pid=11) INFO 03-02 08:14:56 [[async_llm.py:430](http://async_llm.py:430)] "
    "Aborted request chatcmpl-0e1d2c3b4a5f6e7d.",
]


@pytest.mark.parametrize("query, lines", [
    ("chat-0a1b2c3d4e5f60718293a4b5c6d7e8f9", 2),
    ("cmpl-93ab01c2d3e4f5a6b7c8d9e0f1a2b3c4", 3),  # the client's id finds each prompt's
    (f"chatcmpl-{UUID}", 2),  # the reply id finds the engine's `<reply id>-<8 hex>`
    (f"chatcmpl-{UUID}-bf02a813", 2),  # and the other way round
    ("chatcmpl-1a2b3c4d", 1),
    ("chatcmpl-0e1d2c3b4a5f6e7d", 1),
])
def test_every_vllm_version_is_read(tj, tmp_path, query, lines):
    assert tj("ingest", write(tmp_path / "vllm.log", VLLM_VERSIONS)).code == 0
    texts, request = shown(tj, query)
    assert len(texts) == lines
    assert not any("the secret prompt" in t for t in texts)  # prompts are not stored unless asked
    if query == "chatcmpl-0e1d2c3b4a5f6e7d":
        assert request["first_error"]["text"].startswith("Aborted request chatcmpl-0e1d2c3b4a5f6e7d")


SGLANG = [
    "[2025-10-02 09:41:57 TP1] Prefill batch. #new-seq: 1, #new-token: 12",
    "[2025-10-02 09:41:57 DP0 TP0] Receive: obj=GenerateReqInput(text='the secret prompt', "
    "rid='9e1c57a3b0d24f6e8a1b2c3d4e5f6071', bootstrap_room=7418329021459911432)",
    "Decode transfer failed for request rank=1 decode_req.req.rid='9e1c57a3b0d24f6e8a1b2c3d4e5f6071' "
    "decode_req.req.bootstrap_room=7418329021459911432 with exception KVTransferError(bootstrap_room=7418329021459911432)",
    "[2025-10-02 09:41:58 TP0 EP0] Finish: obj=GenerateReqInput(rid='0000000000000000000000000000000a'), out={}",
]


def test_sglang_lines_with_and_without_their_prefix(tj, tmp_path):
    assert tj("ingest", write(tmp_path / "sglang.log", SGLANG)).code == 0
    texts, request = shown(tj, "9e1c57a3b0d24f6e8a1b2c3d4e5f6071")
    assert len(texts) == 2 and not any("the secret prompt" in t for t in texts)
    assert "Decode transfer failed" in request["first_error"]["text"]
    room, _ = shown(tj, "7418329021459911432")
    assert len(room) == 2


TRTLLM = [
    f"[08/14/2025-06:31:20] [TRT-LLM] [I] Received request {UUID} at 1234.5",
    "[TensorRT-LLM][ERROR] Encountered an error in forwardAsync function: std::bad_alloc",
    "[08/14/2025-06:31:21] [TRT-LLM] [E] Streaming: Failed to process token batch for request None",
    "[08/14/2025-06:31:21] [TRT-LLM] [E] Streaming: Failed to process token batch for request None",
    "ValueError: Invalid disaggregated params: ctx_request_id is None. disagg_request_id=537104838928187",
]


def test_tensorrt_llm_lines_and_none_is_not_a_request(tj, tmp_path):
    assert tj("ingest", write(tmp_path / "trtllm.log", TRTLLM)).code == 0
    texts, _ = shown(tj, UUID)
    assert len(texts) == 1
    _, request = shown(tj, "537104838928187")
    assert request["first_error"]["text"].startswith("ValueError: Invalid disaggregated params")
    assert tj("lookup", "None", "--json").json()["matched"] == 0  # 2 lines say `request None`: no request


DYNAMO_TEXT = [
    "2025-02-28T04:25:01.277685Z DEBUG chat_completions: dynamo_runtime::pipeline::network::tcp::server: Registering",
    "2025-02-28T04:25:01.279445Z ERROR chat_completions: dynamo_llm::http::service::openai: Failed to fold "
    f'chat completions stream for: "ValueError: bad" request_id="{UUID}"',
    f"2025-04-24T08:09:52.118Z  INFO prefill_worker.prefill_queue_handler: Dequeued prefill request: {UUID}",
    "2025-04-24T08:09:52.120Z  INFO worker.generate: done   ",
    "2025-04-24T08:09:52.130Z  INFO http-request{method=POST uri=/v1/chat/completions request_id="
    f"{UUID}}}: dynamo_llm::http::service: response sent",
]


def test_dynamos_text_format_with_ids_in_span_fields_and_messages(tj, tmp_path):
    assert tj("ingest", write(tmp_path / "dynamo.log", DYNAMO_TEXT)).code == 0
    texts, request = shown(tj, UUID)
    assert len(texts) == 3
    assert request["ids"]["internal_id"] == [UUID]  # from a span field, a message field, a message
    assert request["first_error"]["text"].startswith("Failed to fold chat completions stream")


# -- 3. mixed streams ---------------------------------------------------------------------------------

MIXED = [
    "Loaded plugin UCX",
    "(APIServer pid=1) INFO 03-02 08:14:51 [logger.py:39] Received request chatcmpl-5c2d1e0f9a8b7c6d: params: "
    "SamplingParams(n=1), lora_request: None.",
    "I0302 08:14:52.325699 12345 nixl_agent.cpp:123] xfer done for chatcmpl-5c2d1e0f9a8b7c6d-a1b2c3d4",
    "[2026-03-02 08:14:52,928] LMCache INFO: Stored 512 tokens for chatcmpl-5c2d1e0f9a8b7c6d-a1b2c3d4",
    'INFO:     10.0.0.7:50522 - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "[2026-03-02 08:14:53 TP0] Prefill batch. #new-seq: 1, rid=7c0a9b8e1d2f3a4b5c6d7e8f90a1b2c3",
    "(APIServer pid=1) INFO 03-02 08:14:53 [async_llm.py:270] Added request chatcmpl-5c2d1e0f9a8b7c6d-a1b2c3d4.",
]


def test_one_file_of_several_processes_and_tools_keeps_every_line(tj, tmp_path):
    assert tj("ingest", write(tmp_path / "node.log", MIXED)).code == 0
    texts, request = shown(tj, "chatcmpl-5c2d1e0f9a8b7c6d")
    assert len(texts) == len(grep(MIXED, "chatcmpl-5c2d1e0f9a8b7c6d")) == 4
    sources = {r["name"].split()[0]: r["source"] for r in request["records"]}
    assert sources["Received"] == "vllm_log"
    glog = next(r for r in request["records"] if r["name"].startswith("xfer done"))
    assert glog["time"] == "2026-03-02T08:14:52.325699Z" and glog["level"] == "INFO"
    sglang, _ = shown(tj, "7c0a9b8e1d2f3a4b5c6d7e8f90a1b2c3")  # a line of SGLang's among vLLM's
    assert len(sglang) == 1
    assert sum(s["records"] for s in tj("ingest", tmp_path / "node.log", "--json").json()["sources"].values()) == 0


# -- 4. ids, 5. errors by their text, 6. times -----------------------------------------------------------

def test_a_traceback_that_starts_on_a_line_naming_the_request_is_its_error(tj, tmp_path):
    lines = [
        "[01/22/2026-09:19:50] [TRT-LLM] [E] Failed to process request 6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11:",
        "Traceback (most recent call last):",
        '  File "/code/tensorrt_llm/executor/result.py", line 876, in __anext__',
        "RuntimeError: CUDA error: an illegal memory access",
        "[01/22/2026-09:19:51] [TRT-LLM] [I] next",
    ]
    assert tj("ingest", write(tmp_path / "trt.log", lines)).code == 0
    _, request = shown(tj, UUID)
    assert "RuntimeError: CUDA error" in request["first_error"]["text"]


def test_times_a_year_cut_short_and_no_year(tj, tmp_path):
    lines = [
        "025-08-19 10:00:00 WARNING slow request 3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c",
        "08-19 10:00:01 INFO done 3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c",
    ]
    assert tj("ingest", write(tmp_path / "app.log", lines, modified=datetime(2025, 8, 20, tzinfo=timezone.utc))).code == 0
    _, request = shown(tj, "3f2e1d0c9b8a7f6e5d4c3b2a1f0e9d8c")
    first, second = request["records"]
    assert first["time"] == "2025-08-19T10:00:00Z" and first["attrs"]["time_note"] == "year 025 read as 2025"
    assert second["time"] == "2025-08-19T10:00:01Z"


def test_a_file_that_is_not_text_is_refused_and_a_line_cut_short_is_kept(tj, tmp_path):
    binary = tmp_path / "core.bin"
    binary.write_bytes(b"\x00\x01\x02ELF\x00" * 100)
    run = tj("ingest", binary)
    assert run.code != 0 and "not a format trace-join reads" in run.err
    log = write(tmp_path / "dyn.log", [
        '{"time":"2025-09-02T17:28:54.306801Z","level":"INFO","target":"x","message":"ok ' + UUID + '"}',
        '{"time":"2025-09-02T17:28:54.306801Z","level":"ERROR","target":"x","message":"cut ' + UUID,
    ])
    run = tj("ingest", log)
    assert run.code == 0 and "dyn.log:2 (byte 119): invalid JSON" in run.err and "stored as text" in run.err
    texts, _ = shown(tj, UUID)
    assert len(texts) == 2 and any("unread" in t for t in texts)
