"""The ClickHouse store (collector/clickhouse_store.py) on chdb, ClickHouse's engine in process: what
a fleet's many writers rely on (the same lines stored once, whoever reads them and however often,
and a writer killed at any moment losing and duplicating nothing), and the commands it does not
run saying so. The lookups themselves are held to the DuckDB store's answers by the lookup tests,
which run on both (`either_store`)."""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import subprocess
import sys
import time

import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.collector.store import StoreError, open_store
from tracejoin.collector.times import ns_to_iso

from ..conftest import assert_one_clear_line

pytest.importorskip("chdb", reason="chdb (ClickHouse's engine in process) is not installed")


def _stored(spec: str) -> tuple[int, int, int]:
    """Records, ids and quarantined lines in the store, each counted once (FINAL)."""
    with open_store(spec, read_only=True) as store:
        return tuple(store.engine.arrow(f"SELECT count() AS n FROM {table} FINAL").column("n")[0].as_py()
                     for table in ("records", "record_ids", "quarantine"))


def _stored_or_none(spec: str) -> int:
    """Records stored, 0 where a kill came before the store was made."""
    try:
        return _stored(spec)[0]
    except StoreError:
        return 0


def _sample(folder, requests: int) -> DynamoSample:
    sample = DynamoSample()
    for i in range(requests):
        sample.add(offset_ms=i * 7)
    sample.write(folder)
    return sample


def test_the_same_lines_are_stored_once_by_any_number_of_writers(tj, tmp_path):
    spec = f"chdb:{tmp_path / 'fleet.chdb'}"
    sample = _sample(tmp_path / "logs", 5)
    frontend = tmp_path / "logs" / "frontend.stderr.jsonl"
    bad_line = len(frontend.read_bytes().splitlines()) + 1
    with open(frontend, "a") as f:
        f.write('core \x00\x01 dump\n')  # binary data, which cannot be stored even as text: quarantined
    first = tj("ingest", tmp_path / "logs", "--json", "--store", spec, with_db=False)
    assert first.code == 2
    assert first.json()["total"]["records"] == sum(s["records"] for s in first.json()["sources"].values())
    assert first.json()["sources"]["dynamo_jsonl"]["quarantined"] == 1
    once = _stored(spec)
    assert once[0] > 5 * 15 and once[2] == 1

    # Read again, and by a second writer that found the files under another path: nothing new.
    copy = tmp_path / "node-b"
    copy.mkdir()
    for f in (tmp_path / "logs").iterdir():
        (copy / f.name).write_bytes(f.read_bytes())
    assert tj("ingest", tmp_path / "logs", "--store", spec, with_db=False).code == 0
    assert tj("ingest", copy, "--store", spec, with_db=False).code == 0
    assert _stored(spec) == once

    quarantine = tj("quarantine", "--json", "--store", spec, with_db=False).json()
    assert [(q["path"], q["line"], q["reason"]) for q in quarantine] == [(str(frontend), bad_line, "binary data (NUL bytes) in a text line")]
    [request] = tj("lookup", sample.requests[2].reply_id, "--json", "--store", spec, with_db=False).json()["requests"]
    assert {w["role"] for w in request["workers"]} == {"frontend", "prefill", "decode"}


# An ingest in batches of 40 records, so that a kill lands between two of its writes.
_INGEST_IN_SMALL_BATCHES = """
import sys
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.store import StoreError, open_store
from tracejoin.collector.times import ns_to_iso
with open_store(sys.argv[1]) as store:
    Ingester(store, batch_records=40).ingest_paths(sys.argv[2:])
"""


