"""Prompt and reply text sent over OTLP is not stored unless the user asks (`--keep-content`), as the
other sources store none of the prompt and reply fields they read: not the GenAI conventions'
content attributes (the legacy `gen_ai.prompt` and its indexed forms, the structured messages, tool
calls, retrievals, memories), not the bodies of GenAI events. Their length is stored instead, and
every other attribute is kept. The same holds whichever way OTLP arrives: `collect` over OTLP/HTTP
protobuf and JSON, over OTLP/gRPC and from OTLP JSON files it follows (`--watch`), and `ingest` of
OTLP JSON files.

The exports are made by the real OpenTelemetry SDK and its exporters and encoders."""

from __future__ import annotations

import io
import json
import uuid
from pathlib import Path

import duckdb
import httpx
import orjson
import pytest
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.json.file._log_exporter import FileLogExporter
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter as GrpcLogExporter
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter as HttpLogExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, LogRecordExportResult, SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tests.collector.collector_process import query, wait_until
from tests.collector.otlp_senders import grpc_exporter, http_exporter
from tracejoin.collector.sources import otlp_json

# In every piece of text sent, and nowhere else: finding it anywhere in a store means text was kept.
MARK = f"PROMPT-TEXT-{uuid.uuid4().hex}"
JSON = {"content-type": "application/json"}
TRANSPORTS = ("grpc", "http-protobuf", "http-json", "watch", "ingest")
FILES = ("watch", "ingest")  # written to a folder of their own, which collect follows or ingest reads


def text(what: str) -> str:
    return f"{MARK} {what} 57°F"  # a character UTF-8 writes in two bytes: lengths count characters


def chars(value) -> int:
    """Characters of a value: of its text, or of its compact JSON when structured (docs/formats.md)."""
    return len(value) if isinstance(value, str) else len(json.dumps(value, separators=(",", ":"), ensure_ascii=False))


def messages(role: str, what: str) -> list:
    return [{"role": role, "parts": [{"type": "text", "content": text(what)}]}]


