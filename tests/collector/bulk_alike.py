"""What the bulk tests share: a source's files ingested in bulk (collector/bulk.py with the
module's BULK) and line by line (its LineParser alone), and every table of the two stores."""

from __future__ import annotations

import sys

import duckdb

from tracejoin.collector import bulk, ingest
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.store import open_store

from ..conftest import kill_9_at_random_moments

# Every table ingest writes, without the columns that say when rather than what.
TABLES = {
    "records": "SELECT * FROM records ORDER BY record_id",
    "record_ids": "SELECT * FROM record_ids ORDER BY ALL",
    "id_index": "SELECT * FROM id_index ORDER BY ALL",
    "quarantine": "SELECT * FROM quarantine ORDER BY ALL",
    "origins": "SELECT * EXCLUDE (updated, clock), clock FROM origins ORDER BY ALL",
    "worker_aliases": "SELECT * FROM worker_aliases ORDER BY ALL",
    "worker_names": "SELECT * FROM worker_names ORDER BY ALL",
}


def stored(db) -> dict[str, list[tuple]]:
    with duckdb.connect(str(db), read_only=True) as con:
        return {table: con.execute(sql).fetchall() for table, sql in TABLES.items()}


def ingest_both_ways(tmp_path, files: list[str], monkeypatch, module, *, small: bool) -> tuple[dict, dict]:
    """The files ingested in bulk (cut into many pieces and stages when `small`) and line by line."""
    with monkeypatch.context() as m:
        if small:
            m.setattr(bulk, "CHUNK_BYTES", 700)
            m.setattr(ingest, "FLUSH_BYTES", 3000)
        with open_store(tmp_path / "bulk.duckdb") as store:
            Ingester(store, batch_records=40 if small else None).ingest_paths(files)
    with monkeypatch.context() as m:
        m.setattr(module, "BULK", None)
        with open_store(tmp_path / "lines.duckdb") as store:
            Ingester(store).ingest_paths(files)
    return stored(tmp_path / "bulk.duckdb"), stored(tmp_path / "lines.duckdb")


def write_files(folder, files: dict[str, list[bytes]], *, last_newline: bool = True) -> list[str]:
    """Each file's lines under `folder` (its name may hold folders); the paths written."""
    paths = []
    for name, lines in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"\n".join(lines) + (b"\n" if last_newline else b""))
        paths.append(str(path))
    return paths


def killed_and_read_whole(tmp_path, monkeypatch, module, paths: list[str], *, seed: int, kills: int):
    """The files ingested in small bulk stages by a process killed with SIGKILL at random
    moments and run again to its end (bulk.duckdb), and line by line in one run (lines.duckdb):
    the two stores, and the records committed at each kill."""
    db = tmp_path / "bulk.duckdb"
    with monkeypatch.context() as m:
        m.setattr(module, "BULK", None)
        with open_store(tmp_path / "lines.duckdb") as store:
            Ingester(store).ingest_paths(paths)
            total = store.con.execute("SELECT count(*) FROM records").fetchone()[0]
    argv = [sys.executable, "-c", INGEST_IN_SMALL_STAGES, str(db), *paths]
    committed_at_kills = kill_9_at_random_moments(argv, db, seed=seed, kills=kills, wait_s=0.8, total=total)
    return db, tmp_path / "lines.duckdb", committed_at_kills


def assert_same(in_bulk: dict, by_line: dict) -> None:
    for table in TABLES:
        for x, y in zip(in_bulk[table], by_line[table]):
            assert x == y, (table, x, y)
        assert in_bulk[table] == by_line[table], table


def by_position(db) -> dict[str, list[tuple]]:
    """The store's records, ids, quarantine and worker names by where each record was read:
    record ids are numbered anew by each run."""
    with duckdb.connect(str(db), read_only=True) as con:
        return {
            "records": con.execute('SELECT * EXCLUDE (record_id) FROM records ORDER BY origin_id, "offset", seq').fetchall(),
            "record_ids": con.execute('SELECT r.origin_id, r."offset", r.seq, i.kind, i.value, i.scope FROM record_ids i '
                                      "JOIN records r USING (record_id) ORDER BY ALL").fetchall(),
            "quarantine": con.execute(TABLES["quarantine"]).fetchall(),
            "worker_names": con.execute(TABLES["worker_names"]).fetchall(),
        }


# A child process that ingests with small stages, so one run holds many bulk transactions (for
# conftest.kill_9_at_random_moments): `python -c INGEST_IN_SMALL_STAGES DB FILES...`.
INGEST_IN_SMALL_STAGES = """
import sys
from tracejoin.collector import bulk, ingest
bulk.CHUNK_BYTES = 20_000
ingest.BULK_BATCH_RECORDS = 300
from tracejoin.cli.__main__ import run
sys.argv = ["trace-join", "ingest", "--db", sys.argv[1], *sys.argv[2:]]
run()
"""
