"""TensorRT-LLM's per-rank time events (`TRTLLM_PERF_TIME_EVENTS_PATH`, PR #16900):
`time_events_rank<N>_pid<P>.jsonl`, one line per finished request on that rank of the worker:

    {"request_id": 42, "rank": 0, "ctx_request_id": 17, "time_breakdown_metrics": {...},
     "request_timing_metrics": {"arrival_time": 1234.5, "first_token_time": 1234.6, ...}}

`request_id` is the engine's own id, on the worker process (`<folder>:<pid>`: name the folder after
the host, as the perf-metrics files name the process `<host>:<pid>`, and the ids of both join; or
`ingest --worker HOST:PID`). `ctx_request_id` is the context server's id: a label here, since the
file does not say which server issued it. `request_timing_metrics` (the engine's lifecycle times,
steady-clock seconds, when the server returns perf metrics) give the record its steady time and the
durations the perf-metrics records have (`queue_ms`, `ttft_ms`, `e2e_ms`, `kv_transfer_ms`); the line
is kept as written, the per-iteration breakdowns counted (perf_metrics_jsonl.stored_attrs).
"""

from __future__ import annotations

import os
import re

from ..ids import CTX_REQUEST_ID, ENGINE_REQUEST_ID
from ..records import Record
from .parsing import field, load_object
from .perf_metrics_jsonl import phase_durations, stored_attrs

NAME = "trtllm_time_events"
WORKER_FROM_USER = True

FILE_NAME = re.compile(r"^time_events_rank(?P<rank>\d+)_pid(?P<pid>\d+)\.jsonl(?:\.gz)?$")
_TIMES = ("arrival_time", "first_scheduled_time", "first_token_time", "last_token_time",
          "kv_cache_transfer_start", "kv_cache_transfer_end")


def sniff(path: str, head: list[bytes]) -> bool:
    return bool(FILE_NAME.match(os.path.basename(path))) and bool(head) and head[0].lstrip().startswith(b"{") \
        and b'"request_id"' in head[0]


class LineParser:
    def __init__(self, path: str, worker: str | None = None):
        m = FILE_NAME.match(os.path.basename(path))
        folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
        self.worker = worker or (f"{folder}:{m['pid']}" if m else folder)
        self.role: str | None = None

    def parse(self, line: bytes) -> list[Record]:
        item = load_object(line)
        request_id = field(item, "request_id", (int, str), required=True)
        field(item, "rank", (int,))
        field(item, "time_breakdown_metrics", (dict,))
        timing = field(item, "request_timing_metrics", (dict,)) or {}
        times = {key: float(value) for key in _TIMES if (value := field(timing, key, (int, float)))}
        durations = phase_durations(times)
        record = Record(kind="perf", name="time events", worker=self.worker, steady_s=times.get("arrival_time"))
        if "e2e_ms" in durations:
            record.duration_ns = round(durations["e2e_ms"] * 1_000_000)
        record.add_id(ENGINE_REQUEST_ID, request_id, self.worker)
        record.add_id(CTX_REQUEST_ID, field(item, "ctx_request_id", (int, str)))
        record.attrs_text = stored_attrs(item, line.strip().decode(), durations)
        return [record]
