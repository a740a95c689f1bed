"""The id index (collector/id_index.py): ids found by value in a store of any size, written within
the store's memory limit, through merges, upgrades and a DuckDB that hashes differently."""

from __future__ import annotations

import uuid

import duckdb
import pytest

from tracejoin.collector import id_index
from tracejoin.collector.graph import IdGraph
from tracejoin.collector.records import BatchBuilder, Record
from tracejoin.collector.store import SCHEMA_VERSION, StoreError, open_store


def write_requests(store, batches: int, per_batch: int) -> list[str]:
    """Batches of log records, each carrying a random internal id, an x-request-id and a trace id;
    the internal ids, in order."""
    origin = store.new_origin("app.jsonl", "tracejoin_jsonl", 0, uuid.uuid4().hex)
    internal_ids = []
    for b in range(batches):
        batch = BatchBuilder("tracejoin_jsonl", origin)
        for i in range(per_batch):
            record = Record(kind="log", name="request.start")
            internal_ids.append(str(uuid.uuid4()))
            record.add_id("internal_id", internal_ids[-1])
            record.add_id("x_request_id", f"xr-{b}-{i}")
            record.add_id("trace_id", uuid.uuid4().hex)
            batch.add([record], offset=b * per_batch + i)
        origin.consumed += per_batch
        store.write_batch(batch)
    return internal_ids


def carriers(store, value: str) -> list[tuple]:
    return store.con.execute("SELECT record_id, kind FROM id_carriers(?)", [value]).fetchall()


def test_a_store_larger_than_the_memory_limit_is_written(db, monkeypatch):
    # 450,000 ids under a 32 MB limit: DuckDB's ART index on record_ids.value, which has to stay in
    # memory, ran out at 345,000 ("could not allocate block"), and the database was lost to that
    # session.
    monkeypatch.setenv("TRACEJOIN_MEMORY_LIMIT", "32MB")
    with open_store(db) as store:
        internal_ids = write_requests(store, batches=30, per_batch=5000)
        assert store.con.execute("SELECT count(*) FROM id_index").fetchone()[0] == 450_000
        runs = store.con.execute("SELECT count(*) FROM id_runs").fetchone()[0]
        assert 1 <= runs < id_index.FANIN * 2
        for value in (internal_ids[0], internal_ids[77_777], internal_ids[-1]):
            assert [kind for _, kind in carriers(store, value)] == ["internal_id"]


def test_ids_are_found_in_the_tail_in_runs_and_after_merges(db, monkeypatch):
    monkeypatch.setattr(id_index, "BASE_ROWS", 300)
    with open_store(db) as store:
        internal_ids = write_requests(store, batches=41, per_batch=50)  # 6,150 ids
        tiers = dict(store.con.execute("SELECT tier, count(*) FROM id_runs GROUP BY tier").fetchall())
        assert tiers and max(tiers.values()) < id_index.FANIN  # merged as they filled a tier
        assert max(tiers) >= 2  # merged runs merged again
        assert store.con.execute("SELECT count(*) FROM id_tail").fetchone()[0] > 0  # the last batch's
        in_runs = store.con.execute("SELECT count(*) FROM id_index").fetchone()[0]
        assert in_runs == store.con.execute("SELECT count(*) FROM record_ids").fetchone()[0] == 6150
        # Every id, where it went: one record each, of its kind.
        for n, value in enumerate(internal_ids):
            assert [kind for _, kind in carriers(store, value)] == ["internal_id"], n
        # Many values at once take the other path of the lookup: the same rows.
        graph = IdGraph(store)
        graph.rows_for(internal_ids[:2000])
        assert all(len(graph._rows[v]) == 1 for v in internal_ids[:2000])
        assert carriers(store, "no-such-id") == []


def test_a_long_run_of_writes_merges_its_runs_once_at_its_end(db, monkeypatch):
    # An ingest writes a batch every ingest.FLUSH_BYTES of lines; merging their runs FANIN at a time
    # as they came would rewrite each id once a tier.
    monkeypatch.setattr(id_index, "BASE_ROWS", 300)
    merged: list[list[int]] = []
    merge = id_index._merge
    monkeypatch.setattr(id_index, "_merge", lambda con, runs: (merged.append(runs), merge(con, runs)))
    with open_store(db) as store:
        before = write_requests(store, batches=8, per_batch=100)  # 2,400 ids, merged as they came
        old_runs = {r for (r,) in store.con.execute("SELECT run FROM id_runs").fetchall()}
        merged.clear()
        with store.ids_merged_at_end():
            during = write_requests(store, batches=20, per_batch=100)
            assert merged == []  # runs made, none merged yet
            runs = store.con.execute("SELECT count(*) FROM id_runs").fetchone()[0]
            assert runs >= 20
            assert [kind for _, kind in carriers(store, during[0])] == ["internal_id"]  # findable meanwhile
        new_runs = [r for r in merged[0] if r not in old_runs]
        assert merged[0] == new_runs and len(new_runs) == 20  # the new runs at once, the old ones left alone
        tiers = dict(store.con.execute("SELECT tier, count(*) FROM id_runs GROUP BY tier").fetchall())
        assert max(tiers.values()) < id_index.FANIN
        for value in (before[0], before[-1], during[0], during[-1]):
            assert [kind for _, kind in carriers(store, value)] == ["internal_id"]

        # A run of writes that fails leaves its runs as they are, each found; later writes merge them.
        with pytest.raises(RuntimeError), store.ids_merged_at_end():
            failed = write_requests(store, batches=6, per_batch=100)
            raise RuntimeError("the disk filled up")
        assert [kind for _, kind in carriers(store, failed[-1])] == ["internal_id"]
        write_requests(store, batches=1, per_batch=100)
        tiers = dict(store.con.execute("SELECT tier, count(*) FROM id_runs GROUP BY tier").fetchall())
        assert max(tiers.values()) < id_index.FANIN


