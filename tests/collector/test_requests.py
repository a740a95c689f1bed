"""`trace-join requests`: every request the store holds, listed and filtered."""

from __future__ import annotations

import pytest

from tracejoin.cli.demo.dynamo_formats import DynamoSample

from ..conftest import assert_one_clear_line
from .collector_process import query


@pytest.mark.parametrize("db", ["duckdb", "chdb"], indirect=True)
def test_list_filter_and_order(tj, tmp_path):
    sample = DynamoSample()
    ok = sample.add(x_request_id="a")
    comp = sample.add(offset_ms=10, endpoint="completions", stream=False)
    failed = sample.add(offset_ms=20, status="error")
    shared = sample.add(offset_ms=30, request_id=ok.request_id)  # a collision with the first
    sample.write(tmp_path / "logs")
    assert tj("ingest", tmp_path / "logs").code == 0

    rows = tj("requests", "--json").json()
    assert len(rows) == 4, "every request that reached the frontend, the collided pair apart"
    assert [r["start"] for r in rows] == sorted((r["start"] for r in rows), reverse=True)
    by_trace = {r["trace_ids"][0]: r for r in rows}
    assert by_trace[failed.trace_id]["http_status"] == 500 and by_trace[failed.trace_id]["error"]
    assert by_trace[ok.trace_id]["http_status"] == 200 and not by_trace[ok.trace_id]["error"]
    assert by_trace[ok.trace_id]["collided"] and by_trace[shared.trace_id]["collided"]
    assert not by_trace[comp.trace_id]["collided"]
    assert by_trace[comp.trace_id]["route"] == "/v1/completions"
    assert by_trace[ok.trace_id]["ttft_ms"] == 58.21
    assert sorted(by_trace[ok.trace_id]["roles"]) == ["decode", "frontend", "prefill"]
    assert f"prefill:{sample.prefill_instance}" in by_trace[ok.trace_id]["workers"]

    errors = tj("requests", "--errors", "--json").json()
    assert [r["trace_ids"] for r in errors] == [[failed.trace_id]]
    assert [r["trace_ids"] for r in tj("requests", "--route", "/v1/completions", "--json").json()] == [[comp.trace_id]]
    assert len(tj("requests", "--worker", sample.decode_instance, "--json").json()) == 4
    assert tj("requests", "--since", "2030-01-01T00:00:00Z").code == 1
    assert len(tj("requests", "--limit", "2", "--json").json()) == 2

    text = tj("requests", "--errors")
    assert text.code == 0 and "500" in text.out and failed.request_id in text.out


def test_usage_errors_are_one_line(tj):
    for args in (("lookup",), ("requests", "--bogus"), ("nosuch",)):
        run = tj(*args)
        assert run.code == 2
        assert_one_clear_line(run)


def test_requests_summarized_a_slice_at_a_time_are_the_same(tmp_path, monkeypatch):
    # A large store's requests are summarized a slice of record ids at a time, to stay within the
    # memory limit; a request must come out the same whichever slices it falls across.
    from tracejoin.collector import requests
    from tracejoin.collector.ingest import Ingester
    from tracejoin.collector.store import open_store

    sample = DynamoSample()
    for n in range(6):
        sample.add(offset_ms=10 * n, x_request_id=f"x{n}", status="error" if n == 3 else "ok")
    sample.write(tmp_path / "logs")
    with open_store(tmp_path / "store.duckdb") as store:
        Ingester(store).ingest_paths([str(tmp_path / "logs")])
        summaries = {}
        for slice_records in (requests.SUMMARY_SLICE_RECORDS, 7, 1):
            monkeypatch.setattr(requests, "SUMMARY_SLICE_RECORDS", slice_records)
            requests.persist_requests(store)
            summaries[slice_records] = store.con.execute("SELECT * FROM requests ORDER BY request_id").fetchall()
        served = store.con.execute("SELECT count(*) FROM requests WHERE has_entry").fetchone()[0]
    whole = summaries[requests.SUMMARY_SLICE_RECORDS]
    assert served == 6
    assert summaries[7] == whole and summaries[1] == whole


