"""`trace-join coverage`: replies joined to both workers, to one, and orphans no reply reaches."""

from __future__ import annotations

import orjson
import pytest


def rec(ts, event, role, worker, **ids):
    return orjson.dumps({"schema": "tracejoin.log.v1", "ts": f"2026-11-30T10:40:{ts:09.6f}Z", "level": "info",
                         "event": event, "role": role, "worker": worker, **ids})


@pytest.mark.parametrize("db", ["duckdb", "chdb"], indirect=True)
def test_coverage_counts_joins_and_orphans(tj, tmp_path):
    router, ctx, gen = "gw:8000", "ctx-0:8001", "gen-0:8002"
    lines = {
        "router.jsonl": [
            rec(1, "request.start", "router", router, internal_id="r1", reply_id="resp_1099511627776_00000000000000aa",
                trace_id="1" * 32, span_id="1" * 16),
            rec(2, "request.start", "router", router, internal_id="r2", disagg_request_id="1099511627777",
                trace_id="2" * 32, span_id="2" * 16),
            rec(3, "request.start", "router", router, internal_id="r3", trace_id="3" * 32, span_id="3" * 16),
            rec(4, "startup complete", "router", router),
        ],
        "ctx.jsonl": [
            rec(1.1, "request.end", "ctx", ctx, disagg_request_id="1099511627776", engine_request_id="1"),
            rec(2.1, "request.end", "ctx", ctx, disagg_request_id="1099511627777", engine_request_id="2"),
            rec(5.0, "model loaded", "ctx", ctx),
        ],
        "gen.jsonl": [
            rec(1.2, "request.end", "gen", gen, disagg_request_id="1099511627776", engine_request_id="1"),
            # A generation request no reply reaches: its disagg id appears nowhere else.
            rec(6.0, "request.end", "gen", gen, disagg_request_id="1099511627999", engine_request_id="9"),
        ],
    }
    for name, content in lines.items():
        (tmp_path / name).write_bytes(b"\n".join(content) + b"\n")
    assert tj("ingest", *(tmp_path / n for n in lines)).code == 0

    result = tj("coverage", "--json").json()
    assert result["replies"] == 3
    assert result["joined"] == {"both_workers": 1, "one_worker": 1, "aggregated_worker": 0, "no_worker": 1}
    assert result["orphans"] == {"requests": 1, "records": 1}
    # every record in one part, the parts summing to the records: the two startup lines are about no request
    assert result["by_source"]["tracejoin_jsonl"] == {"records": 9, "in_replies": 6, "orphan_records": 1,
                                                      "unanswered_records": 0, "no_request_records": 2}
    by_worker = {w["worker"]: w for w in result["by_worker"]}
    for counts in [*result["by_source"].values(), *by_worker.values()]:
        assert counts["records"] == sum(counts[k] for k in ("in_replies", "orphan_records", "unanswered_records",
                                                             "no_request_records")), counts
    assert by_worker[gen]["replies"] == 1 and by_worker[gen]["orphan_records"] == 1
    assert by_worker[ctx]["replies"] == 2 and by_worker[ctx]["orphan_records"] == 0
    assert by_worker[router]["replies"] == 3

    text = tj("coverage")
    assert text.code == 0
    assert "replies seen: 3" in text.out and "1 engine-side records in 1 groups" in text.out
