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
"""

from __future__ import annotations

import os
import threading
from pathlib import Path
from typing import Callable

from .requests import update_requests
from .store import Store, open_store
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


def _sql_text(path: Path) -> str:
    return str(path).replace("'", "''")
