"""OTLP JSON files written by the real OpenTelemetry SDK, in both encodings a file can have: the
OTLP/JSON of the spec (hex ids, what opentelemetry-exporter-otlp-json-file writes) and protobuf's
generic JSON mapping (base64 ids, enum names)."""

from __future__ import annotations

import orjson
import pytest
from google.protobuf.json_format import MessageToJson
from opentelemetry.exporter.otlp.json.file import FileSpanExporter
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from tracejoin.collector.sources import otlp_json


def trtllm_worker_spans(host: str, pid: int, engine_ids: list[int]):
    """`llm_request` spans as a TensorRT-LLM worker exports them (`tensorrt_llm/llmapi/tracing.py`: SERVER
    kind, gen_ai.request.id = the engine's own request id). TensorRT-LLM cannot run here; its span
    shape is reproduced with the real SDK."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "trtllm-gen", "host.name": host, "process.pid": pid}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("trt.llm")
    for engine_id in engine_ids:
        with tracer.start_as_current_span("llm_request", kind=SpanKind.SERVER) as span:
            span.set_attribute("gen_ai.request.id", engine_id)
            span.set_attribute("gen_ai.latency.time_to_first_token", 0.043)
            if engine_id == 99:
                span.set_status(Status(StatusCode.ERROR, "aborted"))
    provider.shutdown()
    return memory.get_finished_spans()


def write_otlp_json(path, spans) -> None:
    exporter = FileSpanExporter(path)
    exporter.export(spans)
    exporter.shutdown()


def write_protobuf_json(path, spans) -> None:
    path.write_text(MessageToJson(encode_spans(spans), indent=None) + "\n")


@pytest.mark.parametrize("writer", [write_otlp_json, write_protobuf_json], ids=["otlp-json", "protobuf-json"])
def test_engine_id_7_on_two_workers_is_two_requests(tj, tmp_path, writer):
    a = trtllm_worker_spans("gpu-node-1", 4242, [7, 8])
    b = trtllm_worker_spans("gpu-node-2", 4242, [7, 99])
    writer(tmp_path / "a.otlp.jsonl", a)
    writer(tmp_path / "b.otlp.jsonl", b)
    run = tj("ingest", tmp_path / "a.otlp.jsonl", tmp_path / "b.otlp.jsonl", "--json")
    assert run.code == 0, run.err
    assert run.json()["sources"]["otlp_json"]["records"] == 4

    result = tj("lookup", "7", "--json").json()
    assert result["id_kind"] == "engine_request_id"
    assert len(result["requests"]) == 2
    workers = sorted(r["ids"]["engine_request_id"][0]["worker"] for r in result["requests"])
    assert workers == ["gpu-node-1:4242", "gpu-node-2:4242"]
    for request in result["requests"]:
        assert len(request["records"]) == 1
        assert request["ids"]["trace_id"] == [format(s.context.trace_id, "032x")
                                              for s in a + b if s.attributes["gen_ai.request.id"] == 7
                                              and request["workers"][0]["worker"].endswith(s.resource.attributes["host.name"] + ":4242")]

    failed = tj("lookup", "99", "--json").json()["requests"]
    assert [r["records"][0]["summary"].split(" · ")[:2] for r in failed] == [["llm_request", "status=error"]]


def test_both_encodings_read_to_the_same_records(tmp_path):
    spans = trtllm_worker_spans("gpu-node-1", 1, [1, 2, 3])
    write_otlp_json(tmp_path / "hex.jsonl", spans)
    write_protobuf_json(tmp_path / "b64.jsonl", spans)
    hex_records = otlp_json.LineParser().parse((tmp_path / "hex.jsonl").read_bytes().strip())
    b64_records = otlp_json.LineParser().parse((tmp_path / "b64.jsonl").read_bytes().strip())
    b64_span = orjson.loads((tmp_path / "b64.jsonl").read_bytes())["resourceSpans"][0]["scopeSpans"][0]["spans"][0]
    assert len(b64_span["traceId"]) == 24 and b64_span["kind"] == "SPAN_KIND_SERVER"  # base64, enum names
    assert [(r.trace_id, r.span_id, r.time_ns, r.duration_ns, r.ids) for r in hex_records] == [
        (r.trace_id, r.span_id, r.time_ns, r.duration_ns, r.ids) for r in b64_records
    ]
    assert hex_records[0].trace_id == format(spans[0].context.trace_id, "032x")
    assert hex_records[0].time_ns == spans[0].start_time


def test_spec_variants_are_accepted():
    """Upper-case hex and bare-number nanos (the spec's examples), enum names, snake_case keys."""
    line = orjson.dumps({"resource_spans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "gw"}}]}, "scope_spans": [{"spans": [{
            "traceId": "4BF92F3577B34DA6A3CE929D0E0E4736", "spanId": "00F067AA0BA902B7",
            "name": "POST /v1/chat/completions", "kind": "SPAN_KIND_SERVER",
            "startTimeUnixNano": 1787307302481000000, "endTimeUnixNano": "1787307304315000000",
            "attributes": [{"key": "gen_ai.response.id", "value": {"stringValue": "chatcmpl-42"}},
                           {"key": "http.response.status_code", "value": {"intValue": 200}}],
            "status": {"code": "STATUS_CODE_OK"}}]}]}]})
    [record] = otlp_json.LineParser().parse(line)
    assert record.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert record.duration_ns == 1_834_000_000
    assert record.status == "200"
    assert ("reply_id", "chatcmpl-42", None) in record.ids
    assert record.attrs["span_kind"] == "server"


