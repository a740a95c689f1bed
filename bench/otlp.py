"""4. OTLP intake: spans/s over OTLP/HTTP protobuf into `trace-join collect` and into Arize Phoenix
(`phoenix serve`, offline), the same bodies from the same client, in the same run.

The bodies are what the OpenTelemetry SDK's OTLP/HTTP exporter sends: batches of 512 real SDK
spans (the batch span processor's default) encoded by its encoder, built once and posted by a few
keep-alive clients at once, so the client costs little next to the server. Each body holds
different spans: the collector recognizes a body it stored before. trace-join answers 200 only
after committing; Phoenix answers before its bulk inserter stores the spans, so its time runs
until its database holds them all.
"""

from __future__ import annotations

import shutil
import sqlite3
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from tracejoin.collector.store import open_store

from .common import REPO, TRACE_JOIN, Config, Row, Server, env_with, free_port, median
from .corpus import request_ids
from .profile import summarize

BATCH = 512
CLIENTS = 4
TARGET_RATIO = 1.0


def export_bodies(spans: int) -> list[bytes]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-frontend",
                                                        "service.instance.id": "bench:8000"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    for k in range(spans):
        ids = request_ids(k)
        with tracer.start_as_current_span("POST /v1/chat/completions", kind=SpanKind.SERVER) as span:
            span.set_attributes({
                "http.request.method": "POST", "url.path": "/v1/chat/completions", "http.response.status_code": 200,
                "gen_ai.response.id": ids.reply_id, "tracejoin.internal_id": ids.internal_id,
                "http.request.header.x-request-id": ids.x_request_id, "gen_ai.request.model": "qwen/qwen3-0.6b",
                "gen_ai.usage.input_tokens": 128, "gen_ai.usage.output_tokens": 150,
            })
    finished = memory.get_finished_spans()
    return [encode_spans(finished[i:i + BATCH]).SerializeToString() for i in range(0, len(finished), BATCH)]


def post_all(url: str, bodies: list[bytes]) -> tuple[float, int]:
    """Post every body, retrying what the server asks to retry; (seconds, retries)."""
    retries = 0

    def post(body: bytes, client: httpx.Client) -> int:
        tries = 0
        while True:
            answer = client.post(url, content=body, headers={"content-type": "application/x-protobuf"})
            if answer.status_code == 200:
                return tries
            if answer.status_code not in (429, 502, 503, 504):
                raise RuntimeError(f"{url}: HTTP {answer.status_code}: {answer.text[:200]}")
            tries += 1
            time.sleep(float(answer.headers.get("retry-after", "0.1")))

    clients = [httpx.Client(timeout=60) for _ in range(CLIENTS)]
    start = time.perf_counter()
    with ThreadPoolExecutor(CLIENTS) as pool:
        for tries in pool.map(lambda i: post(bodies[i], clients[i % CLIENTS]), range(len(bodies))):
            retries += tries
    seconds = time.perf_counter() - start
    for client in clients:
        client.close()
    return seconds, retries


