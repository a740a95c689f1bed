"""The DuckDB store: schema, versioning, and batch writes.

One table of records (every log line, span, perf row, hook record and proxy tap, normalized), one
table of the ids each record carries, one of the files read so far (so ingest resumes and never
stores a record twice), and one of quarantined lines. Writes go in as Arrow tables inside one
transaction together with the file position they reach, so a crash never leaves half a batch or a
position that runs ahead of what was stored.
"""

from __future__ import annotations

import json
import os
import re
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from . import id_index, line_blocks, record_contract
from .duckdb_engine import connect, duckdb, memory_limit, transaction, with_arrow

if TYPE_CHECKING:  # read commands never import Arrow
    import pyarrow as pa

    from .records import BatchBuilder

# 2: ids indexed by sorted runs (id_index.py) instead of an ART index on record_ids.value
# 3: workers settled per name as the store is written (worker_names), not by record_workers on every read
# 4: the id index holds (hash of value, record_id); lookups check the value in record_ids
# 5: origins keep how their local times were read (`clock`)
# 6: the bytes of the lines read (line_blocks)
SCHEMA_VERSION = 6
DEFAULT_DB = "tracejoin.duckdb"

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value VARCHAR);

-- One row per input file (or stream) read; `fingerprint` is a hash of its first `head_len` bytes,
-- which recognizes the same bytes again under another name and a file that grew since.
CREATE TABLE IF NOT EXISTS origins (
    origin_id   BIGINT PRIMARY KEY,
    path        VARCHAR NOT NULL,
    source      VARCHAR NOT NULL,
    head_len    INTEGER NOT NULL,
    fingerprint VARCHAR NOT NULL,
    consumed    BIGINT NOT NULL,   -- bytes of the (decompressed) stream stored so far
    lines       BIGINT NOT NULL,   -- lines read so far, for quarantine positions
    worker      VARCHAR,           -- identity learned for the whole file (one process per file)
    role        VARCHAR,
    updated     TIMESTAMP,
    clock       VARCHAR            -- how its local times were read (local_time.py), for a source that has them
);

CREATE TABLE IF NOT EXISTS records (
    record_id   BIGINT NOT NULL,
    time_ns     BIGINT,            -- wall-clock UTC, ns since the epoch; NULL when unknown
    steady_s    DOUBLE,            -- steady-clock seconds, for sources that only have those
    source      VARCHAR NOT NULL,  -- the source module that read it
    kind        VARCHAR NOT NULL,  -- log | span | perf | hook | tap
    worker      VARCHAR,           -- NULL: the origin's worker
    role        VARCHAR,           -- NULL: the origin's role
    level       VARCHAR,
    name        VARCHAR,           -- log message, span name or record type
    duration_ns BIGINT,
    status      VARCHAR,           -- HTTP status, span status or outcome, where the record has one
    entry       BOOLEAN NOT NULL,  -- marks the start of a request at the entry server
    trace_id    VARCHAR,
    span_id     VARCHAR,           -- the span the record belongs to (its own span, for spans)
    parent_span_id VARCHAR,
    attrs       JSON,
    origin_id   BIGINT NOT NULL,
    "offset"    BIGINT NOT NULL,   -- byte offset of the line in its origin
    seq         INTEGER NOT NULL   -- index of the record within its line
);

-- Every id a record carries. `scope` qualifies ids that are only unique per worker (engine ids).
-- Found by value through id_index.py's runs; by record_id through the zone maps (ids go in in order).
CREATE TABLE IF NOT EXISTS record_ids (
    record_id BIGINT NOT NULL,
    kind      VARCHAR NOT NULL,
    value     VARCHAR NOT NULL,
    scope     VARCHAR
);

-- Roles the entry server names for the workers it used (the records' prefill_worker and
-- decode_worker facts), for workers whose own records do not say which role they play.
CREATE TABLE IF NOT EXISTS worker_roles (
    instance_id VARCHAR PRIMARY KEY,
    role        VARCHAR NOT NULL
);

-- One process known by two names: trace-join's middleware names a worker host:port, TensorRT-LLM's
-- perf-metrics and hook files name the same process host:pid. `alias` is shown as `worker`.
CREATE TABLE IF NOT EXISTS worker_aliases (
    alias  VARCHAR PRIMARY KEY,
    worker VARCHAR NOT NULL
);

-- Every name a record's worker goes by (its own, or its origin's), settled against the rest of the
-- store: the process's main name (worker_aliases), and the role for records that state none or only
-- `worker`: the one the entry server gave it (Dynamo), else the one its other files state. Small (one
-- row a name); Store.settle_workers brings it up to date after each round of writes, so a reader
-- settles a record with one join instead of working it out from the naming tables every time.
CREATE TABLE IF NOT EXISTS worker_names (
    name   VARCHAR PRIMARY KEY,
    worker VARCHAR NOT NULL,
    role   VARCHAR                 -- NULL: none known beyond the record's own
);

