"""Workers and roles settled as the store is written (store.py: worker_names), read through the view
record_workers, against schema 2's view, which settled them from the naming tables on every read."""

from __future__ import annotations

import pytest

from tracejoin.collector.duckdb_engine import duckdb
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.store import SCHEMA_VERSION, StoreError, open_store

from .test_requests import _mixed_sources
from .test_trtllm_joins import WALL_START_NS, llm_request_span_line
from .test_tracejoin_jsonl import line, write

# record_workers as schema 2 defined it: the reference the settled names must agree with.
SCHEMA_2_RECORD_WORKERS = """
CREATE OR REPLACE {temp} VIEW {name} AS
WITH named AS (
    SELECT r.* REPLACE (coalesce(a.worker, r.worker, o.worker) AS worker, coalesce(r.role, o.role) AS role)
    FROM records r
    JOIN origins o USING (origin_id)
    LEFT JOIN worker_aliases a ON a.alias = coalesce(r.worker, o.worker)
), stated_roles AS (
    SELECT coalesce(a.worker, o.worker) AS worker, min(o.role) AS role
    FROM origins o LEFT JOIN worker_aliases a ON a.alias = o.worker
    WHERE o.role IS NOT NULL AND o.role <> 'worker'
    GROUP BY 1 HAVING count(DISTINCT o.role) = 1
)
SELECT n.* REPLACE (
    CASE WHEN n.role IS NULL OR n.role = 'worker' THEN coalesce(wr.role, s.role, n.role) ELSE n.role END AS role)
FROM named n
LEFT JOIN worker_roles wr ON wr.instance_id = regexp_extract(n.worker, '[^:]+$')
LEFT JOIN stated_roles s ON s.worker = n.worker
"""


def sources(folder):
    """_mixed_sources, and a process that only its own records name by host:pid: TensorRT-LLM's
    `llm_request` span (format reproduced from `tensorrt_llm/llmapi/tracing.py`; it cannot run here),
    which the middleware's line names host:port, in the role the middleware states."""
    files = _mixed_sources(folder)
    write(folder / "gen-3.jsonl", line("2026-11-30T10:48:30.100000Z", "request.end", role="gen", worker="gpu-3:8003",
                                       process="gpu-3:777", engine_request_id="5", engine_worker="gpu-3:777"))
    (folder / "gen-3.otlp.jsonl").write_bytes(llm_request_span_line("gpu-3", 777, 5, WALL_START_NS, 0.5) + b"\n")
    return sorted([*files, folder / "gen-3.jsonl", folder / "gen-3.otlp.jsonl"])


def settled(con, view: str = "record_workers") -> list[tuple]:
    return con.execute(f"SELECT record_id, worker, role FROM {view} ORDER BY record_id").fetchall()


def test_names_settled_as_written_agree_with_settling_every_read(tmp_path):
    # One ingest per file, in both orders: a worker's role stated by the entry server's later file,
    # processes named otherwise by the middleware's lines (aliases) in their origin's name and in
    # their records' own, before and after the records they rename.
    files = sources(tmp_path / "logs")
    for name, order in (("in order", files), ("reversed", files[::-1])):
        with open_store(tmp_path / f"{name}.duckdb") as store:
            con = store.con
            con.execute(SCHEMA_2_RECORD_WORKERS.format(temp="TEMP", name="schema_2_record_workers"))
            for path in order:
                Ingester(store).ingest_paths([str(path)])
                assert settled(con) == settled(con, "schema_2_record_workers"), (name, path.name)
            rows = settled(con)
            # what the settling did: a role from the frontend, a worker under its main name
            assert any("backend" in w and role == "decode" for _, w, role in rows), name
            assert ("gpu-3:8003", "gen") in {(w, role) for _, w, role in rows}, name
            assert not any(w in ("gpu-2:4242", "gpu-3:777") for _, w, _ in rows), name


def test_a_schema_2_store_is_upgraded_when_written_and_refused_until_then(tmp_path):
    db = tmp_path / "store.duckdb"
    with open_store(db) as store:
        Ingester(store).ingest_paths([str(p) for p in sources(tmp_path / "logs")])
        expected = settled(store.con)
        # the store as schema 2 left it: no worker_names, its own view
        store.con.execute("DROP VIEW record_workers")
        store.con.execute("DROP TABLE worker_names")
        store.con.execute(SCHEMA_2_RECORD_WORKERS.format(temp="", name="record_workers"))
        store.con.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with duckdb.connect(str(db), read_only=True) as con:  # schema 2's own view settles as the new one
        assert settled(con) == expected
    with pytest.raises(StoreError, match=r"older trace-join \(schema 2\).*trace-join ingest --db"):
        open_store(db, read_only=True)
    with open_store(db) as store:  # what `trace-join ingest --db DB PATH...` or a collector does first
        pass
    with open_store(db, read_only=True) as store:
        assert store.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),)
        assert store.con.execute("SELECT count(*) FROM worker_names").fetchone()[0] >= 8
        assert settled(store.con) == expected