def _mixed_sources(folder):
    """Requests that join every way: Dynamo's logs, spans and request-trace rows (collided keys
    included), trace-join's own lines with a retried disagg id and engine ids two workers share,
    a collision only another request's ids lead to, and a TensorRT-LLM perf file naming a worker
    the middleware names otherwise (its format reproduced from `tensorrt_llm/serve/perf_metrics.py`:
    TensorRT-LLM cannot run here)."""
    import orjson

    from .test_tracejoin_jsonl import TRACE, line, write

    sample = DynamoSample()
    first = sample.add(x_request_id="a")
    for n in range(1, 6):
        sample.add(offset_ms=10 * n, status="error" if n == 3 else "ok")
    sample.add(offset_ms=70, request_id=first.request_id)  # a collision with the first
    sample.write(folder / "dynamo")
    common = dict(trace_id=TRACE, internal_id="0d6c7f0e-6a55-4c8e-9f60-1b2a3c4d5e6f")
    write(folder / "router.jsonl",
          line("2026-11-30T10:40:30.000000Z", "request.start", role="router", worker="gw:8000", span_id="1111111111111111", **common),
          line("2026-11-30T10:40:30.001000Z", "disagg id assigned", role="router", worker="gw:8000",
               span_id="1111111111111111", disagg_request_id="1099511627799", **common),
          line("2026-11-30T10:40:30.300000Z", "request.end", role="router", worker="gw:8000", span_id="1111111111111111",
               status=200, reply_id="resp_1099511627800_0123456789abcdef", disagg_request_id="1099511627800", **common))
    write(folder / "ctx-a.jsonl", line("2026-11-30T10:40:30.060000Z", "request.end", role="ctx", worker="ctx-a:8001",
                                       disagg_request_id="1099511627800", engine_request_id="7", status=200))
    write(folder / "ctx-b.jsonl", line("2026-11-30T10:40:31.000000Z", "request.end", role="ctx", worker="ctx-b:8001",
                                       disagg_request_id="1099511627999", engine_request_id="7", status=200))
    write(folder / "gen.jsonl", line(
        "2026-11-30T10:40:30.000000Z", "request.end", role="gen", worker="gpu-2:8002", process="gpu-2:4242",
        disagg_request_id="1099511627800", engine_request_id="3", engine_worker="gpu-2:4242", status=200))
    # Two requests whose entries carry one reply id (a collision), and a later line that reaches
    # the first by its disagg id alone: updating that request must still see the collision.
    write(folder / "router-2.jsonl", *(
        line(f"2026-11-30T10:41:0{n}.000000Z", "request.start", role="router", worker="gw:8000",
             trace_id=f"{n}" * 32, span_id=f"{n}" * 16, internal_id=f"in-{n}", disagg_request_id=f"109951162790{n}",
             reply_id="resp_shared") for n in (1, 2)))
    write(folder / "zz-late.jsonl", line("2026-11-30T10:41:01.100000Z", "request.end", role="ctx",
                                         worker="ctx-c:8001", disagg_request_id="1099511627901", status=200))
    (folder / "perf_metrics-server-gpu-2-4242-20261130T104000Z.jsonl").write_bytes(orjson.dumps({
        "request_id": 3, "perf_metrics": {"timing_metrics": {"arrival_time": 100.0, "first_token_time": 100.04,
                                                             "last_token_time": 100.5}},
        "disagg_request_id": 1099511627800, "ctx_request_id": 9, "status": "complete"}) + b"\n")
    return sorted(p for p in folder.rglob("*") if p.is_file())


def test_requests_updated_as_records_arrive_are_those_of_one_build(tmp_path, monkeypatch):
    # A reader brings the requests tables up to date a step of records at a time, building again
    # only the requests the step's records reach; whatever the order the files come in, however
    # many come between two updates and whatever the step, the tables must end as one build of the
    # whole store makes them.
    from tracejoin.collector import requests
    from tracejoin.collector.ingest import Ingester
    from tracejoin.collector.store import open_store

    files = _mixed_sources(tmp_path / "logs")
    # small updates on all of DuckDB's threads, the whole build on one, as in a large store
    monkeypatch.setattr(requests, "PARALLEL_BUILD_RECORDS", 20)
    tables = ("SELECT * FROM request_records ORDER BY record_id", "SELECT * FROM requests ORDER BY request_id")
    for name, order in (("in order", files), ("reversed", files[::-1])):
        for step in (3, 17):
            with open_store(tmp_path / f"{name}-{step}.duckdb") as store:
                ingester = Ingester(store, batch_records=5)
                for i, path in enumerate(order):
                    ingester.ingest_paths([str(path)])
                    if i % 3 == 1:
                        requests.update_requests(store, step=step)
                requests.update_requests(store, step=step)
                updated = [store.con.execute(q).fetchall() for q in tables]
                requests.persist_requests(store)  # the whole store, from nothing
                whole = [store.con.execute(q).fetchall() for q in tables]
                assert updated == whole, (name, step)
                assert len(whole[1]) >= 10 and any(row for row in whole[1] if row[-3])  # requests, a collided one


