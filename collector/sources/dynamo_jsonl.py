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

from . import bulk_sql, text_log, tracing_fmt
from .. import framing, record_contract, tokens
from ..ids import DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, INTERNAL_ID, PARENT_SPAN, REPLY_ID, SPAN, TRACE_ID, X_REQUEST_ID
from ..line_attributes import dynamo_json_attrs
from ..records import Record
from . import dynamo_request_trace
from .parsing import HEX, field, hex_id, iso_to_ns, load_object

NAME = "dynamo_jsonl"

# The lifted keys whose values must be text, in the order a line's fields are read (the first bad
# one is the reason a line is quarantined); target, time and level are required.
_TEXT_FIELDS = (
    "message", "target", "span_name", "time", "level", "trace_id", "span_id", "parent_id", "request_id",
    "x_dynamo_request_id", "x_request_id",
)
_REQUIRED = frozenset({"target", "time", "level"})
_TEXT_OR_NONE = frozenset({str, type(None)})
_UUID = r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}"
# Python workers print the id in text: "Decode Request ID: <uuid>", "Prefill Request ID: <uuid>".
_TEXT_REQUEST_ID = re.compile(rf"Request ID:\s*({_UUID})", re.ASCII)
# TensorRT-LLM workers under Dynamo (PR #13970) map the id to the engine's own ids.
_ENGINE_ID_MAP = re.compile(
    rf"Engine ID map: request_id=({_UUID}) trtllm_client_id=(\d+) disagg_request_id=(\d+|None)", re.ASCII
)
# Dynamo's SGLang worker (1.6.1) names the rid it gave SGLang (SGLang's name for the request, which
# SGLang's own records carry) and the Dynamo request it serves.
_SGLANG_SUBMITTED = re.compile(rf"Submitted SGLang Request ID: (\w+), Context: ({_UUID})", re.ASCII)
# Readable-mode line: "2025-09-02T15:50:01.770028Z  INFO main.init: message"
_READABLE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d))\s+"
                       r"(TRACE|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL)\s+(.*)$")

_UUID_IN_TEXT = re.compile(_UUID)
# What the lines of a file say of its process (_learn_identity).
_HANDLE_SPAN = "handle_payload"  # a worker's span for a request: its component and instance_id
_PUBLISHER_STARTED = "FPM direct publisher started"  # with the worker's worker_id
_REGISTERED = "Registered endpoint"
_REGISTERED_ENDPOINT = re.compile(rf"{_REGISTERED} '[^.']+\.([^.']+)\.[^']+'")
_SERVING = "Starting HTTP(S) service"  # the frontend, with its address
_FRONTEND_SPAN = "http-request"
_FRONTEND_TARGET = "dynamo_llm::http"
# The frontend's first line about a request (workers log "request received" too).
_ENTRY = "request received"
_SPAN_ENTERED = "SPAN_FIRST_ENTRY"
# Texts a line holds when it can change what the parser knows of its process: those above while
# the worker is unknown, the first four until the instance is known; and `\u`, as JSON may write
# any of them escaped (collector/bulk.py reads the lines holding none in DuckDB).
_MARKERS = tuple(t.encode() for t in (_HANDLE_SPAN, _PUBLISHER_STARTED, _REGISTERED, _SERVING)) + (b"\\u",)
_MARKERS_WITHOUT_WORKER = _MARKERS + (_FRONTEND_SPAN.encode(), _FRONTEND_TARGET.encode())


def sniff(path: str, head: list[bytes]) -> bool:
    for line in head:
        if line.startswith(b"{") and b'"time"' in line and b'"level"' in line and b'"target"' in line:
            return True
    return any(_READABLE.match(framing.frame(line.decode("utf-8", "replace")).text) for line in head)


def LineParser(path: str, **options) -> text_log.TextLines:
    """The parser of a Dynamo capture: its lines read by Reader, each other one (vLLM's, SGLang's,
    a traceback's) by its own format."""
    return text_log.LineParser(path, first=NAME, **options)


