"""Limits: bodies over the size limit, before or after decompression, are refused without being
inflated; a full writer queue answers "retry later" (503 Retry-After, UNAVAILABLE with RetryInfo)."""

from __future__ import annotations

import gzip
import threading

import grpc
import httpx
import pytest
from google.rpc import code_pb2, error_details_pb2, status_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tracejoin.collector.service.http_server import HttpServer
from tracejoin.collector.service.otlp_grpc import OtlpGrpcServer
from tracejoin.collector.service.otlp_http import otlp_http_app
from tracejoin.collector.store import open_store
from tracejoin.collector.service.writer import Body, Busy, Writer

from .collector_process import query
from .otlp_senders import gzip_of_zeros, protobuf_body, sdk_spans

LIMIT = 1 << 20
PROTOBUF = {"content-type": "application/x-protobuf"}


def test_oversize_bodies_and_gzip_bombs_are_refused_without_inflating_them(collector, db):
    c = collector("--max-body", LIMIT)
    url = f"{c.http}/v1/traces"
    assert httpx.post(url, headers=PROTOBUF, content=bytes(LIMIT + 1)).status_code == 413
    # 256 MiB of zeros in 256 KiB: under the limit as sent, far over it once inflated.
    bomb = gzip_of_zeros(256 << 20)
    assert len(bomb) < LIMIT
    peak_before = c.peak_rss_kib()
    refused = httpx.post(url, headers={**PROTOBUF, "content-encoding": "gzip"}, content=bomb, timeout=30)
    peak_growth_mib = (c.peak_rss_kib() - peak_before) / 1024
    assert refused.status_code == 413
    assert status_pb2.Status.FromString(refused.content).code == code_pb2.RESOURCE_EXHAUSTED
    assert "once decompressed" in status_pb2.Status.FromString(refused.content).message
    assert peak_growth_mib < 32, f"peak RSS grew by {peak_growth_mib:.0f} MiB"
    # gzip under the limit is read; a cut-off gzip stream is not an export.
    body = protobuf_body(sdk_spans(["chatcmpl-gzip"]))
    gzipped = {**PROTOBUF, "content-encoding": "gzip"}
    assert httpx.post(url, headers=gzipped, content=gzip.compress(body)).status_code == 200
    assert httpx.post(url, headers=gzipped, content=gzip.compress(body)[:-10]).status_code == 400

    with grpc.insecure_channel(c.grpc) as channel:
        export = trace_service_pb2_grpc.TraceServiceStub(channel).Export
        big = trace_service_pb2.ExportTraceServiceRequest.FromString(body)
        big.resource_spans[0].scope_spans[0].spans[0].name = "x" * (LIMIT + 1)
        for compression in (grpc.Compression.NoCompression, grpc.Compression.Gzip):
            with pytest.raises(grpc.RpcError) as refused_grpc:
                export(big, timeout=10, compression=compression)
            assert refused_grpc.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert c.terminate() == 0
    assert query(db, "SELECT attrs->>'gen_ai.response.id' FROM records") == [("chatcmpl-gzip",)]


@pytest.fixture
def stalled_writer(db):
    """A writer on a real store whose queue holds one record and whose thread is held up."""
    store = open_store(db)
    writer = Writer(store, report=print, queue_records=1)
    writer.start()
    running, release = threading.Event(), threading.Event()
    held = writer.run(lambda _store: running.set() or release.wait(30))
    assert running.wait(10)
    writer.submit(Body("test", "otlp_json", "0" * 64), wait=False)  # fills the queue
    try:
        yield writer
    finally:
        release.set()
        held.result(30)
        writer.stop()
        store.close()


def test_a_full_queue_answers_retry_later(stalled_writer):
    with pytest.raises(Busy):
        stalled_writer.submit(Body("test", "otlp_json", "1" * 64), wait=False)
    body = protobuf_body(sdk_spans(["chatcmpl-busy"]))

    http = HttpServer(otlp_http_app(stalled_writer), "127.0.0.1:0")
    http.start()
    try:
        answer = httpx.post(f"http://{http.address}/v1/traces", headers=PROTOBUF, content=body)
    finally:
        http.stop()
    assert answer.status_code == 503 and answer.headers["retry-after"] == "1"
    assert status_pb2.Status.FromString(answer.content).code == code_pb2.UNAVAILABLE

    receiver = OtlpGrpcServer(stalled_writer, "127.0.0.1:0")
    receiver.start()
    try:
        with grpc.insecure_channel(receiver.address) as channel, pytest.raises(grpc.RpcError) as refused:
            trace_service_pb2_grpc.TraceServiceStub(channel).Export(
                trace_service_pb2.ExportTraceServiceRequest.FromString(body), timeout=10)
    finally:
        receiver.stop()
    assert refused.value.code() == grpc.StatusCode.UNAVAILABLE
    retry = error_details_pb2.RetryInfo.FromString(dict(refused.value.trailing_metadata())["google.rpc.retryinfo-bin"])
    assert retry.retry_delay.seconds == 1


@pytest.mark.parametrize(("variable", "pool"), [(None, "system"), ("mimalloc", "mimalloc")])
def test_writers_take_arrow_memory_from_the_system_allocator_unless_told_otherwise(tmp_path, variable, pool):
    # Arrow's default allocator keeps what each batch freed: next to DuckDB's budget that held a
    # 5 GB ingest over 500 MB resident (docs/performance.md, benchmark 5).
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "ARROW_DEFAULT_MEMORY_POOL"}
    if variable:
        env["ARROW_DEFAULT_MEMORY_POOL"] = variable
    script = ("import sys, pyarrow; from tracejoin.collector.store import open_store; "
              "open_store(sys.argv[1]).close(); print(pyarrow.default_memory_pool().backend_name)")
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path / "s.duckdb")],
                         env=env, capture_output=True, text=True, check=True).stdout
    assert out.strip() == pool
