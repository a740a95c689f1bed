"""vLLM 0.33's records, written exactly as vLLM writes them, for the demo's simulated vLLM servers
and the tests (vLLM itself needs a GPU and CUDA's wheels):

- the log: vLLM's formatter (`vllm/logger.py`, `vllm/logging_utils/formatter.py`) on stdout,
  `(<process> pid=<pid>) <LEVEL> <MM-DD HH:MM:SS> [<file>:<line>] <message>` in local time, a message
  of several lines written a line each with the same prefix; the request lines of
  `--enable-log-requests` and `--enable-log-outputs` (`request_logger.py`, `v1/engine/async_llm.py`);
- the spans: one `llm_request` per finished request (`vllm/tracing/otel.py`,
  `v1/engine/output_processor.py`), kind SERVER, scope `vllm.tracing.otel`, the external id as
  `gen_ai.request.id`, latencies in seconds, a resource naming the process by `vllm.process_id`.
"""

from __future__ import annotations

import logging
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path

from opentelemetry.context import Context
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import SpanKind
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_FORMAT = "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"
_DATE_FORMAT = "%m-%d %H:%M:%S"


def log_line(message: str, *, process: str = "APIServer", pid: int = 4182, level: str = "INFO",
             at: str = "08-20 10:15:02", where: str = "async_llm.py:587") -> str:
    """One line of vLLM's log as its formatter writes it, with the time (`%m-%d %H:%M:%S`) given."""
    fileinfo, lineno = where.rsplit(":", 1)
    return _FORMAT % {"vllm_process_name": process, "process": pid, "levelname": level, "asctime": at,
                      "fileinfo": fileinfo, "lineno": int(lineno), "message": message}


def random_uuid() -> str:
    """vLLM 0.33's `random_uuid()`: 16 hex digits."""
    return f"{secrets.randbits(64):016x}"


def engine_request_id(external_id: str) -> str:
    """`input_processor.py`: the external id and 8 more hex digits."""
    return f"{external_id}-{random_uuid()[:8]}"


class _NewLineFormatter(logging.Formatter):
    """vLLM's NewLineFormatter: each line of a message after the first gets the first's prefix,
    after a \\r. `fileinfo` and `lineno` are where vLLM would log the message from, given as
    `extra={"at": "file.py:123"}`."""

    def format(self, record: logging.LogRecord) -> str:
        at = getattr(record, "at", None)
        if at:
            record.fileinfo, line = at.rsplit(":", 1)
            record.lineno = int(line)
        else:
            record.fileinfo = os.path.basename(record.pathname)
        record.vllm_process_name = getattr(record, "vllm_process_name", "APIServer")
        message = super().format(record)
        if record.message:
            prefix = message.split(record.message)[0]
            message = message.replace("\n", "\r\n" + prefix)
        return message


class VllmLogger:
    """The API server's log lines, as vLLM writes them on stdout."""

    def __init__(self, name: str = "vllm"):
        handler = logging.StreamHandler(stream=sys.stdout)
        handler.setFormatter(_NewLineFormatter(_FORMAT, _DATE_FORMAT))
        self._logger = logging.getLogger(name)
        self._logger.propagate = False
        self._logger.addHandler(handler)
        self._logger.setLevel(logging.DEBUG)

    def _log(self, level: int, at: str, message: str, exc_info: bool = False) -> None:
        self._logger.log(level, message, extra={"at": at}, exc_info=exc_info)

    def received(self, external_id: str, params: str) -> None:
        self._log(logging.INFO, "request_logger.py:66", f"Received request {external_id}: params: {params}, "
                                                        f"lora_request: None.")

    def added(self, engine_id: str) -> None:
        self._log(logging.INFO, "async_llm.py:587", f"Added request {engine_id}.")

    def generated(self, reply_id: str, output: str, finish_reason: str, *, streamed: bool) -> None:
        how = " (streaming complete)" if streamed else ""
        self._log(logging.INFO, "request_logger.py:119",
                  f"Generated response {reply_id}{how}: output: {output!r}, finish_reason: {finish_reason}")

    def aborted(self, engine_ids: list[str]) -> None:
        self._log(logging.INFO, "async_llm.py:959", f"Aborted request(s) {','.join(engine_ids)}.")

    def error(self, at: str, message: str) -> None:
        """An error with the exception being handled, its traceback a line each."""
        self._log(logging.ERROR, at, message, exc_info=True)


def sampling_params(max_tokens: int, kv_transfer_params: Mapping | None = None) -> str:
    """SamplingParams.__repr__ (`vllm/sampling_params.py`), its fields in order, `extra_args` last."""
    extra = None if kv_transfer_params is None else {"kv_transfer_params": dict(kv_transfer_params)}
    return (f"SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, repetition_penalty=1.0, "
            f"temperature=1.0, top_p=1.0, top_k=0, min_p=0.0, seed=None, stop=[], stop_token_ids=[], "
            f"bad_words=[], include_stop_str_in_output=False, ignore_eos=False, max_tokens={max_tokens}, "
            f"min_tokens=0, logprobs=None, prompt_logprobs=None, skip_special_tokens=True, "
            f"spaces_between_special_tokens=True, truncate_prompt_tokens=None, structured_outputs=None, "
            f"extra_args={extra!r})")


class LlmRequestSpans:
    """The API server's `llm_request` spans, exported as OTLP JSON lines to `path` where vLLM would
    send them to `--otlp-traces-endpoint`. The service is OTEL_SERVICE_NAME's."""

    def __init__(self, path: Path, service: str):
        path.parent.mkdir(parents=True, exist_ok=True)
        resource = Resource.create({"service.name": service, "vllm.process_id": str(os.getpid()),
                                    "vllm.instrumenting_module_name": "vllm.llm_engine"})
        self._provider = TracerProvider(resource=resource)
        self._provider.add_span_processor(SimpleSpanProcessor(FileSpanExporter(path)))
        self._tracer = self._provider.get_tracer("vllm.tracing.otel")

    def record(self, external_id: str, times: Mapping[str, float], *, headers: Mapping[str, str],
               max_tokens: int, prompt_tokens: int, completion_tokens: int) -> None:
        """`times`: wall-clock seconds of arrival, scheduled, first_token, last_token."""
        parent = TraceContextTextMapPropagator().extract(dict(headers), context=Context())
        start_ns = int(times["arrival"] * 1e9)
        span = self._tracer.start_span("llm_request", context=parent, kind=SpanKind.SERVER, start_time=start_ns)
        span.set_attributes({
            "gen_ai.request.id": external_id,
            "gen_ai.request.max_tokens": max_tokens,
            "gen_ai.usage.prompt_tokens": prompt_tokens,
            "gen_ai.usage.completion_tokens": completion_tokens,
            "gen_ai.latency.time_in_queue": times["scheduled"] - times["arrival"],
            "gen_ai.latency.time_to_first_token": times["first_token"] - times["arrival"],
            "gen_ai.latency.e2e": times["last_token"] - times["arrival"],
            "gen_ai.latency.time_in_model_prefill": times["first_token"] - times["scheduled"],
            "gen_ai.latency.time_in_model_decode": times["last_token"] - times["first_token"],
            "gen_ai.latency.time_in_model_inference": times["last_token"] - times["scheduled"],
        })
        span.end(end_time=int(times["last_token"] * 1e9))

    def shutdown(self) -> None:
        self._provider.shutdown()