def test_a_writer_killed_at_any_moment_loses_and_duplicates_nothing(tmp_path):
    _sample(tmp_path / "logs", 60)
    argv = lambda spec: [sys.executable, "-c", _INGEST_IN_SMALL_BATCHES, spec, str(tmp_path / "logs")]
    whole = f"chdb:{tmp_path / 'whole.chdb'}"
    start = time.monotonic()
    subprocess.run(argv(whole), check=True, timeout=300)
    took = time.monotonic() - start
    expected = _stored(whole)

    rng = random.Random(7)
    for round in range(3):  # until a kill lands part way: on a busy machine a run may take longer
        spec = f"chdb:{tmp_path / f'killed-{round}.chdb'}"
        stored_at_kills = []
        for _ in range(4):
            p = subprocess.Popen(argv(spec), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            try:
                p.wait(timeout=rng.uniform(0.3, 1.0) * took)
            except subprocess.TimeoutExpired:
                p.send_signal(signal.SIGKILL)
                p.wait()
            stored_at_kills.append(_stored_or_none(spec))
        if any(0 < n < expected[0] for n in stored_at_kills):
            break
    subprocess.run(argv(spec), check=True, timeout=300)
    assert any(0 < n < expected[0] for n in stored_at_kills), stored_at_kills  # a kill landed part way
    assert _stored(spec) == expected


def test_commands_the_clickhouse_store_does_not_run_say_so_in_one_line(tj, tmp_path):
    spec = f"chdb:{tmp_path / 'fleet.chdb'}"
    empty = tj("lookup", "chatcmpl-x", "--store", spec, with_db=False)
    assert empty.code != 0
    assert_one_clear_line(empty)
    assert "trace-join ingest --store" in empty.err

    _sample(tmp_path / "logs", 1)
    assert tj("ingest", tmp_path / "logs", "--store", spec, with_db=False).code == 0
    demo = tj("demo", "--store", spec, with_db=False)
    assert demo.code != 0
    assert_one_clear_line(demo)
    assert "DuckDB store only" in demo.err

    # chdb lets one process at a time open a folder: the second says so, in one line.
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time\nfrom tracejoin.collector.store import open_store\n"
                               f"store = open_store({spec!r}, read_only=True)\nprint('open', flush=True)\ntime.sleep(60)"],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "open"
        held = tj("lookup", "chatcmpl-x", "--store", spec, with_db=False)
        assert held.code != 0
        assert_one_clear_line(held)
        assert "is held by another process" in held.err
    finally:
        holder.kill()
        holder.wait()


def test_requests_and_coverage_build_the_last_hour_unless_told_another_window(tj, tmp_path):
    """A fleet's store is too large to build every request at once: by default the requests that
    started in the last hour of its records, said on stderr; --since and --until choose."""
    spec = f"chdb:{tmp_path / 'fleet.chdb'}"
    sample = DynamoSample()
    early, late = sample.add(), sample.add(offset_ms=2 * 3600 * 1000)  # two hours apart
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs", "--store", spec, with_db=False).code == 0

    listed = tj("requests", "--json", "--store", spec, with_db=False)
    assert [r["trace_ids"] for r in listed.json()] == [[late.trace_id]]
    assert "last 60 minutes" in listed.err and "--since" in listed.err
    assert tj("coverage", "--json", "--store", spec, with_db=False).json()["replies"] == 1

    everything = ("--since", "2000-01-01T00:00:00Z")
    both = tj("requests", "--json", "--store", spec, *everything, with_db=False)
    assert [r["trace_ids"] for r in both.json()] == [[late.trace_id], [early.trace_id]] and not both.err
    until = ("--until", ns_to_iso(early.start_ns + 10**9))
    assert tj("coverage", "--json", "--store", spec, *everything, *until, with_db=False).json()["replies"] == 1


