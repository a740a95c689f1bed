"""A read-only copy of the store for tools that need a file (Grafana's DuckDB plugin).

While the collector runs, no other process can open its database, not even read-only. So every
`--snapshot-interval` seconds (when something was stored since the last copy), and once more on
a clean exit, the collector copies the database to `<db>.snapshot.duckdb`: into a temporary file
first (ATTACH, COPY FROM DATABASE, DETACH), then renamed over the old copy, so a reader opens
either the old copy or the new one, never half of one. A reader that holds the old copy open keeps
reading it until it reopens the path.

The copy is in DuckDB's 1.5 storage format, which Grafana's DuckDB plugin (DuckDB 1.5) can open and
newer DuckDB reads too. It also gets the `requests` tables the dashboards read
(requests.update_requests), brought up to date in the copy, where that work holds up no writer.
The store itself has none kept up to date while the collector writes, so the copy starts from the
tables of the last copy of the same store (`store_id`), and only the requests that the records
stored since reach are built again, not every request of the store each time.
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Callable

from ..duckdb_engine import duckdb
from ..requests import update_requests
from ..store import Store, open_store
from .writer import Writer

INTERVAL_S = 30
STORAGE_VERSION = "v1.5.0"  # the newest format DuckDB 1.5 reads


def snapshot_path(db: Path) -> Path:
    return db.with_name(db.name + ".snapshot.duckdb")


def publish(store: Store) -> Path:
    """Copy the store (as this connection sees it: one consistent transaction) to its snapshot path."""
    final = snapshot_path(store.path)
    partial = final.with_name(final.name.removesuffix(".duckdb") + ".partial.duckdb")
    partial.unlink(missing_ok=True)  # left by a collector that died while copying
    con = store.con
    database = con.execute("SELECT current_database()").fetchone()[0]
    con.execute(f"ATTACH '{_sql_text(partial)}' AS tracejoin_snapshot (STORAGE_VERSION '{STORAGE_VERSION}')")
    try:
        con.execute(f'COPY FROM DATABASE "{database}" TO tracejoin_snapshot')
        _start_requests_from(con, final)
    finally:
        con.execute("DETACH tracejoin_snapshot")
    with open_store(partial) as copy:
        update_requests(copy)
    os.replace(partial, final)
    return final


class Snapshotter:
    """Publishes on its own thread, through a connection of its own, while the writer goes on."""

    def __init__(self, connect: Callable[[], Store], writer: Writer, interval_s: float,
                 report: Callable[[str], None]):
        self.connect = connect
        self.writer = writer
        self.interval_s = interval_s
        self.report = report
        self._published_at_commit: int | None = None

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval_s):
            commits = self.writer.commits
            if commits == self._published_at_commit:
                continue
            try:
                with self.connect() as store:
                    publish(store)
                self._published_at_commit = commits
            except Exception as e:  # noqa: BLE001 - a failed copy leaves the last one; try again later
                self.report(f"snapshot: {type(e).__name__}: {e}")


# The tables update_requests keeps, and the meta row that says how far they go.
REQUESTS_TABLES = ("request_records", "requests")


def _start_requests_from(con, previous: Path) -> None:
    """Give the copy being made (attached as tracejoin_snapshot) the requests tables of `previous`, the
    last copy, when that is a copy of the same store whose tables go further than the store's own:
    records are only ever added, so those tables hold the requests of a prefix of the records, which
    update_requests then brings up to date by building only what changed since."""
    if not previous.exists():
        return
    try:
        con.execute(f"ATTACH '{_sql_text(previous)}' AS tracejoin_previous (READ_ONLY)")
    except duckdb.Error:  # not a copy DuckDB can open: the copy builds from the store's own tables
        return
    try:
        def meta(database: str, key: str) -> str | None:
            row = con.execute(f"SELECT value FROM {database}.meta WHERE key = ?", [key]).fetchone()
            return row[0] if row else None

        def through(state: str | None) -> int:
            return json.loads(state)["through"] if state else -1

        store_id, state = meta("tracejoin_snapshot", "store_id"), meta("tracejoin_previous", "requests_state")
        if store_id is None or meta("tracejoin_previous", "store_id") != store_id:
            return
        if through(state) <= through(meta("tracejoin_snapshot", "requests_state")):
            return
        for table in REQUESTS_TABLES:
            con.execute(f"CREATE OR REPLACE TABLE tracejoin_snapshot.{table} AS SELECT * FROM tracejoin_previous.{table}")
        con.execute("DELETE FROM tracejoin_snapshot.meta WHERE key = 'requests_state'")
        con.execute("INSERT INTO tracejoin_snapshot.meta VALUES ('requests_state', ?)", [state])
    finally:
        con.execute("DETACH tracejoin_previous")


def _sql_text(path: Path) -> str:
    return str(path).replace("'", "''")