# Per record (span or log record) name: the attributes that hold text, and the others, which are kept.
CONTENT = {
    "chat legacy": {
        "gen_ai.prompt": text("legacy prompt"),
        "gen_ai.completion": text("legacy completion"),
        "gen_ai.prompt.0.content": text("indexed prompt 0"),
        "gen_ai.prompt.1.content": text("indexed prompt 1"),
        "gen_ai.completion.0.content": text("indexed completion"),
        "gen_ai.completion.0.tool_calls.0.arguments": text("indexed tool arguments"),
        "gen_ai.completion.0.function_call.arguments": text("indexed function arguments"),
        "gen_ai.completion.0.refusal": text("an indexed field of no known name"),
    },
    "chat semconv": {  # structured values are recorded on spans as JSON strings
        "gen_ai.input.messages": json.dumps(messages("user", "input messages")),
        "gen_ai.output.messages": json.dumps(messages("assistant", "output messages")),
        "gen_ai.system_instructions": json.dumps([{"type": "text", "content": text("system instructions")}]),
        "gen_ai.tool.definitions": json.dumps([{"type": "function", "name": "get_weather",
                                                "description": text("tool definition")}]),
    },
    "execute_tool get_weather": {
        "gen_ai.tool.call.arguments": json.dumps({"location": text("tool call arguments")}),
        "gen_ai.tool.call.result": json.dumps({"conditions": text("tool call result")}),
    },
    "retrieval docs": {
        "gen_ai.retrieval.query.text": text("retrieval query"),
        "gen_ai.retrieval.documents": json.dumps([{"id": "doc_1", "score": 0.9, "content": text("document")}]),
        "gen_ai.memory.query.text": text("memory query"),
        "gen_ai.memory.records": json.dumps([{"id": "mem_1", "content": text("memory record")}]),
    },
    "gen_ai.client.inference.operation.details": {  # on events, the structured form
        "gen_ai.input.messages": messages("user", "event input messages"),
        "gen_ai.output.messages": messages("assistant", "event output messages"),
        "gen_ai.system_instructions": [{"type": "text", "content": text("event system instructions")}],
    },
}
KEPT = {
    "chat legacy": {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen3-0.6b",
        "gen_ai.prompt.0.role": "system", "gen_ai.prompt.1.role": "user", "gen_ai.completion.0.role": "assistant",
        "gen_ai.completion.0.finish_reason": "tool_calls", "gen_ai.completion.0.tool_calls.0.name": "get_weather",
        "gen_ai.completion.0.tool_calls.0.id": "call_1", "gen_ai.prompt.name": "weather-prompt",
        "gen_ai.usage.prompt_tokens": 12, "gen_ai.usage.completion_tokens": 34,
    },
    "chat semconv": {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen3-0.6b",
        "gen_ai.response.finish_reasons": ["stop"], "gen_ai.usage.input_tokens": 12, "gen_ai.usage.output_tokens": 34,
    },
    "execute_tool get_weather": {"gen_ai.tool.name": "get_weather", "gen_ai.tool.call.id": "call_1"},
    "retrieval docs": {"gen_ai.data_source.id": "H7STPQYOND", "gen_ai.request.top_k": 3},
    "gen_ai.client.inference.operation.details": {"gen_ai.usage.input_tokens": 12},
}
# GenAI events: the text is their body (an event named by its attribute `event.name` is the
# older form of the same).
BODIES = {
    "gen_ai.system.message": {"role": "system", "content": text("system message")},
    "gen_ai.user.message": {"role": "user", "content": text("user message")},
    "gen_ai.assistant.message": text("assistant message, a text body"),
    "gen_ai.tool.message": {"id": "call_1", "content": text("tool message")},
    "gen_ai.choice": {"index": 0, "finish_reason": "tool_calls", "message": {
        "role": "assistant", "content": text("choice"),
        "tool_calls": [{"id": "call_1", "type": "function",
                        "function": {"name": "get_weather", "arguments": text("choice tool arguments")}}]}},
}
NAMED_BY_ATTRIBUTE = "gen_ai.tool.message"
RECORDS = 2 + len(CONTENT) + len(BODIES)  # of one request: with its entry span and a plain log line
# Span events keep only their name and time: their attributes (here the oldest conventions'
# gen_ai.content.prompt / .completion events) are never stored.
SPAN_EVENTS = {"gen_ai.content.prompt": {"gen_ai.prompt": text("span event prompt")},
               "gen_ai.content.completion": {"gen_ai.completion": text("span event completion")}}


def reply_of(transport: str) -> str:
    return f"chatcmpl-content-{transport}"


def sdk_export(reply: str):
    """(spans, log records) of one chat request: the entry span carrying the reply id, a child span
    per kind of content, and the GenAI events, all in one trace."""
    spans, logs = InMemorySpanExporter(), InMemoryLogRecordExporter()
    resource = Resource.create({"service.name": "content-gateway", "tracejoin.role": "router"})
    tracer_provider, logger_provider = TracerProvider(resource=resource), LoggerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    tracer, logger = tracer_provider.get_tracer("tracejoin-tests"), logger_provider.get_logger("genai-events")
    with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER,
                                      attributes={"gen_ai.response.id": reply}):
        for name in ("chat legacy", "chat semconv", "execute_tool get_weather", "retrieval docs"):
            with tracer.start_as_current_span(name, kind=SpanKind.CLIENT,
                                              attributes={**CONTENT[name], **KEPT[name]}) as span:
                if name == "chat legacy":
                    for event, attributes in SPAN_EVENTS.items():
                        span.add_event(event, attributes)
        for event, body in BODIES.items():
            if event == NAMED_BY_ATTRIBUTE:
                logger.emit(body=body, attributes={"event.name": event, "gen_ai.provider.name": "openai"})
            else:
                logger.emit(body=body, event_name=event, attributes={"gen_ai.provider.name": "openai"})
        details = "gen_ai.client.inference.operation.details"
        logger.emit(event_name=details, attributes={**CONTENT[details], **KEPT[details]})
        logger.emit(body="request received", severity_text="INFO")  # not an event: its text is its name
    tracer_provider.shutdown()
    logger_provider.shutdown()
    return spans.get_finished_spans(), logs.get_finished_logs()


