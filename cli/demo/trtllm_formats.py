"""TensorRT-LLM's own records, written as trtllm-serve and its disaggregated server write them
(their sources are cited where each is read: collector/sources/perf_metrics_jsonl.py,
trtllm_hook.py, trtllm_log.py and otlp_json.py). The demo's processes write through these; nothing
here knows about the demo.

- `PerfMetricsJsonl`, `worker_record`, `disagg_record`: per-request perf metrics after PR #16668
  (`perf_metrics_output_dir`), as `PerfMetricsJsonlWriter` in tensorrt_llm/serve/perf_metrics.py,
  and the legacy `/perf_metrics` items before it.
- `metrics_headers`, `timing_from_headers`, `perf_metrics_event`: how a worker hands its timings
  to the disaggregated server (`Server-Timing`, `X-TRTLLM-Start-End-Time`, and after a stream the
  `trtllm.perf_metrics` event), and how that server reads them back into its own record.
- `RawOutputDump`, `raw_output_line`: the post-processor hook's `raw_output` records (fork
  JunyiXu-nv/TensorRT-LLM).
- `trtllm_logger`: text logs as tensorrt_llm/logger.py prints them to stdout.
- `LlmRequestSpans`: the worker's `llm_request` spans (PR #5897), through the OpenTelemetry SDK.
- `DisaggRequestIds`: disaggregated request ids laid out as tensorrt_llm/llmapi/disagg_utils.py does.

Every time in the perf records is TensorRT-LLM's steady clock in seconds (`steady_now`); the
hook records, spans and log lines carry wall-clock time. The tests build their TensorRT-LLM
records through the same functions, with times of their own.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import sys
import time
import uuid
from collections.abc import Mapping
from datetime import datetime, timezone
from pathlib import Path

from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator


def steady_now() -> float:
    """TensorRT-LLM's `steady_clock_now()`: CLOCK_MONOTONIC seconds, which `time.monotonic()` reads
    on Linux. Every process on a host shares it, so the offset the disaggregated server measures
    to each worker (`/steady_clock_offset`) is zero here and not applied."""
    return time.monotonic()


def utc_now_iso() -> str:
    return datetime.now(timezone.utc).isoformat()


# -- per-request perf metrics (JSONL) ---------------------------------------------------------

# The order RequestPerfMetrics' times are read in (`build_request_metrics_record`).
_TIMING_FIELDS = (
    "arrival_time", "first_scheduled_time", "first_token_time", "last_token_time",
    "kv_cache_transfer_start", "kv_cache_transfer_end",
)
_KV_TRANSFER_FIELDS = ("kv_cache_size", "kv_cache_transfer_start", "kv_cache_transfer_end")


def timing_metrics(times: Mapping[str, float], kv_cache_size: int) -> dict:
    """`timing_metrics` of a worker record: an unset time is null; without KV cache to transfer
    the transfer keys are left out (`_jsonl_perf_metrics`). The HTTP arrival and first token come
    last, as the server's middleware adds them after the engine's times."""
    timing = {name: times.get(name) for name in _TIMING_FIELDS}
    timing["kv_cache_size"] = kv_cache_size
    timing["server_arrival_time"] = times.get("server_arrival_time")
    timing["server_first_token_time"] = times.get("server_first_token_time")
    if not kv_cache_size:
        for name in _KV_TRANSFER_FIELDS:
            timing.pop(name)
    return timing


def perf_metrics(timing: dict, *, first_iter: int, last_iter: int, kv_blocks: dict) -> dict:
    """`perf_metrics` of a worker record: times first, then iterations and KV cache blocks
    (`num_total_allocated_blocks`, `num_new_allocated_blocks`, `num_reused_blocks`,
    `num_missed_blocks`; the hit rate is stripped)."""
    return {"timing_metrics": timing, "first_iter": first_iter, "last_iter": last_iter, "kv_cache_metrics": kv_blocks}


def step_metric(iteration: int, forward: tuple[float, float], sample: tuple[float, float], *,
                gpu_forward_ms: float, gpu_sample_ms: float) -> dict:
    """One iteration of `time_breakdown_metrics.step_metrics`: its forward and sampling (start,
    end) in steady seconds, and their GPU times in ms."""
    return {"iter": iteration, "forward_start_time": forward[0], "forward_end_time": forward[1],
            "sample_start_time": sample[0], "sample_end_time": sample[1],
            "gpu_forward_time": gpu_forward_ms, "gpu_sample_time": gpu_sample_ms}


def worker_record(request_id: int | str, perf: dict, *, ctx_request_id: int | None = None,
                  disagg_request_id: int | None = None, steps: list[dict] | None = None,
                  status: str | None = "complete") -> dict:
    """A `WorkerPerfMetricsRecord`: the engine's own request id, its perf metrics, on a
    disaggregated worker the ids its `disaggregated_params` carry, and the iterations' times when
    asked for (`step_metric`). Without `status`, the item the legacy `/perf_metrics` endpoint
    returned for the same request."""
    record: dict = {"request_id": request_id, "perf_metrics": perf}
    if ctx_request_id is not None:
        record["ctx_request_id"] = ctx_request_id
    if steps:
        record["time_breakdown_metrics"] = {"step_metrics": steps}
    if status is not None:
        record["status"] = status
    if disagg_request_id is not None:
        record["disagg_request_id"] = disagg_request_id
    return record


def disagg_record(
    *,
    ctx_server: str,
    gen_server: str,
    arrival: float,
    ctx_dispatch: float,
    first_token: float,
    ctx_timing: dict | None,
    gen_timing: dict | None,
    disagg_request_id: int,
) -> dict:
    """A `DisaggPerfMetricsRecord`. The phases are what the workers' headers said, so each carries
    only the four times the headers hold, under the disagg id (`combine_disagg_metrics` names them
    `str(disagg_request_id or ctx_request_id)`): the workers' engine ids are not in this file."""
    record: dict = {
        "ctx_server": ctx_server,
        "gen_server": gen_server,
        "disagg_server_arrival_time": arrival,
        "disagg_ctx_dispatch_time": ctx_dispatch,
        "disagg_server_first_token_time": first_token,
        "status": "complete",
    }
    for field, timing in (("ctx_perf_metrics", ctx_timing), ("gen_perf_metrics", gen_timing)):
        if timing:
            record[field] = {"request_id": disagg_request_id, "perf_metrics": {"timing_metrics": timing}}
    record["disagg_request_id"] = disagg_request_id
    return record


