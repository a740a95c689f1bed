"""NVIDIA Dynamo logs: the stderr of the frontend and of each worker with `DYN_LOGGING_JSONL=1`.

Such a capture mixes JSON lines from Rust (`time`, `level`, `file`, `line`, `target`, `message`,
then the event's and the current span's fields), bridged Python lines (`target` "log"), plain text
(vLLM's own logs, readable-mode lines, tracebacks) and, with the `stderr` sink, request-trace rows.
Every line becomes a record; only a line that looks like JSON and is not, or has a wrong type, is
quarantined.

One file is one process, and its identity is learned from its own lines (as Dynamo 1.6.1 writes
them): a worker announces its discovery id (`FPM direct publisher started`, `worker_id`) and its
component (`Registered endpoint 'dynamo.prefill.generate' ...`), and its `handle_payload` span
lines carry both as `component` and `instance_id`; the frontend announces the address it serves
(`Starting HTTP(S) service`). The frontend's egress lines also name an `instance_id`/`worker_id`,
but that is the target worker's, so only the lines above are taken as the file's identity.
"""

from __future__ import annotations

import os
import re
from typing import NoReturn

from ..ids import INTERNAL_ID, TRACE_ID, X_REQUEST_ID, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID
from ..records import Record
from . import dynamo_request_trace
from .parsing import Unparseable, field, hex_id, iso_to_ns, load_object

NAME = "dynamo_jsonl"

# The fixed keys of a line and the trace-context keys, which become columns and ids.
_LIFTED = frozenset({
    "time", "level", "target", "message", "trace_id", "span_id", "parent_id", "request_id",
    "x_dynamo_request_id", "x_request_id", "span_name",
})
# The lifted keys whose values must be text, in the order a line's fields are read (the first bad
# one is the reason a line is quarantined); target, time and level are required.
_TEXT_FIELDS = (
    "message", "target", "span_name", "time", "level", "trace_id", "span_id", "parent_id", "request_id",
    "x_dynamo_request_id", "x_request_id",
)
_TEXT_OR_NONE = frozenset({str, type(None)})
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# Python workers print the id in text: "Decode Request ID: <uuid>", "Prefill Request ID: <uuid>".
_TEXT_REQUEST_ID = re.compile(rf"Request ID:\s*({_UUID})")
# TensorRT-LLM workers under Dynamo (PR #13970) map the id to the engine's own ids.
_ENGINE_ID_MAP = re.compile(
    rf"Engine ID map: request_id=({_UUID}) trtllm_client_id=(\d+) disagg_request_id=(\d+|None)"
)
# Readable-mode line: "2025-09-02T15:50:01.770028Z  INFO main.init: message"
_READABLE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))\s+([A-Z]+)\s+(.*)$")
_UUID_IN_TEXT = re.compile(_UUID)
_REGISTERED_ENDPOINT = re.compile(r"Registered endpoint '[^.']+\.([^.']+)\.[^']+'")


def sniff(path: str, head: list[bytes]) -> bool:
    for line in head:
        if line.startswith(b"{") and b'"time"' in line and b'"level"' in line and b'"target"' in line:
            return True
    return any(_READABLE.match(line.decode("utf-8", "replace")) for line in head)