def otlp_json_lines(spans, logs) -> tuple[str, str]:
    """The lines the SDK's OTLP JSON file exporters write for these spans and log records."""
    span_lines, log_lines = io.StringIO(), io.StringIO()
    assert FileSpanExporter(stream=span_lines).export(spans) == SpanExportResult.SUCCESS
    assert FileLogExporter(stream=log_lines).export(logs) == LogRecordExportResult.SUCCESS
    return span_lines.getvalue(), log_lines.getvalue()


def send(transport: str, collector, reply: str, folder: Path) -> None:
    spans, logs = sdk_export(reply)
    if transport == "grpc":
        assert grpc_exporter(collector.grpc).export(spans) == SpanExportResult.SUCCESS
        assert GrpcLogExporter(endpoint=collector.grpc, insecure=True).export(logs) == LogRecordExportResult.SUCCESS
    elif transport == "http-protobuf":
        assert http_exporter(collector.http).export(spans) == SpanExportResult.SUCCESS
        assert HttpLogExporter(endpoint=f"{collector.http}/v1/logs").export(logs) == LogRecordExportResult.SUCCESS
    elif transport == "http-json":
        span_line, log_line = otlp_json_lines(spans, logs)
        for path, line in (("/v1/traces", span_line), ("/v1/logs", log_line)):
            answer = httpx.post(f"{collector.http}{path}", headers=JSON, content=line.encode())
            assert (answer.status_code, answer.json()) == (200, {})
    else:  # files for `collect --watch` or `ingest`
        span_line, log_line = otlp_json_lines(spans, logs)
        (folder / "spans.jsonl").write_text(span_line)
        (folder / "logs.jsonl").write_text(log_line)


def records_found(tj, reply: str) -> int:
    run = tj("lookup", reply, "--json")
    return len(run.json()["requests"][0]["records"]) if run.code == 0 else 0


def stored_records(db: Path, reply: str) -> dict[str, dict]:
    """{name: attrs} of the records of the reply's trace, read from the store itself."""
    rows = query(db, """
        SELECT name, attrs FROM records WHERE trace_id = (
            SELECT trace_id FROM records WHERE attrs->>'gen_ai.response.id' = ? AND kind = 'span')
        """, [reply])
    by_name = {name: json.loads(attrs) if attrs else {} for name, attrs in rows}
    assert len(by_name) == len(rows), f"two records of one name: {sorted(n for n, _ in rows)}"
    return by_name


def files_with_text(db: Path) -> list[str]:
    """The store's files (its write-ahead log and snapshot too) whose bytes hold the text, once
    every write is checkpointed into the store."""
    with duckdb.connect(str(db)) as con:
        con.execute("CHECKPOINT")
    files = (db, db.with_name(db.name + ".wal"), db.with_name(db.name + ".snapshot.duckdb"))
    return [p.name for p in files if p.exists() and MARK.encode() in p.read_bytes()]


def assert_records(records: dict[str, dict], keep: bool) -> None:
    expected_names = {"POST /v1/chat/completions", *CONTENT, *BODIES, "request received"}
    assert set(records) == expected_names, sorted(records)
    for name, content in CONTENT.items():
        attrs = records[name]
        assert {k: attrs.get(k) for k in KEPT[name]} == KEPT[name], name  # ids, model, token counts: kept
        if keep:
            assert {k: attrs.get(k) for k in content} == content, name
            assert "content_chars" not in attrs, name
        else:
            assert not set(content) & set(attrs), name
            assert attrs["content_chars"] == {k: chars(v) for k, v in content.items()}, name
    for event, body in BODIES.items():
        attrs = records[event]  # named by the event, not by its text
        assert attrs["gen_ai.provider.name"] == "openai", event
        if keep:
            assert (attrs["body"], "content_chars" in attrs) == (body, False), event
        else:
            assert ("body" in attrs, attrs["content_chars"]) == (False, {"body": chars(body)}), event
    legacy = records["chat legacy"]
    assert [e["name"] for e in legacy["events"]] == list(SPAN_EVENTS)
    assert all(set(e) == {"name", "time_ns"} for e in legacy["events"])  # with or without --keep-content
    assert records["POST /v1/chat/completions"]["gen_ai.response.id"].startswith("chatcmpl-content-")
    assert "content_chars" not in records["request received"]


