"""The receivers' token is sent as `Authorization: Bearer T`. The scheme's name is case-insensitive
(RFC 7235, section 2.1) and followed by one or more spaces (RFC 6750), so a client that writes
`bearer` or `BEARER` is let in over OTLP/HTTP and OTLP/gRPC; the token itself is compared exactly,
and another scheme, a wrong token or a bare token is refused."""

from __future__ import annotations

import httpx
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.collector.collector_process import query
from tests.collector.otlp_senders import grpc_exporter, protobuf_body, sdk_spans

PROTOBUF = {"content-type": "application/x-protobuf"}
ACCEPTED = ("bearer s3cret", "BEARER s3cret", "bEaReR s3cret", "Bearer  s3cret")
REFUSED = ("bearer S3CRET", "bearer wrong", "Basic s3cret", "s3cret", "Bearers3cret", "bearer")


def test_the_scheme_is_case_insensitive_and_the_token_exact(collector, db):
    c = collector("--token", "s3cret")
    for i, authorization in enumerate(ACCEPTED):
        over_http = httpx.post(f"{c.http}/v1/traces", content=protobuf_body(sdk_spans([f"chatcmpl-http-{i}"])),
                               headers={**PROTOBUF, "authorization": authorization})
        assert over_http.status_code == 200, (authorization, over_http.content)
        over_grpc = grpc_exporter(c.grpc, timeout=5, headers={"authorization": authorization})
        assert over_grpc.export(sdk_spans([f"chatcmpl-grpc-{i}"])) == SpanExportResult.SUCCESS, authorization
    for authorization in REFUSED:
        over_http = httpx.post(f"{c.http}/v1/traces", content=protobuf_body(sdk_spans(["chatcmpl-refused"])),
                               headers={**PROTOBUF, "authorization": authorization})
        assert over_http.status_code == 401, authorization
        over_grpc = grpc_exporter(c.grpc, timeout=3, headers={"authorization": authorization})
        assert over_grpc.export(sdk_spans(["chatcmpl-refused"])) == SpanExportResult.FAILURE, authorization
    assert c.terminate() == 0, c.stderr()
    assert query(db, "SELECT count(*) FROM records") == [(2 * len(ACCEPTED),)]