def test_dynamo_log_records_without_time_use_the_observed_time():
    """Dynamo 1.6.1 exports log records with observedTimeUnixNano only, inside the request's span."""
    line = orjson.dumps({"resourceLogs": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "dynamo-frontend"}}]}, "scopeLogs": [{
            "scope": {"name": "dynamo_runtime::pipeline::network::ingress::push_handler"},
            "logRecords": [{"severityNumber": "SEVERITY_NUMBER_INFO", "severityText": "INFO",
                            "body": {"stringValue": "request received"},
                            "attributes": [{"key": "request_id", "value": {
                                "stringValue": "92224e18-6e5e-45be-945f-40267759d235"}}],
                            "traceId": "ca46679c4b7a18a186e86c72d66929df", "spanId": "c8f7db120d18136c",
                            "observedTimeUnixNano": "1796035710308707042", "flags": 1}]}]}]})
    [record] = otlp_json.LineParser().parse(line)
    assert record.time_ns == 1796035710308707042
    assert record.name == "request received"
    assert record.role == "frontend"
    assert ("internal_id", "92224e18-6e5e-45be-945f-40267759d235", None) in record.ids


@pytest.mark.parametrize("line, reason", [
    (b'{"resourceSpans": 5}', "not a list"),
    (b'{"resourceSpans": [{"scopeSpans": [{"spans": [7]}]}]}', "not an object"),
    (b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x","traceId":"zz","spanId":"00f067aa0ba902b7"}]}]}]}',
     "traceId"),
    (b'{"resourceSpans":[{"scopeSpans":[{"spans":[{"name":"x","traceId":"4bf92f3577b34da6a3ce929d0e0e4736",'
     b'"spanId":"00f067aa0ba902b7","startTimeUnixNano":"soon"}]}]}]}', "startTimeUnixNano"),
    (b'{"something":"else"}', "neither"),
])
def test_malformed_export_lines_say_why(line, reason):
    with pytest.raises(otlp_json.Unparseable, match=reason):
        otlp_json.LineParser().parse(line)


def test_a_gateway_traced_by_the_plain_sdk_lists_its_route_and_status(tj, tmp_path):
    """OpenTelemetry's HTTP conventions alone (`http.route`, `http.response.status_code` on the
    SERVER span), no trace-join middleware: `requests` shows the route and the status the client got."""
    captured = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway", "tracejoin.role": "router"}))
    provider.add_span_processor(SimpleSpanProcessor(captured))
    tracer = provider.get_tracer("plain-sdk")
    for reply, status in (("chatcmpl-plain-ok", 200), ("chatcmpl-plain-503", 503)):
        with tracer.start_as_current_span("POST", kind=SpanKind.SERVER) as span:
            span.set_attributes({"http.request.method": "POST", "http.route": "/v1/chat/completions",
                                 "url.path": f"/v1/chat/completions/{reply}", "http.response.status_code": status,
                                 "gen_ai.response.id": reply})
            if status >= 500:
                span.record_exception(RuntimeError("upstream unavailable"))
    provider.shutdown()
    write_protobuf_json(tmp_path / "gateway.jsonl", list(captured.get_finished_spans()))
    assert tj("ingest", tmp_path / "gateway.jsonl").code == 0

    listed = {r["reply_id"]: r for r in tj("requests", "--json").json()}
    assert {reply: (r["route"], r["http_status"], r["error"]) for reply, r in listed.items()} == {
        "chatcmpl-plain-ok": ("/v1/chat/completions", 200, False),
        "chatcmpl-plain-503": ("/v1/chat/completions", 503, True)}
    [failed] = tj("lookup", "chatcmpl-plain-503", "--json").json()["requests"][0]["records"]
    assert failed["summary"].endswith("exception RuntimeError: upstream unavailable")  # the span's exception event


