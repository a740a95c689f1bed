"""trace-join's JSON lines (`tracejoin.log.v1`, docs/tracejoin-log-schema.md) through structlog.

The processor chain is composed in one place, `processor_chain`; each processor does one job. When
the application has not configured structlog, the middleware configures structlog with that chain,
so that what the application logs lands in the same file carrying the ids the middleware bound.
The middleware's own lifecycle records (`RecordLog`) come out as that chain writes them, but are put
together directly and rendered with orjson: they are written on every request, and through the
chain they cost more than a small app's whole request (docs/performance.md, benchmark 3).
"""

from __future__ import annotations

import contextvars
import os
import socket
import sys
import threading
import time
from typing import Any

import orjson
import structlog
from structlog.contextvars import STRUCTLOG_KEY_PREFIX

from .settings import STDERR

SCHEMA = "tracejoin.log.v1"

# Written first on every line, in the schema's order: what and who, then the ids, then the rest.
# A line's schema, ts, level and event are its own; the others come from its fields, the bound
# contextvars or the process identity.
WHO_AND_IDS = (
    "service", "role", "worker", "process",
    "internal_id", "x_request_id", "trace_id", "span_id", "parent_span_id",
    "reply_id", "disagg_request_id", "engine_request_id", "engine_worker",
)
LEADING_FIELDS = ("schema", "ts", "level", "event", *WHO_AND_IDS)

EventDict = dict[str, Any]


def add_schema(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    event_dict["schema"] = SCHEMA
    return event_dict


def add_timestamp(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    event_dict["ts"] = utc_timestamp()
    return event_dict


# (second, "YYYY-MM-DDTHH:MM:SS") of the last line: formatting the date is most of a timestamp's cost,
# and lines come many to a second. One tuple, so that threads read a matching pair.
_second_formatted: tuple[int, str] = (-1, "")


def utc_timestamp() -> str:
    """Now as `2026-11-30T10:40:30.123456Z`: always six digits of microseconds."""
    global _second_formatted
    second, nanoseconds = divmod(time.time_ns(), 1_000_000_000)
    cached_second, formatted = _second_formatted
    if second != cached_second:
        formatted = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(second))
        _second_formatted = (second, formatted)
    return f"{formatted}.{nanoseconds // 1000:06d}Z"


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


render_json = structlog.processors.JSONRenderer(separators=(",", ":"))


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
        render_json,
    ]


class RecordLog:
    """The middleware's own logger (lifecycle and tap records): `log.info(event, **fields)`.

    A record gets what processor_chain gives an application line (the bound ids, the level, the
    process identity, the timestamp, the schema, the leading fields first) and goes through the
    same writer; only the rendering is orjson's where that gives JSONRenderer's very line.
    Independent of how (or whether) structlog is configured.
    """

    def __init__(self, service: str, role: str, worker: str, writer: structlog.WriteLogger):
        self.process_identity = AddProcessIdentity(service, role, worker).identity
        self.writer = writer

    def info(self, event: str, **fields: Any) -> None:
        self._write("info", event, fields)

    def warning(self, event: str, **fields: Any) -> None:
        self._write("warning", event, fields)

    def error(self, event: str, **fields: Any) -> None:
        self._write("error", event, fields)

    def _write(self, level: str, event: str, fields: EventDict) -> None:
        bound = bound_contextvars()
        # Who wins a key, as in processor_chain: the level, timestamp and schema over everything,
        # then the record's fields, then what is bound, then the process identity.
        known = {**self.process_identity, **bound, **fields}
        record = {"schema": SCHEMA, "ts": utc_timestamp(), "level": level, "event": event}
        for key in WHO_AND_IDS:
            if key in known:
                record[key] = known[key]
        # then the others in the order the chain leaves them: the fields', then the bound ones'
        for key, value in fields.items():
            record.setdefault(key, value)
        for key, value in bound.items():
            record.setdefault(key, value)
        self.writer.msg(_render(record))


# structlog's contextvars (a key's ContextVar is named STRUCTLOG_KEY_PREFIX + key) → their keys, as
# they are met. structlog keeps its ContextVars for the life of the process, so this stays as small.
_bound_keys: dict[contextvars.ContextVar, str] = {}


def bound_contextvars() -> EventDict:
    """structlog.contextvars.get_contextvars(), the same dict in the same order, in a third of the
    time: the key of each ContextVar is worked out once per process, not once per line."""
    bound = {}
    for var, value in contextvars.copy_context().items():
        key = _bound_keys.get(var)
        if key is None:
            if not var.name.startswith(STRUCTLOG_KEY_PREFIX):
                continue
            key = _bound_keys[var] = var.name[len(STRUCTLOG_KEY_PREFIX):]
        if value is not Ellipsis:  # what unbind_contextvars leaves
            bound[key] = value
    return bound


def _render(record: EventDict) -> str:
    """JSONRenderer's line for `record`, by orjson (20 times faster) when orjson writes the same line:
    when it is ASCII (JSONRenderer escapes the rest) and holds nothing orjson refuses (an integer
    past 64 bits that the app bound, say). Both write what JSON cannot hold as its repr()."""
    try:
        line = orjson.dumps(record, default=repr).decode()
        if line.isascii():
            return line
    except orjson.JSONEncodeError:
        pass
    return render_json(None, "", record)


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


def configure_structlog(service: str, role: str, worker: str, writer: structlog.WriteLogger) -> None:
    """Send every structlog line of the process to `writer` in the trace-join schema."""
    structlog.configure(
        processors=processor_chain(service, role, worker),
        logger_factory=lambda *args: writer,
        cache_logger_on_first_use=False,
    )