class Reader:
    """Dynamo's lines of one file (text_log.py's reader contract)."""

    def __init__(self, path: str, worker: str | None = None, keep_content: bool = False, tz: str | None = None):
        self.worker: str | None = None
        self.role: str | None = None
        self._file = os.path.basename(path)
        self._last_time_ns: int | None = None
        self._component: str | None = None
        self._instance_id: str | None = None

    @property
    def scope(self) -> str:
        """The worker engine ids read now belong to: the file's process, once known."""
        return self.worker or f"file:{self._file}"

    def state_markers(self) -> tuple[bytes, ...]:
        """Texts of which a line must hold one to change what the parser knows of its file."""
        if self.worker and self._instance_id:
            return ()
        return _MARKERS_WITHOUT_WORKER if self.worker is None else _MARKERS

    def carry(self, time_ns: int | None) -> None:
        """The time the lines before left, for a line without its own (collector/bulk.py)."""
        self._last_time_ns = time_ns

    def state(self) -> dict:
        """What reading on from the file's position needs beside its worker and role
        (collector/ingest.py): the time an untimed line takes, and the parts of the worker's name
        learned so far."""
        return {"last_time_ns": self._last_time_ns, "component": self._component, "instance_id": self._instance_id}

    def restore(self, state: dict) -> None:
        self._last_time_ns = state.get("last_time_ns")
        self._component, self._instance_id = state.get("component"), state.get("instance_id")

    def claims(self, text: str) -> bool:
        """A JSON line of Dynamo's logger or a request-trace row, or a line of its readable format."""
        if text.startswith("{"):
            return ('"target"' in text and '"level"' in text and '"time"' in text) or dynamo_request_trace.SCHEMA in text
        return _READABLE.match(text) is not None

    def read(self, framed) -> Record:
        text = framed.text
        if text.startswith("{"):
            obj = load_object(text)
            if obj.get("schema") == dynamo_request_trace.SCHEMA:
                record = dynamo_request_trace.record_from_row(obj)
            else:
                record = self._json_line(obj)
        else:
            record = self._readable(text)
        if record.time_ns is None:
            record.time_ns = self._last_time_ns
        else:
            self._last_time_ns = record.time_ns
        return record

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
            entry=target.startswith(_FRONTEND_TARGET)
            and (message == _ENTRY or (message == _SPAN_ENTERED and span_name == _FRONTEND_SPAN)),
        )
        # Builds before PR #7834 call the internal id x_dynamo_request_id; mixed fleets emit both.
        request_id = request_id or x_dynamo_request_id
        record.add_id(INTERNAL_ID, request_id)
        record.add_id(INTERNAL_ID, x_dynamo_request_id)
        record.add_id(X_REQUEST_ID, x_request_id)
        record.add_id(TRACE_ID, record.trace_id)
        self._ids_in_text(record, message)
        texts = [text for text in (message, obj.get("error"), obj.get("error_detail")) if isinstance(text, str)]
        if request_id is None:
            # Lines outside a request span name it only in text ("request <uuid> is already active").
            for text in texts:
                for uuid in _UUID_IN_TEXT.findall(text):
                    record.add_id(INTERNAL_ID, uuid.lower())
        record.line_text = "\n".join(texts)  # the words of the line a user may look up (tokens.py)
        if "time.duration_us" in obj and isinstance(obj["time.duration_us"], int):
            record.duration_ns = obj["time.duration_us"] * 1000
        elif isinstance(obj.get("elapsed_ms"), (str, int, float)):
            record.duration_ns = _ms_to_ns(obj["elapsed_ms"])
        status = obj.get("status")
        if isinstance(status, (str, int)) and not isinstance(status, bool):
            record.status = str(status)
        # The line is kept in the store, and its other fields read from it when shown (line_attributes.py).
        record.attrs = record_contract.read_by_facts(dynamo_json_attrs(obj, target, span_name))
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
            field(obj, key, (str,), required=key in _REQUIRED)
        raise AssertionError(f"no field of {obj!r} is wrong")

    def _readable(self, text: str) -> Record:
        """A line of the readable format: `<time>  <LEVEL> <span scope>: <target>: <message> <fields>`."""
        m = _READABLE.match(text)
        event = tracing_fmt.parse(m.group(3))
        # what names the process, as a JSON line would give it: the message and its fields, the spans'
        self._learn_identity({"message": event.message, **{k: v for _, fields in event.spans for k, v in fields.items()},
                              **event.fields}, event.target or "", event.spans[-1][0] if event.spans else None)
        record = Record(kind="log", time_ns=iso_to_ns(m.group(1)), level=m.group(2),
                        name=event.message[:2000])
        attrs = {"target": event.target} if event.target else {}
        if event.spans:
            attrs["spans"] = ":".join(name for name, _ in event.spans)
        request_id = event.field("request_id") or event.field("x_dynamo_request_id")
        record.add_id(INTERNAL_ID, request_id)
        record.add_id(X_REQUEST_ID, event.field("x_request_id"))
        trace_id = hex_id(event.field("trace_id"), 32)
        if trace_id:
            record.trace_id = trace_id
            record.add_id(TRACE_ID, trace_id)
        self._ids_in_text(record, event.message)
        if request_id is None:  # lines outside a request's span name it only in text
            for uuid in _UUID_IN_TEXT.findall(event.message):
                record.add_id(INTERNAL_ID, uuid.lower())
        record.attrs = attrs or None
        return record

    def _ids_in_text(self, record: Record, text: str) -> None:
        if "Request ID" in text:
            for uuid in _TEXT_REQUEST_ID.findall(text):
                record.add_id(INTERNAL_ID, uuid.lower())
            m = _SGLANG_SUBMITTED.search(text)
            if m:
                record.add_id(REPLY_ID, m.group(1))
                record.add_id(INTERNAL_ID, m.group(2).lower())
        if "Engine ID map" in text:
            m = _ENGINE_ID_MAP.search(text)
            if m:
                record.add_id(INTERNAL_ID, m.group(1).lower())
                record.add_id(ENGINE_REQUEST_ID, m.group(2), self.scope)
                if m.group(3) != "None":
                    record.add_id(DISAGG_REQUEST_ID, m.group(3))

    def _learn_identity(self, obj: dict, target: str, span_name: str | None) -> None:
        if self.worker and self._instance_id:
            return
        message = obj.get("message") or ""
        if span_name == _HANDLE_SPAN and obj.get("instance_id") is not None:
            self._instance_id = str(obj["instance_id"])
            self._component = str(obj.get("component") or self._component or "worker")
        elif message == _PUBLISHER_STARTED and obj.get("worker_id") is not None:
            self._instance_id = str(obj["worker_id"])
        elif message.startswith(_REGISTERED):
            m = _REGISTERED_ENDPOINT.search(message)
            if m:
                self._component = m.group(1)
        elif message == _SERVING and isinstance(obj.get("address"), str):
            self.worker, self.role = f"frontend:{obj['address']}", "frontend"
        elif self.worker is None and (span_name == _FRONTEND_SPAN or target.startswith(_FRONTEND_TARGET)):
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