-- Each record with its worker and role settled (worker_names). It carries all of the record's
-- columns, so a reader filtering by record_id scans `records` once.
CREATE OR REPLACE VIEW record_workers AS
SELECT r.* REPLACE (
    coalesce(n.worker, r.worker, o.worker) AS worker,
    CASE WHEN coalesce(r.role, o.role) IS NULL OR coalesce(r.role, o.role) = 'worker'
         THEN coalesce(n.role, r.role, o.role) ELSE coalesce(r.role, o.role) END AS role)
FROM records r
JOIN origins o USING (origin_id)
LEFT JOIN worker_names n ON n.name = coalesce(r.worker, o.worker);

-- Bodies the collector received over the network (an OTLP export, a /perf_metrics answer), one
-- row each, stored in the same transaction as their records: a client retrying a body whose answer
-- it lost is acknowledged without storing it twice (`sha256`). A scraped answer is stored raw first
-- (`body`), because the endpoint forgets what it returned, and cleared once parsed.
CREATE TABLE IF NOT EXISTS received (
    origin_id BIGINT NOT NULL,
    "offset"  BIGINT NOT NULL,     -- the body's number in its origin, = records."offset"
    sha256    VARCHAR NOT NULL,
    received  TIMESTAMP NOT NULL,
    body      BLOB                 -- a scraped body not parsed yet
);

CREATE TABLE IF NOT EXISTS quarantine (
    origin_id BIGINT NOT NULL,
    path      VARCHAR NOT NULL,
    "offset"  BIGINT NOT NULL,
    line_no   BIGINT NOT NULL,
    reason    VARCHAR NOT NULL,
    excerpt   VARCHAR
);
""" + line_blocks.SCHEMA + record_contract.RECORD_FACTS_VIEW  # what later stages read of a record, under the contract's names

# A name for the store, kept by its copies (service/snapshot.py): a copy of this very store, from before,
# is a copy of a prefix of it, since records are only ever added.
STORE_ID = "INSERT OR IGNORE INTO meta VALUES ('store_id', CAST(uuid() AS VARCHAR))"

# worker_names brought up to date after records from $first on were stored: the names those records
# and the origins give are added, then every name is settled again (new aliases, roles and origins'
# roles can settle old names differently).
NEW_WORKER_NAMES = """
INSERT OR IGNORE INTO worker_names
SELECT DISTINCT worker, worker, NULL FROM records WHERE record_id >= $first AND worker IS NOT NULL
UNION SELECT worker, worker, NULL FROM origins WHERE worker IS NOT NULL
"""
SETTLE_WORKER_NAMES = """
UPDATE worker_names SET worker = settled.worker, role = settled.role
FROM (
    WITH resolved AS (
        SELECT n.name, coalesce(a.worker, n.name) AS worker
        FROM worker_names n LEFT JOIN worker_aliases a ON a.alias = n.name
    ), stated_roles AS (
        SELECT coalesce(a.worker, o.worker) AS worker, min(o.role) AS role
        FROM origins o LEFT JOIN worker_aliases a ON a.alias = o.worker
        WHERE o.role IS NOT NULL AND o.role <> 'worker'
        GROUP BY 1 HAVING count(DISTINCT o.role) = 1
    )
    SELECT r.name, r.worker, coalesce(wr.role, s.role) AS role
    FROM resolved r
    LEFT JOIN worker_roles wr ON wr.instance_id = regexp_extract(r.worker, '[^:]+$')
    LEFT JOIN stated_roles s ON s.worker = r.worker
) settled
WHERE worker_names.name = settled.name
  AND (worker_names.worker <> settled.worker OR worker_names.role IS DISTINCT FROM settled.role)
"""

def worker_roles_sql(facts: str) -> str:
    """(instance_id, role) of the workers the entry server named, in these rows of record facts
    (`facts`, with prefill_worker and decode_worker), one role each."""
    return f"""
    SELECT DISTINCT ON (instance_id) instance_id, role FROM (
        SELECT prefill_worker AS instance_id, 'prefill' AS role FROM {facts} WHERE prefill_worker IS NOT NULL
        UNION ALL
        SELECT decode_worker, 'decode' FROM {facts} WHERE decode_worker IS NOT NULL
    )"""


INDEXES = """
CREATE INDEX IF NOT EXISTS received_sha256 ON received (sha256);
"""


class StoreError(Exception):
    """A database that cannot be used as it is; the message says what to do."""


class StoreFull(StoreError):
    """The disk holding the store is full. Everything committed before is kept, and each file's
    position with it: the same command, run again once there is room, goes on from there."""


class OutOfMemory(StoreError):
    """DuckDB's memory budget (TRACEJOIN_MEMORY_LIMIT) ran out. Everything committed before is
    kept: the same command, run again with a larger budget, goes on from there."""


class StoreDamaged(StoreError):
    """The database file was cut short or overwritten in part (a copy that stopped, a disk that
    failed), or is not DuckDB's: DuckDB refuses to read it, and writes nothing to it."""