class PerfMetricsJsonl:
    """`perf_metrics-<server_kind>-<hostname>-<pid>-<YYYYmmddTHHMMSSZ>.jsonl` in `folder`, named when
    the server starts; one compact line per finished response. The disaggregated server's kind is
    `disagg`; a worker's is not confirmed upstream, and `server` (the phase name a worker reports
    under) is used."""

    def __init__(self, folder: Path, server_kind: str):
        folder.mkdir(parents=True, exist_ok=True)
        started = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        self.path = folder / f"perf_metrics-{server_kind}-{socket.gethostname()}-{os.getpid()}-{started}.jsonl"

    def write(self, record: dict) -> None:
        with self.path.open("a", encoding="utf-8") as output:
            output.write(compact_json(record) + "\n")


def compact_json(value) -> str:
    """A perf record (or the legacy endpoint's list of items) as TensorRT-LLM writes it."""
    return json.dumps(value, separators=(",", ":"), allow_nan=False)


# -- metrics headers: a worker's timings, as the disaggregated server receives them -----------

SERVER_TIMING = "Server-Timing"
START_END_TIME = "X-TRTLLM-Start-End-Time"
RETURN_METRICS = "X-TRTLLM-return-metrics"  # the request header that asks a worker for them
PERF_METRICS_EVENT = b"event: trtllm.perf_metrics"

# (name, start, end) as `build_metrics_headers` measures a worker phase.
_PHASE_DURATIONS = (
    ("queue", "arrival_time", "first_scheduled_time"),
    ("ttft", "arrival_time", "first_token_time"),
    ("e2e", "arrival_time", "last_token_time"),
    ("kv_transfer", "kv_cache_transfer_start", "kv_cache_transfer_end"),
)
_FROM_DURATIONS = (("queue", "first_scheduled_time"), ("ttft", "first_token_time"), ("e2e", "last_token_time"))


def metrics_headers(timing: Mapping[str, float | None]) -> dict[str, str]:
    """The `server` phase's headers: durations in ms (6 decimals), start and end in steady s."""
    start_end = [f"server-{name};ts={timing[field]:.9f}"
                 for name, field in (("start", "arrival_time"), ("end", "last_token_time"))
                 if timing.get(field) is not None]
    durations = [f"server_{name};dur={(timing[end] - timing[start]) * 1000:.6f}"
                 for name, start, end in _PHASE_DURATIONS
                 if timing.get(start) is not None and timing.get(end) is not None]
    return {SERVER_TIMING: ", ".join(durations), START_END_TIME: ", ".join(start_end)}


