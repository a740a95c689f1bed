"""trace-join's JSON lines (`tracejoin.log.v1`, docs/tracejoin-log-schema.md) through structlog.

The processor chain is composed in one place, `processor_chain`; each processor does one job. The
middleware writes its lifecycle records through a logger of its own built on that chain, and, when
the application has not configured structlog, configures structlog with the same chain, so that
what the application logs lands in the same file carrying the ids the middleware bound.
"""

from __future__ import annotations

import os
import socket
import sys
import threading
from datetime import datetime, timezone
from typing import Any

import structlog

from .settings import STDERR

SCHEMA = "tracejoin.log.v1"

# Written first on every line, in the schema's order: what and who, then the ids, then the rest.
LEADING_FIELDS = (
    "schema", "ts", "level", "event", "service", "role", "worker", "process",
    "internal_id", "x_request_id", "trace_id", "span_id", "parent_span_id",
    "reply_id", "disagg_request_id", "engine_request_id", "engine_worker",
)

EventDict = dict[str, Any]


def add_schema(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    event_dict["schema"] = SCHEMA
    return event_dict


def add_timestamp(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    # strftime rather than isoformat(): isoformat() drops the microseconds when they are zero.
    event_dict["ts"] = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return event_dict


class AddProcessIdentity:
    """service, role and worker on every line, also on lines logged outside any request; and the
    process as `host:pid`, the name TensorRT-LLM's perf-metrics and hook files give the same
    process, so the collector can tell that both names are one worker."""

    def __init__(self, service: str, role: str, worker: str):
        process = f"{socket.gethostname()}:{os.getpid()}"
        self.identity = {"service": service, "role": role, "worker": worker, "process": process}

    def __call__(self, logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
        for key, value in self.identity.items():
            event_dict.setdefault(key, value)
        return event_dict


def put_leading_fields_first(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    leading = {key: event_dict.pop(key) for key in LEADING_FIELDS if key in event_dict}
    return {**leading, **event_dict}


def processor_chain(service: str, role: str, worker: str) -> list:
    return [
        # the ids the middleware bound for the request being served, if any
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,  # "warn" is written "warning", "exception" "error"
        AddProcessIdentity(service, role, worker),
        add_timestamp,
        add_schema,
        structlog.processors.format_exc_info,  # log.exception(...) keeps its traceback, as text
        put_leading_fields_first,
        structlog.processors.JSONRenderer(separators=(",", ":")),
    ]


_destinations: dict[str, structlog.WriteLogger] = {}
_destinations_lock = threading.Lock()


def destination(log: str) -> structlog.WriteLogger:
    """The writer for `log` (a path, or STDERR), opened once per process, so that lines from several
    loggers never interleave. WriteLogger writes each line with one write() under its own lock and
    flushes it, so a reader (the collector tailing the file) never sees half a line."""
    key = log if log == STDERR else os.path.abspath(log)
    with _destinations_lock:
        if key not in _destinations:
            stream = sys.stderr if log == STDERR else open(key, "a", encoding="utf-8")  # noqa: SIM115
            _destinations[key] = structlog.WriteLogger(stream)
        return _destinations[key]


def record_logger(service: str, role: str, worker: str, writer: structlog.WriteLogger) -> Any:
    """The middleware's own logger; independent of how (or whether) structlog is configured."""
    return structlog.wrap_logger(
        writer, processors=processor_chain(service, role, worker), wrapper_class=structlog.BoundLogger
    )


def configure_structlog(service: str, role: str, worker: str, writer: structlog.WriteLogger) -> None:
    """Send every structlog line of the process to `writer` in the trace-join schema."""
    structlog.configure(
        processors=processor_chain(service, role, worker),
        logger_factory=lambda *args: writer,
        cache_logger_on_first_use=False,
    )