def test_a_gateway_whose_resource_names_no_role_is_the_frontend_of_its_requests(tj, tmp_path):
    """The plain SDK with nothing but a service name: the process whose root SERVER span carries
    OpenTelemetry's HTTP attributes took the client's request. Its role is frontend, its spans
    are the request's entry (status in the heading, child spans joined), and lookup, requests and
    coverage agree on the replies."""
    captured = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "gateway"}))
    provider.add_span_processor(SimpleSpanProcessor(captured))
    tracer = provider.get_tracer("plain-sdk")
    for reply, status in (("chatcmpl-gw-ok", 200), ("chatcmpl-gw-503", 503)):
        with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as span:
            span.set_attributes({"http.request.method": "POST", "http.route": "/v1/chat/completions",
                                 "http.response.status_code": status, "gen_ai.response.id": reply})
            with tracer.start_as_current_span("chat llama", kind=SpanKind.CLIENT) as call:
                call.set_attributes({"gen_ai.operation.name": "chat", "gen_ai.request.model": "llama"})
    provider.shutdown()
    write_protobuf_json(tmp_path / "gateway.jsonl", list(captured.get_finished_spans()))
    assert tj("ingest", tmp_path / "gateway.jsonl").code == 0

    [request] = tj("lookup", "chatcmpl-gw-503", "--json").json()["requests"]
    assert [w["role"] for w in request["workers"]] == ["frontend"]
    assert sorted(r["summary"].split(" · ")[0] for r in request["records"]) == ["POST /v1/chat/completions",
                                                                                 "chat llama"]
    assert "HTTP 503" in tj("lookup", "chatcmpl-gw-503").out.splitlines()[2]
    listed = {r["reply_id"]: r["http_status"] for r in tj("requests", "--json").json()}
    assert listed == {"chatcmpl-gw-ok": 200, "chatcmpl-gw-503": 503}
    coverage = tj("coverage", "--json").json()
    assert coverage["replies"] == 2


def test_an_engine_span_whose_resource_names_no_role_is_a_worker_not_an_entry(tj, tmp_path):
    """TensorRT-LLM's and vLLM's `llm_request` spans are SERVER roots when nothing upstream passed
    a traceparent, under a service name that may say nothing of a role: they are an engine worker's,
    not an entry tier's, and coverage counts them as the worker lookup shows."""
    captured = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "trtllm-serve"}))
    provider.add_span_processor(SimpleSpanProcessor(captured))
    with provider.get_tracer("trt.llm").start_as_current_span("llm_request", kind=SpanKind.SERVER) as span:
        span.set_attribute("gen_ai.request.id", 31)
    provider.shutdown()
    [record] = otlp_json.LineParser().parse(MessageToJson(encode_spans(captured.get_finished_spans()),
                                                          indent=None).encode())
    assert (record.role, record.entry) == ("worker", False)
    write_protobuf_json(tmp_path / "engine.jsonl", captured.get_finished_spans())
    assert tj("ingest", tmp_path / "engine.jsonl").code == 0
    [request] = tj("lookup", "31", "--json").json()["requests"]
    assert [w["role"] for w in request["workers"]] == ["worker"]
    assert tj("coverage", "--json").json()["orphans"] == {"requests": 1, "records": 1}  # no reply reaches it


