"""`lookup` and `requests` read one id graph: the requests a lookup shows are those the requests
build lists, record for record, collisions included (requests.py holds the rule, graph.py only
finds the records it has to see)."""

from __future__ import annotations

from tracejoin.cli.demo.dynamo_formats import DynamoSample

from tracejoin.collector.lookup import lookup
from tracejoin.collector.requests import build_requests
from tracejoin.collector.store import open_store


def _store_of(tmp_path, tj, sample: DynamoSample):
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs").code == 0


def _built(db) -> list[tuple[str, int]]:
    """Each request of the whole build that reached an entry server: a trace id of its records,
    and how many records it holds."""
    with open_store(db, read_only=True) as store:
        build_requests(store)
        return store.con.execute("""
            SELECT min(r.trace_id), count(*) FROM request_members m JOIN records r USING (record_id)
            GROUP BY m.request_id HAVING bool_or(r.entry) ORDER BY 1""").fetchall()


def _looked_up(db, query: str) -> list[int]:
    """The record counts of the requests `lookup` shows for the query."""
    with open_store(db, read_only=True) as store:
        return sorted(len(q["records"]) for q in lookup(store, query)["requests"])


def test_sibling_requests_sharing_a_key_under_one_client_span_stay_apart_in_both(tj, tmp_path, db):
    """A client that sends two requests with one chosen id under one span of its own: the key
    collided within one trace, so it joins neither there (the requests build used to join it
    within any trace and listed one request where lookup showed two)."""
    sample = DynamoSample()
    shared_id, client_span, trace = "0b7c6f1e-1d2a-4c3b-9e8f-7a6b5c4d3e2f", "00f067aa0ba902b7", None
    for i, label in enumerate(("first", "second")):
        req = sample.add(offset_ms=4 * i, request_id=shared_id, x_request_id=label,
                         client_parent_span=client_span, trace_id=trace)
        trace = req.trace_id
    sample.add(offset_ms=9)  # a request of its own beside them
    _store_of(tmp_path, tj, sample)

    rows = tj("requests", "--json").json()
    assert sorted(r["x_request_ids"] for r in rows if r["x_request_ids"]) == [["first"], ["second"]]
    assert all(r["collided"] for r in rows if r["x_request_ids"])

    result = tj("lookup", shared_id, "--json").json()
    assert sorted(q["ids"]["x_request_id"] for q in result["requests"]) == [["first"], ["second"]]
    assert any("collision" in w and shared_id in w for w in result["warnings"])
    by_label = {r["x_request_ids"][0]: r["records"] for r in rows if r["x_request_ids"]}
    for label in ("first", "second"):
        assert _looked_up(db, label) == [by_label[label]]


def test_every_request_built_is_the_request_its_ids_look_up(tj, tmp_path, db):
    sample = DynamoSample()
    ok = sample.add(x_request_id="a")
    sample.add(offset_ms=10, endpoint="completions", stream=False)
    sample.add(offset_ms=20, status="error")
    sample.add(offset_ms=30, request_id=ok.request_id)  # a collision with the first, in another trace
    for i in range(3):
        sample.add(offset_ms=40 + i, x_request_id="batch")
    _store_of(tmp_path, tj, sample)

    built = _built(db)
    assert len(built) == 7
    for trace_id, records in built:
        assert _looked_up(db, trace_id) == [records], trace_id


def test_a_record_that_carries_only_a_collided_key_is_shown_in_the_requests_its_time_falls_in(tj, tmp_path):
    """Dynamo's request-trace rows carry the internal id and no trace: with a client-chosen id two
    overlapping requests share, such a row is shown in both, marked ambiguous; the row of a third
    request with the same id, seconds later, only in its own."""
    sample = DynamoSample()
    shared = "0b7c6f1e-1d2a-4c3b-9e8f-7a6b5c4d3e2f"
    for offset_ms, label in ((0, "first"), (4, "second"), (5000, "third")):
        sample.add(request_id=shared, offset_ms=offset_ms, x_request_id=label)
    _store_of(tmp_path, tj, sample)

    result = tj("lookup", shared, "--json").json()
    by_label = {q["ids"]["x_request_id"][0]: q["records"] for q in result["requests"]}
    assert sorted(by_label) == ["first", "second", "third"]
    ambiguous = {label: [(r["time"], r["source"]) for r in records if r.get("ambiguous")]
                 for label, records in by_label.items()}
    assert ambiguous["third"] == []
    assert ambiguous["first"] and ambiguous["first"] == ambiguous["second"]
    assert {source for _, source in ambiguous["first"]} == {"dynamo_request_trace"}
    third_rows = [r for r in by_label["third"] if r["source"] == "dynamo_request_trace"]
    assert len(third_rows) == 1, "the third request's own row, placed by its time"
    assert any("marked ambiguous" in w for w in result["warnings"])
