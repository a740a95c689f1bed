"""trace-join's JSON lines (`tracejoin.log.v1`, docs/tracejoin-log-schema.md) through structlog.

The processor chain is composed in one place, `processor_chain`; each processor does one job. When
the application has not configured structlog, the middleware configures structlog with that chain,
so that what the application logs lands in the same file carrying the request's ids.
The middleware's own lifecycle records (`RecordLog`) come out as that chain writes them, but are put
together directly and rendered with orjson: they are written on every request, and through the
chain they cost more than a small app's whole request (docs/performance.md, benchmark 3).
"""

from __future__ import annotations

import os
import socket
import sys
import threading
import time
from contextvars import ContextVar
from typing import Any

import orjson
import structlog

from .settings import STDERR

SCHEMA = "tracejoin.log.v1"

# Written first on every line, in the schema's order: what and who, then the ids, then the rest.
# A line's schema, ts, level and event are its own; the others come from its fields, the bound
# contextvars or the process identity.
REQUEST_IDS = (
    "internal_id", "x_request_id", "trace_id", "span_id", "parent_span_id",
    "reply_id", "disagg_request_id", "engine_request_id", "engine_worker",
)
WHO_AND_IDS = ("service", "role", "worker", "process", *REQUEST_IDS)
LEADING_FIELDS = ("schema", "ts", "level", "event", *WHO_AND_IDS)

EventDict = dict[str, Any]


# The ids of the request being served in this context, set by the middleware instead of binding them
# into structlog's contextvars when structlog runs processor_chain: one context variable to set and
# reset per request rather than one per key.
request_ids: ContextVar[dict[str, str] | None] = ContextVar("tracejoin_request_ids", default=None)


def add_request_ids(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    """What merge_contextvars would add had the ids been bound: each id the line does not have yet."""
    ids = request_ids.get()
    if ids is not None:
        for key, value in ids.items():
            event_dict.setdefault(key, value)
    return event_dict


def add_schema(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    event_dict["schema"] = SCHEMA
    return event_dict


def add_timestamp(logger: Any, method_name: str, event_dict: EventDict) -> EventDict:
    event_dict["ts"] = utc_timestamp()
    return event_dict


# (second, "YYYY-MM-DDTHH:MM:SS") of the last line: formatting the date is most of a timestamp's cost,
# and lines come many to a second. One tuple, so that threads read a matching pair.
_second_formatted: tuple[int, str] = (-1, "")


def utc_timestamp(at_ns: int | None = None) -> str:
    """Now (or the instant `at_ns`, ns since the epoch) as `2026-11-30T10:40:30.123456Z`: always six
    digits of microseconds."""
    global _second_formatted
    second, nanoseconds = divmod(time.time_ns() if at_ns is None else at_ns, 1_000_000_000)
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
        # what the app bound (and the ids bind_engine_request_id and bind_disagg_request_id bound)
        structlog.contextvars.merge_contextvars,
        # the ids of the request being served, if any; after merge_contextvars, so that what the
        # app bound wins as it does over ids bound before it
        add_request_ids,
        structlog.processors.add_log_level,  # "warn" is written "warning", "exception" "error"
        AddProcessIdentity(service, role, worker),
        add_timestamp,
        add_schema,
        structlog.processors.format_exc_info,  # log.exception(...) keeps its traceback, as text
        put_leading_fields_first,
        render_json,
    ]


class RecordLog:
    """The middleware's own records (lifecycle and tap) of one serving process.

    A record is the line processor_chain writes for an application line logged while its request is
    served, with the same keys in the same order: the schema, timestamp, level and event, the process
    identity, the request's ids (`ids`, in the schema's order, as ServedRequest.ids gives them), then
    the record's own fields. The ids are handed in rather than read back from structlog's contextvars,
    and the line is rendered by orjson where that gives JSONRenderer's very line: a record is written
    twice per request, and through the chain it cost more than a small app's whole request
    (docs/performance.md, benchmark 3). Independent of how (or whether) structlog is configured.
    """

    def __init__(self, service: str, role: str, worker: str, writer: LineWriter):
        self.process_identity = AddProcessIdentity(service, role, worker).identity
        self.writer = writer

    def write(self, level: str, event: str, ids: dict[str, str], fields: EventDict, at_ns: int | None = None) -> None:
        """`at_ns` is when what the record states happened, if not when it is written."""
        record = {
            "schema": SCHEMA, "ts": utc_timestamp(at_ns), "level": level, "event": event,
            **self.process_identity, **ids, **fields,
        }
        self.writer.write_line(_render(record))


def _render(record: EventDict) -> bytes:
    """JSONRenderer's line for `record`, by orjson (20 times faster) when orjson writes the same line:
    when it is ASCII (JSONRenderer escapes the rest) and holds nothing orjson refuses (an integer
    past 64 bits, say). Both write what JSON cannot hold as its repr()."""
    try:
        line = orjson.dumps(record, default=repr, option=orjson.OPT_APPEND_NEWLINE)
        if line.isascii():
            return line
    except orjson.JSONEncodeError:
        pass
    return render_json(None, "", record).encode() + b"\n"


class LineWriter:
    """Appends whole lines to a file (or stderr), each with one write() under a lock, so that a reader
    tailing the file (the collector) never sees half a line and the lines of several loggers never
    interleave. Also a structlog logger: structlog hands the line processor_chain rendered to the
    method named after its level, so the application's lines go through the same writer."""

    def __init__(self, fd: int):
        self.fd = fd
        self._lock = threading.Lock()

    def write_line(self, line: bytes) -> None:
        with self._lock:
            while line:  # a write to a pipe (stderr) may take only part of a long line
                line = line[os.write(self.fd, line):]

    def msg(self, message: str) -> None:
        self.write_line(message.encode() + b"\n")

    log = debug = info = warn = warning = err = error = fatal = critical = exception = failure = msg


_destinations: dict[str, LineWriter] = {}
_destinations_lock = threading.Lock()


def destination(log: str) -> LineWriter:
    """The writer for `log` (a path, or STDERR), opened once per process."""
    key = log if log == STDERR else os.path.abspath(log)
    with _destinations_lock:
        if key not in _destinations:
            fd = sys.stderr.fileno() if log == STDERR else os.open(key, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            _destinations[key] = LineWriter(fd)
        return _destinations[key]


def configure_structlog(service: str, role: str, worker: str, writer: LineWriter) -> list:
    """Send every structlog line of the process to `writer` in the trace-join schema; returns the chain."""
    processors = processor_chain(service, role, worker)
    structlog.configure(processors=processors, logger_factory=lambda *args: writer, cache_logger_on_first_use=False)
    return processors