def test_snapshot_publishes_each_request_once_as_last_built(tj, tmp_path):
    """The tables Grafana's ClickHouse dashboards read: a worker's record published alone (an orphan)
    and then again once the router's record that joins it has come is one request, not two; a
    publish repeated adds nothing."""
    spec = f"chdb:{tmp_path / 'fleet.chdb'}"
    line = lambda ts, event, role, worker, **ids: json.dumps(
        {"schema": "tracejoin.log.v1", "ts": f"2026-12-03T10:40:0{ts}Z", "level": "info", "event": event,
         "role": role, "worker": worker, **ids}) + "\n"
    (tmp_path / "gen.jsonl").write_text(line(2, "request.end", "gen", "gen-0:8002", disagg_request_id="1099511627776",
                                             engine_request_id="1"))
    (tmp_path / "router.jsonl").write_text(line(1, "request.start", "router", "gw:8000", internal_id="r1",
                                                disagg_request_id="1099511627776", trace_id="1" * 32, span_id="1" * 16))

    def published() -> list[dict]:
        with open_store(spec, read_only=True) as store:
            return store.engine.arrow("SELECT q.has_entry AS has_entry, q.records AS records, "
                                      "(SELECT count() FROM request_records FINAL WHERE request_id = q.request_id) AS rows "
                                      "FROM requests AS q FINAL ORDER BY has_entry").to_pylist()

    since = ("--since", "2026-12-03T10:00:00Z")
    assert tj("ingest", tmp_path / "gen.jsonl", "--store", spec, with_db=False).code == 0
    alone = tj("snapshot", "--json", "--store", spec, *since, with_db=False).json()
    assert (alone["requests"], alone["replies"], alone["without_a_reply"], alone["about_no_request"]) == (1, 0, 1, 0)
    assert published() == [{"has_entry": False, "records": 1, "rows": 1}]
    assert tj("ingest", tmp_path / "router.jsonl", "--store", spec, with_db=False).code == 0
    for _ in range(2):
        assert tj("snapshot", "--json", "--store", spec, *since, with_db=False).json()["requests"] == 1
        assert published() == [{"has_entry": True, "records": 2, "rows": 2}]
    text = tj("snapshot", "--store", spec, *since, with_db=False)
    assert "published 1 groups of records" in text.out and ": 1 replies, 0 requests no reply reaches, 0 about no request;" \
        in text.out and "grafana-clickhouse-datasource" in text.out


def test_a_version_1_store_is_read_as_it_is_and_upgraded_by_a_writer(tj, tmp_path):
    from tracejoin.collector import clickhouse_store

    spec = f"chdb:{tmp_path / 'fleet.chdb'}"
    sample = _sample(tmp_path / "logs", 1)
    assert tj("ingest", tmp_path / "logs", "--store", spec, with_db=False).code == 0
    with open_store(spec) as store:  # as version 1 left it: no raw bodies in `received`
        store.engine.command("DROP TABLE received")
        store.engine.command("CREATE TABLE received (origin_id Int64, offset Int64, sha256 String, received "
                             "DateTime64(6) DEFAULT now64(6)) ENGINE = ReplacingMergeTree ORDER BY sha256")
        store.engine.command("INSERT INTO meta (key, value) VALUES ('schema_version', '1')")
    assert tj("lookup", sample.requests[0].reply_id, "--json", "--store", spec, with_db=False).code == 0
    assert tj("ingest", tmp_path / "logs", "--store", spec, with_db=False).code == 0
    with open_store(spec, read_only=True) as store:
        assert store.engine.arrow("SELECT value FROM meta FINAL WHERE key = 'schema_version'").to_pylist() == [
            {"value": str(clickhouse_store.CLICKHOUSE_SCHEMA_VERSION)}]
        assert "body" in store.engine.arrow("SELECT name FROM system.columns WHERE database = currentDatabase() "
                                            "AND table = 'received'").column("name").to_pylist()


def test_the_store_is_chosen_by_tracejoin_store(tmp_path):
    spec = f"chdb:{tmp_path / 'fleet.chdb'}"
    sample = _sample(tmp_path / "logs", 1)
    env = {**os.environ, "TRACEJOIN_STORE": spec}
    run = lambda *args: subprocess.run([sys.executable, "-m", "tracejoin.cli", *args], cwd=tmp_path, env=env,
                                       capture_output=True, text=True, timeout=120)
    assert run("ingest", str(tmp_path / "logs")).returncode == 0
    assert run("lookup", sample.requests[0].reply_id, "--json").returncode == 0
    assert not (tmp_path / "tracejoin.duckdb").exists()


def test_a_clickhouse_server_that_does_not_answer_is_said_in_one_line(tj):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    run = tj("lookup", "chatcmpl-x", "--store", f"clickhouse://127.0.0.1:{port}/fleet", with_db=False)
    assert run.code != 0
    assert_one_clear_line(run)
    assert f"cannot reach ClickHouse at 127.0.0.1:{port}: [Errno 111] Connection refused" in run.err


@pytest.mark.skipif(not os.environ.get("TRACEJOIN_CLICKHOUSE_URL"),
                    reason="no ClickHouse server: TRACEJOIN_CLICKHOUSE_URL=clickhouse://HOST:PORT/DB names one "
                           "(none can be installed here: Debian's package is from 2018)")