def test_a_role_read_from_a_service_name_says_so_and_a_stated_one_outweighs_it(tj, tmp_path):
    """`dynamo-prefill` suggests a prefill worker, but only its name does: the answer says the role
    was read from the name. A process that states its role (trace-join's `tracejoin.role`) is shown
    as it says, however it is named."""
    captured = InMemorySpanExporter()
    providers = [TracerProvider(resource=Resource.create(resource)) for resource in (
        {"service.name": "decode-router", "tracejoin.role": "frontend"}, {"service.name": "dynamo-prefill"})]
    for provider in providers:
        provider.add_span_processor(SimpleSpanProcessor(captured))
    with providers[0].get_tracer("plain-sdk").start_as_current_span("POST", kind=SpanKind.SERVER) as span:
        span.set_attribute("gen_ai.response.id", "chatcmpl-named-role")
        with providers[1].get_tracer("plain-sdk").start_as_current_span("prefill") as work:
            work.set_attribute("gen_ai.response.id", "chatcmpl-named-role")
    for provider in providers:
        provider.shutdown()
    write_protobuf_json(tmp_path / "spans.jsonl", list(captured.get_finished_spans()))
    assert tj("ingest", tmp_path / "spans.jsonl").code == 0
    [request] = tj("lookup", "chatcmpl-named-role", "--json").json()["requests"]
    assert sorted((w["worker"], w["role"], w["role_from"]) for w in request["workers"]) == [
        ("decode-router", "frontend", "stated"), ("dynamo-prefill", "prefill", "name")]
    text = tj("lookup", "chatcmpl-named-role").out
    assert "prefill (by its name)" in text and "frontend (by its name)" not in text


def test_a_span_exported_twice_is_shown_once_naming_both_files(tj, tmp_path):
    spans = trtllm_worker_spans("gpu-node-1", 4242, [31])
    write_otlp_json(tmp_path / "first.jsonl", spans)
    write_protobuf_json(tmp_path / "again.jsonl", spans)  # the same span, other bytes: stored twice
    assert tj("ingest", tmp_path / "first.jsonl", tmp_path / "again.jsonl").code == 0

    [request] = tj("lookup", "31", "--json").json()["requests"]
    [record] = request["records"]
    paths = {record["origin"]["path"], *(also["origin"]["path"] for also in record["also"])}
    assert paths == {str(tmp_path / "first.jsonl"), str(tmp_path / "again.jsonl")}
    assert record["summary"].endswith("also from otlp_json")
    assert [(w["worker"], w["records"]) for w in request["workers"]] == [("gpu-node-1:4242", 1)]


