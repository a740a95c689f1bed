"""Format detection with the TensorRT-LLM sources: each file is claimed by its own source's
sniffer and by no other, so the order of SOURCES never decides a TensorRT-LLM file or takes an
existing format's file away.

TensorRT-LLM cannot run here (no GPU, no wheel): its files are built as its code writes them, by
the helpers of the other test_trtllm_* modules.
"""

from __future__ import annotations

import json

import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.collector.ingest import HEAD, _head_lines
from tracejoin.collector.sources import SOURCES, text_log

from .test_otlp_json import trtllm_worker_spans, write_otlp_json
from .test_trtllm_hook import raw_output
from .test_trtllm_log import ROUTER_LOG, WORKER_LOG
from .test_trtllm_perf_legacy import legacy_disagg_record, legacy_timing
from .test_trtllm_perf_metrics import DISAGG_A, compact, disagg_line, file_name, timing, worker_item, worker_line


def trtllm_files(folder):
    folder.mkdir()
    files = {
        "perf_metrics_jsonl": [
            (folder / file_name("gen", "gpu-node-2", 4242), b"\n".join(
                [worker_line(7, timing(1.0), ctx_request_id=1, disagg_request_id=DISAGG_A)] * 3)),
            (folder / file_name("disagg", "orch", 1), disagg_line(DISAGG_A, 1.0)),
            (folder / "renamed-gen0.jsonl", worker_line(7, timing(1.0))),
        ],
        "perf_metrics_legacy": [
            (folder / "10.0.0.5_8001.perf_metrics.json",
             json.dumps([worker_item(1, legacy_timing(1.0))], indent=2).encode()),
            (folder / "disagg_polls.jsonl", compact([legacy_disagg_record(17, 88, 5, 1.0)])),
        ],
        "trtllm_hook": [(folder / "raw-4242.jsonl", raw_output(7, DISAGG_A))],
        "trtllm_log": [
            (folder / "worker.log", "\n".join(WORKER_LOG).encode()),
            (folder / "disagg.log", "\n".join(ROUTER_LOG).encode()),
        ],
    }
    for entries in files.values():
        for path, data in entries:
            path.write_bytes(data + b"\n")
    return {name: [path for path, _ in entries] for name, entries in files.items()}


def existing_files(tmp_path):
    sample = DynamoSample()
    sample.add(x_request_id="x-1")
    files = sample.write(tmp_path / "dynamo")
    write_otlp_json(tmp_path / "spans.otlp.jsonl", trtllm_worker_spans("h", 1, [1, 2]))
    tracejoin = tmp_path / "app.jsonl"
    tracejoin.write_bytes(b'{"schema":"tracejoin.log.v1","ts":"2026-11-30T10:40:30Z","event":"request.start"}\n')
    return {
        "dynamo_jsonl": [files["frontend"], files["prefill"], files["decode"]],
        "dynamo_request_trace": [files["request_trace"]],
        "otlp_json": [files["otlp"], tmp_path / "spans.otlp.jsonl"],
        "tracejoin_jsonl": [tracejoin],
    }


def claimants(path) -> set[str]:
    head = _head_lines(path.read_bytes()[:HEAD])
    # text_log reads any text, each line by the format that claims it: it is the fallback, not a rival
    return {m.NAME for m in SOURCES if m is not text_log and m.sniff(str(path), head)}


@pytest.mark.parametrize("which", ["trtllm", "existing"])
def test_each_file_is_claimed_by_its_own_source_only(tmp_path, which):
    files = trtllm_files(tmp_path / "trt") if which == "trtllm" else existing_files(tmp_path)
    for name, paths in files.items():
        for path in paths:
            assert claimants(path) == {name}, path.name


def test_a_file_without_a_complete_first_line_is_claimed_by_none(tmp_path):
    blank = tmp_path / file_name("gen", "h", 1)
    blank.write_bytes(b"\n\n")
    assert claimants(blank) == set()