# -- the same lines in bulk (collector/bulk.py) ----------------------------------------------------
# LineParser._json_line's rules over a batch of lines in DuckDB, for the JSON lines whose reading
# there is sure to be the parser's: `ok` leaves to the parser text lines, request-trace rows, lines
# JSON reads otherwise in DuckDB (bulk_sql.read_as_orjson), a text field of another type, a time not in
# the form iso_to_ns reads at once or outside 1678-2261 (64-bit nanoseconds), and durations the
# parser would take from a bool, a number written otherwise, or could not store.
# tests/collector/test_bulk_dynamo.py holds the two ways to each other.

_OTHER_FIELDS = ("error", "error_detail", "time.duration_us", "elapsed_ms", "status", "schema")
_STRUCT = "{" + ", ".join(f'"{key}": "JSON"' for key in dict.fromkeys(
    _TEXT_FIELDS + _OTHER_FIELDS + record_contract.ATTRIBUTES)) + "}"


def _sql_text(key: str) -> str:
    """The field's text, NULL unless it is a JSON string."""
    return f"""CASE WHEN starts_with(j."{key}", '"') THEN j."{key}"->>'$' END"""


def _sql_typed(key: str) -> str:
    """Whether the field is text, or missing or null where it may be."""
    text = f"""starts_with(j."{key}", '"')"""
    return text if key in _REQUIRED else f"""(coalesce(j."{key}", 'null') = 'null' OR {text})"""


