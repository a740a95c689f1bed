"""The `trace-join` command: thin Typer commands over tracejoin.collector.

Exit codes: 0 found or done, 1 nothing found, 2 bad usage or bad input. Errors are one
line on stderr; set TRACEJOIN_DEBUG=1 to see a traceback instead.
"""

from __future__ import annotations

import gc
import os
import sys
from pathlib import Path
from typing import List, Optional

import click
import typer

app = typer.Typer(
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    # click names the command a mistyped one was meant to be; Typer's own suggestion would repeat it
    suggest_commands=False,
    context_settings={"help_option_names": ["-h", "--help"]},
    help="Join a reply id or x-request-id to everything every component recorded about it.",
)


def _print_version(wanted: bool) -> None:
    if wanted:
        from importlib.metadata import version

        print(f"trace-join {version('trace-join')}")
        raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                 help="Print trace-join's version and exit."),
) -> None:
    """trace-join's own options, before any command."""


DbOption = typer.Option(None, "--store", "--db", help="The store: a DuckDB file, chdb:FOLDER or clickhouse://HOST:PORT/DB (default: $TRACEJOIN_STORE, else $TRACEJOIN_DB, else ./tracejoin.duckdb)")
JsonOption = typer.Option(False, "--json", help="Print JSON for scripts.")


def _zone(value: Optional[str]) -> Optional[str]:
    """--tz: checked before anything is read, so a zone that names nothing is one usage line."""
    if value is not None:
        from tracejoin.collector.local_time import ZoneError, zone_named

        try:
            zone_named(value)
        except ZoneError as e:
            raise typer.BadParameter(f"{value!r} {e}") from None
    return value


TzOption = typer.Option(
    None, "--tz", metavar="ZONE", callback=_zone,
    help="The zone of the servers' local times, for logs that write none (TensorRT-LLM, vLLM, SGLang): "
         "an offset (+02:00) or a zone name (Europe/Berlin). Default: $TRACEJOIN_TZ, else UTC, and "
         "trace-join says it assumed UTC.")
KeepContentOption = typer.Option(
    False, "--keep-content",
    help="Store the prompt and reply text OTLP spans and log records carry (GenAI message, tool-call and "
         "retrieval attributes, GenAI event bodies) instead of only its length. Risk: the store and its "
         "snapshot then hold what users sent the model and what it answered (personal data, secrets), for "
         "anyone who can read them.")


class Failure(Exception):
    """Ends a command with one line on stderr and an exit code."""

    def __init__(self, message: str, code: int = 2):
        super().__init__(message)
        self.code = code


def say_error(message: str) -> None:
    """`trace-join: MESSAGE` on stderr, one line whatever the file names, ids or input it quotes."""
    from tracejoin.cli.render import visible

    print(f"trace-join: {visible(message)}", file=sys.stderr)


def long_running() -> None:
    """Collect garbage as usual from here on: `run` (cli/__main__.py) turns the collector off for
    start-up, which suits a command that ends in a second, not one that runs for minutes."""
    gc.freeze()  # what start-up made lives until exit: later collections need not scan it
    gc.enable()


def _duckdb_file(db: Optional[str], command: str) -> Path:
    """The DuckDB file a command that runs on DuckDB only (demo) uses."""
    from tracejoin.collector.store import default_db_path, is_clickhouse

    if is_clickhouse(db):
        raise Failure(f"`{command}` runs on a DuckDB store only, and {db or default_db_path()} is ClickHouse: "
                      f"every other command runs there (docs/fleet.md)")
    return Path(db or default_db_path())


def _open(db: Optional[str], *, read_only: bool):
    from tracejoin.collector.store import StoreError, open_store

    try:
        return open_store(db, read_only=read_only)
    except StoreError as e:
        raise Failure(str(e)) from None


