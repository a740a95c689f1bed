"""`collect --scrape`: a legacy TensorRT-LLM /perf_metrics endpoint forgets what it returned, and
nothing it returned is lost, across polls and across a kill -9 of the collector."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from .collector_process import query, wait_until


class DrainOnRead:
    """A worker's /perf_metrics: the items of requests finished since the last GET, then forgotten."""

    def __init__(self):
        self.pending: list[dict] = []
        self.polls: list[list[int]] = []  # the request ids each GET returned
        self.lock = threading.Lock()
        self.next_id = 0

    def finish_requests(self, n: int) -> None:
        with self.lock:
            for _ in range(n):
                t = 81234.5 + self.next_id
                self.pending.append({"request_id": self.next_id, "perf_metrics": {
                    "first_iter": 1, "last_iter": 9,
                    "timing_metrics": {"arrival_time": t, "first_scheduled_time": t + 0.001,
                                       "first_token_time": t + 0.04, "last_token_time": t + 0.5}}})
                self.next_id += 1

    def drain(self) -> bytes:
        with self.lock:
            items, self.pending = self.pending, []
            if items:
                self.polls.append([item["request_id"] for item in items])
        return json.dumps(items).encode()


@pytest.fixture
def endpoint():
    metrics = DrainOnRead()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            body = metrics.drain() if self.path == "/perf_metrics" else b"[]"
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield metrics, f"http://127.0.0.1:{server.server_address[1]}/perf_metrics"
    finally:
        server.shutdown()
        server.server_close()


STORED = "SELECT i.value, i.scope FROM records r JOIN record_ids i USING (record_id) WHERE i.kind = 'engine_request_id'"


@pytest.mark.parametrize("db", ["duckdb", "chdb"], indirect=True)
def test_a_drained_endpoint_loses_nothing_across_polls_and_kill_9(collector, endpoint, db):
    metrics, url = endpoint
    worker = url.split("/")[2]
    feeding = threading.Event()

    def feed() -> None:  # requests keep finishing while the collector polls
        while not feeding.is_set():
            metrics.finish_requests(3)
            time.sleep(0.03)

    threading.Thread(target=feed, daemon=True).start()
    c = collector("--scrape", url, "--scrape-interval", "0.1")
    wait_until(lambda: len(metrics.polls) >= 5, what="five polls")
    c.kill()
    # The collector polls again only once a poll is committed: every poll but the last before the
    # kill is stored for sure. The last one is lost only if the kill fell between the endpoint's
    # answer and the raw commit (milliseconds).
    committed_before_kill = [rid for poll in metrics.polls[:-1] for rid in poll]
    polls_before_kill = len(metrics.polls)
    restarted = collector("--scrape", url, "--scrape-interval", "0.1")
    wait_until(lambda: len(metrics.polls) >= polls_before_kill + 5, what="five polls after the restart")
    feeding.set()
    time.sleep(0.1)
    wait_until(lambda: not metrics.pending, what="the last items polled")
    assert restarted.terminate() == 0, restarted.stderr()  # a clean stop commits the poll in flight

    stored = query(db, STORED)
    ids = [int(value) for value, _ in stored]
    assert {scope for _, scope in stored} == {worker}  # engine ids scoped to the polled server
    assert len(ids) == len(set(ids)), "an item was stored twice"
    assert set(committed_before_kill) <= set(ids)
    after_restart = [rid for poll in metrics.polls[polls_before_kill:] for rid in poll]
    assert set(after_restart) <= set(ids)
    lost = set(range(metrics.next_id)) - set(ids)
    assert lost <= set(metrics.polls[polls_before_kill - 1]), f"lost outside the kill's window: {sorted(lost)}"
    assert query(db, "SELECT count(*) FROM received WHERE body IS NOT NULL") == [(0,)]  # every answer read
    assert query(db, "SELECT DISTINCT source, kind FROM records") == [("perf_metrics_legacy", "perf")]