@pytest.mark.parametrize("resource, worker, aliases", [
    ({"service.name": "frontend", "service.instance.id": "c487d536-9a1e-4f0b-8d2c-55e0a1b2c3d4"}, "frontend", {}),
    ({"service.name": "trtllm-gen", "host.name": "gpu-3", "process.pid": 777}, "gpu-3:777", {}),
    ({"service.name": "trtllm-gen", "host.name": "gpu-3", "process.pid": 777, "k8s.pod.name": "gen-5d8f-q7"},
     "gen-5d8f-q7", {"gpu-3:777": "gen-5d8f-q7"}),
    ({"service.name": "vllm", "vllm.process_id": 4182}, "vllm:4182", {}),
    ({"service.name": "gateway", "service.instance.id": "gw-1:8000"}, "gw-1:8000", {}),  # trace-join's middleware
    ({"service.name": "sglang", "host.name": "qwen3-prefill-0"}, "qwen3-prefill-0", {}),
])
def test_a_resource_names_its_process_as_a_person_knows_it(resource, worker, aliases):
    """The pod, else host and pid, else vLLM's service and pid, else an instance id someone chose,
    else the host, else the service: never the SDK's random instance UUID while a name exists; the
    resource's other names of the process become aliases of it."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource(resource))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("any").start_as_current_span("work", kind=SpanKind.SERVER):
        pass
    provider.shutdown()
    parser = otlp_json.LineParser()
    [record] = parser.parse(MessageToJson(encode_spans(memory.get_finished_spans()), indent=None).encode())
    assert (record.worker, parser.aliases) == (worker, aliases)


def dynamo_audit_line(rid: str, reply_id: str, prompt: str, answer: str) -> bytes:
    """A Dynamo frontend's audit record (its `dynamo.payload` sink, ai-dynamo/dynamo#9390) as an OTLP
    log export: body `openai.chat_completion`, the request and its reply in `payload` as JSON text."""
    payload = {"schema_version": 1, "request_id": rid, "requested_streaming": True, "model": "qwen3",
               "request": {"model": "qwen3", "messages": [{"role": "user", "content": prompt}]},
               "response": {"id": reply_id, "model": "qwen3", "usage": {"prompt_tokens": 9, "completion_tokens": 3},
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": answer}}]}}
    attributes = {"rid": rid, "endpoint": "chat_completions", "model": "qwen3", "streaming": True,
                  "audit_complete": True, "payload": orjson.dumps(payload).decode()}
    return orjson.dumps({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "dynamo-frontend"}}]},
        "scopeLogs": [{"scope": {"name": "dynamo.payload"}, "logRecords": [{
            "observedTimeUnixNano": "1796035710408707042", "severityText": "INFO",
            "body": {"stringValue": "openai.chat_completion"},
            "attributes": [{"key": k, "value": {"boolValue": v} if isinstance(v, bool) else {"stringValue": v}}
                           for k, v in attributes.items()]}]}]}]})


def test_a_dynamo_audit_record_joins_its_request_without_its_text(tj, tmp_path):
    rid = "92224e18-6e5e-45be-945f-40267759d235"
    line = dynamo_audit_line(rid, f"chatcmpl-{rid}", "the secret prompt", "the secret answer")
    [record] = otlp_json.LineParser().parse(line)
    assert {("internal_id", rid), ("reply_id", f"chatcmpl-{rid}")} <= {(k, v) for k, v, _ in record.ids}
    assert "secret" not in orjson.dumps(record.attrs).decode()
    assert record.attrs["payload"]["response"] == {"id": f"chatcmpl-{rid}", "model": "qwen3",
                                                   "usage": {"prompt_tokens": 9, "completion_tokens": 3},
                                                   "finish_reasons": ["stop"]}
    assert record.attrs["content_chars"]["payload"] > 0
    [kept] = otlp_json.LineParser(keep_content=True).parse(line)
    assert "the secret prompt" in kept.attrs["payload"]

    (tmp_path / "audit.otlp.jsonl").write_bytes(line + b"\n")
    (tmp_path / "frontend.jsonl").write_text(orjson.dumps({
        "time": "2026-11-30T10:48:30.100000Z", "level": "INFO", "target": "dynamo_llm::http::service::openai",
        "message": "request received", "request_id": rid, "span_name": "http-request"}).decode() + "\n")
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", f"chatcmpl-{rid}", "--json").json()["requests"]
    assert sorted(r["source"] for r in request["records"]) == ["dynamo_jsonl", "otlp_json"]


def test_dynamos_readable_console_and_its_otlp_log_records_show_each_event_once(tj, tmp_path):
    """Dynamo 1.6 exports OTLP log records beside a readable (text) console (ai-dynamo/dynamo#10817):
    each event reaches the store twice, the text line naming neither the process nor the span, the
    OTLP record its fields as attributes, not after the message. Lookup shows each event once."""
    rid = "92224e18-6e5e-45be-945f-40267759d235"
    scope = f"http-request{{method=POST uri=/v1/chat/completions version=HTTP/1.1 request_id={rid}}}"
    (tmp_path / "frontend.log").write_text(
        f"2026-11-30T10:48:30.100000Z  INFO {scope}: dynamo_llm::http::service::openai: request received\n"
        f"2026-11-30T10:48:30.300000Z  INFO {scope}: dynamo_llm::http::service::metrics: request completed "
        f"elapsed_ms=200\n")

    def exported(ns: int, message: str, **fields) -> dict:
        attributes = {"request_id": rid, **fields}
        return {"observedTimeUnixNano": str(ns), "severityText": "INFO", "body": {"stringValue": message},
                "attributes": [{"key": k, "value": {"stringValue": v}} for k, v in attributes.items()],
                "traceId": "ca46679c4b7a18a186e86c72d66929df", "spanId": "c8f7db120d18136c"}

    (tmp_path / "frontend.otlp.jsonl").write_bytes(orjson.dumps({"resourceLogs": [{
        "resource": {"attributes": [{"key": "service.name", "value": {"stringValue": "dynamo-frontend"}}]},
        "scopeLogs": [{"scope": {"name": "dynamo_llm::http::service"}, "logRecords": [
            exported(1796035710100004000, "request received"),
            exported(1796035710300005000, "request completed", elapsed_ms="200")]}]}]}) + b"\n")
    assert tj("ingest", tmp_path).code == 0
    [request] = tj("lookup", rid, "--json").json()["requests"]
    assert [(r["name"].split(" elapsed")[0], r["role"], {r["source"], *(a["source"] for a in r["also"])})
            for r in request["records"]] == [("request received", "frontend", {"dynamo_jsonl", "otlp_json"}),
                                             ("request completed", "frontend", {"dynamo_jsonl", "otlp_json"})]
    assert [w["role"] for w in request["workers"]] == ["frontend"]  # the text's process: its http-request span
