"""`trace-join collect`: the live collector, the one process that writes the store.

It starts, on threads around one writer (writer.py):
- the OTLP receivers, gRPC (otlp_grpc.py) and HTTP (otlp_http.py);
- a tailer for the watched files and folders (tailer.py) and a scraper per /perf_metrics URL
  (scraper.py);
- the query endpoint that serves `lookup`, `requests`, `coverage` while it holds the database
  (query_server.py), and the snapshot copy for Grafana (snapshot.py).

SIGTERM and SIGINT stop it cleanly: receivers stop taking calls and answer the ones in flight,
the tailer and scrapers finish their turn, the writer commits everything queued, a last snapshot
is published, and the query endpoint's socket is removed.
"""

from __future__ import annotations

import os
import signal
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from tracejoin.middleware.proxy import ListenError

from ..store import Store, open_store
from .http_server import HttpServer, Limits
from .otlp import INTAKE_BUDGET, MAX_BODY, IntakeBudget
from .otlp_grpc import OtlpGrpcServer
from .otlp_http import otlp_http_app
from .query_server import query_app
from .remote import query_socket
from .scraper import Scraper
from .snapshot import INTERVAL_S, Snapshotter, publish, snapshot_path
from .tailer import Tailer
from .writer import Writer


STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


@dataclass
class CollectConfig:
    db: Path | str  # a DuckDB file, or a ClickHouse store (`chdb:FOLDER`, `clickhouse://…`)
    otlp_grpc: str | None = "127.0.0.1:4317"  # None: no gRPC receiver
    otlp_http: str | None = "127.0.0.1:4318"
    watch: list[str] = field(default_factory=list)
    scrape: list[str] = field(default_factory=list)
    scrape_interval_s: float = 2.0
    snapshot_interval_s: float = INTERVAL_S
    token: str | None = None
    max_body: int = MAX_BODY
    intake_budget: int = INTAKE_BUDGET  # bytes both receivers' bodies may hold at once (otlp.IntakeBudget)
    http_limits: Limits = Limits()  # of the OTLP/HTTP receiver's connections
    keep_content: bool = False  # store prompt and reply text as sent (sources/otlp_json.py)
    tz: str | None = None  # the zone of watched files' local times (local_time.py)


class CollectError(Exception):
    """The collector cannot start as configured (an address in use, say); one line for the user."""


def collect(config: CollectConfig, say: Callable[[str], None], report: Callable[[str], None]) -> None:
    """Run until SIGTERM or SIGINT. `say`: the lines that tell a user what runs where; `report`:
    problems met while running (a file that cannot be read, an endpoint that does not answer)."""
    store = open_store(config.db)  # StoreError when another process holds it
    stop = threading.Event()
    # The main thread waits on a pipe that the signal itself writes to (Python's wakeup fd, written
    # by the C-level handler in whichever thread the kernel gave the signal: often one of DuckDB's
    # or gRPC's, and then a main thread blocked in a read would never run a Python handler). The
    # Python handler does nothing: one that set the Event could find the Event's lock held by the
    # main thread, inside a wait, and wait for it forever.
    woken, wake = os.pipe()
    os.set_blocking(wake, False)
    handlers = {signum: signal.signal(signum, lambda *_: None) for signum in STOP_SIGNALS}
    wakeup_before = signal.set_wakeup_fd(wake)
    writer = Writer(store, report)
    writer.start()
    # Readers get cursors (connections of their own) from a connection the writer never uses.
    readers, readers_lock = store.con.cursor(), threading.Lock()

    def connect() -> Store:
        with readers_lock:
            return Store(readers.cursor(), store.path, read_only=True)

    budget = IntakeBudget(config.intake_budget)
    receivers: list = []
    threads: list[threading.Thread] = []
    queries = None
    started = False
    said: list[str] = []  # said once all has started: an address refused says nothing ran
    try:
        if not store.shared:  # other processes read a DuckDB store through this one
            queries = _start(lambda: HttpServer(query_app(connect), query_socket(store.path)), "the query endpoint")
        if config.otlp_grpc:
            grpc_server = _start(lambda: OtlpGrpcServer(writer, config.otlp_grpc, max_body=config.max_body,
                                                        token=config.token, keep_content=config.keep_content,
                                                        budget=budget),
                                 f"OTLP/gRPC on {config.otlp_grpc}")
            receivers.append(grpc_server)
            said.append(f"otlp-grpc  {grpc_server.address}")
        if config.otlp_http:
            app = otlp_http_app(writer, max_body=config.max_body, token=config.token,
                                keep_content=config.keep_content, budget=budget)
            http_server = _start(lambda: HttpServer(app, config.otlp_http, limits=config.http_limits),
                                 f"OTLP/HTTP on {config.otlp_http}")
            receivers.append(http_server)
            said.append(f"otlp-http  http://{http_server.address}  (/v1/traces, /v1/logs)")
        if config.watch:
            tailer = Tailer(writer, config.watch, report, keep_content=config.keep_content, tz=config.tz)
            threads.append(_thread("tailer", tailer.run, stop))
            for path in config.watch:
                said.append(f"watch      {path}")
        for url in config.scrape:
            threads.append(_thread(f"scrape {url}", Scraper(writer, url, config.scrape_interval_s, report).run, stop))
            said.append(f"scrape     {url}  every {config.scrape_interval_s:g} s")
        if not store.shared:
            threads.append(_thread("snapshot", Snapshotter(connect, writer, config.snapshot_interval_s, report).run, stop))
            said.append(f"snapshot   {snapshot_path(store.path)}  every {config.snapshot_interval_s:g} s and on exit")
            said.append(f"queries    {queries.address}  (this user's commands read through it)")
        for line in said:
            say(line)
        say(f"collecting into {store.where}; SIGTERM or Ctrl-C stops")
        started = True
        os.read(woken, 1)  # until SIGTERM or SIGINT
    finally:
        stop.set()
        for receiver in reversed(receivers):
            receiver.stop()  # calls in flight still get their answer: the writer runs until below
        for thread in threads:
            thread.join()
        writer.stop()
        if started:
            if not store.shared:
                _last_snapshot(store, say, report)
            say(f"stopped: {writer.records_stored} records stored this run")
        if queries is not None:
            queries.stop()
        readers.close()
        store.close()
        signal.set_wakeup_fd(wakeup_before)
        for signum, handler in handlers.items():
            signal.signal(signum, handler)
        os.close(woken)
        os.close(wake)


def _last_snapshot(store: Store, say: Callable[[str], None], report: Callable[[str], None]) -> None:
    try:
        say(f"snapshot   {publish(store)}")
    except Exception as e:  # noqa: BLE001 - the store itself is committed; only the copy is stale
        report(f"snapshot: {type(e).__name__}: {e}")


def _start(make: Callable, what: str):
    """Build and start a server, turning a bad address or a port in use into one clear line."""
    try:
        server = make()
        server.start()
    except (OSError, RuntimeError, ValueError, ListenError) as e:
        raise CollectError(f"cannot start {what}: {getattr(e, 'strerror', None) or e}") from None
    return server


def _thread(name: str, run: Callable[[threading.Event], None], stop: threading.Event) -> threading.Thread:
    thread = threading.Thread(target=run, args=(stop,), name=name, daemon=True)
    thread.start()
    return thread
