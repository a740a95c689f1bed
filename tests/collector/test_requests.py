"""`trace-join requests`: every request the store holds, listed and filtered."""

from __future__ import annotations

from tracejoin.collector.dynamo_sample import DynamoSample

from ..conftest import assert_one_clear_line


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
    assert by_trace[failed.trace_id]["http_status"] == "500" and by_trace[failed.trace_id]["error"]
    assert by_trace[ok.trace_id]["http_status"] == "200" and not by_trace[ok.trace_id]["error"]
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