# DuckDB's words for a file cut short, a block whose checksum does not match, a write-ahead log
# likewise, and a file whose header is not DuckDB's.
_DAMAGED = re.compile(r"Could not read enough bytes from file|Corrupt (database|WAL) file|"
                      r"is not a valid DuckDB database file")


@contextmanager
def store_errors_named(path: Path) -> Iterator[None]:
    """A write's DuckDB error, as StoreFull when the disk is full (DuckDB names that only inside an
    IO, transaction or fatal error: `Could not write file …: No space left on device`), and as
    OutOfMemory, naming the setting, when DuckDB's memory budget ran out; and Ctrl-C during a query,
    which DuckDB's Python client raises as RuntimeError("Query interrupted") or InterruptException,
    as KeyboardInterrupt; and a file cut short or overwritten, as StoreDamaged."""
    try:
        yield
    except (duckdb.InterruptException, RuntimeError) as e:
        if isinstance(e, RuntimeError) and str(e) != "Query interrupted":
            raise
        raise KeyboardInterrupt from None
    except duckdb.OutOfMemoryException as e:
        raise OutOfMemory(
            f"DuckDB ran out of its memory budget, TRACEJOIN_MEMORY_LIMIT={memory_limit()} ({str(e).splitlines()[0]}): "
            f"run the same command again with a larger one (TRACEJOIN_MEMORY_LIMIT=1GB); what was stored before is "
            f"kept and it goes on from there") from None
    except duckdb.Error as e:
        if _DAMAGED.search(str(e)):
            raise StoreDamaged(f"{path} is damaged or not a DuckDB database ({str(e).splitlines()[0]}): move it aside "
                               f"and ingest again into a new store (it is left as it is)") from None
        if "No space left on device" not in str(e):
            raise
        raise StoreFull(f"the disk holding {path} is full ({_quoted_file(e)}): free some space and run the "
                        f"same command again; what was stored before is kept and it goes on from there") from None


def _quoted_file(e: Exception) -> str:
    """`could not write FILE`, from DuckDB's message."""
    start = str(e).find('Could not write file "')
    if start < 0:
        return "No space left on device"
    name = str(e)[start + len('Could not write file "'):].split('"', 1)[0]
    return f"no space left to write {name}"


def stored_schema_version(value: str, store) -> int:
    """The schema version a store's `meta` holds, as the number trace-join wrote there. Anything
    else means the table was edited or the store damaged: nothing can be assumed of its tables."""
    try:
        return int(value)
    except ValueError:
        raise StoreError(f"{store} holds schema version {value!r}, which is not a number trace-join writes (its "
                         f"meta table was edited, or the store is damaged): move it aside and ingest again into a "
                         f"new store (it is left as it is)") from None


class StoreLocked(StoreError):
    """Another process holds the database (DuckDB lets one process write, and then no other read)."""


_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")  # a URL's: no file is named so


def default_db_path() -> str:
    """The store commands use without --store: $TRACEJOIN_STORE, else $TRACEJOIN_DB, else ./tracejoin.duckdb."""
    return os.environ.get("TRACEJOIN_STORE") or os.environ.get("TRACEJOIN_DB", DEFAULT_DB)


def is_clickhouse(spec: str | os.PathLike | None) -> bool:
    return str(spec or default_db_path()).startswith(("chdb:", "clickhouse://"))


def open_store(path: str | os.PathLike | None = None, *, read_only: bool = False, create: bool = True) -> "Store":
    """The store at `path`: a DuckDB file, or `chdb:FOLDER` or `clickhouse://HOST:PORT/DB` for
    ClickHouse (clickhouse_store.py). `create`: a new one where there is none (when not read-only)."""
    if is_clickhouse(path):
        from .clickhouse_store import open_clickhouse_store

        return open_clickhouse_store(str(path or default_db_path()), read_only=read_only, create=create)
    if m := _SCHEME.match(str(path or default_db_path())):
        raise StoreError(f"unknown store scheme {m.group(0)!r}: a store is a DuckDB file, chdb:FOLDER or "
                         "clickhouse://HOST:PORT/DB")
    path = Path(path or default_db_path())
    if (read_only or not create) and not path.exists():
        raise StoreError(f"no database at {path}: run `trace-join ingest --db {path} FILES...` first")
    if not read_only:
        with_arrow()  # writers register their batches as Arrow tables
    try:
        with store_errors_named(path):
            con = connect(path, read_only=read_only)
    except duckdb.IOException as e:
        msg = str(e).splitlines()[0]
        if "lock" in msg.lower():
            raise StoreLocked(f"{path} is held by another process ({msg})") from None
        raise StoreError(f"cannot open {path}: {msg}") from None
    except duckdb.Error as e:
        raise StoreError(f"cannot open {path} as a DuckDB database: {str(e).splitlines()[0]}") from None
    store = Store(con, path, read_only=read_only)
    with store_errors_named(path):
        store._check_or_create_schema(read_only)
    return store


