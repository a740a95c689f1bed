"""Reads through a running collector (`lookup`, `requests`, … while `collect` holds the store) go
to its query endpoint, a Unix socket beside the store that only the collector's user can connect
to. Other local users can open connections to every TCP port the collector listens on and leave
them idle; the owner's commands are answered all the same. The endpoint answers a parameter a
query does not take with 400 and one line, and a body over its limit with 413, unread."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import httpx
import orjson
from opentelemetry.sdk.trace.export import SpanExportResult

from tests.collector.collector_process import Collector
from tests.collector.otlp_senders import grpc_exporter, sdk_spans

IDLE_PER_PORT = 300


def query_socket(db: Path) -> Path:
    return db.with_name(db.name + ".collector.sock")


def listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports the process listens on: its sockets' inodes, found in the kernel's tables."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except FileNotFoundError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target.removeprefix("socket:[").removesuffix("]"))
    ports = set()
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
            local, state, inode = line.split()[1], line.split()[3], line.split()[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                ports.add(int(local.rsplit(":", 1)[1], 16))
    return ports


def test_idle_connections_to_every_port_do_not_block_the_owners_reads(collector, tj, db):
    c = collector()
    assert grpc_exporter(c.grpc).export(sdk_spans(["chatcmpl-crowded"])) == SpanExportResult.SUCCESS
    ports = listening_tcp_ports(c.pid)
    assert ports, "the collector listens on its OTLP ports"
    idle = [socket.create_connection(("127.0.0.1", port)) for port in ports for _ in range(IDLE_PER_PORT)]
    try:
        for _ in range(5):
            listed = tj("requests", "--json")
            assert listed.code == 0, listed.err
            assert [row["reply_ids"] for row in listed.json()] == [["chatcmpl-crowded"]]
        found = tj("lookup", "chatcmpl-crowded", "--json")
        assert found.code == 0, found.err
    finally:
        for conn in idle:
            conn.close()
    # Only the collector's user can connect to the endpoint.
    endpoint = query_socket(db)
    assert endpoint.is_socket() and endpoint.stat().st_mode & 0o777 == 0o600
    assert endpoint.stat().st_uid == os.getuid()
    assert c.terminate() == 0, c.stderr()
    assert not endpoint.exists()


def test_a_store_deeper_than_a_socket_address_holds_is_read_through_its_collector(tmp_path, tj):
    deep = tmp_path / ("folder-" * 15) / "store.duckdb"
    deep.parent.mkdir()
    assert len(os.fsencode(query_socket(deep))) > 107  # the most a Unix socket's address holds
    c = Collector(deep)
    try:
        c.start()
        assert grpc_exporter(c.grpc).export(sdk_spans(["chatcmpl-deep"])) == SpanExportResult.SUCCESS
        found = tj("lookup", "chatcmpl-deep", "--json", "--db", deep, with_db=False)
        assert found.code == 0, found.err
        assert found.json()["requests"][0]["ids"]["reply_id"] == ["chatcmpl-deep"]
        assert query_socket(deep).is_socket()
        assert c.terminate() == 0, c.stderr()
    finally:
        c.ensure_dead()


BAD_PARAMETERS = [
    ("lookup", {}),
    ("lookup", {"id": 5}),
    ("lookup", {"id": "chatcmpl-x", "limit": -1}),
    ("lookup", {"id": "chatcmpl-x", "limit": True}),
    ("lookup", {"id": "chatcmpl-x", "since_ns": 10**30}),
    ("requests", {"bogus": 1}),
    ("requests", {"limit": "x"}),
    ("requests", {"limit": -5}),
    ("requests", {"errors": "yes"}),
    ("requests", {"worker": ["a"]}),
    ("coverage", {"since_ns": "x"}),
    ("quarantine", {}),
    ("files", {"path": "/etc"}),
]


def test_bad_parameters_are_answered_400_in_one_line_and_a_huge_body_413(collector, db):
    c = collector()
    assert grpc_exporter(c.grpc).export(sdk_spans(["chatcmpl-asked"])) == SpanExportResult.SUCCESS
    with httpx.Client(transport=httpx.HTTPTransport(uds=str(query_socket(db))), base_url="http://collector") as client:
        for name, params in BAD_PARAMETERS:
            answer = client.post(f"/query/{name}", json=params)
            assert answer.status_code == 400, (name, params, answer.text)
            reason = answer.json()["error"]
            assert "\n" not in reason and name in reason, reason
        started = time.monotonic()
        too_big = client.post("/query/lookup", content=orjson.dumps({"id": "a" * (2 << 20)}))
        assert too_big.status_code == 413 and "limit" in too_big.json()["error"]
        assert time.monotonic() - started < 2
        # A body sent in chunks, so of no declared size, is cut off at the limit too.
        chunked = client.post("/query/lookup", content=iter([b'{"id": "', b"a" * (2 << 20), b'"}']))
        assert chunked.status_code == 413
        # The endpoint goes on answering good queries.
        found = client.post("/query/lookup", json={"id": "chatcmpl-asked"})
        assert found.status_code == 200 and found.json()["matched"] == 1
    assert c.terminate() == 0, c.stderr()
