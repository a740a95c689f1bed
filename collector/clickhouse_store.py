"""ClickHouse as the store, for a fleet that outgrows one DuckDB file: `--store chdb:PATH`
(ClickHouse's engine in this process, chdb) or `--store clickhouse://HOST:PORT/DB` (a server,
through clickhouse-connect).

Many writers (a collector on each node) share one database, and ClickHouse has no transactions
across tables, so every row is keyed by where it was read, and a retry stores nothing twice:

- a record's id is a hash of its origin, its byte offset there and its index in its line; an
  origin's id a hash of its first bytes and of how many origins began with the same bytes before
  it. A file read again after a crash, by this writer or another, gives the same ids;
- every table is a ReplacingMergeTree keyed by those ids, read one row a key: the rows of an
  insert made twice count once (the small tables with FINAL; records and their ids with `LIMIT 1
  BY` and DISTINCT, since FINAL would merge every part a lookup touches: seconds, not milliseconds,
  at 50M records);
- a batch's rows go in before the positions its files reach: a writer killed in between reads the
  same lines again and writes the same rows.

Parsing runs as for the DuckDB store, on a DuckDB connection of this process's own, in memory
(`con`), which holds each batch while it is written. A lookup's reads bring the records it walks
into that connection, with the naming tables (a row for each file and each worker name), so the
walk, the grouping into requests and the record contract run as they do on a DuckDB store, over
those records.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import logging
import os
import re
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path
from urllib.parse import urlparse

import pyarrow as pa

from . import id_index, line_blocks, record_contract
from .duckdb_engine import connect, let_pandas_in, with_arrow
from .ids import JOINING_KINDS
from .records import RECORDS_SCHEMA, BatchBuilder
from .requests import BUILT_BY, build_requests
from .sources import otel_clickhouse_tables as otel
from .times import window_iso
from .store import (
    RECEIVED_RETENTION, SCHEMA, SETTLE_WORKER_NAMES, BulkRows, Origin, Parsed, Received, Store, StoreError,
    registered, stored_schema_version, worker_roles_sql,
)

SCHEMES = ("chdb:", "clickhouse://")
DATABASE = "tracejoin"  # chdb's, and a server's when the URL names none

# A record's id from its place: 63 bits of the MD5 of its origin, offset and index in its line. Two
# records of a store of n records share one with a chance of about n² / 2^64 (10^-4 at 50M records).
_RECORD_ID = "CAST(md5_number(concat_ws(':', origin_id, \"offset\", seq)) >> 65 AS BIGINT)"
# An hour of records a partition: a fleet's lookups read the last day or so, and old hours go whole.
_HOUR = "toYYYYMMDD(fromUnixTimestamp64Nano(ifNull(time_ns, 0))) * 100 + toHour(fromUnixTimestamp64Nano(ifNull(time_ns, 0)))"

# The ClickHouse tables' own version (the DuckDB store's numbers its own schema).
CLICKHOUSE_SCHEMA_VERSION = 2
CLICKHOUSE_SCHEMA = [
    "CREATE TABLE IF NOT EXISTS meta (key String, value String, updated DateTime64(6) DEFAULT now64(6)) "
    "ENGINE = ReplacingMergeTree(updated) ORDER BY key",
    # A record's ids are kept with it, for the walk that reads a record and goes on from its ids;
    # record_ids finds records by an id's value.
    f"""CREATE TABLE IF NOT EXISTS records (
        record_id Int64, time_ns Nullable(Int64), steady_s Nullable(Float64), source LowCardinality(String),
        kind LowCardinality(String), worker Nullable(String), role Nullable(String), level Nullable(String),
        name Nullable(String), duration_ns Nullable(Int64), status Nullable(String), entry Bool,
        trace_id Nullable(String), span_id Nullable(String), parent_span_id Nullable(String), attrs Nullable(String),
        origin_id Int64, offset Int64, seq Int32,
        ids Array(Tuple(kind String, value String, scope Nullable(String))),
        INDEX by_record_id record_id TYPE bloom_filter GRANULARITY 1,
        INDEX by_time time_ns TYPE minmax GRANULARITY 1
    ) ENGINE = ReplacingMergeTree PARTITION BY {_HOUR} ORDER BY (origin_id, offset, seq)""",
    f"""CREATE TABLE IF NOT EXISTS record_ids (
        value String, kind LowCardinality(String), scope Nullable(String), record_id Int64, time_ns Nullable(Int64)
    ) ENGINE = ReplacingMergeTree PARTITION BY {_HOUR} ORDER BY (value, kind, record_id)""",
    """CREATE TABLE IF NOT EXISTS origins (
        origin_id Int64, path String, source String, head_len Int32, fingerprint String, consumed Int64,
        lines Int64, worker Nullable(String), role Nullable(String), updated DateTime64(6),
        clock Nullable(String), parser_state Nullable(String)
    ) ENGINE = ReplacingMergeTree(updated) ORDER BY origin_id""",
    """CREATE TABLE IF NOT EXISTS quarantine (
        origin_id Int64, path String, offset Int64, line_no Int64, reason String, excerpt Nullable(String)
    ) ENGINE = ReplacingMergeTree ORDER BY (origin_id, offset)""",
    # The bytes of the lines read (line_blocks.py), written with their records; a block written
    # twice (a batch retried after its positions failed) is one row.
    """CREATE TABLE IF NOT EXISTS line_blocks (
        origin_id Int64, offset Int64, length Int32, bytes String
    ) ENGINE = ReplacingMergeTree ORDER BY (origin_id, offset)""",
    "CREATE TABLE IF NOT EXISTS worker_aliases (alias String, worker String, updated DateTime64(6) DEFAULT now64(6)) "
    "ENGINE = ReplacingMergeTree(updated) ORDER BY alias",
    "CREATE TABLE IF NOT EXISTS worker_roles (instance_id String, role String, updated DateTime64(6) DEFAULT now64(6)) "
    "ENGINE = ReplacingMergeTree(updated) ORDER BY instance_id",
    # The bodies collectors received, by digest, for as long as a client retries one
    # (store.RECEIVED_RETENTION): ClickHouse drops them after that itself. A scraped answer is kept
    # raw (`body`) until parsed, however long that takes; a later row of its digest without a body
    # says it was.
    f"""CREATE TABLE IF NOT EXISTS received (
        origin_id Int64, offset Int64, sha256 String, received DateTime64(6) DEFAULT now64(6), body Nullable(String)
    ) ENGINE = ReplacingMergeTree(received) ORDER BY sha256
      TTL toDateTime(received) + INTERVAL {RECEIVED_RETENTION} WHERE body IS NULL""",
    # Every name a record or a file gave its worker: what a reader settles (store.py, worker_names).
    "CREATE TABLE IF NOT EXISTS worker_names (name String) ENGINE = ReplacingMergeTree ORDER BY name",
]
_RECORD_COLUMNS = ", ".join(f'"{name}"' for name in RECORDS_SCHEMA.names)  # SQL of both engines
# What error_lines.py reads near a failure: lines at a level worth a look, or with a status.
_WORRYING = "upper(ifNull(level, '')) IN ('WARN', 'WARNING', 'ERROR', 'CRITICAL', 'FATAL') OR status IS NOT NULL"


# The window `requests` and `coverage` build by default: the last hour up to the newest record. A
# fleet's store holds too many records to build every request at once (requests_window).
DEFAULT_WINDOW_NS = 3600 * 10**9
_JOINING = f"kind IN ({', '.join(map(repr, JOINING_KINDS))})"

# The databases where a lookup looks for the OpenTelemetry Collector's tables: the store's own, then
# the ClickHouse exporter's default.
OTEL_DATABASES = ("currentDatabase()", "'otel'")
_SPAN_VALUE = re.compile(r"^([0-9a-f]{32})/([0-9a-f]{16})$")  # a span as the id graph names it


def quoted(value) -> str:
    """A value as a ClickHouse literal."""
    if value is None:
        return "NULL"
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return repr(value)
    return "'" + str(value).replace("\\", "\\\\").replace("'", "\\'") + "'"


def _listed(values) -> str:
    return ", ".join(map(quoted, values))


class ClickHouseError(StoreError):
    """ClickHouse refused a statement, or could not be reached."""


class Chdb:
    """ClickHouse's engine in this process (chdb), on a folder of its own."""

    def __init__(self, path: str):
        let_pandas_in()  # chdb converts its results through pandas
        try:
            from chdb import session
        except ImportError:
            raise StoreError("--store chdb:PATH needs chdb: pip install chdb") from None
        with _alone_in(path):
            try:
                self._session = session.Session(path)
                self._session.query(f"CREATE DATABASE IF NOT EXISTS {DATABASE}")
                self._session.query(f"USE {DATABASE}")
            except Exception as e:  # chdb raises its own ChdbError, or RuntimeError for a folder in use
                raise ClickHouseError(f"cannot open chdb at {path}: {_first_line(e)}") from None

    def command(self, sql: str) -> None:
        self._run(sql)

    def arrow(self, sql: str) -> pa.Table:
        return self._run(sql, "ArrowTable")

    def insert(self, table: str, rows: pa.Table) -> None:
        columns = ", ".join(f"`{c}`" for c in rows.column_names)
        self._run(f"INSERT INTO {table} ({columns}) SELECT {columns} FROM Python(rows)", rows=rows)

    def _run(self, sql: str, fmt: str = "CSV", rows: pa.Table | None = None):
        try:
            return self._session.query(sql, fmt)  # Python(rows) finds `rows` among this frame's names
        except Exception as e:
            raise ClickHouseError(f"ClickHouse: {_first_line(e)}") from None

    def close(self) -> None:
        self._session.close()