def drop_id_index(con) -> None:
    """This release's id index gone: its runs, its view and its tail."""
    for (run,) in con.execute("SELECT run FROM id_runs").fetchall():
        con.execute(f"DROP TABLE id_run_{run}")
    con.execute("DROP VIEW id_index")
    con.execute("DROP TABLE id_tail")


def make_schema_1(path) -> list[str]:
    """A store as trace-join wrote it before the id index: an ART index on record_ids.value."""
    with open_store(path) as store:
        internal_ids = write_requests(store, batches=3, per_batch=100)
        con = store.con
        drop_id_index(con)
        con.execute("DROP MACRO TABLE id_carriers")
        con.execute("DROP TABLE id_runs")
        con.execute("DELETE FROM meta WHERE key = 'id_key_check'")
        con.execute("CREATE INDEX record_ids_value ON record_ids (value)")
        con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")
    return internal_ids


def test_a_schema_1_store_is_upgraded_by_opening_it_for_writing(db):
    internal_ids = make_schema_1(db)
    with pytest.raises(StoreError, match=r"older trace-join \(schema 1\).*trace-join ingest --db"):
        open_store(db, read_only=True)
    with open_store(db) as store:  # what `trace-join ingest --db DB PATH...` does first
        pass
    with open_store(db, read_only=True) as store:
        assert store.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone() == (
            str(SCHEMA_VERSION),)
        assert store.con.execute("SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'record_ids_value'"
                                 ).fetchone() == (0,)
        assert [kind for _, kind in carriers(store, internal_ids[150])] == ["internal_id"]


def test_a_schema_3_store_is_reindexed_without_values_by_opening_it_for_writing(db):
    """Schema 3's runs carried each id's kind, value and scope; schema 4's hold the hash and the
    record only, and a lookup checks the value in record_ids."""
    with open_store(db) as store:
        internal_ids = write_requests(store, batches=3, per_batch=100)
        con = store.con
        drop_id_index(con)
        con.execute("DELETE FROM id_runs")
        con.execute("CREATE TABLE id_tail AS SELECT hash(value) AS key, record_id, kind, value, scope FROM record_ids")
        con.execute("CREATE VIEW id_index AS SELECT * FROM id_tail")
        con.execute("CREATE OR REPLACE MACRO id_carriers(v) AS TABLE "
                    "SELECT record_id, kind, value, scope FROM id_index WHERE key = hash(v) AND value = v")
        con.execute("UPDATE meta SET value = '3' WHERE key = 'schema_version'")
    with pytest.raises(StoreError, match=r"older trace-join \(schema 3\).*trace-join ingest --db"):
        open_store(db, read_only=True)
    with open_store(db):
        pass
    with open_store(db, read_only=True) as store:
        columns = store.con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = 'id_tail' "
                                    "ORDER BY column_index").fetchall()
        assert columns == [("key",), ("record_id",)]
        assert store.con.execute("SELECT count(*) FROM id_index").fetchone()[0] == 900
        assert [kind for _, kind in carriers(store, internal_ids[250])] == ["internal_id"]


def test_keys_from_a_duckdb_that_hashed_differently_are_remade(db):
    with open_store(db) as store:
        internal_ids = write_requests(store, batches=2, per_batch=100)
        # As if another DuckDB release had made the keys: this one's hash finds none of them.
        store.con.execute("UPDATE meta SET value = 'another hash' WHERE key = 'id_key_check'")
        store.con.execute("UPDATE id_tail SET key = key + 1")
        assert carriers(store, internal_ids[0]) == []
    with pytest.raises(StoreError, match="hashes differently.*trace-join ingest --db"):
        open_store(db, read_only=True)
    with open_store(db):
        pass
    with open_store(db, read_only=True) as store:
        assert [kind for _, kind in carriers(store, internal_ids[0])] == ["internal_id"]
        assert store.con.execute("SELECT count(*) FROM id_index").fetchone()[0] == 600


def test_the_key_is_the_same_in_the_duckdb_of_grafanas_plugin():
    # The dashboards' DuckDB (1.5, in the Grafana plugin) reads the store's snapshot and computes the
    # keys of the ids typed into it; hash() of DuckDB 1.5.2 gave these very numbers.
    con = duckdb.connect()
    assert con.execute("SELECT hash('trace-join id key'), hash('chatcmpl-abc')").fetchone() == (
        11414870400785811001, 18317289493111202693,
    )
