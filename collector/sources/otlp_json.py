"""OTLP JSON files: one `TracesData`/`LogsData` (or export request) per line, as the
OpenTelemetry Collector's `file` exporter and Python's `opentelemetry-exporter-otlp-json-file`
write them. The OTLP receivers (collector/service/otlp.py) read the bodies they receive with it too.

Forgiving as a receiver must be: trace and span ids in hex (the OTLP spec) or base64 (protobuf's
generic JSON mapping), enums as numbers or names, 64-bit integers as strings or numbers, and keys
in lowerCamelCase or snake_case.

Records are made in one place, from `Span`s and `Log`s: the fields of one span or log record,
whichever encoding they were read from. This module reads them from JSON objects; the receivers read
protobuf bodies into them straight from the messages, and have `span_records`/`log_records` make
their records, so the same data gives the same records whichever way it arrives.
"""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import Callable

import orjson

from ..ids import (
    REPLY_PREFIXES, UUID_RE, derived, vllm_external_ids,
    BOOTSTRAP_ROOM, DISAGG_REQUEST_ID, ENGINE_REQUEST_ID, ENTRY_ROLES, INTERNAL_ID, REPLY_ID, TRACE_ID, X_REQUEST_ID,
    bootstrap_room,
)
from ..records import Record
from .parsing import Unparseable, load_object

NAME = "otlp_json"
# One line is one export batch: thousands of spans. The OTLP/HTTP spec recommends accepting 20 MiB.
MAX_LINE = 64 << 20
# Spans and log records may carry prompt and reply text: LineParser(path, keep_content=True)
# stores it when `--keep-content` asks (CONTENT_ATTRIBUTES below).
CONTENT_FROM_USER = True

# SGLang's spans: their scope, and the name of a request's root span (`<role> Req <rid's 8 chars>`,
# the role empty on a server that answers alone).
_SGLANG_SCOPE = "sglang server"
_SGLANG_ROOT = re.compile(r"^(prefill|decode|) Req \S+$")
# Dynamo's audit sink (ai-dynamo/dynamo#9390): a log record a completed chat request, its body
# `openai.chat_completion`, attributes `rid` (Dynamo's request id), `payload` (the request and reply).
_DYNAMO_AUDIT_SCOPE = "dynamo.payload"

# TensorRT-LLM's disaggregated server names its one span so, with no attributes.
_TRTLLM_DISAGG_SPAN = "disaggregated_request"
_TRTLLM_LATENCIES = {
    "gen_ai.latency.time_in_queue": "queue_ms",
    "gen_ai.latency.time_to_first_token": "ttft_ms",
    "gen_ai.latency.e2e": "e2e_ms",
    "gen_ai.latency.kv_cache_transfer_time": "kv_transfer_ms",
}

# llm-d's P/D sidecar (llm-d/llm-d-router, pkg/sidecar/proxy): a request span with a `prefill` and a
# `decode` child, its attributes under this prefix. It adds its own `x-request-id` (a UUID, its
# `request_id`) to both legs, which vLLM then names both replies after (`chatcmpl-<uuid>`, whose
# UUID is the request's internal id): that id joins them.
_LLM_D_PREFIX = "llm_d.pd_proxy."
_LLM_D_EPP_PREFIX = "llm_d.epp."  # llm-d's endpoint picker: its scheduling spans
_LLM_D_TIMES = {
    "true_ttft_ms": "ttft_ms",
    "prefill_duration_ms": "prefill_ms",
    "decode_duration_ms": "decode_ms",
    "coordinator_overhead_ms": "coordinator_ms",
}

# protobuf's JSON mapping leaves out an empty key, so an attribute whose key is "" has none.
NO_KEY = "attribute without a key"

_SPAN_KINDS = {0: "unspecified", 1: "internal", 2: "server", 3: "client", 4: "producer", 5: "consumer"}
_STATUS = {0: None, 1: "ok", 2: "error"}