@contextmanager
def _alone_in(path: str) -> Iterator[None]:
    """The block runs while no other process holds chdb's folder `path` (_not_held), nor opens it:
    between trying ClickHouse's lock and the engine taking it, another process could take it, and
    the engine would fail with its own lines. So the folder itself is locked around both, and of
    processes that open it together, each finds the one before holding it."""
    try:
        os.makedirs(path, exist_ok=True)
        folder = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError as e:
        raise ClickHouseError(f"cannot open chdb at {path}: {e.strerror}") from None
    try:
        fcntl.flock(folder, fcntl.LOCK_EX)  # waits for another process's opening only: it lets go once open
        _not_held(path)
        yield
    finally:
        os.close(folder)  # which lets go of the lock


def _not_held(path: str) -> None:
    """ClickHouse locks its folder's `status` file while it runs, and writes its process id there: a
    second process would fail with the engine's own lines on stderr, so the lock is tried first, and
    let go at once."""
    status = os.path.join(path, "status")
    if not os.path.exists(status):
        return
    with open(status, "rb") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = re.search(rb"^PID: (\d+)", f.read(), re.MULTILINE)
            who = f"another process (PID {int(holder[1])})" if holder else "another process"
            raise ClickHouseError(f"chdb:{path} is held by {who}: chdb lets one process at a time open a folder; "
                                  f"run this again once that one has stopped") from None
        fcntl.flock(f, fcntl.LOCK_UN)