def perf_metrics_event(headers: Mapping[str, str]) -> bytes:
    """What follows the last event of a streamed reply in place of the headers."""
    return PERF_METRICS_EVENT + b"\ndata: " + json.dumps(dict(headers), separators=(",", ":")).encode() + b"\n\n"


def headers_in_event(event: bytes) -> dict[str, str]:
    """The headers a `trtllm.perf_metrics` event carries."""
    data = b"".join(line[5:].strip() for line in event.split(b"\n") if line.startswith(b"data:"))
    return json.loads(data)


def timing_from_headers(headers: Mapping[str, str]) -> dict[str, float]:
    """A worker's phase as the disaggregated server rebuilds it (`build_metrics_record_from_headers`):
    arrival and last token from the start/end times, first scheduled and first token from the
    durations. The KV transfer duration has no time to go back to, so it is dropped."""
    timing: dict[str, float] = {}
    for item in headers.get(START_END_TIME, "").split(","):
        name, _, ts = item.strip().partition(";ts=")
        if name in ("server-start", "server-end"):
            timing["arrival_time" if name == "server-start" else "last_token_time"] = float(ts)
    durations = {}
    for item in headers.get(SERVER_TIMING, "").split(","):
        name, _, dur = item.strip().partition(";dur=")
        if name.startswith("server_"):
            durations[name.removeprefix("server_")] = float(dur) / 1000
    if "arrival_time" in timing:
        for name, field in _FROM_DURATIONS:
            if name in durations:
                timing.setdefault(field, timing["arrival_time"] + durations[name])
    return timing


# -- post-processor hook records --------------------------------------------------------------


class RawOutputDump:
    """The `RawOutputDump` hook's records: `<dir>/<YYYY-MM-DDTHH>/raw-<pid>.jsonl`, one line per
    (request, output) when it finishes, the hour of `finished_at` (UTC) naming the folder."""

    def __init__(self, directory: Path):
        self.directory = directory
        logging.getLogger("tensorrt_llm.executor.raw_output_hook").info("Recording raw model output to %s", directory)

    def write(self, *, request_id: int, disagg_request_id: int | None, started_at: str, frames: list[str],
              streaming: bool, aborted: bool) -> None:
        finished_at = utc_now_iso()
        line = raw_output_line(request_id, disagg_request_id, started_at=started_at, finished_at=finished_at,
                               frames=frames, streaming=streaming, aborted=aborted)
        folder = self.directory / finished_at[:13]
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / f"raw-{os.getpid()}.jsonl").open("a", encoding="utf-8") as output:
            output.write(line + "\n")


def raw_output_line(request_id: int, disagg_request_id: int | None, *, started_at: str, finished_at: str,
                    frames: list[str], streaming: bool, aborted: bool) -> str:
    """One `raw_output` record: the engine id and the disagg id as strings, times as
    `datetime.isoformat()` writes them, the output's text whole and as the frames it streamed in."""
    return json.dumps({
        "event": "raw_output",
        "request_id": str(request_id),
        "disagg_request_id": None if disagg_request_id is None else str(disagg_request_id),
        "output_index": 0,
        "finished_at": finished_at,
        "started_at": started_at,
        "streaming": streaming,
        "aborted": aborted,
        "text": "".join(frames),
        "frames": list(frames),
    }, ensure_ascii=False, separators=(",", ":"))


# -- text logs --------------------------------------------------------------------------------


_LOG_FORMAT = "[%(asctime)s] %(message)s"
_LOG_DATE_FORMAT = "%m/%d/%Y-%H:%M:%S"


class TrtllmLogger:
    """tensorrt_llm.logger.logger: `[MM/DD/YYYY-HH:MM:SS] [TRT-LLM] [I] message` on stdout, local
    time; the message parts are joined by spaces (`logger.error(msg, traceback)`), and `debug` is
    printed at the verbose severity, `[V]`."""

    _SEVERITIES = {"error": ("[E]", logging.ERROR), "info": ("[I]", logging.INFO), "debug": ("[V]", logging.DEBUG)}

    def __init__(self, logger: logging.Logger):
        self._logger = logger

    def _log(self, severity: str, *msg: object) -> None:
        tag, level = self._SEVERITIES[severity]
        self._logger.log(level, " ".join(["[TRT-LLM]", tag, *map(str, msg)]))

    def error(self, *msg: object) -> None:
        self._log("error", *msg)

    def info(self, *msg: object) -> None:
        self._log("info", *msg)

    def debug(self, *msg: object) -> None:
        self._log("debug", *msg)