@dataclass
class Origin:
    origin_id: int
    path: str
    source: str
    head_len: int
    fingerprint: str
    consumed: int
    lines: int
    worker: str | None = None
    role: str | None = None
    updated: float = 0.0  # seconds since the epoch when its position last moved
    clock: str | None = None  # how its local times were read (local_time.py)



class Store:
    def __init__(self, con: duckdb.DuckDBPyConnection, path: Path, *, read_only: bool = False):
        self.con = con
        self.path = path
        self.read_only = read_only  # this connection only reads (another may write: the collector's)
        self._next_record_id: int | None = None
        self._origins: dict[tuple[int, str], list[Origin]] | None = None
        self._head_lengths: set[int] = set()
        self._next_origin_id = 0
        self._merging_ids = True  # see ids_merged_at_end

    def close(self) -> None:
        self.con.close()

    @contextmanager
    def ids_merged_at_end(self) -> Iterator[None]:
        """A long run of writes (ingest) during which the id index's runs are not merged, then
        merged once (id_index.merge_since). Left unmerged when the block fails: a lookup reads them
        as they are, and the next writes merge them."""
        since = id_index.last_run(self.con)
        self._merging_ids = False
        try:
            yield
        finally:
            self._merging_ids = True
        id_index.merge_since(self.con, since)

    @property
    def where(self) -> str:
        """The store as a user names it."""
        return str(self.path)

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _check_or_create_schema(self, read_only: bool) -> None:
        try:  # straight to `meta`: information_schema costs ~15 ms of every lookup on a large store
            row = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
            has_meta = True
        except duckdb.CatalogException:
            has_meta = False
        if has_meta:
            version = stored_schema_version(row[0], self.path) if row else None
            if version not in (1, 2, 3, 4, 5, SCHEMA_VERSION):
                raise StoreError(
                    f"{self.path} has schema version {version}, this trace-join uses {SCHEMA_VERSION}: "
                    f"ingest into a new database (--db NEW.duckdb) or use the trace-join release that wrote it"
                )
            if read_only:
                if version != SCHEMA_VERSION:
                    raise StoreError(
                        f"{self.path} was written by an older trace-join (schema {version}): a command that writes "
                        f"to it upgrades it, so ingest into it once (`trace-join ingest --db {self.path} PATH...`; "
                        f"files read before add nothing), then read it"
                    )
                if not id_index.keys_current(self.con):
                    raise StoreError(
                        f"{self.path} was indexed by a DuckDB release that hashes differently from this one: "
                        f"a command that writes to it re-indexes it, so ingest into it once (`trace-join ingest --db "
                        f"{self.path} PATH...`; files read before add nothing), then read it"
                    )
                return
            # tables added since the store was made (all statements are IF NOT EXISTS)
            self.con.execute(SCHEMA)
            self.con.execute(INDEXES)
            self.con.execute(STORE_ID)
            if version == 1:
                self._upgrade_from_1()
            id_index.create(self.con)
            if version in (1, 2):
                self._upgrade_from_2()
            if version in (1, 2, 3, 4):
                self.con.execute("ALTER TABLE origins ADD COLUMN IF NOT EXISTS clock VARCHAR")
            if version in (1, 2, 3) or not id_index.keys_current(self.con):
                id_index.rebuild(self.con)
            if version != SCHEMA_VERSION:
                self.con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [str(SCHEMA_VERSION)])
            return
        tables = self.con.execute("SELECT count(*) FROM information_schema.tables").fetchone()[0]
        if tables:
            raise StoreError(f"{self.path} is a DuckDB database but not a trace-join store; pick another --db")
        if read_only:
            raise StoreError(f"{self.path} is an empty database: ingest something first")
        self.con.execute("BEGIN")
        self.con.execute(SCHEMA)
        self.con.execute(INDEXES)
        id_index.create(self.con)
        self.con.execute("INSERT INTO meta VALUES ('schema_version', ?)", [str(SCHEMA_VERSION)])
        self.con.execute(STORE_ID)
        self.con.execute("COMMIT")

    def _upgrade_from_1(self) -> None:
        """The ART index on the ids goes (it is what stopped large stores): runs replace it."""
        with transaction(self.con):
            self.con.execute("DROP INDEX IF EXISTS record_ids_value")
            self.con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")

    def _upgrade_from_2(self) -> None:
        """Settle the names of the workers stored so far (worker_names)."""
        with transaction(self.con):
            self._settle_worker_names(0)
            self.con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")

    # -- what a lookup reads (graph.py) ---------------------------------------------------------
    # The few reads lookup's walk makes of the store, here so that a store of another engine
    # (clickhouse_store.py) answers them its own way while the walk and its grouping stay one.

    keeps_requests = True  # the requests tables (requests.py) are kept in the store, for readers
    # Whether every process opens the store itself (ClickHouse). A DuckDB file is written by one
    # process, and `collect` answers the others' reads and writes Grafana's copy (service/).
    shared = False

    @staticmethod
    def picked(select: str, record_ids) -> tuple[str, list]:
        """`select`, its `{}` a condition on record_id, for these records (by_record_ids); and the
        parameters it takes."""
        return by_record_ids(select, record_ids)

    def worker_aliases(self) -> dict[str, str]:
        return dict(self.con.execute("SELECT alias, worker FROM worker_aliases").fetchall())

    def origin_rows(self, origin_ids) -> list[tuple[int, str, int, str | None]]:
        """(origin_id, path, head_len, clock) of these origins."""
        return self.con.execute(f"SELECT origin_id, path, head_len, clock FROM origins "
                                f"WHERE origin_id IN ({','.join(map(str, origin_ids))})").fetchall()

    def found(self, values: list[str]) -> set[int]:
        """The records the id index finds for these values: those carrying one of them, and
        perhaps a few carrying another value of the same hash (the caller checks the value)."""
        return {r for (r,) in self.con.execute(id_index.found_sql(len(values)), values).fetchall()}

    # ids_of and record_rows give their rows as they are fetched (`fetched`): the caller reads them
    # all before its next query.

    def ids_of(self, record_ids) -> Iterator[tuple[int, str, str, str | None]]:
        """(record_id, kind, value, scope) of every id these records carry."""
        return self._rows_of("SELECT record_id, kind, value, scope FROM record_ids WHERE {}", record_ids)

    def record_rows(self, columns: str, record_ids) -> Iterator[tuple]:
        """`columns` (SQL over the view record_workers: each record with its worker and role
        settled, and the record contract's facts) of these records."""
        return self._rows_of(f"SELECT {columns} FROM record_workers WHERE {{}}", record_ids)

    def _rows_of(self, select: str, record_ids: list[int]) -> Iterator[tuple]:
        """The rows of `select` (picked) for these records, as they are fetched; for none, no query."""
        return fetched(self.con.execute(*self.picked(select, record_ids))) if record_ids else iter(())

    def readable_between(self, low_ns: int, high_ns: int) -> None:
        """Make the records timed from low_ns to high_ns readable through `con` (error_lines.py
        reads the records near a failure in SQL): here they are, as every record is."""

    def requests_window(self, since_ns: int | None, until_ns: int | None) -> tuple[int | None, int | None]:
        """The window (bounds in ns, None: open) whose requests `requests` and `coverage` count, by
        when each started, with every record of those requests readable through `con`: here the
        window asked for, every record being there."""
        return since_ns, until_ns

    def publish_for_grafana(self, since_ns: int | None, until_ns: int | None) -> dict:
        """Write what Grafana's data source reads (`trace-join snapshot`): here the snapshot, a
        copy of the whole store with its requests tables (service/snapshot.py)."""
        if since_ns is not None or until_ns is not None:
            raise StoreError("a DuckDB store's snapshot holds every request: --since and --until choose the "
                             "requests published on a ClickHouse store")
        from .service.snapshot import publish

        return {"snapshot": str(publish(self))}

    def lines_at(self, places: list[tuple[int, int]]) -> dict[tuple[int, int], str]:
        """The lines as read that start at these (origin, offset) places, where the store keeps them."""
        return line_blocks.lines_at(self.con, places)

    def file_lines(self, row: dict, n: int, *, after: bool) -> list[tuple[int, str | None, str | None]]:
        """(record_id, name, attrs) of up to n records of the row's file right after it (or
        before it, nearest first). A file's records are numbered in its order, and near."""
        if after:
            sql = ("SELECT record_id, name, attrs FROM records WHERE record_id > $1 AND record_id <= $1 + $2 "
                   "AND origin_id = $3 ORDER BY record_id")
        else:
            sql = ("SELECT record_id, name, attrs FROM records WHERE record_id < $1 AND record_id >= $1 - $2 "
                   "AND origin_id = $3 ORDER BY record_id DESC")
        return self.con.execute(sql, [row["record_id"], n, row["origin_id"]]).fetchall()

    def quarantined(self, limit: int) -> list[tuple]:
        """(path, line_no, offset, reason, excerpt) of the first `limit` quarantined lines."""
        return self.con.execute('SELECT path, line_no, "offset", reason, excerpt FROM quarantine '
                                'ORDER BY path, line_no LIMIT ?', [limit]).fetchall()

    # -- origins -------------------------------------------------------------------------------
    # The writer keeps every origin in memory, by (head_len, fingerprint): recognizing each of 100k
    # small files with a query of its own cost more than reading it. Origins new or moved on are
    # written with the batch that reaches their position (write_batch), and a failed write drops
    # the copy, to be read again from the store.

    def _origins_by_head(self) -> dict[tuple[int, str], list[Origin]]:
        if self._origins is None:
            self._origins = {}
            stored = self._stored_origins()
            for origin in stored:
                self._origins.setdefault((origin.head_len, origin.fingerprint), []).append(origin)
            self._next_origin_id = max((o.origin_id for o in stored), default=0) + 1
            self._head_lengths = {head_len for head_len, _ in self._origins}
        return self._origins

    def _stored_origins(self) -> list[Origin]:
        return [Origin(*row) for row in self.con.execute(
            "SELECT origin_id, path, source, head_len, fingerprint, consumed, lines, worker, role, "
            "epoch(updated), clock FROM origins").fetchall()]

    def head_lengths(self) -> set[int]:
        """The lengths of head origins are known by (a few: files shorter than a head are rare)."""
        self._origins_by_head()
        return self._head_lengths

    def find_origin(self, head_len: int, fingerprint: str, size: int | None = None) -> Origin | None:
        """The origin whose first bytes hash so. `size`: the file's size now; an origin that read
        further is another file with the same start (the file was truncated). Of several, the one
        read last is the file being followed."""
        candidates = [o for o in self._origins_by_head().get((head_len, fingerprint), ())
                      if size is None or o.consumed <= size]
        return max(candidates, key=lambda o: (o.updated, o.consumed), default=None)

    def new_origin(self, path: str, source: str, head_len: int, fingerprint: str) -> Origin:
        """An origin not stored yet: the first batch that reads from it stores it."""
        origins = self._origins_by_head()
        origin = Origin(self._next_origin_id, path, source, head_len, fingerprint, 0, 0, updated=time.time())
        self._next_origin_id += 1
        origins.setdefault((head_len, fingerprint), []).append(origin)
        self._head_lengths.add(head_len)
        return origin

    def recognize_by(self, origin: Origin, head_len: int, fingerprint: str) -> None:
        """From now on the origin is known by a longer head (its file grew past the old one)."""
        origins = self._origins_by_head()
        origins[(origin.head_len, origin.fingerprint)].remove(origin)
        origin.head_len, origin.fingerprint = head_len, fingerprint
        origins.setdefault((head_len, fingerprint), []).append(origin)
        self._head_lengths.add(head_len)

    # -- writes --------------------------------------------------------------------------------

    def settle_workers(self) -> None:
        """After storing records (ingest after its files, the collector after each round of writes):
        record the roles the records stored since the last settling name for worker instances, and
        settle every worker name again (worker_names). How far it got is kept in the same
        transaction, so records a killed run stored are settled by the next."""
        with transaction(self.con):
            row = self.con.execute("SELECT value FROM meta WHERE key = 'workers_settled_to'").fetchone()
            first = int(row[0]) + 1 if row else 0
            self.con.execute("INSERT OR REPLACE INTO worker_roles "
                             + worker_roles_sql(f"(SELECT * FROM record_facts WHERE record_id >= {first})"))
            self._settle_worker_names(first)
            self.con.execute("INSERT OR REPLACE INTO meta SELECT 'workers_settled_to', "
                             "CAST(coalesce(max(record_id), 0) AS VARCHAR) FROM records")

    def _settle_worker_names(self, first_record_id: int) -> None:
        self.con.execute(NEW_WORKER_NAMES, {"first": first_record_id})
        self.con.execute(SETTLE_WORKER_NAMES)

    # What a parser learned of its file beyond its worker and role (the role votes of a file whose
    # records decide it), kept with the file's position: in the same transaction (write_batch's
    # `parser_states`), so a file read in parts is read as if whole.
    def parser_state(self, origin_id: int) -> dict | None:
        # fetchall: a result left unread would stop the Arrow tables registered after it (bulk.py)
        rows = self.con.execute("SELECT value FROM meta WHERE key = ?", [f"parser_state:{origin_id}"]).fetchall()
        return json.loads(rows[0][0]) if rows else None

    def allocate_record_ids(self, n: int) -> int:
        """First of n consecutive record ids; one writer per database, so a counter suffices."""
        if self._next_record_id is None:
            self._next_record_id = self.con.execute(
                "SELECT coalesce(max(record_id), 0) + 1 FROM records"
            ).fetchone()[0]
        first = self._next_record_id
        self._next_record_id += n
        return first

    # -- bodies the collector received (service/writer.py) -------------------------------------

    def received_already(self, digests: list[str]) -> set[str]:
        """The digests of these that name a body stored before (a client's retry)."""
        return {r for (r,) in self.con.execute("SELECT sha256 FROM received WHERE sha256 = ANY($d::VARCHAR[])",
                                               {"d": digests}).fetchall()}

    def forget_received(self) -> None:
        """Forget the digests of bodies older than any client retries (parsed bodies only)."""
        self.con.execute(f"DELETE FROM received WHERE body IS NULL AND received < now() - INTERVAL '{RECEIVED_RETENTION}'")

    def body_offset(self, number: int, sha256: str) -> int:
        """The offset a received body's records are stored at: its number in its origin."""
        return number

    def unparsed(self, origin_id: int) -> list[tuple[int, str, bytes]]:
        """(offset, sha256, body) of the bodies of this origin kept raw until parsed (scraped
        answers: service/scraper.py), in their order."""
        return self.con.execute('SELECT "offset", sha256, body FROM received WHERE origin_id = ? AND body IS NOT NULL '
                                'ORDER BY "offset"', [origin_id]).fetchall()

    def write_batch(self, batch: BatchBuilder, bulk: BulkRows | None = None, aliases: dict[str, str] | None = None,
                    parser_states: dict[int, dict] | None = None, received: Received | None = None,
                    parsed: Parsed | None = None, blocks: pa.Table | None = None) -> pa.Table:
        """Store one batch and the positions its origins reach, atomically, and empty the batch;
        `bulk`: the rows DuckDB made of the lines collector/bulk.py read, numbered with the batch's
        records and stored with them, in record order; `aliases`: other names of workers (alias →
        main name) the parsers learned; `parser_states`: what they learned of their files, by
        origin; `received`: the bodies the records came in, whose digests say a retry is stored;
        `parsed`: the bodies kept raw (`unparsed`) whose records these are, no longer to be kept;
        `blocks`: the bytes of the lines read (line_blocks.py). Returns the batch's quarantined lines.

        The batch's records are let go as soon as they are Arrow tables, and those tables before
        the id index is compacted: each would add to the peak of the DuckDB work that follows."""
        con = self.con
        try:
            if bulk is None:
                first = self.allocate_record_ids(batch.record_count)
                records, ids, quarantined = batch.tables(first)
            else:  # bulk.py took the record ids, its rows' and the batch's
                first = bulk.first_record_id
                records, ids, quarantined = batch.tables(first, bulk.batch_record_ids)
            origins = _origins_table(batch.origins.values())
            batch.clear()
            tables = {"batch_records": records, "batch_record_ids": ids, "batch_quarantine": quarantined,
                      "batch_origins": origins, **(bulk.tables if bulk else {})}
            if blocks is not None:
                tables["batch_line_blocks"] = blocks
            with registered(con, tables), transaction(con):
                _insert(con, "records", records, more=bulk and bulk.records)
                _insert(con, "record_ids", ids, more=bulk and bulk.ids)
                id_index.add(con, f"(SELECT * FROM record_ids WHERE record_id >= {first})")
                _insert(con, "quarantine", quarantined)
                if blocks is not None:
                    _insert(con, "line_blocks", blocks)
                for alias, worker in (aliases or {}).items():
                    con.execute("INSERT OR REPLACE INTO worker_aliases VALUES (?, ?)", [alias, worker])
                if parser_states:  # one statement for many origins (a batch of small files has thousands)
                    con.execute("INSERT OR REPLACE INTO meta SELECT unnest(?::VARCHAR[]), unnest(?::VARCHAR[])",
                                [[f"parser_state:{o}" for o in parser_states], list(map(json.dumps, parser_states.values()))])
                if received is not None:
                    con.execute("INSERT INTO received SELECT $origin, unnest($offsets::BIGINT[]), "
                                "unnest($digests::VARCHAR[]), now(), unnest($raw::BLOB[])", received.parameters())
                if parsed is not None:
                    con.execute('UPDATE received SET body = NULL WHERE origin_id = ? AND "offset" IN '
                                '(SELECT unnest(?::BIGINT[]))', [parsed.origin_id, [o for o, _ in parsed.bodies]])
                _insert(con, "origins", origins, sql="INSERT OR REPLACE INTO origins BY NAME SELECT * EXCLUDE "
                                                     "(updated_us), make_timestamp(updated_us) AS updated FROM batch_origins")
        except BaseException:
            self._next_record_id = None  # the ids it took were not stored
            self._origins = None  # nor the positions its origins were moved to
            raise
        del records, ids, bulk
        id_index.compact(con, merge=self._merging_ids)
        return quarantined


