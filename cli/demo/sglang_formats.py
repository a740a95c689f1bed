"""SGLang 0.5.23's records, written exactly as SGLang writes them, for the demo's simulated SGLang
servers and the tests (SGLang itself needs a GPU):

- every log line's stamp, `[%Y-%m-%d %H:%M:%S[.mmm][ DP0][ TP0]…] `, local time
  (`sglang/srt/utils/common.py`, the scheduler's prefix `sglang/srt/managers/scheduler.py`);
- the request log in its JSON format (`--log-requests --log-requests-format json`,
  `sglang/srt/utils/request_logger.py`, `log_utils.py`): `request.received` and `request.finished`;
- `ReqTimeStats(…)` (`--enable-request-time-stats-logging`, `schedule_batch.py`, `req_time_stats.py`);
- the request-metrics exporter's lines (`--export-metrics-to-file`, `request_metrics_exporter.py`);
- its spans (`--enable-trace`, `sglang/srt/observability/trace.py`): a request's root span `<role>
  Req <rid[:8]>`, INTERNAL, scope `sglang server`, with `rid` (the rid's last `_` part), `module` and
  `bootstrap_room` in hex, and at finish `gen_ai.request.id`, the whole rid; 64-bit trace and span
  ids, a caller's `traceparent` kept.
"""

from __future__ import annotations

import json
import random
import uuid
from datetime import datetime
from pathlib import Path

from collections.abc import Mapping

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExporter
from opentelemetry.sdk.trace.id_generator import IdGenerator
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator


def new_rid() -> str:
    """SGLang's rid when a request has none: `uuid4().hex`."""
    return uuid.uuid4().hex


def new_bootstrap_room() -> int:
    """The router's `random.randint(0, 2**63 - 1)`."""
    return random.randint(0, 2**63 - 1)


def stamp(at: datetime, ranks: str = "", milliseconds: bool = False) -> str:
    """`[2026-08-20 10:15:04 TP0] `: `ranks` as the scheduler's prefix (` TP0`), local time."""
    ms = f".{at.microsecond // 1000:03d}" if milliseconds else ""
    return f"[{at:%Y-%m-%d %H:%M:%S}{ms}{ranks}] "


def request_log_line(at: datetime, event: str, rid: str | None, obj: dict | None = None,
                     out: dict | None = None) -> str:
    """A request log line, JSON format: the stamp, then `timestamp` (`datetime.now().isoformat()`)."""
    record: dict = {"timestamp": at.isoformat(), "event": event}
    if rid is not None:
        record["rid"] = rid
    if obj is not None:
        record["obj"] = obj
    if out is not None:
        record["out"] = out
    return stamp(at) + json.dumps(record)


def generate_req_input(rid: str, text: str, max_new_tokens: int, room: int | None, host: str | None,
                       port: int | None) -> dict:
    """GenerateReqInput as the request log dumps it (its fields, nulls included, abridged)."""
    return {"text": text, "input_ids": None, "sampling_params": {"max_new_tokens": max_new_tokens},
            "rid": rid, "stream": False, "bootstrap_host": host, "bootstrap_port": port, "bootstrap_room": room}


def meta_info(rid: str, finish_reason: str, prompt_tokens: int, completion_tokens: int, e2e_latency: float,
              queue_time: float | None = None) -> dict:
    meta = {"id": rid, "finish_reason": {"type": finish_reason}, "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens, "cached_tokens": 0, "e2e_latency": e2e_latency}
    if queue_time is not None:
        meta["queue_time"] = queue_time
    return meta


def req_time_stats_line(at: datetime, rid: str, room: int | None, kind: str, *, input_len: int, output_len: int,
                        queue_ms: float, forward_ms: float, transfer_ms: float | None, entry_time: float,
                        ranks: str = " TP0") -> str:
    """The scheduler's `ReqTimeStats` line at a request's finish; `kind` prefill, decode or unified."""
    durations = []
    if kind != "unified":
        durations += ["bootstrap_duration=1.00ms", "alloc_wait_duration=0.10ms"]
    if transfer_ms is not None:
        durations.append(f"transfer_duration={transfer_ms:.2f}ms")
    durations += [f"queue_duration={queue_ms:.2f}ms", f"forward_duration={forward_ms:.2f}ms",
                  f"entry_time={entry_time:.3f}"]
    return (stamp(at, ranks) + f"ReqTimeStats(rid={rid}, bootstrap_room={room}, input_len={input_len}, "
            f"cached_input_len=0, output_len={output_len}, attempts=1, type={kind}): " + ", ".join(durations))


def server_args_line(at: datetime, mode: str, port: int) -> str:
    """The launch's `server_args=ServerArgs(…)` line (abridged), naming the disaggregation mode."""
    return stamp(at) + (f"server_args=ServerArgs(model_path='demo/tiny-llm', host='127.0.0.1', port={port}, "
                        f"disaggregation_mode='{mode}', enable_trace=True, log_requests=True)")


def metrics_line(parameters: dict, meta: dict, received_ts: float | None = None) -> str:
    """The exporter's line: the request's non-null fields as a JSON string, then the finish's meta_info."""
    row = {"request_parameters": json.dumps({k: v for k, v in parameters.items() if v is not None}), **meta}
    if received_ts is not None:
        row["request_received_ts"] = received_ts
    return json.dumps(row)


def metrics_file_name(at: datetime) -> str:
    return f"sglang-request-metrics-{at:%Y%m%d_%H}.log"


class _SixtyFourBitIds(IdGenerator):
    """SGLang's id generator: `random.getrandbits(64)` for trace and span ids alike."""

    def generate_span_id(self) -> int:
        return random.getrandbits(64)

    def generate_trace_id(self) -> int:
        return random.getrandbits(64)


class RequestSpans:
    """A server's request root spans, given to `exporter` as they end (the demo's writes OTLP JSON
    lines where SGLang would send them to `--otlp-traces-endpoint`: `in_file`)."""

    def __init__(self, service: str, exporter: SpanExporter):
        self._provider = TracerProvider(resource=Resource.create({"service.name": service}),
                                        id_generator=_SixtyFourBitIds())
        self._provider.add_span_processor(SimpleSpanProcessor(exporter))
        self._tracer = self._provider.get_tracer("sglang server")

    @classmethod
    def in_file(cls, path: Path, service: str) -> "RequestSpans":
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(service, FileSpanExporter(path))

    def record(self, role: str, rid: str, room: int | None, start_s: float, end_s: float, *,
               prompt_tokens: int, completion_tokens: int, ttft_s: float, queue_s: float,
               headers: Mapping[str, str] | None = None) -> None:
        """`headers`: the request's, whose `traceparent` SGLang keeps."""
        parent = TraceContextTextMapPropagator().extract(dict(headers or {}), context=Context())
        span = self._tracer.start_span(f"{role} Req {rid.split('_')[-1][:8]}", context=parent,
                                       kind=SpanKind.INTERNAL, start_time=int(start_s * 1e9))
        attributes = {"rid": rid.split("_")[-1], "module": "sglang::request",
                      "gen_ai.request.id": rid, "gen_ai.usage.prompt_tokens": prompt_tokens,
                      "gen_ai.usage.completion_tokens": completion_tokens,
                      "gen_ai.latency.time_to_first_token": ttft_s, "gen_ai.latency.time_in_queue": queue_s,
                      "gen_ai.latency.e2e": end_s - start_s}
        if room is not None:
            attributes["bootstrap_room"] = hex(room)
        span.set_attributes(attributes)
        span.end(end_time=int(end_s * 1e9))

    def shutdown(self) -> None:
        self._provider.shutdown()