def test_a_clickhouse_server_through_clickhouse_connect(tj, tmp_path):
    spec = os.environ["TRACEJOIN_CLICKHOUSE_URL"]
    sample = _sample(tmp_path / "logs", 3)
    assert tj("ingest", tmp_path / "logs", "--store", spec, with_db=False).code == 0
    [request] = tj("lookup", sample.requests[1].reply_id, "--json", "--store", spec, with_db=False).json()["requests"]
    assert {w["role"] for w in request["workers"]} == {"frontend", "prefill", "decode"}


# The OpenTelemetry Collector's ClickHouse exporter's tables, columns as its
# internal/sqltemplates/traces_table.sql and logs_table.sql create them (MergeTree, no TTL, without
# the skip indexes, which change what is read, not what is found). The Collector, in Go, cannot run
# here: the rows below are written as its exporter writes a span and a log record (ids in lowercase
# hex, kinds and status codes by traceutil's names, every attribute as text).
OTEL_TABLES = [
    """CREATE TABLE otel.otel_traces (
        Timestamp DateTime64(9), TraceId String, SpanId String, ParentSpanId String, TraceState String,
        SpanName LowCardinality(String), SpanKind LowCardinality(String), ServiceName LowCardinality(String),
        ResourceAttributes Map(LowCardinality(String), String), ScopeName String, ScopeVersion String,
        SpanAttributes Map(LowCardinality(String), String), Duration UInt64, StatusCode LowCardinality(String),
        StatusMessage String,
        Events Nested (Timestamp DateTime64(9), Name LowCardinality(String), Attributes Map(LowCardinality(String), String)),
        Links Nested (TraceId String, SpanId String, TraceState String, Attributes Map(LowCardinality(String), String))
    ) ENGINE = MergeTree PARTITION BY toDate(Timestamp) ORDER BY (ServiceName, SpanName, toDateTime(Timestamp), Timestamp)""",
    """CREATE TABLE otel.otel_logs (
        Timestamp DateTime64(9), TimestampTime DateTime DEFAULT toDateTime(Timestamp), TraceId String, SpanId String,
        TraceFlags UInt8, SeverityText LowCardinality(String), SeverityNumber UInt8, ServiceName LowCardinality(String),
        Body String, ResourceSchemaUrl LowCardinality(String), ResourceAttributes Map(LowCardinality(String), String),
        ScopeSchemaUrl LowCardinality(String), ScopeName String, ScopeVersion LowCardinality(String),
        ScopeAttributes Map(LowCardinality(String), String), LogAttributes Map(LowCardinality(String), String)
    ) ENGINE = MergeTree PARTITION BY toDate(TimestampTime) ORDER BY (ServiceName, TimestampTime, Timestamp)""",
]


def test_lookup_joins_what_the_opentelemetry_collector_wrote_to_clickhouse(tj, tmp_path):
    """A gateway in front of Dynamo, traced by the plain OpenTelemetry SDK and exported through the
    Collector's ClickHouse exporter: its span and its log line are found where the exporter wrote
    them, by its x-request-id and by the reply id, on one timeline with Dynamo's records."""
    spec = f"chdb:{tmp_path / 'fleet.chdb'}"
    sample = DynamoSample()
    gateway_span = "5e1f2a3b4c5d6e7f"
    request = sample.add(client_parent_span=gateway_span)
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs", "--store", spec, with_db=False).code == 0
    [before] = tj("lookup", request.reply_id, "--json", "--store", spec, with_db=False).json()["requests"]
    start = min(r["time"] for r in before["records"])

    with open_store(spec) as store:
        _export_gateway(store.engine.command, start, request.trace_id, gateway_span)

    for query in ("gw-7", request.reply_id):
        [found] = tj("lookup", query, "--json", "--store", spec, with_db=False).json()["requests"]
        assert len(found["records"]) == len(before["records"]) + 2, query
        first, second = found["records"][:2]
        assert (first["worker"], first["kind"], first["name"]) == ("gw-1:77", "span", "POST /v1/chat/completions")
        assert (second["worker"], second["kind"], second["name"]) == ("gw-1:77", "log", "forwarding to the Dynamo frontend")
        assert found["ids"]["x_request_id"] == ["gw-7"]


