"""Dynamo request-trace rows (`dynamo.request.trace.v1`): `request_end`, `request_payload` and
tool events, from the file sink (`.jsonl` or `.jsonl.gz`) or mixed into a worker's stderr.

They carry no trace context: they join on `request.request_id` (the internal id). Prompt and reply
text in `request_payload` is not stored; only the reply id is kept from it.

An agent's rows name its session (`agent_context.session_id`, and `parent_session_id` of a
sub-agent's), and a tool event (`tool_start`, `tool_end`, `tool_error`) the tool call
(`tool.tool_call_id`): labels (`session_id`, `tool_call_id`), so a session's id finds every request and
tool event of it without merging them. A tool event is timed by its tool's `started_at_unix_ms` and
lasts until `ended_at_unix_ms`; the requests it names (`tool.claude.source_request_id`, the one that
asked for the tool, and `consumer_request_id`, the one that took its result) are kept in its
attributes, not joined, since they are two requests.
"""

from __future__ import annotations

from ..line_attributes import REQUEST_TRACE_SCHEMA
from ..ids import INTERNAL_ID, REPLY_ID, SESSION_ID, TOOL_CALL_ID, X_REQUEST_ID
from ..records import Record
from .parsing import Unparseable, field, load_object

NAME = "dynamo_request_trace"
SCHEMA = REQUEST_TRACE_SCHEMA

# Timing and token fields worth keeping from a request_end row (ms unless named otherwise).
_REQUEST_FIELDS = (
    "model", "input_tokens", "output_tokens", "cached_tokens", "request_received_ms",
    "prefill_wait_time_ms", "prefill_time_ms", "ttft_ms", "total_time_ms", "avg_itl_ms",
    "kv_hit_rate", "kv_transfer_estimated_latency_ms", "queue_depth",
)


def sniff(path: str, head: list[bytes]) -> bool:
    return bool(head) and all(b'"dynamo.request.trace.v1"' in line for line in head)


class LineParser:
    def __init__(self, path: str):
        # The frontend writes these rows but they do not say which frontend: lookup names them after
        # the frontend the rest of the request went through.
        self.worker: str | None = None
        self.role: str | None = "frontend"

    def parse(self, line: bytes) -> list[Record]:
        # orjson refuses integers beyond 64 bits (replay hashes can be); the standard library reads
        # them, so it is the fallback for the rare row orjson cannot.
        try:
            obj = load_object(line)
        except Unparseable:
            obj = _load_bigints(line)
        return [record_from_row(obj)]


def record_from_row(obj: dict) -> Record:
    # The file sink of 1.6.1 wraps each row: {"timestamp": <ms since the sink started>, "event": row}.
    if isinstance(obj.get("event"), dict) and "schema" not in obj:
        obj = obj["event"]
    if obj.get("schema") != SCHEMA:
        raise Unparseable(f"not a {SCHEMA} row")
    event_type = field(obj, "event_type", (str,), required=True)
    time_ms = field(obj, "event_time_unix_ms", (int, float), required=True)
    request = field(obj, "request", (dict,)) or {}
    payload = field(obj, "payload", (dict,)) or {}
    request_id = field(request, "request_id", (str,)) or field(payload, "request_id", (str,))
    record = Record(kind="log", name=f"request trace: {event_type}", time_ns=int(time_ms * 1_000_000))
    record.add_id(INTERNAL_ID, request_id)
    record.add_id(X_REQUEST_ID, field(request, "x_request_id", (str,)))
    response = payload.get("response")
    if isinstance(response, dict):
        record.add_id(REPLY_ID, response.get("id") if isinstance(response.get("id"), str) else None)
    attrs = {k: request[k] for k in _REQUEST_FIELDS if k in request}
    worker = request.get("worker")
    if isinstance(worker, dict):
        # Worker ids are u64 (numbers here, strings in logs): keep them as text to match the logs.
        attrs.update({k: str(v) for k, v in worker.items() if v is not None})
    finish = request.get("finish_reason_metadata")
    if isinstance(finish, dict) and finish.get("finish_reason"):
        attrs["finish_reason"] = finish["finish_reason"]
    for key in ("endpoint", "model", "payload_complete", "payload_drop_reason"):
        if key in payload:
            attrs[key] = payload[key]
    agent = field(obj, "agent_context", (dict,))
    if agent is not None:
        attrs["agent_context"] = agent
        for key in ("session_id", "parent_session_id"):
            record.add_id(SESSION_ID, field(agent, key, (str,)))
    if isinstance(request.get("total_time_ms"), (int, float)):
        record.duration_ns = int(request["total_time_ms"] * 1_000_000)
    tool = field(obj, "tool", (dict,))
    if tool is not None:
        _tool_event(record, tool, attrs)
    record.attrs = attrs or None
    return record


def _tool_event(record: Record, tool: dict, attrs: dict) -> None:
    record.add_id(TOOL_CALL_ID, field(tool, "tool_call_id", (str,)))
    started, ended = (field(tool, key, (int, float)) for key in ("started_at_unix_ms", "ended_at_unix_ms"))
    if started:
        record.time_ns = int(started * 1_000_000)
        if ended and ended >= started:
            record.duration_ns = int((ended - started) * 1_000_000)
    attrs["tool"] = tool
    if record.name.endswith("tool_error"):
        record.status = "error"


def _load_bigints(line: bytes) -> dict:
    import json

    try:
        obj = json.loads(line)
    except (ValueError, UnicodeDecodeError) as e:
        raise Unparseable(f"invalid JSON: {e}") from None
    if not isinstance(obj, dict):
        raise Unparseable(f"expected a JSON object, got {type(obj).__name__}")
    return obj

