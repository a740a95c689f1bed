"""Ingest: idempotent, resumable, forgiving of bad lines, and clear about what it could not read."""

from __future__ import annotations

import gzip
import shutil

import duckdb
import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample

from ..conftest import assert_one_clear_line


# DynamoSample's startup lines: 2 in the frontend file, 4 in each worker file. Per request it writes
# 17 records (tests/collector/test_lookup_dynamo.py counts them).
STARTUP_LINES = 10


def count(db, sql="SELECT count(*) FROM records"):
    with duckdb.connect(str(db), read_only=True) as con:
        return con.execute(sql).fetchone()[0]


def sample_files(tmp_path, n=3):
    sample = DynamoSample()
    for i in range(n):
        sample.add(offset_ms=i * 10, x_request_id=f"x-{i}")
    return sample.write(tmp_path / "logs")


def test_reingesting_the_same_bytes_adds_nothing(tj, tmp_path, db):
    files = sample_files(tmp_path)
    assert tj("ingest", tmp_path / "logs").code == 0
    stored = count(db)
    ids = count(db, "SELECT count(*) FROM record_ids")
    assert stored == 3 * 17 + STARTUP_LINES

    again = tj("ingest", tmp_path / "logs", "--json")
    assert again.code == 0
    assert all(s["records"] == 0 for s in again.json()["sources"].values())
    # The same bytes under another name, and gzipped, are recognized too.
    copy = tmp_path / "elsewhere" / "renamed.jsonl"
    copy.parent.mkdir()
    shutil.copy(files["frontend"], copy)
    with gzip.open(tmp_path / "elsewhere" / "decode.jsonl.gz", "wb") as f:
        f.write(files["decode"].read_bytes())
    assert tj("ingest", copy, tmp_path / "elsewhere" / "decode.jsonl.gz").code == 0
    assert count(db) == stored
    assert count(db, "SELECT count(*) FROM record_ids") == ids


def test_a_file_that_grew_is_read_from_where_it_stopped(tj, tmp_path, db):
    files = sample_files(tmp_path, n=1)
    frontend = files["frontend"]
    lines = frontend.read_bytes().splitlines(keepends=True)
    frontend.write_bytes(b"".join(lines[:2]))
    assert tj("ingest", frontend).code == 0
    assert count(db) == 2
    frontend.write_bytes(b"".join(lines))
    assert tj("ingest", frontend).code == 0
    assert count(db) == len(lines)
    assert count(db, "SELECT count(DISTINCT (origin_id, \"offset\")) FROM records") == len(lines)


DYNAMO_LINES = [
    b'{"time":"2026-09-02T15:50:01.770028Z","level":"INFO","target":"dynamo_runtime::worker",'
    b'"message":"FPM direct publisher started","worker_id":7587888880384150231}',
    b'{"time":"2026-09-02T15:50:02.000000Z","level":"INFO","target":"dynamo_runtime","message":'
    b'"Registered endpoint \'dynamo.backend.generate\' with instance_id 7587888880384150231"}',
    b'{"time":"2026-09-02T15:50:03.250000Z","level":"ERROR","target":"dynamo_llm","message":"engine failed"}',
]
TRTLLM_LINES = [
    b"[09/02/2026-15:50:01] [TRT-LLM] [I] Starting TensorRT-LLM init.",
    b"[09/02/2026-15:50:03] [TRT-LLM] [E] Error in request 3",
]
TRACEBACK = [b"Traceback (most recent call last):", b'  File "/app/x.py", line 3, in f', b"RuntimeError: boom"]


def untimed_times(db) -> set:
    """The times of the traceback's records."""
    with duckdb.connect(str(db), read_only=True) as con:
        return set(con.execute("SELECT DISTINCT time_ns FROM records WHERE name LIKE 'Traceback%' "
                               "OR name LIKE '  File%' OR name LIKE 'RuntimeError%'").fetchall())


@pytest.mark.parametrize("lines, name", [(DYNAMO_LINES, "backend.stderr.jsonl"), (TRTLLM_LINES, "h_1/worker.log")],
                         ids=["dynamo", "trtllm"])
def test_a_file_read_on_keeps_what_its_parser_learned(tj, tmp_path, db, lines, name):
    """A traceback written after the file was last read takes the time of the line before it, and
    the worker keeps its name when a later line names it again (Dynamo's publisher line), as in a
    file read whole: the parser's state is stored with the file's position."""
    later = TRACEBACK + lines[:1]
    whole = tmp_path / "whole" / name
    whole.parent.mkdir(parents=True)
    whole.write_bytes(b"\n".join(lines + later) + b"\n")
    assert tj("ingest", whole, "--db", tmp_path / "whole.duckdb", with_db=False).code == 0

    grown = tmp_path / "grown" / name
    grown.parent.mkdir(parents=True)
    grown.write_bytes(b"\n".join(lines) + b"\n")
    assert tj("ingest", grown).code == 0
    with open(grown, "ab") as f:
        f.write(b"\n".join(later) + b"\n")
    assert tj("ingest", grown).code == 0

    expected = untimed_times(tmp_path / "whole.duckdb")
    assert len(expected) == 1 and None not in expected
    assert untimed_times(db) == expected
    workers = "SELECT DISTINCT coalesce(r.worker, o.worker), o.worker FROM records r JOIN origins o USING (origin_id)"
    with duckdb.connect(str(db), read_only=True) as a, duckdb.connect(str(tmp_path / "whole.duckdb"), read_only=True) as b:
        assert a.execute(workers).fetchall() == b.execute(workers).fetchall()