def trtllm_logger(level: int = logging.INFO) -> TrtllmLogger:
    """Set up stdout as a TensorRT-LLM process has it: the `TRT-LLM` logger with its own handler, and
    the root logger in the same format for the standard-library loggers (the hook's)."""
    handler = logging.StreamHandler(stream=sys.stdout)
    handler.setFormatter(logging.Formatter(fmt=_LOG_FORMAT, datefmt=_LOG_DATE_FORMAT))
    logging.basicConfig(level=logging.INFO, format=_LOG_FORMAT, datefmt=_LOG_DATE_FORMAT, stream=sys.stdout)
    logger = logging.getLogger("TRT-LLM")
    logger.propagate = False
    logger.addHandler(handler)
    logger.setLevel(level)
    return TrtllmLogger(logger)


# -- OpenTelemetry spans ----------------------------------------------------------------------

_W3C = TraceContextTextMapPropagator()


class LlmRequestSpans:
    """A worker's `llm_request` spans (scope `trt.llm`, kind SERVER), one per finished output, child of
    the caller's `traceparent`. The resource names the process by host and pid. Exported as OTLP JSON
    lines to `path`, where trtllm-serve would send them to `--otlp_traces_endpoint`."""

    def __init__(self, path: Path, service: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        resource = Resource.create({"service.name": service, "host.name": socket.gethostname(), "process.pid": os.getpid()})
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
        self._tracer = self._provider.get_tracer("trt.llm")

    def record(self, request_id: int, times: Mapping[str, float], *, request_headers: Mapping[str, str],
               max_tokens: int, prompt_tokens: int, completion_tokens: int, finish_reason: str) -> None:
        def latency(start: str, end: str) -> float:
            return times[end] - times[start] if start in times and end in times else -1.0

        span = self._tracer.start_span(
            "llm_request",
            context=_W3C.extract(request_headers),
            kind=SpanKind.SERVER,
            start_time=_wall_ns(times["arrival_time"]),
            attributes={
                "gen_ai.request.id": request_id,
                "gen_ai.request.max_tokens": max_tokens,
                "gen_ai.request.n": 1,
                "gen_ai.usage.prompt_tokens": prompt_tokens,
                "gen_ai.usage.completion_tokens": completion_tokens,
                "gen_ai.latency.time_to_first_token": latency("arrival_time", "first_token_time"),
                "gen_ai.latency.e2e": latency("arrival_time", "last_token_time"),
                "gen_ai.latency.time_in_queue": latency("arrival_time", "first_scheduled_time"),
                "gen_ai.latency.kv_cache_transfer_time": latency("kv_cache_transfer_start", "kv_cache_transfer_end"),
                "gen_ai.response.finish_reasons": json.dumps([finish_reason]),
            },
        )
        for event in ("kv_cache_transfer_start", "kv_cache_transfer_end"):
            if event in times:
                span.add_event(event, timestamp=_wall_ns(times[event]))
        span.end(end_time=_wall_ns(times["last_token_time"]))

    def shutdown(self) -> None:
        self._provider.shutdown()


def _wall_ns(steady: float) -> int:
    """A steady-clock time on the wall clock, as TensorRT-LLM places its span times: shifted by
    the clocks' difference now."""
    return round((steady + time.time() - steady_now()) * 1e9)


# -- disaggregated request ids ----------------------------------------------------------------

_MAX_INT64 = (1 << 63) - 1
_MIN_DISAGG_ID = 1 << 40


class DisaggRequestIds:
    """`0(1) | timestamp_ms(39) | node_id(8) | process_id(6) | counter(10)`, mapped into
    [2^40, 2^63 - 1). The timestamp is steady-clock ms, so an id says nothing about wall time. The
    process id is 0 outside fleet mode (`TRTLLM_DISAGG_WORKER_PROCESS_ID`)."""

    def __init__(self):
        self._node_id = uuid.getnode() % 256
        self._counter = itertools.count()

    def next(self) -> int:
        timestamp_ms = int(steady_now() * 1000) & ((1 << 39) - 1)
        raw = (timestamp_ms << 24) | (self._node_id << 16) | (next(self._counter) & 0x3FF)
        return raw % (_MAX_INT64 - _MIN_DISAGG_ID) + _MIN_DISAGG_ID
