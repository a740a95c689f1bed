"""trace-join's own JSON lines (`tracejoin.log.v1`), written by the middleware and the proxy.

The schema is in docs/tracejoin-log-schema.md.
"""

from __future__ import annotations

from ..ids import (
    DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, ENTRY_ROLES, INTERNAL_ID, REPLY_ID, TRACE_ID, X_REQUEST_ID,
)
from ..records import Record
from .parsing import Unparseable, field, hex_id, iso_to_ns, load_object

NAME = "tracejoin_jsonl"
SCHEMA = "tracejoin.log.v1"

# Fields that become columns or ids; everything else stays in attrs.
_LIFTED = {
    "schema", "ts", "level", "event", "role", "worker", "internal_id", "x_request_id", "trace_id",
    "span_id", "parent_span_id", "reply_id", "disagg_request_id", "engine_request_id", "engine_worker",
    "process",
}


def sniff(path: str, head: list[bytes]) -> bool:
    return any(b'"schema":"tracejoin.log.v1"' in line.replace(b" ", b"") for line in head)


class LineParser:
    def __init__(self, path: str):
        self.worker: str | None = None
        self.role: str | None = None
        self.aliases: dict[str, str] = {}

    def parse(self, line: bytes) -> list[Record]:
        obj = load_object(line)
        if obj.get("schema") != SCHEMA:
            raise Unparseable(f"not a {SCHEMA} line")
        event = field(obj, "event", (str,), required=True)
        worker = field(obj, "worker", (str,))
        role = field(obj, "role", (str,))
        if worker and not self.worker:
            self.worker, self.role = worker, role
        process = field(obj, "process", (str,))
        if worker and process and process != worker:
            self.aliases[process] = worker  # host:pid, as TensorRT-LLM's files name this worker
        record = Record(
            kind="tap" if event == "proxy.tap" else "log",
            name=event,
            time_ns=iso_to_ns(field(obj, "ts", (str,), required=True)),
            worker=worker,
            role=role,
            level=field(obj, "level", (str,)),
            entry=event == "request.start" and role in ENTRY_ROLES,
            trace_id=hex_id(field(obj, "trace_id", (str,)), 32),
            span_id=hex_id(field(obj, "span_id", (str,)), 16),
            parent_span_id=hex_id(field(obj, "parent_span_id", (str,)), 16),
        )
        status = field(obj, "status", (int, str))
        if status is not None:
            record.status = str(status)
        duration_ms = field(obj, "duration_ms", (int, float))
        if duration_ms is not None:
            record.duration_ns = int(duration_ms * 1_000_000)
        for key, kind in (
            ("internal_id", INTERNAL_ID),
            ("x_request_id", X_REQUEST_ID),
            ("reply_id", REPLY_ID),
            ("disagg_request_id", DISAGG_REQUEST_ID),
            ("upstream_internal_id", INTERNAL_ID),
            ("upstream_x_request_id", X_REQUEST_ID),
        ):
            record.add_id(kind, field(obj, key, (str, int)))
        record.add_id(TRACE_ID, record.trace_id)
        engine_id = field(obj, "engine_request_id", (str, int))
        if engine_id is not None:
            record.add_id(ENGINE_REQUEST_ID, engine_id, field(obj, "engine_worker", (str,)) or worker)
        record.attrs = {k: v for k, v in obj.items() if k not in _LIFTED} or None
        return [record]