def _query(db: Optional[str], name: str, **params):
    """Run a read query (collector/queries.py) on the store; while `trace-join collect` holds the
    store, the collector runs it and sends the result (collector/service/remote.py). A query that would
    store the requests tables first (they lag the records: an ingest leaves them to their first
    reader) opens the store for writing to keep them; if another process is reading it, the query
    builds them for itself."""
    from pathlib import Path

    from tracejoin.collector.service import remote
    from tracejoin.collector.queries import run_query, stores_first
    from tracejoin.collector.store import StoreError, StoreLocked, default_db_path, open_store, store_errors_named

    try:
        with store_errors_named(Path(db or default_db_path())):
            with open_store(db, read_only=True) as store:
                if not stores_first(store, name, params):
                    return run_query(store, name, params)
            try:
                with open_store(db) as store:
                    return run_query(store, name, params)
            except StoreError:  # held by another reader, or not ours to write: build them for this query
                with open_store(db, read_only=True) as store:
                    return run_query(store, name, params)
    except StoreLocked:
        pass
    except StoreError as e:
        raise Failure(str(e)) from None
    try:
        return remote.query(Path(db or default_db_path()), name, params)
    except StoreError as e:
        raise Failure(str(e)) from None


@app.command()
def ingest(
    paths: List[str] = typer.Argument(
        ..., metavar="FILE_OR_FOLDER...", help="Files, folders or globs; .gz is read as it is."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
    worker: Optional[str] = typer.Option(
        None, help="The process these files come from (host:port), for formats that do not name it: "
                   "TensorRT-LLM text logs, legacy /perf_metrics arrays."),
    keep_content: bool = KeepContentOption,
    tz: Optional[str] = TzOption,
):
    """Read log, span, trace and perf files into the store. Reading the same bytes again adds nothing."""
    long_running()
    from tracejoin.collector.ingest import Ingester, InputError, expand_paths
    from tracejoin.collector.store import StoreError
    from tracejoin.cli import render

    problems: list[str] = []
    try:  # before the store is opened, so a path that names nothing leaves no new store behind
        files = expand_paths(paths, problems)
    except InputError as e:
        raise Failure(str(e)) from None
    try:
        with _open(db, read_only=False) as store:
            with render.byte_progress(files) as progress:
                ingester = Ingester(store, progress=progress, worker=worker, keep_content=keep_content, tz=tz)
                result = ingester.ingest_files(files, problems)
    except StoreError as e:
        raise Failure(str(e)) from None
    except KeyboardInterrupt:
        # Each file's position is committed with the records read up to it: a new run reads on from there.
        raise Failure("interrupted; run the same command again and it resumes where it stopped", 130) from None
    render.ingest_summary(result, as_json)
    for line in result.errors:
        say_error(f"error: {line}")
    if result.errors or result.quarantined:
        raise typer.Exit(2)


@app.command()
def lookup(
    id: str = typer.Argument(..., help="A reply id, x-request-id, internal, disagg, trace or engine request id."),
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
    since: Optional[str] = typer.Option(None, help="Only requests seen at or after: ISO time, or 30m, 2h, 1d ago."),
    until: Optional[str] = typer.Option(None, help="Only requests seen at or before: ISO time, or 30m, 2h, 1d ago."),
    full: bool = typer.Option(False, "--full", help="Every attribute of every record, and the file and byte it was read from."),
    limit: int = typer.Option(10, min=0, help="Requests shown with their records, first started first (0: all, up to 100); a summary counts them all and lists the first 20 (--json: every one)."),
    records: int = typer.Option(1000, min=1, help="Records shown of each request, first recorded first; each says how many it has."),
    html: Optional[Path] = typer.Option(None, "--html", dir_okay=False,
                                        help="Also write the answer as one self-contained HTML page, for a ticket."),
):
    """Show every record of the request(s) an id names, across workers, on one timeline."""
    from tracejoin.cli import render

    result = _query(db, "lookup", id=id, since_ns=_time_arg(since, "--since"), until_ns=_time_arg(until, "--until"),
                    limit=limit, records=records)
    if as_json:
        render.print_json(result)
    if not result["requests"]:
        raise Failure(f"nothing found for {result['query']!r} (looked for it as any kind of id"
                      f"{render.window_text(result)})", 1)
    if html is not None:
        from tracejoin.cli.files import replace_file
        from tracejoin.cli.html_page import page

        try:
            replace_file(html, page(result).encode())
        except OSError as e:
            raise Failure(f"cannot write {html}: {e.strerror or e}") from None
        say_error(f"wrote {html.absolute()}")
    if not as_json:
        render.lookup_text(result, full=full)


def _say_default_window(db: Optional[str], since: Optional[str]) -> None:
    """A ClickHouse store builds the requests of a window (clickhouse_store.py, requests_window):
    one the user did not choose is named."""
    from tracejoin.collector.store import is_clickhouse

    if since is None and is_clickhouse(db):
        from tracejoin.collector.clickhouse_store import DEFAULT_WINDOW_NS

        say_error(f"note: on ClickHouse, the requests that started in the last {DEFAULT_WINDOW_NS / 60e9:g} minutes "
                  "of the store's records (--since for another window)")


@app.command()
def requests(
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
    slowest: bool = typer.Option(False, "--slowest", help="Slowest first (default: newest first)."),
    errors: bool = typer.Option(False, "--errors", help="Only requests that failed or were cut short."),
    worker: Optional[str] = typer.Option(None, help="Only requests a worker whose name contains this recorded."),
    route: Optional[str] = typer.Option(None, help="Only requests whose route or endpoint contains this."),
    since: Optional[str] = typer.Option(None, help="Only requests that started at or after: ISO time, or 30m, 2h, 1d ago."),
    until: Optional[str] = typer.Option(None, help="Only requests that started at or before: ISO time, or 30m, 2h, 1d ago."),
    limit: int = typer.Option(20, min=0, help="How many to list (0: all)."),
):
    """List requests: newest or slowest first, errors only, by worker, by route, in a time window."""
    from tracejoin.cli import render

    _say_default_window(db, since)
    rows = _query(
        db, "requests", slowest=slowest, errors=errors, worker=worker, route=route,
        since_ns=_time_arg(since, "--since"), until_ns=_time_arg(until, "--until"), limit=limit,
    )
    if as_json:
        render.print_json(rows)
    else:
        render.request_table(rows)
    if not rows:
        raise Failure("no requests match", 1)


@app.command()
def coverage(
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
    since: Optional[str] = typer.Option(None, help="Only requests that started at or after: ISO time, or 30m, 2h, 1d ago."),
    until: Optional[str] = typer.Option(None, help="Only requests that started at or before: ISO time, or 30m, 2h, 1d ago."),
):
    """How many replies join to their workers' records; engine-side records no reply reaches."""
    from tracejoin.cli import render

    _say_default_window(db, since)
    result = _query(db, "coverage", since_ns=_time_arg(since, "--since"), until_ns=_time_arg(until, "--until"))
    if as_json:
        render.print_json(result)
    else:
        render.coverage_text(result)


@app.command()
def quarantine(db: Optional[str] = DbOption, as_json: bool = JsonOption,
               limit: int = typer.Option(50, min=1, help="Rows.")):
    """List lines that could not be read, with their file, line, byte offset and reason."""
    from tracejoin.cli import render

    render.table_of_rows(_query(db, "quarantine", limit=limit), as_json, title="quarantined lines")


@app.command()
def snapshot(
    db: Optional[str] = DbOption,
    as_json: bool = JsonOption,
    since: Optional[str] = typer.Option(None, help="ClickHouse: the requests that started at or after: ISO time, or 30m, 2h, 1d ago (default: the last hour of records)."),
    until: Optional[str] = typer.Option(None, help="ClickHouse: the requests that started at or before: ISO time, or 30m, 2h, 1d ago."),
):
    """Write what Grafana reads: on DuckDB, the copy of the store its DuckDB plugin reads, at
    DB.snapshot.duckdb (docs/grafana.md); on ClickHouse, the requests of a window into the tables
    the ClickHouse dashboards read (docs/fleet.md)."""
    from tracejoin.collector.store import StoreError, StoreLocked, open_store

    window = _time_arg(since, "--since"), _time_arg(until, "--until")
    try:
        with open_store(db, create=False) as store:  # a store that is not there is named, not made empty
            published = store.publish_for_grafana(*window)
    except StoreLocked as e:
        raise Failure(f"{e}; a running trace-join collect writes this copy itself (--snapshot-interval)") from None
    except StoreError as e:
        raise Failure(str(e)) from None
    from tracejoin.cli import render

    if as_json:
        render.print_json(published)
    else:
        print(render.grafana_hint(published))


def _seconds(value: float) -> float:
    """A duration option's value: over 0 (0, a negative or nan would make its loop spin) and at
    most a day (a timer cannot wait for ever)."""
    if not 0 < value <= 86400:
        raise typer.BadParameter(f"{value:g} is not a duration over 0 s and at most a day (86400 s)")
    return value


@app.command()
def collect(
    db: Optional[str] = DbOption,
    otlp_grpc: str = typer.Option("127.0.0.1:4317", "--otlp-grpc", metavar="H:P",
                                  help="OTLP/gRPC receiver address (:P is loopback; `off`: none)."),
    otlp_http: str = typer.Option("127.0.0.1:4318", "--otlp-http", metavar="H:P",
                                  help="OTLP/HTTP receiver address (:P is loopback; `off`: none)."),
    watch: List[str] = typer.Option([], "--watch", metavar="PATH", help="A file or folder to follow; repeatable."),
    scrape: List[str] = typer.Option([], "--scrape", metavar="URL",
                                     help="A legacy TensorRT-LLM /perf_metrics URL to poll; repeatable."),
    scrape_interval: float = typer.Option(2.0, "--scrape-interval", metavar="S", callback=_seconds,
                                          help="Seconds between polls."),
    snapshot_interval: float = typer.Option(30.0, "--snapshot-interval", metavar="S", callback=_seconds,
                                            help="Seconds between read-only copies at DB.snapshot.duckdb."),
    token: Optional[str] = typer.Option(None, "--token", envvar="TRACEJOIN_TOKEN",
                                        help="Bearer token the OTLP receivers require."),
    max_body: int = typer.Option(20 << 20, "--max-body", metavar="BYTES", min=1, max=(1 << 31) - 1,
                                 help="Largest OTLP request, before and after decompression."),
    intake_budget: int = typer.Option(512 << 20, "--intake-budget", metavar="BYTES", min=1,
                                      help="Memory the OTLP requests being read, decoded and stored may hold "
                                           "at once; more are told to retry later."),
    max_connections: int = typer.Option(256, "--max-connections", metavar="N", min=1,
                                        help="OTLP/HTTP connections open at once; more are closed at once."),
    header_timeout: float = typer.Option(10.0, "--header-timeout", metavar="S", callback=_seconds,
                                         help="Seconds an OTLP/HTTP client has to send a request's head."),
    body_timeout: float = typer.Option(30.0, "--body-timeout", metavar="S", callback=_seconds,
                                       help="Seconds an OTLP/HTTP client has to send a body, from its head."),
    keep_content: bool = KeepContentOption,
    tz: Optional[str] = TzOption,
):
    """Receive OTLP, follow files, poll /perf_metrics, and store it all as it comes, until SIGTERM or
    Ctrl-C. Reads (lookup, requests, coverage) keep working meanwhile (docs/collector.md)."""
    long_running()
    from tracejoin.cli.render import visible
    from tracejoin.collector.service.collect import CollectConfig, CollectError, collect as run_collector
    from tracejoin.collector.service.http_server import Limits
    from tracejoin.collector.service.otlp import IntakeBudget
    from tracejoin.collector.store import StoreError, default_db_path

    needed = IntakeBudget.needed(max_body)
    if intake_budget < needed:
        raise Failure(f"--intake-budget {intake_budget} cannot hold one body of --max-body {max_body}: "
                      f"it needs at least {needed} bytes ({needed / (1 << 20):.0f} MiB)")
    config = CollectConfig(
        db=db or default_db_path(),
        otlp_grpc=None if otlp_grpc == "off" else otlp_grpc,
        otlp_http=None if otlp_http == "off" else otlp_http,
        watch=watch, scrape=scrape, scrape_interval_s=scrape_interval, snapshot_interval_s=snapshot_interval,
        token=token, max_body=max_body, keep_content=keep_content, tz=tz, intake_budget=intake_budget,
        http_limits=Limits(max_connections, header_timeout, body_timeout),
    )
    try:
        run_collector(config, say=lambda line: print(visible(line), flush=True),
                      report=lambda line: print(f"trace-join collect: {visible(line)}", file=sys.stderr, flush=True))
    except (CollectError, StoreError) as e:
        raise Failure(str(e)) from None


@app.command()
def demo(
    db: Optional[str] = DbOption,
    folder: str = typer.Option("tracejoin-demo", help="Where each run writes its records, in a folder of its own."),
    dynamo: bool = typer.Option(False, "--dynamo", help="A real NVIDIA Dynamo deployment instead, with trace-join "
                                "collect and proxy beside it (Dynamo is installed on first use, in a minute or two)."),
    engine: str = typer.Option("trtllm", "--engine", click_type=click.Choice(["trtllm", "vllm", "sglang", "llm-d"]),
                               help="Whose records the simulated deployment writes: TensorRT-LLM's, vLLM's, SGLang's, "
                                    "or llm-d's P/D sidecar's in front of vLLM's."),
):
    """Run a disaggregated deployment on loopback, send it requests, ingest what it recorded and look a
    reply up. With --dynamo, look replies up live, through the collector."""
    long_running()
    from tracejoin.cli.demo import DeploymentError, run_demo

    _duckdb_file(db, "demo")
    if dynamo:
        from tracejoin.cli.demo.dynamo import DynamoUnavailable
        from tracejoin.cli.demo.dynamo_demo import run_dynamo_demo

        try:
            run_dynamo_demo(_duckdb_file(db, "demo"), folder)
        except DynamoUnavailable as e:
            raise Failure(f"{e}; `trace-join demo` runs without Dynamo") from None
        except DeploymentError as e:
            raise Failure(str(e)) from None
        return
    if engine == "vllm":
        from tracejoin.cli.demo.vllm_demo import run_vllm_demo as run_demo
    elif engine == "sglang":
        from tracejoin.cli.demo.sglang_demo import run_sglang_demo as run_demo
    elif engine == "llm-d":
        from tracejoin.cli.demo.llm_d_demo import run_llm_d_demo as run_demo
    with _open(db, read_only=False) as store:
        try:
            run_demo(store, folder)
        except DeploymentError as e:
            raise Failure(str(e)) from None


@app.command()
def proxy(
    upstream: str = typer.Option(..., help="The server to forward to, e.g. http://127.0.0.1:8000"),
    listen: str = typer.Option("127.0.0.1:8080", help="HOST:PORT to serve on."),
    log: Optional[str] = typer.Option(
        None, help="JSON lines file for the records (default: $TRACEJOIN_LOG, else stderr)"
    ),
    otlp: Optional[str] = typer.Option(None, help="OTLP/HTTP endpoint for the spans, e.g. http://127.0.0.1:4318"),
):
    """Forward every request to UPSTREAM, streaming, and record each one: its reply id, its trace, what
    the upstream revealed (docs/middleware.md). Runs until interrupted."""
    long_running()
    from tracejoin.middleware.proxy import ListenError, serve_proxy

    try:
        serve_proxy(upstream, listen, log, otlp)
    except (ValueError, ListenError) as e:
        raise Failure(str(e)) from None


def _time_arg(text: Optional[str], option: str) -> Optional[int]:
    if text is None:
        return None
    from tracejoin.cli.times import parse_time

    try:
        return parse_time(text)
    except ValueError as e:
        raise Failure(f"{option}: {e}") from None


def run() -> None:
    try:
        code = app(prog_name="trace-join", standalone_mode=False)  # under `python -m tracejoin.cli` too
    except Failure as e:
        say_error(str(e))
        sys.exit(e.code)
    except (typer.Abort, KeyboardInterrupt):
        say_error("interrupted")
        sys.exit(130)
    except Exception as e:  # noqa: BLE001 - a usage error, a bug or an environment problem: one line
        if hasattr(e, "format_message") and hasattr(e, "exit_code"):  # click's usage errors, via typer
            if e.format_message():  # none when the help was shown instead (`trace-join` alone)
                say_error(f"{e.format_message()} (see trace-join --help)")
            sys.exit(e.exit_code)
        if os.environ.get("TRACEJOIN_DEBUG"):
            raise
        first_line = (str(e).splitlines() or [""])[0]
        say_error(f"error: {type(e).__name__}: {first_line} (TRACEJOIN_DEBUG=1 shows where)")
        sys.exit(2)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":  # `python -m tracejoin.cli` is the command with its start-up tuned
    run()