def _sql_hex(column: str, length: int) -> str:
    """hex_id"""
    return (f"CASE WHEN length({column}) = {length} AND regexp_matches({column}, '{bulk_sql.re2(HEX)}') "
            f"AND ltrim({column}, '0') <> '' THEN lower({column}) END")


_INT = "'^-?[0-9]+$'"
_DECIMAL = "'^-?[0-9]+(\\.[0-9]+)?$'"
_SELECT = f"""
WITH parsed AS (
    SELECT f, idx, start, line, j,
        CASE WHEN j IS NOT NULL THEN json_keys(line) END AS keys,
        -- what the record stores of its attributes (the rest are read from the line when shown)
        CASE WHEN j IS NOT NULL THEN {record_contract.read_by_facts_sql("j")} END AS attrs
    FROM (SELECT *, CASE WHEN starts_with(line, '{{') THEN try(from_json(line, '{_STRUCT}')) END AS j FROM {{lines}})
), fields AS (
    SELECT f, idx, start, line, j, attrs, keys,
        {", ".join(f'{_sql_text(key)} AS "t_{key}"' for key in _TEXT_FIELDS)},
        j IS NOT NULL AND {" AND ".join(_sql_typed(key) for key in _TEXT_FIELDS)} AS typed,
        j."time.duration_us" AS duration_us, j.elapsed_ms,
        coalesce(regexp_matches(j."time.duration_us", {_INT}), false) AS us_int,
        coalesce(j."time.duration_us" IN ('true', 'false'), false) AS us_bool,
        {_sql_text("elapsed_ms")} AS elapsed_text, {_sql_text("error")} AS error, {_sql_text("error_detail")} AS error_detail
    FROM parsed
), timed AS (
    -- times.iso_to_ns's common form, "YYYY-MM-DDTHH:MM:SS.fffZ": its seconds and its fraction to the ns
    SELECT *, CASE WHEN regexp_matches(t_time, '^[0-9]{{4}}-[0-9]{{2}}-[0-9]{{2}}T[0-9]{{2}}:[0-9]{{2}}:[0-9]{{2}}\\.[0-9]+Z$')
                        AND t_time[1:4] BETWEEN '1678' AND '2261'
                   THEN epoch_ns(try_strptime(t_time[1:19], '%Y-%m-%dT%H:%M:%S'))
                        + CAST(rpad(left(t_time[21:-2], 9), 9, '0') AS BIGINT) END AS time_ns,
        -- the duration: time.duration_us when an int, else elapsed_ms when a number or text; bools,
        -- which Python takes for ints, and text float() might read otherwise are the parser's
        CASE WHEN us_int THEN TRY_CAST(duration_us AS HUGEINT) * 1000 END AS duration_int,
        CASE WHEN us_int OR us_bool OR coalesce(elapsed_ms, 'null') = 'null' THEN NULL
             WHEN elapsed_text IS NOT NULL
             THEN CASE WHEN regexp_matches(elapsed_text, {_DECIMAL}) THEN CAST(elapsed_text AS DOUBLE) * 1000000 END
             WHEN regexp_matches(elapsed_ms, '^-?[0-9]') THEN CAST(elapsed_ms AS DOUBLE) * 1000000 END AS duration_ms_ns,
        us_bool OR (NOT us_int AND (coalesce(elapsed_ms IN ('true', 'false'), false)
                                    OR coalesce(NOT regexp_matches(elapsed_text, {_DECIMAL}), false))) AS duration_odd
    FROM fields
)
SELECT f, idx, start,
    coalesce(typed AND time_ns IS NOT NULL AND read_as_orjson(line, keys, attrs)
             AND (j.schema->>'$') IS DISTINCT FROM '{dynamo_request_trace.SCHEMA}'
             AND NOT duration_odd
             AND coalesce(duration_int BETWEEN -9223372036854775808 AND 9223372036854775807, true)
             AND coalesce(duration_ms_ns >= -9223372036854775808.0 AND duration_ms_ns < 9223372036854775808.0, true),
             false) AS ok,
    time_ns, NULL::DOUBLE AS steady_s, 'log' AS kind, NULL::VARCHAR AS worker, NULL::VARCHAR AS role,
    t_level AS level,
    CASE WHEN coalesce(t_message, '') <> '' THEN t_message ELSE coalesce(nullif(t_span_name, ''), t_target) END AS name,
    coalesce(TRY_CAST(duration_int AS BIGINT), TRY_CAST(trunc(duration_ms_ns) AS BIGINT)) AS duration_ns,
    CASE WHEN starts_with(j.status, '"') THEN j.status->>'$' WHEN regexp_matches(j.status, {_INT}) THEN CAST(j.status AS VARCHAR) END AS status,
    coalesce(starts_with(t_target, '{_FRONTEND_TARGET}') AND (coalesce(t_message, '') = '{_ENTRY}'
             OR (t_message = '{_SPAN_ENTERED}' AND t_span_name = '{_FRONTEND_SPAN}')), false) AS entry,
    {_sql_hex("t_trace_id", 32)} AS trace_id, {_sql_hex("t_span_id", 16)} AS span_id,
    {_sql_hex("t_parent_id", 16)} AS parent_span_id,
    attrs,
    -- for the ids: request_id, or the older x_dynamo_request_id
    CASE WHEN t_request_id <> '' THEN t_request_id ELSE t_x_dynamo_request_id END AS request_id,
    t_x_dynamo_request_id AS x_dynamo_request_id, t_x_request_id AS x_request_id,
    coalesce(t_message, '') AS message, error, error_detail
FROM timed
"""