# A request's records lie in a few stretches of the store, one for each file that logged it: ids
# nearer than this are read as one range, each range by a query branch of its own, since one IN
# list spanning the stretches has DuckDB read every row group between its lowest id and its
# highest. Past MANY_RANGES branches, one IN list is cheaper again.
_NEAR = 4096
_MANY_RANGES = 64
# Up to this many ids are written into the query; more are passed as a list: DuckDB parses a long
# IN list of numbers slowly, and plans a short one faster than a list.
_WRITTEN_IDS = 2000


def by_record_ids(select: str, record_ids) -> tuple[str, list]:
    """`select` (its `{}` a condition on record_id) for these records only, read by the ranges
    they lie in rather than by a scan of the table; and the parameters it takes."""
    record_ids = sorted(set(record_ids))
    if not record_ids:
        return select.replace("{}", "false"), []
    ranges: list[list[int]] = []
    for r in record_ids:
        if ranges and r - ranges[-1][-1] <= _NEAR:
            ranges[-1].append(r)
        else:
            ranges.append([r])
    written = len(record_ids) <= _WRITTEN_IDS
    params = []

    def among(ids: list[int]) -> str:
        if written:
            return f"record_id IN ({','.join(map(str, ids))})"
        params.append(ids)
        return "record_id IN (SELECT unnest(?::BIGINT[]))"

    if len(ranges) > _MANY_RANGES:
        return select.replace("{}", among(record_ids)), params
    branches = ["(" + select.replace("{}", f"record_id BETWEEN {ids[0]} AND {ids[-1]} AND {among(ids)}") + ")"
                for ids in ranges]
    return " UNION ALL ".join(branches), params


