"""The collector's snapshots (snapshot.py): each copy's requests tables, which the dashboards read,
are built from the last copy's where that is a copy of the same store, and come out as a build of
every request of the copy would make them."""

from __future__ import annotations

import shutil

from tracejoin.collector import requests
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.service.snapshot import publish
from tracejoin.collector.store import open_store

from .test_requests import _mixed_sources

TABLES = ("SELECT * FROM request_records ORDER BY record_id", "SELECT * FROM requests ORDER BY request_id")


def count_builds(monkeypatch) -> list[int]:
    """The records each requests build reads, in order."""
    built: list[int] = []
    build = requests._build

    def counted(con) -> None:
        built.append(con.execute("SELECT count(*) FROM build_records").fetchone()[0])
        build(con)

    monkeypatch.setattr(requests, "_build", counted)
    return built


def tables_and_whole_build(snapshot, scratch) -> tuple[list, list]:
    """The snapshot's requests tables, and those a build of all of its requests makes."""
    shutil.copy(snapshot, scratch)
    with open_store(scratch) as copy:
        stored = [copy.con.execute(q).fetchall() for q in TABLES]
        requests.persist_requests(copy)
        return stored, [copy.con.execute(q).fetchall() for q in TABLES]


def test_a_snapshot_builds_only_the_requests_that_records_stored_since_the_last_one_reach(tmp_path, monkeypatch):
    files = [str(p) for p in _mixed_sources(tmp_path / "logs")]
    built = count_builds(monkeypatch)
    db = tmp_path / "store.duckdb"
    with open_store(db) as store:  # written as the collector writes: no requests tables of its own
        Ingester(store).ingest_paths(files[:-1])
        publish(store)
        Ingester(store).ingest_paths(files[-1:])  # one record, reaching one request
        snapshot = publish(store)
        records = store.con.execute("SELECT count(*) FROM records").fetchone()[0]
    assert built[0] == records - 1 and 0 < built[1] < records // 4, built
    stored, whole = tables_and_whole_build(snapshot, tmp_path / "check.duckdb")
    assert stored == whole and len(whole[1]) >= 10

    # Another store at the same path: its first copy is built whole, whatever the old copy held.
    db.unlink()
    built.clear()
    with open_store(db) as store:
        Ingester(store).ingest_paths(files[:3])
        snapshot = publish(store)
        records = store.con.execute("SELECT count(*) FROM records").fetchone()[0]
    assert built == [records]
    stored, whole = tables_and_whole_build(snapshot, tmp_path / "check-2.duckdb")
    assert stored == whole
