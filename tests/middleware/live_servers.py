"""Real servers for the middleware tests: uvicorn on a loopback ephemeral port, in a thread, and the
JSON lines files they write."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx
import uvicorn
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tracejoin.middleware import TraceJoinMiddleware

from .openai_like_app import create_app

WAIT_S = 5.0


@contextmanager
def running(config: uvicorn.Config) -> Iterator[str]:
    """Serve `config` (port 0: any free port) until the block ends; yields the base URL."""
    config.timeout_graceful_shutdown = 1  # a stream a test left open must not hold shutdown up
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn", daemon=True)
    thread.start()
    wait_until(lambda: server.started or not thread.is_alive(), "uvicorn did not start")
    assert server.started, "uvicorn stopped while starting"
    port = server.servers[0].sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(WAIT_S)


def wait_until(condition: Callable[[], bool], failure: str) -> None:
    deadline = time.monotonic() + WAIT_S
    while not condition():
        assert time.monotonic() < deadline, failure
        time.sleep(0.01)


def app_config(app) -> uvicorn.Config:
    return uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning")


class LogFile:
    """A JSON lines file a server writes; the records a test waits for."""

    def __init__(self, path: Path):
        self.path = path

    def records(self) -> list[dict]:
        if not self.path.exists():
            return []
        text = self.path.read_text(encoding="utf-8")
        complete = text[: text.rfind("\n") + 1]  # a line being written is read next time
        return [json.loads(line) for line in complete.splitlines()]

    def wait_for(self, predicate: Callable[[dict], bool], count: int = 1) -> list[dict]:
        """The matching records, once there are `count` of them (the end record is written just
        after the client has the last byte, so a test reading right away could miss it)."""
        wait_until(lambda: len(self._matching(predicate)) >= count, f"{count} matching records never came")
        return self._matching(predicate)

    def _matching(self, predicate: Callable[[dict], bool]) -> list[dict]:
        return [record for record in self.records() if predicate(record)]

    def end_of(self, **fields) -> dict:
        """The request.end record whose fields include `fields`."""
        return self.wait_for(lambda r: r["event"] == "request.end" and fields.items() <= r.items())[0]

    def for_request(self, internal_id: str) -> list[dict]:
        return [record for record in self.records() if record.get("internal_id") == internal_id]


def event(name: str) -> Callable[[dict], bool]:
    return lambda record: record["event"] == name


@dataclass
class Served:
    """An OpenAI-like app behind TraceJoinMiddleware, running."""

    url: str
    log: LogFile
    spans: InMemorySpanExporter
    release: threading.Event  # lets a `hold` stream finish

    def span_of(self, internal_id: str) -> ReadableSpan:
        """The request's span, once it has ended: after the response's last byte went out, so a
        client can have read the whole response a moment before."""
        deadline = time.monotonic() + WAIT_S
        while True:
            spans = [s for s in self.spans.get_finished_spans()
                     if s.attributes.get("tracejoin.internal_id") == internal_id]
            if spans or time.monotonic() > deadline:
                break
            time.sleep(0.01)
        assert len(spans) == 1, f"one span per request, got {len(spans)}"
        return spans[0]


@contextmanager
def serve_openai_like_app(log_path: Path, **middleware_options) -> Iterator[Served]:
    release = threading.Event()
    spans = InMemorySpanExporter()
    app = create_app(release)
    app.add_middleware(
        TraceJoinMiddleware, log=str(log_path), span_processors=[SimpleSpanProcessor(spans)], **middleware_options
    )
    with running(app_config(app)) as url:
        try:
            yield Served(url, LogFile(log_path), spans, release)
        finally:
            release.set()  # before the server stops, so a held stream can end


@contextmanager
def streaming_post(url: str, body: dict) -> Iterator[httpx.Response]:
    """POST and hold the streamed reply open; leaving the block early closes the connection mid-stream."""
    with httpx.Client(timeout=WAIT_S) as client, client.stream("POST", url, json=body) as response:
        yield response


def first_data_event(lines: Iterator[str]) -> dict:
    """The JSON of the next `data:` line of an event stream."""
    return json.loads(next(line for line in lines if line.startswith("data:"))[5:])