_FETCHED_ROWS = 10_000


def fetched(result) -> Iterator[tuple]:
    """The rows of a query's result, fetched a batch at a time: a request's ids fetched at once
    would be held twice while the caller reads them."""
    return chain.from_iterable(iter(partial(result.fetchmany, _FETCHED_ROWS), []))


# How long a received body's digest is kept to recognize a client's retry.
RECEIVED_RETENTION = "1 hour"


@dataclass
class Received:
    """The bodies a batch's records came in (service/writer.py): each one's offset, digest, and
    raw bytes where they are kept until parsed (scraped answers), in one origin."""

    origin_id: int
    offsets: list[int]
    digests: list[str]
    raws: list[bytes | None]

    def parameters(self) -> dict:
        return {"origin": self.origin_id, "offsets": self.offsets, "digests": self.digests, "raw": self.raws}


@dataclass
class Parsed:
    """Bodies kept raw until parsed, (offset, sha256) each, in one origin, whose records a batch holds."""

    origin_id: int
    bodies: list[tuple[int, str]]


@dataclass
class BulkRows:
    """Records DuckDB makes of lines collector/bulk.py staged, numbered with the records of the
    batch they are written with (bulk.py takes the record ids of both)."""

    records: str  # SQL: the records, with every column of the table
    ids: str  # SQL: their ids
    tables: dict[str, pa.Table]  # the Arrow tables the SQL reads (beside the stage, bulk_stage), by their names
    first_record_id: int  # of its rows and the batch's records
    batch_record_ids: list[int]  # the record id of each of the batch's own records
    records_by_source: dict[str, int]  # the records of its own rows, by source


