"""An exporter that lost the answer to an export sends the same body again. The retry is answered
as stored, and stored once; the exports, tailed lines and counts committed in the same round as it
are not touched: every other export is stored and answered OK, every file line is read, and the
count the collector gives when it stops is the count it stored."""

from __future__ import annotations

import re
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import httpx
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc

from tests.collector.collector_process import query, wait_until
from tests.collector.otlp_senders import protobuf_body, sdk_spans
from tests.collector.test_collect_tail import line

PROTOBUF = {"content-type": "application/x-protobuf"}
NEW_EXPORTS = 150
RETRYING_CLIENTS = 4


def test_a_retried_export_is_acknowledged_and_touches_nothing_beside_it(collector, db, tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    c = collector("--watch", logs, "--snapshot-interval", "0.2")
    url = f"{c.http}/v1/traces"
    retried = protobuf_body(sdk_spans(["chatcmpl-retried"]))
    assert httpx.post(url, headers=PROTOBUF, content=retried).status_code == 200

    # While new exports arrive over gRPC and lines are appended to a watched file, the stored body
    # is sent again and again over HTTP, so retries share the writer's rounds with everything else.
    done = threading.Event()
    retry_answers: list[int] = []
    lines_written = 0

    def retry() -> None:
        with httpx.Client(timeout=30) as client:
            while not done.is_set():
                retry_answers.append(client.post(url, headers=PROTOBUF, content=retried).status_code)

    def append_lines() -> None:
        nonlocal lines_written
        with (logs / "app.log").open("ab") as f:
            while not done.wait(0.005):
                f.write(line(lines_written))
                f.flush()
                lines_written += 1

    requests = [trace_service_pb2.ExportTraceServiceRequest.FromString(protobuf_body(sdk_spans([f"chatcmpl-new-{i}"])))
                for i in range(NEW_EXPORTS)]
    with grpc.insecure_channel(c.grpc) as channel, ThreadPoolExecutor(16) as pool:
        stub = trace_service_pb2_grpc.TraceServiceStub(channel)

        def export(request) -> str:
            try:
                stub.Export(request, timeout=30)
                return "OK"
            except grpc.RpcError as e:
                return f"{e.code().name}: {e.details()}"

        helpers = [threading.Thread(target=retry) for _ in range(RETRYING_CLIENTS)]
        helpers.append(threading.Thread(target=append_lines))
        for t in helpers:
            t.start()
        try:
            answers = list(pool.map(export, requests))
        finally:
            done.set()
            for t in helpers:
                t.join()

    failed = [a for a in answers if a != "OK"]
    assert not failed, f"{len(failed)} of {NEW_EXPORTS} new exports failed, the first: {failed[0]}"
    assert retry_answers and set(retry_answers) == {200}, sorted(set(retry_answers))
    lines = "SELECT count(*) FROM records WHERE kind <> 'span'"
    wait_until(lambda: c.snapshot_query(lines) == [(lines_written,)], what="every line written")
    assert c.terminate() == 0, c.stderr()

    said = [c.lines.get_nowait() for _ in range(c.lines.qsize())]
    [stopped] = [ln for ln in said if ln and ln.startswith("stopped: ")]
    assert int(re.fullmatch(r"stopped: (\d+) records stored this run", stopped)[1]) == query(
        db, "SELECT count(*) FROM records")[0][0]
    assert query(db, "SELECT count(*) FROM records WHERE kind = 'span'") == [(NEW_EXPORTS + 1,)]
    assert "Error" not in c.stderr(), c.stderr()