class Server:
    """A ClickHouse server, through its official client over HTTP."""

    def __init__(self, url: str):
        try:
            import clickhouse_connect
        except ImportError:
            raise StoreError("--store clickhouse://… needs clickhouse-connect: pip install clickhouse-connect") from None
        # The client logs each failure it raises as well: the error says it once, in one line.
        logging.getLogger("clickhouse_connect").setLevel(logging.CRITICAL)
        u = urlparse(url)
        database = u.path.strip("/") or DATABASE
        try:
            self._client = clickhouse_connect.get_client(host=u.hostname or "localhost", port=u.port or 8123,
                                                         username=u.username or "default", password=u.password or "")
            self._client.command(f"CREATE DATABASE IF NOT EXISTS `{database}`")
            self._client.database = database
        except Exception as e:
            raise ClickHouseError(f"cannot reach ClickHouse at {u.hostname}:{u.port or 8123}: {_first_line(e)}") from None

    def command(self, sql: str) -> None:
        self._call(self._client.command, sql)

    def arrow(self, sql: str) -> pa.Table:
        return self._call(self._client.query_arrow, sql)

    def insert(self, table: str, rows: pa.Table) -> None:
        self._call(self._client.insert_arrow, table, rows)

    @staticmethod
    def _call(method, *args):
        try:
            return method(*args)
        except Exception as e:
            raise ClickHouseError(f"ClickHouse: {_first_line(e)}") from None

    def close(self) -> None:
        self._client.close()


def _this_host(name: str) -> str:
    return f"{socket.gethostname()}/{name}"


def _hash63(text: str) -> int:
    """63 bits of the text's MD5, as DuckDB's `md5_number(text) >> 65` gives them."""
    return int.from_bytes(hashlib.md5(text.encode()).digest(), "little") >> 65


def _first_line(e: Exception) -> str:
    """What went wrong, in a line: the system's own words where the error wraps them (a refused
    connection inside an HTTP pool's retries)."""
    text = str(e).strip()
    system = re.search(r"\[Errno -?\d+\] [^\"')\n]+", text)
    return system.group(0) if system else (text.splitlines() or [type(e).__name__])[0]


# What publish_for_grafana writes, from the requests build's temp tables: the requests that started in
# the window, and their records, each with its worker as settled in its request, the facts and ids.
_PUBLISHED_REQUESTS = """
CREATE OR REPLACE TEMP TABLE published_requests AS
    SELECT * REPLACE (coalesce(workers, []) AS workers, coalesce(roles, []) AS roles, coalesce(sources, []) AS sources,
                      coalesce(reply_ids, []) AS reply_ids, coalesce(internal_ids, []) AS internal_ids,
                      coalesce(x_request_ids, []) AS x_request_ids, coalesce(disagg_request_ids, []) AS disagg_request_ids,
                      coalesce(trace_ids, []) AS trace_ids),
           current_localtimestamp()::TIMESTAMP AS published, 0::UTINYINT AS deleted
    FROM request_summary WHERE start_ns BETWEEN $since AND $until
"""
_PUBLISHED_REQUEST_RECORDS = """
CREATE OR REPLACE TEMP TABLE published_request_records AS
    SELECT w.request_id, w.worker, w.role, r.* EXCLUDE (worker, role), f.* EXCLUDE (record_id),
           (SELECT string_agg(i.kind || '=' || i.value, ' · ' ORDER BY i.kind, i.value) FROM record_ids i
            WHERE i.record_id = r.record_id AND i.kind NOT IN ('span', 'parent_span')) AS ids,
           current_localtimestamp()::TIMESTAMP AS published, 0::UTINYINT AS deleted
    FROM request_workers w JOIN records r USING (record_id) JOIN record_facts f USING (record_id)
    WHERE w.request_id IN (SELECT request_id FROM published_requests)
"""


def _bounds(since_ns: int | None, until_ns: int | None) -> tuple[int, int]:
    """A window's bounds, an open end as far as an Int64 goes."""
    return (-(1 << 63) if since_ns is None else int(since_ns)), ((1 << 63) - 1 if until_ns is None else int(until_ns))


_KEYS = ("request_id", "record_id")  # never NULL: the tables' sorting keys


def _clickhouse_type(arrow_type: pa.DataType, nullable: bool) -> str:
    """The ClickHouse column type of a published column (lists are never NULL there: _PUBLISHED_REQUESTS)."""
    if pa.types.is_list(arrow_type):
        return f"Array({_clickhouse_type(arrow_type.value_type, False)})"
    if pa.types.is_timestamp(arrow_type):
        return "DateTime64(6)"
    if arrow_type == pa.uint8():
        return "UInt8"
    scalar = {pa.int64(): "Int64", pa.int32(): "Int32", pa.float64(): "Float64", pa.bool_(): "Bool",
              pa.string(): "String", pa.large_string(): "String"}[arrow_type]
    return f"Nullable({scalar})" if nullable else scalar


def _now_us() -> int:
    return time.time_ns() // 1000


def open_clickhouse_store(spec: str, *, read_only: bool, create: bool = True) -> "ClickHouseStore":
    engine = Chdb(spec[len("chdb:"):]) if spec.startswith("chdb:") else Server(spec)
    store = ClickHouseStore(engine, spec, read_only=read_only)
    try:
        store.create_or_check_schema(create and not read_only)
    except BaseException:
        store.close()
        raise
    return store