# Span and log attributes that carry ids, by the id kind they are.
_ID_ATTRIBUTES = {
    "tracejoin.internal_id": INTERNAL_ID,
    "request_id": INTERNAL_ID,  # Dynamo
    "x_dynamo_request_id": INTERNAL_ID,  # Dynamo before PR #7834
    "rid": INTERNAL_ID,  # Dynamo request-trace rows sent as OTLP logs
    "llm_d.pd_proxy.request_id": INTERNAL_ID,  # llm-d's P/D sidecar: the UUID it sends both legs
    "x_request_id": X_REQUEST_ID,
    "http.request.header.x-request-id": X_REQUEST_ID,
    "gen_ai.response.id": REPLY_ID,
    "tracejoin.reply_id": REPLY_ID,
    "tracejoin.disagg_request_id": DISAGG_REQUEST_ID,
    "disagg_request_id": DISAGG_REQUEST_ID,
}

# Prompt and reply text is not stored unless the user asks (`--keep-content`), as the other sources
# store none of the prompt and reply fields they read. These are the attributes the GenAI semantic
# conventions mark as content (opt-in, "may contain sensitive information"), with the legacy
# `gen_ai.prompt` / `gen_ai.completion` that the oldest conventions' events carried.
CONTENT_ATTRIBUTES = frozenset({
    "gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions", "gen_ai.tool.definitions",
    "gen_ai.tool.call.arguments", "gen_ai.tool.call.result",
    "gen_ai.retrieval.query.text", "gen_ai.retrieval.documents",
    "gen_ai.memory.query.text", "gen_ai.memory.records",
    "gen_ai.prompt", "gen_ai.completion",
})
# Instrumentations such as OpenLLMetry flatten messages into indexed attributes
# (`gen_ai.prompt.0.content`, `gen_ai.completion.0.tool_calls.1.arguments`). Everything under an
# index is taken for text except what names or describes the message, so a field of a name not
# listed here is left out rather than kept; `N` stands for any index.
_INDEXED_MESSAGES = ("gen_ai.prompt.", "gen_ai.completion.")
_INDEXED_NOT_CONTENT = frozenset({
    "role", "type", "id", "name", "finish_reason", "tool_call_id",
    "tool_calls.N.id", "tool_calls.N.type", "tool_calls.N.name", "function_call.name",
})
# GenAI events (gen_ai.user.message, gen_ai.choice, ...) carry their messages in their body.
_CONTENT_EVENT_PREFIX = "gen_ai."
# Where a record counts the text it was sent and does not keep: {attribute or "body": characters}.
CONTENT_CHARS = "content_chars"
# Attribute keys repeat from span to span, so the keys seen to hold no text are remembered: a span
# whose keys are all known ones is checked with one set lookup per key, in C. Only so many keys, of
# up to so many characters, so that keys a sender makes up cannot grow it without end.
_PLAIN_KEYS_MAX = 4096
_PLAIN_KEY_CHARS = 256


def sniff(path: str, head: list[bytes]) -> bool:
    return any(
        line.lstrip().startswith(b"{")
        and any(k in line[:64] for k in (b'"resourceSpans"', b'"resourceLogs"', b'"resource_spans"', b'"resource_logs"'))
        for line in head
    )


def _get(obj: dict, camel: str, snake: str):
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _list(value, what: str) -> list:
    if value is None:
        return []
    if not isinstance(value, list):
        raise Unparseable(f"{what} is not a list")
    return value


def _scope_name(block) -> str | None:
    if not isinstance(block, dict):
        raise Unparseable("scope block is not an object")
    scope = block.get("scope")
    return scope.get("name") if isinstance(scope, dict) else None