# Ids found in the text of a line: Request ID and Engine ID map mentions, and any UUID of a line
# outside a request span (request_id, as LineParser._json_line takes it, is none).
_TEXT_IDS = """contains(message, 'Request ID') OR contains(message, 'Engine ID map') OR request_id IS NULL"""
# The id-shaped words of the message and the error texts (tokens.py), stored beside the ids the line
# carries as such, less those.
_WORDS = tokens.sql("concat_ws(chr(10), message, error, error_detail)")
_ENGINE_ID_MAP_SQL = bulk_sql.re2(_ENGINE_ID_MAP)
_SGLANG_SUBMITTED_SQL = bulk_sql.re2(_SGLANG_SUBMITTED)
_IDS = f"""
SELECT record_id, i.kind, i.value, NULL::VARCHAR AS scope FROM (
    SELECT record_id, unnest([
        {{'kind': '{INTERNAL_ID}', 'value': request_id}},
        {{'kind': '{INTERNAL_ID}', 'value': CASE WHEN x_dynamo_request_id IS DISTINCT FROM request_id THEN x_dynamo_request_id END}},
        {{'kind': '{X_REQUEST_ID}', 'value': x_request_id}},
        {{'kind': '{TRACE_ID}', 'value': trace_id}},
        {{'kind': '{SPAN}', 'value': trace_id || '/' || span_id}},
        {{'kind': '{PARENT_SPAN}', 'value': trace_id || '/' || parent_span_id}}]) AS i
    FROM {{records}} WHERE NOT ({_TEXT_IDS})
) WHERE i.value <> ''
UNION ALL
SELECT record_id, '{tokens.TOKEN}', w, NULL::VARCHAR FROM (
    SELECT record_id, request_id, x_dynamo_request_id, x_request_id, trace_id, unnest({_WORDS}) AS w
    FROM {{records}} WHERE NOT ({_TEXT_IDS})
) WHERE w IS DISTINCT FROM request_id AND w IS DISTINCT FROM x_dynamo_request_id AND w IS DISTINCT FROM x_request_id
    AND w IS DISTINCT FROM trace_id
UNION ALL
SELECT DISTINCT record_id, i.kind, i.value, i.scope FROM (
    SELECT record_id, unnest(ids || list_transform(
        list_filter(words, lambda w: NOT list_contains(list_transform(ids, lambda i: i.value), w)),
        lambda w: {{'kind': '{tokens.TOKEN}', 'value': w, 'scope': NULL::VARCHAR}})) AS i
    FROM (SELECT record_id, {_WORDS} AS words,
        [{{'kind': '{INTERNAL_ID}', 'value': request_id, 'scope': NULL::VARCHAR}},
         {{'kind': '{INTERNAL_ID}', 'value': x_dynamo_request_id, 'scope': NULL}},
         {{'kind': '{X_REQUEST_ID}', 'value': x_request_id, 'scope': NULL}},
         {{'kind': '{TRACE_ID}', 'value': trace_id, 'scope': NULL}},
         {{'kind': '{SPAN}', 'value': trace_id || '/' || span_id, 'scope': NULL}},
         {{'kind': '{PARENT_SPAN}', 'value': trace_id || '/' || parent_span_id, 'scope': NULL}}]
        || CASE WHEN contains(message, 'Request ID')
                THEN list_transform(regexp_extract_all(message, '{bulk_sql.re2(_TEXT_REQUEST_ID)}', 1),
                                    lambda u: {{'kind': '{INTERNAL_ID}', 'value': lower(u), 'scope': NULL::VARCHAR}})
                ELSE [] END
        || CASE WHEN contains(message, 'Submitted SGLang Request ID') AND regexp_matches(message, '{_SGLANG_SUBMITTED_SQL}')
                THEN [{{'kind': '{REPLY_ID}', 'value': regexp_extract(message, '{_SGLANG_SUBMITTED_SQL}', 1),
                        'scope': NULL::VARCHAR}},
                      {{'kind': '{INTERNAL_ID}', 'value': lower(regexp_extract(message, '{_SGLANG_SUBMITTED_SQL}', 2)),
                        'scope': NULL::VARCHAR}}]
                ELSE [] END
        || CASE WHEN contains(message, 'Engine ID map') AND regexp_matches(message, '{_ENGINE_ID_MAP_SQL}')
                THEN [{{'kind': '{INTERNAL_ID}', 'value': lower(regexp_extract(message, '{_ENGINE_ID_MAP_SQL}', 1)),
                        'scope': NULL::VARCHAR}},
                      {{'kind': '{ENGINE_REQUEST_ID}', 'value': regexp_extract(message, '{_ENGINE_ID_MAP_SQL}', 2),
                        'scope': scope}},
                      {{'kind': '{DISAGG_REQUEST_ID}',
                        'value': nullif(regexp_extract(message, '{_ENGINE_ID_MAP_SQL}', 3), 'None'), 'scope': NULL}}]
                ELSE [] END
        || CASE WHEN request_id IS NULL
                THEN list_transform(regexp_extract_all(concat_ws(chr(0), message, error, error_detail),
                                                       '{bulk_sql.re2(_UUID_IN_TEXT)}'),
                                    lambda u: {{'kind': '{INTERNAL_ID}', 'value': lower(u), 'scope': NULL::VARCHAR}})
                ELSE [] END AS ids
    FROM {{records}} WHERE {_TEXT_IDS})
) WHERE i.value <> ''
"""
BULK = bulk_sql.Rules(select=_SELECT, ids=_IDS)