class LineParser:
    def __init__(self, path: str):
        self.worker: str | None = None
        self.role: str | None = None
        self._file = os.path.basename(path)
        self._last_time_ns: int | None = None
        self._component: str | None = None
        self._instance_id: str | None = None

    def parse(self, line: bytes) -> list[Record]:
        stripped = line.strip()
        if stripped.startswith(b"{"):
            obj = load_object(stripped)
            if obj.get("schema") == dynamo_request_trace.SCHEMA:
                record = dynamo_request_trace.record_from_row(obj)
            else:
                record = self._json_line(obj)
        else:
            record = self._text_line(stripped)
        if record.time_ns is None:
            record.time_ns = self._last_time_ns  # tracebacks and untimed text follow their line
        else:
            self._last_time_ns = record.time_ns
        return [record]

    def _json_line(self, obj: dict) -> Record:
        (message, target, span_name, time, level, trace_id, span_id, parent_id, request_id,
         x_dynamo_request_id, x_request_id) = texts = tuple(map(obj.get, _TEXT_FIELDS))
        # One look at the types instead of a `field` call per field (orjson makes exact `str`s).
        if not (type(target) is type(time) is type(level) is str and _TEXT_OR_NONE.issuperset(map(type, texts))):
            self._reject(obj)
        message = message or ""
        self._learn_identity(obj, target, span_name)
        record = Record(
            kind="log",
            name=message if message else (span_name or target),
            time_ns=iso_to_ns(time),
            level=level,
            trace_id=hex_id(trace_id, 32),
            span_id=hex_id(span_id, 16),
            parent_span_id=hex_id(parent_id, 16),
            # The frontend's first line about a request (workers log "request received" too).
            entry=target.startswith("dynamo_llm::http")
            and (message == "request received" or (message == "SPAN_FIRST_ENTRY" and span_name == "http-request")),
        )
        # Builds before PR #7834 call the internal id x_dynamo_request_id; mixed fleets emit both.
        request_id = request_id or x_dynamo_request_id
        record.add_id(INTERNAL_ID, request_id)
        record.add_id(INTERNAL_ID, x_dynamo_request_id)
        record.add_id(X_REQUEST_ID, x_request_id)
        record.add_id(TRACE_ID, record.trace_id)
        self._ids_in_text(record, message)
        if request_id is None:
            # Lines outside a request span name it only in text ("request <uuid> is already active").
            for text in (message, obj.get("error"), obj.get("error_detail")):
                if isinstance(text, str):
                    for uuid in _UUID_IN_TEXT.findall(text):
                        record.add_id(INTERNAL_ID, uuid.lower())
        if "time.duration_us" in obj and isinstance(obj["time.duration_us"], int):
            record.duration_ns = obj["time.duration_us"] * 1000
        elif isinstance(obj.get("elapsed_ms"), (str, int, float)):
            record.duration_ns = _ms_to_ns(obj["elapsed_ms"])
        status = obj.get("status")
        if isinstance(status, (str, int)) and not isinstance(status, bool):
            record.status = str(status)
        # The line's own dict becomes the attrs: deleting the few lifted keys is cheaper than copying
        # the rest, and keeps the others in their order, target and span_name last.
        attrs = obj
        for key in _LIFTED.intersection(attrs):
            del attrs[key]
        attrs["target"] = target
        if span_name:
            attrs["span_name"] = span_name
        record.attrs = attrs
        return record

    def _reject(self, obj: dict) -> NoReturn:
        """A line with a text field missing or of another type: the reason names the first such
        field in `_TEXT_FIELDS` order, or an unreadable time where the time comes. As for a good
        line, the file's identity is learned from the message, target and span name first."""
        field(obj, "message", (str,))
        target = field(obj, "target", (str,), required=True)
        self._learn_identity(obj, target, field(obj, "span_name", (str,)))
        iso_to_ns(field(obj, "time", (str,), required=True))
        for key in _TEXT_FIELDS[4:]:  # level and the ids
            field(obj, key, (str,), required=key == "level")
        raise AssertionError(f"no field of {obj!r} is wrong")

    def _text_line(self, line: bytes) -> Record:
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError:
            raise Unparseable("not UTF-8 text") from None
        if "\x00" in text:
            raise Unparseable("binary data (NUL bytes) in a text line")
        record = Record(kind="log", name=text[:2000])
        m = _READABLE.match(text)
        if m:
            record.time_ns = iso_to_ns(m.group(1))
            record.level = m.group(2)
            record.name = m.group(3)[:2000]
        self._ids_in_text(record, text)
        return record

    def _ids_in_text(self, record: Record, text: str) -> None:
        if "Request ID" in text:
            for uuid in _TEXT_REQUEST_ID.findall(text):
                record.add_id(INTERNAL_ID, uuid.lower())
        if "Engine ID map" in text:
            m = _ENGINE_ID_MAP.search(text)
            if m:
                record.add_id(INTERNAL_ID, m.group(1).lower())
                record.add_id(ENGINE_REQUEST_ID, m.group(2), self.worker or f"file:{self._file}")
                if m.group(3) != "None":
                    record.add_id(DISAGG_REQUEST_ID, m.group(3))

    def _learn_identity(self, obj: dict, target: str, span_name: str | None) -> None:
        if self.worker and self._instance_id:
            return
        message = obj.get("message") or ""
        if span_name == "handle_payload" and obj.get("instance_id") is not None:
            self._instance_id = str(obj["instance_id"])
            self._component = str(obj.get("component") or self._component or "worker")
        elif message == "FPM direct publisher started" and obj.get("worker_id") is not None:
            self._instance_id = str(obj["worker_id"])
        elif message.startswith("Registered endpoint"):
            m = _REGISTERED_ENDPOINT.search(message)
            if m:
                self._component = m.group(1)
        elif message == "Starting HTTP(S) service" and isinstance(obj.get("address"), str):
            self.worker, self.role = f"frontend:{obj['address']}", "frontend"
        elif self.worker is None and (span_name == "http-request" or target.startswith("dynamo_llm::http")):
            self.worker, self.role = f"frontend:{self._file}", "frontend"
        if self._instance_id:
            self.worker = f"{self._component or 'worker'}:{self._instance_id}"
            self.role = _role_of_component(self._component or "")


def _role_of_component(component: str) -> str:
    if "prefill" in component:
        return "prefill"
    if "decode" in component:
        return "decode"
    # Dynamo serves decode (and aggregated) workers as the `backend` component; which of the two it
    # is shows where the frontend names its workers (prefill_worker_id, decode_worker_id).
    return "worker"


def _ms_to_ns(value) -> int | None:
    try:
        return int(float(value) * 1_000_000)
    except ValueError:
        return None
