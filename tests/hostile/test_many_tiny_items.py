"""A body of very many tiny spans or log records costs far more than its size: each item becomes a
protobuf message or a JSON object, then a span or log record, a record and a row, however few
bytes it took. The intake budget weighs a body by its items too, before it is parsed: one of more
items than even an empty budget holds is refused for good (413 / INVALID_ARGUMENT, which no SDK
retries), one that does not fit beside the bodies in progress is told to retry later (503 with
Retry-After / UNAVAILABLE with a RetryInfo), and either way the collector's memory stays within
the budget and what is sent next is stored."""

from __future__ import annotations

import socket
import time

import grpc
import httpx
import pytest
from google.rpc import error_details_pb2

from tests.collector.collector_process import query, wait_until
from tests.collector.otlp_senders import protobuf_body, sdk_spans

MAX_BODY = 4 << 20
BUDGET = 24 * MAX_BODY  # the least budget collect accepts: one body of MAX_BODY, by its size
# What the collector's memory may grow by beside the budget: the store's own budget
# (TRACEJOIN_MEMORY_LIMIT), once something is stored, and the thread stacks and allocator arenas
# that the first requests to each receiver bring into use.
STORE_MEMORY_MIB = 32
OTHER_MIB = 16
TIMEOUT_S = 20  # a body the collector decodes instead of refusing takes longer than this
PROTOBUF = {"content-type": "application/x-protobuf"}
JSON = {"content-type": "application/json"}
LOGS_SERVICE = "/opentelemetry.proto.collector.logs.v1.LogsService/Export"
TRACE_SERVICE = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def varint(n: int) -> bytes:
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes(out + bytes([n]))