@pytest.mark.parametrize("keep", [False, True], ids=["default", "keep-content"])
def test_prompt_text_is_stored_only_when_asked(collector, tj, db, tmp_path, keep):
    options = ["--keep-content"] if keep else []
    for transport in FILES:
        (tmp_path / transport).mkdir()
    c = collector("--watch", tmp_path / "watch", *options)
    for transport in TRANSPORTS:
        send(transport, c, reply_of(transport), tmp_path / transport)
    ingested = tmp_path / "ingested.duckdb"
    run = tj("ingest", tmp_path / "ingest", "--db", ingested, *options, with_db=False)
    assert run.code == 0, run.err
    wait_until(lambda: records_found(tj, reply_of("watch")) == RECORDS, what="the watched files' records")

    for transport in TRANSPORTS:
        store = ingested if transport == "ingest" else None
        run = tj("lookup", reply_of(transport), "--json", *(["--db", store] if store else []), with_db=store is None)
        assert run.code == 0, run.err
        if not keep:
            assert MARK not in run.out, transport
        request, = run.json()["requests"]
        # a GenAI event is named by its event, not by its text; kept text shows in attributes only
        assert not [r for r in request["records"] if MARK in r["name"] or MARK in r["summary"]], transport
        assert keep == any(MARK in str(r["attrs"]) for r in request["records"]), transport
        assert request["ids"]["reply_id"] == [reply_of(transport)]
        assert len(request["records"]) == RECORDS, transport
    assert c.terminate() == 0, c.stderr()

    for transport in TRANSPORTS:
        assert_records(stored_records(ingested if transport == "ingest" else db, reply_of(transport)), keep)
    for store in (db, ingested):
        assert query(store, "SELECT count(*) FROM quarantine") == [(0,)]
        if keep:
            assert store.name in files_with_text(store)  # so the search finds text that is there
        else:
            assert query(store, "SELECT count(*) FROM records WHERE contains(name, ?) OR contains(attrs::VARCHAR, ?)",
                         [MARK, MARK]) == [(0,)]
            assert files_with_text(store) == []


@pytest.mark.parametrize(("key", "content"), [
    ("gen_ai.prompt.3.content", True),
    ("gen_ai.completion.0.tool_calls.12.arguments", True),
    ("gen_ai.completion.0.reasoning_content", True),  # a field of no known name is taken for text
    ("gen_ai.prompt.0", True),
    ("gen_ai.prompt.0.role", False),
    ("gen_ai.completion.1.finish_reason", False),
    ("gen_ai.completion.0.tool_calls.2.name", False),
    ("gen_ai.prompt.name", False),  # a prompt template's name, not an index
    ("gen_ai.prompt_tokens", False),
    ("gen_ai.request.model", False),
])
def test_indexed_message_fields_are_text_unless_they_describe_the_message(key, content):
    assert otlp_json.is_content(key) is content


def test_text_is_left_out_however_many_keys_came_before():
    """A parser remembers the keys it has seen hold no text, up to a limit: a sender of endless
    new keys (or of huge ones) fills that memory, and text sent after it is still left out."""
    parser = otlp_json.LineParser()

    def export(attributes: dict) -> bytes:
        span = {"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "spanId": "9a3c1e5b7d2f4a60", "name": "chat",
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()]}
        return orjson.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]})

    parser.parse(export({"k" * 100_000: "x"}))
    parser.parse(export({f"key.{i}": "x" for i in range(2 * otlp_json._PLAIN_KEYS_MAX)}))
    record, = parser.parse(export({"key.1": "x", "key.new": "y", "gen_ai.prompt": text("after the flood")}))
    assert len(parser._plain_keys) == otlp_json._PLAIN_KEYS_MAX
    assert max(map(len, parser._plain_keys)) < 100
    assert "gen_ai.prompt" not in record.attrs
    assert record.attrs["content_chars"] == {"gen_ai.prompt": len(text("after the flood"))}
