"""Connections that stay open, send nothing, or send half a request must not stop the OTLP/HTTP
receiver from serving the clients that do send: open connections are not a reason to refuse a
request; a request head must arrive within --header-timeout and its body within --body-timeout,
or the connection is closed; past --max-connections, new connections are closed at once, while
every request on the connections already accepted is answered."""

from __future__ import annotations

import socket
import threading
import time

from opentelemetry.sdk.trace.export import SpanExportResult

from tests.collector.collector_process import query
from tests.collector.otlp_senders import http_exporter, protobuf_body, sdk_spans


def host_port(base_url: str) -> tuple[str, int]:
    host, port = base_url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def post(spans) -> bytes:
    """A whole OTLP/HTTP request, as bytes on the wire."""
    body = protobuf_body(spans)
    return (b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)) + body


def status_of(conn: socket.socket) -> int:
    """The status of the answer read from the connection (0 when it is closed without one)."""
    answer = b""
    while b"\r\n" not in answer:
        chunk = conn.recv(4096)
        if not chunk:
            return 0
        answer += chunk
    return int(answer.split(b" ", 2)[1])


def closed_by_peer(conn: socket.socket, within: float) -> float | None:
    """Seconds until the collector closed the connection, or None if it did not within `within`."""
    started = time.monotonic()
    conn.settimeout(within)
    try:
        while conn.recv(4096):
            pass
    except TimeoutError:
        return None
    except ConnectionResetError:
        pass
    return time.monotonic() - started


def test_open_connections_do_not_refuse_requests(collector, db):
    c = collector()
    address = host_port(c.http)
    # 40 connections that sent nothing, and 40 that each send a request at once.
    idle = [socket.create_connection(address) for _ in range(40)]
    busy = [socket.create_connection(address) for _ in range(40)]
    statuses = {}

    def send(i: int, conn: socket.socket) -> None:
        conn.sendall(post(sdk_spans([f"chatcmpl-conn-{i}"])))
        statuses[i] = status_of(conn)

    threads = [threading.Thread(target=send, args=item) for item in enumerate(busy)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses.values()) == [200] * 40
    # A real exporter's request is answered at once too, beside 80 open connections.
    started = time.monotonic()
    assert http_exporter(c.http).export(sdk_spans(["chatcmpl-beside-idle"])) == SpanExportResult.SUCCESS
    assert time.monotonic() - started < 2
    for conn in idle + busy:
        conn.close()
    assert c.terminate() == 0, c.stderr()
    assert query(db, "SELECT count(*) FROM records") == [(41,)]


def test_slow_and_half_open_clients_time_out_without_holding_the_service(collector):
    c = collector("--header-timeout", "1", "--body-timeout", "2")
    address = host_port(c.http)
    half_heads, half_bodies = [], []
    for _ in range(40):
        conn = socket.create_connection(address)
        conn.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n")
        half_heads.append(conn)
        conn = socket.create_connection(address)
        conn.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\nContent-Type: application/x-protobuf\r\n"
                     b"Content-Length: 100000\r\n\r\n" + bytes(10))
        half_bodies.append(conn)
    # One that sends its head a byte at a time: each byte does not buy it more time.
    dripping = socket.create_connection(address)
    stop_dripping = threading.Event()

    def drip() -> None:
        for byte in b"POST /v1/traces HTTP/1.1\r\nHost: collector\r\n" * 10:
            if stop_dripping.wait(0.1):
                return
            try:
                dripping.send(bytes([byte]))
            except OSError:
                return

    threading.Thread(target=drip, daemon=True).start()
    started = time.monotonic()
    assert http_exporter(c.http).export(sdk_spans(["chatcmpl-beside-half-open"])) == SpanExportResult.SUCCESS
    assert time.monotonic() - started < 1
    # Each is closed once its time is up (counted from when it connected), not held open.
    heads_closed = [closed_by_peer(conn, 3) for conn in half_heads]
    assert None not in heads_closed and max(heads_closed) < 2.5
    assert closed_by_peer(dripping, 3) is not None
    stop_dripping.set()
    assert None not in [closed_by_peer(conn, 3) for conn in half_bodies]
    assert time.monotonic() - started < 4
    assert http_exporter(c.http).export(sdk_spans(["chatcmpl-after-half-open"])) == SpanExportResult.SUCCESS


def test_connections_past_the_cap_are_refused_and_accepted_requests_answered(collector):
    c = collector("--max-connections", "8")
    address = host_port(c.http)
    accepted = [socket.create_connection(address) for _ in range(8)]
    time.sleep(0.2)  # the collector has taken them
    refused = socket.create_connection(address)  # the kernel accepts; the collector closes it
    assert closed_by_peer(refused, 2) is not None
    statuses = {}

    def send(i: int, conn: socket.socket) -> None:
        conn.sendall(post(sdk_spans([f"chatcmpl-capped-{i}"])))
        statuses[i] = status_of(conn)

    threads = [threading.Thread(target=send, args=item) for item in enumerate(accepted)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(statuses.values()) == [200] * 8
    for conn in accepted:
        conn.close()
    time.sleep(0.2)
    assert http_exporter(c.http).export(sdk_spans(["chatcmpl-after-cap"])) == SpanExportResult.SUCCESS