def _int(value, what: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise Unparseable(f"{what} is a boolean")
    try:
        return int(value)
    except (TypeError, ValueError):
        raise Unparseable(f"{what} is not an integer: {value!r}") from None


def _text(value, what: str) -> str | None:
    if value is None or isinstance(value, str):
        return value
    raise Unparseable(f"{what} is {type(value).__name__}, expected text")


def _enum(value, names: str, what: str) -> int:
    """An enum given as a number or as its name (SPAN_KIND_SERVER, STATUS_CODE_ERROR, ...)."""
    if value is None:
        return 0
    if isinstance(value, str) and not value.isdigit():
        table = {
            "kind": ["UNSPECIFIED", "INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER"],
            "status": ["UNSET", "OK", "ERROR"],
        }[names]
        suffix = value.upper().rsplit("_", 1)[-1]
        if suffix in table:
            return table.index(suffix)
        raise Unparseable(f"{what} has unknown value {value!r}")
    return _int(value, what) or 0


def _id(value, nbytes: int, what: str) -> str | None:
    """A trace/span id given as hex or base64 text (see id_hex)."""
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise Unparseable(f"{what} is not a string")
    raw = None
    if len(value) == nbytes * 2:
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            pass
    if raw is None:
        try:
            raw = base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise Unparseable(f"{what} is neither hex nor base64: {value!r}") from None
    return id_hex(raw, nbytes, what)


def id_hex(raw: bytes, nbytes: int, what: str) -> str | None:
    """A trace/span id's bytes as lowercase hex; empty and all-zero mean none."""
    if not raw:
        return None
    if len(raw) != nbytes:
        raise Unparseable(f"{what} has {len(raw)} bytes, expected {nbytes}")
    return raw.hex() if any(raw) else None


def any_value(v):
    """An OTLP AnyValue as a plain Python value."""
    if not isinstance(v, dict):
        return v
    for key in ("stringValue", "string_value"):
        if key in v:
            return v[key]
    for key in ("intValue", "int_value"):
        if key in v:
            return _int(v[key], "intValue")
    for key in ("doubleValue", "double_value"):
        if key in v:
            return float(v[key])
    for key in ("boolValue", "bool_value"):
        if key in v:
            return bool(v[key])
    array = _get(v, "arrayValue", "array_value")
    if array is not None:
        return [any_value(x) for x in array.get("values", [])]
    kvlist = _get(v, "kvlistValue", "kvlist_value")
    if kvlist is not None:
        return attributes(kvlist.get("values", []))
    raw = _get(v, "bytesValue", "bytes_value")
    if raw is not None:
        return raw
    return None


def attributes(kvs) -> dict:
    if not isinstance(kvs, list):
        raise Unparseable("attributes is not a list")
    out = {}
    for kv in kvs:
        if not isinstance(kv, dict) or not isinstance(kv.get("key"), str):
            raise Unparseable(NO_KEY)
        out[kv["key"]] = any_value(kv.get("value"))
    return out


@dataclass(slots=True)
class Span:
    """One span, whichever encoding it was read from: ids as lowercase hex, times in ns, enums as
    numbers, None for what it leaves out."""

    name: str | None
    attrs: dict
    scope: str | None  # the name of the instrumentation scope that made it
    start_ns: int | None
    end_ns: int | None
    kind: int
    status_code: int
    status_message: str | None
    trace_id: str | None
    span_id: str | None
    parent_span_id: str | None
    events: list[dict] | None  # span_event() of each event; None without events


@dataclass(slots=True)
class Log:
    """One log record, whichever encoding it was read from (as Span)."""

    attrs: dict
    scope: str | None
    body: object  # the AnyValue as a plain value
    event_name: str | None
    time_ns: int | None
    observed_ns: int | None
    severity_text: str | None
    trace_id: str | None
    span_id: str | None


def _json_span(span, scope: str | None) -> Span:
    if not isinstance(span, dict):
        raise Unparseable("span is not an object")
    status = span.get("status") or {}
    events = span.get("events")
    return Span(
        name=_text(span.get("name"), "span name"),
        attrs=attributes(span.get("attributes", [])),
        scope=scope,
        start_ns=_int(_get(span, "startTimeUnixNano", "start_time_unix_nano"), "startTimeUnixNano"),
        end_ns=_int(_get(span, "endTimeUnixNano", "end_time_unix_nano"), "endTimeUnixNano"),
        kind=_enum(span.get("kind"), "kind", "span kind"),
        status_code=_enum(status.get("code"), "status", "status code"),
        status_message=status.get("message") or None,
        trace_id=_id(_get(span, "traceId", "trace_id"), 16, "traceId"),
        span_id=_id(_get(span, "spanId", "span_id"), 8, "spanId"),
        parent_span_id=_id(_get(span, "parentSpanId", "parent_span_id"), 8, "parentSpanId"),
        events=[
            span_event(e.get("name"), _int(_get(e, "timeUnixNano", "time_unix_nano"), "event time"),
                       lambda e=e: attributes(e.get("attributes", [])))
            for e in events if isinstance(e, dict)
        ] if events else None,
    )


# What an `exception` event says (OpenTelemetry's exception conventions): kept, as the error's
# own text. Every other event keeps its name and time only, since its attributes may carry the
# prompt and reply text this reader leaves out.
EXCEPTION_EVENT = "exception"
EXCEPTION_ATTRIBUTES = ("exception.type", "exception.message", "exception.stacktrace")


def span_event(name, time_ns: int | None, attributes_of: Callable[[], dict]) -> dict:
    """A span event as a record keeps it: its name and time, and an exception's type, message and
    stack trace (`attributes_of()` reads the event's attributes, for an exception only)."""
    event = {"name": name or None, "time_ns": time_ns or None}
    if name == EXCEPTION_EVENT:
        attrs = attributes_of()
        event.update((k, attrs[k]) for k in EXCEPTION_ATTRIBUTES if isinstance(attrs.get(k), str))
    return event


def _json_log(log, scope: str | None) -> Log:
    if not isinstance(log, dict):
        raise Unparseable("log record is not an object")
    return Log(
        attrs=attributes(log.get("attributes", [])),
        scope=scope,
        body=any_value(log.get("body")),
        event_name=_text(_get(log, "eventName", "event_name"), "eventName"),
        time_ns=_int(_get(log, "timeUnixNano", "time_unix_nano"), "timeUnixNano"),
        observed_ns=_int(_get(log, "observedTimeUnixNano", "observed_time_unix_nano"), "observedTimeUnixNano"),
        severity_text=_text(_get(log, "severityText", "severity_text"), "severityText"),
        trace_id=_id(_get(log, "traceId", "trace_id"), 16, "traceId"),
        span_id=_id(_get(log, "spanId", "span_id"), 8, "spanId"),
    )


def _resource(block, what: str, scopes: tuple[str, str], items: tuple[str, str], read) -> tuple[dict, list]:
    """A resource block's attributes and its items (spans or log records), each read with its
    scope's name; `scopes` and `items` are the keys in lowerCamelCase and snake_case."""
    if not isinstance(block, dict):
        raise Unparseable(f"{what} entry is not an object")
    resource_attrs = attributes((block.get("resource") or {}).get("attributes", []))
    read_items = []
    for scope_block in _list(_get(block, *scopes), scopes[0]):
        scope = _scope_name(scope_block)
        read_items += [read(item, scope) for item in _list(_get(scope_block, *items), items[0])]
    return resource_attrs, read_items


def _dynamo_instance(span: Span) -> str | None:
    """A Dynamo worker names its discovery instance on its handle_payload spans: `<component>:<instance id>`."""
    a = span.attrs
    if span.name == "handle_payload" and a.get("instance_id") is not None:
        return f"{a.get('component') or 'worker'}:{a['instance_id']}"
    return None


def is_content(key: str) -> bool:
    """Whether an attribute of this key holds prompt or reply text (CONTENT_ATTRIBUTES and their
    indexed forms)."""
    if key in CONTENT_ATTRIBUTES:
        return True
    if not key.startswith(_INDEXED_MESSAGES):
        return False
    _, _, index, *field = key.split(".")
    if not index.isdigit():
        return False  # gen_ai.prompt.name names a prompt template; it holds no text
    return ".".join("N" if part.isdigit() else part for part in field) not in _INDEXED_NOT_CONTENT


def _chars(value) -> int | None:
    """The length of text left out, in characters: of the text, or of its JSON when structured."""
    if isinstance(value, str):
        return len(value)
    try:
        return len(orjson.dumps(value).decode())
    except orjson.JSONEncodeError:  # an integer over 64 bits, nesting past 254 levels: no length known
        return None


class LineParser:
    """`keep_content`: store prompt and reply text as it was sent, instead of its length."""

    def __init__(self, path: str | None = None, keep_content: bool = False):
        self.worker: str | None = None  # an OTLP file mixes processes: identity is per resource
        self.role: str | None = None
        self.keep_content = keep_content
        self._identity_by_service: dict[str, tuple[str, str | None]] = {}
        self.aliases: dict[str, str] = {}  # other names of the processes read: {name: worker}
        self._plain_keys: set[str] = set()  # attribute keys seen that hold no text

    def parse(self, line: bytes) -> list[Record]:
        return self.decode(load_object(line))

    def decode(self, obj: dict) -> list[Record]:
        """Records of one TracesData / LogsData / export request object."""
        spans = _get(obj, "resourceSpans", "resource_spans")
        logs = _get(obj, "resourceLogs", "resource_logs")
        if spans is None and logs is None:
            raise Unparseable("neither resourceSpans nor resourceLogs")
        records: list[Record] = []
        for block in _list(spans, "resourceSpans"):
            records += self.span_records(*_resource(block, "resourceSpans", ("scopeSpans", "scope_spans"),
                                                    ("spans", "spans"), _json_span))
        for block in _list(logs, "resourceLogs"):
            records += self.log_records(*_resource(block, "resourceLogs", ("scopeLogs", "scope_logs"),
                                                   ("logRecords", "log_records"), _json_log))
        return records

    # -- spans and log records, from either encoding, to records -------------------------------

    def span_records(self, resource_attrs: dict, spans: list[Span]) -> list[Record]:
        """The records of the spans of one resource."""
        worker, role, role_from = self._identity(resource_attrs, spans)
        return [self._span(span, worker, role, role_from) for span in spans]

    def log_records(self, resource_attrs: dict, logs: list[Log]) -> list[Record]:
        """The records of the log records of one resource."""
        worker, role, role_from = self._identity(resource_attrs, [])
        return [self._log(log, worker, role, role_from) for log in logs]

    def _identity(self, attrs: dict, spans: list[Span]) -> tuple[str | None, str | None, str | None]:
        """(worker, role, "name" if the role is only read from its name) of the process
        that exported a resource block: the first name of the process the resource gives, as a
        person knows it (docs/id-model.md, Worker names); the others it gives become aliases of it
        (`aliases`), so records that other sources name by them are the same worker's."""
        # The conventions make these text; a resource that gives another type names nothing by it.
        service, role, pod, host, instance = (v if isinstance(v, str) and v else None for v in map(attrs.get, (
            "service.name", "tracejoin.role", "k8s.pod.name", "host.name", "service.instance.id")))
        # What the process states (trace-join's middleware; its spans) before what its name suggests.
        role = role or _role_of_spans(spans)
        named_role = None if role else _role_of_service(service)
        pid, vllm_pid = (v if isinstance(v, (int, str)) and not isinstance(v, bool) and v != "" else None
                         for v in (attrs.get("process.pid"), attrs.get("vllm.process_id")))
        names = [
            pod,
            # as TensorRT-LLM's perf-metrics files name the process, so engine ids scoped by either match
            f"{host}:{pid}" if host and pid is not None else None,
            # vLLM's resource names no host: its process is its service and pid
            f"{service or 'vllm'}:{vllm_pid}" if vllm_pid is not None else None,
            # the SDK draws a random UUID when nobody names the instance: that names nothing a person knows
            instance if instance and not UUID_RE.match(instance) else None,
            host if pid is None else None,  # a host runs many processes: with a pid, host:pid names this one
        ]
        names = [n for n in names if n]
        if names:
            worker = names[0]
            self.aliases.update((name, worker) for name in names[1:] if name != worker)
        else:
            worker = next(filter(None, map(_dynamo_instance, spans)), None)
            if worker is not None:
                named_role = None if role else named_role or _role_of_service(worker.split(":")[0])
            elif service in self._identity_by_service:
                return self._identity_by_service[service]
            else:
                worker = service or instance
        identity = (worker, named_role, "name") if named_role else (worker, role, None)
        if service:
            self._identity_by_service[service] = identity
        return identity

    def _span(self, span: Span, worker: str | None, role: str | None, role_from: str | None) -> Record:
        attrs, content = self._without_content(span.attrs)
        if span.name == _TRTLLM_DISAGG_SPAN:
            role = role or "router"
        start, end = span.start_ns, span.end_ns
        record = Record(
            kind="span",
            name=span.name or "",
            time_ns=start,
            duration_ns=(end - start) if start is not None and end is not None else None,
            worker=worker,
            role=role,
            status=_STATUS.get(span.status_code),
            trace_id=span.trace_id,
            span_id=span.span_id,
            parent_span_id=span.parent_span_id,
        )
        if record.trace_id is None or record.span_id is None:
            raise Unparseable(f"span {record.name!r} has no traceId or spanId")
        # Dynamo's frontend root span (kind INTERNAL in 1.6.1), or a server span of an entry tier.
        record.entry = record.name == "http-request" or (_SPAN_KINDS.get(span.kind) == "server" and role in ENTRY_ROLES)
        http_status = attrs.get("http.response.status_code") or attrs.get("http.status_code")
        if http_status is not None:
            record.status = str(http_status)
        self._ids(record, attrs, worker, span.scope)
        # Events keep their name and time (and an exception what it says; span_event).
        extra = {"span_kind": _SPAN_KINDS.get(span.kind, str(span.kind)), "scope": span.scope, "role_from": role_from,
                 "status_message": span.status_message, "events": span.events, CONTENT_CHARS: content,
                 **_trtllm_span_attrs(attrs), **_llm_d_span_attrs(attrs)}
        record.attrs = {**attrs, **{k: v for k, v in extra.items() if v is not None}}
        return record

    def _log(self, log: Log, worker: str | None, role: str | None, role_from: str | None) -> Record:
        attrs, content = self._without_content(log.attrs)
        body = log.body
        event = log.event_name or attrs.get("event.name")  # the attribute: SDKs before LogRecord.event_name
        if body is not None and isinstance(event, str) and event.startswith(_CONTENT_EVENT_PREFIX):
            name = event  # its body is its messages
            if self.keep_content:
                attrs = {**attrs, "body": body}
            else:
                content = {**(content or {}), "body": _chars(body)}
        else:
            name = body if isinstance(body, str) else (log.event_name or "")
        record = Record(
            kind="log",
            name=name if isinstance(name, str) else orjson.dumps(name).decode(),
            time_ns=log.time_ns or log.observed_ns,  # Dynamo 1.6.1 sets only the observed time
            worker=worker,
            role=role,
            level=log.severity_text or None,
            trace_id=log.trace_id,
            span_id=log.span_id,
        )
        if log.scope == _DYNAMO_AUDIT_SCOPE and isinstance(attrs.get("payload"), str):
            attrs, content = self._audit_payload(record, attrs, content)
        self._ids(record, attrs, worker, log.scope)
        extra = {k: v for k, v in (("scope", log.scope), (CONTENT_CHARS, content), ("role_from", role_from)) if v}
        record.attrs = {**attrs, **extra} if extra else (attrs or None)
        return record

    def _audit_payload(self, record: Record, attrs: dict, content: dict | None) -> tuple[dict, dict | None]:
        """Dynamo's audit record: its `payload` is the chat request and its reply as JSON text. The
        reply's id is the request's; without --keep-content the payload is kept without its
        messages and choices' text (what the request asked for, the reply's id, finish reasons and
        usage), its length counted as left out."""
        try:
            payload = orjson.loads(attrs["payload"])
        except orjson.JSONDecodeError:
            payload = None
        if not isinstance(payload, dict):
            return attrs, content
        response = payload.get("response") if isinstance(payload.get("response"), dict) else {}
        if isinstance(response.get("id"), str):
            record.add_id(REPLY_ID, response["id"])
            for kind, value in derived(REPLY_ID, response["id"]):
                record.add_id(kind, value)
        if self.keep_content:
            return attrs, content
        choices = response.get("choices") if isinstance(response.get("choices"), list) else []
        kept = {k: payload[k] for k in ("schema_version", "request_id", "requested_streaming", "model") if k in payload}
        kept["response"] = {k: response[k] for k in ("id", "model", "usage") if k in response}
        kept["response"]["finish_reasons"] = [c.get("finish_reason") for c in choices if isinstance(c, dict)]
        return {**attrs, "payload": kept}, {**(content or {}), "payload": len(attrs["payload"])}

    def _without_content(self, attrs: dict) -> tuple[dict, dict | None]:
        """The attributes without their text, and the characters of each one left out (None when
        none was); the attributes as they are when the user keeps content."""
        plain = self._plain_keys
        if self.keep_content or attrs.keys() <= plain:
            return attrs, None
        kept, content = {}, {}
        for key, value in attrs.items():
            if key in plain:
                kept[key] = value
            elif is_content(key):
                content[key] = _chars(value)
            else:
                kept[key] = value
                if len(plain) < _PLAIN_KEYS_MAX and len(key) <= _PLAIN_KEY_CHARS:
                    plain.add(key)
        return (kept, content) if content else (attrs, None)

    @staticmethod
    def _ids(record: Record, attrs: dict, worker: str | None, scope: str | None = None) -> None:
        if scope == _SGLANG_SCOPE or attrs.get("module") == "sglang::request":
            _sglang_ids(record, attrs)
            return
        for key, kind in _ID_ATTRIBUTES.items():
            value = attrs.get(key)
            if value is None:  # as most of these keys are, on most records
                continue
            for v in value if isinstance(value, list) else (value,):
                if isinstance(v, (str, int)):
                    record.add_id(kind, v)
        record.add_id(TRACE_ID, record.trace_id)
        for key in ("tracejoin.engine_request_id", "gen_ai.request.id"):
            value = attrs.get(key)
            if value is None:
                continue
            # gen_ai.request.id is TensorRT-LLM's integer engine id, or vLLM's external id (naming
            # the reply when serving alone, the internal UUID under Dynamo).
            text = str(value)
            if text.startswith(REPLY_PREFIXES):
                for kind, id_value in vllm_external_ids(text) or [(REPLY_ID, text)]:
                    record.add_id(kind, id_value)
            elif UUID_RE.match(text):
                record.add_id(INTERNAL_ID, text.lower())
            else:
                record.add_id(ENGINE_REQUEST_ID, text, attrs.get("tracejoin.engine_worker") or worker)


def _sglang_ids(record: Record, attrs: dict) -> None:
    """SGLang's spans (`sglang/srt/observability/trace.py`): the request's root carries the rid's
    last `_` part as `rid` (not an id of the request's own: `3` of `<rid>_3`) and, once finished, the
    whole rid as `gen_ai.request.id`, the reply id; its `bootstrap_room` (hex) joins a disaggregated
    request's prefill and decode."""
    record.add_id(TRACE_ID, record.trace_id)
    rid = attrs.get("gen_ai.request.id")
    if isinstance(rid, str):
        record.add_id(REPLY_ID, rid)
    record.add_id(BOOTSTRAP_ROOM, bootstrap_room(attrs.get("bootstrap_room")))


def _trtllm_span_attrs(attrs: dict) -> dict:
    """TensorRT-LLM's `llm_request` span (`tensorrt_llm/llmapi/tracing.py`) in the terms its perf records
    use: latencies in ms (it sends seconds, -1 when unmeasured) and the finish reason (it sends the
    list as a JSON string)."""
    out = {}
    for key, name in _TRTLLM_LATENCIES.items():
        value = attrs.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            out[name] = round(value * 1000, 3)
    reasons = attrs.get("gen_ai.response.finish_reasons")
    if isinstance(reasons, str) and reasons.startswith("["):
        try:
            reasons = orjson.loads(reasons)
        except orjson.JSONDecodeError:
            reasons = None
    if isinstance(reasons, list) and reasons and all(isinstance(r, str) for r in reasons):
        out["finish_reason"] = ",".join(reasons)
    return out


def _llm_d_span_attrs(attrs: dict) -> dict:
    """llm-d's P/D sidecar request span's times (ms) under the record contract's names."""
    out = {}
    for key, name in _LLM_D_TIMES.items():
        value = attrs.get(_LLM_D_PREFIX + key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            out[name] = value
    return out


def _role_of_spans(spans: list[Span]) -> str | None:
    """The role a resource's spans show when nothing names one. "frontend": the process took an
    HTTP request no traced process sent it (a SERVER span with OpenTelemetry's HTTP server
    attributes and no parent); however its service is named, it is the tier a client called.
    "worker": it ran requests on an engine (TensorRT-LLM's and vLLM's `llm_request` span, which
    carries the engine's `gen_ai.request.id` and its latencies, and no HTTP attributes). SGLang's
    request root span names the server's side: `prefill Req …`, `decode Req …`, ` Req …` alone."""
    role = None
    for span in spans:
        if span.scope == _SGLANG_SCOPE and (m := _SGLANG_ROOT.match(span.name or "")):
            return {"prefill": "prefill", "decode": "decode"}.get(m.group(1), "agg")
        if any(key.startswith(_LLM_D_PREFIX) for key in span.attrs):  # llm-d's P/D sidecar: its request, its legs
            return "proxy"
        if any(key.startswith(_LLM_D_EPP_PREFIX) for key in span.attrs):
            return "router"
        if _SPAN_KINDS.get(span.kind) != "server":
            continue
        if "http.request.method" in span.attrs or "http.method" in span.attrs:
            if span.parent_span_id is None:
                return "frontend"
        elif "gen_ai.request.id" in span.attrs:
            role = "worker"
    return role


def _role_of_service(name: str | None) -> str | None:
    if not name:
        return None
    name = name.lower()
    for role in ("prefill", "decode", "frontend", "router", "proxy", "ctx", "gen"):
        if role in name:
            return role
    return None