def _fresh_dir(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def trace_join_run(cfg: Config, bodies: list[bytes], spans: int, profile_to: Path | None = None) -> tuple[float, float]:
    """(seconds until every body is acknowledged = committed, the collector's peak RSS)."""
    folder = _fresh_dir(cfg.data / "collect")
    db = folder / "otlp.duckdb"
    port = free_port()
    cmd = [TRACE_JOIN, "collect", "--db", str(db), "--otlp-http", f"127.0.0.1:{port}", "--otlp-grpc", "off",
           "--snapshot-interval", "3600"]
    with Server(cmd, port, log=folder / "collect.log", profile_to=profile_to) as server:
        seconds, _ = post_all(f"http://127.0.0.1:{port}/v1/traces", bodies)
    with open_store(db, read_only=True) as store:
        stored = store.con.execute("SELECT count(*) FROM records WHERE kind = 'span'").fetchone()[0]
    if stored != spans:
        raise RuntimeError(f"trace-join collect stored {stored} spans of {spans}")
    return seconds, server.peak_rss_mb


def phoenix_run(cfg: Config, phoenix: str, bodies: list[bytes], spans: int) -> tuple[float, float]:
    """(seconds until Phoenix's database holds every span, seconds until every body was answered)."""
    folder = _fresh_dir(cfg.data / "phoenix")
    port = free_port()
    env = env_with(PHOENIX_WORKING_DIR=str(folder), PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(free_port()),
                   PHOENIX_HOST="127.0.0.1", PHOENIX_TELEMETRY_ENABLED="false",
                   PHOENIX_LOGGING_LEVEL="warning", PHOENIX_DB_LOGGING_LEVEL="warning")
    with Server([phoenix, "serve"], port, env=env, log=folder / "phoenix.log"):
        _wait_until_healthy(f"http://127.0.0.1:{port}/healthz")
        start = time.perf_counter()
        acknowledged, _ = post_all(f"http://127.0.0.1:{port}/v1/traces", bodies)
        deadline = start + 600
        while _phoenix_spans(folder) < spans:
            if time.perf_counter() > deadline:
                raise RuntimeError(f"Phoenix stored {_phoenix_spans(folder)} spans of {spans} in 600 s")
            time.sleep(0.05)
        stored = time.perf_counter() - start
    return stored, acknowledged


def _wait_until_healthy(url: str, timeout: float = 120) -> None:
    """Phoenix listens before its routes are ready, and a port picked free may have been taken since."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"Phoenix does not answer {url} after {timeout} s")
        time.sleep(0.2)


def _phoenix_spans(folder: Path) -> int:
    try:
        with sqlite3.connect(f"file:{folder / 'phoenix.db'}?mode=ro", uri=True, timeout=1) as con:
            return con.execute("SELECT count(*) FROM spans").fetchone()[0]
    except sqlite3.Error:
        return 0  # not created yet


def find_phoenix(given: str | None) -> str | None:
    for candidate in (given, str(REPO / ".venv-phoenix" / "bin" / "phoenix"), shutil.which("phoenix")):
        if candidate and Path(candidate).exists():
            return candidate
    return None


def run(cfg: Config, spans: int, phoenix: str | None, notes: list[str]) -> list[Row]:
    phoenix = find_phoenix(phoenix)
    bodies = export_bodies(spans)
    ours, rss, theirs, theirs_acked = [], [], [], []
    for _ in range(cfg.runs):
        seconds, peak = trace_join_run(cfg, bodies, spans)
        ours.append(seconds)
        rss.append(peak)
        if phoenix:
            stored, acked = phoenix_run(cfg, phoenix, bodies, spans)
            theirs.append(stored)
            theirs_acked.append(acked)
    rate = spans / median(ours)
    how = f"{spans:,} spans in {len(bodies)} bodies of {BATCH}, {CLIENTS} clients"
    rows = [Row("4 otlp", "`trace-join collect` peak RSS under load", median(rss), "MB")]
    if cfg.profile:
        raw = cfg.data / "profiles" / "collect.txt"
        trace_join_run(cfg, bodies, spans, profile_to=raw)
        notes.append(summarize(raw))
    if not phoenix:
        notes.append("4 otlp: Phoenix not found (make bench installs it in .venv-phoenix; or --phoenix PATH)")
        return [Row("4 otlp", "spans/s into `trace-join collect`", rate, "spans/s", note=how), *rows]
    stored, acked = spans / median(theirs), spans / median(theirs_acked)
    return [
        Row("4 otlp", "spans/s stored: `trace-join collect` vs Phoenix", rate, "spans/s", stored,
            f"≥ {TARGET_RATIO:g}×", rate >= TARGET_RATIO * stored,
            f"{how}; trace-join acks after commit, Phoenix's database polled until it holds all"),
        Row("4 otlp", "spans/s acknowledged: `trace-join collect` vs Phoenix", rate, "spans/s", acked,
            f"≥ {TARGET_RATIO:g}×", rate >= TARGET_RATIO * acked, "Phoenix answers 200 before storing"),
        *rows,
    ]