def test_a_lookup_answers_alike_on_duckdb_and_on_clickhouse(tj, tmp_path):
    """Every field of `lookup --json`, but the number each store gives a request (its least record
    id there), for requests that succeeded, failed, shared an x-request-id and used completions."""
    sample = DynamoSample()
    requests = [sample.add(x_request_id="shared"), sample.add(offset_ms=2, x_request_id="shared", status="error"),
                sample.add(offset_ms=5, endpoint="completions"), sample.add(offset_ms=9, stream=False)]
    sample.write(tmp_path / "logs")
    stores = [str(tmp_path / "store.duckdb"), f"chdb:{tmp_path / 'store.chdb'}"]
    for store in stores:
        assert tj("ingest", tmp_path / "logs", "--store", store, with_db=False).code == 0

    def answer(store: str, query: str) -> dict:
        result = tj("lookup", query, "--json", "--store", store, with_db=False).json()
        for request in result["requests"] + result["summary"]:
            request.pop("request_id")
        return result

    queries = [q for r in requests for q in (r.reply_id, r.request_id, r.trace_id)] + ["shared"]
    for query in queries:
        on_duckdb, on_clickhouse = (answer(store, query) for store in stores)
        assert on_duckdb["requests"], query
        assert on_clickhouse == on_duckdb, query


def _export_gateway(command, start: str, trace_id: str, span_id: str) -> None:
    """The gateway's span and its log line, as the exporter writes them, into its tables."""
    resource = "{'service.name': 'gateway', 'host.name': 'gw-1', 'process.pid': '77'}"
    command("CREATE DATABASE otel")
    for table in OTEL_TABLES:
        command(table)
    command(f"""INSERT INTO otel.otel_traces (Timestamp, TraceId, SpanId, ParentSpanId, SpanName,
        SpanKind, ServiceName, ResourceAttributes, ScopeName, SpanAttributes, Duration, StatusCode, StatusMessage)
        VALUES (parseDateTime64BestEffort('{start}', 9) - INTERVAL 2 MILLISECOND, '{trace_id}', '{span_id}',
        '', 'POST /v1/chat/completions', 'SPAN_KIND_SERVER', 'gateway', {resource}, 'opentelemetry.instrumentation.asgi',
        {{'http.request.method': 'POST', 'http.route': '/v1/chat/completions', 'http.response.status_code': '200',
          'http.request.header.x-request-id': 'gw-7'}}, 250000000, 'STATUS_CODE_UNSET', '')""")
    command(f"""INSERT INTO otel.otel_logs (Timestamp, TraceId, SpanId, SeverityText, ServiceName, Body,
        ResourceAttributes, ScopeName, LogAttributes)
        VALUES (parseDateTime64BestEffort('{start}', 9) - INTERVAL 1 MILLISECOND, '{trace_id}', '{span_id}',
        'INFO', 'gateway', 'forwarding to the Dynamo frontend', {resource}, 'gateway', {{}})""")


def test_lookup_reads_a_database_the_opentelemetry_collector_alone_writes(tj, tmp_path):
    """A fleet that exports only through the Collector's ClickHouse exporter: nothing ingested,
    and a lookup finds the span and log line of a request there."""
    from chdb import session

    folder = tmp_path / "otel-only.chdb"
    chdb = session.Session(str(folder))
    try:
        _export_gateway(chdb.query, "2026-12-03T09:00:00.000Z", "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7")
    finally:
        chdb.close()
    [request] = tj("lookup", "gw-7", "--json", "--store", f"chdb:{folder}", with_db=False).json()["requests"]
    assert [(r["worker"], r["kind"], r["name"]) for r in request["records"]] == [
        ("gw-1:77", "span", "POST /v1/chat/completions"), ("gw-1:77", "log", "forwarding to the Dynamo frontend")]
    assert request["ids"]["trace_id"] == ["4bf92f3577b34da6a3ce929d0e0e4736"]
    listed = tj("requests", "--json", "--store", f"chdb:{folder}", with_db=False).json()
    assert [(r["route"], r["records"], r["x_request_ids"]) for r in listed] == [("/v1/chat/completions", 2, ["gw-7"])]