def _delimited(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field."""
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def empty_items(n: int) -> bytes:
    """An export request of n empty items in one scope of one resource, as protobuf: a traces and
    a logs export are alike on the wire (resource blocks are field 1, their scope blocks field 2,
    their spans or log records field 2), and an empty item is its field's tag and a zero length."""
    return _delimited(1, _delimited(2, _delimited(2, b"") * n))


def empty_json_logs(n: int) -> bytes:
    return b'{"resourceLogs":[{"scopeLogs":[{"logRecords":[' + b",".join([b"{}"] * n) + b"]}]}]}"


def grpc_export(address: str, method: str, body: bytes):
    """Export `body` as it is over gRPC; the RpcError when refused, else None."""
    with grpc.insecure_channel(address) as channel:
        try:
            channel.unary_unary(method)(body, timeout=TIMEOUT_S)
        except grpc.RpcError as e:
            return e
    return None


def post(client: httpx.Client, path: str, body: bytes, headers: dict) -> httpx.Response:
    """The answer, or a 504 of our own when none came in time (the collector took the body in)."""
    try:
        return client.post(path, content=body, headers=headers)
    except httpx.TimeoutException:
        return httpx.Response(504, text=f"no answer within {TIMEOUT_S} s")


def test_bodies_of_millions_of_empty_items_are_refused_for_good_within_the_budget(collector, db, monkeypatch):
    monkeypatch.setenv("TRACEJOIN_MEMORY_LIMIT", f"{STORE_MEMORY_MIB}MB")
    c = collector("--max-body", MAX_BODY, "--intake-budget", BUDGET, "--snapshot-interval", "600")
    most = (MAX_BODY - 16) // 2
    protobuf_logs, protobuf_spans = empty_items(most), empty_items(most - 1)  # two million each
    json_logs = empty_json_logs((MAX_BODY - 64) // 3)  # 1.4 million
    assert max(map(len, (protobuf_logs, protobuf_spans, json_logs))) <= MAX_BODY
    time.sleep(0.5)
    baseline_kib = c.peak_rss_kib()

    with httpx.Client(base_url=c.http, timeout=TIMEOUT_S) as client:
        answers = [post(client, "/v1/logs", protobuf_logs, PROTOBUF), post(client, "/v1/logs", json_logs, JSON)]
        refused = grpc_export(c.grpc, TRACE_SERVICE, protobuf_spans)
        growth_mib = (c.peak_rss_kib() - baseline_kib) / 1024
        assert growth_mib < (BUDGET >> 20) + OTHER_MIB, f"peak RSS grew by {growth_mib:.0f} MiB"
        assert [a.status_code for a in answers] == [413, 413], [a.text for a in answers]
        assert not any("retry-after" in a.headers for a in answers)
        assert refused is not None and refused.code() == grpc.StatusCode.INVALID_ARGUMENT, refused
        assert "google.rpc.retryinfo-bin" not in dict(refused.trailing_metadata() or ())

        normal = client.post("/v1/traces", content=protobuf_body(sdk_spans(["chatcmpl-after-tiny"])),
                             headers=PROTOBUF)
        assert normal.status_code == 200, normal.text
    growth_mib = (c.peak_rss_kib() - baseline_kib) / 1024
    assert growth_mib < (BUDGET >> 20) + STORE_MEMORY_MIB + OTHER_MIB, f"peak RSS grew by {growth_mib:.0f} MiB"
    assert c.terminate() == 0, c.stderr()
    assert query(db, "SELECT kind, name FROM records") == [("span", "POST /v1/chat/completions")]


def test_a_body_of_tiny_items_that_does_not_fit_beside_the_others_is_told_to_retry(collector, db, monkeypatch):
    monkeypatch.setenv("TRACEJOIN_MEMORY_LIMIT", f"{STORE_MEMORY_MIB}MB")
    c = collector("--max-body", MAX_BODY, "--intake-budget", BUDGET, "--snapshot-interval", "600")
    # A request whose body is slow to come holds its share of the budget (its Content-Length at
    # what a protobuf byte weighs) all along, leaving a few MiB.
    held = 15 * MAX_BODY // 16
    host, port = c.http.removeprefix("http://").rsplit(":", 1)
    slow = socket.create_connection((host, int(port)))
    slow.sendall(f"POST /v1/logs HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/x-protobuf\r\n"
                 f"Content-Length: {held}\r\n\r\n".encode())
    # Twenty thousand empty log records take 40 KB (60 KB as JSON) and, decoded and stored, more
    # than the few MiB left, yet fit in the whole budget: so they are told to retry, and are stored
    # once there is room. Each body is of its own count, so none is taken for a retry of another.
    over_http, over_grpc, as_json = empty_items(20_000), empty_items(20_001), empty_json_logs(20_002)
    a_share = empty_items(0) + _delimited(15, bytes(MAX_BODY // 8))  # no items; its bytes weigh 12 MiB
    with httpx.Client(base_url=c.http, timeout=TIMEOUT_S) as client:
        wait_until(lambda: client.post("/v1/logs", content=a_share, headers=PROTOBUF).status_code == 503,
                   timeout=5, what="the slow request to hold its share")

        answers = [client.post("/v1/logs", content=over_http, headers=PROTOBUF),
                   client.post("/v1/logs", content=as_json, headers=JSON)]
        assert [a.status_code for a in answers] == [503, 503], [a.text for a in answers]
        assert all(a.headers.get("retry-after") == "1" for a in answers)
        refused = grpc_export(c.grpc, LOGS_SERVICE, over_grpc)
        assert refused is not None and refused.code() == grpc.StatusCode.UNAVAILABLE, refused
        retry = dict(refused.trailing_metadata() or ()).get("google.rpc.retryinfo-bin")
        assert error_details_pb2.RetryInfo.FromString(retry).retry_delay.seconds == 1

        slow.close()  # its share is given back; the retries fit
        for body, headers in ((over_http, PROTOBUF), (as_json, JSON)):
            wait_until(lambda: client.post("/v1/logs", content=body, headers=headers).status_code == 200,
                       timeout=10, what="a retry to be taken")
        wait_until(lambda: grpc_export(c.grpc, LOGS_SERVICE, over_grpc) is None, timeout=10, what="a gRPC retry")
    assert c.terminate() == 0, c.stderr()
    assert query(db, "SELECT count(*) FROM records WHERE kind = 'log'") == [(60_003,)]


def test_every_block_and_item_protobuf_would_build_is_weighed():
    """Items are counted on the wire, before protobuf parses the body: however its fields are
    written (a tag in more bytes than it needs, a length in three, unknown fields of every wire
    type between them), each block and item the parser would build is counted, and a body that
    is not protobuf is refused as such."""
    from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

    from tracejoin.collector.service.otlp import ITEM_WEIGHT, LOGS, IntakeBudget, Receiver, Undecodable

    # Fields the counting skips: a varint, a fixed32, a fixed64 and a string.
    unknown = varint(7 << 3) + varint(300) + varint(9 << 3 | 5) + bytes(4) + varint(10 << 3 | 1) + bytes(8)
    unknown += _delimited(3, b"schema")
    long_tag = b"\x92\x00"  # field 2, length-delimited, its tag in two bytes
    items = [long_tag + b"\x00"] * 700  # empty log records
    items += [_delimited(2, _delimited(3, b"INFO") + unknown)] * 300
    items.append(_delimited(2, _delimited(3, bytes(20_000))))  # its length takes three bytes
    scope = unknown + b"".join(items)
    resource = _delimited(1, b"") + _delimited(2, scope) + unknown + long_tag + varint(len(scope)) + scope
    body = unknown + _delimited(1, resource) * 3 + _delimited(1, b"")
    parsed = logs_service_pb2.ExportLogsServiceRequest.FromString(body)
    built = sum(1 + sum(1 + len(s.log_records) for s in r.scope_logs) for r in parsed.resource_logs)
    assert built == 3 * (1 + 2 * (1 + 1001)) + 1
    with IntakeBudget(1 << 40).hold() as hold:
        Receiver("test").decode(LOGS, body, "protobuf", hold)
        assert hold.nbytes == built * ITEM_WEIGHT

    cut_short, a_group, a_long_varint = body[:-1], body + b"\x0b", body + b"\x08" + b"\xff" * 20
    for not_protobuf in (cut_short, a_group, a_long_varint):
        with IntakeBudget(1 << 40).hold() as hold, pytest.raises(Undecodable):
            Receiver("test").decode(LOGS, not_protobuf, "protobuf", hold)