class ClickHouseStore(Store):
    keeps_requests = False  # requests, coverage and the dashboards' tables are the DuckDB store's
    shared = True

    def __init__(self, engine: Chdb | Server, spec: str, *, read_only: bool):
        with_arrow()
        con = connect(":memory:", read_only=False)
        con.execute(SCHEMA)  # the batch being written, and what a lookup brought in
        id_index.create(con)
        super().__init__(con, Path(spec), read_only=read_only)
        self.spec = spec
        self.engine = engine
        self._states: dict[int, dict] = {}  # parsers' states, read with the origins
        self._brought: set[int] = set()  # records in `con`
        self._naming_read = False
        self._otel: dict[str, Origin] | None = None  # the exporter's tables found, each read as an origin
        self._own_tables = True  # False: a database the OpenTelemetry Collector's exporter alone writes

    def close(self) -> None:
        super().close()
        self.engine.close()

    @property
    def where(self) -> str:
        return self.spec

    def create_or_check_schema(self, create: bool) -> None:
        rows = self.engine.arrow("SELECT value FROM meta FINAL WHERE key = 'schema_version'").to_pylist() \
            if self._has_meta() else []
        if rows:
            version = stored_schema_version(rows[0]["value"], self.spec)
            if version == 1 and not self.read_only:
                self._upgrade_from_1()
            elif version not in (1, CLICKHOUSE_SCHEMA_VERSION):  # a reader reads nothing version 2 changed
                raise StoreError(f"{self.spec} has schema version {version}, this trace-join uses "
                                 f"{CLICKHOUSE_SCHEMA_VERSION}: use the trace-join release that wrote it, or another database")
            return
        if self.read_only and self._otel_tables():
            self._own_tables = False  # only what the OpenTelemetry Collector wrote: read that
            return
        if not create:
            raise StoreError(f"{self.spec} holds no trace-join store nor the OpenTelemetry Collector's tables: "
                             f"run `trace-join ingest --store {self.spec} FILES...` first")
        for statement in CLICKHOUSE_SCHEMA:
            self.engine.command(statement)
        self.engine.command(f"INSERT INTO meta (key, value) VALUES ('schema_version', '{CLICKHOUSE_SCHEMA_VERSION}')")

    def _upgrade_from_1(self) -> None:
        """Version 2 keeps a scraped answer in `received` until parsed. The table only says which
        bodies came in the last hour, for clients' retries: it is made again, empty."""
        self.engine.command("DROP TABLE IF EXISTS received")
        for statement in CLICKHOUSE_SCHEMA:
            self.engine.command(statement)
        self.engine.command(f"INSERT INTO meta (key, value) VALUES ('schema_version', '{CLICKHOUSE_SCHEMA_VERSION}')")

    def _has_meta(self) -> bool:
        return bool(self.engine.arrow("SELECT name FROM system.tables WHERE database = currentDatabase() "
                                      "AND name = 'meta'").num_rows)

    # -- origins, read from ClickHouse -----------------------------------------------------------

    def _stored_origins(self) -> list[Origin]:
        """Every writer's origins, with what their parsers learned of them (`parser_state`)."""
        origins = []
        for row in self.engine.arrow(
                "SELECT origin_id, path, source, head_len, fingerprint, consumed, lines, worker, role, "
                "toUnixTimestamp64Micro(updated) / 1e6 AS updated, clock, parser_state FROM origins FINAL").to_pylist():
            state = row.pop("parser_state")
            if state is not None:
                self._states[row["origin_id"]] = json.loads(state)
            origins.append(Origin(**row))
        return origins

    # A receiver's origin (no file head, its name for a fingerprint) is this machine's: every
    # node's collector has an `otlp/http`, each numbering its own bodies.

    def find_origin(self, head_len: int, fingerprint: str, size: int | None = None) -> Origin | None:
        return super().find_origin(head_len, _this_host(fingerprint) if head_len == 0 else fingerprint, size)

    def new_origin(self, path: str, source: str, head_len: int, fingerprint: str) -> Origin:
        """An origin whose id any writer gives the same file: its head, and how many origins
        began with that head before it (a file truncated and begun again is another origin)."""
        if head_len == 0:
            path = fingerprint = _this_host(fingerprint)
        before = len(self._origins_by_head().get((head_len, fingerprint), ()))
        origin = super().new_origin(path, source, head_len, fingerprint)
        origin.origin_id = _hash63(f"{head_len}:{fingerprint}:{before}")
        return origin

    def parser_state(self, origin_id: int) -> dict | None:
        self._origins_by_head()
        return self._states.get(origin_id)

    # -- writes ------------------------------------------------------------------------------------

    def write_batch(self, batch: BatchBuilder, bulk: BulkRows | None = None, aliases: dict[str, str] | None = None,
                    parser_states: dict[int, dict] | None = None, received: Received | None = None,
                    parsed: Parsed | None = None, blocks: pa.Table | None = None) -> pa.Table:
        """As the DuckDB store's, with the record ids of the records' places, and the rows in before
        the positions (the module's doc)."""
        con = self.con
        try:
            first = bulk.first_record_id if bulk else self.allocate_record_ids(batch.record_count)
            records, ids, quarantined = batch.tables(first, bulk.batch_record_ids if bulk else None)
            origins = list(batch.origins.values())
            batch.clear()
            tables = {"batch_records": records, "batch_record_ids": ids, **(bulk.tables if bulk else {})}
            with registered(con, tables):
                self._renumbered(f"SELECT * FROM batch_records{f' UNION ALL BY NAME ({bulk.records})' if bulk else ''}",
                                 f"SELECT * FROM batch_record_ids{f' UNION ALL BY NAME ({bulk.ids})' if bulk else ''}")
            del records, ids
            if blocks is not None and blocks.num_rows:
                self.engine.insert("line_blocks", blocks)
            self._write_rows(quarantined, origins, aliases or {}, parser_states or {}, received, parsed)
        except BaseException:
            self._next_record_id = None
            self._origins = None
            raise
        finally:
            con.complete()  # a failed statement's result, left unread
            con.execute("DROP TABLE IF EXISTS new_records; DROP TABLE IF EXISTS new_ids")
        return quarantined

    def _renumbered(self, records: str, ids: str) -> None:
        """The temporary tables new_records and new_ids: these records (SQL, numbered as a batch
        numbers them) under the record ids of their places, and their ids (SQL) under the same."""
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE new_records AS SELECT * REPLACE ({_RECORD_ID} AS record_id), "
                         f"record_id AS batch_id FROM ({records})")
        self.con.execute(f"CREATE OR REPLACE TEMP TABLE new_ids AS SELECT r.record_id, i.kind, i.value, i.scope, r.time_ns "
                         f"FROM ({ids}) i JOIN new_records r ON r.batch_id = i.record_id")

    def _write_rows(self, quarantined: pa.Table, origins: list[Origin], aliases: dict[str, str],
                    parser_states: dict[int, dict], received: Received | None, parsed: Parsed | None) -> None:
        con, engine = self.con, self.engine
        engine.insert("records", con.sql(
            "WITH carried AS (SELECT record_id, list({'kind': kind, 'value': value, 'scope': scope}) AS ids "
            "FROM new_ids GROUP BY record_id) "
            "SELECT r.* EXCLUDE (batch_id), coalesce(c.ids, []) AS ids "
            "FROM new_records r LEFT JOIN carried c USING (record_id)").to_arrow_table())
        engine.insert("record_ids", con.sql("SELECT value, kind, scope, record_id, time_ns FROM new_ids").to_arrow_table())
        if quarantined.num_rows:
            engine.insert("quarantine", quarantined)
        facts = f"(SELECT record_id, {record_contract.columns('prefill_worker', 'decode_worker')} FROM new_records)"
        roles = con.sql(worker_roles_sql(facts)).to_arrow_table()
        if roles.num_rows:
            engine.insert("worker_roles", roles)
        if aliases:
            engine.insert("worker_aliases", pa.table({"alias": list(aliases), "worker": list(aliases.values())}))
        names = con.sql("SELECT DISTINCT worker AS name FROM new_records WHERE worker IS NOT NULL").to_arrow_table()
        names = pa.concat_tables([names, pa.table({"name": pa.array([o.worker for o in origins if o.worker], pa.string())})])
        if names.num_rows:
            engine.insert("worker_names", names)
        if received is not None:
            engine.insert("received", pa.table({
                "origin_id": pa.array([received.origin_id] * len(received.offsets), pa.int64()),
                "offset": pa.array(received.offsets, pa.int64()), "sha256": pa.array(received.digests, pa.string()),
                "body": pa.array(received.raws, pa.binary())}))
        if parsed is not None:  # after the records: a writer killed in between parses them again, alike
            engine.insert("received", pa.table({
                "origin_id": pa.array([parsed.origin_id] * len(parsed.bodies), pa.int64()),
                "offset": pa.array([offset for offset, _ in parsed.bodies], pa.int64()),
                "sha256": pa.array([sha256 for _, sha256 in parsed.bodies], pa.string())}))
        # Last: the files' positions, which say the rows above are stored.
        self._states.update(parser_states)
        if origins:
            engine.insert("origins", pa.table({
                "origin_id": pa.array([o.origin_id for o in origins], pa.int64()),
                **{name: pa.array([getattr(o, name) for o in origins], pa.string())
                   for name in ("path", "source", "fingerprint", "worker", "role", "clock")},
                "head_len": pa.array([o.head_len for o in origins], pa.int32()),
                "consumed": pa.array([o.consumed for o in origins], pa.int64()),
                "lines": pa.array([o.lines for o in origins], pa.int64()),
                "updated": pa.array([int(o.updated * 1e6) for o in origins], pa.timestamp("us")),
                "parser_state": pa.array([json.dumps(self._states[o.origin_id]) if o.origin_id in self._states else None
                                          for o in origins], pa.string()),
            }))

    def received_already(self, digests: list[str]) -> set[str]:
        rows = self.engine.arrow(f"SELECT DISTINCT sha256 FROM received WHERE sha256 IN ({_listed(digests)})")
        return set(rows.column("sha256").to_pylist())

    def unparsed(self, origin_id: int) -> list[tuple[int, str, bytes]]:
        rows = self.engine.arrow(f"SELECT offset, sha256, body FROM received FINAL WHERE origin_id = {int(origin_id)} "
                                 f"AND body IS NOT NULL ORDER BY offset")
        return [(r["offset"], r["sha256"], r["body"] if isinstance(r["body"], bytes) else r["body"].encode())
                for r in rows.to_pylist()]

    def forget_received(self) -> None:
        """Nothing to do: the table's TTL drops digests past the retention."""

    def body_offset(self, number: int, sha256: str) -> int:
        """A body's records at an offset its digest names: a body stored by a collector killed
        before it stored the digest, and sent again by its client, has the same record ids."""
        return _hash63(sha256)

    def settle_workers(self) -> None:
        """Nothing to do here: with many writers, each reader settles the names (_read_naming)."""

    def ids_merged_at_end(self):
        """ClickHouse keeps its ids in a table of its own, which it merges on its own schedule."""
        return nullcontext()

    # -- reads: what a lookup walks, brought into `con` ------------------------------------------

    def _read_naming(self) -> None:
        """The naming tables, and every worker's name settled over them as store.py settles them."""
        if self._naming_read:
            return
        self._naming_read = True
        con = self.con
        for origin in self._otel_tables().values():
            con.execute("INSERT OR IGNORE INTO origins VALUES (?, ?, ?, 0, ?, 0, 0, NULL, NULL, NULL, NULL)",
                        [origin.origin_id, origin.path, origin.source, origin.fingerprint])
        if not self._own_tables:
            return
        tables = {
            "ch_origins": self.engine.arrow(
                "SELECT origin_id, path, source, head_len, fingerprint, consumed, lines, worker, role, updated, clock "
                "FROM origins FINAL"),
            "ch_aliases": self.engine.arrow("SELECT alias, worker FROM worker_aliases FINAL"),
            "ch_roles": self.engine.arrow("SELECT instance_id, role FROM worker_roles FINAL"),
            "ch_names": self.engine.arrow("SELECT name FROM worker_names FINAL"),
        }
        with registered(con, tables):
            con.execute("INSERT INTO origins BY NAME SELECT * REPLACE (CAST(updated AS TIMESTAMP) AS updated) FROM ch_origins")
            con.execute("INSERT INTO worker_aliases SELECT alias, worker FROM ch_aliases")
            con.execute("INSERT INTO worker_roles SELECT instance_id, role FROM ch_roles")
            con.execute("INSERT OR IGNORE INTO worker_names SELECT name, name, NULL FROM ch_names "
                        "UNION SELECT worker, worker, NULL FROM ch_origins WHERE worker IS NOT NULL")
        con.execute(SETTLE_WORKER_NAMES)

    def _bring(self, where: str) -> list[int]:
        """The records `where` (ClickHouse SQL) picks, with their ids, into `con`; their record ids."""
        self._read_naming()
        if not self._own_tables:
            return []
        rows = self.engine.arrow(f"SELECT {_RECORD_COLUMNS}, ids FROM records WHERE {where} LIMIT 1 BY record_id")
        if not rows.num_rows:
            return []
        with registered(self.con, {"brought": rows}):
            return self._keep("brought", "(SELECT record_id, i.kind AS kind, i.value AS value, i.scope AS scope "
                                         "FROM (SELECT record_id, unnest(ids) AS i FROM brought))")

    def _keep(self, records: str, ids: str) -> list[int]:
        """Records and their ids (tables or SQL) into `con`, but those brought before; the record
        ids of all of them."""
        record_ids = [r for (r,) in self.con.execute(f"SELECT record_id FROM {records}").fetchall()]
        new = "WHERE record_id NOT IN (SELECT unnest(?::BIGINT[]))"
        known = [sorted(self._brought)]
        self.con.execute(f"INSERT INTO records BY NAME SELECT {_RECORD_COLUMNS} FROM {records} {new}", known)
        self.con.execute(f"INSERT INTO record_ids SELECT record_id, kind, value, scope FROM {ids} {new}", known)
        self._brought.update(record_ids)
        return record_ids

    @staticmethod
    def picked(select: str, record_ids) -> tuple[str, list]:
        """One list: `con` holds only the records brought, and their ids, hashes, lie far apart."""
        return select.replace("{}", "record_id IN (SELECT unnest(?::BIGINT[]))"), [sorted(set(record_ids))]

    def _bring_ids(self, record_ids) -> None:
        missing = sorted(set(record_ids) - self._brought)
        for i in range(0, len(missing), 2000):
            self._bring(f"record_id IN ({_listed(missing[i:i + 2000])})")

    def worker_aliases(self) -> dict[str, str]:
        self._read_naming()
        return super().worker_aliases()

    def origin_rows(self, origin_ids) -> list[tuple[int, str, int, str | None]]:
        self._read_naming()
        return super().origin_rows(origin_ids)

    def found(self, values: list[str]) -> set[int]:
        """The records carrying these values: trace-join's, and the spans and log records of the
        OpenTelemetry Collector's tables that carry one (brought into `con` as they are found)."""
        own = set()
        if self._own_tables:
            rows = self.engine.arrow(f"SELECT DISTINCT record_id FROM record_ids WHERE value IN ({_listed(values)})")
            own = set(rows.column("record_id").to_pylist())
        return own | self._found_in_otel(values)

    # -- the OpenTelemetry Collector's tables (sources/otel_clickhouse_tables.py) -----------------

    def _otel_tables(self) -> dict[str, Origin]:
        """The exporter's tables in this ClickHouse, by kind: each an origin of its own, with no
        file head (as a receiver's)."""
        if self._otel is None:
            self._otel = {}
            for database in OTEL_DATABASES:
                for row in self.engine.arrow(f"SELECT database, name FROM system.tables WHERE database = {database} "
                                             f"AND name IN ('{otel.TRACES}', '{otel.LOGS}')").to_pylist():
                    if row["name"] not in self._otel:
                        table = f"`{row['database']}`.`{row['name']}`"
                        origin_id = _hash63(f"otel:{table}")
                        self._otel[row["name"]] = Origin(origin_id, table, "otlp_json", 0, table, 0, 0)
        return self._otel

    def _found_in_otel(self, values: list[str]) -> set[int]:
        """Spans and log records with one of the values as their trace id or an attribute's value,
        or (a value `trace/span`) as their span or a span's parent."""
        tables = self._otel_tables()
        spans = [m.groups() for m in map(_SPAN_VALUE.match, values) if m]
        plain = [v for v in values if not _SPAN_VALUE.match(v)]
        found: set[int] = set()
        for name, origin in tables.items():
            attributes = "SpanAttributes" if name == otel.TRACES else "LogAttributes"
            where = []
            if plain:
                where += [f"TraceId IN ({_listed(plain)})", f"hasAny(mapValues({attributes}), [{_listed(plain)}])"]
            if spans:
                listed = ", ".join(f"({quoted(t)}, {quoted(s)})" for t, s in spans)
                where.append(f"(TraceId, SpanId) IN ({listed})")
                if name == otel.TRACES:
                    where.append(f"(TraceId, ParentSpanId) IN ({listed})")
            if where:
                found |= self._bring_otel_rows(name, origin, " OR ".join(where))
        return found

    def _bring_otel_rows(self, name: str, origin: Origin, where: str) -> set[int]:
        """The rows of the exporter's table `name` that `where` picks, as records in `con`, each at
        an offset its own content names (a span by its trace and span id), so that it has one
        record id however often it is found."""
        columns, records_of = (otel.SPAN_COLUMNS, otel.span_records) if name == otel.TRACES else \
            (otel.LOG_COLUMNS, otel.log_records)
        rows = self.engine.arrow(f"SELECT {columns} FROM {origin.path} WHERE {where}").to_pylist()
        self._read_naming()
        batch = BatchBuilder(origin.source, origin)
        for row, record in zip(rows, records_of(rows)):
            batch.add([record], _hash63(json.dumps(row, sort_keys=True, default=str)))
        if not batch.record_count:
            return set()
        records, ids, _ = batch.tables(0)
        with registered(self.con, {"otel_records": records, "otel_ids": ids}):
            self._renumbered("SELECT * FROM otel_records", "SELECT * FROM otel_ids")
        try:
            return set(self._keep("new_records", "new_ids"))
        finally:
            self.con.execute("DROP TABLE new_records; DROP TABLE new_ids")

    def ids_of(self, record_ids) -> Iterator[tuple[int, str, str, str | None]]:
        self._bring_ids(record_ids)
        return super().ids_of(record_ids)

    def record_rows(self, columns: str, record_ids) -> Iterator[tuple]:
        self._bring_ids(record_ids)
        return super().record_rows(columns, record_ids)

    def requests_window(self, since_ns: int | None, until_ns: int | None) -> tuple[int | None, int | None]:
        """The requests that started in the window (by default the last hour up to the newest
        record), built from what `con` holds: the records timed in the window, and every record a
        joining id leads to from those, and from those, until none is left (the scope the DuckDB
        store's requests build reads when records come: requests.py). A request that started
        before the window but goes on in it is built whole too; the listing leaves it out."""
        high = _bounds(since_ns, until_ns)[1]
        if since_ns is None:
            newest = self._newest_time(high)
            if newest is None:
                return until_ns, until_ns  # nothing timed: no request started
            since_ns = newest - DEFAULT_WINDOW_NS
        low = int(since_ns)
        self._read_naming()
        timed = f"time_ns BETWEEN {low} AND {high}"
        looked_up: set[str] = set()  # the ids whose every carrier is in `con`
        if self._own_tables:
            self._bring(timed)
            looked_up = {value for (value,) in self.con.execute(
                f"SELECT DISTINCT value FROM record_ids WHERE {_JOINING} AND record_id IN "
                f"(SELECT record_id FROM records WHERE {timed})").fetchall()}
            walked = set(self._brought)
            # The records outside the window that share one of those ids, in one query: the window
            # may hold millions of ids, too many to send back as values.
            self._bring_ids(self.engine.arrow(
                f"SELECT DISTINCT record_id FROM record_ids WHERE value IN (SELECT value FROM record_ids "
                f"WHERE {timed} AND {_JOINING}) AND NOT ifNull({timed}, false)").column("record_id").to_pylist())
        else:
            walked = set()
        for name, origin in self._otel_tables().items():
            self._bring_otel_rows(name, origin, f"Timestamp BETWEEN fromUnixTimestamp64Nano({low}) "
                                                f"AND fromUnixTimestamp64Nano({high})")
        while fresh := sorted(self._brought - walked):  # what came in since, until it leads to nothing new
            walked.update(fresh)
            values = [value for (value,) in self.con.execute(
                f"SELECT DISTINCT value FROM record_ids WHERE {_JOINING} AND record_id IN (SELECT unnest(?::BIGINT[]))",
                [fresh]).fetchall() if value not in looked_up]
            looked_up.update(values)
            for i in range(0, len(values), 2000):
                self._bring_ids(self.found(values[i:i + 2000]))
        return since_ns, until_ns

    def _newest_time(self, high: int) -> int | None:
        """The time of the newest record at or before `high`: trace-join's, or the exporter's."""
        times = []
        if self._own_tables:
            times.append(self.engine.arrow(f"SELECT max(time_ns) AS t FROM records WHERE time_ns <= {high}"))
        for origin in self._otel_tables().values():
            times.append(self.engine.arrow(f"SELECT toUnixTimestamp64Nano(max(Timestamp)) AS t FROM {origin.path} "
                                           f"WHERE Timestamp <= fromUnixTimestamp64Nano({high})"))
        found = [t.column("t")[0].as_py() for t in times]
        found = [t for t in found if t]
        return max(found) if found else None

    def readable_between(self, low_ns: int, high_ns: int) -> None:
        self._bring(f"time_ns BETWEEN {int(low_ns)} AND {int(high_ns)} AND ({_WORRYING})")

    def lines_at(self, places: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
        wanted = sorted(set(places))
        if not wanted or not self._own_tables:
            return {}
        pairs = ", ".join(f"({int(o)}, {int(p)})" for o, p in wanted)
        rows = self.engine.arrow(
            f"SELECT w.o, w.p, b.offset, b.bytes FROM (SELECT arrayJoin([{pairs}]) AS t, t.1 AS o, t.2 AS p) AS w "
            f"ASOF JOIN line_blocks AS b ON w.o = b.origin_id AND w.p >= b.offset WHERE w.p < b.offset + b.length "
            f"SETTINGS output_format_arrow_string_as_string = 0")  # the blocks' bytes as bytes, not text
        return line_blocks.lines_of_blocks(zip(*(rows.column(i).to_pylist() for i in range(4))))

    def file_lines(self, row: dict, n: int, *, after: bool) -> list[tuple[int, str | None, str | None]]:
        if not self._own_tables:
            return []
        place = f"({int(row['offset'])}, {int(row['seq'])})"
        where, order = (f"(offset, seq) > {place}", "offset, seq") if after else \
            (f"(offset, seq) < {place}", "offset DESC, seq DESC")
        rows = self.engine.arrow(f"SELECT record_id, name, attrs FROM records WHERE origin_id = {int(row['origin_id'])} "
                                 f"AND {where} ORDER BY {order} LIMIT 1 BY record_id LIMIT {int(n)}")
        return [(r["record_id"], r["name"], r["attrs"]) for r in rows.to_pylist()]

    # -- what Grafana's ClickHouse data source reads (dashboards/clickhouse/) ------------------

    def publish_for_grafana(self, since_ns: int | None, until_ns: int | None) -> dict:
        """The requests that started in the window (requests_window), as the requests build makes
        them, into `requests` (a row each, as `trace-join requests` lists them) and
        `request_records` (each of their records with its worker as settled in the request, the
        record contract's facts and its ids), the tables the dashboards read. A request built
        again replaces its rows (ReplacingMergeTree: the latest `published` wins); rows a build no
        longer makes (records that came since joined two requests, or moved one) are marked
        deleted, so a reader with FINAL sees each request once, as last built."""
        if self.read_only or not self._own_tables:
            raise StoreError(f"{self.spec} is not trace-join's to write: nothing was published")
        since_ns, until_ns = self.requests_window(since_ns, until_ns)
        build_requests(self)
        con = self.con
        low, high = _bounds(since_ns, until_ns)
        con.execute(_PUBLISHED_REQUESTS, {"since": low, "until": high})
        con.execute(_PUBLISHED_REQUEST_RECORDS)
        self._create_published_tables()
        requests, records = con.sql("SELECT * FROM published_requests").to_arrow_table(), \
            con.sql("SELECT * FROM published_request_records").to_arrow_table()
        stale_requests, stale_records = self._stale(requests, records, since_ns, until_ns)
        for table, rows in (("request_records", records), ("requests", requests),
                            ("request_records", stale_records), ("requests", stale_requests)):
            if rows.num_rows:
                self.engine.insert(table, rows)
        [(replies, unanswered, no_request)] = con.sql("""
            SELECT count(*) FILTER (WHERE has_entry), count(*) FILTER (WHERE NOT has_entry AND names_a_request),
                   count(*) FILTER (WHERE NOT has_entry AND NOT names_a_request)
            FROM published_requests""").fetchall()
        return {"window": window_iso(since_ns, until_ns), "requests": requests.num_rows,
                # the parts of `requests`, as coverage tells them apart
                "replies": replies, "without_a_reply": unanswered, "about_no_request": no_request,
                "records": records.num_rows, "replaced": stale_requests.num_rows}

    def _create_published_tables(self) -> None:
        """The two tables, their columns those of the build's own results (one list of them: the
        requests build's); made again when a release's build makes other columns, since what is
        published can be published again."""
        built = self.engine.arrow("SELECT value FROM meta FINAL WHERE key = 'published_by'").to_pylist()
        if built and built[0]["value"] == BUILT_BY:
            return
        # A dashboard finds a request's records by its id, and the requests an id names by their records'.
        for name, partition, order, index in (
                ("requests", "start_ns", "request_id", ""),
                ("request_records", "time_ns", "(request_id, record_id)",
                 ", INDEX by_record_id record_id TYPE bloom_filter GRANULARITY 1")):
            columns = ", ".join(f"`{field.name}` {_clickhouse_type(field.type, field.name not in _KEYS)}"
                                for field in self.con.sql(f"SELECT * FROM published_{name} LIMIT 0").to_arrow_table().schema)
            self.engine.command(f"DROP TABLE IF EXISTS {name}")
            self.engine.command(
                f"CREATE TABLE {name} ({columns}{index}) "
                f"ENGINE = ReplacingMergeTree(published, deleted) "
                f"PARTITION BY toYYYYMMDD(fromUnixTimestamp64Nano(ifNull({partition}, 0))) ORDER BY {order}")
        self.engine.command(f"INSERT INTO meta (key, value) VALUES ('published_by', '{BUILT_BY}')")

    def _stale(self, requests: pa.Table, records: pa.Table, since_ns, until_ns) -> tuple[pa.Table, pa.Table]:
        """Deletion rows for what was published for the window before and this build no longer
        makes: requests under another id now, and records no longer in the request they were in.
        Each carries its row's key and partition column, which is what replaces a row."""
        low, high = _bounds(since_ns, until_ns)
        in_window = f"FROM requests FINAL WHERE start_ns BETWEEN {low} AND {high}"
        new_requests = set(requests.column("request_id").to_pylist())
        old_requests = [row for row in self.engine.arrow(f"SELECT request_id, start_ns {in_window}").to_pylist()
                        if row["request_id"] not in new_requests]
        new_pairs = set(zip(records.column("request_id").to_pylist(), records.column("record_id").to_pylist()))
        old_records = [row for row in self.engine.arrow(
            f"SELECT request_id, record_id, time_ns FROM request_records FINAL WHERE request_id IN (SELECT request_id {in_window})").to_pylist()
            if (row["request_id"], row["record_id"]) not in new_pairs]
        now = pa.scalar(_now_us(), pa.timestamp("us"))

        def deleted(rows: list[dict], schema: pa.Schema) -> pa.Table:
            table = pa.Table.from_pylist(rows, schema)
            return table.append_column("published", pa.array([now] * len(rows), pa.timestamp("us"))) \
                .append_column("deleted", pa.array([1] * len(rows), pa.uint8()))

        return (deleted(old_requests, pa.schema([("request_id", pa.int64()), ("start_ns", pa.int64())])),
                deleted(old_records, pa.schema([("request_id", pa.int64()), ("record_id", pa.int64()),
                                                ("time_ns", pa.int64())])))

    def quarantined(self, limit: int) -> list[tuple]:
        if not self._own_tables:
            return []
        rows = self.engine.arrow(f"SELECT path, line_no, offset, reason, excerpt FROM quarantine FINAL "
                                 f"ORDER BY path, line_no LIMIT {int(limit)}")
        return [tuple(r.values()) for r in rows.to_pylist()]
