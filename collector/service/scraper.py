"""Polling legacy TensorRT-LLM `GET /perf_metrics` endpoints (`collect --scrape URL`).

Such an endpoint answers with the requests finished since the last call and forgets them (drained
on read: `get_perf_metrics` in TensorRT-LLM's `tensorrt_llm/serve/openai_server.py`). So each answer is committed before the next poll, and
committed raw first (`received.body`): reading it into records is a second step, which a parser
error or a crash cannot make lose the answer. The raw copy is cleared in the transaction that
stores its records; a restart reads what a crash left raw. What no poller can save: an answer in
flight when the collector dies between the endpoint's reply and the raw commit (milliseconds).

The items do not name their server: the worker is the URL's host:port.
"""

from __future__ import annotations

import hashlib
import threading
from typing import Callable
from urllib.parse import urlsplit

import httpx
import orjson

from ..records import BatchBuilder, Unstorable
from ..sources.perf_metrics_legacy import NAME as SOURCE, records_from_perf_metrics_response
from ..store import Parsed, Store
from .writer import Body, Busy, Writer

TIMEOUT_S = 10


class Scraper:
    def __init__(self, writer: Writer, url: str, interval_s: float, report: Callable[[str], None]):
        self.writer = writer
        self.url = url
        self.interval_s = interval_s
        self.report = report
        self.origin = f"perf_metrics:{url}"
        self.worker = urlsplit(url).netloc
        self._client = httpx.Client(timeout=TIMEOUT_S)
        self._last_problem: str | None = None

    def run(self, stop: threading.Event) -> None:
        try:
            self.writer.run(self._read_raw_job)  # what an earlier run committed raw but did not read
            while not stop.is_set():
                self.poll()
                stop.wait(self.interval_s)
        except Busy:  # the writer stopped: the collector is shutting down
            pass
        finally:
            self._client.close()

    def poll(self) -> None:
        try:
            self._poll()
        except Busy:
            raise
        except Exception as e:  # noqa: BLE001 - the store failed: say so, and go on polling
            self.report(f"{self.url}: storing its answer failed: {type(e).__name__}: {e}")

    def _poll(self) -> None:
        try:
            answer = self._client.get(self.url)
            answer.raise_for_status()
        except httpx.HTTPError as e:
            self._problem(f"{self.url}: {type(e).__name__}: {e}")
            return
        self._problem(None)
        body = answer.content
        if body.strip() == b"[]":
            return
        # Committed raw before the next poll can drain more; then read into records.
        self.writer.submit(Body(self.origin, SOURCE, hashlib.sha256(body).hexdigest(), raw=body), wait=True).result()
        self.writer.run(self._read_raw_job).result()

    def _read_raw_job(self, store: Store) -> None:
        """On the writer thread: the answers still raw, into records (unreadable ones quarantined)."""
        origin = self.writer.origin(self.origin, SOURCE)
        rows = store.unparsed(origin.origin_id)
        if not rows:
            return
        batch = BatchBuilder(SOURCE, origin)
        for number, _, raw in rows:
            try:
                batch.add(records_from_perf_metrics_response(orjson.loads(raw), self.worker), number)
            except Unstorable as e:
                batch.quarantine(self.url, number, number, str(e), raw)
            except Exception as e:  # noqa: BLE001 - as ingest does with a line no parser expected
                batch.quarantine(self.url, number, number, f"unreadable answer ({type(e).__name__}: {e})", raw)
        store.write_batch(batch, parsed=Parsed(origin.origin_id, [(number, sha256) for number, sha256, _ in rows]))

    def _problem(self, text: str | None) -> None:
        """Say when polling starts failing, or fails differently, not at every poll."""
        if text and text != self._last_problem:
            self.report(text)
        self._last_problem = text
