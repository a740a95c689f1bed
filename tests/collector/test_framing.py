"""Line framing: the wrappers, colours and borders a deployment's tools put around an engine's own
line come off into fields, alone or stacked, and nothing of the engine's line goes with them."""

from __future__ import annotations

import pytest

from tracejoin.collector import framing, times

VLLM = "(APIServer pid=1) INFO 03-02 08:14:51 [logger.py:39] Received request chatcmpl-4b1f0c2d9e8a7b6c."
TRTLLM = "[03/02/2026-08:14:51] [TRT-LLM] [I] Received request 6f1c2a8e-3d4b-4c59-9b1e-0a7d2f5e8c11"


@pytest.mark.parametrize("wrapped, by, fields", [
    (f"2026-03-02T08:14:51.402118733Z stdout F {VLLM}", ["kubelet"], {"stream": "stdout"}),
    (f'{{"log":"{VLLM}\\n","stream":"stderr","time":"2026-03-02T08:14:51.402118733Z"}}', ["docker"], {"stream": "stderr"}),
    (f"2026-03-02T08:14:51.402118733Z {VLLM}", ["timestamps"], {}),
    (f"[pod/vllm-decode-0/vllm] {VLLM}", ["kubectl"], {"pod": "vllm-decode-0", "container": "vllm"}),
    (f"vllm-decode-1  | {VLLM}", ["compose"], {"service": "vllm-decode-1"}),
    (f"3: {VLLM}", ["srun"], {"rank": 3}),
    (f"[1,2]<stdout>:{VLLM}", ["mpirun"], {"rank": 2, "stream": "stdout"}),
    (f"Mar 02 08:14:51 gpu-node-3 vllm[4182]: {VLLM}", ["journald"], {"host": "gpu-node-3", "unit": "vllm", "pid": 4182}),
    # stacked: the kubelet's file of a pod whose command is srun, seen through kubectl --prefix
    (f"[pod/trt-0/main] 2026-03-02T08:14:51.402118733Z stdout F 0: {VLLM}", ["kubectl", "kubelet", "srun"],
     {"pod": "trt-0", "rank": 0}),
])
def test_each_wrapper_comes_off_into_fields(wrapped, by, fields):
    framed = framing.frame(wrapped)
    assert framed.text == VLLM
    assert framed.fields["by"] == by
    assert fields.items() <= framed.fields.items()


def test_a_wrappers_utc_time_is_kept_to_the_nanosecond():
    framed = framing.frame(f"2026-03-02T08:14:51.402118733Z stdout F {VLLM}")
    assert framed.time_ns == times.iso_to_ns("2026-03-02T08:14:51Z") + 402118733
    assert framed.fields["time_by"] == "kubelet"


@pytest.mark.parametrize("wrapped, process", [
    (f"[pod/vllm-decode-0/vllm] {VLLM}", "vllm-decode-0"),
    (f"vllm-decode-1  | {VLLM}", "vllm-decode-1"),
    (f"Mar 02 08:14:51 gpu-node-3 vllm[4182]: {VLLM}", "gpu-node-3/vllm[4182]"),
    (f"[pod/trt-0/main] 1: {TRTLLM}", "trt-0#1"),
])
def test_the_process_a_wrapper_names(wrapped, process):
    assert framing.frame(wrapped).process == process


@pytest.mark.parametrize("decorated", [
    f"\x1b[32m{VLLM}\x1b[0m",
    f"[2m{VLLM}[0m",  # a terminal paste: the escape byte is gone, the rest of the code stays
    f"{VLLM}\r",
    f"{VLLM}   ",
    f"│ {VLLM} │",
])
def test_colours_carriage_returns_trailing_spaces_and_borders_come_off(decorated):
    assert framing.frame(decorated).text == VLLM


def test_a_carriage_return_is_remembered():
    """vLLM ends every line but the last of a message of several lines with \\r."""
    assert framing.frame(f"{VLLM}\r").carriage_return and not framing.frame(VLLM).carriage_return


@pytest.mark.parametrize("own", [
    "2025-05-26T15:58:46.697Z  INFO worker.async_init: [VllmWorker:1] VllmWorker has been initialized",
    "[2025-09-04 07:42:34 TP0] Prefill batch. #new-seq: 1",
    "INFO 03-02 08:14:51 [logger.py:39] message [m] and [12]",
    '{"time":"2025-09-02T17:28:54.306801Z","level":"INFO","target":"x","message":"[32m stays: a JSON value"}',
    "12:30 is a time, not a rank",
])
def test_an_engines_own_line_is_left_as_it_is(own):
    framed = framing.frame(own)
    assert framed.text == own and not framed.fields


def test_a_stern_prefix_comes_off_only_before_a_line_a_format_reads():
    """stern's `pod container ` is two bare words: frame leaves it; strip_named_pod takes it off
    for the reader to try."""
    line = f"ms-pd-prefill-72f815fe82-qxv6j vllm {VLLM}"
    assert framing.frame(line).text == line
    named = framing.strip_named_pod(framing.frame(line))
    assert named.text == VLLM and named.process == "ms-pd-prefill-72f815fe82-qxv6j"
    assert framing.strip_named_pod(framing.frame("Loaded plugin UCX")) is None
