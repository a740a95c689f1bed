"""`trace-join collect` receives OTLP from the real SDK exporters and answers as the spec says;
`lookup`, `requests` and `coverage` work while it runs; SIGTERM flushes, snapshots and exits 0."""

from __future__ import annotations

import grpc
import httpx
import orjson
import pytest
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2, logs_service_pb2_grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord, ResourceLogs, ScopeLogs
from opentelemetry.sdk.trace.export import SpanExportResult

from .collector_process import query
from .otlp_senders import grpc_exporter, http_exporter, json_traces, protobuf_body, sdk_spans, span_id

INTERNAL_ID = "7029674b-fb5d-4e14-b2d8-e6e7f6e00764"
JSON = {"content-type": "application/json"}
PROTOBUF = {"content-type": "application/x-protobuf"}


def test_spans_from_real_exporters_are_looked_up_while_collect_runs(collector, tj, db):
    c = collector("--snapshot-interval", "600")
    by_grpc, by_http = sdk_spans(["chatcmpl-by-grpc"]), sdk_spans(["chatcmpl-by-http"])
    assert grpc_exporter(c.grpc).export(by_grpc) == SpanExportResult.SUCCESS
    assert http_exporter(c.http).export(by_http) == SpanExportResult.SUCCESS
    answer = httpx.post(f"{c.http}/v1/traces", headers=JSON,
                        content=json_traces("chatcmpl-by-json", "4bf92f3577b34da6a3ce929d0e0e4736", "9a3c1e5b7d2f4a60"))
    assert (answer.status_code, answer.headers["content-type"], answer.json()) == (200, "application/json", {})

    endpoint = db.with_name(db.name + ".collector.sock")
    assert endpoint.stat().st_mode & 0o777 == 0o600  # whoever can connect to it can query the store
    for reply, span in (("chatcmpl-by-grpc", by_grpc[0]), ("chatcmpl-by-http", by_http[0]), ("chatcmpl-by-json", None)):
        run = tj("lookup", reply, "--json")  # a separate process, while the collector holds the store
        assert run.code == 0, run.err
        request, = run.json()["requests"]
        assert request["ids"]["reply_id"] == [reply]
        assert [r["kind"] for r in request["records"]] == ["span"]
        if span is not None:
            assert request["ids"]["trace_id"] == [f"{span.context.trace_id:032x}"]
    listed = tj("requests", "--json")
    assert listed.code == 0, listed.err
    assert sorted(r["reply_ids"][0] for r in listed.json()) == [
        "chatcmpl-by-grpc", "chatcmpl-by-http", "chatcmpl-by-json"]
    coverage = tj("coverage", "--json")
    assert coverage.code == 0, coverage.err
    text = tj("lookup", "chatcmpl-by-grpc")
    assert text.code == 0 and "chatcmpl-by-grpc (reply_id) names 1 request" in text.out, text.err
    missing = tj("lookup", "chatcmpl-never-sent")
    assert missing.code == 1 and "nothing found" in missing.err

    assert c.terminate() == 0, c.stderr()
    assert not endpoint.exists()
    snapshot = db.with_name(db.name + ".snapshot.duckdb")
    assert query(snapshot, "SELECT count(*) FROM records WHERE kind = 'span'") == [(3,)]
    assert query(snapshot, "SELECT count(*) FROM requests WHERE has_entry") == [(3,)]  # what dashboards read
    # In the format Grafana's DuckDB plugin (DuckDB 1.5) opens.
    assert query(snapshot, "SELECT tags['storage_version'] FROM duckdb_databases() WHERE path LIKE '%snapshot%'") == [
        ("v1.5.0+",)]
    # Without a collector the command opens the store itself, and finds the same.
    assert tj("lookup", "chatcmpl-by-http", "--json").json()["requests"][0]["ids"]["reply_id"] == ["chatcmpl-by-http"]
    assert tj("lookup", "chatcmpl-by-grpc", "--json", "--db", snapshot, with_db=False).code == 0


