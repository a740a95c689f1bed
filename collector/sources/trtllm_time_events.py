"""TensorRT-LLM's time events (PR #16900, open): JSON lines that the workers, the disaggregated
router and the benchmark client each write to a folder of their own, one file per process.

- Workers (`TRTLLM_PERF_TIME_EVENTS_PATH`): `time_events_rank<N>_pid<P>.jsonl`. Two revisions of
  the PR write two shapes. One line per finished request:

      {"request_id": 42, "rank": 0, "ctx_request_id": 17, "time_breakdown_metrics": {...},
       "request_timing_metrics": {"arrival_time": 1234.5, "first_token_time": 1234.6, ...}}

  or one line per moment of a request's life, as it happens (a request that hung leaves the
  moments it reached):

      {"role": "gen", "event": "gen_first_token", "request_id": 42, "ctx_request_id": 17,
       "rank": 0, "t": 1234.6, "pid": 4242}

  `request_id` is the engine's own id on the worker process, `ctx_request_id` the context server's
  id (a label here: the line does not say which server issued it).
- The disaggregated router (`TRTLLM_PERF_TIME_EVENTS_ROUTER_PATH`): `disagg_router_pid<P>.jsonl`,
  the same moment lines with `"role": "router"` (`arrival`, `ctx_dispatch`, `gen_dispatch`,
  `first_token`, `resp_done`), where `request_id` is the router's own count of its requests and
  `disagg_request_id`, `ctx_server` and `gen_server` say where it sent the request.
- The benchmark client (`TRTLLM_PERF_TIME_EVENTS_CLIENT_PATH`): `client_pid<P>.jsonl`, one line
  per request, `"source": "client"`, sent at `send_wall_time` (epoch seconds), answered under
  `response_id` (the reply id), with benchmark_serving's `ttft`, `latency` (seconds), `success`
  and `error` where it writes them.

Times are steady-clock seconds (`t`, `request_timing_metrics`), except the client's wall-clock
send time. The process is `<folder>:<pid>`: name each folder after its host, as the perf-metrics
files name the process `<host>:<pid>`, and the engine ids of both join (or `ingest --worker
HOST:PID`).
"""

from __future__ import annotations

import os
import re

from ..ids import CTX_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, REPLY_ID, ROUTER_REQUEST_ID
from ..records import Record
from .parsing import Unparseable, field, load_object
from .perf_metrics_jsonl import phase_durations, stored_attrs

NAME = "trtllm_time_events"
WORKER_FROM_USER = True

FILE_NAME = re.compile(
    r"^(?:time_events_rank(?P<rank>\d+)|(?P<router>disagg_router)|(?P<client>client))_pid(?P<pid>\d+)"
    r"\.jsonl(?:\.gz)?$")
# What the first line of each file holds: the name alone is too common to claim a file
# (`client_pid1.jsonl` could be anyone's).
_FIRST_LINE = {
    "worker": re.compile(rb'^\s*\{.*"request_id"\s*:'),
    "router": re.compile(rb'^\s*\{.*"role"\s*:\s*"router"'),
    "client": re.compile(rb'^\s*\{.*"source"\s*:\s*"client".*"send_wall_time"\s*:'),
}
_TIMES = ("arrival_time", "first_scheduled_time", "first_token_time", "last_token_time",
          "kv_cache_transfer_start", "kv_cache_transfer_end")
_WORKER_ROLES = ("ctx", "gen")


def _file_kind(m: re.Match) -> str:
    return "router" if m["router"] else "client" if m["client"] else "worker"


def sniff(path: str, head: list[bytes]) -> bool:
    m = FILE_NAME.match(os.path.basename(path))
    return bool(m and head and _FIRST_LINE[_file_kind(m)].match(head[0]))


class LineParser:
    def __init__(self, path: str, worker: str | None = None):
        m = FILE_NAME.match(os.path.basename(path))
        folder = os.path.basename(os.path.dirname(os.path.abspath(path)))
        self.worker = worker or (f"{folder}:{m['pid']}" if m else folder)
        self._kind = _file_kind(m) if m else "worker"
        self.role: str | None = {"router": "router", "client": "client"}.get(self._kind)

    def parse(self, line: bytes) -> list[Record]:
        item = load_object(line)
        text = line.strip().decode()
        if self._kind == "client":
            return [self._client_request(item, text)]
        if "event" in item:
            return [self._moment(item, text)]
        if self._kind == "router":
            raise Unparseable("missing field 'event'")
        return [self._finished_request(item, text)]

    def _finished_request(self, item: dict, text: str) -> Record:
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
        record.attrs_text = stored_attrs(item, text, durations)
        return record

    def _moment(self, item: dict, text: str) -> Record:
        role = field(item, "role", (str,), required=True)
        expected = ("router",) if self._kind == "router" else _WORKER_ROLES
        if role not in expected:
            raise Unparseable(f"role {role!r} in a {self._kind}'s time events, expected {' or '.join(expected)}")
        if self.role is None:
            self.role = role
        event = field(item, "event", (str,), required=True)
        t = field(item, "t", (int, float))
        request_id = field(item, "request_id", (int, str))
        field(item, "rank", (int,))
        field(item, "pid", (int,))
        record = Record(kind="perf", name=event, worker=self.worker, role=role,
                        steady_s=float(t) if t is not None else None)
        if role == "router":
            record.add_id(ROUTER_REQUEST_ID, request_id, self.worker)
            record.add_id(DISAGG_REQUEST_ID, field(item, "disagg_request_id", (int, str)))
            field(item, "ctx_server", (str,))
            field(item, "gen_server", (str,))
        else:
            record.add_id(ENGINE_REQUEST_ID, request_id, self.worker)
        record.add_id(CTX_REQUEST_ID, field(item, "ctx_request_id", (int, str)))
        record.attrs_text = text
        return record

    def _client_request(self, item: dict, text: str) -> Record:
        if item.get("source") != "client":
            raise Unparseable("not a client time event: 'source' is not \"client\"")
        sent = field(item, "send_wall_time", (int, float), required=True)
        ttft = field(item, "ttft", (int, float))
        latency = field(item, "latency", (int, float))
        success = field(item, "success", (bool,))
        field(item, "error", (str,))
        # A float of epoch seconds holds microseconds, not nanoseconds.
        record = Record(kind="perf", name="client request", worker=self.worker, role="client",
                        time_ns=round(sent * 1e6) * 1000, status="error" if success is False else None)
        if latency is not None:
            record.duration_ns = round(latency * 1e9)
        response_id = field(item, "response_id", (str,))
        record.add_id(REPLY_ID, response_id or None)
        computed = {"ttft_ms": ttft * 1000 if ttft is not None else None,
                    "e2e_ms": latency * 1000 if latency is not None else None}
        record.attrs_text = stored_attrs(item, text, computed)
        return record