def _origins_table(origins) -> pa.Table:
    import pyarrow as pa

    origins = list(origins)
    now = time.time()
    for origin in origins:
        origin.updated = now
    return pa.table({
        "origin_id": pa.array([o.origin_id for o in origins], pa.int64()),
        **{name: [getattr(o, name) for o in origins] for name in ("path", "source")},
        "head_len": pa.array([o.head_len for o in origins], pa.int32()),
        "fingerprint": [o.fingerprint for o in origins],
        "consumed": pa.array([o.consumed for o in origins], pa.int64()),
        "lines": pa.array([o.lines for o in origins], pa.int64()),
        "worker": pa.array([o.worker for o in origins], pa.string()),
        "role": pa.array([o.role for o in origins], pa.string()),
        "clock": pa.array([o.clock for o in origins], pa.string()),
        "updated_us": pa.array([int(now * 1e6)] * len(origins), pa.int64()),
    })


def _insert(con, table: str, rows: pa.Table, more: str | None = None, sql: str | None = None) -> None:
    """Insert the rows registered as batch_<table> into `table` by column name, with the rows
    `more` selects, in record order; or by `sql`. Nothing for no rows."""
    if more is None and not rows.num_rows:
        return
    union = f" UNION ALL BY NAME ({more}) ORDER BY record_id" if more else ""
    con.execute(sql or f"INSERT INTO {table} BY NAME SELECT * FROM batch_{table}{union}")


@contextmanager
def registered(con, tables: dict[str, pa.Table]) -> Iterator[None]:
    """The Arrow tables registered on the connection under their names while the block runs
    (outside the transaction: a failed statement leaves it aborted, and unregistering in it would
    raise over the statement's own error)."""
    con.complete()  # a result a caller left unread would refuse the registering
    for name, table in tables.items():
        con.register(name, table)
    try:
        yield
    finally:
        for name in tables:
            con.unregister(name)