def test_gzip_files_are_read(tj, tmp_path, db):
    files = sample_files(tmp_path, n=2)
    gz = tmp_path / "dynamo-request-trace.000002.jsonl.gz"
    with gzip.open(gz, "wb") as f:
        f.write(files["request_trace"].read_bytes())
    run = tj("ingest", gz, "--json")
    assert run.code == 0, run.err
    assert run.json()["sources"]["dynamo_request_trace"]["records"] == 2


def test_bad_lines_are_quarantined_and_the_rest_ingested(tj, tmp_path, db):
    files = sample_files(tmp_path, n=1)
    good = files["frontend"].read_bytes().splitlines()
    bad = [
        good[0],
        good[1][: len(good[1]) // 2],  # truncated
        b"\x00\x01\x02\xff\xfe binary \x00",  # binary
        b'{"time":"2026-08-20T10:15:04Z","level":"INFO","target":"x","message":"' + b"a" * (10 << 20) + b'"}',
        b'{"time":1787307304,"level":"INFO","target":"x","message":"time is a number"}',  # wrongly typed
        b'{"time":"2026-08-20T10:15:04Z","level":"INFO","target":"x","message":"m","request_id":{"a":1}}',
        *good[2:],
    ]
    mixed = tmp_path / "mixed.stderr.jsonl"
    mixed.write_bytes(b"\n".join(bad) + b"\n")

    run = tj("ingest", mixed, "--json")
    assert run.code == 2, "bad input exits 2, after storing the rest"
    summary = run.json()["sources"]["dynamo_jsonl"]
    # every good line but the one truncated, and the three lines Dynamo's reader cannot read,
    # stored as text with why; what cannot be stored even so is quarantined
    stored = len(good) - 1 + 3
    assert summary["records"] == stored
    assert summary["quarantined"] == 2
    assert count(db) == stored
    assert run.json()["unread"] == 3
    unread = run.json()["unread_samples"]
    assert [u.split(":", 2)[1].split()[0] for u in unread] == ["2", "5", "6"]
    assert "invalid JSON" in unread[0] and "'time'" in unread[1] and "int" in unread[1] and "'request_id'" in unread[2]

    q = tj("quarantine", "--json")
    assert q.code == 0
    rows = q.json()
    assert [r["line"] for r in rows] == [3, 4]
    offsets = [sum(len(b) + 1 for b in bad[: r["line"] - 1]) for r in rows]
    assert [r["offset"] for r in rows] == offsets
    reasons = [r["reason"] for r in rows]
    assert "binary" in reasons[0]
    assert "limit" in reasons[1]

    # Nothing already stored is lost, and quarantined lines are not re-quarantined on a re-run.
    again = tj("ingest", mixed, "--json")
    assert again.json()["sources"]["dynamo_jsonl"] == {"files": 1, "records": 0, "quarantined": 0}
    assert count(db, "SELECT count(*) FROM quarantine") == 2


def test_an_unfinished_last_line_is_held_back_until_the_file_grows(tj, tmp_path, db):
    files = sample_files(tmp_path, n=1)
    lines = files["decode"].read_bytes().splitlines(keepends=True)
    torn = files["decode"]
    torn.write_bytes(b"".join(lines[:-1]) + lines[-1][:20])
    run = tj("ingest", torn)
    assert run.code == 0
    assert "held back" in run.err
    assert count(db) == len(lines) - 1
    torn.write_bytes(b"".join(lines))
    assert tj("ingest", torn).code == 0
    assert count(db) == len(lines)
    assert count(db, "SELECT count(*) FROM quarantine") == 0


def test_unreadable_input_is_one_line_and_exit_2(tj, tmp_path, db):
    run = tj("ingest", tmp_path / "missing.jsonl")
    assert run.code == 2
    assert_one_clear_line(run)

    unknown = tmp_path / "core.bin"  # any text is read; a file that is not text is refused
    unknown.write_bytes(b"\x7fELF\x02\x01\x00\x00" * 64)
    run = tj("ingest", unknown)
    assert run.code == 2
    assert "not a format trace-join reads" in run.err
    assert "Traceback" not in run.err

    not_a_db = tmp_path / "not.duckdb"
    not_a_db.write_text("hello")
    run = tj("lookup", "x", "--db", not_a_db, with_db=False)
    assert run.code == 2
    assert_one_clear_line(run)

    run = tj("lookup", "x", "--db", tmp_path / "absent.duckdb", with_db=False)
    assert run.code == 2
    assert_one_clear_line(run)


def test_a_database_of_another_schema_version_says_what_to_do(tj, tmp_path, db):
    sample_files(tmp_path, n=1)
    assert tj("ingest", tmp_path / "logs").code == 0
    with duckdb.connect(str(db)) as con:
        con.execute("UPDATE meta SET value = '999' WHERE key = 'schema_version'")
    for args in (("lookup", "x"), ("ingest", tmp_path / "logs")):
        run = tj(*args)
        assert run.code == 2
        assert_one_clear_line(run)
        assert "schema version 999" in run.err and "--db" in run.err
    with duckdb.connect(str(db), read_only=True) as con:
        assert con.execute("SELECT count(*) FROM records").fetchone()[0] == 17 + STARTUP_LINES
