"""The store itself gone bad or busy: a DuckDB file cut short or overwritten in part, a schema
version that is not a number, a chdb folder another process holds. Each is one line naming the
store and what to do, and exit 2; nothing is written to it, and nothing stored is lost."""

from __future__ import annotations

import hashlib
import subprocess
import sys

import duckdb
import pytest

from tests.collector.collector_process import query
from tests.conftest import Run, assert_one_clear_line
from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.collector.clickhouse_store import CLICKHOUSE_SCHEMA_VERSION, Chdb
from tracejoin.collector.store import SCHEMA_VERSION


def _logs(folder, requests: int = 5) -> DynamoSample:
    sample = DynamoSample()
    for i in range(requests):
        sample.add(offset_ms=i * 7)
    sample.write(folder)
    return sample


def _digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _cut_in_half(store):
    store.write_bytes(store.read_bytes()[: store.stat().st_size // 2])


def _cut_after_its_headers(store):
    store.write_bytes(store.read_bytes()[: 3 * 4096 + 100])  # DuckDB's file header and two database headers


def _a_block_overwritten(store):
    with open(store, "r+b") as f:
        f.seek(3 * 4096)  # the first block after the headers: its checksum no longer matches
        f.write(b"\x5a" * 64)


def _its_log_overwritten(store):
    with duckdb.connect(str(store)) as con:  # a change kept in the write-ahead log, not yet in the file
        con.execute("PRAGMA disable_checkpoint_on_shutdown")
        con.execute("INSERT INTO meta VALUES ('note', 'kept in the log')")
    wal = store.with_name(store.name + ".wal")
    with open(wal, "r+b") as f:
        f.seek(wal.stat().st_size // 2)
        f.write(b"\x5a" * 16)


def _not_a_database(store):
    store.write_bytes(b"\x5a" * store.stat().st_size)


@pytest.mark.parametrize("damage", [_cut_in_half, _cut_after_its_headers, _a_block_overwritten, _its_log_overwritten,
                                    _not_a_database])
def test_a_damaged_duckdb_store_is_named_with_what_to_do_and_left_as_it_is(tj, db, tmp_path, damage):
    logs = tmp_path / "logs"
    _logs(logs)
    assert tj("ingest", logs).code == 0
    [request] = tj("requests", "--json", "--limit", 1).json()
    damage(db)
    damaged = _digest(db)
    for command in (("lookup", request["internal_ids"][0]), ("requests",), ("ingest", logs)):
        run = tj(*command)
        assert run.code == 2, (command, run)
        assert_one_clear_line(run)
        assert f"{db} is damaged or not a DuckDB database" in run.err
        assert "move it aside and ingest again" in run.err
        assert _digest(db) == damaged, command


def _set_schema_version(db, value: str) -> None:
    if str(db).startswith("chdb:"):
        engine = Chdb(str(db).removeprefix("chdb:"))  # the engine alone, without the store's schema check
        engine.command(f"INSERT INTO meta (key, value) VALUES ('schema_version', '{value}')")
        engine.close()
    else:
        with duckdb.connect(str(db)) as con:
            con.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", [value])


@pytest.mark.parametrize("db", ["duckdb", "chdb"], indirect=True)
def test_a_schema_version_that_is_not_a_number_is_named_and_what_is_stored_kept(tj, db, tmp_path):
    sample = _logs(tmp_path / "logs", 1)
    assert tj("ingest", tmp_path / "logs").code == 0
    request = tj("lookup", sample.requests[0].reply_id, "--json").json()

    _set_schema_version(db, "two")
    for command in (("lookup", sample.requests[0].reply_id), ("ingest", tmp_path / "logs")):
        run = tj(*command)
        assert run.code == 2, (command, run)
        assert_one_clear_line(run)
        assert f"{db} holds schema version 'two', which is not a number" in run.err
        assert "move it aside and ingest again" in run.err

    _set_schema_version(db, str(CLICKHOUSE_SCHEMA_VERSION if str(db).startswith("chdb:") else SCHEMA_VERSION))
    assert tj("lookup", sample.requests[0].reply_id, "--json").json() == request



def _stored(db) -> list[tuple]:
    """Records and ids in a chdb store, each counted once."""
    return query(db, "SELECT (SELECT count() FROM records), (SELECT count() FROM record_ids)")


@pytest.mark.parametrize("db", ["chdb"], indirect=True)
def test_a_chdb_store_a_collector_holds_is_refused_in_one_line_naming_its_process(tj, db, tmp_path, collector):
    _logs(tmp_path / "logs", 3)
    assert tj("ingest", tmp_path / "logs").code == 0
    stored = _stored(db)
    running = collector()
    run = tj("ingest", tmp_path / "logs")
    assert run.code == 2, run
    assert_one_clear_line(run)
    assert f"{db} is held by another process (PID {running.pid})" in run.err
    assert running.terminate() == 0
    assert _stored(db) == stored


# `trace-join ARGS...`, run once its modules (chdb's too) are loaded and a line comes on stdin:
# processes started so reach the store within a millisecond of each other, as processes started
# from scratch on a busy machine seldom do.
_AT_THE_SIGNAL = """
import sys
import chdb.session
import tracejoin.cli.main
from tracejoin.cli.__main__ import run
sys.argv[0] = "trace-join"
print("loaded", flush=True)
sys.stdin.readline()
run()
"""


@pytest.mark.parametrize("db", ["chdb"], indirect=True)
def test_writers_reaching_a_chdb_store_together_are_refused_in_one_line_or_store(tj, db, tmp_path):
    """chdb lets one process at a time open its folder. Of writers that reach it at once, each
    either opens it, or is told in one line that another holds it: never chdb's own lines."""
    _logs(tmp_path / "logs", 3)
    assert tj("ingest", tmp_path / "logs").code == 0
    stored = _stored(db)
    refused = []
    for _ in range(5):  # which process takes the lock first, and when, differs from round to round
        writers = [subprocess.Popen([sys.executable, "-c", _AT_THE_SIGNAL, "ingest", tmp_path / "logs", "--db", db],
                                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                   for _ in range(4)]
        for writer in writers:
            assert writer.stdout.readline() == "loaded\n"
        for writer in writers:
            writer.stdin.write("go\n")
            writer.stdin.flush()
        outputs = [writer.communicate(timeout=120) for writer in writers]
        runs = [Run(writer.returncode, *output) for writer, output in zip(writers, outputs)]
        assert {run.code for run in runs} <= {0, 2}, runs
        refused += [run for run in runs if run.code == 2]
    assert refused
    for run in refused:
        assert_one_clear_line(run)
        assert f"{db} is held by another process" in run.err
    assert _stored(db) == stored