def test_answers_follow_the_otlp_spec(collector, tj, db):
    c = collector()
    url = f"{c.http}/v1/traces"
    # Partial success: the readable span is stored, the two without ids are counted and explained.
    partial = httpx.post(url, headers=JSON, content=json_traces(
        "chatcmpl-partial", "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331", broken_spans=2))
    assert partial.status_code == 200
    assert partial.json()["partialSuccess"]["rejectedSpans"] in ("2", 2)
    assert "no traceId or spanId" in partial.json()["partialSuccess"]["errorMessage"]
    # Protobuf in, protobuf out.
    spans = sdk_spans(["chatcmpl-proto"])
    ok = httpx.post(url, headers=PROTOBUF, content=protobuf_body(spans))
    assert ok.status_code == 200 and ok.headers["content-type"] == "application/x-protobuf"
    assert not trace_service_pb2.ExportTraceServiceResponse.FromString(ok.content).HasField("partial_success")
    # The same body again (a client retrying after losing the answer): 200, not stored twice.
    assert httpx.post(url, headers=PROTOBUF, content=protobuf_body(spans)).status_code == 200
    # An empty request is a success.
    assert httpx.post(url, headers=JSON, content=b"{}").json() == {}
    # Undecodable: 400 with a google.rpc.Status in the request's encoding.
    bad_proto = httpx.post(url, headers=PROTOBUF, content=b"\xff\xff\xff not protobuf")
    assert bad_proto.status_code == 400
    assert status_pb2.Status.FromString(bad_proto.content).code == code_pb2.INVALID_ARGUMENT
    bad_json = httpx.post(url, headers=JSON, content=b'{"resourceSpans": [')
    assert bad_json.status_code == 400 and bad_json.json()["code"] == code_pb2.INVALID_ARGUMENT
    assert httpx.post(url, headers=JSON, content=b'{"resourceSpans": "spans"}').status_code == 400
    assert httpx.post(url, headers={"content-type": "text/plain"}, content=b"hello").status_code == 415

    # gRPC: partial success for a span without ids, INVALID_ARGUMENT for bytes that are no request.
    with grpc.insecure_channel(c.grpc) as channel:
        request = trace_service_pb2.ExportTraceServiceRequest.FromString(
            protobuf_body(sdk_spans(["chatcmpl-grpc-partial"])))
        request.resource_spans[0].scope_spans[0].spans.add(name="no ids")
        answer = trace_service_pb2_grpc.TraceServiceStub(channel).Export(request, timeout=10)
        assert answer.partial_success.rejected_spans == 1
        raw = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        with pytest.raises(grpc.RpcError) as refused:
            raw(b"\xff\xff\xff not protobuf", timeout=10)
        assert refused.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        # Logs, over gRPC and as JSON.
        log = LogRecord(time_unix_nano=1787307302481000000, severity_text="INFO",
                        body=AnyValue(string_value="request completed"),
                        attributes=[KeyValue(key="request_id", value=AnyValue(string_value=INTERNAL_ID))])
        logs = logs_service_pb2.ExportLogsServiceRequest(
            resource_logs=[ResourceLogs(scope_logs=[ScopeLogs(log_records=[log])])])
        assert not logs_service_pb2_grpc.LogsServiceStub(channel).Export(logs, timeout=10).HasField("partial_success")
    json_log = {"resourceLogs": [{"scopeLogs": [{"logRecords": [{
        "timeUnixNano": "1787307302482000000", "body": {"stringValue": "request received"},
        "attributes": [{"key": "request_id", "value": {"stringValue": INTERNAL_ID}}]}]}]}]}
    assert httpx.post(f"{c.http}/v1/logs", headers=JSON, content=orjson.dumps(json_log)).json() == {}

    found = tj("lookup", INTERNAL_ID, "--json")
    assert found.code == 0, found.err
    summaries = sorted(r["summary"] for r in found.json()["requests"][0]["records"])
    assert summaries == ["request completed", "request received"]
    assert c.terminate() == 0, c.stderr()
    stored = dict(query(db, "SELECT name, count(*) FROM records GROUP BY name"))
    assert stored == {"POST /v1/chat/completions": 3, "request completed": 1, "request received": 1}, stored
    proto_span = query(db, "SELECT span_id FROM records WHERE attrs->>'gen_ai.response.id' = 'chatcmpl-proto'")
    assert proto_span == [(span_id(spans[0]),)]


def test_a_token_is_required_when_set(collector, tj):
    c = collector("--token", "s3cret")
    body = protobuf_body(sdk_spans(["chatcmpl-token"]))
    assert httpx.post(f"{c.http}/v1/traces", headers=PROTOBUF, content=body).status_code == 401
    assert httpx.post(f"{c.http}/v1/traces", headers={**PROTOBUF, "authorization": "Bearer wrong"},
                      content=body).status_code == 401
    assert httpx.post(f"{c.http}/v1/traces", headers={**PROTOBUF, "authorization": "Bearer s3cret"},
                      content=body).status_code == 200
    spans = sdk_spans(["chatcmpl-token-grpc"])
    assert grpc_exporter(c.grpc, timeout=3).export(spans) == SpanExportResult.FAILURE
    assert grpc_exporter(c.grpc, headers={"authorization": "Bearer s3cret"}).export(spans) == SpanExportResult.SUCCESS
    # Reads go through the collector's own endpoint, which the OTLP token does not guard.
    assert tj("lookup", "chatcmpl-token-grpc", "--json").code == 0
    assert c.terminate() == 0