def test_a_step_beyond_the_memory_budget_is_halved_and_ends_as_one_build(tmp_path, monkeypatch):
    """A step whose requests do not fit DuckDB's memory budget is built again in halves, until
    they fit. DuckDB's out-of-memory error is raised here for any build of over 40 records (a real
    one needs a store of millions of records, as the lookup benchmark's, at the default budget)."""
    from tracejoin.collector import requests
    from tracejoin.collector.duckdb_engine import duckdb
    from tracejoin.collector.ingest import Ingester
    from tracejoin.collector.store import open_store

    build, builds = requests._build, []

    def within_a_budget(con):
        scope = con.execute("SELECT count(*) FROM scope_records").fetchone()[0]
        builds.append(scope)
        if scope > 40:
            raise duckdb.OutOfMemoryException("Out of Memory Error: failed to pin block of size 256.0 KiB")
        build(con)

    monkeypatch.setattr(requests, "MIN_STEP_RECORDS", 1)
    tables = ("SELECT * FROM request_records ORDER BY record_id", "SELECT * FROM requests ORDER BY request_id")
    with open_store(tmp_path / "store.duckdb") as store:
        Ingester(store).ingest_paths([str(p) for p in _mixed_sources(tmp_path / "logs")])
        with monkeypatch.context() as m:
            m.setattr(requests, "_build", within_a_budget)
            requests.update_requests(store, step=64)
        halved = [store.con.execute(q).fetchall() for q in tables]
        requests.persist_requests(store)
        whole = [store.con.execute(q).fetchall() for q in tables]
    assert builds[0] > 40 and max(builds[1:]) < builds[0]  # the first step failed and was halved
    assert halved == whole


def test_reads_use_the_stored_tables_when_up_to_date_and_build_otherwise(tmp_path):
    # `requests` and `coverage` read the stored tables instead of building every request again
    # (minutes on a large store): on a store open for writing they bring them up to date first;
    # on a read-only one whose tables lag they build them for themselves; both give the same answers.
    from tracejoin.collector.coverage import coverage
    from tracejoin.collector.ingest import Ingester
    from tracejoin.collector.request_list import RequestFilter, list_requests
    from tracejoin.collector.store import open_store

    def summary_kind(store):
        return store.con.execute("SELECT table_type FROM information_schema.tables "
                                 "WHERE table_name = 'request_summary'").fetchone()[0]

    files = [str(p) for p in _mixed_sources(tmp_path / "logs")]
    db = tmp_path / "store.duckdb"
    with open_store(db) as store:
        Ingester(store).ingest_paths(files[:-2])
        first = list_requests(store, RequestFilter(limit=100))
        assert summary_kind(store) == "VIEW"  # of the stored table, brought up to date first
        Ingester(store).ingest_paths(files[-2:])  # the tables are behind now
    with open_store(db, read_only=True) as store:
        behind = list_requests(store, RequestFilter(limit=100)), coverage(store)
        assert summary_kind(store) == "LOCAL TEMPORARY"  # built in this connection
    with open_store(db) as store:
        current = list_requests(store, RequestFilter(limit=100)), coverage(store)
        assert summary_kind(store) == "VIEW"
    assert current == behind and len(current[0]) > len(first) >= 5


def test_ingest_leaves_the_requests_tables_to_their_first_reader(tj, tmp_path, db):
    files = _mixed_sources(tmp_path / "logs")
    assert tj("ingest", *files).code == 0
    state = "SELECT count(*) FROM meta WHERE key = 'requests_state'"
    assert query(db, state) == [(0,)]
    listed = tj("requests", "--json", "--limit", 100)
    assert listed.code == 0 and len(listed.json()) >= 5
    assert query(db, state) == [(1,)]  # kept for the next reader
    assert tj("coverage", "--json").json()["replies"] == len(listed.json())
