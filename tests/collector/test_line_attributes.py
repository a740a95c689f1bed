"""Dynamo's JSON lines store only the attributes the record contract reads; a lookup reads the rest
from the lines the store keeps, and answers exactly as when every attribute was stored."""

from __future__ import annotations

import orjson
import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample
from tracejoin.collector.ingest import Ingester
from tracejoin.collector.lookup import lookup
from tracejoin.collector.store import open_store

# How a Dynamo JSON line's attributes were made at ingest while they were stored whole: its fields
# less those that became columns and ids, its target and span name last.
_COLUMNS_AND_IDS = {"time", "level", "target", "message", "trace_id", "span_id", "parent_id", "request_id",
                    "x_dynamo_request_id", "x_request_id", "span_name"}


def _stored_whole(line: str) -> str | None:
    obj = orjson.loads(line)
    if "target" not in obj:
        return None  # a request-trace row: its attributes are stored whole
    attrs = {k: v for k, v in obj.items() if k not in _COLUMNS_AND_IDS}
    attrs["target"] = obj["target"]
    if obj.get("span_name"):
        attrs["span_name"] = obj["span_name"]
    return orjson.dumps(attrs).decode()


@pytest.fixture
def sample_store(tmp_path):
    sample = DynamoSample()
    requests = [sample.add(x_request_id="client-1"), sample.add(offset_ms=500, status="error"),
                sample.add(offset_ms=1000, status="cancelled")]
    files = sample.write(tmp_path / "logs")
    with open_store(tmp_path / "store.duckdb") as store:
        Ingester(store).ingest_paths([str(p) for p in files.values()])
        yield store, requests


def test_a_lookup_answers_as_when_the_attributes_were_stored(sample_store):
    store, requests = sample_store
    queries = [q for r in requests for q in (r.reply_id, r.request_id)] + ["client-1"]
    now = {q: lookup(store, q) for q in queries}

    # The same store as it was when records held their attributes whole and no line was kept.
    rows = store.con.execute("SELECT record_id, origin_id, \"offset\" FROM records "
                             "WHERE source = 'dynamo_jsonl' AND kind = 'log'").fetchall()
    lines = store.lines_at([(o, p) for _, o, p in rows])
    assert len(lines) == len(rows)
    for record_id, origin_id, offset in rows:
        store.con.execute("UPDATE records SET attrs = ? WHERE record_id = ?",
                          [_stored_whole(lines[(origin_id, offset)]), record_id])
    store.con.execute("DELETE FROM line_blocks")
    before = {q: lookup(store, q) for q in queries}

    assert now == before
    shown = [r["attrs"] for q in queries for req in now[q]["requests"] for r in req["records"]
             if r["source"] == "dynamo_jsonl"]
    assert shown and all("file" in attrs and "target" in attrs for attrs in shown)  # as Dynamo wrote them


def test_the_store_keeps_only_what_the_facts_read(sample_store):
    store, _ = sample_store
    [(lines, with_attrs, with_file)] = store.con.execute(
        "SELECT count(*), count(attrs), count(attrs->>'file') FROM records "
        "WHERE source = 'dynamo_jsonl' AND kind = 'log'").fetchall()
    assert with_file == 0 and 0 < with_attrs < lines  # the frontend's route, endpoint, errors, workers
