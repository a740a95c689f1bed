"""Source formats. Each module reads one format: it says whether a file is in it (`sniff`) and
turns each line into records (`LineParser.parse`). Adding a format means adding one module here
and naming it in SOURCES; nothing else changes.

A module provides:
    NAME: str                                   stored as the records' `source`
    sniff(path: str, head: list[bytes]) -> bool  head: the file's first non-empty lines
    MAX_LINE: int (optional)                     longest line read, in bytes (default 1 MiB)
    WORKER_FROM_USER: bool (optional)            the format names no process: LineParser(path,
                                                 worker=...) takes the one `ingest --worker` gives
    CONTENT_FROM_USER: bool (optional)           the format may carry prompt and reply text, which
                                                 LineParser(path, keep_content=True) stores when
                                                 `--keep-content` asks
    LOCAL_TIMES: bool (optional)                 its times are local, without a zone (and maybe a
                                                 year): LineParser(path, tz=...) takes `--tz`, and
                                                 .clock says how it read them (local_time.py)
    LineParser(path: str)                        one per file: .parse(line) -> list[Record],
                                                 raising Unparseable(reason) for a bad line;
                                                 .worker / .role: identity learned for the file;
                                                 .aliases (optional): {other name: worker} of
                                                 processes the file names two ways
    .state() / .restore(state) (optional)        what the parser learned of its file beyond
                                                 .worker and .role (a dict), stored with the
                                                 file's position and given back when the file is
                                                 read on, so a file read in parts reads as whole
    BULK: bulk_sql.Rules (optional)              the same reading as SQL over a stage of lines,
                                                 which collector/bulk.py runs; its LineParser
                                                 then also has .scope (the worker its engine ids
                                                 belong to), .state_markers() (texts a line
                                                 must hold to change what it knows of its file),
                                                 .carry(time_ns) (the time the lines before
                                                 left), optionally .bulk_settings() (values
                                                 for the SQL, or None: read line by line), and
                                                 with BULK.votes .learn(Counter) (the roles the
                                                 lines read in bulk vote for)

The text logs (Dynamo's, vLLM's, SGLang's, TensorRT-LLM's, and text_log for any other text) share
one LineParser, text_log.TextLines, which reads each line by the format that claims it: such a
module gives a `Reader` (text_log.py's doc has its contract) and its LineParser is TextLines with
its Reader first. TextLines also has `.unread(line, reason)`: the line a format claimed and could
not read, as a line of text that says why (collector/lines.py stores it so, rather than
quarantining it).

docs/contributing.md walks through adding a format.
"""

from __future__ import annotations

from . import (
    dynamo_jsonl, dynamo_request_trace, otlp_json, perf_metrics_jsonl, perf_metrics_legacy, tracejoin_jsonl,
    sglang_log, sglang_metrics, text_log, trtllm_hook, trtllm_log, trtllm_time_events, vllm_log,
)
from .parsing import Unparseable

__all__ = ["SOURCES", "BY_NAME", "detect", "Unparseable"]

# Most specific first: a Dynamo stderr capture can contain request-trace rows, so the
# request-trace sniffer must not claim a file that only has a few of them (it requires all). A
# Dynamo capture of a TensorRT-LLM worker also holds TensorRT-LLM text lines: the TensorRT-LLM log
# sniffer, which needs only one such line, comes after Dynamo's.
SOURCES = [
    tracejoin_jsonl, otlp_json, dynamo_request_trace, trtllm_hook, trtllm_time_events, perf_metrics_jsonl,
    perf_metrics_legacy,
    sglang_metrics, dynamo_jsonl, vllm_log, sglang_log, trtllm_log,
    # Any other text: each line read by the format that claims it, else as a plain line.
    text_log,
]
BY_NAME = {m.NAME: m for m in SOURCES}


def detect(path: str, head: list[bytes]):
    """The source module that reads this file, or None."""
    for module in SOURCES:
        if module.sniff(path, head):
            return module
    return None
