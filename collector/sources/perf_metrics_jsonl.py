"""TensorRT-LLM per-request perf metrics as JSONL files (trtllm-serve with `perf_metrics_output_dir`,
after PR #16668): `perf_metrics-<server_kind>-<hostname>-<pid>-<YYYYmmddTHHMMSSZ>.jsonl`, one
compact line per finished HTTP response, as `PerfMetricsJsonlWriter` in TensorRT-LLM's
`tensorrt_llm/serve/perf_metrics.py` writes it (the record types in `_perf_metrics_schema.py`).

Each file holds the records of one process, in one of two shapes:
- `WorkerPerfMetricsRecord` (a worker or an aggregated server): `request_id` (the engine's own
  id, int or str), `perf_metrics` {timing_metrics, kv_cache_metrics, first_iter, last_iter, ...},
  optional `ctx_request_id`, `disagg_request_id`, `time_breakdown_metrics`, and `status`;
- `DisaggPerfMetricsRecord` (the disaggregated server): `ctx_server`, `gen_server`, its own three
  times, `disagg_request_id` and the ctx/gen phases as the workers reported them in headers. There
  the phases' `request_id` is the disagg id (or the ctx request id when it has none), never an
  engine id: the workers' engine ids are only in their own files.

The file name names the process: the worker is `<hostname>:<pid>` (host names contain dashes, so
the name is split from the right), and the UTC stamp, its start, is kept as `process_start`.

Times are steady-clock seconds, not epoch: each record keeps its earliest arrival in
`steady_s`, no wall time, and the phase durations TensorRT-LLM's own `Server-Timing` header
reports (ms): `queue_ms` (arrival → first scheduled), `ttft_ms` (arrival → first token), `e2e_ms`
(arrival → last token, also the record's duration), `kv_transfer_ms`; a disagg record adds
`disagg_queue_ms` (arrival → ctx dispatch) and each phase's durations prefixed `ctx_` / `gen_`.
A missing, null or zero time leaves the durations that need it out. A record's attributes are its
line as written, after those durations and `process_start` (stored_attrs).

The legacy `GET /perf_metrics` arrays (perf_metrics_legacy.py) carry the same items without
`status`; the record builders below serve both.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from datetime import datetime, timezone

import orjson

from ..ids import CTX_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID
from ..records import Record
from .parsing import field, load_object, worker_from_path

NAME = "perf_metrics_jsonl"

FILE_NAME = re.compile(
    r"^perf_metrics-(?P<kind>[^-]+)-(?P<host>.+)-(?P<pid>\d+)-(?P<start>\d{8}T\d{6}Z)\.jsonl(?:\.gz)?$"
)
# The disaggregated server writes `disagg`; what workers write is not confirmed, so a kind
# that names a side is taken at its word and anything else is decided from the records.
_KIND_ROLES = {"disagg": "router", "ctx": "ctx", "context": "ctx", "gen": "gen", "generation": "gen"}
# A line of either record shape; trace-join and Dynamo lines carry a "schema" and are not these.
_RECORD_LINE = re.compile(rb'^\s*\{.*"(?:perf_metrics|disagg_server_arrival_time)"\s*:')

# (attribute, start, end) as TensorRT-LLM's Server-Timing header computes them for a worker phase.
_PHASES = (
    ("queue_ms", "arrival_time", "first_scheduled_time"),
    ("ttft_ms", "arrival_time", "first_token_time"),
    ("e2e_ms", "arrival_time", "last_token_time"),
    ("kv_transfer_ms", "kv_cache_transfer_start", "kv_cache_transfer_end"),
)
_TIMING_KEYS = (
    "server_arrival_time", "arrival_time", "first_scheduled_time", "first_token_time",
    "server_first_token_time", "last_token_time", "kv_cache_transfer_start", "kv_cache_transfer_end",
)
_DISAGG_TIMES = ("disagg_server_arrival_time", "disagg_ctx_dispatch_time", "disagg_server_first_token_time")


def sniff(path: str, head: list[bytes]) -> bool:
    if not head:
        return False
    if FILE_NAME.match(os.path.basename(path)):
        return bool(_RECORD_LINE.match(head[0])) and b'"schema"' not in head[0]
    return all(_RECORD_LINE.match(line) and b'"schema"' not in line for line in head)


class LineParser:
    def __init__(self, path: str):
        m = FILE_NAME.match(os.path.basename(path))
        self._process_start = None
        self._kind_role = None
        if m:
            self.worker = f"{m['host']}:{m['pid']}"
            self._kind_role = _KIND_ROLES.get(m["kind"].lower())
            start = datetime.strptime(m["start"], "%Y%m%dT%H%M%SZ").replace(tzinfo=timezone.utc)
            self._process_start = start.strftime("%Y-%m-%dT%H:%M:%SZ")
        else:
            self.worker = worker_from_path(path)  # a renamed file: see docs/formats.md
        self.role = self._kind_role
        self._votes = RoleVotes()

    def parse(self, line: bytes) -> list[Record]:
        obj = load_object(line)
        text = line.strip().decode()
        if is_disagg_record(obj):
            record = disagg_record(obj, phase_ids_are_engine_ids=False, text=text, process_start=self._process_start)
        else:
            record = worker_record(obj, self.worker, role=self._kind_role, text=text,
                                   process_start=self._process_start)
            if self._kind_role is None:
                self.role = self._votes.vote(infer_worker_role(obj))
        return [record]


def is_disagg_record(obj: dict) -> bool:
    return any(key in obj for key in ("ctx_server", "gen_server", "disagg_server_arrival_time"))


# -- worker records --------------------------------------------------------------------------


def worker_record(item: dict, worker: str | None, *, role: str | None = None,
                  ctx_scope: str | None = None, text: str | None = None,
                  process_start: str | None = None) -> Record:
    """One worker item. `role` when the caller knows it (else the file decides, see RoleVotes);
    `ctx_scope` scopes its ctx_request_id (only a ctx worker's own items may: the id is that
    worker's), otherwise the ctx request id is a label. `text`: the item as written, which the
    record keeps (stored_attrs)."""
    request_id = field(item, "request_id", (int, str), required=True)
    perf = field(item, "perf_metrics", (dict,), required=True)
    timing = _timing(perf)
    record = Record(kind="perf", name="perf metrics", worker=worker, role=role,
                    steady_s=_earliest(timing, "server_arrival_time", "arrival_time"),
                    status=field(item, "status", (str,)))
    # An aggregated server is the entry server: its record of a request marks that request.
    record.entry = (role or infer_worker_role(item)) == "agg"
    record.add_id(ENGINE_REQUEST_ID, request_id, worker)
    record.add_id(DISAGG_REQUEST_ID, field(item, "disagg_request_id", (int, str)))
    record.add_id(CTX_REQUEST_ID, field(item, "ctx_request_id", (int, str)), ctx_scope)
    field(item, "time_breakdown_metrics", (dict,))  # another type makes the line unparseable
    durations = phase_durations(timing)
    if "e2e_ms" in durations:
        record.duration_ns = round(durations["e2e_ms"] * 1_000_000)
    record.attrs_text = stored_attrs(item, text, {**durations, "process_start": process_start})
    return record


def infer_worker_role(item: dict) -> str | None:
    """The role one worker item suggests: `agg` without any disaggregation id; on a
    disaggregated worker `ctx` when its first and last tokens coincide (a context-only request
    stops at its first token) and `gen` when tokens came after the first; None when it cannot
    tell (timings missing)."""
    if item.get("ctx_request_id") is None and item.get("disagg_request_id") is None:
        return "agg"
    timing = (item.get("perf_metrics") or {}).get("timing_metrics") or {}
    first, last = timing.get("first_token_time"), timing.get("last_token_time")
    if not isinstance(first, (int, float)) or not isinstance(last, (int, float)) or not first or not last:
        return None
    return "ctx" if last == first else "gen"


class RoleVotes:
    """A process has one role: the one most of its records suggest (the first on a tie). One
    record alone can mislead — a warm-up request sent straight to a generation worker looks
    aggregated, a one-token generation looks like a context request."""

    def __init__(self):
        self._votes: Counter = Counter()

    def vote(self, role: str | None) -> str | None:
        if role:
            self._votes[role] += 1
        return self.leader

    @property
    def leader(self) -> str | None:
        return self._votes.most_common(1)[0][0] if self._votes else None


# -- disaggregated-server records ------------------------------------------------------------


def disagg_record(obj: dict, *, phase_ids_are_engine_ids: bool, worker: str | None = None,
                  text: str | None = None, process_start: str | None = None) -> Record:
    """One disaggregated-server record. Legacy records (GET /perf_metrics) carry each worker's items as they
    were polled, so a phase's `request_id` is that worker's engine id; after #16668 it is
    the disagg id, or the ctx request id when there is none."""
    ctx_server = field(obj, "ctx_server", (str,))
    gen_server = field(obj, "gen_server", (str,))
    own = {key: _seconds(obj, key) for key in _DISAGG_TIMES}
    disagg_id = field(obj, "disagg_request_id", (int, str))
    phases = {"ctx": field(obj, "ctx_perf_metrics", (dict,)), "gen": field(obj, "gen_perf_metrics", (dict,))}
    record = Record(kind="perf", name="disagg perf metrics", worker=worker, role="router", entry=True,
                    steady_s=own["disagg_server_arrival_time"], status=field(obj, "status", (str,)))
    record.add_id(DISAGG_REQUEST_ID, disagg_id)
    arrival = own["disagg_server_arrival_time"]
    computed = _durations({"disagg_queue_ms": (arrival, own["disagg_ctx_dispatch_time"]),
                           "ttft_ms": (arrival, own["disagg_server_first_token_time"])})
    for phase, item in phases.items():
        if item is None:
            continue
        server = ctx_server if phase == "ctx" else gen_server
        request_id = field(item, "request_id", (int, str))
        timing = _timing(field(item, "perf_metrics", (dict,)) or {})
        computed.update({f"{phase}_{name}": value for name, value in phase_durations(timing).items()})
        if phase_ids_are_engine_ids:
            record.add_id(ENGINE_REQUEST_ID, request_id, server)
        elif request_id is not None and str(request_id) != str(disagg_id):
            record.add_id(CTX_REQUEST_ID, request_id, ctx_server)
        # The ctx request id belongs to the ctx server's numbering, whichever phase repeats it.
        record.add_id(CTX_REQUEST_ID, field(item, "ctx_request_id", (int, str)), ctx_server)
        if phase == "gen":
            # Workers report in the disaggregated server's steady clock, so its arrival and
            # the generation worker's last token measure the whole request.
            computed.update(_durations({"e2e_ms": (arrival, timing.get("last_token_time"))}))
    if "e2e_ms" in computed:
        record.duration_ns = round(computed["e2e_ms"] * 1_000_000)
    record.attrs_text = stored_attrs(obj, text, {**computed, "process_start": process_start})
    return record


# -- attributes ------------------------------------------------------------------------------


def stored_attrs(item: dict, text: str | None, computed: dict) -> str:
    """What a record keeps of its item: the item as written (`text`; as orjson writes it when
    there is none), after the computed attributes (phase durations, the process's start) that the
    item does not hold itself. Per-iteration step metrics can run to thousands of entries per
    request: those are kept as counts, with the breakdown's single values."""
    breakdown = item.get("time_breakdown_metrics")
    if isinstance(breakdown, dict) and breakdown:
        item = {**item, "time_breakdown_metrics": _counted(breakdown)}
        text = None
    if text is None:
        text = orjson.dumps(item).decode()
    front = {key: value for key, value in computed.items() if value is not None and key not in item}
    if not front:
        return text
    return f"{orjson.dumps(front).decode()[:-1]},{text[1:]}"  # an item is never empty: it has its ids


def _counted(breakdown: dict) -> dict:
    out = {k: v for k, v in breakdown.items() if not isinstance(v, (list, dict))}
    for key in ("step_metrics", "ctx_chunk_metrics"):
        if isinstance(breakdown.get(key), list):
            out[key.replace("_metrics", "s")] = len(breakdown[key])
    return out


# -- times -----------------------------------------------------------------------------------


def phase_durations(timing: dict) -> dict:
    """queue/ttft/e2e/kv_transfer in ms, as Server-Timing reports them. TensorRT-LLM measures
    from the engine's `arrival_time`; the HTTP arrival stands in when the engine's is missing."""
    arrival = timing.get("arrival_time") or timing.get("server_arrival_time")
    return _durations({
        name: (arrival if start == "arrival_time" else timing.get(start), timing.get(end))
        for name, start, end in _PHASES
    })


def _durations(spans: dict) -> dict:
    out = {}
    for name, (start, end) in spans.items():
        if start is not None and end is not None and end >= start:
            out[name] = round((end - start) * 1000, 3)
    return out


def _timing(perf: dict) -> dict:
    """timing_metrics with every time checked: a number of seconds, or None when missing, null or
    zero (legacy servers report an unset time as 0). Other keys (kv_cache_size) are kept as is."""
    timing = field(perf, "timing_metrics", (dict,)) or {}
    return {**timing, **{key: _seconds(timing, key) for key in _TIMING_KEYS if key in timing}}


def _seconds(obj: dict, key: str) -> float | None:
    value = field(obj, key, (int, float))
    return float(value) if value else None


def _earliest(timing: dict, *keys: str) -> float | None:
    present = [timing[k] for k in keys if timing.get(k) is not None]
    return min(present) if present else None
