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


def test_trace_join_snapshot_writes_grafanas_copy_of_any_store(tmp_path, tj, db):
    """A store `ingest` made (DuckDB's own newer format, no requests tables kept) gets the copy
    Grafana's DuckDB plugin opens: DuckDB 1.5's format, with the requests tables the dashboards read."""
    from tracejoin.collector.duckdb_engine import duckdb

    assert tj("ingest", *_mixed_sources(tmp_path / "logs")).code == 0
    run = tj("snapshot")
    assert run.code == 0, run.err
    snapshot = db.with_name(db.name + ".snapshot.duckdb")
    assert run.out.splitlines()[0] == f"wrote {snapshot.resolve()}" and "dashboards/duckdb/fleet.json" in run.out
    con = duckdb.connect(str(snapshot), read_only=True)
    try:
        assert con.execute("SELECT tags['storage_version'] FROM duckdb_databases() "
                           "WHERE database_name = current_database()").fetchone()[0].startswith("v1.5.0")
        assert con.execute("SELECT count(*) FROM requests").fetchone()[0] >= 10
    finally:
        con.close()
    stored, whole = tables_and_whole_build(snapshot, tmp_path / "check.duckdb")
    assert stored == whole


def test_trace_join_snapshot_of_no_store_is_one_clear_error_and_makes_none(tmp_path, tj, db):
    from ..conftest import assert_one_clear_line

    run = tj("snapshot")
    assert run.code == 2 and "no database at" in run.err
    assert_one_clear_line(run)
    assert not db.exists() and not db.with_name(db.name + ".snapshot.duckdb").exists()
